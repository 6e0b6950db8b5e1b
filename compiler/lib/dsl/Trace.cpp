// Tracing: run the user's functions on placeholders and record their results.
#include "attn/dsl/Trace.h"

#include "attn/Error.h"
#include "attn/dsl/Names.h"
#include "attn/ir/Printer.h"

#include "ActiveTrace.h"

#include "llvm/Support/Casting.h"

#include <cmath>

namespace attn::dsl {

using ir::Graph;
using ir::ParamKind;
using ir::Space;
using ir::Type;

namespace {

const std::vector<InputShape> AllShapes = {
    InputShape::Scalar, InputShape::PerHead,       InputShape::PerRow,
    InputShape::PerKey, InputShape::Full,          InputShape::PerQueryToken,
    InputShape::PerKeyToken};
const std::vector<InputShape> RowShapes = {
    InputShape::Scalar, InputShape::PerHead, InputShape::PerRow,
    InputShape::PerQueryToken};
/// Linear attention's mods: one value per token and head.
const std::vector<InputShape> LinearShapes = {
    InputShape::Scalar, InputShape::PerHead, InputShape::PerRow};

/// Binds the graph's context and the inputs to one function while it is
/// traced, and unbinds them however the user's code exits.
class FunctionScope {
public:
  FunctionScope(Graph &G, const CustomInputs &In, const std::string &Name,
                std::vector<InputShape> Allowed,
                const OnlineFunc *Online = nullptr)
      : G(G), In(In), Online(Online) {
    G.setContext(Name);
    In.bind(&G, Name, std::move(Allowed));
    if (Online)
      Online->bindInputs(&In);
  }
  ~FunctionScope() {
    G.setContext("");
    In.unbind();
    if (Online)
      Online->bindInputs(nullptr);
  }

private:
  Graph &G;
  const CustomInputs &In;
  const OnlineFunc *Online;
};

class Tracer {
public:
  explicit Tracer(Graph &G) : G(G) {}

  SymbolScalar param(ParamKind K, llvm::StringRef Name, Type T, Space S) {
    return {&G, G.param(K, Name, T, S)};
  }
  SymbolScalar index(llvm::StringRef Name, Space S) {
    return param(ParamKind::Index, Name, Type::I32, S);
  }

  /// Checks a returned symbol and records it as result \p Name of \p F.
  void record(ir::Function &F, const std::string &Name,
              const SymbolScalar &Value, bool WantBool = false) {
    if (Value.empty())
      throw UserError(F.Name + ": result '" + Name +
                      "' is an empty SymbolScalar (never assigned)");
    // graph() finds the symbol's graph by its serial: a symbol kept from a
    // trace that has ended has none, even if G now sits at its address.
    if (ir::Graph *Own = Value.graph(); Own != &G)
      throw UserError(F.Name + ": result '" + Name + "' is a symbol of " +
                      (Own ? "another definition's trace"
                           : "a trace that has ended") +
                      "; a symbol cannot be carried from one trace to "
                      "another");
    bool IsBool = Value.node()->getType() == Type::Bool;
    if (WantBool && !IsBool)
      throw UserError(F.Name + ": must return a boolean such as q_idx >= "
                      "kv_idx, but returns the number `" +
                      ir::shortExpr(Value.node()) + "`");
    if (!WantBool && IsBool)
      throw UserError(F.Name + ": result '" + Name +
                      "' is a boolean `" + ir::shortExpr(Value.node()) +
                      "`; turn it into a number with select(cond, a, b)");
    F.Results.push_back({Name, Value.node()});
  }

  /// Records rowscales returned by \p F, checking them against \p Declared.
  void recordRowscales(ir::Function &F, const Rowscales &Returned,
                       const OnlineFunc::Decls &Declared,
                       const char *What) {
    if (!Returned.repeated().empty())
      throw UserError(F.Name + ": " + What + " '" +
                      Returned.repeated().front() + "' is returned twice");
    for (const auto &[Name, Value] : Returned.entries()) {
      bool Known = false;
      for (const auto &D : Declared)
        Known = Known || D.first == Name;
      if (!Known)
        throw UserError(F.Name + ": returns unknown " + What + " '" + Name +
                        "'; declared: " + names(Declared));
    }
    for (const auto &D : Declared) {
      if (!Returned.contains(D.first))
        throw UserError(F.Name + ": " + What + " '" + D.first +
                        "' is never produced; return it in the " + What +
                        "s");
      record(F, D.first, Returned[D.first]);
    }
  }

  static std::string names(const OnlineFunc::Decls &Ds) {
    std::string S;
    for (const auto &D : Ds)
      S += (S.empty() ? "" : ", ") + D.first;
    return S.empty() ? "none" : S;
  }

