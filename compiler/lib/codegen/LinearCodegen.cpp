// Linear attention: the chunk configuration, the generated Variant (mods and
// their derivatives) and the linear_fwd / linear_bwd templates.
#include "attn/codegen/LinearCodegen.h"

#include "attn/Error.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/CodeWriter.h"
#include "attn/codegen/InputLayout.h"
#include "attn/codegen/Template.h"
#include "attn/codegen/Templates.h"
#include "attn/codegen/VariantEmitter.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"
#include "attn/transforms/Autodiff.h"
#include "attn/transforms/DCE.h"
#include "attn/transforms/Simplify.h"

#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace attn::codegen {

using ir::ParamKind;

std::string LinearConfig::str() const {
  return fmt::format("c{}v{}w{}b{}", Chunk, SliceV, Warps, BwdWarps);
}

LinearConfig LinearConfig::parse(const std::string &Text) {
  LinearConfig C;
  if (std::sscanf(Text.c_str(), "c%dv%dw%db%d", &C.Chunk, &C.SliceV, &C.Warps,
                  &C.BwdWarps) != 4 ||
      C.str() != Text)
    throw UserError("linear config '" + Text +
                    "': expected c<chunk>v<value slice>w<warps>b<backward "
                    "warps>, e.g. c64v64w4b8");
  return C;
}

LinearConfig LinearConfig::defaultFor(int D, int DV, GpuArch Arch) {
  LinearConfig C;
  C.Warps = D <= 128 ? 4 : 8;
  C.BwdWarps = D <= 64 ? 4 : 8;
  // Chunks of 32 at D <= 128: the backward's chunk gradients run two CTAs
  // an SM there (mamba2 d128/64 on an H100: 3.03 ms against 3.44 with
  // chunks of 64, the forward 3% slower).
  C.Chunk = D <= 128 ? 32 : 64;
  if (DV % 128 != 0)
    return C;
  // 128-wide value slices where DV allows and shared memory holds them:
  // every slice re-reads q and k and recomputes Q·Kᵀ, so half the slices
  // halve that work. On an H100 (docs/performance.md): at D = 256, DV = 512
  // the forward took 51% less time and the backward 29% less; at D = DV =
  // 128 with chunks of 32 (c64v128w4 was slower there) 20% and 7% less.
  LinearConfig Wide = C;
  Wide.SliceV = 128;
  LinearKernelSpec S;
  S.HeadDim = D;
  S.HeadDimV = DV;
  S.Arch = Arch;
  S.Config = Wide;
  if (!Wide.structuralError(D, DV).empty())
    return C;
  for (auto [Name, Bytes] : linearSharedBytes(S).byKernel())
    if (Bytes > archSharedLimit(Arch))
      return C;
  return Wide;
}

