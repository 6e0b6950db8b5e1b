// The example definitions shipped with attnc, one file each.
#ifndef ATTN_DSL_EXAMPLES_H
#define ATTN_DSL_EXAMPLES_H

#include "attn/dsl/Definition.h"
#include "attn/dsl/Registry.h"

#include <memory>

namespace attn::examples {

dsl::AttentionDef mha();              ///< softmax attention, causal
dsl::AttentionDef sigmoidAttn();      ///< sigmoid attention with a bias scalar
dsl::AttentionDef reluAttn();         ///< ReLU attention
dsl::AttentionDef retention();        ///< RetNet, parallel form
/// retention with its own combine (OnlineFunc::combine): decode splits it.
dsl::AttentionDef retentionCombine();
dsl::LinearAttentionDef mamba2();     ///< Mamba2 SSD
dsl::LinearAttentionDef simpleGla();  ///< gated retention (simple GLA)
dsl::LinearAttentionDef retentionLinear(); ///< RetNet, recurrent form

/// Everyday masks on mha's softmax (masks.cpp), classified from block
/// bounds: a prefix-LM with a runtime prefix length, a 256-key sliding
/// window, causal within documents given by per-row/per-key ids, and causal
/// within chunks of a runtime int32 size (`floordiv(q_idx, C) ==
/// floordiv(kv_idx, C)`).
dsl::AttentionDef mhaPrefixLm();      ///< mha_prefix_lm
dsl::AttentionDef mhaSlidingWindow(); ///< mha_sliding_window
dsl::AttentionDef mhaDocument();      ///< mha_document
dsl::AttentionDef mhaChunked();       ///< mha_chunked

/// Learnable custom inputs and a derived backward (learnable.cpp).
dsl::AttentionDef alibiLearnable();   ///< ALiBi with learned slopes and bias
dsl::AttentionDef softcapLearnable(); ///< softcap with a learned cap

/// Causal softmax attention within documents given by int32 per-token ids
/// (document.cpp): `(q_idx >= kv_idx) & (doc_q == doc_k)`.
dsl::AttentionDef mhaDocumentIds();

/// Registers every example above under its name.
void registerExamples(dsl::Registry &R);

} // namespace attn::examples

#endif
