// The runtime entry point: an attention variant compiled for one problem
// signature, run on device pointers with every argument validated first.
#ifndef ATTN_RUNTIME_ATTENTION_H
#define ATTN_RUNTIME_ATTENTION_H

#include "attn/GpuArch.h"
#include "attn/codegen/KernelSource.h"
#include "attn/dsl/Definition.h"
#include "attn/dsl/Problem.h"
#include "attn/runtime/BlockMask.h"
#include "attn/runtime/Bundle.h"

#include <cuda.h> // CUstream only; nothing links libcuda

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

// This header is public (docs/architecture.md, "Public headers"): it names
// the compiler's and the selector's types only by declaration, and no LLVM
// or DLPack header reaches it.
namespace attn {
struct CompiledDefinition;
} // namespace attn

namespace attn::analysis {
struct MaskAnalysis;
} // namespace attn::analysis

namespace attn::runtime {

struct KernelTarget;
struct KernelPolicy;
struct KernelChoice;
class KernelSelector;
struct TuneShape;
struct CacheResult;
enum class Direction : uint8_t;

/// The element type was runtime::ElemType; it is attn::DType now (one enum
/// for signatures and tensor views). The alias goes in the next release.
using ElemType [[deprecated("use attn::DType")]] = DType;
[[deprecated("use attn::dtypeName")]] inline const char *
elemTypeName(DType T) {
  return dtypeName(T).data();
}

/// A non-owning view of a device tensor: pointer, element type, shape and
/// strides in elements (any strides; the innermost must be 1 for q/k/v/o).
struct TensorView {
  void *Data = nullptr;
  DType Type = DType::F16;
  std::vector<int64_t> Shape;
  std::vector<int64_t> Strides;

  /// A contiguous (row-major) view.
  static TensorView contiguous(void *Data, DType T,
                               std::vector<int64_t> Shape);
  /// A view of a DLPack tensor (kDLCUDA; float16, bfloat16, float32,
  /// int32 or int64): pass a `DLTensor` of <dlpack/dlpack.h> (DLPack 0.6
  /// or later), which the caller includes; this header does not.
  template <typename DLTensorT>
  static TensorView fromDLPack(const DLTensorT &T) {
    return fromDLPackFields(T.data, T.byte_offset, int(T.device.device_type),
                            T.dtype.code, T.dtype.bits, T.dtype.lanes, T.ndim,
                            T.shape, T.strides);
  }
  /// fromDLPack's checks and view, from the DLTensor's fields.
  static TensorView fromDLPackFields(void *Data, uint64_t ByteOffset,
                                     int DeviceType, uint8_t Code,
                                     uint8_t Bits, uint16_t Lanes, int Ndim,
                                     const int64_t *Shape,
                                     const int64_t *Strides);