namespace {

/// Dynamic shared memory of the forward (the layout of linear_chunk_scan.cuh;
/// the generated source static_asserts that they agree): the modded q, k, v
/// tiles, the staging copies when staged, the 16-bit state, then 3·chunk + 4
/// floats of decay.
int forwardSharedBytes(int D, int Vs, int C, bool Staged) {
  return 2 * C * (2 * D + Vs) * (Staged ? 2 : 1) + 2 * D * Vs + 4 * (3 * C + 4);
}

/// linear_chunk_states.cuh: the k (or q) columns of the CTA's state rows
/// and the v (or dout) slice, twice (staged), the 16-bit state rows, decay.
int statesSharedBytes(int Vs, int C) {
  const int Rows = LinearStateRows;
  return 2 * 2 * C * (Rows + Vs) + 2 * Rows * Vs + 4 * (3 * C + 4);
}

/// linear_chunk_grads_tiles.cuh: per head buffer q, k, v, dout, the state tiles
/// (H and dH, or one for H then dH), the raw decay and with \p Pairs the
/// neighbour chunk's two tiles, or dq and dk as fp32 rows over them,
/// whichever is larger (with two buffers each rounded to 128 bytes); then
/// the decay and one float per warp.
int gradsSharedBytes(int D, int Vs, int C, int Warps, bool TwoStates,
                     int Buffers, bool Pairs = false) {
  const int Tiles =
      2 * (2 * C * D + 2 * C * Vs + (TwoStates ? 2 : 1) * D * Vs) + 4 * C +
      (Pairs ? 2 * (C * D + C * Vs) : 0);
  const int Rows = 2 * C * D * 4;
  int Buf = std::max(Tiles, Rows);
  if (Buffers > 1)
    Buf = (Buf + 127) / 128 * 128;
  return Buffers * Buf + 4 * (3 * C + 4 + Warps);
}

/// The warp layout rules of linear_chunk_scan.cuh and linear_chunk_grads.cuh
/// for \p Warps warps and output widths \p Outs, and with \p D > 0 the
/// forward's rule that the warps split the D state rows; empty when they
/// hold.
std::string layoutError(const char *What, int Chunk, int Warps, int D,
                        std::initializer_list<int> Outs) {
  int RowTiles = Chunk / 16;
  if (Warps % RowTiles != 0)
    return fmt::format("{} warps ({}) must be a multiple of the chunk's m16 "
                       "row tiles ({})",
                       What, Warps, RowTiles);
  int Groups = Warps / RowTiles;
  if (D > 0 && (D % Warps != 0 || (D / Warps) % 16 != 0))
    return fmt::format("{} warps ({}) must split head_dim {} into whole m16 "
                       "tiles of state rows",
                       What, Warps, D);
  for (int N : Outs)
    if (N % Groups != 0 || (N / Groups) % 16 != 0)
      return fmt::format("{}: {} output columns do not split into {} column "
                         "groups of a multiple of 16",
                         What, N, Groups);
  return "";
}

} // namespace

std::string LinearConfig::structuralError(int D, int DV) const {
  if (Chunk != 32 && Chunk != 64 && Chunk != 128)
    return fmt::format("chunk {} is not supported; expected 32, 64 or 128",
                       Chunk);
  if (SliceV != 64 && SliceV != 128)
    return fmt::format("value slice {} is not supported; expected 64 or 128",
                       SliceV);
  for (int W : {Warps, BwdWarps})
    if (W != 4 && W != 8 && W != 16)
      return fmt::format("{} warps are not supported; expected 4, 8 or 16", W);
  if (DV % SliceV != 0)
    return fmt::format("head_dim_v {} is not a multiple of the value slice {}",
                       DV, SliceV);
  std::string E = layoutError("forward", Chunk, Warps, D, {SliceV});
  if (E.empty())
    E = layoutError("backward", Chunk, BwdWarps, 0, {SliceV, D});
  return E;
}

