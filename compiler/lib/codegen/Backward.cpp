// The sm80 backward kernels: their tile configuration, its validation, and
// the generated Inputs and Variant structs rendered into bwd_sm80.cu.in.
#include "attn/codegen/Codegen.h"

#include "attn/Error.h"
#include "attn/codegen/InputLayout.h"
#include "attn/codegen/Template.h"
#include "attn/codegen/Templates.h"
#include "attn/codegen/VariantSource.h"
#include "attn/transforms/Autodiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace attn::codegen {

namespace {


/// The most custom inputs with gradients (attnc::kMaxInputGrads).
constexpr size_t MaxInputGrads = 8;

int tileBytes(int Rows, int Cols) { return Rows * Cols * 2; }

} // namespace

BwdConfig BwdConfig::fused(int KvBlockM, int KvBlockN, int KvWarps, int Stages) {
  // dQ's partial sums are tiled as the dK/dV kernel's steps, and the block
  // lists of both directions are made on that one tiling.
  BwdConfig C{KvBlockM, KvBlockN, KvWarps, KvBlockM, KvBlockN, KvWarps, Stages};
  C.FusedDq = true;
  return C;
}

std::string BwdConfig::str() const {
  if (FusedDq)
    return fmt::format("kv{}x{}w{}.fused.s{}", KvBlockM, KvBlockN, KvWarps, Stages);
  return fmt::format("kv{}x{}w{}.q{}x{}w{}.s{}", KvBlockM, KvBlockN, KvWarps,
                     QBlockM, QBlockN, QWarps, Stages);
}

BwdConfig BwdConfig::parse(const std::string &Text) {
  BwdConfig C;
  int M, N, W, S;
  if (std::sscanf(Text.c_str(), "kv%dx%dw%d.fused.s%d", &M, &N, &W, &S) == 4)
    C = fused(M, N, W, S);
  else if (std::sscanf(Text.c_str(), "kv%dx%dw%d.q%dx%dw%d.s%d", &C.KvBlockM,
                       &C.KvBlockN, &C.KvWarps, &C.QBlockM, &C.QBlockN,
                       &C.QWarps, &C.Stages) != 7)
    C.Stages = -1; // refused below
  if (C.Stages < 0 || C.str() != Text)
    throw UserError("backward config '" + Text +
                    "': expected kv<M>x<N>w<warps>.q<M>x<N>w<warps>.s<stages> "
                    "or kv<M>x<N>w<warps>.fused.s<stages>, e.g. "
                    "kv64x128w8.q128x64w8.s2 or kv64x128w8.fused.s2");
  return C;
}

bool BwdConfig::splitsQueries() const {
  return KvBlockM % 64 == 0 && KvWarps % 2 == 0 && KvBlockN % (8 * KvWarps) == 0;
}

int BwdConfig::dkdvSharedBytes(int D, int DV, int NumFinals, bool Doosum) const {
  int RowBytes = (KvBlockM * (NumFinals + (Doosum ? 1 : 0)) * 4 + 127) / 128 * 128;
  int Exchanged = splitsQueries() ? 2 : FusedDq ? 1 : 0; // Pᵀ, dSᵀ tiles
  return tileBytes(KvBlockN, D) + tileBytes(KvBlockN, DV) +
         Stages * (tileBytes(KvBlockM, D) + tileBytes(KvBlockM, DV) + RowBytes) +
         Exchanged * tileBytes(KvBlockM, KvBlockN);
}

int BwdConfig::dqSharedBytes(int D, int DV) const {
  return tileBytes(QBlockM, D) + tileBytes(QBlockM, DV) +
         Stages * (tileBytes(QBlockN, D) + tileBytes(QBlockN, DV));
}

