// The sm90 (Hopper) backward kernels: their tile configuration, its
// validation, and the generated Inputs and Variant structs rendered into
// bwd_sm90.cu.in.
#include "attn/codegen/Codegen.h"

#include "attn/Error.h"
#include "attn/codegen/InputLayout.h"
#include "attn/codegen/Template.h"
#include "attn/codegen/Templates.h"
#include "attn/codegen/VariantSource.h"

#include <fmt/format.h>

#include <cstdio>
#include <numeric>

namespace attn::codegen {

std::string BwdSm90Config::str() const {
  return fmt::format("bwd90.kv{}x{}s{}.q{}x{}w{}", KvBlockM, KvBlockN, Stages,
                     QBlockM, QBlockN, QWarps);
}

BwdSm90Config BwdSm90Config::parse(const std::string &Text) {
  BwdSm90Config C;
  if (std::sscanf(Text.c_str(), "bwd90.kv%dx%ds%d.q%dx%dw%d", &C.KvBlockM,
                  &C.KvBlockN, &C.Stages, &C.QBlockM, &C.QBlockN,
                  &C.QWarps) != 6 ||
      C.str() != Text)
    throw UserError("backward config '" + Text +
                    "': expected bwd90.kv<M>x<N>s<stages>.q<M>x<N>w<warps>, "
                    "e.g. bwd90.kv64x128s2.q128x64w8");
  return C;
}

int BwdSm90Config::dkdvSharedBytes(int D, int DV, int NumFinals,
                                   bool Doosum) const {
  // Every tile is made of 1024-byte aligned 64-column slabs (the 128-byte
  // swizzle's atom), so the rows' floats are rounded up to 1024 too.
  int RowBytes = (KvBlockM * (NumFinals + (Doosum ? 1 : 0)) * 4 + 1023) / 1024 * 1024;
  return 1024 + 2 * KvBlockN * (D + DV) +
         Stages * (2 * KvBlockM * (D + DV) + RowBytes);
}

int BwdSm90Config::dqSharedBytes(int D, int DV) const {
  return 2 * QBlockM * (D + DV) + Stages * 2 * QBlockN * (D + DV);
}

BwdSm90Config BwdSm90Config::defaultFor(int, int) { return BwdSm90Config{}; }

std::string bwdSm90Unsupported(const KernelSpec &Spec, const BwdSm90Config &C,
                               int NumFinals, bool Doosum) {
  if (!archHasWgmma(Spec.Arch))
    return "bwd_sm90 needs arch sm_90a (wgmma), not '" +
           archName(Spec.Arch).str() + "'";
  if (Spec.HeadDim != 64 && Spec.HeadDim != 128)
    return fmt::format("head_dim {} is not supported by bwd_sm90; expected 64 or 128",
                       Spec.HeadDim);
  if (Spec.HeadDimV != Spec.HeadDim)
    return fmt::format("head_dim_v {} is not supported by bwd_sm90 with head_dim "
                       "{}; expected head_dim_v = head_dim",
                       Spec.HeadDimV, Spec.HeadDim);
  std::string Name = C.str();
  if (C.KvBlockN != 64 && C.KvBlockN != 128)
    return fmt::format("backward config {}: the dK/dV key block must be 64 or 128 "
                       "(one or two warpgroups of 64 keys)",
                       Name);
  if (C.KvBlockM != 64 && C.KvBlockM != 128)
    return fmt::format("backward config {}: the dK/dV query step must be 64 or 128",
                       Name);
  if (C.Stages < 2 || C.Stages > 4)
    return fmt::format("backward config {}: stages must be 2, 3 or 4", Name);
  // A thread of a warpgroup holds dK and dV of its 64 keys (D/2 + DV/2
  // floats) and Sᵀ and dPᵀ of them against the query step (KvBlockM).
  int Floats = (Spec.HeadDim + Spec.HeadDimV) / 2 + C.KvBlockM;
  if (Floats > 192)
    return fmt::format("backward config {}: the dK/dV kernel would hold {} "
                       "accumulator floats a thread for d{}/{}; at most 192 fit",
                       Name, Floats, Spec.HeadDim, Spec.HeadDimV);
  if (C.QWarps != 4 && C.QWarps != 8)
    return fmt::format("backward config {}: q warps must be 4 or 8", Name);
  if (C.QBlockM % (16 * C.QWarps) != 0 || C.QBlockM > 256)
    return fmt::format("backward config {}: the dQ query block must be a multiple "
                       "of 16 x warps ({}), at most 256",
                       Name, 16 * C.QWarps);
  if (C.QBlockN % 16 != 0 || C.QBlockN < 16 || C.QBlockN > 256)
    return fmt::format("backward config {}: the dQ key step must be a multiple of "
                       "16 between 16 and 256",
                       Name);
  int Limit = archSharedLimit(Spec.Arch);
  int KvBytes = C.dkdvSharedBytes(Spec.HeadDim, Spec.HeadDimV, NumFinals, Doosum);
  int QBytes = C.dqSharedBytes(Spec.HeadDim, Spec.HeadDimV);
  for (auto [What, Bytes] : {std::pair{"dK/dV", KvBytes}, {"dQ", QBytes}})
    if (Bytes > Limit)
      return fmt::format("backward config {}: the {} kernel needs {} bytes of "
                         "shared memory for d{}/{}; {} has {}",
                         Name, What, Bytes, Spec.HeadDim, Spec.HeadDimV,
                         archName(Spec.Arch).str(), Limit);
  return "";
}

KernelSource generateBackwardSm90(const CompiledDefinition &Def,
                                  const KernelSpec &Spec,
                                  const BwdSm90Config &Config) {
  const ir::Graph &G = *Def.Graph;
  checkBackwardDefinition(Def, "bwd_sm90");
  int NumFinals = int(G.decls().FinalRowscales.size());
  bool Doosum = Def.Info.BackwardUsesDoosum;
  if (std::string Why = bwdSm90Unsupported(Spec, Config, NumFinals, Doosum);
      !Why.empty())
    throw UserError(Why);

  KernelSource Src;
  Src.Key = fmt::format("{}.bwd_sm90.{}.d{}x{}.{}.{}", G.name(),
                        dtypeName(Spec.Dtype).str(), Spec.HeadDim, Spec.HeadDimV,
                        archName(Spec.Arch).str(), Config.str());
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_bwd_preprocess",     "attnc_bwd_dkdv",
                 "attnc_bwd_dq",             "attnc_bwd_input_grads",
                 "attnc_bwd_block_classify", "attnc_bwd_block_rows",
                 "attnc_bwd_block_cols"};
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  auto Set = [&](const char *Key, int V) { Values[Key] = std::to_string(V); };
  Set("kv_block_m", Config.KvBlockM);
  Set("kv_block_n", Config.KvBlockN);
  Set("kv_threads", Config.dkdvThreads());
  Set("q_block_m", Config.QBlockM);
  Set("q_block_n", Config.QBlockN);
  Set("q_warps", Config.QWarps);
  Set("q_threads", 32 * Config.QWarps);
  Set("stages", Config.Stages);
  Set("kv_smem",
      Config.dkdvSharedBytes(Spec.HeadDim, Spec.HeadDimV, NumFinals, Doosum));
  Set("q_smem", Config.dqSharedBytes(Spec.HeadDim, Spec.HeadDimV));
  Set("num_input_grads", int(gradInputs(G).size()));
  // One mask classification serves both kernels' tilings (bwd_block_mask.cuh).
  Set("fine_m", std::gcd(Config.KvBlockM, Config.QBlockM));
  Set("fine_n", std::gcd(Config.KvBlockN, Config.QBlockN));
  Src.Source = render("bwd_sm90.cu.in", templateText("bwd_sm90.cu.in"), Values);
  return Src;
}

} // namespace attn::codegen
