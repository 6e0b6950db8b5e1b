// Everyday masks on mha's online softmax (FlexAttention's examples): a
// prefix-LM with a runtime prefix length, a sliding window of 256 keys, a
// document mask and chunked (local) attention with a runtime chunk size. Each classifies its blocks from block bounds
// (analysis/MaskBounds.h), without evaluating the mask per element.
#include "Examples.h"

#include "attn/dsl/Library.h"

namespace attn::examples {
using namespace dsl;

namespace {
/// mha (softmax, 1/sqrt(D) scale, online softmax) under another mask.
AttentionDef maskedMha(const char *Name, const char *Description) {
  AttentionDef def = mha();
  def.name = Name;
  def.description = Description;
  return def;
}
} // namespace

AttentionDef mhaPrefixLm() {
  AttentionDef def = maskedMha(
      "mha_prefix_lm",
      "softmax attention, prefix-LM: bidirectional over the first P keys "
      "(runtime scalar), causal after");
  // The check and the GPU tests use the middle of the range: P = 64.
  def.inputs.declare("prefix_len", InputShape::Scalar, InputType::I32, 0.0,
                     128.0);
  def.mask_mod = masks::prefixLm("prefix_len");
  return def;
}

AttentionDef mhaSlidingWindow() {
  AttentionDef def = maskedMha(
      "mha_sliding_window",
      "softmax attention, causal within a sliding window of 256 keys");
  def.mask_mod = masks::slidingWindow(256);
  return def;
}

AttentionDef mhaDocument() {
  AttentionDef def = maskedMha(
      "mha_document",
      "softmax attention, causal within documents (per-row and per-key "
      "document ids)");
  // Ids are compared for equality: independent uniform draws would never
  // match, so `attnc check` draws them all equal (the mask is then causal);
  // the GPU tests give them as sorted runs (documents).
  def.inputs.declare("q_doc", InputShape::PerRow, 0.0, 0.0)
      .declare("k_doc", InputShape::PerKey, 0.0, 0.0);
  def.mask_mod = masks::document("q_doc", "k_doc");
  return def;
}

AttentionDef mhaChunked() {
  AttentionDef def = maskedMha(
      "mha_chunked",
      "softmax attention, causal within chunks of C tokens (runtime int32 "
      "scalar)");
  // The GPU tests' first call uses the middle of the range (C = 64), later
  // calls 16, 48 and 80: chunks that align with the tiles and ones that
  // do not.
  def.inputs.declare("chunk", InputShape::Scalar, InputType::I32, 16.0,
                     112.0);
  def.mask_mod = masks::chunked("chunk");
  return def;
}

} // namespace attn::examples