LinearSmem linearSharedBytes(const LinearKernelSpec &Spec) {
  const int Limit = archSharedLimit(Spec.Arch);
  const LinearConfig &C = Spec.Config;
  const int D = Spec.HeadDim;
  LinearSmem S;
  int Plain = forwardSharedBytes(D, C.SliceV, C.Chunk, false);
  int WithStage = forwardSharedBytes(D, C.SliceV, C.Chunk, true);
  // Prefetching the next chunk pays when it costs no occupancy, or when one
  // CTA per SM is all there is anyway.
  S.FwdStaged = 2 * WithStage <= Limit || (2 * Plain > Limit && WithStage <= Limit);
  S.Fwd = S.FwdStaged ? WithStage : Plain;
  S.States = statesSharedBytes(C.SliceV, C.Chunk);
  // A tile for dH besides H pays under the same rule as the staging.
  auto Grads = [&](bool TwoStates, int Buffers) {
    return gradsSharedBytes(D, C.SliceV, C.Chunk, C.BwdWarps, TwoStates, Buffers);
  };
  S.GradsTwoStates = 2 * Grads(true, 1) <= Limit ||
                     (2 * Grads(false, 1) > Limit && Grads(true, 1) <= Limit);
  // State pairs where the plain kernel holds H and dH in a tile each, one
  // value slice, a warp's m16 tile of state rows (D = 16 x warps: the
  // recompute's 64 fp32 accumulators a thread fit the register cap), and
  // two CTAs still share an SM with the neighbour's tiles (each CTA also
  // reserves 1 KiB of the SM's Limit + 1 KiB).
  S.GradsPairs =
      S.GradsTwoStates && Spec.HeadDimV == C.SliceV && D == 16 * C.BwdWarps &&
      2 * (gradsSharedBytes(D, C.SliceV, C.Chunk, C.BwdWarps, true, 1, true) +
           1024) <= Limit + 1024;
  S.Grads = S.GradsPairs ? gradsSharedBytes(D, C.SliceV, C.Chunk, C.BwdWarps,
                                            true, 1, true)
                         : Grads(S.GradsTwoStates, 1);
  // The grouped kernel prefetches the next head into a second buffer where
  // that still lets two CTAs share an SM (one slice, dq and dk rows over
  // the state tiles: linear_chunk_grads.cuh).
  const bool RowsOverStates = S.GradsTwoStates && Spec.HeadDimV == C.SliceV &&
                              C.Chunk * D * 4 <= 2 * D * C.SliceV;
  S.GroupedBuffers = RowsOverStates && 2 * Grads(true, 2) <= Limit ? 2 : 1;
  S.GroupedGrads = Grads(S.GradsTwoStates, S.GroupedBuffers);
  // Registers for two CTAs an SM where shared memory lets two share one
  // and the cap (64 Ki / (2 x threads)) still holds a warp's tiles.
  S.GradsMinBlocks = C.BwdWarps <= 8 && 2 * S.Grads <= Limit ? 2 : 1;
  S.GroupedMinBlocks = C.BwdWarps <= 8 && 2 * S.GroupedGrads <= Limit ? 2 : 1;
  // The packed forward's registers are capped for as many CTAs an SM as
  // its shared memory holds (1 KiB reserved a CTA), where the cap still
  // leaves 160 registers a thread: its job selection and state-only walk
  // took mamba2's d128/64 kernel from 168 to 181 registers on sm_90a, two
  // CTAs an SM instead of three (20 bytes spill at the cap).
  int FwdBlocks = std::max(1, (Limit + 1024) / (S.Fwd + 1024));
  while (FwdBlocks > 1 && 65536 / (FwdBlocks * C.Warps * 32) < 160)
    --FwdBlocks;
  S.FwdMinBlocks = FwdBlocks;
  return S;
}

void LinearKernelSpec::validate() const {
  if (HeadDim != 64 && HeadDim != 128 && HeadDim != 256)
    throw UserError(fmt::format("head_dim {} is not supported by the linear "
                                "kernels; expected 64, 128 or 256",
                                HeadDim));
  if (HeadDimV < 64 || HeadDimV > 512 || HeadDimV % 64 != 0)
    throw UserError(fmt::format("head_dim_v {} is not supported by the linear "
                                "kernels; expected a multiple of 64 from 64 "
                                "to 512",
                                HeadDimV));
  if (std::string E = Config.structuralError(HeadDim, HeadDimV); !E.empty())
    throw UserError("linear config " + Config.str() + ": " + E);
  LinearSmem S = linearSharedBytes(*this);
  int Limit = archSharedLimit(Arch);
  for (auto [Name, Bytes] : S.byKernel())
    if (Bytes > Limit)
      throw UserError(fmt::format(
          "linear config {}: the {} needs {} bytes of shared memory for "
          "d{}/{}; {} has {}",
          Config.str(), Name, Bytes, HeadDim, HeadDimV, archName(Arch).str(), Limit));
}

std::string linearForwardKey(const CompiledDefinition &Def,
                             const LinearKernelSpec &Spec) {
  return fmt::format("{}.linear_fwd.{}.d{}x{}.{}.{}", Def.Graph->name(),
                     std::string(dtypeName(Spec.Dtype)), Spec.HeadDim, Spec.HeadDimV,
                     archName(Spec.Arch).str(), Spec.Config.str());
}

std::string linearForwardVarlenKey(const CompiledDefinition &Def,
                                   const LinearKernelSpec &Spec) {
  return fmt::format("{}.linear_fwd_varlen.{}.d{}x{}.{}.{}", Def.Graph->name(),
                     std::string(dtypeName(Spec.Dtype)), Spec.HeadDim, Spec.HeadDimV,
                     archName(Spec.Arch).str(), Spec.Config.str());
}

