// The cases of gpu_backward_test: the definitions (examples and a few
// masks made for the test), the quick set and the full matrix, each case
// in the default configuration and in the other dQ mode.
#ifndef ATTNC_TESTS_GPU_BACKWARDCASES_H
#define ATTNC_TESTS_GPU_BACKWARDCASES_H

#include "Examples.h"
#include "TestDefinitions.h"
#include "attn/Pipeline.h"
#include "attn/dsl/Problem.h"
#include "attn/dsl/Registry.h"

#include <string>
#include <vector>

namespace attn::gputest {

struct Case {
  std::string Def;
  DType Dt;
  int D, DV;
  int B, H, Hkv, Sq, Skv;
  Layout L;
  std::string Config;
  /// A case with the inputs (seed) and therefore the references of case
  /// TwinOf, in another configuration; -1: none.
  int TwinOf = -1;
};

inline const char *const Definitions[] = {
    "mha",           "sigmoid_attn",       "relu_attn",
    "retention",     "mha_window",         "mha_emptyrows",
    "alibi_learnable", "softcap_learnable", "mha_prefix_lm",
    "mha_sliding_window", "mha_document"};

/// The fused dQ mode's tiles for a case of the default configuration.
inline std::string fusedConfig(int DV) {
  return DV > 128 ? "kv32x128w8.fused.s2" : "kv64x128w8.fused.s2";
}

/// The other mode than the default's (the GPU's arch: sm_80 or sm_90a), for
/// the twin of a default case: for DV <= 128 the default is the fused dQ
/// mode and the twin the two-kernel mode, for DV = 256 the other way round.
inline std::string twinConfig(int DV) {
  return DV > 128 ? "kv32x128w8.fused.s2" : "kv64x128w8.q128x32w4.s2";
}

/// Fused dQ cases with several key blocks a query block (semaphores, ranks),
/// grouped k/v heads, masks with and without diagonals, query blocks no key
/// visits (mha_emptyblock), and rotated walks.
inline void addFusedCases(std::vector<Case> &Out) {
  for (const char *E : Definitions)
    Out.push_back({E, DType::F16, 64, 64, 1, 4, 2, 333, 333, Layout::BSHD,
                   fusedConfig(64)});
  Out.push_back({"mha_full", DType::F16, 128, 128, 2, 2, 1, 700, 700, Layout::BHSD,
                 fusedConfig(128)});
  Out.push_back({"mha_emptyblock", DType::BF16, 128, 128, 1, 2, 1, 333, 333,
                 Layout::BSHD, fusedConfig(128)});
  Out.push_back({"mha_window", DType::F16, 128, 128, 1, 2, 2, 333, 333, Layout::BSHD,
                 "kv32x64w4.fused.s3"});
  // Without a mask the walks are rotated (BwdFusedDq::first_block): more key
  // blocks than query blocks (walks that start together), and a longer row.
  Out.push_back({"mha_full", DType::F16, 64, 64, 1, 2, 1, 70, 1000, Layout::BSHD,
                 fusedConfig(64)});
  Out.push_back({"mha_full", DType::BF16, 128, 128, 1, 1, 1, 1300, 1300, Layout::BHSD,
                 fusedConfig(128)});
}

inline std::vector<Case> cases(bool Quick) {
  std::vector<Case> Out;
  if (Quick) {
    for (const char *E : Definitions) {
      Out.push_back({E, DType::F16, 64, 64, 1, 2, 1, 70, 70, Layout::BSHD, ""});
      Case Twin = Out.back();
      Twin.Config = twinConfig(Twin.DV);
      Twin.TwinOf = int(Out.size()) - 1;
      Out.push_back(Twin);
    }
    addFusedCases(Out);
    return Out;
  }
  struct Dims {
    int D, DV;
  };
  struct Shape {
    int B, H, Hkv, S;
  } Small[] = {{1, 2, 2, 1}, {2, 2, 1, 17}};
  for (const char *E : Definitions) {
    bool AllDims = std::string(E) == "mha" || std::string(E) == "mha_window";
    std::vector<Dims> Ds = {{64, 64}, {128, 128}};
    if (AllDims)
      Ds.insert(Ds.end(), {{64, 128}, {128, 256}});
    for (DType T : {DType::F16, DType::BF16})
      for (Dims Dm : Ds)
        for (Shape S : Small)
          Out.push_back({E, T, Dm.D, Dm.DV, S.B, S.H, S.Hkv, S.S, S.S,
                         S.S == 1 ? Layout::BHSD : Layout::BSHD, ""});
  }
  // A length that is no multiple of any tile, grouped k/v heads.
  for (const char *E : Definitions)
    for (DType T : {DType::F16, DType::BF16})
      Out.push_back({E, T, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD, ""});
  Out.push_back({"mha", DType::F16, 64, 128, 1, 2, 2, 1000, 1000, Layout::BHSD, ""});
  Out.push_back({"mha", DType::BF16, 128, 256, 1, 2, 1, 1000, 1000, Layout::BSHD, ""});
  // Fewer queries than keys and the other way round.
  Out.push_back({"mha", DType::F16, 64, 64, 1, 2, 2, 130, 257, Layout::BSHD, ""});
  Out.push_back({"relu_attn", DType::BF16, 64, 64, 1, 2, 2, 257, 130, Layout::BHSD, ""});
  // Other tilings: 3 stages and unequal fine blocks; the sm_86 default.
  Out.push_back({"mha_window", DType::F16, 128, 128, 1, 2, 1, 333, 333, Layout::BSHD,
                 "kv32x64w4.q64x32w4.s3"});
  Out.push_back({"retention", DType::F16, 128, 128, 1, 2, 2, 333, 333, Layout::BSHD,
                 "kv64x64w4.q64x64w4.s2"});
  // One long sequence.
  Out.push_back({"mha", DType::BF16, 128, 128, 1, 1, 1, 4096, 4096, Layout::BSHD, ""});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD, ""});
  Out.push_back({"mha_emptyblock", DType::F16, 64, 64, 2, 2, 2, 333, 333, Layout::BSHD, ""});
  // Every case of the default configuration again in the other mode
  // (same inputs: the twin shares the reference), then the fused-only ones.
  size_t N = Out.size();
  for (size_t I = 0; I < N; ++I)
    if (Out[I].Config.empty()) {
      Case F = Out[I];
      F.Config = twinConfig(F.DV);
      F.TwinOf = int(I);
      Out.push_back(F);
    }
  addFusedCases(Out);
  return Out;
}

} // namespace attn::gputest

#endif
