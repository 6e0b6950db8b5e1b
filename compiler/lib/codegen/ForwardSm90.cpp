// The sm90 (Hopper) forward kernel: its tile configuration, and the
// generated Inputs and Variant structs rendered into the fwd_sm90 template.
#include "attn/codegen/Codegen.h"

#include "attn/Error.h"
#include "attn/analysis/MaskBounds.h"
#include "attn/codegen/Template.h"
#include "attn/codegen/Templates.h"
#include "attn/codegen/VariantSource.h"

#include <fmt/format.h>
#include <llvm/ADT/StringRef.h>

#include <algorithm>
#include <cstdio>
#include <optional>

namespace attn::codegen {

std::string Sm90Config::str() const {
  return fmt::format("sm90.m{}n{}s{}{}", BlockM, BlockN, Stages,
                     !Persistent ? "" : QTiles == 1 ? "p1" : "p");
}

Sm90Config Sm90Config::parse(const std::string &Text) {
  Sm90Config C;
  const llvm::StringRef T(Text);
  C.Persistent = T.endswith("p") || T.endswith("p1");
  C.QTiles = T.endswith("p1") ? 1 : 2;
  if (std::sscanf(Text.c_str(), "sm90.m%dn%ds%d", &C.BlockM, &C.BlockN,
                  &C.Stages) != 3 ||
      C.str() != Text)
    throw UserError("config '" + Text +
                    "': expected sm90.m<block M>n<block N>s<stages>[p|p1], e.g. "
                    "sm90.m128n128s2 (p: the persistent kernel; p1: persistent "
                    "with O staged in Q's tile)");
  return C;
}

bool Sm90Config::names(const std::string &Text) {
  return Text == "sm90" || Text.rfind("sm90.", 0) == 0;
}

int Sm90Config::sharedBytes(int D, int DV) const {
  // The persistent kernel stages O in a tile of Q's size of its own (or,
  // with one Q tile, in Q's).
  const int Tiles = Persistent ? QTiles : 1;
  return 1024 + 2 * (Tiles * BlockM * D + Stages * BlockN * (D + DV)) + 256;
}

std::optional<Sm90Config> Sm90Config::persistentFor(int D, int DV) const {
  Sm90Config P = *this;
  P.Persistent = true;
  // Its O tile takes the place of a stage where the stages do not fit.
  while (P.sharedBytes(D, DV) > archSharedLimit(GpuArch::Sm90a) && P.Stages > 2)
    --P.Stages;
  if (P.sharedBytes(D, DV) > archSharedLimit(GpuArch::Sm90a))
    return std::nullopt;
  return P;
}

Sm90Config Sm90Config::defaultFor(int D, int DV) {
  // Three stages where they fit: with two, the next K/V load can start
  // only once P·V of the block before has finished, and its latency shows.
  Sm90Config C{128, std::max(D, DV) > 128 ? 64 : 128, 3};
  if (C.sharedBytes(D, DV) > archSharedLimit(GpuArch::Sm90a))
    C.Stages = 2;
  return C;
}

std::vector<Sm90Config> Sm90Config::enumerate() {
  std::vector<Sm90Config> Space;
  for (int M : {64, 128})
    for (int N : {64, 128, 192})
      for (int S : {2, 3, 4}) {
        Sm90Config C{M, N, S};
        if (C.structuralError().empty())
          Space.push_back(C);
      }
  return Space;
}

std::string Sm90Config::structuralError() const {
  if (BlockM != 64 && BlockM != 128)
    return fmt::format("config {}: block M must be 64 or 128 (one or two "
                       "consumer warpgroups of 64 rows)",
                       str());
  if (BlockN != 64 && BlockN != 128 && BlockN != 192)
    return fmt::format("config {}: block N must be 64, 128 or 192", str());
  if (Stages < 2 || Stages > 4)
    return fmt::format("config {}: stages must be 2, 3 or 4", str());
  return "";
}

std::string sm90Unsupported(const KernelSpec &Spec, const Sm90Config &C) {
  if (!archHasWgmma(Spec.Arch))
    return "fwd_sm90 needs arch sm_90a (wgmma, setmaxnreg), not '" +
           archName(Spec.Arch).str() + "'";
  if (std::string Why =
          forwardHeadDimError("fwd_sm90", Spec.HeadDim, Spec.HeadDimV);
      !Why.empty())
    return Why;
  if (std::string Why = C.structuralError(); !Why.empty())
    return Why;
  int Bytes = C.sharedBytes(Spec.HeadDim, Spec.HeadDimV);
  if (Bytes > archSharedLimit(GpuArch::Sm90a))
    return fmt::format(
        "config {} needs {} bytes of shared memory for d{}/{}; sm_90a has {}",
        C.str(), Bytes, Spec.HeadDim, Spec.HeadDimV,
        archSharedLimit(GpuArch::Sm90a));
  return "";
}

std::string forwardKeySm90(const CompiledDefinition &Def,
                           const KernelSpec &Spec, const Sm90Config &C) {
  return fmt::format("{}.fwd_sm90.{}.d{}x{}.{}.{}", Def.Graph->name(),
                     std::string(dtypeName(Spec.Dtype)), Spec.HeadDim, Spec.HeadDimV,
                     archName(Spec.Arch).str(), C.str());
}

KernelSource generateForwardSm90(const CompiledDefinition &Def,
                                 const KernelSpec &Spec, const Sm90Config &C) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Transformer)
    throw NotSupportedYet("code generation for linear attention ('" +
                          Def.Graph->name() + "')");
  if (std::string Why = sm90Unsupported(Spec, C); !Why.empty())
    throw UserError(Why);
  KernelSource Src;
  Src.Key = forwardKeySm90(Def, Spec, C);
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_fwd", "attnc_block_classify", "attnc_block_compact"};
  // The persistent kernel's packed walk, an entry of its own, where the
  // mask's ranges come from box classes (fwd_sm90_persist.cuh).
  const bool PackedWalk =
      C.Persistent && analysis::packedRangeFromBoxes(analysis::analyzeMask(*Def.Graph));
  if (PackedWalk) {
    Src.Entries.push_back(PackedPersistentEntry);
    Src.Entries.push_back(PackedTilesEntry);
  }
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  Values["threads"] = std::to_string(C.threads());
  Values["block_m"] = std::to_string(C.BlockM);
  Values["block_n"] = std::to_string(C.BlockN);
  Values["stages"] = std::to_string(C.Stages);
  Values["smem_bytes"] =
      std::to_string(C.sharedBytes(Spec.HeadDim, Spec.HeadDimV));
  // The persistent kernel's struct and entry; without it the text is what
  // it was before the option existed (the same CUBINs).
  Values["persist_include"] =
      C.Persistent ? "\n#include \"attnc/fwd_sm90_persist.cuh\"" : "";
  Values["persist_alias"] =
      !C.Persistent   ? ""
      : C.QTiles == 1 ? "\nusing FwdP = attnc::FwdSm90Persist<Fwd, 1>;"
                      : "\nusing FwdP = attnc::FwdSm90Persist<Fwd>;";
  Values["fwd_entry"] = C.Persistent ? "FwdP" : "Fwd";
  Values["packed_entry"] =
      PackedWalk ? render("fwd_sm90_packed.cu.in", templateText("fwd_sm90_packed.cu.in"),
                          {{"threads", std::to_string(C.threads())},
                           {"entry", PackedPersistentEntry}})
                 : "";
  Src.Source = render("fwd_sm90.cu.in", templateText("fwd_sm90.cu.in"), Values);
  return Src;
}