  /// The same memory seen with one more dimension, of \p Size, inserted
  /// before dimension \p At (0 to rank) with stride 0: every index along it
  /// reads the same elements. A [B, S] buffer of document ids becomes the
  /// [B, H, S] that a per_row or per_key input takes with
  /// `ids.broadcastDim(1, H)`, with no copy (a per_query_token or
  /// per_key_token input takes the [B, S] buffer itself). InvalidArgument
  /// for \p At past the rank or a negative \p Size.
  TensorView broadcastDim(size_t At, int64_t Size) const;
};

/// Custom-input values: a number for a scalar input (float for a float32
/// one, int32_t for an int32 one), a tensor view for the others ([H],
/// [B,H,Sq], [B,H,Skv], [B,H,Sq,Skv], [B,Sq], [B,Skv]) of the input's
/// element type (DType::F32 or DType::I32).
using InputValue = std::variant<float, int32_t, TensorView>;
using InputMap = std::map<std::string, InputValue>;

/// What is fixed when an Attention is made. Sequence lengths, batch and
/// head counts are read from the tensors at each call. Names (skeleton,
/// configurations) are parsed once, when the Attention is made.
struct Signature {
  /// F16 or BF16 (isAttentionDtype; another is a UserError).
  DType Dtype = DType::F16;
  int HeadDim = 128;
  int HeadDimV = 128;
  attn::Layout TensorLayout = attn::Layout::BSHD;
  /// None: the arch of the current device.
  std::optional<GpuArch> Arch;
  /// The forward's skeleton, by its table name ("fwd_sm90", "fwd_sm80",
  /// "decode_sm80"); empty: decode_sm80 for a dense call of at most 16
  /// queries or a packed one whose max_seqlen_q is at most 16 (the
  /// short-query rule, Selector.h's decodeChoice), else the first of the
  /// table that supports the signature on the arch (fwd_sm90 on sm_90a
  /// where it runs the head dims, else fwd_sm80). Naming decode_sm80 makes
  /// a call of more than 16 queries an InvalidArgument.
  std::string Skeleton;
  /// The forward's configuration in its skeleton's form ("m128n64w4s2",
  /// "sm90.m128n128s3"; it implies the skeleton when Skeleton is empty).
  /// Empty: a tuned one from TuneFile if it has one for the call's shape,
  /// else the skeleton's default.
  std::string Config;
  /// The backward's configuration in its skeleton's form
  /// ("bwd90.kv64x128s2.q128x64w8" for bwd_sm90, "kv64x128w8.fused.s2" for
  /// bwd_sm80; it names the skeleton); empty: the first of the table that
  /// runs the signature (bwd_sm90 on sm_90a where it runs the head dims,
  /// else bwd_sm80) with its default.
  std::string BackwardConfig;
  /// The caller will call backward(): the backward's skeleton is chosen
  /// when the Attention is made, and head dims that no backward skeleton
  /// runs are a NotSupportedYet then, not at the first backward call.
  bool NeedsBackward = false;
  /// A tune JSON file to read configurations from (docs/tuning.md).
  std::string TuneFile;
  /// With TuneFile: a shape with no entry is tuned first and written.
  bool Tune = false;
  /// "generated", "reference", or empty: the first registered backend whose
  /// check() accepts the call. Skeleton and configurations are the
  /// generated backend's: naming them with "reference" is a UserError.
  std::string Backend;
};

/// The arch of \p A, or of the current device (DriverError without one;
/// UserError for a device attnc does not build for).
GpuArch resolveArch(const std::optional<GpuArch> &A);

/// The kernel target of \p Def under \p Sig for \p Arch in direction \p D:
/// the one place a signature becomes a spec.
KernelTarget kernelTarget(const CompiledDefinition &Def, const Signature &Sig,
                          GpuArch Arch, Direction D);

/// Attention::precompile for each arch of \p Archs (an Attention of \p Sig
/// with Signature::Arch set to it; with What.Backward, NeedsBackward too,
/// so that unsupported head dims are a NotSupportedYet naming them).
std::vector<PrecompiledKernel>
precompileAttention(const dsl::DefinitionBase &Def, Signature Sig,
                    const PrecompileSet &What,
                    const std::vector<GpuArch> &Archs);

/// A packed variable-length batch (Layout::THD): B sequences stored one
/// after another in q/out ([total_q, heads, dim]) and k/v ([total_kv,
/// heads_kv, dim]). Sequence b's queries are tokens [cu_seqlens_q[b],
/// cu_seqlens_q[b+1]) of q, its keys [cu_seqlens_kv[b], cu_seqlens_kv[b+1])
/// of k and v. Both are int32 device tensors of B+1 entries; their contents
/// are device data that the runtime never reads on the host, so it cannot
/// check them: they must start at 0, never decrease, end at most at the
/// tensors' token counts, and no sequence may be longer than the max
/// lengths given here (a violation reads or writes out of bounds). Empty
/// sequences are allowed. Inside a sequence, q_idx and kv_idx count from 0;
/// a query sequence shorter than its key sequence is aligned to the end of
/// it: score_mod and mask_mod see q_idx = i + (Skv_b - Sq_b) for its i-th
/// query (FlashAttention's bottom-right convention).
struct VarlenBatch {
  TensorView CuSeqlensQ;
  TensorView CuSeqlensKv;
  /// The longest query and key sequence (at least 1; they size the grid).
  int64_t MaxSeqlenQ = 0;
  int64_t MaxSeqlenKv = 0;
};

class AttentionBackend;
class BackwardRunner;
class PagedDecodeRunner;
class PagedPrefillRunner;
struct PagedKV;
struct PartialResult;
struct DecodeBounds;
struct DecodePlan;
struct PrefillBounds;
struct PrefillPlan;
struct BackendProblem;
struct CallShape;
struct ForwardTensors;

/// Where a backward writes custom-input gradients, by input name: a float32
/// device tensor of the input's shape ([] or [1] for a scalar, [H] for a
/// per-head input).
using InputGradMap = std::map<std::string, TensorView>;

/// An attention variant compiled for a signature. q is [B,S,H,D] for BSHD or
/// [B,H,S,D] for BHSD (k, v and o likewise); finals is [F,B,H,Sq] float32
/// for a variant with F final rowscales (softmax: F = 1, the LSE). A
/// signature with Layout::THD takes packed variable-length batches
/// (forwardVarlen, backwardVarlen): q [Tq,H,D], k and v [Tkv,Hkv,D], finals
/// [F,H,Tq].
///
/// What each direction runs (f16 and bf16; head_dim/head_dim_v):
///
///   direction  skeleton   arch           head dims
///   forward    fwd_sm90   sm_90a         D, DV each of 64, 128, 192, 256
///   forward    fwd_sm80   every arch     D, DV each of 64, 128, 192, 256
///   forward    decode_sm80 every arch    as fwd_sm80; 1 to 16 queries
///   backward   bwd_sm90   sm_90a         64/64, 128/128; 192/128, 192/256,
///                                        256/128, 256/256 (column split)
///   backward   bwd_sm80   every arch     64/64, 64/128, 128/64, 128/128,
///                                        128/256
///
/// A backward at other head dims (192/128 or 256/256 on sm_80/86/89, 192/192,
/// ...) is not supported yet: with Signature::NeedsBackward the constructor
/// says so (NotSupportedYet), else the first backward() call (UserError).
/// backwardVarlen runs bwd_sm80 on every arch, so its head dims are
/// bwd_sm80's.
///
/// Each call runs on a backend (attn/runtime/Backend.h): the one the
/// signature names, or else the first registered one whose check() accepts
/// the call ("generated", then "reference").
///
/// Devices: calls run in the context current on the calling thread (the one
/// cudaSetDevice or torch.cuda.device made current, else device 0's primary
/// context). An object keeps to the context of its first launching call:
/// make one per device.
///
/// Concurrency: one object may be called from several host threads and on
/// several streams at once. Calls are serialised on the host while they
/// enqueue work (a lock; only a first call's compile and Tune's timing wait
/// for anything), and the scratch the object keeps between calls (block
/// lists, backward and decode workspaces) is kept per stream, so calls on
/// different streams may run on the GPU at the same time; a stream being
/// captured borrows the last call's (docs/runtime.md, concurrent use). A
/// BlockMask passed to calls on several streams is only read by them;
/// refreshing it is ordered by its own stream only.
class Attention {
public:
  /// Compiles the definition and makes the named backend (or the first
  /// registered one), which compiles its kernel; UserError for a signature
  /// no backend supports, an unknown backend name, or a bad definition;
  /// NotSupportedYet with Signature::NeedsBackward when no backward
  /// skeleton runs the head dims (the message names each skeleton's).
  Attention(const dsl::DefinitionBase &Def, const Signature &Sig);
  /// The same for a definition compiled already (one with no
  /// DefinitionBase: an IR JSON file's); UserError if it is linear.
  Attention(CompiledDefinition Def, const Signature &Sig);
  ~Attention();
  Attention(const Attention &) = delete;
  Attention &operator=(const Attention &) = delete;

