// Fuzz target: the DSL tracer. The bytes are a small program: a header that
// declares custom inputs and rowscales, then one stack-machine program per
// DSL function (score_mod, mask_mod, the online functions; or the linear
// mods) over SymbolScalar operations. The definition is then compiled.
//
// Layout: flags, the inputs (shape byte, optional raw name, range byte),
// online and final rowscale counts with a name and an initial value each,
// then per function a length byte and that many program bytes (the online
// functions' programs start with a byte that shapes their results). A
// program's stack starts empty; its top is the result (make_dsl_seeds.py
// assembles the seeds and lists the opcodes).
#include "FuzzTargets.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/dsl/Definition.h"
#include "attn/dsl/Trace.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace attn::fuzz {

using dsl::CustomInputs;
using dsl::Rowscales;
using dsl::SymbolScalar;

namespace {

/// Reads bytes, then zeros once the input is used up.
class Reader {
public:
  Reader(const uint8_t *Data, size_t Size) : Data(Data), Size(Size) {}
  uint8_t byte() { return At < Size ? Data[At++] : 0; }
  /// The next \p N bytes as a reader of their own.
  Reader segment(size_t N) {
    size_t Begin = std::min(At, Size);
    size_t Len = std::min(N, Size - Begin);
    At = Begin + Len;
    return Reader(Data + Begin, Len);
  }
  bool done() const { return At >= Size; }

private:
  const uint8_t *Data;
  size_t Size;
  size_t At = 0;
};

// Interesting numbers: zeros, signs, the edges of i32/u32, huge, tiny,
// infinities and NaN (which the DSL must reject, not propagate).
const double Doubles[] = {0.0,
                          -0.0,
                          1.0,
                          -1.0,
                          0.5,
                          2.0,
                          3.0,
                          128.0,
                          1e308,
                          -1e308,
                          1e-45,
                          2147483648.0,
                          4294967424.0,
                          std::numeric_limits<double>::infinity(),
                          -std::numeric_limits<double>::infinity(),
                          std::numeric_limits<double>::quiet_NaN()};
const long long Ints[] = {0,           -1,          1,
                          2,           2147483647LL, -2147483648LL,
                          2147483648LL, 4294967424LL, (-9223372036854775807LL - 1),
                          9223372036854775807LL};
const char *const VarTexts[] = {"-inf", "inf", "0", "1", "nan", "abc", "1e400", ""};

double pickDouble(Reader &R) {
  return Doubles[R.byte() % (sizeof(Doubles) / sizeof(Doubles[0]))];
}
long long pickInt(Reader &R) {
  return Ints[R.byte() % (sizeof(Ints) / sizeof(Ints[0]))];
}

/// A name: usually a plain one from \p Stem and \p Index, sometimes raw
/// bytes (empty, spaces, duplicates, non-identifiers).
std::string pickName(Reader &R, const char *Stem, unsigned Index) {
  uint8_t B = R.byte();
  if (B < 0xE0)
    return Stem + std::to_string(Index);
  std::string Raw;
  for (unsigned I = 0, N = B % 6; I < N; ++I)
    Raw.push_back(static_cast<char>(R.byte()));
  return Raw;
}

dsl::Var pickVar(Reader &R) {
  uint8_t B = R.byte();
  if (B & 0x80)
    return dsl::Var(VarTexts[B % (sizeof(VarTexts) / sizeof(VarTexts[0]))]);
  return dsl::Var(pickDouble(R));
}

/// A symbol of a graph that no longer exists (a symbol kept past its trace).
SymbolScalar deadSymbol() {
  SymbolScalar Kept;
  dsl::AttentionDef Def("dead");
  Def.score_mod = [&Kept](SymbolScalar S, const CustomInputs &, SymbolScalar,
                          SymbolScalar, SymbolScalar, SymbolScalar) {
    Kept = S;
    return S;
  };
  try {
    (void)dsl::trace(Def); // no online function: rejected after score_mod
  } catch (const Error &) {
  }
  return Kept;
}

/// The state one definition's programs share.
struct Context {
  std::vector<std::string> InputNames;
  /// Symbols left by functions traced before (same graph, other function).
  std::vector<SymbolScalar> Kept;
};

/// Runs one program on the function's arguments; the result is the stack.
class Machine {
public:
  Machine(Reader Program, Context &Ctx, const CustomInputs &In,
          std::vector<SymbolScalar> Args, const Rowscales *Rs,
          std::vector<std::string> RsNames)
      : R(Program), Ctx(Ctx), In(In), Args(std::move(Args)), Rs(Rs),
        RsNames(std::move(RsNames)) {}

