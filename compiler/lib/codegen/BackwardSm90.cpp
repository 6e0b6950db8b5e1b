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

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace attn::codegen {

BwdSm90Config BwdSm90Config::fused(int KvBlockM, int KvBlockN, int Stages) {
  // dQ's partial sums are tiled as the dK/dV kernel's steps, and the block
  // lists of both directions are made on that one tiling (the runner's
  // ranks need it); the warps are the dK/dV kernel's.
  BwdSm90Config C{KvBlockM, KvBlockN, Stages, KvBlockM, KvBlockN, 4 * (KvBlockN / 64)};
  C.FusedDq = true;
  return C;
}

std::string BwdSm90Config::str() const {
  if (FusedDq)
    return fmt::format("{}.kv{}x{}s{}.{}{}{}{}",
                       WarpSpecialized ? (TwoPass ? "bwd90ws2" : "bwd90ws") : "bwd90",
                       KvBlockM, KvBlockN, Stages,
                       SplitCols  ? (SplitRoles ? "split.ro." : Lean == 2 ? "split.tw." : "split.")
                       : PingPong ? "pp."
                       : DqWriter ? "dqw."
                       : Lean == 1 ? "lean."
                       : Lean == 2 ? "lean2."
                       : Lean == 3 ? "lean3."
                                  : "",
                       !BulkDq           ? ""
                       : BulkForm == 1   ? "bulk2."
                       : BulkForm == 2   ? "red2."
                       : BulkForm == 3   ? "red."
                                         : "bulk.",
                       AtomicDq ? "atomic" : "fused",
                       Varlen ? ".varlen" : "");
  return fmt::format("bwd90.kv{}x{}s{}.q{}x{}w{}", KvBlockM, KvBlockN, Stages,
                     QBlockM, QBlockN, QWarps);
}

BwdSm90Config BwdSm90Config::parse(const std::string &Text) {
  BwdSm90Config C;
  int M, N, S;
  bool Ok = true;
  llvm::StringRef T(Text);
  // The packed form: the fused form it is made from, then .varlen.
  const bool Varlen = T.consume_back(".varlen");
  const std::string Base = T.str();
  // sscanf counts the fields before a mismatch, so the two-kernel form
  // would also give 3 here: the suffix decides.
  bool TwoPass = T.startswith("bwd90ws2.");
  bool Ws = TwoPass || T.startswith("bwd90ws.");
  bool Atomic = T.endswith(".atomic");
  bool Split = T.contains(".split.");
  bool Pp = !Split && T.contains(".pp.");
  bool Dqw = !Split && !Pp && T.contains(".dqw.");
  // The column split with the turn warp (.split.tw.) is its lean level 2;
  // its roles form (.split.ro.) has the turn warp too.
  bool Roles = Split && T.contains(".split.ro.");
  int Lean = Split                   ? (Roles || T.contains(".split.tw.") ? 2 : 0)
             : Pp || Dqw             ? 0
             : T.contains(".lean.")  ? 1
             : T.contains(".lean2.") ? 2
             : T.contains(".lean3.") ? 3
                                     : 0;
  // dQ by the turn warp's bulk reductions: a form of the turn warp's step.
  // (.bulk2., .red2. and .red.: turns taken ahead, BwdSm90Config::BulkForm.)
  const int BulkForm = T.contains(".lean2.bulk2.") ? 1
                       : T.contains(".lean2.red2.") ? 2
                       : T.contains(".lean2.red.")  ? 3
                                                    : 0;
  bool Bulk = Lean == 2 && (BulkForm != 0 || T.contains(".lean2.bulk."));
  if (T.endswith(".fused") || Atomic) {
    std::string Form = std::string(TwoPass ? "bwd90ws2" : Ws ? "bwd90ws" : "bwd90") +
                       ".kv%dx%ds%d." +
                       (Split  ? (Roles ? "split.ro." : Lean == 2 ? "split.tw." : "split.")
                        : Pp   ? "pp."
                        : Dqw  ? "dqw."
                        : Lean == 1 ? "lean."
                        : Lean == 2 ? "lean2."
                        : Lean == 3 ? "lean3."
                                    : "") +
                       (!Bulk           ? ""
                        : BulkForm == 1 ? "bulk2."
                        : BulkForm == 2 ? "red2."
                        : BulkForm == 3 ? "red."
                                        : "bulk.") +
                       (Atomic ? "atomic" : "fused");
    Ok = std::sscanf(Base.c_str(), Form.c_str(), &M, &N, &S) == 3;
    if (Ok) {
      C = fused(M, N, S);
      C.AtomicDq = Atomic;
      C.WarpSpecialized = Ws;
      C.TwoPass = TwoPass;
      C.SplitCols = Split;
      C.SplitRoles = Roles;
      C.PingPong = Pp;
      C.DqWriter = Dqw;
      C.Lean = Lean;
      C.BulkDq = Bulk;
      C.BulkForm = Bulk ? BulkForm : 0;
      C.Varlen = Varlen;
    }
  } else {
    Ok = !Varlen && std::sscanf(Base.c_str(), "bwd90.kv%dx%ds%d.q%dx%dw%d", &C.KvBlockM,
                     &C.KvBlockN, &C.Stages, &C.QBlockM, &C.QBlockN,
                     &C.QWarps) == 6;
  }
  if (!Ok || C.str() != Text)
    throw UserError("backward config '" + Text +
                    "': expected bwd90.kv<M>x<N>s<stages>.q<M>x<N>w<warps>, "
                    "bwd90.kv<M>x<N>s<stages>.fused or .atomic, or "
                    "bwd90ws[2].kv<M>x<N>s<stages>[.split|.pp|.dqw|.lean|.lean2|.lean3]"
                    ".fused or .atomic (then .varlen for packed calls), or "
                    "bwd90ws.kv<M>x<N>s<stages>.lean2.bulk.fused, .bulk2., .red2. or .red. (or .atomic), or "
                    "bwd90ws.kv64x64s<stages>.split.tw.fused or .split.ro.fused, e.g. "
                    "bwd90.kv64x128s2.q128x64w8 or bwd90.kv64x128s2.fused");
  return C;
}

int BwdSm90Config::dkdvSharedBytes(int D, int DV, int NumFinals,
                                   bool Doosum) const {
  // Every tile is made of 1024-byte aligned 64-column slabs (the 128-byte
  // swizzle's atom), so the rows' floats are rounded up to 1024 too.
  int RowBytes = (KvBlockM * (NumFinals + (Doosum ? 1 : 0)) * 4 + 1023) / 1024 * 1024;
  // The roles form: Pᵀ and dSᵀ in each of two slots.
  int DsBytes = FusedDq ? 2 * KvBlockN * KvBlockM * (SplitRoles ? 4 : 1) : 0;
  int DqBytes = PingPong || DqWriter || BulkDq ? 2 * KvBlockM * (4 * D + 32) : 0;
  return 1024 + 2 * KvBlockN * (D + DV) +
         Stages * (2 * KvBlockM * (D + DV) + RowBytes) + DsBytes + DqBytes +
         (WarpSpecialized ? 256 : 0);
}

int BwdSm90Config::dqSharedBytes(int D, int DV) const {
  if (FusedDq)
    return 0;
  return 2 * QBlockM * (D + DV) + Stages * 2 * QBlockN * (D + DV);
}

BwdSm90Config BwdSm90Config::defaultFor(int D, int DV) {
  // Fused dQ where two warpgroups split dQ's columns into 64-column slabs
  // (d128); at d64 each would get 32, which the fused mode does not do.
  // Warp-specialised there (docs/performance.md: faster than without in
  // both dQ modes); the element work in one pass, which needs no more
  // registers than without; the lean step with the turn warp (5-7% faster
  // than without on an H200, docs/performance-log.md), and dQ through the
  // shared slots with two turn warps that take the turns ahead and add the
  // slots by bulk reductions (.bulk2.: H200, B4 H32 S4k f16, 26% faster
  // than .lean2.fused without a mask, 37% causal; still ordered).
  if (D == 128 && DV == 128) {
    BwdSm90Config C = fused(64, 128, 2);
    C.WarpSpecialized = true;
    C.Lean = 2;
    C.BulkDq = true;
    C.BulkForm = 1;
    return C;
  }
  // Head dim 192 or 256 (with 128 or 256): dK and dV rows of 64 keys are
  // 80 to 128 floats a thread of one warpgroup on top of Sᵀ and dPᵀ, so two
  // warpgroups split their columns (and dQ's) over the same 64 keys; the
  // turn warp takes the dQ turns (11-15% faster than without on an H100,
  // none and causal, 192/128 and 256/256: as fast as unordered atomic adds).
  if (D > 128 && (DV == 128 || DV == 256)) {
    BwdSm90Config C = fused(64, 64, 2);
    C.WarpSpecialized = true;
    C.SplitCols = true;
    C.Lean = 2;
    // At 192/128 the roles form: the scores and the element work once, in
    // warpgroup 0, dK and dV in warpgroup 1 (H200, B4 H16 S4k f16: 4% faster
    // without a mask, 9% causal; at 256/256 dK and dV do not fit one
    // warpgroup's registers).
    C.SplitRoles = D == 192 && DV == 128;
    return C;
  }
  // d64: the lean step with the turn warp too, two warpgroups of 64 keys
  // splitting dQ's rows (128-row steps: a 64-row chain each, all 64
  // columns), so that Sᵀ and dPᵀ are computed once (the two-kernel mode's
  // dQ kernel computes them again, with mma.sync): H100, B4 H16 S4k, 39%
  // faster than bwd90.kv128x128s3.q128x128w8 without a mask and 31%
  // causal, in f16 and bf16; three stages, 16-byte adds and atomic dQ no
  // faster (docs/performance-log.md).
  if (D == 64 && DV == 64) {
    BwdSm90Config C = fused(128, 128, 2);
    C.WarpSpecialized = true;
    C.Lean = 2;
    return C;
  }
  return BwdSm90Config{};
}

/// Shared memory of \p C within \p Spec's arch, or why not.
static std::string sharedUnsupported(const KernelSpec &Spec, const BwdSm90Config &C,
                                     int NumFinals, bool Doosum) {
  int Limit = archSharedLimit(Spec.Arch);
  int KvBytes = C.dkdvSharedBytes(Spec.HeadDim, Spec.HeadDimV, NumFinals, Doosum);
  int QBytes = C.dqSharedBytes(Spec.HeadDim, Spec.HeadDimV);
  for (auto [What, Bytes] : {std::pair{"dK/dV", KvBytes}, {"dQ", QBytes}})
    if (Bytes > Limit)
      return fmt::format("backward config {}: the {} kernel needs {} bytes of "
                         "shared memory for d{}/{}; {} has {}",
                         C.str(), What, Bytes, Spec.HeadDim, Spec.HeadDimV,
                         archName(Spec.Arch).str(), Limit);
  return "";
}

/// bwdSm90Unsupported for the column-split mode (SplitCols in
/// bwd_sm90.cuh): its tiles, head dims and registers.
static std::string splitColsUnsupported(const KernelSpec &Spec, const BwdSm90Config &C,
                                        int NumFinals, bool Doosum) {
  std::string Name = C.str();
  if (!C.FusedDq || !C.WarpSpecialized || C.TwoPass || C.KvBlockN != 64)
    return fmt::format("backward config {}: the column split is a bwd90ws. mode "
                       "with a key block of 64",
                       Name);
  int D = Spec.HeadDim, DV = Spec.HeadDimV;
  if ((D != 128 && D != 192 && D != 256) || (DV != 128 && DV != 256))
    return fmt::format("head dims {}/{} are not supported by bwd_sm90's column "
                       "split; expected head_dim 128, 192 or 256 and head_dim_v 128 "
                       "or 256",
                       D, DV);
  if (C.KvBlockM != 64)
    return fmt::format("backward config {}: the column split's query step must be 64",
                       Name);
  if (C.Stages < 2 || C.Stages > 4)
    return fmt::format("backward config {}: stages must be 2, 3 or 4", Name);
  // Roles: warpgroup 1 holds all of dK and dV, (D + DV) / 2 floats a
  // thread beside its descriptors.
  if (C.SplitRoles && ((D != 128 && D != 192) || DV != 128))
    return fmt::format("head dims {}/{} are not supported by the column split's roles "
                       "form ({}); expected 128/128 or 192/128",
                       D, DV, Name);
  return sharedUnsupported(Spec, C, NumFinals, Doosum);
}

std::string bwdSm90Unsupported(const KernelSpec &Spec, const BwdSm90Config &C,
                               int NumFinals, bool Doosum) {
  if (!archHasWgmma(Spec.Arch))
    return "bwd_sm90 needs arch sm_90a (wgmma), not '" +
           archName(Spec.Arch).str() + "'";
  // The column split takes the lean step's turn warp alone (.split.tw.),
  // which has turns to take only in the ordered dQ mode.
  const bool SplitTurnWarp = C.SplitCols && C.Lean == 2;
  if (SplitTurnWarp && C.AtomicDq)
    return fmt::format("backward config {}: the column split's turn warp (.split.tw.) "
                       "takes the ordered dQ turns: .fused, not .atomic",
                       C.str());
  // The lean step changes the lockstep step of bwd90ws. only.
  if (C.Lean != 0 && !SplitTurnWarp &&
      (C.Lean > 3 || !C.FusedDq || !C.WarpSpecialized || C.TwoPass || C.SplitCols ||
       C.PingPong || C.DqWriter))
    return fmt::format("backward config {}: the lean step is a bwd90ws. mode of the "
                       "lockstep step (not .split, .pp or .dqw)",
                       C.str());
  // The bulk dQ reduction is issued by the turn warp (.lean2.) in the turns'
  // order (.atomic: at once), from slots of one 64-row chain, or at head
  // dim 64 with turns taken ahead (.bulk2., .red2., .red.) of the two
  // warpgroups' 64-row chains of a 128-row step (kv128x128).
  const bool RowSlots = Spec.HeadDim == 64 && C.KvBlockN == 128 && C.KvBlockM == 128 &&
                        C.BulkForm != 0 && !C.PingPong && !C.DqWriter;
  if (C.BulkDq && (C.Lean != 2 || (C.KvBlockM != 64 && !RowSlots)))
    return fmt::format("backward config {}: the bulk dQ reduction is a form of "
                       ".lean2. with a query step of 64 (the turn warp issues it), or "
                       "at head_dim 64 of bwd90ws.kv128x128s<stages>.lean2 with turns "
                       "taken ahead (.bulk2., .red2., .red.)",
                       C.str());
  // The packed walk (bwd_sm90_varlen.cuh) runs the lockstep step, lean or
  // not, with its own turn warp or with turn warps taking their turns ahead
  // from the walk's stages (.bulk2., .red2., .red.); the bulk dQ's one turn
  // warp (.lean2.bulk.) walks the dense block lists, and the column split's
  // turn warp (its roles form too) has not run packed.
  if (C.Varlen && ((C.BulkDq && C.BulkForm == 0) || SplitTurnWarp || C.SplitRoles))
    return fmt::format("backward config {}: .varlen is not a form of the bulk dQ's "
                       "one turn warp (.lean2.bulk.) or of the column split's turn warp "
                       "(.split.tw., .split.ro.); "
                       "use bwd90ws.kv64x128s2.lean2.bulk2.fused.varlen, "
                       "bwd90ws.kv64x128s2.lean2.fused.varlen or "
                       "bwd90ws.kv64x64s2.split.fused.varlen",
                       C.str());
  if (C.Varlen && (!C.FusedDq || !C.WarpSpecialized || C.PingPong || C.DqWriter))
    return fmt::format("backward config {}: .varlen is a form of the warp-specialised "
                       "fused-dQ configurations (bwd90ws[2].…fused or .atomic, or "
                       ".split.), not of the ping-pong or dQ-writer steps",
                       C.str());
  if (C.SplitCols)
    return splitColsUnsupported(Spec, C, NumFinals, Doosum);
  if (Spec.HeadDim != 64 && Spec.HeadDim != 128)
    return fmt::format("head_dim {} is not supported by bwd_sm90 with backward config "
                       "{}; expected 64 or 128, or 128, 192 or 256 (head_dim_v 128 or "
                       "256) in the column-split mode (bwd90ws.kv64x64s2.split.fused)",
                       Spec.HeadDim, C.str());
  if (Spec.HeadDimV != Spec.HeadDim)
    return fmt::format("head_dim_v {} is not supported by bwd_sm90 with head_dim "
                       "{}; expected head_dim_v = head_dim",
                       Spec.HeadDimV, Spec.HeadDim);
  std::string Name = C.str();
  if (C.TwoPass && !C.WarpSpecialized)
    return fmt::format("backward config {}: the two-pass form is a warp-specialised "
                       "option",
                       Name);
  if ((C.AtomicDq || C.WarpSpecialized) && !C.FusedDq)
    return fmt::format("backward config {}: atomic dQ and warp specialisation "
                       "need the fused dQ mode",
                       Name);
  // Ping-pong: each warpgroup's dQ partial has all head_dim columns (N),
  // held beside dK's and dV's rows once Pᵀ and dSᵀ are no longer needed.
  if ((C.PingPong || C.DqWriter) && (!C.WarpSpecialized || C.TwoPass ||
                                     C.KvBlockN != 128 || C.KvBlockM != 64))
    return fmt::format("backward config {}: ping-pong and the dQ writer are bwd90ws. "
                       "modes with a key block of 128 and a query step of 64",
                       Name);
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
  if (C.FusedDq) {
    // Each warpgroup computes dQ's columns D / warpgroups, one or two
    // 64-column slabs of K (the N of its wgmma), over KvBlockM / 64 chains
    // of 64 rows; beside dK and dV a thread then holds Pᵀ and dSᵀ (packed,
    // KvBlockM / 2 registers) and its part of dQ.
    // Ping-pong's warpgroups each compute all of dQ's columns over their
    // own keys (one or two slabs: d64 or d128).
    // At head dim 64 two warpgroups split dQ's rows instead (a 64-row
    // chain each, all 64 columns), which needs 128-row steps.
    const bool Rows = !C.PingPong && Spec.HeadDim == 64 && C.KvBlockN == 128;
    if (Rows && C.KvBlockM != 128)
      return fmt::format("backward config {}: fused dQ at head_dim 64 with two "
                         "warpgroups splits dQ's rows, a 64-row chain each: the query "
                         "step must be 128 (kv128x128), or ping-pong (.pp.)",
                         Name);
    int Cols = C.PingPong || Rows ? Spec.HeadDim : Spec.HeadDim / (C.KvBlockN / 64);
    if (Cols != 64 && Cols != 128)
      return fmt::format("backward config {}: fused dQ splits head_dim {} over {} "
                         "warpgroups into {} columns each; expected 64 or 128",
                         Name, Spec.HeadDim, C.KvBlockN / 64, Cols);
    // Chains of 64 dQ rows a warpgroup holds: all of the step's, or one.
    const int Chains = Rows ? 1 : C.KvBlockM / 64;
    // (Ping-pong holds dQ's D/2 after Pᵀ and dSᵀ at d128, beside them at
    // d64, where its product joins dV's and dK's: bwd_sm90_pingpong.cuh.)
    int FusedFloats =
        (Spec.HeadDim + Spec.HeadDimV) / 2 +
        (!C.PingPong             ? C.KvBlockM / 2 + Chains * Cols / 2
         : Spec.HeadDim == 64    ? C.KvBlockM / 2 + Cols / 2
                                 : std::max(C.KvBlockM / 2, Cols / 2));
    if (FusedFloats > 192)
      return fmt::format("backward config {}: the dK/dV kernel with fused dQ would "
                         "hold {} accumulator floats a thread for d{}/{}; at most "
                         "192 fit",
                         Name, FusedFloats, Spec.HeadDim, Spec.HeadDimV);
  } else if (C.QWarps != 4 && C.QWarps != 8)
    return fmt::format("backward config {}: q warps must be 4 or 8", Name);
  if (!C.FusedDq && (C.QBlockM % (16 * C.QWarps) != 0 || C.QBlockM > 256))
    return fmt::format("backward config {}: the dQ query block must be a multiple "
                       "of 16 x warps ({}), at most 256",
                       Name, 16 * C.QWarps);
  if (!C.FusedDq && (C.QBlockN % 16 != 0 || C.QBlockN < 16 || C.QBlockN > 256))
    return fmt::format("backward config {}: the dQ key step must be a multiple of "
                       "16 between 16 and 256",
                       Name);
  return sharedUnsupported(Spec, C, NumFinals, Doosum);
}

/// The packed variable-length form (bwd_sm90_varlen.cu.in): the dK/dV
/// kernel over cu_seqlens, the packed semaphores' reset and dq's convert,
/// no block-list kernels (a packed call has none).
static KernelSource generateVarlen(const CompiledDefinition &Def, const KernelSpec &Spec,
                                   const BwdSm90Config &Config, KernelSource Src) {
  const ir::Graph &G = *Def.Graph;
  int NumFinals = int(G.decls().FinalRowscales.size());
  bool Doosum = Def.Info.BackwardUsesDoosum;
  Src.Entries = {"attnc_bwd_preprocess", "attnc_bwd_dkdv", "attnc_bwd_dq_init",
                 "attnc_bwd_input_grads", "attnc_bwd_dq_convert"};
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  auto Set = [&](const char *Key, int V) { Values[Key] = std::to_string(V); };
  Set("kv_block_m", Config.KvBlockM);
  Set("kv_block_n", Config.KvBlockN);
  Set("kv_threads", Config.dkdvThreads());
  Set("stages", Config.Stages);
  Set("kv_smem",
      Config.dkdvSharedBytes(Spec.HeadDim, Spec.HeadDimV, NumFinals, Doosum));
  Set("num_input_grads", int(gradInputs(G).size()));
  Values["atomic_dq"] = Config.AtomicDq ? "true" : "false";
  // (The lean level only where it is one, so that the other forms' source
  // is unchanged.)
  // (The turns taken ahead as the dense kernel's kBulkDq, 2 to 4.)
  Values["dkdv_mode_args"] = fmt::format(
      ", /*kAtomicDq=*/{}, /*kTwoPass=*/{}, /*kSplit=*/{}{}{}", Config.AtomicDq,
      Config.TwoPass, Config.SplitCols,
      Config.Lean != 0 ? fmt::format(", /*kLeanLevel=*/{}", Config.Lean) : "",
      Config.BulkDq ? fmt::format(", /*kBulkDq=*/{}", 1 + Config.BulkForm) : "");
  Src.Source =
      render("bwd_sm90_varlen.cu.in", templateText("bwd_sm90_varlen.cu.in"), Values);
  return Src;
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
                        std::string(dtypeName(Spec.Dtype)), Spec.HeadDim, Spec.HeadDimV,
                        archName(Spec.Arch).str(), Config.str());
  Src.Arch = Spec.Arch;
  if (Config.Varlen)
    return generateVarlen(Def, Spec, Config, std::move(Src));
  Src.Entries = {"attnc_bwd_preprocess",     "attnc_bwd_dkdv",
                 "attnc_bwd_dq",             "attnc_bwd_input_grads",
                 "attnc_bwd_block_classify", "attnc_bwd_block_rows",
                 "attnc_bwd_block_cols"};
  if (Config.FusedDq) { // no dQ kernel: the semaphores' reset, the convert
    Src.Entries[2] = "attnc_bwd_dq_init";
    Src.Entries.push_back("attnc_bwd_dq_convert");
  }
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
  Set("fused_dq", Config.FusedDq ? 1 : 0);
  // The opt-in modes' extra template arguments and the producer's tensor
  // maps; empty otherwise, so that the other configurations' source is
  // unchanged.
  bool Extra = Config.AtomicDq || Config.WarpSpecialized;
  Values["dkdv_mode_args"] =
      Extra ? fmt::format(", /*kAtomicDq=*/{}, /*kWarpSpecialized=*/{}{}", Config.AtomicDq,
                          Config.WarpSpecialized,
                          Config.SplitCols
                              ? (Config.SplitRoles
                                     ? ", /*kTwoPass=*/false, /*kSplit=*/true, "
                                       "/*kPingPong=*/false, /*kDqWriter=*/false, "
                                       "/*kLeanLevel=*/2, /*kBulkDq=*/false, /*kRoles=*/true"
                                 : Config.Lean == 2
                                     ? ", /*kTwoPass=*/false, /*kSplit=*/true, "
                                       "/*kPingPong=*/false, /*kDqWriter=*/false, "
                                       "/*kLeanLevel=*/2"
                                     : ", /*kTwoPass=*/false, /*kSplit=*/true")
                          : Config.PingPong ? ", /*kTwoPass=*/false, /*kSplit=*/false, "
                                              "/*kPingPong=*/true"
                          : Config.DqWriter ? ", /*kTwoPass=*/false, /*kSplit=*/false, "
                                              "/*kPingPong=*/false, /*kDqWriter=*/true"
                          : Config.Lean != 0
                              ? fmt::format(", /*kTwoPass=*/false, /*kSplit=*/false, "
                                            "/*kPingPong=*/false, /*kDqWriter=*/false, "
                                            "/*kLeanLevel=*/{}{}",
                                            Config.Lean,
                                            !Config.BulkDq ? ""
                                            : Config.BulkForm == 0
                                                ? ", /*kBulkDq=*/true"
                                                : fmt::format(", /*kBulkDq=*/{}",
                                                              1 + Config.BulkForm))
                          : Config.TwoPass  ? ", /*kTwoPass=*/true"
                                            : "")
            : "";
  Values["dkdv_maps_param"] =
      Config.WarpSpecialized
          ? ",\n               const __grid_constant__ attnc::Sm90BwdMaps maps"
          : "";
  Values["dkdv_maps_arg"] = Config.WarpSpecialized ? ", &maps" : "";
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