  /// Validates every argument (InvalidArgument naming the argument and the
  /// expected value; nothing is launched then), picks a backend, runs the
  /// forward. Custom scalars in \p Inputs are kernel arguments: a new value
  /// never recompiles.
  /// With \p Blocks (a BlockMask of this Attention's mask and the call's
  /// shape: UserError otherwise) no classification is launched; its lists
  /// decide which blocks are visited, whatever \p Inputs hold now.
  void forward(const TensorView &Q, const TensorView &K, const TensorView &V,
               const TensorView &Out, const TensorView *Finals,
               const InputMap &Inputs = {}, CUstream Stream = nullptr,
               const BlockMask *Blocks = nullptr);

  /// The block classification of this Attention's mask for calls of shape
  /// \p S with \p Inputs, made on \p Stream (the classification kernels
  /// of the forward kernel the shape selects and, with \p ForBackward, of
  /// the backward's, which it compiles if no call has). Pass it to any
  /// number of forward (and, made ForBackward, backward) calls of that
  /// shape, of this or another Attention of the same mask, signature and
  /// configurations. UserError for a definition without a mask_mod or
  /// another backend than "generated"; InvalidArgument for a bad shape or
  /// inputs (checkInputs' messages).
  BlockMask makeBlockMask(const MaskShape &S, const InputMap &Inputs = {},
                          CUstream Stream = nullptr, bool ForBackward = false);
  /// Classifies \p B's blocks again with \p Inputs, on \p Stream, into its
  /// own memory (new document ids each step, no allocation): B must be one
  /// makeBlockMask made for this Attention's mask (UserError otherwise).
  void refreshBlockMask(BlockMask &B, const InputMap &Inputs,
                        CUstream Stream = nullptr);
  /// A block mask from the user's lists (BlockLists, checked field by
  /// field: InvalidArgument naming the field and the expected value),
  /// re-tiled on the host to the kernels' blocks and copied to the device
  /// synchronously. No classification ever runs for it.
  BlockMask blockMaskFromLists(const MaskShape &S, const BlockLists &L,
                               bool ForBackward = false);

