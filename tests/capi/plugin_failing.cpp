// A plugin whose registration fails (a definition registered twice): the
// loader reports the plugin's message.
#include "attnc/plugin.h"

void attnc_plugin::registerDefinitions(attn::dsl::Registry &R) {
  R.add(attn::dsl::LinearAttentionDef("twice"));
  R.add(attn::dsl::LinearAttentionDef("twice"));
}