std::string linearDecodeKey(const CompiledDefinition &Def,
                            const LinearKernelSpec &Spec) {
  return fmt::format("{}.linear_dec.{}.d{}x{}.{}", Def.Graph->name(),
                     std::string(dtypeName(Spec.Dtype)), Spec.HeadDim, Spec.HeadDimV,
                     archName(Spec.Arch).str());
}

std::string linearBackwardKey(const CompiledDefinition &Def,
                              const LinearKernelSpec &Spec) {
  return fmt::format("{}.linear_bwd.{}.d{}x{}.{}.{}", Def.Graph->name(),
                     std::string(dtypeName(Spec.Dtype)), Spec.HeadDim, Spec.HeadDimV,
                     archName(Spec.Arch).str(), Spec.Config.str());
}

std::string linearBackwardVarlenKey(const CompiledDefinition &Def,
                                    const LinearKernelSpec &Spec) {
  return fmt::format("{}.linear_bwd_varlen.{}.d{}x{}.{}.{}", Def.Graph->name(),
                     std::string(dtypeName(Spec.Dtype)), Spec.HeadDim, Spec.HeadDimV,
                     archName(Spec.Arch).str(), Spec.Config.str());
}

namespace {

/// The four mods: function, result, the parameter they map.
struct ModInfo {
  const char *Fn, *Result;
  ParamKind Kind;
  const char *Param;
};
constexpr ModInfo Mods[] = {{"q_mod", "q", ParamKind::Element, "q"},
                            {"k_mod", "k", ParamKind::Element, "k"},
                            {"v_mod", "v", ParamKind::Element, "v"},
                            {"decay_mod", "g", ParamKind::Decay, "decay"}};

const ir::Node *modResult(const ir::Graph &G, const ModInfo &M) {
  const ir::Function *F = G.getFunction(M.Fn);
  const ir::Node *R = F ? F->result(M.Result) : nullptr;
  if (!R)
    throw InternalError("codegen: linear definition '" + G.name() +
                        "' has no " + M.Fn);
  return R;
}

/// The parameter of kind \p K named \p Name that \p R reads, or nullptr.
const ir::Node *readParam(const ir::Node *R, ParamKind K,
                          llvm::StringRef Name) {
  for (const ir::ParamNode *P : ir::reachableParams({R}))
    if (P->getParamKind() == K && P->getName() == Name)
      return P;
  return nullptr;
}

bool readsAnyInput(const ir::Node *R) {
  for (const ir::ParamNode *P : ir::reachableParams({R}))
    if (P->getParamKind() == ParamKind::Input)
      return true;
  return false;
}

/// Mod parameters as the generated functions name them: the element (or
/// decay) is x, the indices b, h, t, inputs through the Inputs struct at
/// the token index \p Tok (t; for the decode step and the packed forward
/// ti, the token's index in the call's tensors, while t is its position in
/// its sequence).
std::string spell(const ir::Graph &G, const ir::ParamNode &P,
                  const char *Tok = "t") {
  switch (P.getParamKind()) {
  case ParamKind::Element:
  case ParamKind::Decay:
    return "x";
  case ParamKind::Index:
    return P.getName().str();
  case ParamKind::HeadDim:
    return "kHeadDim";
  case ParamKind::Input: {
    const ir::InputDecl *D = G.decls().findInput(P.getName());
    if (D && D->Shape == ir::InputShape::Scalar)
      return "in." + inputField(G, P.getName());
    return "in.load_" + inputField(G, P.getName()) + "(b, h, " + Tok + ", 0)";
  }
  case ParamKind::Score:
  case ParamKind::Scores:
  case ParamKind::Output:
  case ParamKind::Rowscale:
  case ParamKind::OtherRowscale:
  case ParamKind::FinalRowscale:
  case ParamKind::Probs:
  case ParamKind::GradProbs:
  case ParamKind::Doosum:
    break;
  }
  throw InternalError("codegen: a linear mod reads parameter '" +
                      P.getName().str() + "'");
}

const std::string ModArgs = "(const Inputs &in, float x, int b, int h, int t";

/// `static float NAME(in, x, b, h, t)` returning \p R; with \p Decode the
/// decode step's `NAME(in, x, b, h, t, ti)` (inputs read at ti).
void emitScalar(CodeWriter &W, const ir::Graph &G, const std::string &Name,
                const ir::Node *R, bool Decode = false) {
  auto B = W.block("__device__ static __forceinline__ float " + Name + ModArgs +
                   (Decode ? ", int ti)" : ")"));
  W.line(Decode ? "(void)in; (void)x; (void)b; (void)h; (void)t; (void)ti;"
                : "(void)in; (void)x; (void)b; (void)h; (void)t;");
  ExprEmitter E(W, [&](const ir::ParamNode &P) {
    return spell(G, P, Decode ? "ti" : "t");
  });
  E.emitScalarBody({R});
  std::string V = E.operand(R, false);
  if (R->getType() != ir::Type::F32)
    V = "(float)" + V;
  W.line("return " + V + ";");
}

/// `static void NAME(in, x, b, h, t, float *d)` writing d[i] = \p Rs[i];
/// with \p Decode `NAME(in, x, b, h, t, ti, float *d)` (inputs read at ti).
void emitVector(CodeWriter &W, const ir::Graph &G, const std::string &Name,
                const std::vector<const ir::Node *> &Rs, bool Decode = false) {
  auto B = W.block("__device__ static __forceinline__ void " + Name + ModArgs +
                   (Decode ? ", int ti, float *d)" : ", float *d)"));
  W.line(Decode ? "(void)in; (void)x; (void)b; (void)h; (void)t; (void)ti; (void)d;"
                : "(void)in; (void)x; (void)b; (void)h; (void)t; (void)d;");
  ExprEmitter E(W, [&](const ir::ParamNode &P) {
    return spell(G, P, Decode ? "ti" : "t");
  });
  E.emitScalarBody(Rs);
  for (size_t I = 0; I < Rs.size(); ++I) {
    std::string V = E.operand(Rs[I], false);
    if (Rs[I]->getType() != ir::Type::F32)
      V = "(float)" + V;
    W.line(fmt::format("d[{}] = {};", I, V));
  }
}

void requireLinear(const CompiledDefinition &Def) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Linear)
    throw UserError("'" + Def.Graph->name() +
                    "' is not linear attention; the linear kernels take "
                    "LinearAttentionDef definitions");
}

