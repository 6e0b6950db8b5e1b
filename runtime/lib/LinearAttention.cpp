// LinearAttention: compile the linear_chunk forward kernel for a signature,
// validate each call, launch the forward; the backward goes to a
// LinearBackwardRunner per configuration.
#include "attn/runtime/LinearAttention.h"
#include "attn/codegen/Arch.h"
#include "attn/Pipeline.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/runtime/KernelCache.h"
#include "attn/runtime/Selector.h"

#include "DeviceArena.h"
#include "PerStream.h"
#include "ForwardLaunch.h"
#include "KernelModule.h"
#include "LinearBackwardRunner.h"
#include "LinearValidate.h"
#include "../kernels/linear_decode_args.cuh"

#include "attn/runtime/LinearTuner.h"

#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <mutex>

namespace attn::runtime {

struct LinearAttention::Kernels {
  codegen::LinearKernelSpec Spec;
  codegen::LinearSmem Smem;
  codegen::KernelSource FwdSrc;
  CacheResult FwdCache;
  KernelModule FwdMod;
  CUfunction Fwd = nullptr;
  /// The backward, compiled on the first backward() with this config, and
  /// the packed one on the first backwardVarlen().
  std::unique_ptr<LinearBackwardRunner> Bwd, VarBwd;
  /// The packed forward, compiled on the first forwardVarlen().
  codegen::KernelSource VarSrc;
  CacheResult VarCache;
  KernelModule VarMod;
  CUfunction Var = nullptr;
};

struct LinearAttention::CallState {
  std::recursive_mutex Lock;
  PerStream<DeviceArena> Work =
      perStream<DeviceArena>(std::string("linear workspace"));

  std::unique_lock<std::recursive_mutex> lock() {
    return std::unique_lock<std::recursive_mutex>(Lock);
  }
  /// The context of the first launching call, where the kernels are
  /// loaded: a call in another one is refused (enterBoundContext).
  CUcontext Context = nullptr;
  int Ordinal = -1;
  void enterDevice() { enterBoundContext(Context, Ordinal, "LinearAttention"); }
};

struct LinearAttention::DecodeKernel {
  codegen::KernelSource Src;
  CacheResult Cache;
  KernelModule Mod;
  CUfunction Fn = nullptr;
};

LinearAttention::LinearAttention(const dsl::DefinitionBase &D,
                                 const LinearSignature &S)
    : Owned(std::make_unique<CompiledDefinition>(compile(D))), Def(*Owned),
      Sig(S), Calls(std::make_unique<CallState>()) {
  init();
}

LinearAttention::LinearAttention(const CompiledDefinition &D,
                                 const LinearSignature &S)
    : Def(D), Sig(S),
      Calls(std::make_unique<CallState>()) {
  init();
}

LinearAttention::LinearAttention(CompiledDefinition &&D,
                                 const LinearSignature &S)
    : Owned(std::make_unique<CompiledDefinition>(std::move(D))),
      Def(*Owned), Sig(S), Calls(std::make_unique<CallState>()) {
  init();
}

void LinearAttention::init() {
  checkAttentionDtype(Sig.Dtype, "signature");
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Linear)
    throw UserError("'" + Def.Graph->name() +
                    "' is not linear attention; use Attention");
  KernelTarget T = linearKernelTarget(Def, Sig, resolveArch(Sig.Arch),
                                     Direction::Forward);
  Selector = std::make_unique<KernelSelector>(
      Def, T,
      KernelPolicy::parse(T, Sig.Skeleton, Sig.Config, Sig.TuneFile, Sig.Tune));
  Spec = T.linearSpec();
  Spec.Config = std::get<codegen::LinearConfig>(Selector->initial().Config);
  Last = Spec.Config;
  kernelsFor(Spec.Config);
}

LinearAttention::~LinearAttention() = default;

const KernelChoice &LinearAttention::choice() const {
  return Selector->initial();
}

KernelTarget linearKernelTarget(const CompiledDefinition &Def,
                                const LinearSignature &Sig, GpuArch Arch,
                                Direction D) {
  return KernelTarget::of(Def, D, Sig.Dtype, Sig.HeadDim, Sig.HeadDimV, Arch);
}

LinearAttention::Kernels &
LinearAttention::kernelsFor(const codegen::LinearConfig &C) {
  std::unique_ptr<Kernels> &K = ByConfig[C.str()];
  if (!K) {
    auto New = std::make_unique<Kernels>();
    New->Spec = Spec;
    New->Spec.Config = C;
    New->Spec.validate();
    New->Smem = codegen::linearSharedBytes(New->Spec);
    New->FwdSrc = codegen::generateLinearForward(Def, New->Spec);
    New->FwdCache = KernelCache::global().getOrCompile(New->FwdSrc);
    K = std::move(New);
  }
  return *K;
}

