// The decode kernels: their tile configuration, the generated merge of two
// row states (from the merge analysis), rendered into decode_sm80.cu.in;
// the public merge's kernel for a combine (merge_results.cu.in) runs the
// same generated merge.
#include "attn/codegen/DecodeCodegen.h"

#include "attn/Error.h"
#include "attn/codegen/CodeWriter.h"
#include "attn/codegen/InputLayout.h"
#include "attn/codegen/Template.h"
#include "attn/codegen/Templates.h"
#include "attn/codegen/VariantEmitter.h"
#include "attn/codegen/VariantSource.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace attn::codegen {

/// The most online rowscales a decode state carries (one workspace row
/// holds them and the seen flag in 8 floats).
static constexpr int MaxDecodeRowscales = 7;

std::string DecodeConfig::str() const {
  return fmt::format("dec.m{}n{}w{}s{}", BlockM, BlockN, Warps, Stages);
}

DecodeConfig DecodeConfig::parse(const std::string &Text) {
  DecodeConfig C;
  if (std::sscanf(Text.c_str(), "dec.m%dn%dw%ds%d", &C.BlockM, &C.BlockN,
                  &C.Warps, &C.Stages) != 4 ||
      C.str() != Text)
    throw UserError("config '" + Text +
                    "': expected dec.m<rows>n<block N>w<warps>s<stages>, "
                    "e.g. dec.m16n64w4s3");
  return C;
}

int DecodeConfig::sharedBytes(int D, int DV) const {
  int Tiles = 2 * (BlockM * D + Stages * BlockN * (D + DV));
  // The other warps' o rows and states, 8 floats a row (Merge.h's bound).
  int States = (Warps - 1) * BlockM * (DV + 8) * 4;
  return std::max(Tiles, States);
}

DecodeConfig DecodeConfig::defaultFor(int D, int DV, GpuArch Arch, int64_t PageSize) {
  DecodeConfig C;
  if (D == 128 && DV == 128 && (PageSize == 0 || PageSize >= DecodeTwoWarpsMinPage))
    C.Warps = 2;
  if (C.sharedBytes(D, DV) > archSharedLimit(Arch))
    C.Stages = 2;
  return C;
}

std::vector<DecodeConfig> DecodeConfig::enumerate() {
  std::vector<DecodeConfig> All;
  for (int M : {16, 32})
    for (int N : {64, 128})
      for (int W : {2, 4})
        for (int S : {2, 3, 4}) {
          DecodeConfig C{M, N, W, S};
          if (C.structuralError().empty())
            All.push_back(C);
        }
  return All;
}

std::string DecodeConfig::structuralError() const {
  if (BlockM != 16 && BlockM != 32)
    return fmt::format("config {}: rows per CTA must be 16 or 32", str());
  if (Warps != 1 && Warps != 2 && Warps != 4 && Warps != 8)
    return fmt::format("config {}: warps must be 1, 2, 4 or 8", str());
  if (BlockN < 16 * Warps || BlockN % (16 * Warps) != 0 || BlockN > 256)
    return fmt::format("config {}: block N must be a multiple of 16 x warps "
                       "({}), at most 256",
                       str(), 16 * Warps);
  if (Stages < 2 || Stages > 4)
    return fmt::format("config {}: stages must be 2, 3 or 4", str());
  return "";
}

std::string decodeConfigError(const KernelSpec &Spec, const DecodeConfig &C) {
  if (std::string Why = forwardHeadDimError("decode_sm80", Spec.HeadDim,
                                            Spec.HeadDimV);
      !Why.empty())
    return Why;
  if (std::string Why = C.structuralError(); !Why.empty())
    return Why;
  int Bytes = C.sharedBytes(Spec.HeadDim, Spec.HeadDimV);
  if (Bytes > archSharedLimit(Spec.Arch))
    return fmt::format(
        "config {} needs {} bytes of shared memory for d{}/{}; {} has {}",
        C.str(), Bytes, Spec.HeadDim, Spec.HeadDimV,
        archName(Spec.Arch).str(), archSharedLimit(Spec.Arch));
  return "";
}