  /// The forward of a packed variable-length batch (VarlenBatch; the
  /// signature's layout must be THD). A name of its own, not an overload:
  /// `forward(q, k, v, o, f, {})` must keep meaning empty inputs. Custom inputs: scalar and per-head
  /// only (NotSupportedYet naming a per-row, per-key or full one). Runs on
  /// the generated backend.
  void forwardVarlen(const TensorView &Q, const TensorView &K,
                     const TensorView &V, const TensorView &Out,
                     const TensorView *Finals, const VarlenBatch &Batch,
                     const InputMap &Inputs = {}, CUstream Stream = nullptr);

  /// Decode over a paged KV cache (attn/runtime/Paged.h): q and out
  /// [B, Sq, H, D] (bshd) or [B, H, Sq, D] (bhsd), 1 to 16 queries per
  /// sequence, finals [F, B, H, Sq]; the keys of sequence b are its
  /// KV-cache tokens, their count read on the device. Query i of a sequence
  /// of L keys is q_idx L - Sq + i for score_mod and mask_mod (aligned to
  /// the end of the keys, as forwardVarlen's; a dense forward counts from
  /// 0). Custom inputs: every class but full (NotSupportedYet): per-row
  /// and per-query-token ones as q's rows ([B, H, Sq], [B, Sq]), per-key
  /// and per-key-token ones [B, H, K] and [B, K] with K at least the key
  /// bound (KV.MaxSeqlenKv; a plan's for runDecode), read at kv_idx, the key's position in its sequence
  /// (not its page slot). Plans each call (arithmetic, once the kernels are loaded) and uses a
  /// workspace of its own; runs on the generated backend's decode_sm80
  /// kernels.
  void decodePaged(const TensorView &Q, const PagedKV &KV,
                   const TensorView &Out, const TensorView *Finals,
                   const InputMap &Inputs = {}, CUstream Stream = nullptr);

