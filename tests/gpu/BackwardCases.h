// The cases of gpu_backward_test: the definitions (examples and a few
// masks made for the test), the quick set and the full matrix, each case
// in the default configuration (bwd_sm90 on sm_90a where it runs the head
// dims, else bwd_sm80) and in bwd_sm80's two dQ modes; on sm_90a also
// bwd_sm90's tilings, its ping-pong mode and its column split (256/256,
// 192/128).
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
    "mha_sliding_window", "mha_document", "mha_chunked", "mha_document_ids",
    "mha_alibi",     "mha_softcap30"};

/// The fused dQ mode's tiles for a case of the default configuration.
inline std::string fusedConfig(int DV) {
  return DV > 128 ? "kv32x128w8.fused.s2" : "kv64x128w8.fused.s2";
}

/// bwd_sm80's configurations for the twins of a default case, so that
/// both dQ modes run whichever skeleton the default is: for DV <= 128 the
/// two-kernel mode and the fused one (bwd_sm80's default off sm_90a), for
/// DV = 256 the fused mode (bwd_sm80's default there is the two-kernel one).
inline std::vector<std::string> twinConfigs(int DV) {
  if (DV > 128)
    return {"kv32x128w8.fused.s2"};
  return {"kv64x128w8.q128x32w4.s2", fusedConfig(DV)};
}

