// LinearAttention: compile the linear_chunk kernels for a signature,
// validate each call, fill LinearArgs and the workspace, launch.
#include "attn/runtime/LinearAttention.h"

#include "ForwardLaunch.h"
#include "KernelModule.h"
#include "LinearValidate.h"

#include "attn/runtime/LinearTuner.h"

#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

// The argument structs, shared with the device code.
#include "../kernels/linear_chunk_args.cuh"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>


namespace attn::runtime {

struct LinearAttention::Kernels {
  codegen::LinearKernelSpec Spec;
  codegen::LinearSmem Smem;
  codegen::KernelSource FwdSrc;
  CacheResult FwdCache;
  KernelModule FwdMod;
  CUfunction Fwd = nullptr;
  bool HaveBwd = false;
  codegen::KernelSource BwdSrc;
  CacheResult BwdCache;
  KernelModule BwdMod;
  CUfunction States = nullptr, Grads = nullptr, GroupedGrads = nullptr,
             Combine = nullptr, Decay = nullptr, InputReduce = nullptr,
             PartialReduce = nullptr;
};

/// Device scratch for the backward, grown as calls need and kept.
struct LinearAttention::Workspace {
  CUdeviceptr Ptr = 0;
  size_t Bytes = 0;
  ~Workspace() {
    CudaDriver &D = CudaDriver::get();
    if (Ptr && D.available())
      D.cuMemFree(Ptr);
  }
  void ensure(size_t N) {
    if (N <= Bytes)
      return;
    CudaDriver &D = CudaDriver::get();
    if (Ptr)
      D.check(D.cuMemFree(Ptr), "cuMemFree(linear workspace)");
    Ptr = 0;
    Bytes = 0;
    D.check(D.cuMemAlloc(&Ptr, N), "cuMemAlloc(linear workspace)");
    Bytes = N;
  }
};

namespace {

/// The generated Inputs struct as slots, as every other kernel takes it
/// (ForwardLaunch.h); of the call's shape only the head count is read.
std::vector<uint64_t> linearInputSlots(const ir::Graph &G,
                                       const InputMap &Inputs, int64_t H) {
  CallShape C;
  C.H = H;
  return inputSlots(G, C, Inputs);
}

/// The forward's part of LinearArgs.
attnc::LinearArgs forwardArgs(const LinearCallShape &C,
                              const codegen::LinearKernelSpec &Spec,
                              const TensorView &Q, const TensorView &K,
                              const TensorView &V, const TensorView *Decay) {
  attnc::LinearArgs A{};
  A.q = Q.Data;
  A.k = K.Data;
  A.v = V.Data;
  A.decay = Decay ? static_cast<const float *>(Decay->Data) : nullptr;
  long long *Dst[] = {&A.q_sb, &A.k_sb, &A.v_sb, &A.decay_sb};
  const int64_t(*Src[])[3] = {&C.Q, &C.K, &C.V, &C.Decay};
  for (int I = 0; I < 4; ++I)
    for (int J = 0; J < 3; ++J)
      Dst[I][J] = (*Src[I])[J];
  A.batch = int(C.B);
  A.heads = int(C.H);
  A.heads_q = int(C.Hq);
  A.heads_k = int(C.Hk);
  A.seq = int(C.T);
  A.slices = codegen::linearSlices(Spec);
  A.chunks = int(codegen::linearChunks(Spec, C.T));
  return A;
}

void launch(CUfunction F, unsigned GX, unsigned GY, unsigned GZ,
            unsigned Threads, int Smem, CUstream S, void **Params,
            const char *What) {
  CudaDriver &D = CudaDriver::get();
  D.check(D.cuLaunchKernel(F, GX, GY, GZ, Threads, 1, 1, unsigned(Smem), S,
                           Params, nullptr),
          What);
}

} // namespace

LinearAttention::LinearAttention(const dsl::DefinitionBase &D,
                                 const LinearSignature &S)
    : Owned(compile(D)), Def(Owned), Sig(S), WS(std::make_unique<Workspace>()) {
  init();
}

LinearAttention::LinearAttention(const CompiledDefinition &D,
                                 const LinearSignature &S)
    : Def(D), Sig(S), WS(std::make_unique<Workspace>()) {
  init();
}

void LinearAttention::init() {
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
  return Selector->forShape(
      TuneShape{S.Batch, S.Heads, S.HeadsQK, S.Seq, S.Seq}, [&] {
        return tuneLinear(Def, Sig, Spec.Arch, S, TuneOptions(), nullptr).Entry;
      });
}

codegen::LinearConfig LinearAttention::configFor(const LinearShape &S) {
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

void LinearAttention::ensureBackward(Kernels &K) {
  if (K.HaveBwd)
    return;
  K.BwdSrc = codegen::generateLinearBackward(Def, K.Spec);
  K.BwdCache = KernelCache::global().getOrCompile(K.BwdSrc);
  K.HaveBwd = true;
}

const codegen::KernelSource &LinearAttention::backwardSource() {
  Kernels &K = kernelsFor(Spec.Config);
  ensureBackward(K);
  return K.BwdSrc;
}

void LinearAttention::forward(const TensorView &Q, const TensorView &Kt,
                              const TensorView &V, const TensorView &Out,
                              const TensorView *Decay, const InputMap &Inputs,
                              const TensorView *InitialState,
                              const TensorView *FinalState, CUstream Stream) {
  LinearCallShape C = validateLinearForward(Def, Sig, Q, Kt, V, Out, Decay,
                                            Inputs, InitialState, FinalState);
  Kernels *K = &select(C.B, C.H, C.Hq, C.Hk, C.T);
  const codegen::LinearKernelSpec &Spec = K->Spec;
  attnc::LinearArgs A = forwardArgs(C, Spec, Q, Kt, V, Decay);
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
  launch(K->Fwd, unsigned(A.slices), unsigned(C.B * C.H), 1,
         unsigned(Spec.Config.Warps * 32), K->Smem.Fwd, Stream, Params,
         "launch attnc_linear_fwd");
}

void LinearAttention::backward(const LinearBackwardTensors &T,
                               const InputMap &Inputs,
                               const LinearInputGrads &InputGrads,
                               CUstream Stream) {
  LinearBackwardShape R =
      validateLinearBackward(Def, Sig, T, Inputs, InputGrads);
  const LinearCallShape &C = R.Fwd;
  Kernels *K = &select(C.B, C.H, C.Hq, C.Hk, C.T);
  const codegen::LinearKernelSpec &Spec = K->Spec;
  ensureBackward(*K);
  if (!K->BwdMod.loaded()) {
    K->BwdMod.load(K->BwdCache, Spec.Arch);
    K->States = K->BwdMod.function("attnc_linear_bwd_states");
    K->Grads = K->BwdMod.function("attnc_linear_bwd_chunk");
    K->GroupedGrads = K->BwdMod.function("attnc_linear_bwd_chunk_grouped");
    K->Combine = K->BwdMod.function("attnc_linear_bwd_combine");
    K->Decay = K->BwdMod.function("attnc_linear_bwd_decay");
    K->InputReduce = K->BwdMod.function("attnc_linear_bwd_input_reduce");
    K->PartialReduce = K->BwdMod.function("attnc_linear_bwd_partial_reduce");
    std::string What = "linear config " + Spec.Config.str();
    K->BwdMod.allowSharedBytes(K->States, K->Smem.States, What);
    K->BwdMod.allowSharedBytes(K->Grads, K->Smem.Grads, What);
    K->BwdMod.allowSharedBytes(K->GroupedGrads, K->Smem.GroupedGrads, What);
  }

  attnc::LinearArgs A = forwardArgs(C, Spec, T.Q, T.K, T.V, T.Decay);
  A.init_state =
      T.InitialState ? static_cast<const float *>(T.InitialState->Data) : nullptr;
  A.dout = T.DOut.Data;
  A.dq = T.DQ.Data;
  A.dk = T.DK.Data;
  A.dv = T.DV.Data;
  long long *Dst[] = {&A.do_sb, &A.dq_sb, &A.dk_sb, &A.dv_sb};
  const int64_t(*Src[])[3] = {&R.DO, &R.DQ, &R.DK, &R.DV};
  for (int I = 0; I < 4; ++I)
    for (int J = 0; J < 3; ++J)
      Dst[I][J] = (*Src[I])[J];
  A.ddecay = T.DDecay ? static_cast<float *>(T.DDecay->Data) : nullptr;
  A.dfinal_state =
      T.DFinalState ? static_cast<const float *>(T.DFinalState->Data) : nullptr;
  A.dinit_state =
      T.DInitialState ? static_cast<float *>(T.DInitialState->Data) : nullptr;

  // Workspace regions (see LinearArgs), each 256-byte aligned.
  const ir::Graph &G = *Def.Graph;
  const int64_t NI = int64_t(G.decls().Inputs.size());
  const int64_t BH = C.B * C.H, BHT = BH * C.T, D = Spec.HeadDim;
  const int64_t Slices = A.slices, NC = A.chunks;
  const int64_t Groups = Spec.Config.BwdWarps / (Spec.Config.Chunk / 16);
  A.vin_parts = int(Slices * Groups);
  A.z_parts = int(Slices);
  // Where value heads share q or k heads, a chunk-gradient CTA takes a
  // sub-group of them (sharing one q and one k head) and sums their raw dq
  // and dk into a partial (ws_gq, ws_gk): the largest sub-group that still
  // leaves eight CTAs an SM.
  const bool Grouped = C.Hq < C.H || C.Hk < C.H;
  const int64_t Shared = std::gcd(C.H / C.Hq, C.H / C.Hk);
  A.group_heads = 1;
  if (Shared > 1) {
    const int64_t Want = 8 * int64_t(currentDevice().MultiProcessors);
    for (int64_t S = Shared; S >= 1; --S)
      if (Shared % S == 0 && (NC * C.B * C.H / S >= Want || S == 1)) {
        A.group_heads = int(S);
        break;
      }
  }
  const int64_t PartsQ = C.H / C.Hq / A.group_heads,
                PartsK = C.H / C.Hk / A.group_heads;
  const int64_t ElemBytes = 2;
  struct Region {
    void **Dst;
    int64_t Bytes;
  } Regions[] = {
      {&A.ws_h, BH * NC * D * Spec.HeadDimV * ElemBytes},
      {&A.ws_dh, BH * NC * D * Spec.HeadDimV * ElemBytes},
      {reinterpret_cast<void **>(&A.ws_z), A.z_parts * BH * NC * 4},
      {reinterpret_cast<void **>(&A.ws_dq), Slices > 1 ? Slices * BHT * D * 4 : 0},
      {reinterpret_cast<void **>(&A.ws_dk), Slices > 1 ? Slices * BHT * D * 4 : 0},
      {reinterpret_cast<void **>(&A.ws_vin), A.vin_parts * NI * BHT * 4},
      {reinterpret_cast<void **>(&A.ws_dlam), BHT * 4},
      {reinterpret_cast<void **>(&A.ws_cin), NI * BHT * 4},
      {reinterpret_cast<void **>(&A.ws_gq),
       Grouped ? C.B * C.Hq * PartsQ * C.T * D * 4 : 0},
      {reinterpret_cast<void **>(&A.ws_gk),
       Grouped ? C.B * C.Hk * PartsK * C.T * D * 4 : 0},
  };
  size_t Total = 0;
  for (const Region &Rg : Regions)
    Total += (size_t(Rg.Bytes) + 255) / 256 * 256;
  WS->ensure(Total);
  size_t Off = 0;
  for (const Region &Rg : Regions) {
    *Rg.Dst = Rg.Bytes ? reinterpret_cast<void *>(WS->Ptr + Off) : nullptr;
    Off += (size_t(Rg.Bytes) + 255) / 256 * 256;
  }

  std::vector<uint64_t> Slots = linearInputSlots(G, Inputs, C.H);
  void *Params[] = {&A, Slots.data()};
  launch(K->States, unsigned(Slices), unsigned(BH),
         unsigned(2 * D / codegen::LinearStateRows),
         unsigned(codegen::LinearStateWarps * 32), K->Smem.States,
         Stream, Params, "launch attnc_linear_bwd_states");
  if (Slices > 1) {
    // One CTA per (chunk, head, slice), partial sums; then the per-token
    // step over the slices (and the sub-groups' heads).
    launch(K->Grads, unsigned(NC), unsigned(BH), unsigned(Slices),
           unsigned(Spec.Config.BwdWarps * 32), K->Smem.Grads, Stream, Params,
           "launch attnc_linear_bwd_chunk");
    launch(K->Combine, unsigned((C.T + 7) / 8),
           unsigned(C.B * C.H / A.group_heads), 1, 256, 0, Stream, Params,
           "launch attnc_linear_bwd_combine");
  } else {
    launch(Grouped ? K->GroupedGrads : K->Grads, unsigned(NC),
           unsigned(C.B * C.H / A.group_heads), 1,
           unsigned(Spec.Config.BwdWarps * 32),
           Grouped ? K->Smem.GroupedGrads : K->Smem.Grads, Stream, Params,
           Grouped ? "launch attnc_linear_bwd_chunk_grouped"
                   : "launch attnc_linear_bwd_chunk");
  }
  for (int Which = 0; Grouped && Which < 2; ++Which) {
    attnc::LinearPartialReduceArgs PA{};
    PA.ws = Which == 0 ? A.ws_gq : A.ws_gk;
    PA.out = Which == 0 ? T.DQ.Data : T.DK.Data;
    const int64_t(&S)[3] = Which == 0 ? R.DQ : R.DK;
    PA.sb = S[0];
    PA.sh = S[1];
    PA.ss = S[2];
    PA.batch = int(C.B);
    PA.heads_out = int(Which == 0 ? C.Hq : C.Hk);
    PA.parts = int(Which == 0 ? PartsQ : PartsK);
    PA.seq = int(C.T);
    PA.dim = int(D);
    void *PP[] = {&PA};
    launch(K->PartialReduce, unsigned((C.T * D + 511) / 512),
           unsigned(C.B * PA.heads_out), 1, 256, 0, Stream, PP,
           "launch attnc_linear_bwd_partial_reduce");
  }
  launch(K->Decay, unsigned((NC + 3) / 4), unsigned(BH), 1, 128, 0, Stream,
         Params, "launch attnc_linear_bwd_decay");

  int64_t Index = 0;
  for (const ir::InputDecl &Decl : G.decls().Inputs) {
    auto It = InputGrads.find(Decl.Name);
    int64_t I = Index++;
    if (It == InputGrads.end())
      continue;
    attnc::LinearInputReduceArgs RA{};
    RA.cin = A.ws_cin + I * BHT;
    RA.out = static_cast<float *>(It->second.Data);
    RA.kind = Decl.Shape == ir::InputShape::PerRow    ? 0
              : Decl.Shape == ir::InputShape::PerHead ? 1
                                                      : 2;
    RA.batch = int(C.B);
    RA.heads = int(C.H);
    RA.seq = int(C.T);
    unsigned Grid = RA.kind == 0 ? unsigned(std::min<int64_t>(
                                       (BHT + 255) / 256, 65535))
                    : RA.kind == 1 ? unsigned(C.H)
                                   : 1u;
    void *RP[] = {&RA};
    launch(K->InputReduce, Grid, 1, 1, 256, 0, Stream, RP,
           "launch attnc_linear_bwd_input_reduce");
  }
}

} // namespace attn::runtime