BwdConfig BwdConfig::defaultFor(int D, int DV, GpuArch Arch) {
  // One m16 key tile per warp keeps the dK/dV kernel's four accumulators
  // (dK, dV, Sᵀ, dPᵀ) within the register file: 192 floats a thread at
  // 128/128 with 64-row query steps. DV = 256 needs 32-row steps.
  BwdConfig C;
  if (DV > 128)
    C = BwdConfig{32, 128, 8, 64, 64, 4, 2};
  bool Small = archSharedLimit(Arch) < 128 * 1024;
  if (Small) {
    // sm_86/sm_89: 99 KiB. Halve the key block of the dK/dV kernel and the
    // query block of the dQ kernel; 32-row dK/dV steps, which keep Pᵀ and
    // dSᵀ in registers (the split layout's tiles do not fit beside 64).
    C.KvBlockM = std::min(C.KvBlockM, 32);
    C.KvBlockN = 64;
    C.KvWarps = 4;
    C.QBlockM = 64;
    C.QWarps = 4;
    if (std::max(D, DV) > 128) {
      C.KvBlockM = 16;
      C.QBlockN = 32;
    }
  } else if (DV <= 128) {
    // The fused dQ mode in the split warp layout: five matmuls instead of
    // the two-kernel mode's seven, 8-14% less time at S = 1024 to 16384 on
    // an H100 (docs/performance.md). It relies on CTAs being dispatched in
    // blockIdx order (bwd_sm80_fused_dq.cuh).
    return fused(64, 128, 8, 2);
  }
  return C;
}

