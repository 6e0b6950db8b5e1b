// The linear_chunk entry: chunked linear attention (intra-chunk masked
// attention plus inter-chunk state), forward and backward from one
// configuration, every arch.
#include "Entries.h"
#include "TypedSkeleton.h"

#include "attn/runtime/LinearTuner.h"

namespace attn::runtime::skeletons {

namespace {

class LinearChunk final : public TypedSkeleton<codegen::LinearConfig> {
public:
  LinearChunk()
      : TypedSkeleton("linear_chunk", ir::DefinitionKind::Linear,
                      /*Forward=*/true, /*Backward=*/true) {}

  llvm::StringRef configForm() const override {
    return "c<chunk>v<value slice>w<warps>b<backward warps>";
  }
  SkeletonConfig defaultFor(const KernelTarget &T) const override {
    return codegen::LinearConfig::defaultFor(T.HeadDim, T.HeadDimV, T.Arch);
  }
  std::vector<SkeletonConfig> enumerate(const KernelTarget &T) const override {
    std::vector<SkeletonConfig> All;
    for (const codegen::LinearConfig &C : linearCandidates(T.HeadDim, T.HeadDimV))
      All.push_back(C);
    return All;
  }
  std::string configError(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    return messageOf([&] { spec(C, T).validate(); });
  }
  std::string pruneBeforeCompile(const SkeletonConfig &C, const KernelTarget &T,
                                 const ResourceLimits &L) const override {
    return linearPruneBeforeCompile(spec(C, T), L);
  }
  std::vector<std::string>
  judgedEntries(const codegen::KernelSource &Src) const override {
    return linearJudgedEntries(Src);
  }
  std::string pruneAfterCompile(const SkeletonConfig &C,
                                const std::vector<KernelResources> &R,
                                const ResourceLimits &L) const override {
    return linearPruneAfterCompile(get(C), R, L);
  }
  codegen::KernelSource generate(const CompiledDefinition &Def,
                                 const KernelTarget &T,
                                 const SkeletonConfig &C) const override {
    codegen::LinearKernelSpec Spec = spec(C, T);
    Spec.validate();
    return T.Dir == Direction::Forward
               ? codegen::generateLinearForward(Def, Spec)
               : codegen::generateLinearBackward(Def, Spec);
  }
  LaunchShape launchShape(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    const codegen::LinearConfig &L = get(C);
    codegen::LinearSmem Smem = codegen::linearSharedBytes(spec(C, T));
    return T.Dir == Direction::Forward
               ? LaunchShape{L.Chunk, L.SliceV, 32 * L.Warps, Smem.Fwd}
               : LaunchShape{L.Chunk, L.SliceV, 32 * L.BwdWarps, Smem.Grads};
  }

private:
  codegen::LinearKernelSpec spec(const SkeletonConfig &C,
                                 const KernelTarget &T) const {
    codegen::LinearKernelSpec Spec = T.linearSpec();
    Spec.Config = get(C);
    return Spec;
  }
};

} // namespace

const Skeleton &linearChunk() {
  static const LinearChunk Entry;
  return Entry;
}

} // namespace attn::runtime::skeletons