KernelChoice LinearAttention::choiceFor(const LinearShape &S) {
  auto CallLock = Calls->lock();
  return Selector->forShape(
      TuneShape{S.Batch, S.Heads, S.HeadsQK, S.Seq, S.Seq}, [&] {
        return tuneLinear(Def, Sig, Spec.Arch, S, TuneOptions(), nullptr).Entry;
      });
}

codegen::LinearConfig LinearAttention::configFor(const LinearShape &S) {
  auto CallLock = Calls->lock();
  if (!Selector->dependsOnShape())
    return Spec.Config;
  return std::get<codegen::LinearConfig>(choiceFor(S).Config);
}

LinearAttention::Kernels &LinearAttention::select(int64_t B, int64_t H,
                                                  int64_t Hq, int64_t Hk,
                                                  int64_t T) {
  // The common case stays free of lookups: an explicit or default config.
  Last = Selector->dependsOnShape() ? configFor({B, H, std::min(Hq, Hk), T})
                                    : Spec.Config;
  return kernelsFor(Last);
}

const codegen::KernelSource &LinearAttention::forwardSource() const {
  return ByConfig.at(Spec.Config.str())->FwdSrc;
}
const CacheResult &LinearAttention::forwardCacheResult() const {
  return ByConfig.at(Spec.Config.str())->FwdCache;
}

LinearBackwardRunner &LinearAttention::ensureBackward(Kernels &K) {
  if (!K.Bwd)
    K.Bwd = std::make_unique<LinearBackwardRunner>(Def, K.Spec);
  return *K.Bwd;
}

const codegen::KernelSource &LinearAttention::backwardSource() {
  auto CallLock = Calls->lock();
  return ensureBackward(kernelsFor(Spec.Config)).source();
}

void LinearAttention::forward(const TensorView &Q, const TensorView &Kt,
                              const TensorView &V, const TensorView &Out,
                              const TensorView *Decay, const InputMap &Inputs,
                              const TensorView *InitialState,
                              const TensorView *FinalState, CUstream Stream) {
  auto CallLock = Calls->lock();
  LinearCallShape C = validateLinearForward(Def, Sig, Q, Kt, V, Out, Decay,
                                            Inputs, InitialState, FinalState);
  Calls->enterDevice();
  Kernels *K = &select(C.B, C.H, C.Hq, C.Hk, C.T);
  const codegen::LinearKernelSpec &Spec = K->Spec;
  attnc::LinearArgs A = linearForwardArgs(C, Spec, Q, Kt, V, Decay);
  A.o = Out.Data;
  A.o_sb = C.O[0];
  A.o_sh = C.O[1];
  A.o_ss = C.O[2];
  A.init_state =
      InitialState ? static_cast<const float *>(InitialState->Data) : nullptr;
  A.final_state = FinalState ? static_cast<float *>(FinalState->Data) : nullptr;
  std::vector<uint64_t> Slots = linearInputSlots(*Def.Graph, Inputs, C.H);
  if (!K->FwdMod.loaded()) {
    K->FwdMod.load(K->FwdCache, Spec.Arch);
    K->Fwd = K->FwdMod.function("attnc_linear_fwd");
    K->FwdMod.allowSharedBytes(K->Fwd, K->Smem.Fwd,
                               "linear config " + Spec.Config.str());
  }
  void *Params[] = {&A, Slots.data()};
  launchLinear(K->Fwd, unsigned(A.slices), unsigned(C.B * C.H), 1,
               unsigned(Spec.Config.Warps * 32), K->Smem.Fwd, Stream, Params,
               "launch attnc_linear_fwd");
}

void LinearAttention::backward(const LinearBackwardTensors &T,
                               const InputMap &Inputs,
                               const LinearInputGrads &InputGrads,
                               CUstream Stream) {
  auto CallLock = Calls->lock();
  LinearBackwardShape R =
      validateLinearBackward(Def, Sig, T, Inputs, InputGrads);
  Calls->enterDevice();
  const LinearCallShape &C = R.Fwd;
  Kernels &K = select(C.B, C.H, C.Hq, C.Hk, C.T);
  ensureBackward(K).run(R, T, Inputs, InputGrads, Calls->Work.get(Stream), Stream);
}