/// bwd_sm90's other tilings (sm_90a only): one warpgroup of keys with three
/// stages, 128-row query steps at d64, a dQ kernel of 64-row blocks, and
/// both dQ modes in either head dim.
inline void addSm90Cases(std::vector<Case> &Out) {
  Out.push_back({"mha_window", DType::F16, 128, 128, 1, 2, 1, 333, 333, Layout::BSHD,
                 "bwd90.kv64x64s3.q128x64w8"});
  Out.push_back({"alibi_learnable", DType::BF16, 64, 64, 2, 2, 1, 257, 257,
                 Layout::BHSD, "bwd90.kv128x128s2.q64x64w4"});
  Out.push_back({"mha_emptyblock", DType::F16, 64, 64, 1, 2, 2, 333, 333, Layout::BSHD,
                 "bwd90.kv128x64s4.q128x64w8"});
  // d64's earlier default (64-row steps, two stages, 64-key dQ steps).
  Out.push_back({"mha", DType::F16, 64, 64, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90.kv64x128s2.q128x64w8"});
  // The dQ kernel at d128 (the default there fuses dQ), and the fused mode
  // in its other tilings: ranks with masks, grouped heads, query blocks no
  // key visits, rotated walks without a mask, 128-row steps (two chains).
  Out.push_back({"mha", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD,
                 "bwd90.kv64x128s2.q128x64w8"});
  Out.push_back({"mha_full", DType::F16, 128, 128, 2, 2, 1, 700, 700, Layout::BHSD,
                 "bwd90.kv64x128s3.fused"});
  Out.push_back({"mha_full", DType::BF16, 64, 64, 1, 2, 1, 70, 1000, Layout::BSHD,
                 "bwd90.kv64x64s2.fused"});
  Out.push_back({"mha_window", DType::F16, 64, 64, 1, 4, 2, 333, 333, Layout::BSHD,
                 "bwd90.kv64x64s3.fused"});
  Out.push_back({"alibi_learnable", DType::BF16, 64, 64, 2, 2, 1, 257, 257,
                 Layout::BHSD, "bwd90.kv128x64s2.fused"});
  Out.push_back({"mha_emptyblock", DType::F16, 128, 128, 1, 2, 2, 333, 333, Layout::BSHD,
                 "bwd90.kv64x128s2.fused"});
  // The warp-specialised kernel (TMA ring, producer warpgroup) in both dQ
  // modes and both element forms: rotated walks with grouped heads, masks
  // with ranks in both layouts, input gradients, empty query blocks, one
  // warpgroup of keys; and the atomic dQ mode without it.
  Out.push_back({"mha_full", DType::F16, 128, 128, 2, 2, 1, 700, 700, Layout::BHSD,
                 "bwd90ws.kv64x128s2.fused"});
  Out.push_back({"mha", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90ws2.kv64x128s3.fused"});
  Out.push_back({"mha_window", DType::F16, 128, 128, 1, 4, 2, 333, 333, Layout::BSHD,
                 "bwd90ws.kv64x128s2.fused"});
  Out.push_back({"alibi_learnable", DType::BF16, 128, 128, 2, 2, 1, 257, 257,
                 Layout::BHSD, "bwd90ws.kv64x128s2.fused"});
  Out.push_back({"mha_full", DType::BF16, 64, 64, 1, 2, 1, 70, 1000, Layout::BSHD,
                 "bwd90ws.kv64x64s2.fused"});
  Out.push_back({"softcap_learnable", DType::F16, 128, 128, 1, 2, 1, 333, 333,
                 Layout::BSHD, "bwd90ws2.kv64x128s2.fused"});
  Out.push_back({"mha_document", DType::BF16, 128, 128, 2, 2, 2, 257, 257, Layout::BHSD,
                 "bwd90ws2.kv64x128s2.fused"});
  Out.push_back({"mha_emptyblock", DType::F16, 128, 128, 1, 2, 2, 333, 333, Layout::BSHD,
                 "bwd90ws.kv64x128s2.atomic"});
  Out.push_back({"mha_full", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD,
                 "bwd90.kv64x128s2.atomic"});
  // Ping-pong (warpgroups taking turns, dQ partials summed in shared
  // memory and added by the writer warp in turns): rotated walks with
  // grouped heads and a long single head, masks with ranks in both
  // layouts, input gradients, empty query blocks; atomic dQ.
  const char *Pp = "bwd90ws.kv64x128s2.pp.fused";
  Out.push_back({"mha_full", DType::F16, 128, 128, 2, 2, 1, 700, 700, Layout::BHSD, Pp});
  Out.push_back({"mha_full", DType::BF16, 128, 128, 1, 1, 1, 1300, 1300, Layout::BSHD, Pp});
  Out.push_back({"mha", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD, Pp});
  Out.push_back({"mha_window", DType::F16, 128, 128, 1, 4, 2, 333, 333, Layout::BSHD, Pp});
  Out.push_back({"mha_document", DType::BF16, 128, 128, 2, 2, 2, 257, 257, Layout::BHSD, Pp});
  Out.push_back({"alibi_learnable", DType::BF16, 128, 128, 2, 2, 1, 257, 257, Layout::BHSD,
                 Pp});
  Out.push_back({"softcap_learnable", DType::F16, 128, 128, 1, 2, 1, 333, 333, Layout::BSHD,
                 Pp});
  Out.push_back({"relu_attn", DType::F16, 128, 128, 1, 2, 2, 257, 130, Layout::BHSD, Pp});
  Out.push_back({"mha_emptyblock", DType::F16, 128, 128, 1, 2, 2, 333, 333, Layout::BSHD, Pp});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD,
                 "bwd90ws.kv64x128s2.pp.atomic"});
  // Ping-pong at head dim 64 (each warpgroup all 64 of dQ's columns, dQ's
  // product in the token's second group): the same kinds of cases, more
  // stages.
  const char *Pp64 = "bwd90ws.kv64x128s2.pp.fused";
  Out.push_back({"mha_full", DType::F16, 64, 64, 2, 2, 1, 700, 700, Layout::BHSD, Pp64});
  Out.push_back({"mha_full", DType::BF16, 64, 64, 1, 1, 1, 1300, 1300, Layout::BSHD,
                 "bwd90ws.kv64x128s3.pp.fused"});
  Out.push_back({"mha", DType::BF16, 64, 64, 1, 2, 1, 1000, 1000, Layout::BSHD, Pp64});
  Out.push_back({"mha", DType::F16, 64, 64, 1, 4, 2, 1024, 1024, Layout::BHSD,
                 "bwd90ws.kv64x128s4.pp.fused"});
  Out.push_back({"mha_window", DType::F16, 64, 64, 1, 4, 2, 333, 333, Layout::BSHD, Pp64});
  Out.push_back({"mha_document", DType::BF16, 64, 64, 2, 2, 2, 257, 257, Layout::BHSD, Pp64});
  Out.push_back({"alibi_learnable", DType::BF16, 64, 64, 2, 2, 1, 257, 257, Layout::BHSD,
                 Pp64});
  Out.push_back({"softcap_learnable", DType::F16, 64, 64, 1, 2, 1, 333, 333, Layout::BSHD,
                 Pp64});
  Out.push_back({"relu_attn", DType::F16, 64, 64, 1, 2, 2, 257, 130, Layout::BHSD, Pp64});
  Out.push_back({"mha_emptyblock", DType::F16, 64, 64, 1, 2, 2, 333, 333, Layout::BSHD, Pp64});
  Out.push_back({"mha_full", DType::F16, 64, 64, 1, 2, 1, 1000, 1000, Layout::BSHD,
                 "bwd90ws.kv64x128s2.pp.atomic"});
  // The dQ writer with the lockstep step: the same kinds of cases.
  const char *Dqw = "bwd90ws.kv64x128s2.dqw.fused";
  Out.push_back({"mha_full", DType::BF16, 128, 128, 2, 2, 1, 700, 700, Layout::BHSD, Dqw});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 1, 1, 1300, 1300, Layout::BSHD, Dqw});
  Out.push_back({"mha", DType::F16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD, Dqw});
  Out.push_back({"mha_window", DType::BF16, 128, 128, 1, 4, 2, 333, 333, Layout::BHSD, Dqw});
  Out.push_back({"mha_document", DType::F16, 128, 128, 2, 2, 2, 257, 257, Layout::BSHD, Dqw});
  Out.push_back({"alibi_learnable", DType::F16, 128, 128, 2, 2, 1, 257, 257, Layout::BSHD,
                 Dqw});
  Out.push_back({"softcap_learnable", DType::BF16, 128, 128, 1, 2, 1, 333, 333,
                 Layout::BHSD, Dqw});
  Out.push_back({"relu_attn", DType::BF16, 128, 128, 1, 2, 2, 257, 130, Layout::BSHD, Dqw});
  Out.push_back({"mha_emptyblock", DType::BF16, 128, 128, 1, 2, 2, 333, 333, Layout::BHSD,
                 Dqw});
  Out.push_back({"mha_full", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90ws.kv64x128s2.dqw.atomic"});
  // The lean step (dV/dK issued before the dSᵀ tile, tiles wholly inside
  // the sequences without per-element bounds): lengths that are multiples
  // of the tiles (every tile inside) and not (the last ones at the edge),
  // fewer queries than keys and the reverse, masks, input gradients.
  const char *Lean = "bwd90ws.kv64x128s2.lean.fused";
  Out.push_back({"mha_full", DType::F16, 128, 128, 2, 2, 1, 700, 700, Layout::BHSD, Lean});
  Out.push_back({"mha_full", DType::BF16, 128, 128, 1, 2, 2, 1024, 1024, Layout::BSHD, Lean});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 2, 1, 256, 1000, Layout::BSHD, Lean});
  Out.push_back({"mha", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD, Lean});
  Out.push_back({"mha_window", DType::F16, 128, 128, 1, 4, 2, 333, 333, Layout::BSHD, Lean});
  Out.push_back({"mha_document", DType::BF16, 128, 128, 2, 2, 2, 257, 257, Layout::BHSD, Lean});
  Out.push_back({"alibi_learnable", DType::F16, 128, 128, 2, 2, 1, 512, 512, Layout::BSHD,
                 Lean});
  Out.push_back({"softcap_learnable", DType::BF16, 128, 128, 1, 2, 1, 333, 333,
                 Layout::BHSD, Lean});
  Out.push_back({"relu_attn", DType::F16, 128, 128, 1, 2, 2, 257, 130, Layout::BHSD, Lean});
  Out.push_back({"mha_emptyblock", DType::F16, 128, 128, 1, 2, 2, 333, 333, Layout::BSHD,
                 Lean});
  Out.push_back({"mha_full", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90ws.kv64x128s2.lean.atomic"});
  // With the turn warp (it alone waits for and publishes the dQ turns):
  // rotated walks with grouped heads, ranks from masks, heads one after
  // another in a CTA, input gradients, query blocks no key visits.
  const char *Lean2 = "bwd90ws.kv64x128s2.lean2.fused";
  Out.push_back({"mha_full", DType::BF16, 128, 128, 2, 2, 1, 700, 700, Layout::BSHD, Lean2});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 4, 2, 1024, 1024, Layout::BHSD, Lean2});
  Out.push_back({"mha", DType::F16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD, Lean2});
  Out.push_back({"mha_window", DType::BF16, 128, 128, 1, 4, 2, 333, 333, Layout::BHSD, Lean2});
  Out.push_back({"mha_document", DType::F16, 128, 128, 2, 2, 2, 257, 257, Layout::BSHD, Lean2});
  Out.push_back({"alibi_learnable", DType::BF16, 128, 128, 2, 2, 1, 257, 257, Layout::BHSD,
                 Lean2});
  Out.push_back({"mha_emptyblock", DType::BF16, 128, 128, 1, 2, 2, 333, 333, Layout::BHSD,
                 Lean2});
  // With the turn warp's bulk dQ (the compute threads' dQ through two
  // shared slots, bulk reductions in the turns): rotated walks with grouped
  // heads, heads one after another in a CTA, fewer queries than keys and
  // the reverse, ranks from masks, input gradients, key blocks with no
  // step and query blocks no key visits.
  const char *Bulk = "bwd90ws.kv64x128s2.lean2.bulk.fused";
  Out.push_back({"mha_full", DType::BF16, 128, 128, 2, 2, 1, 700, 700, Layout::BSHD, Bulk});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 4, 2, 1024, 1024, Layout::BHSD, Bulk});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 2, 1, 256, 1000, Layout::BSHD, Bulk});
  Out.push_back({"mha", DType::F16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD, Bulk});
  Out.push_back({"mha_window", DType::BF16, 128, 128, 1, 4, 2, 333, 333, Layout::BHSD, Bulk});
  Out.push_back({"mha_document", DType::F16, 128, 128, 2, 2, 2, 257, 257, Layout::BSHD, Bulk});
  Out.push_back({"alibi_learnable", DType::BF16, 128, 128, 2, 2, 1, 257, 257, Layout::BHSD,
                 Bulk});
  Out.push_back({"sigmoid_attn", DType::F16, 128, 128, 1, 2, 1, 333, 333, Layout::BSHD, Bulk});
  Out.push_back({"softcap_learnable", DType::F16, 128, 128, 1, 2, 1, 333, 333, Layout::BSHD,
                 Bulk});
  Out.push_back({"relu_attn", DType::BF16, 128, 128, 1, 2, 2, 257, 130, Layout::BSHD, Bulk});
  Out.push_back({"mha_emptyblock", DType::BF16, 128, 128, 1, 2, 2, 333, 333, Layout::BHSD,
                 Bulk});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90ws.kv64x128s2.lean2.bulk.atomic"});
  // Turns acquired before the slot is full, two turn warps taking alternate
  // steps and a slot each: bulk reductions (.bulk2.) or the warps' own
  // red.global.add (.red2.; .red.: one such warp). Rotated walks with
  // grouped heads, heads one after another in a CTA (an odd number of steps
  // a head), fewer queries than keys and the reverse, ranks from masks,
  // input gradients, key blocks with no step and query blocks no key
  // visits.
  for (const char *Two : {"bwd90ws.kv64x128s2.lean2.bulk2.fused",
                          "bwd90ws.kv64x128s2.lean2.red2.fused"}) {
    Out.push_back({"mha_full", DType::BF16, 128, 128, 2, 2, 1, 700, 700, Layout::BSHD, Two});
    Out.push_back({"mha_full", DType::F16, 128, 128, 1, 4, 2, 1024, 1024, Layout::BHSD, Two});
    Out.push_back({"mha_full", DType::F16, 128, 128, 1, 2, 1, 256, 1000, Layout::BSHD, Two});
    Out.push_back({"mha", DType::F16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD, Two});
    Out.push_back({"mha_window", DType::BF16, 128, 128, 1, 4, 2, 333, 333, Layout::BHSD, Two});
    Out.push_back({"mha_document", DType::F16, 128, 128, 2, 2, 2, 257, 257, Layout::BSHD, Two});
    Out.push_back({"alibi_learnable", DType::BF16, 128, 128, 2, 2, 1, 257, 257, Layout::BHSD,
                   Two});
    Out.push_back({"relu_attn", DType::BF16, 128, 128, 1, 2, 2, 257, 130, Layout::BSHD, Two});
    Out.push_back({"mha_emptyblock", DType::BF16, 128, 128, 1, 2, 2, 333, 333, Layout::BHSD,
                   Two});
  }
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90ws.kv64x128s2.lean2.bulk2.atomic"});
  Out.push_back({"mha_full", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90ws.kv64x128s2.lean2.red2.atomic"});
  const char *Red1 = "bwd90ws.kv64x128s2.lean2.red.fused";
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 4, 2, 1024, 1024, Layout::BHSD, Red1});
  Out.push_back({"mha", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD, Red1});
  Out.push_back({"mha_document", DType::F16, 128, 128, 2, 2, 2, 257, 257, Layout::BSHD, Red1});
  Out.push_back({"alibi_learnable", DType::F16, 128, 128, 2, 2, 1, 257, 257, Layout::BSHD,
                 Red1});
  // And with 16-byte dQ adds (lanes trading pairs; rank 0's stores too).
  const char *Lean3 = "bwd90ws.kv64x128s2.lean3.fused";
  Out.push_back({"mha_full", DType::F16, 128, 128, 2, 2, 1, 700, 700, Layout::BHSD, Lean3});
  Out.push_back({"mha_full", DType::BF16, 128, 128, 1, 4, 2, 1024, 1024, Layout::BSHD, Lean3});
  Out.push_back({"mha", DType::BF16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD, Lean3});
  Out.push_back({"mha_window", DType::F16, 128, 128, 1, 4, 2, 333, 333, Layout::BSHD, Lean3});
  Out.push_back({"mha_document", DType::BF16, 128, 128, 2, 2, 2, 257, 257, Layout::BHSD, Lean3});
  Out.push_back({"alibi_learnable", DType::F16, 128, 128, 2, 2, 1, 257, 257, Layout::BSHD,
                 Lean3});
  Out.push_back({"softcap_learnable", DType::F16, 128, 128, 1, 2, 1, 333, 333, Layout::BSHD,
                 Lean3});
  Out.push_back({"relu_attn", DType::BF16, 128, 128, 1, 2, 2, 257, 130, Layout::BSHD, Lean3});
  Out.push_back({"mha_emptyblock", DType::F16, 128, 128, 1, 2, 2, 333, 333, Layout::BSHD,
                 Lean3});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90ws.kv64x128s2.lean3.atomic"});
  // Fused dQ at head dim 64: the two warpgroups split dQ's rows (128-row
  // steps, a 64-row chain each). The lean step with the turn warp: rotated
  // walks with grouped heads, whole tiles, fewer queries than keys and the
  // reverse, ranks from masks, input gradients, query blocks no key
  // visits; then three stages, 16-byte adds, atomic dQ, the lockstep step
  // and the form without warp specialisation.
  const char *Rows = "bwd90ws.kv128x128s2.lean2.fused";
  Out.push_back({"mha_full", DType::F16, 64, 64, 2, 2, 1, 700, 700, Layout::BSHD, Rows});
  Out.push_back({"mha_full", DType::BF16, 64, 64, 1, 4, 2, 1024, 1024, Layout::BHSD, Rows});
  Out.push_back({"mha_full", DType::F16, 64, 64, 1, 2, 1, 256, 1000, Layout::BSHD, Rows});
  Out.push_back({"mha", DType::BF16, 64, 64, 1, 2, 1, 1000, 1000, Layout::BHSD, Rows});
  Out.push_back({"mha", DType::F16, 64, 64, 1, 2, 2, 1000, 300, Layout::BSHD, Rows});
  Out.push_back({"mha_window", DType::F16, 64, 64, 1, 4, 2, 333, 333, Layout::BSHD, Rows});
  Out.push_back({"mha_document", DType::BF16, 64, 64, 2, 2, 2, 257, 257, Layout::BHSD, Rows});
  Out.push_back({"alibi_learnable", DType::F16, 64, 64, 2, 2, 1, 257, 257, Layout::BSHD,
                 Rows});
  Out.push_back({"softcap_learnable", DType::BF16, 64, 64, 1, 2, 1, 333, 333, Layout::BHSD,
                 Rows});
  Out.push_back({"sigmoid_attn", DType::F16, 64, 64, 1, 2, 1, 333, 333, Layout::BSHD, Rows});
  Out.push_back({"relu_attn", DType::F16, 64, 64, 1, 2, 2, 257, 130, Layout::BHSD, Rows});
  Out.push_back({"mha_emptyblock", DType::BF16, 64, 64, 1, 2, 2, 333, 333, Layout::BHSD,
                 Rows});
  Out.push_back({"mha_full", DType::BF16, 64, 64, 1, 4, 2, 1024, 1024, Layout::BSHD,
                 "bwd90ws.kv128x128s3.lean2.fused"});
  Out.push_back({"mha", DType::F16, 64, 64, 1, 2, 1, 1000, 1000, Layout::BSHD,
                 "bwd90ws.kv128x128s3.lean2.fused"});
  Out.push_back({"mha_full", DType::F16, 64, 64, 2, 2, 1, 700, 700, Layout::BHSD,
                 "bwd90ws.kv128x128s2.lean3.fused"});
  Out.push_back({"mha_window", DType::BF16, 64, 64, 1, 4, 2, 333, 333, Layout::BHSD,
                 "bwd90ws.kv128x128s2.lean3.fused"});
  Out.push_back({"mha_full", DType::F16, 64, 64, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90ws.kv128x128s2.lean2.atomic"});
  Out.push_back({"mha_document", DType::F16, 64, 64, 2, 2, 2, 257, 257, Layout::BSHD,
                 "bwd90ws.kv128x128s2.fused"});
  Out.push_back({"alibi_learnable", DType::BF16, 64, 64, 2, 2, 1, 257, 257, Layout::BHSD,
                 "bwd90.kv128x128s3.fused"});
  // And through the shared slots with the turns taken ahead: each
  // warpgroup stores its chain's 64 rows, the turn warps add the slot's 128
  // rows by bulk reductions (.bulk2.) or by their own adds, two 64-float
  // rows a pass (.red2., .red.). Rotated walks with grouped heads, fewer
  // queries than keys and the reverse, ranks from masks, input gradients,
  // query blocks no key visits.
  for (const char *Ahead : {"bwd90ws.kv128x128s2.lean2.bulk2.fused",
                            "bwd90ws.kv128x128s2.lean2.red2.fused",
                            "bwd90ws.kv128x128s2.lean2.red.fused"}) {
    Out.push_back({"mha_full", DType::F16, 64, 64, 2, 2, 1, 700, 700, Layout::BSHD, Ahead});
    Out.push_back({"mha_full", DType::BF16, 64, 64, 1, 4, 2, 1024, 1024, Layout::BHSD, Ahead});
    Out.push_back({"mha", DType::F16, 64, 64, 1, 2, 2, 1000, 300, Layout::BSHD, Ahead});
    Out.push_back({"mha_full", DType::F16, 64, 64, 1, 2, 1, 256, 1000, Layout::BHSD, Ahead});
    Out.push_back({"mha_document", DType::BF16, 64, 64, 2, 2, 2, 257, 257, Layout::BHSD, Ahead});
    Out.push_back({"alibi_learnable", DType::F16, 64, 64, 2, 2, 1, 257, 257, Layout::BSHD,
                   Ahead});
    Out.push_back({"mha_emptyblock", DType::BF16, 64, 64, 1, 2, 2, 333, 333, Layout::BHSD,
                   Ahead});
  }
  Out.push_back({"mha_full", DType::F16, 64, 64, 1, 2, 1, 1000, 1000, Layout::BHSD,
                 "bwd90ws.kv128x128s2.lean2.bulk2.atomic"});
  // The default at d64 with a long masked walk: the runner hands the call to
  // its .lean2.red2. twin (wantsLongWalkBackward: a mask and >= 4096
  // queries).
  Out.push_back({"mha", DType::BF16, 64, 64, 1, 1, 1, 4200, 4200, Layout::BSHD, ""});
}

/// bwd_sm90's column split (sm_90a only), the default at 256/256 and
/// 192/128, which bwd_sm80 does not run: every definition in one of the
/// two (grouped k/v heads, a length no multiple of the tiles, both layouts
/// and dtypes), rotated walks, fewer queries than keys, and the split's
/// other forms (three stages, atomic dQ, the head dims it also runs).
inline void addSplitCases(std::vector<Case> &Out) {
  bool Wide = true;
  for (const char *E : Definitions) {
    DType T = Wide ? DType::F16 : DType::BF16;
    Out.push_back({E, T, Wide ? 256 : 192, Wide ? 256 : 128, 1, 4, 2, 333, 333,
                   Wide ? Layout::BSHD : Layout::BHSD, ""});
    Wide = !Wide;
  }
  Out.push_back({"mha", DType::BF16, 256, 256, 1, 2, 1, 1000, 1000, Layout::BSHD, ""});
  Out.push_back({"mha", DType::F16, 192, 128, 1, 2, 2, 70, 1000, Layout::BSHD, ""});
  Out.push_back({"mha_full", DType::BF16, 256, 256, 2, 2, 1, 700, 700, Layout::BHSD, ""});
  Out.push_back({"mha_full", DType::F16, 192, 128, 2, 2, 1, 700, 700, Layout::BSHD, ""});
  Out.push_back({"mha_emptyblock", DType::F16, 192, 128, 1, 2, 2, 333, 333, Layout::BSHD,
                 ""});
  Out.push_back({"mha_window", DType::BF16, 192, 128, 1, 4, 2, 333, 333, Layout::BSHD,
                 "bwd90ws.kv64x64s3.split.fused"});
  Out.push_back({"mha_full", DType::F16, 256, 256, 1, 2, 1, 1000, 1000, Layout::BSHD,
                 "bwd90ws.kv64x64s2.split.atomic"});
  Out.push_back({"alibi_learnable", DType::F16, 128, 128, 2, 2, 1, 257, 257, Layout::BHSD,
                 "bwd90ws.kv64x64s2.split.fused"});
  Out.push_back({"mha", DType::BF16, 128, 256, 1, 2, 1, 333, 333, Layout::BSHD,
                 "bwd90ws.kv64x64s2.split.fused"});
  Out.push_back({"mha_window", DType::F16, 256, 128, 1, 2, 1, 333, 333, Layout::BHSD, ""});
  Out.push_back({"mha_full", DType::BF16, 192, 256, 1, 2, 2, 257, 257, Layout::BSHD, ""});
  // The split with the lean step's turn warp (.split.tw.): masks, input
  // gradients, a variant backward, in both head dims and dtypes; a long
  // causal row (turns chained over many key blocks), rotated walks, query
  // blocks no key visits.
  const char *Tw = "bwd90ws.kv64x64s2.split.tw.fused";
  for (const char *E : {"mha", "relu_attn", "mha_window", "alibi_learnable",
                        "softcap_learnable", "mha_document"}) {
    DType T = Wide ? DType::F16 : DType::BF16;
    Out.push_back({E, T, Wide ? 256 : 192, Wide ? 256 : 128, 1, 4, 2, 333, 333,
                   Wide ? Layout::BHSD : Layout::BSHD, Tw});
    Wide = !Wide;
  }
  Out.push_back({"mha", DType::F16, 192, 128, 1, 2, 1, 1300, 1300, Layout::BSHD, Tw});
  Out.push_back({"mha_full", DType::BF16, 256, 256, 2, 2, 1, 700, 700, Layout::BHSD, Tw});
  Out.push_back({"mha_emptyblock", DType::F16, 192, 128, 1, 2, 2, 333, 333, Layout::BSHD,
                 Tw});
  // The roles form (.split.ro.): masks, input gradients, a variant
  // backward, grouped heads, odd lengths, a long causal row, rotated walks,
  // fewer queries than keys, three stages, 128/128.
  const char *Ro = "bwd90ws.kv64x64s2.split.ro.fused";
  for (const char *E : {"mha", "relu_attn", "mha_window", "alibi_learnable",
                        "softcap_learnable", "mha_document", "mha_full"}) {
    DType T = Wide ? DType::F16 : DType::BF16;
    Out.push_back({E, T, 192, 128, 1, 4, 2, 333, 333, Wide ? Layout::BHSD : Layout::BSHD, Ro});
    Wide = !Wide;
  }
  Out.push_back({"mha", DType::F16, 192, 128, 1, 2, 1, 1300, 1300, Layout::BSHD, Ro});
  Out.push_back({"mha_full", DType::BF16, 192, 128, 2, 2, 1, 700, 700, Layout::BHSD, Ro});
  Out.push_back({"mha_full", DType::F16, 192, 128, 1, 2, 2, 70, 1000, Layout::BSHD, Ro});
  Out.push_back({"mha_emptyblock", DType::F16, 192, 128, 1, 2, 2, 333, 333, Layout::BSHD, Ro});
  Out.push_back({"mha", DType::BF16, 192, 128, 1, 2, 1, 333, 333, Layout::BSHD,
                 "bwd90ws.kv64x64s3.split.ro.fused"});
  Out.push_back({"mha_full", DType::F16, 128, 128, 1, 4, 2, 333, 333, Layout::BSHD, Ro});
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

/// The twins of every default case among the first \p N of \p Out.
inline void addTwins(std::vector<Case> &Out, size_t N) {
  for (size_t I = 0; I < N; ++I)
    if (Out[I].Config.empty())
      for (const std::string &Config : twinConfigs(Out[I].DV)) {
        Case F = Out[I];
        F.Config = Config;
        F.TwinOf = int(I);
        Out.push_back(F);
      }
}

/// The quick set or the full matrix; \p Sm90 adds bwd_sm90's own tilings.
inline std::vector<Case> cases(bool Quick, bool Sm90) {
  std::vector<Case> Out;
  if (Quick) {
    for (const char *E : Definitions)
      Out.push_back({E, DType::F16, 64, 64, 1, 2, 1, 70, 70, Layout::BSHD, ""});
    addTwins(Out, Out.size());
    addFusedCases(Out);
    if (Sm90) {
      addSm90Cases(Out);
      addSplitCases(Out);
    }
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
  // Every case of the default configuration again in bwd_sm80's modes
  // (same inputs: the twin shares the reference), then the fused-only ones.
  addTwins(Out, Out.size());
  addFusedCases(Out);
  if (Sm90) {
    addSm90Cases(Out);
    addSplitCases(Out);
  }
  return Out;
}

} // namespace attn::gputest

#endif
