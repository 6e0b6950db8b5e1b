// The definitions the GPU tests and bench tools run: the registered
// examples, and a few masks made for them (a sliding window, rows and a
// whole query block without a key, softmax without a mask).
#ifndef ATTNC_TESTS_GPU_TESTDEFINITIONS_H
#define ATTNC_TESTS_GPU_TESTDEFINITIONS_H

#include "Examples.h"
#include "attn/Error.h"
#include "attn/dsl/Registry.h"
#include "attn/ir/Graph.h"
#include "attn/reference/Tensor.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

namespace attn::gputest {

/// A registered example by name, or one of mha_window (causal with a
/// 100-key sliding window), mha_emptyrows (rows 0-4 see no key),
/// mha_emptyblock (rows 0-99 see no key: whole query blocks), mha_full
/// (mha without its mask), sigmoid_full and relu_full (sigmoid_attn and
/// relu_attn without theirs), mha_row_scale (causal softmax whose scores
/// are scaled per row, a per_row input, and biased per key token, a
/// per_key_token one: score inputs of the token shapes), mha_alibi (causal
/// softmax with ALiBi: fixed per-head slopes, an input without a gradient)
/// and mha_softcap30 (causal softmax with a fixed soft cap,
/// 30·tanh(s/(30·sqrt(D)))): the score_mod variants FlexAttention's
/// examples train with, which attnc_bench_bwd's fwdbwd mode times.
/// UserError (from the registry) for other names.
inline dsl::AttentionDef makeDefinition(const std::string &Name) {
  dsl::Registry R;
  examples::registerExamples(R);
  if (Name == "mha_window") { // causal with a 100-key sliding window
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                    dsl::SymbolScalar k) { return (q >= k) & (q - k < 100); };
    return D;
  }
  if (Name == "mha_emptyrows") { // the first rows see no key at all
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                    dsl::SymbolScalar k) { return k + 5 <= q; };
    return D;
  }
  if (Name == "mha_emptyblock") { // no key for rows 0-99: whole query blocks
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                    dsl::SymbolScalar k) { return k + 100 <= q; };
    return D;
  }
  if (Name == "mha_full") { // softmax without a mask
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.mask_mod = {};
    return D;
  }
  if (Name == "sigmoid_full" || Name == "relu_full") { // their causal mask off
    dsl::AttentionDef D = Name == "sigmoid_full" ? examples::sigmoidAttn()
                                                 : examples::reluAttn();
    D.name = Name;
    D.mask_mod = {};
    return D;
  }
  if (Name == "mha_row_scale") {
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.inputs.declare("row_scale", dsl::InputShape::PerRow, 0.5, 1.5)
        .declare("key_bias", dsl::InputShape::PerKeyToken, -1.0, 1.0);
    D.score_mod = [](dsl::SymbolScalar s, const dsl::CustomInputs &in,
                     dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
                     dsl::SymbolScalar) {
      return s * in.head_dim().rsqrt() * in["row_scale"] + in["key_bias"];
    };
    return D;
  }
  if (Name == "mha_alibi") {
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    // Fixed slopes: not learned, so no gradient (alibi_learnable learns
    // them). The range holds the usual 2^(-8h/H) slopes of H >= 16 heads.
    D.inputs.declare("slopes", dsl::InputShape::PerHead, 0.0, 0.5);
    D.score_mod = [](dsl::SymbolScalar s, const dsl::CustomInputs &in,
                     dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                     dsl::SymbolScalar k) {
      // One statement per traced call: the IR's numbering must not follow
      // the compiler's order of evaluation.
      dsl::SymbolScalar Scaled = s * in.head_dim().rsqrt();
      dsl::SymbolScalar Distance = k - q;
      dsl::SymbolScalar Bias = in["slopes"] * Distance;
      return Scaled + Bias;
    };
    return D;
  }
  if (Name == "mha_softcap30") {
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.score_mod = [](dsl::SymbolScalar s, const dsl::CustomInputs &in,
                     dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
                     dsl::SymbolScalar) {
      dsl::SymbolScalar Scaled = s * in.head_dim().rsqrt();
      dsl::SymbolScalar Capped = (Scaled * (1.0 / 30.0)).tanh();
      return Capped * 30.0;
    };
    return D;
  }
  return static_cast<const dsl::AttentionDef &>(R.get(Name));
}

/// The document of token \p s in batch \p b: sorted runs (documents) of
/// lengths 1 to 250 whose order differs per batch. Every per-row and per-key
/// input of the GPU tests holds these ids (the same for every head), so
/// that a document mask's q and k ids match inside a document and blocks
/// inside one document, across two and across many occur.
inline double documentId(int64_t b, int64_t s) {
  static const int64_t Lengths[] = {1, 37, 100, 13, 250, 64, 5, 180};
  int64_t Start = 0;
  for (int64_t d = 0;; ++d) {
    Start += Lengths[(d + b) % 8];
    if (s < Start)
      return double(d);
  }
}

/// The reference value of a per-row, per-key or per-token input:
/// documentId over the rows (queries) or keys, [B, H, S] or, per token,
/// [B, S]; InternalError for other classes. \p Shift moves every batch to
/// another order of document lengths (other ids on a later call). With
/// \p Sorted false the ids are documentId mod 3: runs 0, 1, 2, 0, 1, ...,
/// not sorted, equal ids in runs apart (no kernel may assume ids ascend).
inline reference::Tensor tokenInput(const ir::InputDecl &D, int64_t B,
                                    int64_t H, int64_t Sq, int64_t Skv,
                                    int64_t Shift = 0, bool Sorted = true) {
  auto Id = [&](int64_t b, int64_t s) {
    double X = documentId(b, s);
    return Sorted ? X : std::fmod(X, 3.0);
  };
  if (D.Shape == ir::InputShape::PerQueryToken ||
      D.Shape == ir::InputShape::PerKeyToken) {
    int64_t S = D.Shape == ir::InputShape::PerQueryToken ? Sq : Skv;
    reference::Tensor T({B, S});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        T.at({b, s}) = Id(b + Shift, s);
    return T;
  }
  if (D.Shape != ir::InputShape::PerRow && D.Shape != ir::InputShape::PerKey)
    throw InternalError("gpu test: input '" + D.Name +
                        "' is neither per row, per key nor per token");
  int64_t S = D.Shape == ir::InputShape::PerRow ? Sq : Skv;
  reference::Tensor T({B, H, S});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        T.at({b, h, s}) = Id(b + Shift, s);
  return T;
}

/// A per-head input ([H], ALiBi's slopes): values drawn uniformly over the
/// declaration's sample range by \p Rng, rounded to the fp32 they travel as.
inline reference::Tensor perHeadInput(const ir::InputDecl &D, int64_t H,
                                      std::mt19937_64 &Rng) {
  reference::Tensor T({H});
  std::uniform_real_distribution<double> U(D.SampleLo, D.SampleHi);
  for (double &X : T.Data)
    X = double(float(U(Rng)));
  return T;
}

} // namespace attn::gputest

#endif