static_assert(LinearDecodeMaxTokens == attnc::dec::kMaxTokens,
              "the validation's token limit is the kernel's");

void LinearAttention::forwardVarlen(const LinearVarlenTensors &T,
                                    const InputMap &Inputs, CUstream Stream) {
  auto CallLock = Calls->lock();
  LinearVarlenShape R = validateLinearVarlen(Def, Sig, T, Inputs);
  Calls->enterDevice();
  const LinearCallShape &C = R.Call;
  Kernels &K = select(R.Seqs, C.H, C.Hq, C.Hk,
                      std::max<int64_t>(1, C.T / R.Seqs));
  const codegen::LinearKernelSpec &Spec = K.Spec;
  if (!K.Var) {
    if (K.VarSrc.Source.empty()) {
      K.VarSrc = codegen::generateLinearForwardVarlen(Def, Spec);
      K.VarCache = KernelCache::global().getOrCompile(K.VarSrc);
    }
    K.VarMod.load(K.VarCache, Spec.Arch);
    K.Var = K.VarMod.function("attnc_linear_fwd_varlen");
    K.VarMod.allowSharedBytes(K.Var, K.Smem.Fwd,
                              "linear config " + Spec.Config.str());
  }
  attnc::LinearArgs A = linearForwardArgs(C, Spec, T.Q, T.K, T.V, T.Decay);
  A.o = T.Out.Data;
  A.o_sb = C.O[0];
  A.o_sh = C.O[1];
  A.o_ss = C.O[2];
  A.init_state =
      T.InitialState ? static_cast<const float *>(T.InitialState->Data) : nullptr;
  A.final_state =
      T.FinalState ? static_cast<float *>(T.FinalState->Data) : nullptr;
  A.cu_seqlens = static_cast<const int *>(T.CuSeqlens.Data);
  A.seqs = int(R.Seqs); // the kernel ranks the sequences by length
  // One wave: the SMs times the CTAs an SM holds (those the packed
  // forward's registers are capped for, which its shared memory allows).
  A.seq_split = linearVarlenSplitRows(
      R.Seqs, C.H, R.Seqs * C.H * A.slices,
      int64_t(currentDevice().MultiProcessors) *
          codegen::linearSharedBytes(Spec).FwdMinBlocks);
  std::vector<uint64_t> Slots = linearInputSlots(*Def.Graph, Inputs, C.H);
  void *Params[] = {&A, Slots.data()};
  launchLinear(K.Var, unsigned(A.slices), unsigned((R.Seqs + A.seq_split) * C.H), 1,
               unsigned(Spec.Config.Warps * 32), K.Smem.Fwd, Stream, Params,
               "launch attnc_linear_fwd_varlen");
}

void LinearAttention::backwardVarlen(const LinearVarlenBackwardTensors &T,
                                     const InputMap &Inputs,
                                     const LinearInputGrads &InputGrads,
                                     CUstream Stream) {
  auto CallLock = Calls->lock();
  LinearVarlenBackwardShape R =
      validateLinearVarlenBackward(Def, Sig, T, Inputs, InputGrads);
  Calls->enterDevice();
  const LinearCallShape &C = R.Bwd.Fwd;
  // The configuration forwardVarlen() takes for the same tensors.
  Kernels &K = select(R.Seqs, C.H, C.Hq, C.Hk,
                      std::max<int64_t>(1, C.T / R.Seqs));
  if (!K.VarBwd)
    K.VarBwd = std::make_unique<LinearBackwardRunner>(Def, K.Spec,
                                                      /*Varlen=*/true);
  LinearPackedBatch P;
  P.CuSeqlens = static_cast<const int *>(T.CuSeqlens.Data);
  P.Seqs = R.Seqs;
  K.VarBwd->run(R.Bwd, T.asBackward(), Inputs, InputGrads, Calls->Work.get(Stream), Stream, P);
}

LinearAttention::DecodeKernel &LinearAttention::ensureDecode() {
  if (!Decode) {
    auto New = std::make_unique<DecodeKernel>();
    New->Src = codegen::generateLinearDecode(Def, Spec);
    New->Cache = KernelCache::global().getOrCompile(New->Src);
    Decode = std::move(New);
  }
  return *Decode;
}

const codegen::KernelSource &LinearAttention::decodeSource() {
  auto CallLock = Calls->lock();
  return ensureDecode().Src;
}

