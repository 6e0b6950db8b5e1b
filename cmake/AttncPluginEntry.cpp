// The function every plugin exports: its definitions, traced here by the
// plugin's own copy of the frontend, handed over as IR JSON.
#include "attnc/plugin.h"

#include "attn/dsl/Trace.h"
#include "attn/ir/Serialize.h"

#include <exception>
#include <string>

extern "C" __attribute__((visibility("default"))) int
attnc_plugin_graphs_v1(void *ctx, attnc_plugin_add_fn add,
                       attnc_plugin_fail_fn fail) {
  // No exception may leave the plugin: the loader is C.
  try {
    attn::dsl::Registry R;
    attnc_plugin::registerDefinitions(R);
    for (const attn::dsl::DefinitionBase *D : R.all())
      add(ctx, attn::ir::saveJSON(*attn::dsl::trace(*D)).c_str());
    return 0;
  } catch (const std::exception &E) {
    fail(ctx, E.what());
  } catch (...) {
    fail(ctx, "an unknown exception");
  }
  return 1;
}
