// A consumer's own attention variant: softcapped softmax attention under a
// sliding window, built from attnc's DSL building blocks.
#include "attn/dsl/Definition.h"
#include "attn/dsl/Library.h"
#include "attn/dsl/Registry.h"

using namespace attn::dsl;

AttentionDef softcapWindow() {
  AttentionDef def("softcap_window");
  def.description = "softcapped softmax attention in a 128-key window";
  def.score_mod =
      score_mods::then(score_mods::scaled(), score_mods::softcap(20.0));
  def.mask_mod = masks::slidingWindow(128);
  def.online_func = onlineSoftmax();
  return def;
}

void registerMyDefinitions(Registry &R) { R.add(softcapWindow()); }