void LinearAttention::decodeStep(const LinearDecodeTensors &T,
                                 const InputMap &Inputs, CUstream Stream) {
  auto CallLock = Calls->lock();
  LinearDecodeShape R = validateLinearDecode(Def, Sig, T, Inputs);
  Calls->enterDevice();
  const LinearCallShape &C = R.Call;
  DecodeKernel &K = ensureDecode();
  const int MaxSmem = attnc::dec::smem_bytes(Sig.HeadDim, LinearDecodeMaxTokens);
  if (!K.Mod.loaded()) {
    K.Mod.load(K.Cache, Spec.Arch);
    K.Fn = K.Mod.function("attnc_linear_decode");
    K.Mod.allowSharedBytes(K.Fn, MaxSmem, "the linear decode step");
  }
  attnc::LinearDecodeArgs A{};
  A.q = T.Q.Data;
  A.k = T.K.Data;
  A.v = T.V.Data;
  A.o = T.Out.Data;
  A.decay = T.Decay ? static_cast<const float *>(T.Decay->Data) : nullptr;
  A.state_in = static_cast<const float *>(T.StateIn.Data);
  A.state_out = static_cast<float *>(T.StateOut.Data);
  A.state_index =
      T.StateIndex ? static_cast<const int *>(T.StateIndex->Data) : nullptr;
  A.positions =
      T.Positions ? static_cast<const int *>(T.Positions->Data) : nullptr;
  copyStrides({{&A.q_sb, C.Q},
               {&A.k_sb, C.K},
               {&A.v_sb, C.V},
               {&A.o_sb, C.O},
               {&A.decay_sb, C.Decay}});
  A.batch = int(C.B);
  A.heads = int(C.H);
  A.heads_q = int(C.Hq);
  A.heads_k = int(C.Hk);
  A.tokens = int(C.T);
  A.pool = int(R.Pool);
  std::vector<uint64_t> Slots = linearInputSlots(*Def.Graph, Inputs, C.H);
  void *Params[] = {&A, Slots.data()};
  launchLinear(K.Fn, unsigned(Sig.HeadDimV / attnc::dec::kCols),
               unsigned(C.B * C.H), 1, unsigned(attnc::dec::kThreads),
               attnc::dec::smem_bytes(Sig.HeadDim, int(C.T)), Stream, Params,
               "launch attnc_linear_decode");
}

std::vector<PrecompiledKernel>
LinearAttention::precompile(const PrecompileSet &What) {
  auto CallLock = Calls->lock();
  std::vector<PrecompiledKernel> Out;
  auto Add = [&](const codegen::KernelSource &Src, const CacheResult &R) {
    Out.push_back({Src, R.Cubin, cacheSourceName(R.Source)});
  };
  Kernels &K = kernelsFor(Spec.Config);
  if (What.Forward) {
    Add(K.FwdSrc, K.FwdCache);
    // forwardVarlen's kernel: any signature runs packed batches.
    if (K.VarSrc.Source.empty()) {
      K.VarSrc = codegen::generateLinearForwardVarlen(Def, K.Spec);
      K.VarCache = KernelCache::global().getOrCompile(K.VarSrc);
    }
    Add(K.VarSrc, K.VarCache);
  }
  if (What.Backward) {
    LinearBackwardRunner &B = ensureBackward(K);
    Add(B.source(), B.cacheResult());
    // backwardVarlen's kernels: any signature runs packed batches.
    if (!K.VarBwd)
      K.VarBwd = std::make_unique<LinearBackwardRunner>(Def, K.Spec,
                                                        /*Varlen=*/true);
    Add(K.VarBwd->source(), K.VarBwd->cacheResult());
  }
  if (What.Decode) {
    DecodeKernel &D = ensureDecode();
    Add(D.Src, D.Cache);
  }
  return Out;
}

std::vector<PrecompiledKernel>
precompileLinear(const dsl::DefinitionBase &Def, LinearSignature Sig,
                 const PrecompileSet &What,
                 const std::vector<GpuArch> &Archs) {
  if (Archs.empty())
    throw InvalidArgument("precompile: no arch given; expected one or more "
                          "of " + archNamesText().str());
  std::vector<PrecompiledKernel> Out;
  CompiledDefinition Compiled = compile(Def);
  for (GpuArch A : Archs) {
    Sig.Arch = A;
    LinearAttention L(Compiled, Sig);
    std::vector<PrecompiledKernel> Kernels = L.precompile(What);
    Out.insert(Out.end(), std::make_move_iterator(Kernels.begin()),
               std::make_move_iterator(Kernels.end()));
  }
  return Out;
}

} // namespace attn::runtime