void validateBackward(const KernelSpec &Spec, const BwdConfig &C, int NumFinals,
                      bool Doosum) {
  if (Spec.HeadDim != 64 && Spec.HeadDim != 128)
    throw UserError(fmt::format(
        "head_dim {} is not supported by bwd_sm80; expected 64 or 128",
        Spec.HeadDim));
  if (Spec.HeadDimV != 64 && Spec.HeadDimV != 128 && Spec.HeadDimV != 256)
    throw UserError(fmt::format(
        "head_dim_v {} is not supported by bwd_sm80; expected 64, 128 or 256",
        Spec.HeadDimV));
  if (Spec.HeadDimV == 256 && Spec.HeadDim != 128)
    throw UserError(fmt::format(
        "head_dim_v 256 is supported by bwd_sm80 with head_dim 128 only, got "
        "head_dim {}",
        Spec.HeadDim));
  std::string Name = C.str();
  for (auto [What, W] : {std::pair{"kv", C.KvWarps}, {"q", C.QWarps}})
    if (W != 4 && W != 8)
      throw UserError(
          fmt::format("backward config {}: {} warps must be 4 or 8", Name, What));
  if (C.KvBlockN % (16 * C.KvWarps) != 0 || C.KvBlockN > 256)
    throw UserError(fmt::format(
        "backward config {}: the dK/dV key block must be a multiple of 16 x "
        "warps ({}), at most 256",
        Name, 16 * C.KvWarps));
  if (C.KvBlockM % 16 != 0 || C.KvBlockM < 16 || C.KvBlockM > 128)
    throw UserError(fmt::format(
        "backward config {}: the dK/dV query step must be a multiple of 16 "
        "between 16 and 128",
        Name));
  if (C.FusedDq) {
    if (C.QBlockM != C.KvBlockM || C.QBlockN != C.KvBlockN ||
        C.QWarps != C.KvWarps)
      throw UserError(fmt::format(
          "backward config {}: in the fused dQ mode the dQ tiles are the dK/dV "
          "kernel's (BwdConfig::fused)",
          Name));
  } else {
    if (C.QBlockM % (16 * C.QWarps) != 0 || C.QBlockM > 256)
      throw UserError(fmt::format(
          "backward config {}: the dQ query block must be a multiple of 16 x "
          "warps ({}), at most 256",
          Name, 16 * C.QWarps));
    if (C.QBlockN % 16 != 0 || C.QBlockN < 16 || C.QBlockN > 256)
      throw UserError(fmt::format(
          "backward config {}: the dQ key step must be a multiple of 16 "
          "between 16 and 256",
          Name));
  }
  if (C.Stages < 2 || C.Stages > 4)
    throw UserError(
        fmt::format("backward config {}: stages must be 2, 3 or 4", Name));
  // The dK/dV kernel holds dK and dV for its keys and columns, and Sᵀ and
  // dPᵀ for its keys and query rows, in registers: ptxas (sm_90a) spills 48
  // bytes at 192 floats a thread and 332 at 224.
  bool Split = C.splitsQueries();
  int KeyGroups = Split ? C.KvWarps / 2 : C.KvWarps, Halves = Split ? 2 : 1;
  int Keys = C.KvBlockN / KeyGroups;
  int SFloats = 2 * Keys * (C.KvBlockM / Halves) / 32;
  int Floats = Keys * (Spec.HeadDim + Spec.HeadDimV) / Halves / 32 + SFloats;
  if (C.FusedDq) {
    // dQ's [KvBlockM x D] product splits over the warps as whole m16 row
    // tiles times pairs of n8 column tiles (fused_dq_warp_rows picks one
    // such split); its accumulators replace Sᵀ and dPᵀ beside dK and dV.
    int RT = C.KvBlockM / 16, CT = Spec.HeadDim / 8;
    bool Splits = false;
    for (int WR = 1; WR <= C.KvWarps; WR *= 2)
      Splits = Splits || (RT % WR == 0 && CT % (2 * (C.KvWarps / WR)) == 0);
    if (!Splits)
      throw UserError(fmt::format(
          "backward config {}: the fused dQ mode splits the {} x {} dQ tile "
          "over {} warps as whole 16-row tiles times 16-column pairs; this "
          "query step does not split evenly",
          Name, C.KvBlockM, Spec.HeadDim, C.KvWarps));
    // dSᵀ is a swizzled [KvBlockN][KvBlockM] tile (SwizzledTile).
    if (C.KvBlockM != 32 && C.KvBlockM % 64 != 0)
      throw UserError(fmt::format(
          "backward config {}: the fused dQ mode needs a query step of 32 or "
          "a multiple of 64 (its dS tile is stored transposed), got {}",
          Name, C.KvBlockM));
    int DqFloats = C.KvBlockM * Spec.HeadDim / (32 * C.KvWarps);
    Floats += std::max(0, DqFloats - SFloats);
  }
  if (Floats > 224)
    throw UserError(fmt::format(
        "backward config {}: the dK/dV kernel would hold {} accumulator "
        "floats a thread for d{}/{}; at most 224 fit in registers (fewer keys "
        "per warp or a smaller query step)",
        Name, Floats, Spec.HeadDim, Spec.HeadDimV));
  int Limit = archSharedLimit(Spec.Arch);
  int KvBytes = C.dkdvSharedBytes(Spec.HeadDim, Spec.HeadDimV, NumFinals, Doosum);
  int QBytes = C.FusedDq ? 0 : C.dqSharedBytes(Spec.HeadDim, Spec.HeadDimV);
  for (auto [What, Bytes] : {std::pair{"dK/dV", KvBytes}, {"dQ", QBytes}})
    if (Bytes > Limit)
      throw UserError(fmt::format(
          "backward config {}: the {} kernel needs {} bytes of shared memory "
          "for d{}/{}; {} has {}",
          Name, What, Bytes, Spec.HeadDim, Spec.HeadDimV, archName(Spec.Arch).str(), Limit));
}

std::string backwardKey(const CompiledDefinition &Def, const KernelSpec &Spec,
                        const BwdConfig &Config) {
  return fmt::format("{}.bwd_sm80.{}.d{}x{}.{}.{}", Def.Graph->name(),
                     std::string(dtypeName(Spec.Dtype)), Spec.HeadDim, Spec.HeadDimV,
                     archName(Spec.Arch).str(), Config.str());
}

