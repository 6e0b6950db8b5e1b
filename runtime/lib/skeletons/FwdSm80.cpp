// The fwd_sm80 entry: the portable FlashAttention-2-style forward
// (mma.sync, ldmatrix, cp.async), every arch attnc builds for.
#include "Entries.h"
#include "TypedSkeleton.h"

namespace attn::runtime::skeletons {

namespace {

class FwdSm80 final : public TypedSkeleton<codegen::FwdConfig> {
public:
  FwdSm80()
      : TypedSkeleton("fwd_sm80", ir::DefinitionKind::Transformer,
                      /*Forward=*/true, /*Backward=*/false) {}

  llvm::StringRef configForm() const override {
    return "m<block M>n<block N>w<warps>s<stages>";
  }
  SkeletonConfig defaultFor(const KernelTarget &T) const override {
    return codegen::FwdConfig::defaultFor(T.HeadDim, T.HeadDimV, T.Arch);
  }
  std::vector<SkeletonConfig> enumerate(const KernelTarget &) const override {
    std::vector<SkeletonConfig> All;
    for (const codegen::FwdConfig &C : codegen::FwdConfig::enumerate())
      All.push_back(C);
    return All;
  }
  std::string configError(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    return messageOf([&] { spec(C, T).validate(); });
  }
  std::string pruneBeforeCompile(const SkeletonConfig &C, const KernelTarget &T,
                                 const ResourceLimits &L) const override {
    return runtime::pruneBeforeCompile(get(C), T.HeadDim, T.HeadDimV, L);
  }
  std::vector<std::string>
  judgedEntries(const codegen::KernelSource &) const override {
    return {"attnc_fwd"};
  }
  std::string pruneAfterCompile(const SkeletonConfig &C,
                                const std::vector<KernelResources> &R,
                                const ResourceLimits &L) const override {
    return runtime::pruneAfterCompile(get(C), R.front(), L);
  }
  codegen::KernelSource generate(const CompiledDefinition &Def,
                                 const KernelTarget &T,
                                 const SkeletonConfig &C) const override {
    codegen::KernelSpec Spec = spec(C, T);
    Spec.validate();
    return codegen::generateForward(Def, Spec);
  }
  LaunchShape launchShape(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    const codegen::FwdConfig &F = get(C);
    return {F.BlockM, F.BlockN, F.Warps * 32,
            F.sharedBytes(T.HeadDim, T.HeadDimV)};
  }

private:
  codegen::KernelSpec spec(const SkeletonConfig &C,
                           const KernelTarget &T) const {
    codegen::KernelSpec Spec = T.kernelSpec();
    Spec.Config = get(C);
    return Spec;
  }
};

} // namespace

const Skeleton &fwdSm80() {
  static const FwdSm80 Entry;
  return Entry;
}

} // namespace attn::runtime::skeletons
