// Code generation for the decode skeleton (runtime/kernels/decode_sm80.cuh):
// a few queries per sequence over many keys, split across CTAs where the
// definition's merge allows it (analysis/Merge.h).
#ifndef ATTN_CODEGEN_DECODECODEGEN_H
#define ATTN_CODEGEN_DECODECODEGEN_H

#include "attn/Pipeline.h"
#include "attn/analysis/Merge.h"
#include "attn/codegen/Codegen.h"

#include <string>
#include <vector>

namespace attn::codegen {

/// The most queries per sequence a decode call may have (speculative
/// decoding's drafts).
inline constexpr int DecodeMaxQueries = 16;

/// The smallest pages decode_sm80's default reads with 2 warps at d128
/// (DecodeConfig::defaultFor): with fewer keys a page, each thread's more
/// rows cost one page-table load each.
inline constexpr int64_t DecodeTwoWarpsMinPage = 16;

/// Tile configuration of decode_sm80, written "dec.m<M>n<N>w<W>s<S>": M
/// query rows per CTA (the query heads of one KV head times the queries,
/// 16 or 32), N keys per step of the K/V ring, W warps (each takes N/W of
/// the step's keys where the merge allows, else warp 0 takes them all), S
/// ring stages.
struct DecodeConfig {
  int BlockM = 16;
  int BlockN = 64;
  int Warps = 4;
  int Stages = 3;

  std::string str() const;
  /// Parses what str() writes; UserError on anything else.
  static DecodeConfig parse(const std::string &Text);
  /// Dynamic shared memory for head dims \p D, \p DV: the Q rows and the
  /// ring, or the warps' states when they are merged, whichever is larger.
  int sharedBytes(int D, int DV) const;
  /// 16 rows, 64 keys a step, 3 stages (d <= 128; 2 above, where the ring
  /// would not fit otherwise). \p PageSize: 0 for contiguous K/V (a dense
  /// or packed call), else the size of the cache's pages. At d = dv = 128
  /// over 2 warps of 32 keys each, except in pages of fewer than
  /// DecodeTwoWarpsMinPage keys; everything else over 4 warps of 16. On an
  /// H200 (2026-11-29, 32/8 heads, one process each, alternating) 2 warps
  /// ran contiguous d128 decode 3-5% faster from batch 1 to 8 and the same
  /// at 32 and 128, pages of 16 keys 1-3 us faster at batch 1 to 8, but
  /// pages of one key 10-17% slower and d64 up to 8% slower at batch 1.
  static DecodeConfig defaultFor(int D, int DV, GpuArch Arch, int64_t PageSize = 0);
  /// M {16, 32} x N {64, 128} x W {2, 4} x S {2, 3, 4}, where structural.
  static std::vector<DecodeConfig> enumerate();
  /// Why the skeleton cannot be instantiated with this structure, or empty.
  std::string structuralError() const;
  bool operator==(const DecodeConfig &O) const {
    return BlockM == O.BlockM && BlockN == O.BlockN && Warps == O.Warps &&
           Stages == O.Stages;
  }
};

/// Why decode_sm80 cannot run \p Spec's dtype, head dims and arch with
/// \p C (head dims as the forward's, shared memory on the arch), or empty.
std::string decodeConfigError(const KernelSpec &Spec, const DecodeConfig &C);

/// The decode kernels of \p Def: attnc_decode (one CTA per row block, KV
/// head, batch entry and split) and, where the merge is not None,
/// attnc_decode_merge (one CTA per query row, merging the splits by the
/// derived rule and applying the epilogue). UserError as
/// decodeConfigError.
KernelSource generateDecode(const CompiledDefinition &Def,
                            const KernelSpec &Spec, const DecodeConfig &C);

/// The paged decode kernels of \p Def: attnc_decode_paged (the split
/// kernel over K/V in pages, attnc::PagedDecodeArgs) and its
/// attnc_decode_merge (the same merge as generateDecode's, taking the
/// PagedDecodeArgs: the epilogue's q_idx needs each sequence's length).
/// \p PageMode: the one row-step mode of the kernel's page copies
/// (attnc::decode_paged_kernel_mode of the page size the plan takes, 0 to
/// 4; part of the key), or -1 for the 64-bit gather alone; the gather is
/// in every kernel, for strides too wide for the row steps. InternalError
/// for another mode; a mode the tile lacks fails the kernel's compile.
KernelSource generatePagedDecode(const CompiledDefinition &Def,
                                 const KernelSpec &Spec, const DecodeConfig &C,
                                 int PageMode);

/// The generated struct that merges two RowStates by \p M's rule and moves
/// them to and from fp32 workspace rows (what attnc_decode_merge and the
/// warps' merge call).
std::string decodeMergeStruct(const ir::Graph &G, const analysis::MergeInfo &M);

/// The public merge's kernel for a definition whose results merge by its
/// own combine (analysis::analyzeResultMerge gives Combine):
/// attnc_merge_results_combine (attnc::MergeResultsArgs, one CTA of
/// Spec.HeadDimV / 2 threads per query row) runs decodeMergeStruct's Merge
/// over the parts' finals read as their states. The derived sum and
/// log-sum-exp merges need no definition's code (the runtime's
/// attnc_merge_results). UserError naming the reason where the results
/// do not merge by a combine.
KernelSource generateMergeResults(const CompiledDefinition &Def,
                                  const KernelSpec &Spec);

} // namespace attn::codegen

#endif
