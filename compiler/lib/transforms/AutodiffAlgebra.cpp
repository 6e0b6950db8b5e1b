// The normal form of derivative expressions: sums of products of atom
// powers with one merged exponential, built back into uniqued nodes.
#include "attn/transforms/AutodiffAlgebra.h"
#include "attn/transforms/AutodiffBuilder.h"

#include "attn/ir/Walk.h"

#include "llvm/Support/Casting.h"

#include <cmath>

namespace attn::transforms {

using ir::Node;
using ir::NodeKind;

const Node *replaceNodes(ir::Graph &G, const Node *Root, const NodeMap &Map) {
  if (!Root)
    return nullptr;
  NodeMap New;
  for (const Node *N : ir::topologicalOrder({Root})) {
    if (auto It = Map.find(N); It != Map.end()) {
      New[N] = It->second;
      continue;
    }
    if (N->operands().empty()) {
      New[N] = N;
      continue;
    }
    llvm::SmallVector<const Node *, 3> Ops;
    bool Changed = false;
    for (const Node *Op : N->operands()) {
      Ops.push_back(New.lookup(Op));
      Changed = Changed || Ops.back() != Op;
    }
    New[N] = Changed ? G.rebuild(N, Ops) : N;
  }
  return New.lookup(Root);
}

/// One product Π aᵏ · exp(Exp): atoms sorted by node id, powers non-zero.
struct Algebra::Mono {
  llvm::SmallVector<std::pair<const Node *, int>, 4> Pows;
  const Node *Exp = nullptr; ///< the exponent in normal form, or none
  bool empty() const { return Pows.empty() && !Exp; }
  bool operator<(const Mono &O) const {
    if (Pows.size() != O.Pows.size())
      return Pows.size() < O.Pows.size();
    for (size_t I = 0; I < Pows.size(); ++I) {
      if (Pows[I].first != O.Pows[I].first)
        return Pows[I].first->getId() < O.Pows[I].first->getId();
      if (Pows[I].second != O.Pows[I].second)
        return Pows[I].second < O.Pows[I].second;
    }
    unsigned A = Exp ? Exp->getId() + 1 : 0, B = O.Exp ? O.Exp->getId() + 1 : 0;
    return A < B;
  }
};

/// Σ coefficient · product, like terms collected, no zero coefficient.
struct Algebra::Poly {
  std::map<Mono, double> Terms;
  void add(const Mono &M, double C) {
    if (C == 0.0)
      return;
    double &V = Terms[M];
    V += C;
    if (V == 0.0)
      Terms.erase(M);
  }
  void addAll(const Poly &P, double Scale) {
    for (const auto &[M, C] : P.Terms)
      add(M, C * Scale);
  }
  static Poly constant(double C) {
    Poly P;
    P.add(Mono{}, C);
    return P;
  }
  static Poly ofAtom(const Node *A, int Power = 1) {
    Poly P;
    Mono M;
    M.Pows.push_back({A, Power});
    P.add(M, 1.0);
    return P;
  }
  bool singleTerm() const { return Terms.size() == 1; }
};

Algebra::Algebra(ir::Graph &G) : G(G), Zero(G.constant(0.0)) {}
Algebra::~Algebra() = default;

const Algebra::Poly &Algebra::poly(const Node *N) {
  if (auto It = Memo.find(N); It != Memo.end())
    return *It->second;
  auto P = std::make_unique<Poly>(compute(N));
  const Poly &Ref = *P;
  Memo[N] = std::move(P);
  return Ref;
}

const Node *Algebra::canonical(const Node *N) {
  if (!N)
    return nullptr;
  return build(poly(N));
}

static bool isElement(const Node *N) {
  return N->getSpace() == ir::Space::Tile || N->getSpace() == ir::Space::Col;
}

Algebra::Poly Algebra::atom(const Node *N) {
  if (N->operands().empty())
    return Poly::ofAtom(N);
  llvm::SmallVector<const Node *, 3> Ops;
  for (const Node *Op : N->operands())
    Ops.push_back(canonical(Op));
  return Poly::ofAtom(G.rebuild(N, Ops));
}

Algebra::Mono Algebra::mulMono(const Mono &A, const Mono &B, int SignB) {
  Mono M;
  size_t I = 0, J = 0;
  while (I < A.Pows.size() || J < B.Pows.size()) {
    bool TakeA = J == B.Pows.size() ||
                 (I < A.Pows.size() &&
                  A.Pows[I].first->getId() <= B.Pows[J].first->getId());
    bool TakeB = I == A.Pows.size() ||
                 (J < B.Pows.size() &&
                  B.Pows[J].first->getId() <= A.Pows[I].first->getId());
    const Node *Atom = TakeA ? A.Pows[I].first : B.Pows[J].first;
    int Pow = (TakeA ? A.Pows[I].second : 0) +
              (TakeB ? SignB * B.Pows[J].second : 0);
    if (Pow != 0)
      M.Pows.push_back({Atom, Pow});
    I += TakeA;
    J += TakeB;
  }
  if (A.Exp || B.Exp) {
    Poly Arg;
    if (A.Exp)
      Arg.addAll(poly(A.Exp), 1.0);
    if (B.Exp)
      Arg.addAll(poly(B.Exp), SignB);
    M.Exp = expArg(Arg);
  }
  return M;
}

Algebra::Poly Algebra::mul(const Poly &A, const Poly &B) {
  if (A.Terms.size() * B.Terms.size() > 512)
    throw CannotDerive("a derivative expression grows past 512 terms");
  Poly P;
  for (const auto &[MA, CA] : A.Terms)
    for (const auto &[MB, CB] : B.Terms)
      P.add(mulMono(MA, MB, 1), CA * CB);
  return P;
}

Algebra::Poly Algebra::inverse(const Poly &A, const Node *Original) {
  if (A.singleTerm()) {
    const auto &[M, C] = *A.Terms.begin();
    Poly P;
    P.add(mulMono(Mono{}, M, -1), 1.0 / C);
    return P;
  }
  // 1/0 or 1/(a + b): the denominator stays an atom.
  const Node *Den = A.Terms.empty() ? G.binary(NodeKind::Div, G.constant(1.0),
                                                Original)
                                    : build(A);
  return Poly::ofAtom(Den, A.Terms.empty() ? 1 : -1);
}

const Node *Algebra::expArg(const Poly &Arg) {
  return Arg.Terms.empty() ? nullptr : build(Arg);
}

/// exp(c + Σ kᵢ·log aᵢ + rest) = eᶜ · Π aᵢᵏⁱ · exp(rest), for small integer k.
Algebra::Poly Algebra::expOf(const Poly &Arg) {
  Poly Rest, Factor = Poly::constant(1.0);
  double C0 = 0.0;
  for (const auto &[M, C] : Arg.Terms) {
    if (M.empty()) {
      C0 += C;
      continue;
    }
    bool IsLog = !M.Exp && M.Pows.size() == 1 && M.Pows[0].second == 1 &&
                 M.Pows[0].first->getKind() == NodeKind::Log;
    if (IsLog && C == std::round(C) && std::fabs(C) <= 4) {
      const Node *A = M.Pows[0].first->operand(0);
      Poly Pow = Poly::constant(1.0);
      for (int I = 0; I < std::abs(int(C)); ++I)
        Pow = mul(Pow, poly(A));
      if (C < 0)
        Pow = inverse(Pow, build(Pow));
      Factor = mul(Factor, Pow);
      continue;
    }
    Rest.add(M, C);
  }
  double E0 = std::exp(C0);
  if (!std::isfinite(E0) || E0 == 0.0) {
    Rest.add(Mono{}, C0);
    E0 = 1.0;
  }
  Mono M;
  M.Exp = expArg(Rest);
  Poly P;
  P.add(M, E0);
  return mul(Factor, P);
}

/// log(c · exp(x)) = log c + x for c > 0; any other logarithm is an atom.
Algebra::Poly Algebra::logOf(const Poly &Arg) {
  if (Arg.singleTerm()) {
    const auto &[M, C] = *Arg.Terms.begin();
    if (C > 0 && M.Pows.empty()) {
      Poly P = Poly::constant(std::log(C));
      if (M.Exp)
        P.addAll(poly(M.Exp), 1.0);
      return P;
    }
  }
  return Poly::ofAtom(G.unary(NodeKind::Log, build(Arg)));
}

/// Σⱼ c·rowᵢ·elemⱼ = c·rowᵢ·Σⱼ elemⱼ: per-row factors leave a sum, so that
/// a reduction written two ways is one atom.
Algebra::Poly Algebra::reduceOf(const ir::ReduceNode *R) {
  const Node *X = R->operand(0);
  auto Whole = [&] {
    return Poly::ofAtom(G.reduce(R->getOp(), canonical(X)));
  };
  if (R->getOp() != ir::ReduceOp::Sum)
    return Whole();
  Poly Out;
  for (const auto &[M, C] : poly(X).Terms) {
    Mono Row, Elem;
    for (const auto &AP : M.Pows)
      (isElement(AP.first) ? Elem : Row).Pows.push_back(AP);
    if (M.Exp)
      (isElement(M.Exp) ? Elem : Row).Exp = M.Exp;
    if (Elem.empty())
      return Whole(); // a per-row term: the sum would need the key count
    Mono Sum;
    Sum.Pows.push_back(
        {G.reduce(ir::ReduceOp::Sum, buildTerm(Elem, 1.0)), 1});
    Out.add(mulMono(Row, Sum, 1), C);
  }
  return Out;
}

Algebra::Poly Algebra::compute(const Node *N) {
  const double Ln2 = std::log(2.0);
  switch (N->getKind()) {
  case NodeKind::Const: {
    double V = llvm::cast<ir::ConstNode>(N)->getValue();
    if (N->getType() == ir::Type::Bool || !std::isfinite(V))
      return Poly::ofAtom(N);
    return Poly::constant(V);
  }
  case NodeKind::Param:
    return Poly::ofAtom(N);
  case NodeKind::Neg: {
    Poly P;
    P.addAll(poly(N->operand(0)), -1.0);
    return P;
  }
  case NodeKind::Add:
  case NodeKind::Sub: {
    Poly P = poly(N->operand(0));
    P.addAll(poly(N->operand(1)), N->getKind() == NodeKind::Add ? 1.0 : -1.0);
    return P;
  }
  case NodeKind::Mul:
    return mul(poly(N->operand(0)), poly(N->operand(1)));
  case NodeKind::Div:
    return mul(poly(N->operand(0)),
               inverse(poly(N->operand(1)), N->operand(1)));
  case NodeKind::Exp:
    return expOf(poly(N->operand(0)));
  case NodeKind::Exp2: {
    Poly Arg;
    Arg.addAll(poly(N->operand(0)), Ln2);
    return expOf(Arg);
  }
  case NodeKind::Log:
    return logOf(poly(N->operand(0)));
  case NodeKind::Log2: {
    Poly P;
    P.addAll(logOf(poly(N->operand(0))), 1.0 / Ln2);
    return P;
  }
  case NodeKind::Reduce:
    return reduceOf(llvm::cast<ir::ReduceNode>(N));
  case NodeKind::Max:
  case NodeKind::Min: {
    // max(x, -inf) = x and min(x, inf) = x for the finite x of a row with
    // keys: the running max of an online softmax starts at -inf.
    double Identity = N->getKind() == NodeKind::Max ? -INFINITY : INFINITY;
    for (unsigned I = 0; I < 2; ++I)
      if (auto *C = llvm::dyn_cast<ir::ConstNode>(N->operand(I)))
        if (C->getValue() == Identity)
          return poly(N->operand(1 - I));
    return atom(N);
  }
  case NodeKind::Abs:
  case NodeKind::Tanh:
  case NodeKind::Sigmoid:
  case NodeKind::Relu:
  case NodeKind::Sqrt:
  case NodeKind::Rsqrt:
  case NodeKind::Not:
  case NodeKind::ToFloat:
  case NodeKind::FloorDiv:
  case NodeKind::Mod:
  case NodeKind::Lt:
  case NodeKind::Le:
  case NodeKind::Gt:
  case NodeKind::Ge:
  case NodeKind::Eq:
  case NodeKind::Ne:
  case NodeKind::And:
  case NodeKind::Or:
  case NodeKind::Select:
    return atom(N);
  }
  throw InternalError("autodiff algebra: node kind");
}

const Node *Algebra::buildTerm(const Mono &M, double Coef) {
  DerivBuilder B(G);
  const Node *Num = nullptr, *Den = nullptr;
  auto Times = [&](const Node *&Acc, const Node *X) {
    Acc = Acc ? G.binary(NodeKind::Mul, Acc, X) : X;
  };
  for (const auto &[A, Pow] : M.Pows)
    for (int I = 0; I < std::abs(Pow); ++I)
      Times(Pow > 0 ? Num : Den, A);
  if (M.Exp)
    Times(Num, G.unary(NodeKind::Exp, M.Exp));
  if (Coef != 1.0 || !Num)
    Num = Num ? G.binary(NodeKind::Mul, Num, G.constant(Coef))
              : G.constant(Coef);
  return Den ? G.binary(NodeKind::Div, Num, Den) : Num;
}

const Node *Algebra::build(const Poly &P) {
  if (P.Terms.empty())
    return Zero;
  if (P.singleTerm())
    return buildTerm(P.Terms.begin()->first, P.Terms.begin()->second);
  // Factor out the atom powers every term shares (same sign, least power)
  // and a shared exponential: (dp − doosum)·p, not dp·p − doosum·p.
  Mono Common = P.Terms.begin()->first;
  for (const auto &[M, C] : P.Terms) {
    Mono Keep;
    for (const auto &[A, Pow] : Common.Pows)
      for (const auto &[A2, Pow2] : M.Pows)
        if (A == A2 && (Pow > 0) == (Pow2 > 0))
          Keep.Pows.push_back(
              {A, Pow > 0 ? std::min(Pow, Pow2) : std::max(Pow, Pow2)});
    Keep.Exp = Common.Exp == M.Exp ? M.Exp : nullptr;
    Common = Keep;
  }
  const Node *Sum = nullptr;
  for (bool Positive : {true, false})
    for (const auto &[M, C] : P.Terms) {
      if ((C > 0) != Positive)
        continue;
      Mono Rest = mulMono(M, Common, -1);
      const Node *T = buildTerm(Rest, std::fabs(C));
      if (!Sum)
        Sum = C > 0 ? T : G.unary(NodeKind::Neg, T);
      else
        Sum = G.binary(C > 0 ? NodeKind::Add : NodeKind::Sub, Sum, T);
    }
  if (Common.empty())
    return Sum;
  const Node *Num = Sum, *Den = nullptr;
  for (const auto &[A, Pow] : Common.Pows)
    for (int I = 0; I < std::abs(Pow); ++I) {
      if (Pow > 0)
        Num = G.binary(NodeKind::Mul, A, Num);
      else
        Den = Den ? G.binary(NodeKind::Mul, Den, A) : A;
    }
  if (Common.Exp)
    Num = G.binary(NodeKind::Mul, G.unary(NodeKind::Exp, Common.Exp), Num);
  return Den ? G.binary(NodeKind::Div, Num, Den) : Num;
}

const Node *Algebra::substitute(const Node *N, const NodeMap &Map) {
  const Node *Cur = canonical(N);
  for (int I = 0; I < 8 && Cur; ++I) {
    const Node *Next = canonical(replaceNodes(G, Cur, Map));
    if (Next == Cur)
      break;
    Cur = Next;
  }
  return Cur;
}

const Node *Algebra::divide(const Node *A, const Node *B) {
  return build(mul(poly(A), inverse(poly(B), B)));
}

const Node *Algebra::asAtom(const Node *N) {
  const Poly &P = poly(N);
  if (!P.singleTerm() || P.Terms.begin()->second != 1.0)
    return nullptr;
  const Mono &M = P.Terms.begin()->first;
  if (M.Exp || M.Pows.size() != 1 || M.Pows[0].second != 1)
    return nullptr;
  return M.Pows[0].first;
}

const Node *
Algebra::factorUnit(const Node *N, const Node *Unit, const Node *P,
                    const std::function<bool(const Node *)> &Uses) {
  const Poly &U = poly(Unit);
  if (!U.singleTerm())
    return canonical(N);
  const auto &[MU, CU] = *U.Terms.begin();
  auto Cost = [&](const Mono &M) {
    int C = 0;
    for (const auto &[A, Pow] : M.Pows)
      if (Uses(A))
        C += std::abs(Pow);
    return C + (M.Exp && Uses(M.Exp) ? 1 : 0);
  };
  Poly Out;
  for (const auto &Term : poly(N).Terms) {
    Mono M = Term.first;
    double C = Term.second;
    int K = 0;
    for (int Cur = Cost(M); Cur > 0 && K < 4; ++K) {
      Mono Q = mulMono(M, MU, -1);
      int Next = Cost(Q);
      if (Next >= Cur)
        break;
      M = Q;
      C /= CU;
      Cur = Next;
    }
    Mono WithP;
    if (K)
      WithP.Pows.push_back({P, K});
    Out.add(mulMono(M, WithP, 1), C);
  }
  return build(Out);
}

} // namespace attn::transforms
