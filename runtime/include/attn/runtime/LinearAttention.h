// Linear attention at run time: a LinearAttentionDef compiled for one
// signature, run on device pointers with every argument validated first.
#ifndef ATTN_RUNTIME_LINEARATTENTION_H
#define ATTN_RUNTIME_LINEARATTENTION_H

#include "attn/codegen/KernelSource.h"
#include "attn/codegen/LinearConfig.h"
#include "attn/dsl/Definition.h"
#include "attn/dsl/Problem.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Bundle.h"

#include <cuda.h>

#include <map>
#include <memory>
#include <string>

namespace attn::runtime {

class DeviceArena;
class LinearBackwardRunner;

/// Sizes of a linear-attention call: batch, value heads, q/k heads (a
/// divisor of Heads; the seeds' ngroups) and sequence length.
struct LinearShape {
  int64_t Batch = 1, Heads = 1, HeadsQK = 1, Seq = 1;
};

/// What is fixed when a LinearAttention is made; batch, heads and sequence
/// length are read from the tensors at each call.
struct LinearSignature {
  /// F16 or BF16 (isAttentionDtype; another is a UserError).
  DType Dtype = DType::F16;
  int HeadDim = 128;  ///< D of q and k: 64, 128 or 256
  int HeadDimV = 128; ///< DV of v: a multiple of 64 up to 512
  attn::Layout TensorLayout = attn::Layout::BSHD;
  /// None: the arch of the current device.
  std::optional<GpuArch> Arch;
  /// The skeleton, by its table name; empty: the table's linear one
  /// (linear_chunk, the only one today).
  std::string Skeleton;
  /// "c64v64w4b8" etc.: that configuration for every call (forward and
  /// backward). Empty: a tuned configuration from TuneFile when it has an
  /// entry for the call's shape (docs/tuning.md), else the skeleton's
  /// default.
  std::string Config;
  /// A tune JSON file to read linear_chunk configurations from.
  std::string TuneFile;
  /// A call whose shape has no entry is tuned first (forward and backward;
  /// seconds, and the device is synchronised) and the entry merged into
  /// TuneFile, or remembered for the process when there is none.
  bool Tune = false;
};

/// The kernel target of \p Def under \p Sig for \p Arch in direction \p D.
KernelTarget linearKernelTarget(const CompiledDefinition &Def,
                                const LinearSignature &Sig, GpuArch Arch,
                                Direction D);

/// Gradients of custom inputs by name: a float32 tensor of the input's
/// shape ([] or [1] scalar, [H] per head, [B,H,T] per row), contiguous.
using LinearInputGrads = std::map<std::string, TensorView>;

/// The tensors of a backward call. q/k/v/decay/initial_state are the
/// forward's inputs; dout is like out; dq, dk, dv like q, k, v. Optional:
/// dfinal_state (the gradient reaching the final state, [B,H,D,DV] fp32),
/// ddecay ([B,H,T] fp32, only when the definition reads the decay) and
/// dinitial_state ([B,H,D,DV] fp32).
struct LinearBackwardTensors {
  const TensorView &Q, &K, &V;
  const TensorView *Decay;
  const TensorView &DOut;
  const TensorView *InitialState;
  const TensorView *DFinalState;
  const TensorView &DQ, &DK, &DV;
  const TensorView *DDecay;
  const TensorView *DInitialState;
};

/// The most new tokens per sequence one decodeStep() takes.
constexpr int64_t LinearDecodeMaxTokens = 16;

/// The tensors of a decode step: N (1 to 16) new tokens for each of B
/// sequences. q [B,N,Hq,D], k [B,N,Hk,D], v and out [B,N,H,DV] (BSHD;
/// BHSD puts heads before the tokens), decay [B,H,N] float32 exactly when
/// decay_mod reads it. The states are float32 [P,H,D,DV], contiguous,
/// 16-byte aligned: sequence b reads pool entry StateIndex[b] of StateIn
/// and writes it to the same entry of StateOut, which may be StateIn
/// itself (in place) or a buffer that does not overlap it. Optional:
/// StateIndex, int32 [B] (without it P must be B and sequence b uses entry
/// b; an entry outside [0, P) skips the sequence: its outputs and states
/// are not touched; two sequences must not name one entry), and Positions,
/// int32 [B], the position in its sequence of each row's first new token
/// (the mods' t; 0 without it). Per-token custom inputs are [B,H,N].
struct LinearDecodeTensors {
  const TensorView &Q, &K, &V, &Out;
  const TensorView *Decay;
  const TensorView &StateIn, &StateOut;
  const TensorView *StateIndex = nullptr;
  const TensorView *Positions = nullptr;
};

/// The tensors of a packed (variable-length) forward of B sequences laid
/// end to end: q [T,Hq,D], k [T,Hk,D], v and out [T,H,DV] (T the tokens of
/// all sequences; the signature's layout does not apply), CuSeqlens int32
/// [B+1] on the device with 0 = cu[0] <= cu[1] <= ... <= cu[B] = T (its
/// values are not read on the host, so not checked), the decay float32
/// [1,H,T] (any strides) exactly when decay_mod reads it, per-token custom
/// inputs [1,H,T]; InitialState and FinalState float32 [B,H,D,DV],
/// contiguous, optional. Chunks never cross a sequence's end; a sequence of
/// no tokens passes its initial state (or zero) through. The mods see b = 0
/// and t counted from their sequence's start.
struct LinearVarlenTensors {
  const TensorView &Q, &K, &V, &Out;
  const TensorView *Decay;
  const TensorView &CuSeqlens;
  const TensorView *InitialState = nullptr;
  const TensorView *FinalState = nullptr;
};

/// The tensors of a packed backward: the packed forward's q, k, v, decay,
/// CuSeqlens and InitialState (LinearVarlenTensors), dout like its out, dq,
/// dk, dv like q, k, v ([T, heads, dim]). Optional: DFinalState and
/// DInitialState float32 [B,H,D,DV] contiguous (B the sequences), DDecay
/// float32 [1,H,T] contiguous (only when the definition reads the decay).
/// Custom-input gradients as backward()'s, per-token ones [1,H,T].
struct LinearVarlenBackwardTensors {
  const TensorView &Q, &K, &V;
  const TensorView *Decay;
  const TensorView &DOut;
  const TensorView &CuSeqlens;
  const TensorView *InitialState;
  const TensorView *DFinalState;
  const TensorView &DQ, &DK, &DV;
  const TensorView *DDecay;
  const TensorView *DInitialState;

