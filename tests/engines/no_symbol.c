/* no_symbol.c — a shared object that is not an engine plugin: it exports
 * no descriptor, so the registry must refuse it and say so. */
__attribute__((visibility("default"))) int attnserve_engine_plugin_misspelt = 1;