/// The body of `struct Variant`: constants, the mods, and with \p Grads
/// each mod's derivatives: NAME_dx (w.r.t. its element or decay) and
/// NAME_din (d[i] w.r.t. custom input i, in declaration order). With
/// \p Decode the mods (and derivatives) take the decode step's (or a packed
/// batch's) extra token index.
std::string variantMembers(const CompiledDefinition &Def,
                           const LinearKernelSpec &Spec, bool Grads,
                           bool Decode = false) {
  const ir::Graph &G = *Def.Graph;
  CodeWriter W;
  auto Ind = W.indent();
  auto Identity = [&](const ModInfo &M) {
    const ir::Node *R = modResult(G, M);
    return R == readParam(R, M.Kind, M.Param);
  };
  const char *Bools[] = {"false", "true"};
  W.line("using Inputs = attnc_gen::Inputs;");
  W.line(fmt::format("static constexpr int kHeadDim = {};", Spec.HeadDim));
  W.line(fmt::format("static constexpr int kNumInputs = {};",
                     G.decls().Inputs.size()));
  W.line(fmt::format("static constexpr bool kReadsDecay = {};",
                     Bools[linearReadsDecay(Def)]));
  W.line(fmt::format("static constexpr bool kQIdentity = {};",
                     Bools[Identity(Mods[0])]));
  W.line(fmt::format("static constexpr bool kKIdentity = {};",
                     Bools[Identity(Mods[1])]));
  W.line(fmt::format("static constexpr bool kVIdentity = {};",
                     Bools[Identity(Mods[2])]));
  W.line(fmt::format("static constexpr bool kVModReadsInputs = {};",
                     Bools[readsAnyInput(modResult(G, Mods[2]))]));
  for (const ModInfo &M : Mods)
    emitScalar(W, G, M.Fn, modResult(G, M), Decode);
  if (!Grads)
    return W.str();

  // Derivatives in a copy of the graph: the definition's graph is shared
  // and stays as compiled.
  std::unique_ptr<ir::Graph> DG = transforms::eliminateDeadNodes(G);
  const ir::Node *One = DG->constant(1.0), *Zero = DG->constant(0.0);
  for (const ModInfo &M : Mods) {
    const ir::Node *R = modResult(*DG, M);
    std::vector<ir::Result> Results;
    const ir::Node *X = readParam(R, M.Kind, M.Param);
    const ir::Node *DX = X ? transforms::tangent(*DG, R, {{X, One}}) : nullptr;
    Results.push_back({"dx", DX ? DX : Zero});
    for (const ir::InputDecl &D : DG->decls().Inputs) {
      const ir::Node *P = readParam(R, ParamKind::Input, D.Name);
      const ir::Node *DI = P ? transforms::tangent(*DG, R, {{P, One}}) : nullptr;
      Results.push_back({"d_" + D.Name, DI ? DI : Zero});
    }
    ir::Function &F = DG->addFunction(std::string(M.Fn) + "_grad");
    F.Results = std::move(Results);
  }
  transforms::simplify(*DG);
  for (const ModInfo &M : Mods) {
    const ir::Function &F = *DG->getFunction(std::string(M.Fn) + "_grad");
    emitScalar(W, *DG, std::string(M.Fn) + "_dx", F.Results[0].Value, Decode);
    std::vector<const ir::Node *> Ins;
    for (size_t I = 1; I < F.Results.size(); ++I)
      Ins.push_back(F.Results[I].Value);
    emitVector(W, *DG, std::string(M.Fn) + "_din", Ins, Decode);
  }
  return W.str();
}

