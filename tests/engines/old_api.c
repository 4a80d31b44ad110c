/* old_api.c — a plugin built against another engine API version (1, the
 * contract before token types and classifier outputs): the registry must
 * refuse it before reading its table. */
#include "engines/engine.h"

__attribute__((visibility("default"))) const engine_plugin attnserve_engine_plugin = {
    .api_version = 1,
    .iface = NULL,
};
