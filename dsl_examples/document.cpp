// mha_document_ids: causal softmax attention within documents, the ids
// given per token as int32 (a packed batch of several documents).
#include "Examples.h"

namespace attn::examples {
using namespace dsl;

AttentionDef mhaDocumentIds() {
  AttentionDef def("mha_document_ids");
  def.description = "softmax attention, causal within documents (int32 "
                    "per-token document ids)";
  // One [B, S] buffer may serve both sides; they are two inputs so that a
  // query and a key sequence may differ (and the ids are compared as
  // integers, never through float).
  def.inputs.declare("doc_q", InputShape::PerQueryToken, InputType::I32);
  def.inputs.declare("doc_k", InputShape::PerKeyToken, InputType::I32);
  def.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar, SymbolScalar) {
    return score * in.head_dim().rsqrt();
  };
  def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx, const CustomInputs &in) {
    return (q_idx >= kv_idx) & (in["doc_q"] == in["doc_k"]);
  };
  def.online_func = onlineSoftmaxNoBackward();
  return def;
}

} // namespace attn::examples