  /// The same tensors without the offsets.
  LinearBackwardTensors asBackward() const {
    return {Q, K, V, Decay, DOut, InitialState, DFinalState,
            DQ, DK, DV, DDecay, DInitialState};
  }
};

/// A linear-attention definition compiled for a signature. Per (batch,
/// value head h), with q, k, v after their mods and g = decay_mod(decay):
///   S_t = exp(g_t)·S_{t−1} + k_tᵀ v_t,   o_t = q_t S_t,
/// S_{−1} the initial state (zero when none is given). Tensors: q
/// [B,T,Hq,D], k [B,T,Hk,D], v and out [B,T,H,DV] for BSHD (heads before
/// seq for BHSD), Hq and Hk dividing H; decay [B,H,T] float32 (any
/// strides), given exactly when decay_mod reads it; initial and final
/// states [B,H,D,DV] float32, contiguous.
/// LinearAttention::precompile for each arch of \p Archs (Sig.Arch set to it).
std::vector<PrecompiledKernel>
precompileLinear(const dsl::DefinitionBase &Def, LinearSignature Sig,
                 const PrecompileSet &What,
                 const std::vector<GpuArch> &Archs);

class LinearAttention {
public:
  /// Compiles the definition and the forward kernel (UserError for a
  /// definition that is not linear or a signature the kernels do not
  /// support). The backward kernels are compiled on the first backward().
  LinearAttention(const dsl::DefinitionBase &Def, const LinearSignature &Sig);
  /// The same for a definition compiled already, which must outlive the
  /// object (the autotuner makes one per candidate configuration).
  LinearAttention(const CompiledDefinition &Def, const LinearSignature &Sig);
  /// The same for a definition compiled already that the object keeps (one
  /// with no DefinitionBase: an IR JSON file's).
  LinearAttention(CompiledDefinition &&Def, const LinearSignature &Sig);
  ~LinearAttention();
  LinearAttention(const LinearAttention &) = delete;
  LinearAttention &operator=(const LinearAttention &) = delete;

  /// Validates every argument (InvalidArgument naming the argument and the
  /// expected value; nothing is launched then) and runs the forward on
  /// \p Stream. Custom scalars are kernel arguments: a new value never
  /// recompiles.
  void forward(const TensorView &Q, const TensorView &K, const TensorView &V,
               const TensorView &Out, const TensorView *Decay,
               const InputMap &Inputs = {},
               const TensorView *InitialState = nullptr,
               const TensorView *FinalState = nullptr,
               CUstream Stream = nullptr);

  /// Validates every argument, then computes dq, dk, dv (and ddecay,
  /// dinitial_state, the custom-input gradients named in \p InputGrads
  /// when asked for) with the chunk states recomputed. Deterministic: the
  /// same inputs give the same bits. Workspace is allocated on the device
  /// as needed and kept for the next call.
  void backward(const LinearBackwardTensors &T, const InputMap &Inputs = {},
                const LinearInputGrads &InputGrads = {},
                CUstream Stream = nullptr);

