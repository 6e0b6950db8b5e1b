// The decode_sm80 entry: a few queries per sequence over many keys, GQA
// packed, split over the keys where the definition's merge allows. The
// selector runs it for short query lengths (Selector.h, decodeChoice); it
// comes after the forward skeletons in the table so that it is never the
// first choice of a prefill.
#include "Entries.h"
#include "TypedSkeleton.h"

#include "attn/codegen/DecodeCodegen.h"

#include <fmt/format.h>

namespace attn::runtime::skeletons {

namespace {

class DecodeSm80 final : public TypedSkeleton<codegen::DecodeConfig> {
public:
  DecodeSm80()
      : TypedSkeleton("decode_sm80", ir::DefinitionKind::Transformer,
                      /*Forward=*/true, /*Backward=*/false) {}

  llvm::StringRef configForm() const override {
    return "dec.m<rows>n<block N>w<warps>s<stages>";
  }
  SkeletonConfig defaultFor(const KernelTarget &T) const override {
    return codegen::DecodeConfig::defaultFor(T.HeadDim, T.HeadDimV, T.Arch);
  }
  std::vector<SkeletonConfig> enumerate(const KernelTarget &) const override {
    std::vector<SkeletonConfig> All;
    for (const codegen::DecodeConfig &C : codegen::DecodeConfig::enumerate())
      All.push_back(C);
    return All;
  }
  std::string configError(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    return codegen::decodeConfigError(T.kernelSpec(), get(C));
  }
  std::string pruneBeforeCompile(const SkeletonConfig &C, const KernelTarget &T,
                                 const ResourceLimits &L) const override {
    const codegen::DecodeConfig &D = get(C);
    if (std::string Why = D.structuralError(); !Why.empty())
      return Why;
    int Bytes = D.sharedBytes(T.HeadDim, T.HeadDimV);
    if (Bytes > L.SharedBytesPerBlock)
      return fmt::format("needs {} bytes of shared memory; the device allows {}",
                         Bytes, L.SharedBytesPerBlock);
    if (D.Warps * 32 > L.MaxThreadsPerBlock)
      return fmt::format("{} threads; at most {}", D.Warps * 32,
                         L.MaxThreadsPerBlock);
    return "";
  }
  std::vector<std::string>
  judgedEntries(const codegen::KernelSource &) const override {
    return {"attnc_decode"};
  }
  std::string pruneAfterCompile(const SkeletonConfig &C,
                                const std::vector<KernelResources> &R,
                                const ResourceLimits &L) const override {
    return pruneOnResources(get(C).Warps * 32, R.front(), L);
  }
  codegen::KernelSource generate(const CompiledDefinition &Def,
                                 const KernelTarget &T,
                                 const SkeletonConfig &C) const override {
    return codegen::generateDecode(Def, T.kernelSpec(), get(C));
  }
  LaunchShape launchShape(const SkeletonConfig &C,
                          const KernelTarget &T) const override {
    const codegen::DecodeConfig &D = get(C);
    return {D.BlockM, D.BlockN, D.Warps * 32,
            D.sharedBytes(T.HeadDim, T.HeadDimV)};
  }
  bool isDecode() const override { return true; }
};

} // namespace

const Skeleton &decodeSm80() {
  static const DecodeSm80 Entry;
  return Entry;
}

} // namespace attn::runtime::skeletons