  /// Plans paged decode calls within \p B (batch, heads, queries, the
  /// bound on keys, page size, a cap on splits) on the current device:
  /// compiles and loads the kernels, decides the split. The plan's
  /// WorkspaceBytes is what runDecode needs. InvalidArgument naming a bad
  /// bound.
  DecodePlan planDecode(const DecodeBounds &B);

  /// One paged decode call of plan \p P, arguments as decodePaged's (q's
  /// batch, heads and queries, the caches' heads and page size equal to the
  /// plan's; KV.MaxSeqlenKv at most its bound), \p Workspace device memory
  /// of at least P.WorkspaceBytes, 16-byte aligned. Validates on the host
  /// (shapes only; the index tensors are read on the device), then
  /// launches: no decision, device allocation or synchronisation, so a stream
  /// capture of it replays with new lengths, page tables and q (same
  /// addresses) within the plan's bounds (docs/runtime.md, CUDA graphs).
  void runDecode(const DecodePlan &P, const TensorView &Q, const PagedKV &KV,
                 const TensorView &Out, const TensorView *Finals,
                 void *Workspace, size_t WorkspaceBytes,
                 const InputMap &Inputs = {}, CUstream Stream = nullptr);

  /// Packed (THD) decode over a paged KV cache: q [Tq, H, D] and out [Tq,
  /// H, DV] (whatever the signature's layout), sequence b's queries the
  /// tokens [cu_seqlens_q[b], cu_seqlens_q[b + 1]) (int32 [B + 1], device
  /// data), 0 to \p MaxSeqlenQ of them (at most 16); finals [F, H, Tq]
  /// as a packed forward's. Query i of a sequence of n queries and L keys
  /// is q_idx L - n + i. The same kernels as decodePaged (split over the
  /// keys and merged likewise); KV and key-side inputs as decodePaged's,
  /// per-row and per-query-token inputs [H, Tq] and [Tq] (q's tokens). With
  /// KV.Host->CuSeqlensQ, the query ranges are checked on the host too.
  void decodePagedVarlen(const TensorView &Q, const TensorView &CuSeqlensQ,
                         int64_t MaxSeqlenQ, const PagedKV &KV,
                         const TensorView &Out, const TensorView *Finals,
                         const InputMap &Inputs = {}, CUstream Stream = nullptr);

  /// One packed decode call of plan \p P (planDecode of bounds with
  /// Packed set: QueriesPerSeq bounds each sequence's queries), arguments
  /// as decodePagedVarlen's; as runDecode, no host decision, allocation or
  /// synchronisation, so a captured graph replays with new counts in
  /// cu_seqlens_q (within the plan's bound and q's tokens), lengths, page
  /// tables and q.
  void runDecodeVarlen(const DecodePlan &P, const TensorView &Q,
                       const TensorView &CuSeqlensQ, const PagedKV &KV,
                       const TensorView &Out, const TensorView *Finals,
                       void *Workspace, size_t WorkspaceBytes,
                       const InputMap &Inputs = {}, CUstream Stream = nullptr);

  /// Paged prefill (attn/runtime/Paged.h): a packed batch of new query
  /// tokens over each sequence's paged keys. q [Tq, H, D] and out [Tq, H,
  /// DV] (whatever the signature's layout), sequence b's queries the tokens
  /// [cu_seqlens_q[b], cu_seqlens_q[b + 1]) (int32 [B + 1], device data);
  /// its keys are its KV-cache tokens (appended first with appendPaged),
  /// their count read on the device. Query i of a sequence of Sq queries
  /// and L keys is q_idx L - Sq + i (aligned to the end of the keys, so a
  /// causal mask lets it see the cached prefix and the new keys up to its
  /// own). finals [F, H, Tq]. Every definition's score_mod, mask and
  /// online function as in the forward; custom inputs scalar and per-head
  /// only (NotSupportedYet). \p MaxSeqlenQ bounds a sequence's queries,
  /// KV.MaxSeqlenKv its keys. Plans each call; runs fwd_sm90's paged kernel
  /// on sm_90a for pages of 8 tokens and more (unless the signature names
  /// fwd_sm80), else fwd_sm80's.
  void prefillPaged(const TensorView &Q, const TensorView &CuSeqlensQ,
                    int64_t MaxSeqlenQ, const PagedKV &KV,
                    const TensorView &Out, const TensorView *Finals,
                    const InputMap &Inputs = {}, CUstream Stream = nullptr);