  std::vector<SymbolScalar> run() {
    for (unsigned Step = 0; Step < 64 && !R.done(); ++Step)
      step();
    if (Stack.empty())
      Stack.push_back(Args.front());
    Ctx.Kept.push_back(Stack.back());
    return Stack;
  }

private:
  Reader R;
  Context &Ctx;
  const CustomInputs &In;
  std::vector<SymbolScalar> Args;
  const Rowscales *Rs;
  std::vector<std::string> RsNames;
  std::vector<SymbolScalar> Stack;

  SymbolScalar pop() {
    if (Stack.empty())
      return Args.front();
    SymbolScalar S = Stack.back();
    Stack.pop_back();
    return S;
  }
  const SymbolScalar &top() {
    if (Stack.empty())
      Stack.push_back(Args.front());
    return Stack.back();
  }
  void push(SymbolScalar S) {
    if (Stack.size() < 64)
      Stack.push_back(S);
  }

  SymbolScalar unary(uint8_t Op, const SymbolScalar &X) {
    switch (Op % 13) {
    case 0: return X.exp();
    case 1: return X.exp2();
    case 2: return X.log();
    case 3: return X.log2();
    case 4: return X.abs();
    case 5: return X.tanh();
    case 6: return X.sigmoid();
    case 7: return X.relu();
    case 8: return X.sqrt();
    case 9: return X.rsqrt();
    case 10: return -X;
    case 11: return !X;
    }
    return X.get_reduce(R.byte() & 1 ? "sum" : "max");
  }

  SymbolScalar binary(uint8_t Op, const SymbolScalar &A,
                      const SymbolScalar &B) {
    switch (Op % 14) {
    case 0: return A + B;
    case 1: return A - B;
    case 2: return A * B;
    case 3: return A / B;
    case 4: return A.max(B);
    case 5: return A.min(B);
    case 6: return A < B;
    case 7: return A <= B;
    case 8: return A > B;
    case 9: return A >= B;
    case 10: return A == B;
    case 11: return A != B;
    case 12: return A & B;
    }
    return A | B;
  }

  /// A binary operator with a C++ number on one side (the lifting path).
  template <typename T>
  SymbolScalar withNumber(uint8_t Op, const SymbolScalar &S, T V) {
    bool Left = Op & 0x80;
    switch (Op % 8) {
    case 0: return Left ? V + S : S + V;
    case 1: return Left ? V - S : S - V;
    case 2: return Left ? V * S : S * V;
    case 3: return Left ? V / S : S / V;
    case 4: return Left ? V < S : S >= V;
    case 5: return Left ? V == S : S != V;
    case 6: return S.max(V);
    }
    return S.min(V);
  }

