// The bwd_sm90 entry: the Hopper backward (a wgmma dK/dV kernel with dQ
// fused in, or bwd_sm80's dQ kernel after it), sm_90a only.
#include "Entries.h"
#include "TypedSkeleton.h"

namespace attn::runtime::skeletons {

namespace {

class BwdSm90 final : public TypedSkeleton<codegen::BwdSm90Config> {
public:
  BwdSm90()
      : TypedSkeleton("bwd_sm90", ir::DefinitionKind::Transformer,
                      /*Forward=*/false, /*Backward=*/true) {}

  llvm::StringRef configForm() const override {
    return "bwd90.kv<M>x<N>s<stages>.q<M>x<N>w<warps>, "
           "bwd90.kv<M>x<N>s<stages>.fused or .atomic, or "
           "bwd90ws[2].kv<M>x<N>s<stages>[.split|.pp|.dqw|.lean|.lean2|.lean3].fused or .atomic "
           "(then .varlen: packed calls), bwd90ws.kv<M>x<N>s<stages>.lean2.bulk.fused (or .bulk2., "
           ".red2., .red.: turns taken ahead) or .atomic, "
           "or bwd90ws.kv64x64s<stages>.split.tw.fused or .split.ro.fused";
  }
  SkeletonConfig defaultFor(const KernelTarget &T) const override {
    return codegen::BwdSm90Config::defaultFor(T.HeadDim, T.HeadDimV);
  }
  /// The backward is not tuned: its space is its default.
  std::vector<SkeletonConfig> enumerate(const KernelTarget &T) const override {
    return {defaultFor(T)};
  }
  std::string configError(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    return codegen::bwdSm90Unsupported(T.kernelSpec(), get(C), T.NumFinals,
                                       T.BackwardUsesDoosum);
  }
  std::string pruneBeforeCompile(const SkeletonConfig &C, const KernelTarget &T,
                                 const ResourceLimits &L) const override {
    if (std::string Why = configError(C, T); !Why.empty())
      return Why;
    const codegen::BwdSm90Config &B = get(C);
    int Shared = std::max(B.dkdvSharedBytes(T.HeadDim, T.HeadDimV, T.NumFinals,
                                            T.BackwardUsesDoosum),
                          B.dqSharedBytes(T.HeadDim, T.HeadDimV));
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
      if (E == "attnc_bwd_dq") // none in the fused dQ mode
        Entries.push_back(E);
    return Entries;
  }
  std::string pruneAfterCompile(const SkeletonConfig &C,
                                const std::vector<KernelResources> &R,
                                const ResourceLimits &L) const override {
    const codegen::BwdSm90Config &B = get(C);
    int Threads[] = {B.dkdvThreads(), 32 * B.QWarps};
    for (size_t I = 0; I < R.size() && I < 2; ++I)
      if (std::string Why = pruneOnResources(Threads[I], R[I], L);
          !Why.empty())
        return Why;
    return "";
  }
  codegen::KernelSource generate(const CompiledDefinition &Def,
                                 const KernelTarget &T,
                                 const SkeletonConfig &C) const override {
    return codegen::generateBackwardSm90(Def, T.kernelSpec(), get(C));
  }
  LaunchShape launchShape(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    const codegen::BwdSm90Config &B = get(C);
    return {B.KvBlockM, B.KvBlockN, B.dkdvThreads(),
            B.dkdvSharedBytes(T.HeadDim, T.HeadDimV, T.NumFinals,
                              T.BackwardUsesDoosum)};
  }
};

} // namespace

const Skeleton &bwdSm90() {
  static const BwdSm90 Entry;
  return Entry;
}

} // namespace attn::runtime::skeletons
