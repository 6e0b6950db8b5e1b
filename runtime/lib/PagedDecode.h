// Paged decode inside the runtime: the validated form of a call and the
// runner that owns the paged kernels (Attention's decodePaged, planDecode,
// runDecode and appendPaged use it).
#ifndef ATTN_RUNTIME_PAGEDDECODE_H
#define ATTN_RUNTIME_PAGEDDECODE_H

#include "DeviceArena.h"
#include "PerStream.h"
#include "KernelModule.h"

#include "../kernels/merge_results_args.cuh"

#include "attn/runtime/Paged.h"

#include "attn/analysis/Merge.h"
#include "attn/runtime/Validate.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attn::runtime {

/// A paged call whose arguments passed validatePagedCall.
struct PagedCall {
  /// B, H, Hkv, Sq and Skv (the plan's bound) and q's and out's strides.
  CallShape Shape;
  PageGeometry K, V;
  const void *KData = nullptr, *VData = nullptr;
  bool Csr = false;
  const int32_t *Pages = nullptr, *SeqLens = nullptr, *Indptr = nullptr,
                *LastPageLen = nullptr;
  int64_t TableStride = 0;
  int64_t NumIndices = 0; ///< CSR: the entries of indices
};

/// Checks the caches of \p KV (rank, dtype, strides, a power-of-two page
/// size, V like K) into \p C; returns their KV heads.
int64_t checkCaches(const Signature &Sig, const PagedKV &KV, PagedCall &C);

/// Checks \p KV's page description (one form given, index tensors of
/// \p Batch sequences, a table wide enough for \p MaxSeqlenKv keys; with
/// host copies, every length and page index) into \p C.
void checkPageForm(const PagedKV &KV, int64_t Batch, int64_t PageSize,
                   int64_t MaxSeqlenKv, PagedCall &C);

/// Which paged call an argument check is for (its messages name it).
enum class PagedCallKind { Decode, Prefill };

/// Checks a paged call's finals and custom inputs against \p G for the call
/// shape \p S. Decode takes every class but full (NotSupportedYet): per-row
/// and per-query-token inputs as q's rows ([B, H, Sq] and [B, Sq], packed
/// [H, Tq] and [Tq]), per-key and per-key-token ones as [B, H, K] and
/// [B, K] with K at least the plan's key bound S.Skv, indexed by the key's
/// position in its sequence. Prefill takes scalar and per-head inputs only
/// (NotSupportedYet naming the input).
void checkPagedInputs(const ir::Graph &G, const CallShape &S,
                      const TensorView *Finals, const InputMap &Inputs,
                      PagedCallKind Kind);

/// log2 of a power-of-two page size (the kernels' page_shift).
int pageShift(int64_t PageSize);

/// Writes \p C's page description into a paged kernel's arguments
/// (PagedDecodeArgs, PagedFwdArgs: the same fields).
template <typename PagedArgs>
void setPageArgs(PagedArgs &A, const PagedCall &C, int64_t PageSize) {
  A.pages = C.Pages;
  A.seq_lens = C.SeqLens;
  A.indptr = C.Indptr;
  A.last_page_len = C.LastPageLen;
  A.table_stride = C.TableStride;
  A.page_shift = pageShift(PageSize);
  A.num_pages = int(C.K.NumPages);
  A.num_indices = int(C.NumIndices);
}

/// The bounds a paged call's tensors describe: q's batch, heads and
/// queries, the caches' KV heads and page size, KV.MaxSeqlenKv. Checks q
/// and the caches (InvalidArgument naming them).
DecodeBounds pagedCallBounds(const Signature &Sig, const TensorView &Q,
                             const PagedKV &KV);

/// Checks every argument of a paged call against the signature, the
/// definition \p G and the plan's bounds \p B (InvalidArgument naming the
/// argument and the expected value; NotSupportedYet for full custom
/// inputs). With KV.Host, also every page index and length on the host.
PagedCall validatePagedCall(const ir::Graph &G, const Signature &Sig,
                            const DecodeBounds &B, const TensorView &Q,
                            const PagedKV &KV, const TensorView &Out,
                            const TensorView *Finals, const InputMap &Inputs);

/// cu_seqlens_q of a packed paged call: int32 [batch + 1], contiguous, at
/// least two entries (InvalidArgument naming it).
void checkCuSeqlensQ(const TensorView &T);

/// The bounds a packed decode call's tensors describe (decodePagedVarlen):
/// cu_seqlens_q's batch, q's heads, \p MaxSeqlenQ (1 to 16), the caches'
/// KV heads and page size, KV.MaxSeqlenKv; Packed set.
DecodeBounds packedDecodeBounds(const Signature &Sig, const TensorView &Q,
                                const TensorView &CuSeqlensQ,
                                int64_t MaxSeqlenQ, const PagedKV &KV);