  void step() {
    switch (R.byte() % 17) {
    case 0:
      push(Args[R.byte() % Args.size()]);
      return;
    case 1:
      push(top().constant(pickDouble(R)));
      return;
    case 2:
      push(top().constantInt(pickInt(R)));
      return;
    case 3:
      push(unary(R.byte(), pop()));
      return;
    case 4: {
      SymbolScalar B = pop(), A = pop();
      push(binary(R.byte(), A, B));
      return;
    }
    case 5: {
      uint8_t Op = R.byte();
      if (Op & 0x40)
        push(withNumber(Op, pop(), pickInt(R)));
      else
        push(withNumber(Op, pop(), pickDouble(R)));
      return;
    }
    case 6: {
      SymbolScalar Else = pop(), Then = pop(), Cond = pop();
      switch (R.byte() % 4) {
      case 0: push(dsl::select(Cond, Then, Else)); return;
      case 1: push(dsl::select(Cond, Then, pickDouble(R))); return;
      case 2: push(dsl::select(Cond, pickDouble(R), Else)); return;
      }
      double T = pickDouble(R);
      push(dsl::select(Cond, T, pickDouble(R)));
      return;
    }
    case 7: {
      static const char *const Ops[] = {"max", "sum", "abssum", "min", ""};
      push(pop().get_reduce(Ops[R.byte() % 5]));
      return;
    }
    case 8: {
      unsigned I = R.byte() % (Ctx.InputNames.size() + 1);
      push(In[I < Ctx.InputNames.size() ? Ctx.InputNames[I] : "nope"]);
      return;
    }
    case 9:
      push(In.head_dim());
      return;
    case 10: {
      if (!Rs)
        return;
      unsigned I = R.byte() % (RsNames.size() + 1);
      push((*Rs)[I < RsNames.size() ? RsNames[I] : "nope"]);
      return;
    }
    case 11: { // pick: a copy of the value at a depth
      if (Stack.empty())
        return;
      size_t Depth = R.byte() % Stack.size();
      push(Stack[Stack.size() - 1 - Depth]);
      return;
    }
    case 12: {
      SymbolScalar B = pop(), A = pop();
      push(B);
      push(A);
      return;
    }
    case 13:
      if (!Ctx.Kept.empty())
        push(Ctx.Kept[R.byte() % Ctx.Kept.size()]);
      return;
    case 14:
      push(deadSymbol());
      return;
    case 15:
      push(SymbolScalar());
      return;
    }
    SymbolScalar B = pop(), A = pop();
    switch (R.byte() % 4) {
    case 0: A += B; break;
    case 1: A -= B; break;
    case 2: A *= B; break;
    case 3: A /= B; break;
    }
    push(A);
  }
};

std::vector<std::string> names(const dsl::OnlineFunc::Decls &D) {
  std::vector<std::string> N;
  for (const auto &[Name, Init] : D)
    N.push_back(Name);
  return N;
}

/// The top of a program's result stack, popped unless it is the last value.
SymbolScalar popResult(std::vector<SymbolScalar> &Stack) {
  SymbolScalar S = Stack.back();
  if (Stack.size() > 1)
    Stack.pop_back();
  return S;
}

/// Pops one value per name into rowscales; \p Shape may drop the last one,
/// add an unknown name or repeat the first.
Rowscales makeRowscales(std::vector<SymbolScalar> &Stack,
                        const std::vector<std::string> &Names, uint8_t Shape) {
  Rowscales Out;
  auto Pop = [&Stack] { return popResult(Stack); };
  size_t Count = Names.size() - ((Shape & 1) && !Names.empty() ? 1 : 0);
  for (size_t I = 0; I < Count; ++I)
    Out.set(Names[I], Pop());
  if (Shape & 2)
    Out.set("extra", Pop());
  if ((Shape & 4) && !Names.empty())
    Out = Rowscales{{Names[0], Pop()}, {Names[0], Pop()}};
  return Out;
}

/// An online function whose six functions run the programs.
class FuzzOnline final : public dsl::OnlineFunc {
public:
  FuzzOnline(Decls Online, Decls Final, std::vector<std::vector<uint8_t>> Progs,
             bool HasBackward, Context &Ctx)
      : OnlineFunc(std::move(Online), std::move(Final)),
        Progs(std::move(Progs)), HasBackward(HasBackward), Ctx(Ctx) {}

  dsl::OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                                  SymbolScalar b, SymbolScalar h,
                                  SymbolScalar q) const override {
    auto [Shape, Stack] = run(0, {scores, b, h, q}, &rs, onlineRowscales());
    SymbolScalar Scores = popResult(Stack);
    Rowscales Out = makeRowscales(Stack, names(onlineRowscales()), Shape);
    if (Shape & 8)
      return {Scores, Out, 1.0};
    return {Scores, Out, Stack.front()};
  }
  dsl::EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                          SymbolScalar b, SymbolScalar h,
                                          SymbolScalar q) const override {
    auto [Shape, Stack] = run(1, {o, b, h, q}, &rs, onlineRowscales());
    SymbolScalar O = popResult(Stack);
    return {O, makeRowscales(Stack, names(finalRowscales()), Shape)};
  }
  SymbolScalar forward(SymbolScalar scores, const Rowscales &rs,
                       SymbolScalar b, SymbolScalar h, SymbolScalar q,
                       SymbolScalar kv) const override {
    return run(2, {scores, b, h, q, kv}, &rs, finalRowscales())
        .second.back();
  }
  std::optional<SymbolScalar>
  backward(SymbolScalar dp, SymbolScalar scores, const Rowscales &rs,
           SymbolScalar doosum, SymbolScalar b, SymbolScalar h, SymbolScalar q,
           SymbolScalar kv) const override {
    if (!HasBackward)
      return std::nullopt;
    return run(3, {dp, scores, doosum, b, h, q, kv}, &rs, finalRowscales())
        .second.back();
  }

private:
  std::vector<std::vector<uint8_t>> Progs;
  bool HasBackward;
  Context &Ctx;

  std::pair<uint8_t, std::vector<SymbolScalar>>
  run(size_t I, std::vector<SymbolScalar> Args, const Rowscales *Rs,
      const Decls &RsDecls) const {
    Reader R(Progs[I].data(), Progs[I].size());
    // online_fwd's and the epilogue's programs start with a shape byte.
    uint8_t Shape = I < 2 ? R.byte() : 0;
    Machine M(R, Ctx, inputs(), std::move(Args), Rs, names(RsDecls));
    return {Shape, M.run()};
  }
};