  /// Plans paged prefill calls within \p B on the current device: compiles
  /// and loads the kernel, fixes the grid. InvalidArgument naming a bad
  /// bound.
  PrefillPlan planPrefill(const PrefillBounds &B);

  /// One paged prefill call of plan \p P, arguments as prefillPaged's
  /// (cu_seqlens_q of the plan's batch + 1 entries, q's heads and the
  /// caches' heads and page size the plan's, KV.MaxSeqlenKv at most its
  /// bound). Validates on the host (shapes only), then launches one kernel:
  /// no decision, allocation or synchronisation, so a stream capture of it
  /// replays with new lengths, page tables, q and cache contents (same
  /// addresses) within the plan's bounds (docs/runtime.md, CUDA graphs).
  void runPrefill(const PrefillPlan &P, const TensorView &Q,
                  const TensorView &CuSeqlensQ, const PagedKV &KV,
                  const TensorView &Out, const TensorView *Finals,
                  const InputMap &Inputs = {}, CUstream Stream = nullptr);

  /// Writes new tokens K [T, Hkv, D] and V [T, Hkv, DV] into KV's caches:
  /// token i goes to slot SlotMapping[i] (int32 or int64 [T]), page slot /
  /// page_size, position slot % page_size. A negative slot is skipped
  /// (padding), as is one past the caches (not checked on the host: the
  /// mapping is device data). Only the caches and the layout of KV are
  /// used.
  void appendPaged(const TensorView &K, const TensorView &V, const PagedKV &KV,
                   const TensorView &SlotMapping, CUstream Stream = nullptr);

  /// Merges 2 to 8 partial results of disjoint key sets of the same
  /// queries (PartialResult: o as a forward's out, [B, Sq, H, DV] or [B, H,
  /// Sq, DV], and its finals) into \p Out and \p Finals, the result over
  /// the union of the keys, by the rule analysis::analyzeResultMerge
  /// derives: a sum (sigmoid, ReLU: o and the finals add), a log-sum-exp
  /// (softmax: weights e^(lse_i - lse)) or the definition's own combine
  /// (retention_combine: a result is its state, the finals its rowscales;
  /// the kernel, generated on the first such call, runs the same Merge
  /// code as decode's split-KV). A part whose finals are -inf (no key)
  /// adds nothing. UserError for a definition whose results do not
  /// merge (no merge of its states, or an epilogue of another form; the
  /// message says why); InvalidArgument naming a malformed argument.
  /// Mask and score_mod see each part's own indices: merge parts whose
  /// calls gave each key the kv_idx it has in the union where they read it.
  void mergeResults(const std::vector<PartialResult> &Parts,
                    const TensorView &Out, const TensorView *Finals,
                    CUstream Stream = nullptr);

