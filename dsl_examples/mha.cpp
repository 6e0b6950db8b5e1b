// mha: causal softmax attention with the online-softmax algorithm.
#include "Examples.h"

#include "attn/dsl/Library.h"

namespace attn::examples {
using namespace dsl;

AttentionDef mha() {
  AttentionDef def("mha");
  def.description = "softmax attention, causal (online softmax)";
  // score / sqrt(D), q_idx >= kv_idx, and the FlashAttention online softmax
  // with its written backward: docs/dsl.md's walk-through spells them out.
  def.score_mod = score_mods::scaled();
  def.mask_mod = masks::causal();
  def.online_func = onlineSoftmax();
  return def;
}

} // namespace attn::examples
