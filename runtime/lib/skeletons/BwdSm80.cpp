// The bwd_sm80 entry: the FlashAttention-2-style backward with recompute
// (a dK/dV kernel, and a dQ kernel or the fused dQ mode), every arch.
#include "Entries.h"
#include "TypedSkeleton.h"

namespace attn::runtime::skeletons {

namespace {

class BwdSm80 final : public TypedSkeleton<codegen::BwdConfig> {
public:
  BwdSm80()
      : TypedSkeleton("bwd_sm80", ir::DefinitionKind::Transformer,
                      /*Forward=*/false, /*Backward=*/true) {}

  llvm::StringRef configForm() const override {
    return "kv<M>x<N>w<warps>.q<M>x<N>w<warps>.s<stages> or "
           "kv<M>x<N>w<warps>.fused.s<stages>";
  }
  SkeletonConfig defaultFor(const KernelTarget &T) const override {
    return codegen::BwdConfig::defaultFor(T.HeadDim, T.HeadDimV, T.Arch);
  }
  /// The backward is not tuned: its space is its default.
  std::vector<SkeletonConfig> enumerate(const KernelTarget &T) const override {
    return {defaultFor(T)};
  }
  std::string configError(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    return messageOf([&] {
      codegen::validateBackward(T.kernelSpec(), get(C), T.NumFinals,
                                T.BackwardUsesDoosum);
    });
  }
  std::string pruneBeforeCompile(const SkeletonConfig &C, const KernelTarget &T,
                                 const ResourceLimits &L) const override {
    if (std::string Why = configError(C, T); !Why.empty())
      return Why;
    const codegen::BwdConfig &B = get(C);
    int Shared = B.dkdvSharedBytes(T.HeadDim, T.HeadDimV, T.NumFinals,
                                   T.BackwardUsesDoosum);
    if (!B.FusedDq)
      Shared = std::max(Shared, B.dqSharedBytes(T.HeadDim, T.HeadDimV));
    if (Shared > L.SharedBytesPerBlock)
      return "needs " + std::to_string(Shared) +
             " bytes of shared memory; " +
             std::to_string(L.SharedBytesPerBlock) + " allowed";
    return "";
  }
  std::vector<std::string>
  judgedEntries(const codegen::KernelSource &Src) const override {
    std::vector<std::string> Entries = {"attnc_bwd_dkdv"};
    for (const std::string &E : Src.Entries)
      if (E == "attnc_bwd_dq")
        Entries.push_back(E);
    return Entries;
  }
  std::string pruneAfterCompile(const SkeletonConfig &C,
                                const std::vector<KernelResources> &R,
                                const ResourceLimits &L) const override {
    const codegen::BwdConfig &B = get(C);
    int Threads[] = {32 * B.KvWarps, 32 * B.QWarps};
    for (size_t I = 0; I < R.size() && I < 2; ++I)
      if (std::string Why = pruneOnResources(Threads[I], R[I], L);
          !Why.empty())
        return Why;
    return "";
  }
  codegen::KernelSource generate(const CompiledDefinition &Def,
                                 const KernelTarget &T,
                                 const SkeletonConfig &C) const override {
    return codegen::generateBackward(Def, T.kernelSpec(), get(C));
  }
  LaunchShape launchShape(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    const codegen::BwdConfig &B = get(C);
    return {B.KvBlockM, B.KvBlockN, 32 * B.KvWarps,
            B.dkdvSharedBytes(T.HeadDim, T.HeadDimV, T.NumFinals,
                              T.BackwardUsesDoosum)};
  }
};

} // namespace

const Skeleton &bwdSm80() {
  static const BwdSm80 Entry;
  return Entry;
}

} // namespace attn::runtime::skeletons