/// The plan's bounds that a packed paged call (decode or prefill) is
/// checked against.
struct PackedPagedBounds {
  int64_t Batch = 0, Heads = 0, HeadsKv = 0, PageSize = 0, MaxSeqlenKv = 0;
  int64_t MaxSeqlenQ = 0; ///< the call shape's query bound
};

/// The checks a packed paged call shares, decode or prefill: q and out
/// [Tq, H, D] against the plan's heads, cu_seqlens_q of the plan's batch,
/// the caches against its KV heads, page size and key bound, the page form,
/// finals and custom inputs (checkPagedInputs for \p Kind); fills the call
/// shape.
PagedCall checkPackedPagedCall(const ir::Graph &G, const Signature &Sig,
                               const PackedPagedBounds &B, const TensorView &Q,
                               const TensorView &CuSeqlensQ, const PagedKV &KV,
                               const TensorView &Out, const TensorView *Finals,
                               const InputMap &Inputs, PagedCallKind Kind);

/// validatePagedCall for a packed call of a plan made with Packed: q and
/// out [Tq, H, D], cu_seqlens_q [B + 1], finals [F, H, Tq]; with
/// KV.Host->CuSeqlensQ, every query range on the host too.
PagedCall validatePackedDecodeCall(const ir::Graph &G, const Signature &Sig,
                                   const DecodeBounds &B, const TensorView &Q,
                                   const TensorView &CuSeqlensQ,
                                   const PagedKV &KV, const TensorView &Out,
                                   const TensorView *Finals,
                                   const InputMap &Inputs);

/// The element strides (token, head) and token count of new K or V tokens
/// [T, heads_kv, dim] checked for appendPaged, and the slot mapping [T]
/// (int32 or int64).
struct AppendCall {
  int64_t Tokens = 0;
  int64_t K[2] = {0, 0}, V[2] = {0, 0};
  PageGeometry KC, VC;
  bool Slots64 = false;
};
AppendCall validateAppend(const Signature &Sig, const TensorView &K,
                          const TensorView &V, const PagedKV &KV,
                          const TensorView &SlotMapping);

/// The configuration paged decode runs over pages of \p PageSize keys:
/// \p Named (one the signature names) at every page size, else
/// decode_sm80's default for \p T's head dims, arch and the page size.
codegen::DecodeConfig pagedDecodeConfig(const std::optional<codegen::DecodeConfig> &Named,
                                        const KernelTarget &T, int64_t PageSize);

/// The paged kernels of one definition and signature, compiled on first
/// use, and the workspace of calls that plan themselves.
class PagedDecodeRunner {
public:
  /// \p Named: the configuration of every page size, or none for
  /// decode_sm80's default of each (DecodeConfig::defaultFor).
  PagedDecodeRunner(const CompiledDefinition &Def, const KernelTarget &T,
                    std::optional<codegen::DecodeConfig> Named);
  ~PagedDecodeRunner();

  /// makeDecodePlan for this kernel on the current device; loads it.
  DecodePlan plan(const DecodeBounds &B);
  /// InvalidArgument unless this runner made \p P (plan()).
  void checkPlan(const DecodePlan &P) const;
  /// Launches \p P's kernels for a validated call; no host decision, no
  /// allocation, no synchronisation.
  /// \p Counters: zeroed arrival counts of the split kernel's last-CTA
  /// merge (decodeMergeCounters), or null for the merge kernel (a caller's
  /// workspace is not known to hold zeros).
  void run(const DecodePlan &P, const PagedCall &C, const TensorView &Q,
           const TensorView &Out, const TensorView *Finals, void *Workspace,
           const InputMap &Inputs, CUstream Stream,
           unsigned *Counters = nullptr);
  /// A plan for \p B made for this call, with a workspace of its own
  /// (grown, never shrunk).
  void runEager(const DecodeBounds &B, const PagedCall &C, const TensorView &Q,
                const TensorView &Out, const TensorView *Finals,
                const InputMap &Inputs, CUstream Stream);
  /// The kernel of every row-step mode a page size can pick (what
  /// precompile compiles: a plan's page size is not known ahead).
  std::vector<codegen::KernelSource> sources() const;

private:
  /// One kernel of the definition: the copies of one row-step mode
  /// (generatePagedDecode's PageMode), loaded on its first plan.
  struct Instance {
    codegen::DecodeConfig Config;
    codegen::KernelSource Source;
    CacheResult Cached;
    KernelModule Module;
    CUfunction Decode = nullptr, Merge = nullptr;
  };
  /// The configuration of pages of \p PageSize rows.
  codegen::DecodeConfig configFor(int64_t PageSize) const;
  /// The kernel of pages of \p PageSize rows: its configuration's tile and
  /// row-step mode (attnc::decode_paged_kernel_mode; -1 where it has none).
  codegen::KernelSource sourceFor(int64_t PageSize) const;
  /// The loaded kernel of pages of \p PageSize rows, compiled on first use.
  Instance &instance(int64_t PageSize);
  /// The kernel \p P was made for; InvalidArgument where this runner made
  /// no such plan.
  const Instance &planned(const DecodePlan &P) const;