  Rowscales placeholders(const OnlineFunc::Decls &Ds, ParamKind K,
                         const std::string &Function, const char *What) {
    Rowscales R;
    for (const auto &D : Ds)
      R.set(D.first, param(K, D.first, Type::F32, Space::Row));
    R.setOwner(Function, What);
    return R;
  }

private:
  Graph &G;
};

/// The names the functions' results use; rowscales may not take them.
const char *const ReservedNames[] = {"scores",    "o_scale",   "o",      "p",
                                     "dscores",   "o_scale_a", "o_scale_b"};

void checkRowscaleDecls(const OnlineFunc::Decls &Ds, const char *What) {
  for (size_t I = 0; I < Ds.size(); ++I) {
    checkIdentifier(What, Ds[I].first);
    for (const char *R : ReservedNames)
      if (Ds[I].first == R)
        throw UserError(std::string(What) + " '" + Ds[I].first +
                        "': the name is reserved for a function result; "
                        "choose another");
    for (size_t J = 0; J < I; ++J)
      if (Ds[I].first == Ds[J].first)
        throw UserError(std::string(What) + " '" + Ds[I].first +
                        "' is declared twice");
  }
}

/// The optional combine: state a's rowscales are the online rowscale
/// parameters, state b's their OtherRowscale twins. It reads no inputs.
void traceCombine(Graph &G, Tracer &T, const CustomInputs &In,
                  const OnlineFunc &OF) {
  FunctionScope S(G, In, "combine", {}, &OF);
  Rowscales A = T.placeholders(OF.onlineRowscales(), ParamKind::Rowscale,
                               "combine", "rowscale of state a");
  Rowscales B = T.placeholders(OF.onlineRowscales(), ParamKind::OtherRowscale,
                               "combine", "rowscale of state b");
  std::optional<CombineResult> R = OF.combine(A, B);
  if (!R)
    return;
  ir::Function &F = G.addFunction("combine");
  T.recordRowscales(F, R->rowscales, OF.onlineRowscales(), "rowscale");
  // A plain number needs a symbol of this trace to become a constant.
  SymbolScalar Like = A.entries().empty()
                          ? T.param(ParamKind::HeadDim, "D", Type::I32,
                                    Space::Const)
                          : A.entries().front().second;
  T.record(F, "o_scale_a", R->o_scale_a.toSymbol(Like));
  T.record(F, "o_scale_b", R->o_scale_b.toSymbol(Like));
}

void traceAttention(Graph &G, const AttentionDef &Def) {
  if (!Def.online_func)
    throw UserError("definition '" + Def.name +
                    "' has no online function; set online_func");
  const OnlineFunc &OF = *Def.online_func;
  checkRowscaleDecls(OF.onlineRowscales(), "online rowscale");
  checkRowscaleDecls(OF.finalRowscales(), "final rowscale");
  ir::Declarations &D = G.decls();
  for (const auto &[Name, Init] : OF.onlineRowscales())
    D.OnlineRowscales.push_back({Name, Init.value()});
  for (const auto &[Name, Init] : OF.finalRowscales())
    D.FinalRowscales.push_back({Name, Init.value()});

  Tracer T(G);
  const CustomInputs &In = Def.inputs;
  SymbolScalar B = T.index("b", Space::Head), H = T.index("h", Space::Head);
  SymbolScalar Q = T.index("q_idx", Space::Row);
  SymbolScalar K = T.index("kv_idx", Space::Col);

  {
    FunctionScope S(G, In, "score_mod", AllShapes);
    ir::Function &F = G.addFunction("score_mod");
    SymbolScalar Score = T.param(ParamKind::Score, "score", Type::F32,
                                 Space::Tile);
    T.record(F, "score",
             Def.score_mod ? Def.score_mod(Score, In, B, H, Q, K) : Score);
  }
  if (Def.mask_mod) {
    FunctionScope S(G, In, "mask_mod", AllShapes);
    ir::Function &F = G.addFunction("mask_mod");
    T.record(F, "mask", Def.mask_mod(B, H, Q, K, In), /*WantBool=*/true);
    D.HasMask = true;
  }

  SymbolScalar Scores = T.param(ParamKind::Scores, "scores", Type::F32,
                                Space::Tile);
  {
    FunctionScope S(G, In, "online_fwd", AllShapes, &OF);
    ir::Function &F = G.addFunction("online_fwd");
    Rowscales RS = T.placeholders(OF.onlineRowscales(), ParamKind::Rowscale,
                                  F.Name, "rowscale");
    OnlineFwdResult R = OF.online_fwd(Scores, RS, B, H, Q);
    T.record(F, "scores", R.scores);
    T.recordRowscales(F, R.rowscales, OF.onlineRowscales(), "rowscale");
    T.record(F, "o_scale", R.o_scale.toSymbol(Scores));
  }
  {
    FunctionScope S(G, In, "online_fwd_epilogue", RowShapes, &OF);
    ir::Function &F = G.addFunction("online_fwd_epilogue");
    Rowscales RS = T.placeholders(OF.onlineRowscales(), ParamKind::Rowscale,
                                  F.Name, "rowscale");
    SymbolScalar O = T.param(ParamKind::Output, "o", Type::F32, Space::Out);
    EpilogueResult R = OF.online_fwd_epilogue(O, RS, B, H, Q);
    T.record(F, "o", R.o);
    T.recordRowscales(F, R.final_rowscales, OF.finalRowscales(),
                      "final rowscale");
  }
  {
    FunctionScope S(G, In, "forward", AllShapes, &OF);
    ir::Function &F = G.addFunction("forward");
    Rowscales Final = T.placeholders(
        OF.finalRowscales(), ParamKind::FinalRowscale, F.Name,
        "final rowscale");
    T.record(F, "p", OF.forward(Scores, Final, B, H, Q, K));
  }
  {
    FunctionScope S(G, In, "backward", AllShapes, &OF);
    Rowscales Final = T.placeholders(
        OF.finalRowscales(), ParamKind::FinalRowscale, "backward",
        "final rowscale");
    SymbolScalar Dp = T.param(ParamKind::GradProbs, "dp", Type::F32,
                              Space::Tile);
    SymbolScalar P = T.param(ParamKind::Probs, "p", Type::F32, Space::Tile);
    SymbolScalar Doosum = T.param(ParamKind::Doosum, "doosum", Type::F32,
                                  Space::Row);
    std::optional<SymbolScalar> R =
        OF.backward(Dp, P, Final, Doosum, B, H, Q, K);
    if (R) {
      ir::Function &F = G.addFunction("backward");
      T.record(F, "dscores", *R);
      D.HasBackward = true;
    }
  }
  // Last, so that a definition without one numbers its nodes as before.
  traceCombine(G, T, In, OF);
}

void traceLinear(Graph &G, const LinearAttentionDef &Def) {
  if (std::isnan(Def.decay_sample_lo) || std::isnan(Def.decay_sample_hi))
    throw UserError("definition '" + Def.name +
                    "': decay sample range bound " +
                    (std::isnan(Def.decay_sample_lo) ? "lo" : "hi") +
                    " is NaN");
  if (!(Def.decay_sample_lo <= Def.decay_sample_hi))
    throw UserError("definition '" + Def.name +
                    "': decay sample range is empty (lo > hi)");
  G.decls().DecaySampleLo = Def.decay_sample_lo;
  G.decls().DecaySampleHi = Def.decay_sample_hi;
  Tracer T(G);
  const CustomInputs &In = Def.inputs;
  for (const ir::InputDecl &D : In.decls())
    if (D.Elem != ir::InputType::F32)
      throw NotSupportedYet("definition '" + Def.name + "': custom input '" +
                            D.Name + "' is " +
                            ir::inputTypeName(D.Elem).str() +
                            "; linear attention takes float32 inputs");
  SymbolScalar B = T.index("b", Space::Head), H = T.index("h", Space::Head);
  SymbolScalar Tok = T.index("t", Space::Row);
  struct ModSpec {
    const char *Function, *Arg;
    const ElementMod *Mod;
    ParamKind Kind;
    Space Sp;
  } Mods[] = {
      {"q_mod", "q", &Def.q_mod, ParamKind::Element, Space::Tile},
      {"k_mod", "k", &Def.k_mod, ParamKind::Element, Space::Tile},
      {"v_mod", "v", &Def.v_mod, ParamKind::Element, Space::Tile},
      {"decay_mod", "g", &Def.decay_mod, ParamKind::Decay, Space::Row},
  };
  for (const ModSpec &M : Mods) {
    FunctionScope S(G, In, M.Function, LinearShapes);
    ir::Function &F = G.addFunction(M.Function);
    SymbolScalar X = T.param(M.Kind, M.Kind == ParamKind::Decay ? "decay"
                                                                : M.Arg,
                             Type::F32, M.Sp);
    T.record(F, M.Arg, *M.Mod ? (*M.Mod)(X, In, B, H, Tok) : X);
  }
}

} // namespace

std::unique_ptr<ir::Graph> trace(const DefinitionBase &Def) {
  checkIdentifier("definition", Def.name);
  auto G = std::make_unique<Graph>();
  detail::ActiveTrace Active(*G);
  G->setName(Def.name);
  G->decls().Kind = Def.kind();
  G->decls().Inputs = Def.inputs.decls();
  switch (Def.kind()) {
  case ir::DefinitionKind::Transformer:
    traceAttention(*G, static_cast<const AttentionDef &>(Def));
    break;
  case ir::DefinitionKind::Linear:
    traceLinear(*G, static_cast<const LinearAttentionDef &>(Def));
    break;
  }
  return G;
}

} // namespace attn::dsl