  /// Gradients of L = Σ out ∘ dout: dq, dk, dv (like q, k, v) and, in
  /// \p Grads, one float32 tensor for each custom input that requires a
  /// gradient. \p Out (the forward's output) is needed only when the
  /// variant's backward reads doosum = rowsum(dO∘O), \p Finals always when
  /// the variant has final rowscales (as the forward wrote them). Validates
  /// every argument first (InvalidArgument; nothing launched), then runs the
  /// deterministic backward kernels the selector chose (bwd_sm90 on sm_90a
  /// where it runs the head dims, else bwd_sm80; compiled on the first
  /// call; the same inputs give the same bits on every run, unless
  /// Signature::BackwardConfig names bwd_sm90's opt-in atomic dQ mode,
  /// `.atomic`). The backward has one implementation,
  /// whichever backend ran the forward.
  void backward(const TensorView &Q, const TensorView &K, const TensorView &V,
                const TensorView *Out, const TensorView &DOut,
                const TensorView *Finals, const TensorView &DQ,
                const TensorView &DK, const TensorView &DV,
                const InputMap &Inputs = {}, const InputGradMap &Grads = {},
                CUstream Stream = nullptr, const BlockMask *Blocks = nullptr);

  /// The backward of a packed variable-length batch, as forwardVarlen:
  /// dq like q, dk and dv like k and v ([T, H, D]).
  void backwardVarlen(const TensorView &Q, const TensorView &K,
                      const TensorView &V, const TensorView *Out,
                      const TensorView &DOut, const TensorView *Finals,
                      const TensorView &DQ, const TensorView &DK,
                      const TensorView &DV, const VarlenBatch &Batch,
                      const InputMap &Inputs = {},
                      const InputGradMap &Grads = {},
                      CUstream Stream = nullptr);

  /// Compiles, without a GPU and without a call, the kernels that calls of
  /// \p What's directions on this Attention's arch will load (through the
  /// kernel cache: found ones are not compiled again), and returns them,
  /// for a bundle (Bundle.h) or a warm cache. Kernels that only a shape's
  /// tune-file entry selects are not included. Decode with a THD
  /// signature has paged decode's kernels (decodePagedVarlen) and no merge;
  /// a backward at head dims no skeleton runs is the backward's UserError.
  std::vector<PrecompiledKernel> precompile(const PrecompileSet &What);

  const CompiledDefinition &definition() const;
  /// The kernel compiled at construction by the first backend made.
  const codegen::KernelSource &source() const;
  const CacheResult &cacheResult() const;
  /// Names of the final rowscales, in the order of the finals tensor.
  std::vector<std::string> finalNames() const;
  /// The backend that ran the last call of any thread ("" before the
  /// first).
  std::string lastBackend() const;
  /// The arch the kernels are built for.
  GpuArch arch() const { return Arch; }
  /// What the forward runs when no tune file decides: the selector's
  /// choice, made when the Attention was.
  const KernelChoice &forwardChoice() const;
  /// What the backward runs: the selector's choice, made on the first call
  /// that needs it (here or in backward()), since a forward-only user may
  /// use head dims that no backward skeleton runs. UserError with the
  /// skeleton's reason then; a Signature::BackwardConfig or
  /// Signature::NeedsBackward has it made when the Attention is.
  const KernelChoice &backwardChoice() const;
  /// What a dense backward call of \p SeqLenQ queries runs: backwardChoice(),
  /// except where that is the default at head dim 64 on sm_90a and the call
  /// has at least 4096 queries with a mask or 16384 without: then its form
  /// with the dQ turns taken ahead (.lean2.red2.; docs/runtime.md,
  /// "Backward").
  KernelChoice backwardChoiceFor(int64_t SeqLenQ) const;
  /// The forward's choice for a call of shape \p S (a tune-file lookup, or
  /// tuning with Signature::Tune, where the signature asks for them).
  KernelChoice forwardChoiceFor(const TuneShape &S) const;
  /// What a dense forward call of shape \p S runs: the short-query rule's
  /// decode kernel for at most 16 queries where the signature leaves the
  /// skeleton to it, else forwardChoiceFor(S).
  KernelChoice callChoiceFor(const TuneShape &S) const;
  /// What paged decode (decodePaged, a plan's runDecode) runs over pages of
  /// \p PageSize keys: the decode configuration the signature names, else
  /// decode_sm80's default for that page size (at d = dv = 128, pages of
  /// fewer than 16 keys run more warps than contiguous K/V).
  KernelChoice pagedDecodeChoice(int64_t PageSize) const;

private:
  AttentionBackend &backendAt(size_t I);
  AttentionBackend &choose(const BackendProblem &P);
  /// A validated forward: the kernel chosen for its shape, then a backend.
  void run(const CallShape &Shape, const ForwardTensors &T,
           const InputMap &Inputs, CUstream Stream,
           const BlockMaskData *Blocks = nullptr);
  /// The forward's kernel for a dense call of \p Shape, by the selector's
  /// rules (the short-query rule first).
  KernelChoice choiceFor(const CallShape &Shape) const;
  /// The backward's runner, made on first need.
  BackwardRunner &backwardRunner();
  /// \p B's data after checking it fits this Attention and a dense call of
  /// \p Shape (UserError naming what differs).
  const BlockMaskData &checkBlockMask(const BlockMask &B,
                                      const CallShape &Shape) const;
  /// Classifies for \p D's shape (its backward lists too where HasBwd).
  void classifyInto(BlockMaskData &D, const InputMap &Inputs,
                    CUstream Stream);
  /// The mask's expression (BlockMaskData::MaskKey); UserError without one.
  const std::string &maskKey() const;
  /// The mask analysis of the definition, made on first need.
  const analysis::MaskAnalysis &maskAnalysis() const;