  const CompiledDefinition &Def;
  KernelTarget Target;
  std::optional<codegen::DecodeConfig> Named;
  /// By kernel key; and the kernel each planned page size runs (a plan
  /// names its kernel and page size).
  std::map<std::string, std::unique_ptr<Instance>> Instances;
  std::map<int64_t, Instance *> ByPageSize;
  analysis::MergeKind MergeKind;
  /// runEager's workspace, per stream (calls on different streams may run
  /// at once).
  PerStream<DeviceArena> Workspace =
      perStream<DeviceArena>(std::string("paged decode workspace"));
  /// runEager's arrival counts (decodeMergeCounters), per stream.
  PerStream<ZeroedCounters> Counters{[] {
    return std::make_unique<ZeroedCounters>("decode arrival counters");
  }};
};

/// Whether the paged decode kernel may address its copies by row steps
/// (PagedDecodeArgs::strides32): the byte page strides of \p K and \p V
/// not negative and within 31 bits, and their byte slot strides times
/// max(\p PageSize, \p BlockN) too. Else every copy computes its own
/// 64-bit offset.
bool pagedStrides32(const PageGeometry &K, const PageGeometry &V,
                    int64_t PageSize, int BlockN);

/// Whether ATTNC_PAGED_DECODE_GATHER=1 forces the per-copy 64-bit
/// addressing whatever the strides (its test and measurement); any other
/// value than 0 or 1 is a UserError, asked before the launch.
bool pagedDecodeGather();

/// Whether decode's splits merge in the split kernel, the last CTA of each
/// row block merging its rows (DecodeArgs::counters), rather than in the
/// merge kernel: where ATTNC_DECODE_LAST_CTA=1 (measured slower than the
/// merge kernel, so not the default); any other value than 0 or 1 is a
/// UserError, asked before any launch.
bool decodeMergeInSplits();

/// Whether decode's merge is launched as the split kernel's programmatic
/// dependent: on sm_90a unless ATTNC_DECODE_PDL=0 (the plain launch, for
/// comparison). Any other value is a UserError; callers ask before the
/// split kernel's launch, so a bad value launches nothing.
bool decodeMergeDependent(GpuArch Arch);

/// Launches decode's split merge \p Merge (one CTA of HeadDimV / 2
/// threads per query row, the split kernel's \p Params) after the split
/// kernel on \p Stream: as its programmatic dependent where \p Dependent
/// (decodeMergeDependent; the merge waits on the device), else plainly.
void launchDecodeMerge(CUfunction Merge, bool Dependent, unsigned Rows,
                       int HeadDimV, CUstream Stream, void **Params);

/// A validated public merge: the kernel's arguments, its rows, the dtype,
/// and whether the definition's combine merges (the kernel generated for
/// the definition, codegen::generateMergeResults) or a derived rule (the
/// runtime's attnc_merge_results).
struct MergeCall {
  attnc::MergeResultsArgs Args{};
  int64_t Rows = 0;
  int HeadDimV = 0;
  bool Bf16 = false;
  bool Combine = false;
};
/// Checks a public merge (InvalidArgument naming the argument; UserError
/// where \p G's results do not merge).
MergeCall validateMerge(const ir::Graph &G, const Signature &Sig,
                        const std::vector<PartialResult> &Parts,
                        const TensorView &Out, const TensorView *Finals);
/// Launches a validated merge: by the runtime's attnc_merge_results, or
/// for a combine (C.Combine) by \p CombineSrc's attnc_merge_results_combine
/// (generateMergeResults of the definition; compiled on first use).
void launchMergeResults(GpuArch Arch, const MergeCall &C,
                        const codegen::KernelSource *CombineSrc,
                        CUstream Stream);

/// The sources of the merge and append kernels for \p Arch (launch*
/// compile them on first use; Attention::precompile ahead of time).
codegen::KernelSource mergeResultsSource(GpuArch Arch);
/// Whether launchMergeResults runs \p C by merge_results_vec (8 columns a
/// thread): a derived merge whose HeadDimV is a multiple of 8 (at most
/// 1024) and whose parts and output have 16-byte aligned addresses and
/// strides of multiples of 8 elements.
bool mergeResultsVec8(const MergeCall &C);
codegen::KernelSource pagedAppendSource(GpuArch Arch);

/// Copies new tokens into pages (Attention::appendPaged), compiled once.
void launchPagedAppend(GpuArch Arch, const AppendCall &A, const TensorView &K,
                       const TensorView &V, const PagedKV &KV,
                       const TensorView &SlotMapping, CUstream Stream);

} // namespace attn::runtime

#endif