std::vector<uint8_t> programBytes(Reader &R) {
  Reader P = R.segment(R.byte());
  std::vector<uint8_t> Bytes;
  while (!P.done())
    Bytes.push_back(P.byte());
  return Bytes;
}

/// A mod traced by running \p Prog; the argument list is \p Args.
SymbolScalar runMod(const std::vector<uint8_t> &Prog, Context &Ctx,
                    const CustomInputs &In, std::vector<SymbolScalar> Args) {
  Reader R(Prog.data(), Prog.size());
  return Machine(R, Ctx, In, std::move(Args), nullptr, {}).run().back();
}

void declareInputs(Reader &R, unsigned Count, bool LastLearnable,
                   dsl::DefinitionBase &Def, Context &Ctx) {
  for (unsigned I = 0; I < Count; ++I) {
    uint8_t Shape = R.byte();
    std::string Name = pickName(R, "in", I);
    double Lo = pickDouble(R), Hi = pickDouble(R);
    Def.inputs.declare(Name, static_cast<ir::InputShape>(Shape % 5), Lo, Hi);
    Ctx.InputNames.push_back(Name);
  }
  if (LastLearnable)
    Def.inputs.requiresGrad();
}

void compileAttention(Reader &R, uint8_t Flags) {
  Context Ctx;
  dsl::AttentionDef Def("fuzz");
  declareInputs(R, (Flags >> 5) & 3, Flags & 0x80, Def, Ctx);
  dsl::OnlineFunc::Decls Online, Final;
  for (unsigned I = 0, N = R.byte() % 4; I < N; ++I) {
    std::string Name = pickName(R, "r", I);
    Online.emplace_back(Name, pickVar(R));
  }
  for (unsigned I = 0, N = R.byte() % 3; I < N; ++I) {
    std::string Name = pickName(R, "f", I);
    Final.emplace_back(Name, pickVar(R));
  }
  std::vector<uint8_t> Score = programBytes(R), Mask = programBytes(R);
  std::vector<std::vector<uint8_t>> Online4;
  for (int I = 0; I < 4; ++I)
    Online4.push_back(programBytes(R));
  if (Flags & 2)
    Def.score_mod = [&Ctx, Score](SymbolScalar S, const CustomInputs &In,
                                  SymbolScalar B, SymbolScalar H,
                                  SymbolScalar Q, SymbolScalar K) {
      return runMod(Score, Ctx, In, {S, B, H, Q, K});
    };
  if (Flags & 4)
    Def.mask_mod = [&Ctx, Mask](SymbolScalar B, SymbolScalar H,
                                SymbolScalar Q, SymbolScalar K,
                                const CustomInputs &In) {
      return runMod(Mask, Ctx, In, {Q, K, B, H});
    };
  if (!(Flags & 16))
    Def.online_func = std::make_shared<FuzzOnline>(
        std::move(Online), std::move(Final), std::move(Online4), Flags & 8,
        Ctx);
  CompiledDefinition C = compile(Def);
  (void)codegen::generateForward(C, codegen::KernelSpec());
}

void compileLinear(Reader &R, uint8_t Flags) {
  Context Ctx;
  dsl::LinearAttentionDef Def("fuzz_linear");
  declareInputs(R, (Flags >> 5) & 3, Flags & 0x80, Def, Ctx);
  dsl::ElementMod *Mods[] = {&Def.q_mod, &Def.k_mod, &Def.v_mod,
                             &Def.decay_mod};
  for (int I = 0; I < 4; ++I) {
    std::vector<uint8_t> Prog = programBytes(R);
    if (!(Flags & (2 << I)))
      continue;
    *Mods[I] = [&Ctx, Prog](SymbolScalar X, const CustomInputs &In,
                            SymbolScalar B, SymbolScalar H, SymbolScalar T) {
      return runMod(Prog, Ctx, In, {X, B, H, T});
    };
  }
  (void)compile(Def);
}

} // namespace

Outcome fuzzDsl(const uint8_t *Data, size_t Size) {
  return classify([&] {
    Reader R(Data, Size);
    uint8_t Flags = R.byte();
    if (Flags & 1)
      compileLinear(R, Flags);
    else
      compileAttention(R, Flags);
  });
}

} // namespace attn::fuzz
