// What a plugin of C++ definitions defines (built with attnc_add_plugin,
// cmake/AttncPlugin.cmake; loaded by attnc_plugin_load / attnc.load_plugin).
#ifndef ATTNC_PLUGIN_H
#define ATTNC_PLUGIN_H

#ifdef __cplusplus
#include "attn/dsl/Registry.h"

namespace attnc_plugin {
/// Adds the plugin's definitions to \p R. Called once when the plugin is
/// loaded; each definition is traced there and handed over as its IR graph
/// (so a plugin and the library that loads it share no C++ object).
void registerDefinitions(attn::dsl::Registry &R);
} // namespace attnc_plugin
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The one function a plugin exports (cmake/AttncPluginEntry.cpp defines
 * it): calls add once per definition with its traced graph as IR JSON, or
 * fail once with a message; returns 0 on success. The strings are valid
 * only during the call. */
#define ATTNC_PLUGIN_ENTRY "attnc_plugin_graphs_v1"
typedef void (*attnc_plugin_add_fn)(void *ctx, const char *graph_json);
typedef void (*attnc_plugin_fail_fn)(void *ctx, const char *message);
typedef int (*attnc_plugin_entry_fn)(void *ctx, attnc_plugin_add_fn add,
                                     attnc_plugin_fail_fn fail);

#ifdef __cplusplus
}
#endif

#endif
