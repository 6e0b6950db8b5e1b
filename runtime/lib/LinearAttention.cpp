// LinearAttention: compile the linear_chunk forward kernel for a signature,
// validate each call, launch the forward; the backward goes to a
// LinearBackwardRunner per configuration.
#include "attn/runtime/LinearAttention.h"

#include "DeviceArena.h"
#include "KernelModule.h"
#include "LinearBackwardRunner.h"
#include "LinearValidate.h"

#include "attn/runtime/LinearTuner.h"

#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn::runtime {

struct LinearAttention::Kernels {
  codegen::LinearKernelSpec Spec;
  codegen::LinearSmem Smem;
  codegen::KernelSource FwdSrc;
  CacheResult FwdCache;
  KernelModule FwdMod;
  CUfunction Fwd = nullptr;
  /// The backward, compiled on the first backward() with this config.
  std::unique_ptr<LinearBackwardRunner> Bwd;
};

LinearAttention::LinearAttention(const dsl::DefinitionBase &D,
                                 const LinearSignature &S)
    : Owned(compile(D)), Def(Owned), Sig(S),
      WS(std::make_unique<DeviceArena>("linear workspace")) {
  init();
}

LinearAttention::LinearAttention(const CompiledDefinition &D,
                                 const LinearSignature &S)
    : Def(D), Sig(S),
      WS(std::make_unique<DeviceArena>("linear workspace")) {
  init();
}

void LinearAttention::init() {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Linear)
    throw UserError("'" + Def.Graph->name() +
                    "' is not linear attention; use Attention");
  Spec.Dtype = Sig.Dtype;
  Spec.HeadDim = Sig.HeadDim;
  Spec.HeadDimV = Sig.HeadDimV;
  Spec.Arch = Sig.Arch.empty() ? currentDevice().arch() : Sig.Arch;
  Spec.Config = Sig.Config.empty()
                    ? codegen::LinearConfig::defaultFor(
                          Spec.HeadDim, Spec.HeadDimV, Spec.Arch)
                    : codegen::LinearConfig::parse(Sig.Config);
  Spec.validate();
  Last = Spec.Config;
  kernelsFor(Spec.Config);
}

LinearAttention::~LinearAttention() = default;

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

codegen::LinearConfig LinearAttention::configFor(const LinearShape &S) {
  if (!Sig.Config.empty() || (Sig.TuneFile.empty() && !Sig.Tune))
    return Spec.Config;
  std::string Device;
  if (CudaDriver::get().available())
    Device = currentDevice().Name;
  return selectLinearConfig(Def, Sig, Spec.Arch, S, Device);
}

LinearAttention::Kernels &LinearAttention::select(int64_t B, int64_t H,
                                                  int64_t Hq, int64_t Hk,
                                                  int64_t T) {
  // The common case stays free of lookups: an explicit or default config.
  Last = !Sig.Config.empty() || (Sig.TuneFile.empty() && !Sig.Tune)
             ? Spec.Config
             : configFor({B, H, std::min(Hq, Hk), T});
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
  return ensureBackward(kernelsFor(Spec.Config)).source();
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
  LinearBackwardShape R =
      validateLinearBackward(Def, Sig, T, Inputs, InputGrads);
  const LinearCallShape &C = R.Fwd;
  Kernels &K = select(C.B, C.H, C.Hq, C.Hk, C.T);
  ensureBackward(K).run(R, T, Inputs, InputGrads, *WS, Stream);
}

} // namespace attn::runtime