  /// Validates every argument and runs the forward of a packed batch
  /// (LinearVarlenTensors) on \p Stream, one launch; its kernel is
  /// compiled on the first call for each configuration.
  void forwardVarlen(const LinearVarlenTensors &T, const InputMap &Inputs = {},
                     CUstream Stream = nullptr);

  /// Validates every argument (InvalidArgument naming it; nothing is
  /// launched then) and computes the gradients of a packed forward
  /// (LinearVarlenBackwardTensors) as backward() does, each sequence's
  /// chunks apart: the gradients are those of each sequence run on its own
  /// (its mods seeing b = 0 and t from its start). Deterministic; its
  /// kernels are compiled on the first call for each configuration, and
  /// the configuration is forwardVarlen()'s for the same tensors.
  void backwardVarlen(const LinearVarlenBackwardTensors &T,
                      const InputMap &Inputs = {},
                      const LinearInputGrads &InputGrads = {},
                      CUstream Stream = nullptr);

  /// Validates every argument (InvalidArgument naming it; nothing is
  /// launched then) and runs one recurrent decode step on \p Stream: per
  /// sequence and value head, S ← exp(g_t)·S + k_tᵀ v_t and o_t = q_t·S
  /// for each new token in order, the mods applied in fp32, S in fp32. One
  /// kernel launch and no other host work once the decode kernel is
  /// compiled (on the first call, or by decodeSource()): the call can be
  /// captured in a CUDA graph.
  void decodeStep(const LinearDecodeTensors &T, const InputMap &Inputs = {},
                  CUstream Stream = nullptr);
  /// Compiles the decode kernel if that has not happened yet.
  const codegen::KernelSource &decodeSource();

  const CompiledDefinition &definition() const { return Def; }
  /// The spec compiled when the object was made: Sig.Config or the default.
  const codegen::LinearKernelSpec &spec() const { return Spec; }
  /// The configuration a call of shape \p S uses (Sig.Config; else a
  /// matching tune-file entry; else, with Tune, one tuned now; else the
  /// default), as the selector (Selector.h) decides it.
  codegen::LinearConfig configFor(const LinearShape &S);
  /// The same as the selector's choice, with where it came from.
  KernelChoice choiceFor(const LinearShape &S);
  /// The selector's choice without a shape (what spec() holds).
  const KernelChoice &choice() const;
  /// The configuration of the last forward() or backward() call (spec()'s
  /// before the first).
  const codegen::LinearConfig &lastConfig() const { return Last; }
  const codegen::KernelSource &forwardSource() const;
  const CacheResult &forwardCacheResult() const;
  /// Compiles the backward kernels if that has not happened yet.
  const codegen::KernelSource &backwardSource();
  /// Compiles, without a GPU and without a call, the kernels of \p What's
  /// directions for spec()'s configuration (Forward: forward and
  /// forwardVarlen; Backward: backward and backwardVarlen; Decode:
  /// decodeStep) through the kernel
  /// cache, and returns them (Bundle.h). Configurations that only a tune
  /// file selects for a shape are not included.
  std::vector<PrecompiledKernel> precompile(const PrecompileSet &What);

private:
  struct Kernels;
  /// The kernels of \p C, compiled (forward) on first use.
  Kernels &kernelsFor(const codegen::LinearConfig &C);
  /// \p K's backward runner, made (its kernels compiled) on first use.
  LinearBackwardRunner &ensureBackward(Kernels &K);
  /// The kernels of the call: spec()'s unless a tune file or Tune decides.
  Kernels &select(int64_t B, int64_t H, int64_t Hq, int64_t Hk, int64_t T);

  void init();

  /// The definition when the object compiled it; Def refers to it or to
  /// the caller's.
  std::unique_ptr<CompiledDefinition> Owned;
  const CompiledDefinition &Def;
  LinearSignature Sig;
  std::unique_ptr<KernelSelector> Selector;
  codegen::LinearKernelSpec Spec;
  codegen::LinearConfig Last;
  std::map<std::string, std::unique_ptr<Kernels>> ByConfig;
  /// What concurrent calls need (LinearAttention.cpp): the lock that
  /// serialises the calls of several host threads, and the backward's
  /// scratch, one per stream, shared by every configuration's runner.
  struct CallState;
  std::unique_ptr<CallState> Calls;
  struct DecodeKernel;
  /// Made on the first decodeStep() or decodeSource().
  std::unique_ptr<DecodeKernel> Decode;
  DecodeKernel &ensureDecode();
};

} // namespace attn::runtime

#endif