std::string banner(const CompiledDefinition &Def, const std::string &Key) {
  std::string S = fmt::format(
      "// Generated by attnc {} from the definition '{}'. Do not edit.\n"
      "// key: {}\n//\n",
      attncVersion(), Def.Graph->name(), Key);
  const std::string IR = ir::toText(*Def.Graph); // outlives the split
  for (llvm::StringRef Line : llvm::split(IR, '\n'))
    S += Line.empty() ? "//\n" : "//   " + Line.str() + "\n";
  return S;
}

std::map<std::string, std::string> commonValues(const CompiledDefinition &Def,
                                                const LinearKernelSpec &Spec,
                                                const std::string &Key,
                                                bool Grads, bool Decode = false) {
  return {{"banner", banner(Def, Key)},
          {"inputs_struct", inputsStruct(*Def.Graph)},
          {"variant_members", variantMembers(Def, Spec, Grads, Decode)},
          {"dtype", Spec.Dtype == DType::F16 ? "f16" : "bf16"},
          {"head_dim", std::to_string(Spec.HeadDim)},
          {"slice_v", std::to_string(Spec.Config.SliceV)},
          {"chunk", std::to_string(Spec.Config.Chunk)}};
}

} // namespace

bool linearReadsDecay(const CompiledDefinition &Def) {
  const ir::Node *R = modResult(*Def.Graph, Mods[3]);
  return readParam(R, ParamKind::Decay, "decay") != nullptr;
}

namespace {

/// The forward scan, of a padded batch or (\p Varlen) of a packed one.
KernelSource linearForward(const CompiledDefinition &Def,
                           const LinearKernelSpec &Spec, bool Varlen) {
  requireLinear(Def);
  Spec.validate();
  KernelSource Src;
  Src.Key = Varlen ? linearForwardVarlenKey(Def, Spec)
                   : linearForwardKey(Def, Spec);
  Src.Arch = Spec.Arch;
  Src.Entries = {Varlen ? "attnc_linear_fwd_varlen" : "attnc_linear_fwd"};
  auto Values = commonValues(Def, Spec, Src.Key, false, /*Decode=*/Varlen);
  Values["warps"] = std::to_string(Spec.Config.Warps);
  Values["threads"] = std::to_string(Spec.Config.Warps * 32);
  LinearSmem S = linearSharedBytes(Spec);
  Values["staged"] = S.FwdStaged ? "true" : "false";
  Values["smem"] = std::to_string(S.Fwd);
  if (Varlen)
    Values["min_blocks"] = std::to_string(S.FwdMinBlocks);
  const char *File = Varlen ? "linear_fwd_varlen.cu.in" : "linear_fwd.cu.in";
  Src.Source = render(File, templateText(File), Values);
  return Src;
}

} // namespace