const char *pagedLoadName(PagedLoad L) {
  switch (L) {
  case PagedLoad::Thread:
    return "thread";
  case PagedLoad::Warp:
    return "warp";
  case PagedLoad::Gather:
    return "gather";
  }
  return "?";
}

PagedLoad parsePagedLoad(const std::string &Text) {
  for (PagedLoad L : {PagedLoad::Thread, PagedLoad::Warp, PagedLoad::Gather})
    if (Text == pagedLoadName(L))
      return L;
  throw UserError("paged load '" + Text + "': expected 'thread', 'warp' or 'gather'");
}

PagedLoad defaultPagedLoad(int64_t PageSize) {
  // Measured on an H200 (2026-11-27, B8, prefix 4096 + 1024 new tokens,
  // H32/8, D128, causal; contiguous fwd_sm90 622 TFLOPS): the gather 543,
  // 567, 564 and 566 at pages of 1, 16, 64 and 256 (its cost does not
  // depend on the page size); at 16 the warp's boxes 542, the thread's
  // 454; at 64 and 256 the thread's 615 and 617, the warp's 604 and 603.
  // The gather with each row's address shared by a shuffle (22:01, same
  // shape, contiguous 627): 590 and 596 at pages of 1 and 16; at 64 not
  // measured again.
  // So the gather under 64 (pages of 8 and 32, not measured, go with 16:
  // four boxes a block and more), the thread's boxes from 64 on. Pages
  // under 8 tokens fit no box (8 rows, the swizzle's period) anyway.
  return PageSize < 64 ? PagedLoad::Gather : PagedLoad::Thread;
}

KernelSource generatePagedPrefillSm90(const CompiledDefinition &Def,
                                      const KernelSpec &Spec,
                                      const Sm90Config &C, PagedLoad Load) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Transformer)
    throw NotSupportedYet("paged prefill for linear attention ('" +
                          Def.Graph->name() + "')");
  if (std::string Why = sm90Unsupported(Spec, C); !Why.empty())
    throw UserError(Why);
  KernelSource Src;
  Src.Key = fmt::format("{}.fwd_paged_sm90.{}.d{}x{}.{}.{}", Def.Graph->name(),
                        std::string(dtypeName(Spec.Dtype)), Spec.HeadDim,
                        Spec.HeadDimV, archName(Spec.Arch).str(), C.str());
  // The thread kernel keeps the key (and source) it had before the others.
  if (Load != PagedLoad::Thread)
    Src.Key += std::string(".") + pagedLoadName(Load);
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_fwd_paged"};
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  Values["threads"] = std::to_string(C.threads());
  Values["block_m"] = std::to_string(C.BlockM);
  Values["block_n"] = std::to_string(C.BlockN);
  Values["stages"] = std::to_string(C.Stages);
  Values["smem_bytes"] =
      std::to_string(C.sharedBytes(Spec.HeadDim, Spec.HeadDimV));
  Values["paged_run"] = Load == PagedLoad::Thread
                            ? std::string("run_paged")
                            : std::string("run_paged_") + pagedLoadName(Load);
  Src.Source = render("fwd_paged_sm90.cu.in",
                      templateText("fwd_paged_sm90.cu.in"), Values);
  return Src;
}

} // namespace attn::codegen
