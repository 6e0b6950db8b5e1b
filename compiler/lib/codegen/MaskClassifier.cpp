// The generated block classifier of a masked definition: the mask's IR
// evaluated over a block's box with the interval rules of
// runtime/kernels/mask_interval.cuh (one attnc::mb_* call per node).
#include "attn/codegen/MaskClassifier.h"

#include "attn/Error.h"
#include "attn/codegen/InputLayout.h"
#include "attn/codegen/VariantEmitter.h"
#include "attn/ir/Walk.h"

#include "llvm/Support/Casting.h"

#include <fmt/format.h>

#include <optional>

namespace attn::codegen {

using ir::Node;
using ir::NodeKind;
using ir::ParamKind;

namespace {

/// The attnc::mb_* function of a non-leaf node kind the rules cover.
const char *intervalFunction(NodeKind K) {
  switch (K) {
  case NodeKind::Neg:
    return "mb_neg";
  case NodeKind::Abs:
    return "mb_abs";
  case NodeKind::Relu:
    return "mb_relu";
  case NodeKind::Not:
    return "mb_not";
  case NodeKind::Add:
    return "mb_add";
  case NodeKind::Sub:
    return "mb_sub";
  case NodeKind::Mul:
    return "mb_mul";
  case NodeKind::Div:
    return "mb_div";
  case NodeKind::Max:
    return "mb_max";
  case NodeKind::Min:
    return "mb_min";
  case NodeKind::FloorDiv:
    return "mb_floordiv";
  case NodeKind::Mod:
    return "mb_mod";
  case NodeKind::Lt:
    return "mb_lt";
  case NodeKind::Le:
    return "mb_le";
  case NodeKind::Gt:
    return "mb_gt";
  case NodeKind::Ge:
    return "mb_ge";
  case NodeKind::Eq:
    return "mb_eq";
  case NodeKind::Ne:
    return "mb_ne";
  case NodeKind::And:
    return "mb_and";
  case NodeKind::Or:
    return "mb_or";
  case NodeKind::Select:
    return "mb_select";
  case NodeKind::Const:
  case NodeKind::Param:
  case NodeKind::ToFloat:
  case NodeKind::Exp:
  case NodeKind::Exp2:
  case NodeKind::Log:
  case NodeKind::Log2:
  case NodeKind::Tanh:
  case NodeKind::Sigmoid:
  case NodeKind::Sqrt:
  case NodeKind::Rsqrt:
  case NodeKind::Reduce:
    break;
  }
  throw InternalError("codegen: no interval rule for " + ir::mnemonic(K).str() +
                      " (the mask analysis missed it)");
}

/// The index of input \p Name among the inputs the analysis bounds per
/// block (their bounds travel in lo/hi), if it is one.
std::optional<size_t> boundedIndex(const analysis::MaskAnalysis &A, llvm::StringRef Name) {
  for (size_t I = 0; I < A.Bounded.size(); ++I)
    if (A.Bounded[I].Name == Name)
      return I;
  return std::nullopt;
}

/// "in.<field>" when \p P is a scalar custom input, else empty.
std::string scalarField(const ir::Graph &G, const ir::ParamNode &P) {
  if (P.getParamKind() != ParamKind::Input)
    return "";
  const ir::InputDecl *D = G.decls().findInput(P.getName());
  return D && D->Shape == ir::InputShape::Scalar ? "in." + inputField(G, P.getName()) : "";
}

/// The interval (or truth set) of a leaf over the box.
std::string leaf(const Node *N, const ir::Graph &G,
                 const analysis::MaskAnalysis &A) {
  if (auto *C = llvm::dyn_cast<ir::ConstNode>(N)) {
    switch (C->getType()) {
    case ir::Type::F32:
      return "attnc::mb_f(" + floatLiteral(C->getValue()) + ")";
    case ir::Type::I32:
      return fmt::format("attnc::mb_i({}LL)", (long long)C->getValue());
    case ir::Type::Bool:
      return C->getValue() != 0.0 ? "attnc::mb_tri(true)"
                                  : "attnc::mb_tri(false)";
    }
  }
  auto *P = llvm::cast<ir::ParamNode>(N);
  switch (P->getParamKind()) {
  case ParamKind::Index:
    if (P->getName() == "q_idx")
      return "attnc::mb_i(q_lo, q_hi)";
    if (P->getName() == "kv_idx")
      return "attnc::mb_i(kv_lo, kv_hi)";
    return "attnc::mb_i(" + P->getName().str() + ")";
  case ParamKind::HeadDim:
    return "attnc::mb_i(kHeadDim)";
  case ParamKind::Input: {
    // An int32 input is an IvI, so that it compares with the indices (the
    // IR has no i32/f32 comparison); its bounds travel as the int's bits
    // (mask_bound_int), exact over the whole int range.
    const bool Int = P->getType() == ir::Type::I32;
    if (std::optional<size_t> I = boundedIndex(A, P->getName()))
      return fmt::format(Int ? "attnc::mb_i_bits(lo[{0}], hi[{0}])"
                             : "attnc::IvF{{lo[{0}], hi[{0}]}}",
                         *I);
    std::string Value = scalarField(G, *P);
    if (Value.empty())
      Value = "in.load_" + inputField(G, P->getName()) + "(b, h, 0, 0)";
    return (Int ? "attnc::mb_i(" : "attnc::mb_f(") + Value + ")";
  }
  case ParamKind::Score:
  case ParamKind::Scores:
  case ParamKind::Output:
  case ParamKind::Rowscale:
  case ParamKind::FinalRowscale:
  case ParamKind::Probs:
  case ParamKind::GradProbs:
  case ParamKind::Doosum:
  case ParamKind::Element:
  case ParamKind::OtherRowscale:
  case ParamKind::Decay:
    break;
  }
  throw InternalError("codegen: the mask reads parameter '" +
                      P->getName().str() + "'");
}

void emitBlockClass(CodeWriter &W, const ir::Graph &G,
                    const analysis::MaskAnalysis &A) {
  auto B = W.block("__device__ static __forceinline__ int mask_block_class("
                   "const Inputs &in, int b, int h, int q_lo, int q_hi, int "
                   "kv_lo, int kv_hi, const float *lo, const float *hi)");
  W.line("(void)in; (void)b; (void)h; (void)q_lo; (void)q_hi; (void)kv_lo; "
         "(void)kv_hi; (void)lo; (void)hi;");
  auto Name = [&](const Node *N) {
    if (llvm::isa<ir::ConstNode>(N) || llvm::isa<ir::ParamNode>(N))
      return leaf(N, G, A);
    return "v" + std::to_string(N->getId());
  };
  for (const Node *N : ir::topologicalOrder({A.Mask})) {
    if (N->operands().empty())
      continue;
    // The element path computes in float as soon as one operand is (C++'s
    // conversions, and div always): convert i32 intervals the same way.
    bool AnyFloat = N->getKind() == NodeKind::Div;
    for (const Node *Op : N->operands())
      AnyFloat = AnyFloat || Op->getType() == ir::Type::F32;
    std::string Args;
    for (unsigned I = 0; I < N->operands().size(); ++I) {
      const Node *Op = N->operand(I);
      std::string S = Name(Op);
      bool Numeric = Op->getType() != ir::Type::Bool;
      if (Numeric && AnyFloat && Op->getType() == ir::Type::I32)
        S = "attnc::mb_f(" + S + ")";
      Args += (I ? ", " : "") + S;
    }
    // By an int32 scalar input: mb_floordiv_by / mb_mod_by with the host's
    // multiplier (a bounded input, whose bounds travel in lo/hi, is not
    // a single value here).
    const bool IntDivision =
        (N->getKind() == NodeKind::FloorDiv || N->getKind() == NodeKind::Mod) && !AnyFloat;
    const auto *D = IntDivision ? llvm::dyn_cast<ir::ParamNode>(N->operand(1)) : nullptr;
    if (D && !boundedIndex(A, D->getName())) {
      const std::string Field = scalarField(G, *D);
      if (std::string M = Field.empty() ? "" : scalarDivisorMultiplier(D, Field); !M.empty()) {
        W.line(fmt::format("const auto v{} = attnc::{}({}, {}, {});", N->getId(),
                           N->getKind() == NodeKind::FloorDiv ? "mb_floordiv_by" : "mb_mod_by",
                           Name(N->operand(0)), Field, M));
        continue;
      }
    }
    W.line("const auto v" + std::to_string(N->getId()) +
           " = attnc::" + intervalFunction(N->getKind()) + "(" + Args + ");");
  }
  W.line("return attnc::mb_class(" + Name(A.Mask) + ");");
}

} // namespace

void emitMaskClassifier(CodeWriter &W, const ir::Graph &G,
                        const analysis::MaskAnalysis &A) {
  W.line(fmt::format("static constexpr int kMaskGrouping = {}; // {}",
                     int(A.Grouping),
                     analysis::maskGroupingName(A.Grouping).str()));
  W.line(fmt::format("static constexpr bool kMaskAnalysed = {};",
                     A.Analysed ? "true" : "false"));
  W.line(
      fmt::format("static constexpr int kMaskBounds = {};", A.Bounded.size()));
  if (!A.Analysed)
    return;
  {
    auto B = W.block(
        "__device__ static __forceinline__ bool mask_bound_by_key(int i)");
    W.line("(void)i;");
    std::string Keys;
    for (size_t I = 0; I < A.Bounded.size(); ++I)
      if (A.Bounded[I].ByKey)
        Keys += (Keys.empty() ? "" : " || ") + fmt::format("i == {}", I);
    W.line("return " + (Keys.empty() ? std::string("false") : Keys) + ";");
  }
  {
    auto B = W.block("__device__ static __forceinline__ float "
                     "mask_bound_value(const Inputs &in, int i, int b, int h, "
                     "int idx)");
    W.line("(void)in; (void)i; (void)b; (void)h; (void)idx;");
    for (size_t I = 0; I < A.Bounded.size(); ++I) {
      const std::string F = inputField(G, A.Bounded[I].Name);
      W.line(fmt::format("if (i == {}) return in.load_{}(b, h, {}); // {}", I,
                         F, A.Bounded[I].ByKey ? "0, idx" : "idx, 0",
                         quotedName(A.Bounded[I].Name)));
    }
    W.line("return 0.0f;");
  }
  // int32 inputs are bounded as ints (block_mask.cuh's bound_blocks stores
  // their bits); written only where there is one, so that the other
  // variants' source stays as it was.
  std::string IntBounds;
  for (size_t I = 0; I < A.Bounded.size(); ++I)
    if (G.decls().findInput(A.Bounded[I].Name)->Elem == ir::InputType::I32)
      IntBounds += (IntBounds.empty() ? "" : " || ") + fmt::format("i == {}", I);
  if (!IntBounds.empty()) {
    W.line("static constexpr bool kMaskBoundsInt = true;");
    {
      auto B = W.block(
          "__device__ static __forceinline__ bool mask_bound_is_int(int i)");
      W.line("return " + IntBounds + ";");
    }
    auto B = W.block("__device__ static __forceinline__ int "
                     "mask_bound_int(const Inputs &in, int i, int b, int h, "
                     "int idx)");
    W.line("(void)in; (void)i; (void)b; (void)h; (void)idx;");
    for (size_t I = 0; I < A.Bounded.size(); ++I) {
      if (G.decls().findInput(A.Bounded[I].Name)->Elem != ir::InputType::I32)
        continue;
      const std::string F = inputField(G, A.Bounded[I].Name);
      W.line(fmt::format("if (i == {}) return in.load_{}(b, h, {}); // {}", I,
                         F, A.Bounded[I].ByKey ? "0, idx" : "idx, 0",
                         quotedName(A.Bounded[I].Name)));
    }
    W.line("return 0;");
  }
  emitBlockClass(W, G, A);
}

} // namespace attn::codegen
