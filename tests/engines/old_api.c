/* old_api.c — a plugin built against another engine API version: the
 * registry must refuse it before reading its table. */
#include "engines/engine.h"

__attribute__((visibility("default"))) const engine_plugin attnserve_engine_plugin = {
    .api_version = ENGINE_API_VERSION + 1000,
    .iface = NULL,
};