/// The body of Merge::merge from the definition's combine: a's rowscales
/// read as `a.<field>`, b's as `b.<field>`; every merged value is computed
/// before a is overwritten, since the combine reads a's old ones.
static void emitCombine(CodeWriter &W, const ir::Graph &G) {
  const ir::Function *F = G.getFunction("combine");
  if (!F)
    throw InternalError("codegen: a combine merge without its function");
  ExprEmitter E(W, [&](const ir::ParamNode &P) -> std::string {
    if (P.getParamKind() == ir::ParamKind::Rowscale)
      return "a." + rowscaleField(G, P.getName());
    if (P.getParamKind() == ir::ParamKind::OtherRowscale)
      return "b." + rowscaleField(G, P.getName());
    throw InternalError("codegen: combine reads '" + P.getName().str() + "'");
  });
  const auto &Decls = G.decls().OnlineRowscales;
  std::vector<const ir::Node *> Roots;
  for (const ir::RowscaleDecl &D : Decls)
    Roots.push_back(F->result(D.Name));
  Roots.push_back(F->result("o_scale_a"));
  Roots.push_back(F->result("o_scale_b"));
  E.emitScalarBody(Roots);
  auto Value = [&](const ir::Node *N) {
    std::string V = E.operand(N, false);
    return N->getType() == ir::Type::F32 ? V : "(float)" + V;
  };
  for (size_t I = 0; I < Decls.size(); ++I)
    W.line(fmt::format("const float merged{} = {};", I, Value(Roots[I])));
  W.line("fa = " + Value(Roots[Decls.size()]) + ";");
  W.line("fb = " + Value(Roots[Decls.size() + 1]) + ";");
  for (size_t I = 0; I < Decls.size(); ++I)
    W.line(fmt::format("a.{} = merged{};", rowscaleField(G, Decls[I].Name),
                       I));
}

std::string decodeMergeStruct(const ir::Graph &G,
                              const analysis::MergeInfo &M) {
  const auto &Decls = G.decls().OnlineRowscales;
  if (Decls.size() > size_t(MaxDecodeRowscales))
    throw NotSupportedYet(fmt::format(
        "decode with {} online rowscales (at most {})", Decls.size(),
        MaxDecodeRowscales));
  CodeWriter W;
  {
    auto S = W.block("struct Merge", ";");
    W.line(fmt::format("static constexpr int kKind = {}; // {}", int(M.Kind),
                       analysis::mergeKindName(M.Kind).str()));
    W.line(fmt::format("static constexpr int kNumRowscales = {};",
                       Decls.size()));
    {
      auto B = W.block("__device__ static __forceinline__ void store(const "
                       "Variant::RowState &st, float *dst)");
      W.line("(void)st; (void)dst;");
      for (size_t I = 0; I < Decls.size(); ++I)
        W.line(fmt::format("dst[{}] = st.{};", I,
                           rowscaleField(G, Decls[I].Name)));
    }
    {
      auto B = W.block("__device__ static __forceinline__ void "
                       "load(Variant::RowState &st, const float *src)");
      W.line("(void)st; (void)src;");
      for (size_t I = 0; I < Decls.size(); ++I)
        W.line(fmt::format("st.{} = src[{}];", rowscaleField(G, Decls[I].Name),
                           I));
    }
    W.line("/// a becomes the merge of a and b (both seen); o becomes "
           "fa * o_a + fb * o_b.");
    auto B = W.block("__device__ static __forceinline__ void "
                     "merge(Variant::RowState &a, const Variant::RowState &b, "
                     "float &fa, float &fb)");
    W.line("(void)a; (void)b;");
    switch (M.Kind) {
    case analysis::MergeKind::None:
      W.line("fa = 1.0f; fb = 1.0f; // no merge: never split");
      break;
    case analysis::MergeKind::Sum:
      W.line("fa = 1.0f; fb = 1.0f;");
      for (const ir::RowscaleDecl &D : Decls) {
        std::string F = rowscaleField(G, D.Name);
        W.line(fmt::format("a.{0} = a.{0} + b.{0};", F));
      }
      break;
    case analysis::MergeKind::LogSumExp: {
      std::string Max = rowscaleField(G, Decls[M.MaxRowscale].Name);
      W.line(fmt::format("const float m = fmaxf(a.{0}, b.{0});", Max));
      // A part whose max is still -inf adds nothing (exp(-inf - -inf) is NaN).
      W.line("const float ninf = __int_as_float(0xff800000);");
      W.line(fmt::format("fa = a.{0} == ninf ? 0.0f : attnc::exp_diff(a.{0}, "
                         "m);",
                         Max));
      W.line(fmt::format("fb = b.{0} == ninf ? 0.0f : attnc::exp_diff(b.{0}, "
                         "m);",
                         Max));
      W.line(fmt::format("a.{} = m;", Max));
      for (size_t I = 0; I < Decls.size(); ++I) {
        if (int(I) == M.MaxRowscale)
          continue;
        std::string F = rowscaleField(G, Decls[I].Name);
        W.line(fmt::format("a.{0} = fa * a.{0} + fb * b.{0};", F));
      }
      break;
    }
    case analysis::MergeKind::Combine:
      emitCombine(W, G);
      break;
    }
  }
  return W.str();
}

