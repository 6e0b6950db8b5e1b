// mha_document_ids: causal softmax attention within documents, the ids
// given per token as int32 (a packed batch of several documents).
#include "Examples.h"

#include "attn/dsl/Library.h"

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
  def.score_mod = score_mods::scaled();
  def.mask_mod = masks::document("doc_q", "doc_k");
  def.online_func = onlineSoftmax(/*WrittenBackward=*/false);
  return def;
}

} // namespace attn::examples