KernelSource generateBackward(const CompiledDefinition &Def,
                              const KernelSpec &Spec) {
  return generateBackward(
      Def, Spec, BwdConfig::defaultFor(Spec.HeadDim, Spec.HeadDimV, Spec.Arch));
}

void checkBackwardDefinition(const CompiledDefinition &Def, const char *Skeleton) {
  const ir::Graph &G = *Def.Graph;
  if (G.decls().Kind != ir::DefinitionKind::Transformer)
    throw NotSupportedYet("backward code generation for linear attention ('" +
                          G.name() + "')");
  // The UserError says why the backward could not be derived, if it was
  // tried, and what to write.
  transforms::requireBackward(G);
  std::vector<GradInput> Grads = gradInputs(G);
  for (const GradInput &I : Grads)
    if (I.Shape != ir::InputShape::Scalar && I.Shape != ir::InputShape::PerHead)
      throw NotSupportedYet(fmt::format(
          "the gradient of {} input '{}' of '{}' in {} (scalar and "
          "per_head inputs have gradients)",
          ir::inputShapeName(I.Shape).str(), I.Name, G.name(), Skeleton));
  if (Grads.size() > MaxInputGrads)
    throw NotSupportedYet(fmt::format(
        "'{}' has {} inputs that require gradients; {} computes at "
        "most {}",
        G.name(), Grads.size(), Skeleton, MaxInputGrads));
}

KernelSource generateBackward(const CompiledDefinition &Def,
                              const KernelSpec &Spec, const BwdConfig &Config) {
  const ir::Graph &G = *Def.Graph;
  checkBackwardDefinition(Def, "bwd_sm80");
  std::vector<GradInput> Grads = gradInputs(G);
  int NumFinals = int(G.decls().FinalRowscales.size());
  bool Doosum = Def.Info.BackwardUsesDoosum;
  validateBackward(Spec, Config, NumFinals, Doosum);

  KernelSource Src;
  Src.Key = backwardKey(Def, Spec, Config);
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_bwd_preprocess",
                 "attnc_bwd_dkdv",
                 "attnc_bwd_input_grads",
                 "attnc_bwd_block_classify",
                 "attnc_bwd_block_rows",
                 "attnc_bwd_block_cols"};
  if (Config.FusedDq) {
    Src.Entries.push_back("attnc_bwd_dq_init");
    Src.Entries.push_back("attnc_bwd_dq_convert");
  } else {
    Src.Entries.push_back("attnc_bwd_dq");
  }
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  auto Set = [&](const char *Key, int V) { Values[Key] = std::to_string(V); };
  Set("kv_block_m", Config.KvBlockM);
  Set("kv_block_n", Config.KvBlockN);
  Set("kv_warps", Config.KvWarps);
  Set("kv_threads", 32 * Config.KvWarps);
  Set("q_block_m", Config.QBlockM);
  Set("q_block_n", Config.QBlockN);
  Set("q_warps", Config.QWarps);
  Set("q_threads", 32 * Config.QWarps);
  Set("stages", Config.Stages);
  Set("fused_dq", Config.FusedDq ? 1 : 0);
  Values["kv_split"] = Config.splitsQueries() ? "true" : "false";
  Set("kv_smem",
      Config.dkdvSharedBytes(Spec.HeadDim, Spec.HeadDimV, NumFinals, Doosum));
  Set("q_smem", Config.dqSharedBytes(Spec.HeadDim, Spec.HeadDimV));
  Set("num_input_grads", int(Grads.size()));
  // One mask classification serves both kernels' tilings (bwd_block_mask.cuh).
  Set("fine_m", std::gcd(Config.KvBlockM, Config.QBlockM));
  Set("fine_n", std::gcd(Config.KvBlockN, Config.QBlockN));
  Src.Source = render("bwd_sm80.cu.in", templateText("bwd_sm80.cu.in"), Values);
  return Src;
}

} // namespace attn::codegen