/// The decode kernels rendered from \p Template, \p Skeleton naming them
/// in the key, \p Entry the split kernel's entry; the merge kernel takes
/// the split kernel's arguments (PagedDecodeArgs where \p Paged: a
/// sequence's length, for the epilogue's q_idx, comes from its pages).
static KernelSource generateDecodeFrom(const CompiledDefinition &Def,
                                       const KernelSpec &Spec,
                                       const DecodeConfig &C,
                                       llvm::StringRef Template,
                                       llvm::StringRef Skeleton,
                                       llvm::StringRef Entry, bool Paged,
                                       int PageMode = -1) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Transformer)
    throw NotSupportedYet("decode for linear attention ('" +
                          Def.Graph->name() + "')");
  if (std::string Why = decodeConfigError(Spec, C); !Why.empty())
    throw UserError(Why);
  analysis::MergeInfo M = analysis::analyzeMerge(*Def.Graph);
  KernelSource Src;
  Src.Key = fmt::format("{}.{}.{}.d{}x{}.{}.{}", Def.Graph->name(),
                        Skeleton.str(), std::string(dtypeName(Spec.Dtype)), Spec.HeadDim,
                        Spec.HeadDimV, archName(Spec.Arch).str(), C.str());
  if (Paged)
    Src.Key += PageMode < 0 ? ".gather" : fmt::format(".steps{}", PageMode);
  Src.Arch = Spec.Arch;
  Src.Entries = {Entry.str()};
  if (M.Kind != analysis::MergeKind::None)
    Src.Entries.push_back("attnc_decode_merge");
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  Values["merge_struct"] = decodeMergeStruct(*Def.Graph, M);
  Values["threads"] = std::to_string(C.Warps * 32);
  Values["block_m"] = std::to_string(C.BlockM);
  Values["block_n"] = std::to_string(C.BlockN);
  Values["warps"] = std::to_string(C.Warps);
  Values["stages"] = std::to_string(C.Stages);
  if (Paged)
    Values["page_mode"] = std::to_string(PageMode);
  Values["merge_kernel"] =
      M.Kind == analysis::MergeKind::None
          ? "// No merge kernel: " + M.Reason + "; decode never splits.\n"
          : fmt::format(
                "extern \"C\" __global__ void\n"
                "__launch_bounds__(attnc::decode_merge_threads({1}))\n"
                "attnc_decode_merge(const attnc::{2} a, const "
                "attnc_gen::Inputs in) {{\n"
                "  attnc::{3}<attnc_gen::Variant, attnc_gen::Merge, "
                "attnc::{0}, {1}>(a, in);\n"
                "}}\n",
                Values["dtype"], Spec.HeadDimV,
                Paged ? "PagedDecodeArgs" : "DecodeArgs",
                Paged ? "decode_merge_paged" : "decode_merge");
  Src.Source = render(Template, templateText(Template), Values);
  return Src;
}

KernelSource generateDecode(const CompiledDefinition &Def,
                            const KernelSpec &Spec, const DecodeConfig &C) {
  return generateDecodeFrom(Def, Spec, C, "decode_sm80.cu.in", "decode_sm80",
                            "attnc_decode", /*Paged=*/false);
}

KernelSource generatePagedDecode(const CompiledDefinition &Def,
                                 const KernelSpec &Spec,
                                 const DecodeConfig &C, int PageMode) {
  // A thread has at most 16 rows a block: modes 0 to 4.
  if (PageMode < -1 || PageMode > 4)
    throw InternalError(fmt::format(
        "paged decode: row-step mode {} (expected -1 to 4)", PageMode));
  return generateDecodeFrom(Def, Spec, C, "decode_paged_sm80.cu.in",
                            "decode_paged_sm80", "attnc_decode_paged",
                            /*Paged=*/true, PageMode);
}

KernelSource generateMergeResults(const CompiledDefinition &Def,
                                  const KernelSpec &Spec) {
  analysis::ResultMergeInfo M = analysis::analyzeResultMerge(*Def.Graph);
  if (M.Kind == analysis::MergeKind::None)
    throw UserError("'" + Def.Graph->name() +
                    "': its results cannot be merged: " + M.Reason);
  if (M.Kind != analysis::MergeKind::Combine)
    throw UserError(fmt::format(
        "'{}': its results merge by the derived {} rule, which the "
        "runtime's attnc_merge_results runs; no kernel of the definition's "
        "is generated",
        Def.Graph->name(), analysis::mergeKindName(M.Kind).str()));
  if (Spec.HeadDimV % 2 != 0 || Spec.HeadDimV < 2 || Spec.HeadDimV > 2048)
    throw UserError(fmt::format("merge_results: head dim v {} must be even, "
                                "2 to 2048 (two columns a thread)",
                                Spec.HeadDimV));
  KernelSource Src;
  Src.Key = fmt::format("{}.merge_results.{}.d{}x{}.{}", Def.Graph->name(),
                        std::string(dtypeName(Spec.Dtype)), Spec.HeadDim,
                        Spec.HeadDimV, archName(Spec.Arch).str());
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_merge_results_combine"};
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  Values["merge_struct"] = decodeMergeStruct(*Def.Graph, M.State);
  Values["threads"] = std::to_string(Spec.HeadDimV / 2);
  Src.Source = render("merge_results.cu.in",
                      templateText("merge_results.cu.in"), Values);
  return Src;
}

} // namespace attn::codegen
