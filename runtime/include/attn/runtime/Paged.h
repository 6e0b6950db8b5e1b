// Decode over a paged KV cache: the page views, the plan of a batch (made
// once on the host, into a workspace the caller owns), the append of new
// tokens into pages, and the merge of partial results.
#ifndef ATTN_RUNTIME_PAGED_H
#define ATTN_RUNTIME_PAGED_H

#include "attn/runtime/Attention.h"

#include <cstddef>
#include <cstdint>

namespace attn::analysis {
enum class MergeKind : uint8_t; // attn/analysis/Merge.h
} // namespace attn::analysis

namespace attn::runtime {

/// How a page stores its tokens. NHD: k_cache [num_pages, page_size,
/// heads_kv, head_dim] (vLLM, FlashInfer's default); HND: [num_pages,
/// heads_kv, page_size, head_dim]. Any strides with the head dim
/// contiguous.
enum class PageLayout : uint8_t { NHD, HND };
const char *pageLayoutName(PageLayout L);

/// Optional host copies of a PagedKV's index tensors (the same values as
/// the device ones). Where given, a call checks every page index of every
/// sequence's keys against the caches' page count and every length against
/// the bound before it launches (InvalidArgument naming the sequence); the
/// device tensors are never read on the host.
struct PagedKVHost {
  const int32_t *BlockTable = nullptr; ///< [B, max_pages], row-major
  const int32_t *SeqLens = nullptr;    ///< [B]
  const int32_t *Indptr = nullptr;     ///< [B + 1]
  const int32_t *Indices = nullptr;    ///< [indptr[B]]
  const int32_t *LastPageLen = nullptr; ///< [B]
  /// A packed decode call's cu_seqlens_q [B + 1] (decodePagedVarlen,
  /// runDecodeVarlen): where given, every sequence's query range is
  /// checked too (from 0, never decreasing, each count within the bound,
  /// ending within q's tokens).
  const int32_t *CuSeqlensQ = nullptr;
};

/// The keys and values of B sequences in pages of a cache, in one of two
/// forms: a block table (BlockTable int32 [B, max_pages], SeqLens int32
/// [B]: sequence b's token t is in page BlockTable[b][t / page_size]), or
/// CSR (Indptr int32 [B + 1], Indices int32 [nnz], LastPageLen int32 [B]:
/// its pages are Indices[Indptr[b] .. Indptr[b + 1]), the last one holding
/// LastPageLen[b] tokens, 1 to page_size). Set the tensors of one form and
/// leave the other's Data null. The page size is any power of two.
///
/// The index tensors are device data: a call reads them on the device only
/// (graph replays may change them). On the device, a length below 0 or
/// above the bound, a LastPageLen outside [1, page_size] or a page index
/// outside [0, num_pages) makes that sequence's rows NaN instead of reading
/// out of bounds; what is not checked there: block-table entries past a
/// sequence's last page (never read), and pages shared or aliased between
/// sequences (allowed). Host copies (Host) add a host check before launch.
struct PagedKV {
  TensorView KCache, VCache;
  PageLayout Layout = PageLayout::NHD;
  TensorView BlockTable, SeqLens;
  TensorView Indptr, Indices, LastPageLen;
  /// The longest sequence (decodePaged plans for it; runDecode requires at
  /// most the plan's bound). Keys past it are never visited: a longer
  /// sequence's rows are NaN.
  int64_t MaxSeqlenKv = 0;
  const PagedKVHost *Host = nullptr;
};

/// What a decode plan is made for: the batch, heads and queries per
/// sequence of every run (fixed), the bound on any sequence's keys and the
/// page size; MaxSplits caps the split over the keys (0: the heuristic's
/// own cap, Selector.h's decodeSplit). Packed: the plan runs packed
/// (THD) batches (runDecodeVarlen), each sequence with its own count of
/// queries, 0 to QueriesPerSeq, given by cu_seqlens_q on the device.
struct DecodeBounds {
  int64_t Batch = 1;
  int64_t Heads = 1;
  int64_t HeadsKv = 1;
  int64_t QueriesPerSeq = 1;
  int64_t MaxSeqlenKv = 0;
  int64_t PageSize = 16;
  int MaxSplits = 0;
  bool Packed = false;
};

/// A plan: the split and the workspace it needs. Made on the host once
/// (Attention::planDecode); runDecode launches it with no host decision.
struct DecodePlan {
  DecodeBounds Bounds;
  int BlockM = 16, BlockN = 64;
  int RowBlocks = 1;
  int Splits = 1;
  int BlocksPerSplit = 1;
  /// Device bytes the caller provides to runDecode (0 without a split):
  /// the splits' fp32 o rows and states.
  size_t WorkspaceBytes = 0;
  /// The kernel's key (which Attention planned it).
  std::string KernelKey;
};

/// Floats of one split's state row in a decode workspace (the kernels'
/// kDecodeStateFloats).
inline constexpr int DecodeStateFloats = 8;

/// The host check of a packed decode call's cu_seqlens_q (a host copy of
/// \p Batch + 1 entries) against the bound \p MaxQueries on a sequence's
/// queries and q's \p Tokens: InvalidArgument naming the first entry
/// that is wrong (cu_seqlens_q[0] not 0, a decrease, a count above the
/// bound, an end past q's tokens).
void checkCuSeqlensQHost(const int32_t *Cu, int64_t Batch, int64_t MaxQueries,
                         int64_t Tokens);

/// The plan for \p B on a device of \p MultiProcessors SMs, with decode
/// tiles \p BlockM x \p BlockN, o rows of \p HeadDimV and the definition's
/// merge \p Merge (None: never split): decodeSplit's split for the bound's
/// keys, capped by MaxSplits. InvalidArgument naming the bound that is
/// wrong.
DecodePlan makeDecodePlan(const DecodeBounds &B, int HeadDimV, int BlockM,
                          int BlockN, int MultiProcessors,
                          analysis::MergeKind Merge);

/// What a paged prefill plan is made for (Attention::planPrefill): the
/// sequences, heads and page size of every run (fixed), and bounds on any
/// sequence's new query tokens and on its keys (cached and new).
struct PrefillBounds {
  int64_t Batch = 1;
  int64_t Heads = 1;
  int64_t HeadsKv = 1;
  int64_t MaxSeqlenQ = 1;
  int64_t MaxSeqlenKv = 0;
  int64_t PageSize = 16;
};

/// A paged prefill plan: the grid (query blocks of the bound on queries x
/// batch x heads). Paged prefill needs no workspace.
struct PrefillPlan {
  PrefillBounds Bounds;
  int BlockM = 128, BlockN = 64;
  int QueryBlocks = 1;
  /// The kernel's key (which Attention planned it).
  std::string KernelKey;
};

/// The plan for \p B with query blocks of \p BlockM rows and key blocks
/// of \p BlockN keys. InvalidArgument naming the bound that is wrong.
PrefillPlan makePrefillPlan(const PrefillBounds &B, int BlockM, int BlockN);

/// One partial result for Attention::mergeResults: o (like a forward's
/// out) and its finals ([F, B, H, Sq] float32; null for a definition
/// without finals), computed over a set of keys disjoint from the other
/// parts' (a prefix cache and new tokens, shards of the keys).
struct PartialResult {
  TensorView Out;
  const TensorView *Finals = nullptr;
};

/// A cache's page geometry, strides in elements (NHD and HND differ only
/// in the strides).
struct PageGeometry {
  int64_t NumPages = 0, PageSize = 1;
  int64_t PageStride = 0, SlotStride = 0, HeadStride = 0;
};

/// The host model of the paged kernels' index math, over host copies \p H
/// (the CSR form where H.Indptr is set, else the block table, whose rows
/// are \p MaxPages apart). pagedSeqLen: sequence b's keys, or -1 where its
/// description is malformed (a negative length or page count, a last page
/// length outside [1, page size]).
int64_t pagedSeqLen(const PagedKVHost &H, int64_t PageSize, int64_t b);
/// The element offset of token t of sequence b, KV head \p Hkv, from the
/// cache's start; -1 where t is not below the sequence's length or its page
/// index is outside [0, NumPages).
int64_t pagedOffset(const PagedKVHost &H, int64_t MaxPages,
                    const PageGeometry &G, int64_t b, int64_t t, int64_t Hkv);

} // namespace attn::runtime

#endif