  /// Holds the calls of other threads off while one enqueues: the lazy
  /// members below (backends, runners, kernels, selectors) are made and
  /// read under it. Recursive: public calls use one another.
  mutable std::recursive_mutex CallLock;
  std::unique_lock<std::recursive_mutex> lockCalls() const {
    return std::unique_lock<std::recursive_mutex>(CallLock);
  }
  /// Makes the device's context current on the calling thread (the one the
  /// caller made current, else device 0's primary context) before a launch;
  /// the first launching call binds the object to it (its modules and
  /// workspaces live there), and a later call in another context is an
  /// InvalidArgument that names both devices.
  void enterDevice();
  CUcontext Context = nullptr;
  int Ordinal = -1;

  Signature Sig;
  GpuArch Arch;
  /// The members whose types are the compiler's and the selector's
  /// (attn/runtime/lib/AttentionState.h); the references below name them
  /// as the implementation reads them.
  struct State;
  std::unique_ptr<State> St;
  CompiledDefinition &Def;
  KernelSelector &Fwd;
  /// The short-query rule's choice for this signature (decodeChoice, made
  /// once: a call only compares its query length), or none.
  std::optional<KernelChoice> &DecodeRule;
  KernelTarget &BwdTarget;
  KernelPolicy &BwdPolicy;
  /// Made on first need (backwardChoice()).
  std::optional<KernelSelector> &Bwd;
  /// Registered names in selection order (one name when Sig.Backend is
  /// set), and each backend once made.
  std::vector<std::string> Names;
  std::vector<std::unique_ptr<AttentionBackend>> Backends;
  std::unique_ptr<BackwardRunner> Backward;
  /// The paged decode kernels, made on the first paged call or plan.
  std::unique_ptr<PagedDecodeRunner> Paged;
  PagedDecodeRunner &pagedRunner();
  /// The paged prefill kernel, made on the first prefill call or plan.
  std::unique_ptr<PagedPrefillRunner> Prefill;
  PagedPrefillRunner &prefillRunner();
  /// The public merge's kernel for a definition's combine, generated on
  /// first need (codegen::generateMergeResults).
  std::unique_ptr<codegen::KernelSource> CombineMerge;
  const codegen::KernelSource &combineMergeSource();
  std::string Last;
  /// maskAnalysis() and maskKey(), computed once: a call with a block mask
  /// checks the key, and refreshBlockMask classifies, at every call.
  mutable std::unique_ptr<analysis::MaskAnalysis> MaskInfo;
  mutable std::string MaskKeyText;
};

} // namespace attn::runtime

#endif
