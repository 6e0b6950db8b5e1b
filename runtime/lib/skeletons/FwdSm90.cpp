// The fwd_sm90 entry: the Hopper forward (TMA on an mbarrier ring, wgmma,
// a producer warpgroup and one or two consumer warpgroups), sm_90a only.
#include "Entries.h"
#include "TypedSkeleton.h"

namespace attn::runtime::skeletons {

namespace {

class FwdSm90 final : public TypedSkeleton<codegen::Sm90Config> {
public:
  FwdSm90()
      : TypedSkeleton("fwd_sm90", ir::DefinitionKind::Transformer,
                      /*Forward=*/true, /*Backward=*/false) {}

  llvm::StringRef configForm() const override {
    return "sm90.m<block M>n<block N>s<stages>[p] (p: persistent)";
  }
  SkeletonConfig defaultFor(const KernelTarget &T) const override {
    return codegen::Sm90Config::defaultFor(T.HeadDim, T.HeadDimV);
  }
  std::vector<SkeletonConfig> enumerate(const KernelTarget &) const override {
    std::vector<SkeletonConfig> All;
    for (const codegen::Sm90Config &C : codegen::Sm90Config::enumerate())
      All.push_back(C);
    return All;
  }
  std::string configError(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    return codegen::sm90Unsupported(T.kernelSpec(), get(C));
  }
  std::string pruneBeforeCompile(const SkeletonConfig &C, const KernelTarget &T,
                                 const ResourceLimits &L) const override {
    return runtime::pruneBeforeCompile(get(C), T.kernelSpec(), L);
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
    return codegen::generateForwardSm90(Def, T.kernelSpec(), get(C));
  }
  LaunchShape launchShape(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    const codegen::Sm90Config &S = get(C);
    return {S.BlockM, S.BlockN, S.threads(),
            S.sharedBytes(T.HeadDim, T.HeadDimV)};
  }
  bool usesTensorMaps() const override { return true; }
};

} // namespace

const Skeleton &fwdSm90() {
  static const FwdSm90 Entry;
  return Entry;
}

} // namespace attn::runtime::skeletons
