// Attention::precompile: the kernels of a signature's directions compiled
// ahead of time, without a GPU, for bundles and warm caches.
#include "attn/codegen/Arch.h"
#include "attn/runtime/Attention.h"

#include "AttentionState.h"

#include "BackwardRunner.h"
#include "PagedDecode.h"
#include "attn/runtime/Backend.h"
#include "attn/runtime/Errors.h"

namespace attn::runtime {

std::vector<PrecompiledKernel>
Attention::precompile(const PrecompileSet &What) {
  auto Lock = lockCalls();
  std::vector<PrecompiledKernel> Out;
  // Every kernel goes through the cache, as a call's would: the same
  // source gives the same key, so a call later finds what this compiled.
  auto Compile = [&](const codegen::KernelSource &Src) {
    CacheResult R = KernelCache::global().getOrCompile(Src);
    Out.push_back({Src, R.Cubin, cacheSourceName(R.Source)});
  };
  const bool Packed = Sig.TensorLayout == attn::Layout::THD;
  const bool Generated = Sig.Backend.empty() || Sig.Backend == "generated";

  if (What.Forward) {
    Compile(backendAt(0).source());
    // Calls of at most 16 queries (a packed call's max_seqlen_q) run the
    // short-query rule's kernel.
    if (DecodeRule && Generated)
      Compile(DecodeRule->Skel->generate(Def, Fwd.target(),
                                         DecodeRule->Config));
  }
  if (What.Backward) {
    Compile(backwardRunner().source());
    // Long or masked calls run the long-walk twin (wantsLongWalkBackward;
    // packed ones by their longest sequence), packed calls the packed forms.
    std::optional<KernelChoice> Long = longWalkBackwardChoice(backwardChoice());
    if (Packed) {
      std::vector<KernelChoice> Runs = {backwardChoice()};
      if (Long)
        Runs.push_back(*Long);
      for (const KernelChoice &C : Runs)
        if (std::optional<KernelChoice> Two = packedBackwardChoice(C))
          Compile(Two->Skel->generate(Def, BwdTarget, Two->Config));
    } else if (Long) {
      Compile(Long->Skel->generate(Def, BwdTarget, Long->Config));
    }
  }
  if (What.Decode) {
    // Paged decode's kernels serve dense and packed (decodePagedVarlen)
    // calls alike; mergeResults takes dense results only.
    for (const codegen::KernelSource &Src : pagedRunner().sources())
      Compile(Src);
    Compile(pagedAppendSource(Arch));
    if (!Packed) {
      Compile(mergeResultsSource(Arch));
      if (analysis::analyzeResultMerge(*Def.Graph).Kind ==
          analysis::MergeKind::Combine)
        Compile(combineMergeSource());
    }
  }
  return Out;
}

std::vector<PrecompiledKernel>
precompileAttention(const dsl::DefinitionBase &Def, Signature Sig,
                    const PrecompileSet &What,
                    const std::vector<GpuArch> &Archs) {
  if (Archs.empty())
    throw InvalidArgument("precompile: no arch given; expected one or more "
                          "of " + archNamesText().str());
  Sig.NeedsBackward = Sig.NeedsBackward || What.Backward;
  std::vector<PrecompiledKernel> Out;
  for (GpuArch A : Archs) {
    Sig.Arch = A;
    Attention At(Def, Sig);
    std::vector<PrecompiledKernel> Kernels = At.precompile(What);
    Out.insert(Out.end(), std::make_move_iterator(Kernels.begin()),
               std::make_move_iterator(Kernels.end()));
  }
  return Out;
}

} // namespace attn::runtime
