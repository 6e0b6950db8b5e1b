// SymbolScalar operations: each builds (or finds) a node in the graph.
#include "attn/dsl/Symbol.h"

#include "attn/Error.h"
#include "attn/ir/Graph.h"
#include "attn/ir/Printer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"

#include "ActiveTrace.h"

#include <cmath>
#include <limits>
#include <string>

namespace attn::dsl {

namespace {
/// The graph being traced on this thread (see ActiveTrace), or nullptr.
thread_local ir::Graph *Active = nullptr;
} // namespace

detail::ActiveTrace::ActiveTrace(ir::Graph &G) : Outer(Active) {
  Active = &G;
}
detail::ActiveTrace::~ActiveTrace() { Active = Outer; }
ir::Graph *detail::ActiveTrace::graph() { return Active; }

SymbolScalar::SymbolScalar(ir::Graph *G, const ir::Node *N)
    : GraphSerial(G ? G->serial() : 0), N(N) {}

ir::Graph *SymbolScalar::graph() const {
  if (!GraphSerial)
    return nullptr;
  if (Active && Active->serial() == GraphSerial)
    return Active; // the common case, without the registry's lock
  return ir::Graph::fromSerial(GraphSerial);
}

/// "<function>: " for the function being traced: the active trace's context,
/// or outside a trace that of the first operand graph that has one (an empty
/// operand has no graph, so the message borrows its partner's).
static std::string functionPrefix(
    std::initializer_list<const SymbolScalar *> Ss) {
  if (Active)
    return Active->context().empty() ? "" : Active->context() + ": ";
  for (const SymbolScalar *S : Ss)
    if (const ir::Graph *G = S->graph(); G && !G->context().empty())
      return G->context() + ": ";
  return "";
}

[[noreturn]] static void
symbolError(llvm::StringRef Op, std::initializer_list<const SymbolScalar *> Ss,
            const char *What) {
  throw UserError(functionPrefix(Ss) + "'" + Op.str() + "' " + What);
}

/// The graph that the operands of \p Op share and the new node goes into:
/// the graph being traced while a trace is active. An operand's graph is
/// found by its serial (SymbolScalar::graph()), so a symbol kept from a
/// trace that has ended is reported, never followed into freed memory, even
/// when the graph being traced sits at the address the old one had. Errors
/// name the function being traced, as the graph builders' do.
static ir::Graph &commonGraph(llvm::StringRef Op,
                              std::initializer_list<const SymbolScalar *> Ss) {
  ir::Graph *G = Active;
  for (const SymbolScalar *S : Ss) {
    if (S->empty())
      symbolError(Op, Ss,
                  Active ? "on an empty SymbolScalar: declared but never "
                           "assigned, or kept for a function traced later "
                           "(score_mod is traced before mask_mod, and both "
                           "before the online function); a symbol cannot "
                           "be carried from one function's trace to another"
                         : "on an empty SymbolScalar (declared but never "
                           "assigned)");
    ir::Graph *Own = S->graph();
    if (!Own)
      symbolError(Op, Ss,
                  "uses a symbol of a trace that has ended; a symbol cannot "
                  "be carried from one trace to another");
    if (G && G != Own)
      symbolError(Op, Ss,
                  Ss.size() == 1
                      ? "uses a symbol of another definition's trace; a "
                        "symbol cannot be carried from one trace to another"
                      : "combines symbols of two different definitions; a "
                        "symbol cannot be carried from one trace to another");
    G = Own;
  }
  return *G;
}

static ir::Graph &graphOf(const SymbolScalar &S, llvm::StringRef Op) {
  return commonGraph(Op, {&S});
}

static SymbolScalar unaryOp(const SymbolScalar &X, ir::NodeKind K) {
  ir::Graph &G = graphOf(X, ir::mnemonic(K));
  return {&G, G.unary(K, X.node())};
}

SymbolScalar SymbolScalar::exp() const { return unaryOp(*this, ir::NodeKind::Exp); }
SymbolScalar SymbolScalar::exp2() const { return unaryOp(*this, ir::NodeKind::Exp2); }
SymbolScalar SymbolScalar::log() const { return unaryOp(*this, ir::NodeKind::Log); }
SymbolScalar SymbolScalar::log2() const { return unaryOp(*this, ir::NodeKind::Log2); }
SymbolScalar SymbolScalar::abs() const { return unaryOp(*this, ir::NodeKind::Abs); }
SymbolScalar SymbolScalar::tanh() const { return unaryOp(*this, ir::NodeKind::Tanh); }
SymbolScalar SymbolScalar::sigmoid() const {
  return unaryOp(*this, ir::NodeKind::Sigmoid);
}
SymbolScalar SymbolScalar::relu() const { return unaryOp(*this, ir::NodeKind::Relu); }
SymbolScalar SymbolScalar::sqrt() const { return unaryOp(*this, ir::NodeKind::Sqrt); }
SymbolScalar SymbolScalar::rsqrt() const { return unaryOp(*this, ir::NodeKind::Rsqrt); }
SymbolScalar SymbolScalar::to_float() const {
  return unaryOp(*this, ir::NodeKind::ToFloat);
}

SymbolScalar SymbolScalar::max(const SymbolScalar &O) const {
  return detail::apply(ir::NodeKind::Max, *this, O);
}
SymbolScalar SymbolScalar::min(const SymbolScalar &O) const {
  return detail::apply(ir::NodeKind::Min, *this, O);
}

SymbolScalar SymbolScalar::get_reduce(std::string_view OpText) const {
  llvm::StringRef Op = OpText;
  ir::Graph &G = graphOf(*this, "get_reduce");
  std::optional<ir::ReduceOp> R = ir::reduceOpFromName(Op);
  if (!R) {
    std::string Msg = "get_reduce: unknown reduction \"" + Op.str() +
                      "\"; expected \"max\", \"sum\" or \"abssum\"";
    throw UserError(G.context().empty() ? Msg : G.context() + ": " + Msg);
  }
  return get_reduce(*R);
}

SymbolScalar SymbolScalar::get_reduce(ir::ReduceOp Op) const {
  ir::Graph &G = graphOf(*this, "get_reduce");
  return {&G, G.reduce(Op, N)};
}

SymbolScalar SymbolScalar::constant(double V) const {
  ir::Graph &G = graphOf(*this, "constant");
  if (std::isnan(V))
    symbolError("constant", {this},
                "of NaN: NaN has no meaning as a constant");
  return {&G, G.constant(V, ir::Type::F32)};
}

SymbolScalar SymbolScalar::constantInt(long long V) const {
  ir::Graph &G = graphOf(*this, "constant");
  return {&G, G.constant(static_cast<double>(V), ir::Type::I32)};
}

SymbolScalar &SymbolScalar::operator+=(const SymbolScalar &O) {
  return *this = *this + O;
}
SymbolScalar &SymbolScalar::operator-=(const SymbolScalar &O) {
  return *this = *this - O;
}
SymbolScalar &SymbolScalar::operator*=(const SymbolScalar &O) {
  return *this = *this * O;
}
SymbolScalar &SymbolScalar::operator/=(const SymbolScalar &O) {
  return *this = *this / O;
}

/// A comparison of an i32 value with an f32 one is a UserError: an id or an
/// index compared with a float converts silently in C++ and loses exactness
/// past 2^24, and an int32 input compared with a float32 one is most often
/// a declaration mistake. A C++ number on either side is exempt (it is
/// compared as written: `q_idx < 2.5`, `x > 0`). Arithmetic mixing the two
/// stays implicit (i32 to f32), as index arithmetic has always been.
static void checkComparisonTypes(ir::NodeKind K, const SymbolScalar &A,
                                 const SymbolScalar &B) {
  if (!ir::isCompareKind(K))
    return;
  ir::Type TA = A.node()->getType(), TB = B.node()->getType();
  bool Mixed = (TA == ir::Type::I32 && TB == ir::Type::F32) ||
               (TA == ir::Type::F32 && TB == ir::Type::I32);
  if (!Mixed || llvm::isa<ir::ConstNode>(A.node()) ||
      llvm::isa<ir::ConstNode>(B.node()))
    return;
  const ir::Node *Int = TA == ir::Type::I32 ? A.node() : B.node();
  const ir::Node *Float = TA == ir::Type::I32 ? B.node() : A.node();
  std::string IntText = ir::shortExpr(Int);
  if (!llvm::isa<ir::ParamNode>(Int))
    IntText = "(" + IntText + ")";
  std::string Hint;
  if (auto *P = llvm::dyn_cast<ir::ParamNode>(Float);
      P && P->getParamKind() == ir::ParamKind::Input)
    Hint = " (or declare input '" + P->getName().str() +
           "' InputType::I32 to compare integers)";
  symbolError(ir::mnemonic(K), {&A, &B},
              ("compares " + ir::typeName(TA).str() + " `" +
               ir::shortExpr(A.node()) + "` with " + ir::typeName(TB).str() +
               " `" + ir::shortExpr(B.node()) +
               "`; convert explicitly: `" + IntText +
               ".to_float()` compares as f32" + Hint)
                  .c_str());
}

namespace detail {
SymbolScalar apply(ir::NodeKind K, const SymbolScalar &A,
                   const SymbolScalar &B) {
  ir::Graph &G = commonGraph(ir::mnemonic(K), {&A, &B});
  // x / 0 is inf or NaN at every point: a mistake, caught while tracing
  // (floordiv and mod by 0 have a value, 0 and x, but are the same mistake).
  bool Division = K == ir::NodeKind::Div || K == ir::NodeKind::FloorDiv ||
                  K == ir::NodeKind::Mod;
  if (auto *C = llvm::dyn_cast<ir::ConstNode>(B.node());
      Division && C && C->getValue() == 0.0)
    symbolError(ir::mnemonic(K), {&A, &B},
                ("divides `" + ir::shortExpr(A.node()) +
                 "` by the constant 0")
                    .c_str());
  checkComparisonTypes(K, A, B);
  return {&G, G.binary(K, A.node(), B.node())};
}

SymbolScalar literal(const SymbolScalar &Like, double V, bool Integral,
                     std::string_view Op) {
  if (std::isnan(V))
    symbolError(Op, {&Like}, "with the constant NaN: NaN has no meaning as "
                             "a constant");
  if (std::isinf(V))
    symbolError(Op, {&Like},
                (std::string("with the constant ") + (V < 0 ? "-inf" : "inf") +
                 "; an infinite constant is a mistake unless meant: write "
                 "x.constant(" + (V < 0 ? "-" : "") +
                 "INFINITY) to opt in (a rowscale starts at -inf with "
                 "Var(\"-inf\"))")
                    .c_str());
  if (Integral && std::abs(V) < 2147483648.0)
    return Like.constantInt(static_cast<long long>(V));
  return Like.constant(V);
}

SymbolScalar literal(const SymbolScalar &Like, double V, bool Integral,
                     ir::NodeKind K) {
  return literal(Like, V, Integral, std::string_view(ir::mnemonic(K)));
}
} // namespace detail

SymbolScalar operator-(const SymbolScalar &A) {
  return unaryOp(A, ir::NodeKind::Neg);
}
SymbolScalar operator&(const SymbolScalar &A, const SymbolScalar &B) {
  return detail::apply(ir::NodeKind::And, A, B);
}
SymbolScalar operator|(const SymbolScalar &A, const SymbolScalar &B) {
  return detail::apply(ir::NodeKind::Or, A, B);
}
SymbolScalar operator!(const SymbolScalar &A) {
  return unaryOp(A, ir::NodeKind::Not);
}

SymbolScalar select(const SymbolScalar &C, const SymbolScalar &T,
                    const SymbolScalar &E) {
  ir::Graph &G = commonGraph("select", {&C, &T, &E});
  return {&G, G.select(C.node(), T.node(), E.node())};
}
SymbolScalar select(const SymbolScalar &C, const SymbolScalar &T, double E) {
  return select(C, T, detail::literal(C, E, false, "select"));
}
SymbolScalar select(const SymbolScalar &C, double T, const SymbolScalar &E) {
  return select(C, detail::literal(C, T, false, "select"), E);
}
SymbolScalar select(const SymbolScalar &C, double T, double E) {
  return select(C, detail::literal(C, T, false, "select"),
                detail::literal(C, E, false, "select"));
}

Var::Var(double V) : Value(V) {
  if (std::isnan(V))
    throw UserError("Var(nan): not an initial value; use a number, "
                    "\"inf\" or \"-inf\"");
}

Var::Var(const char *Text) {
  llvm::StringRef S = llvm::StringRef(Text ? Text : "").trim();
  // The spellings of infinity that strtod reads (a sign, then "inf" or
  // "infinity" in any case): any other text that reads as infinite is a
  // number too large for a double, which is refused below.
  llvm::StringRef Unsigned =
      S.drop_front(S.startswith("-") || S.startswith("+"));
  if (Unsigned.equals_insensitive("inf") ||
      Unsigned.equals_insensitive("infinity")) {
    Value = S.startswith("-") ? -std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::infinity();
    return;
  }
  double V = 0;
  if (S.empty() || !llvm::to_float(S, V) || std::isnan(V) || std::isinf(V))
    throw UserError("Var(\"" + S.str() +
                    "\"): not an initial value; use a number, \"inf\" or "
                    "\"-inf\"");
  Value = V;
}

} // namespace attn::dsl
