// The "reference" backend: the ref_fwd kernel generated from the same IR,
// one CTA per query row; the oracle of the tests and the autotuner, and the
// fallback for calls the generated backend refuses.
#include "attn/runtime/Backend.h"

#include "ForwardLaunch.h"
#include "KernelModule.h"

#include "attn/runtime/CudaDriver.h"

#include <fmt/format.h>

namespace attn::runtime {

namespace {

class ReferenceBackend final : public AttentionBackend {
public:
  explicit ReferenceBackend(const BackendSetup &S)
      : Def(S.Def), Spec(S.Target.kernelSpec()) {
    Source = codegen::generateReference(Def, Spec);
    Cached = KernelCache::global().getOrCompile(Source);
  }

  const std::string &name() const override { return Name; }
  const codegen::KernelSource &source() const override { return Source; }
  const CacheResult &cacheResult() const override { return Cached; }

  std::string check(const BackendProblem &P) const override {
    if (P.Shape.Packed)
      return "packed variable-length batches run on the generated backend";
    if (P.Shape.Skv > codegen::ReferenceMaxKeys)
      return fmt::format("seq_kv {} is more than the {} keys whose scores "
                         "one CTA holds in shared memory",
                         P.Shape.Skv, codegen::ReferenceMaxKeys);
    if (P.Shape.B * P.Shape.H > 65535)
      return fmt::format("batch x heads is {}; at most 65535 are supported",
                         P.Shape.B * P.Shape.H);
    return "";
  }

  void forward(const BackendProblem &P, const ForwardTensors &T,
               const CallContext &Ctx) override {
    ForwardLaunch L =
        makeForwardLaunch(*Def.Graph, P.Shape, T, Ctx.Inputs, 1, 1);
    if (!Module.loaded()) {
      Module.load(Cached, Spec.Arch);
      Fn = Module.function("attnc_ref_fwd");
      Module.allowSharedBytes(Fn, codegen::referenceSharedBytes(Spec.HeadDim),
                              "the reference kernel");
    }
    CudaDriver &D = CudaDriver::get();
    void *Params[] = {&L.Args, L.InputSlots.data()};
    D.check(D.cuLaunchKernel(Fn, unsigned(P.Shape.Sq),
                             unsigned(P.Shape.B * P.Shape.H), 1,
                             codegen::ReferenceThreads, 1, 1,
                             codegen::referenceSharedBytes(Spec.HeadDim),
                             Ctx.Stream, Params, nullptr),
            "launch attnc_ref_fwd");
  }

private:
  const std::string Name = "reference";
  const CompiledDefinition &Def;
  codegen::KernelSpec Spec;
  codegen::KernelSource Source;
  CacheResult Cached;
  KernelModule Module;
  CUfunction Fn = nullptr;
};

} // namespace

std::unique_ptr<AttentionBackend> makeReferenceBackend(const BackendSetup &S) {
  return std::make_unique<ReferenceBackend>(S);
}

} // namespace attn::runtime