KernelSource generateLinearForward(const CompiledDefinition &Def,
                                   const LinearKernelSpec &Spec) {
  return linearForward(Def, Spec, false);
}

KernelSource generateLinearForwardVarlen(const CompiledDefinition &Def,
                                         const LinearKernelSpec &Spec) {
  return linearForward(Def, Spec, true);
}

namespace {

/// The backward's kernels, of a padded batch or (\p Varlen) of a packed one;
/// the same entries either way.
KernelSource linearBackward(const CompiledDefinition &Def,
                            const LinearKernelSpec &Spec, bool Varlen) {
  requireLinear(Def);
  Spec.validate();
  KernelSource Src;
  Src.Key = Varlen ? linearBackwardVarlenKey(Def, Spec)
                   : linearBackwardKey(Def, Spec);
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_linear_bwd_states",       "attnc_linear_bwd_chunk",
                 "attnc_linear_bwd_chunk_grouped", "attnc_linear_bwd_combine",
                 "attnc_linear_bwd_decay",         "attnc_linear_bwd_input_reduce",
                 "attnc_linear_bwd_partial_reduce"};
  auto Values = commonValues(Def, Spec, Src.Key, true, /*Decode=*/Varlen);
  LinearSmem S = linearSharedBytes(Spec);
  Values["head_dim_v"] = std::to_string(Spec.HeadDimV);
  Values["state_rows"] = std::to_string(LinearStateRows);
  Values["state_warps"] = std::to_string(LinearStateWarps);
  Values["state_threads"] = std::to_string(LinearStateWarps * 32);
  Values["bwd_warps"] = std::to_string(Spec.Config.BwdWarps);
  Values["bwd_threads"] = std::to_string(Spec.Config.BwdWarps * 32);
  Values["smem_states"] = std::to_string(S.States);
  Values["smem_grads"] = std::to_string(S.Grads);
  Values["two_states"] = S.GradsTwoStates ? "true" : "false";
  Values["pairs"] = S.GradsPairs ? "true" : "false";
  Values["bwd_min_blocks"] = std::to_string(S.GradsMinBlocks);
  Values["smem_grouped"] = std::to_string(S.GroupedGrads);
  Values["grouped_buffers"] = std::to_string(S.GroupedBuffers);
  Values["grouped_min_blocks"] = std::to_string(S.GroupedMinBlocks);
  const char *File = Varlen ? "linear_bwd_varlen.cu.in" : "linear_bwd.cu.in";
  Src.Source = render(File, templateText(File), Values);
  return Src;
}

} // namespace

KernelSource generateLinearBackward(const CompiledDefinition &Def,
                                    const LinearKernelSpec &Spec) {
  return linearBackward(Def, Spec, false);
}

KernelSource generateLinearBackwardVarlen(const CompiledDefinition &Def,
                                          const LinearKernelSpec &Spec) {
  return linearBackward(Def, Spec, true);
}

KernelSource generateLinearDecode(const CompiledDefinition &Def,
                                  const LinearKernelSpec &Spec) {
  requireLinear(Def);
  Spec.validate();
  KernelSource Src;
  Src.Key = linearDecodeKey(Def, Spec);
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_linear_decode"};
  auto Values = commonValues(Def, Spec, Src.Key, false, /*Decode=*/true);
  Values.erase("slice_v");
  Values.erase("chunk");
  Src.Source = render("linear_decode.cu.in",
                      templateText("linear_decode.cu.in"), Values);
  return Src;
}

} // namespace attn::codegen
