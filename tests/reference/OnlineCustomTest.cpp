// Online == direct, backward == FD, for every custom input shape class.
#include "TestDefs.h"

#include "attn/reference/Checker.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attn;
using dsl::CustomInputs;
using dsl::SymbolScalar;
using ir::InputShape;
using reference::Tensor;

namespace {

std::shared_ptr<const dsl::OnlineFunc> softmax() {
  return std::make_shared<testdefs::OnlineSoftmax>();
}

/// Sliding window of 3 keys, causal: (q_idx >= kv_idx) & (q_idx - kv_idx < 3).
SymbolScalar slidingWindow(SymbolScalar, SymbolScalar, SymbolScalar q,
                           SymbolScalar kv) {
  return (q >= kv) & (q - kv < 3);
}

/// Reads one input of each shape class: a scalar softcap, a per-head ALiBi
/// slope, per-row and per-key biases and a full bias tensor.
dsl::AttentionDef everyInput() {
  dsl::AttentionDef Def("every_input");
  Def.inputs.declare("cap", InputShape::Scalar, 2.0, 4.0)
      .declare("slope", InputShape::PerHead, 0.1, 0.9)
      .declare("qb", InputShape::PerRow)
      .declare("kb", InputShape::PerKey)
      .declare("bias", InputShape::Full);
  Def.score_mod = [](SymbolScalar s, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar q, SymbolScalar kv) {
    SymbolScalar t = s * in.head_dim().rsqrt() - in["slope"] * (q - kv) +
                     in["qb"] + in["kb"] + in["bias"];
    return in["cap"] * (t / in["cap"]).tanh();
  };
  Def.mask_mod = slidingWindow;
  Def.online_func = softmax();
  return Def;
}

/// ALiBi with a per-head slope and the sliding window.
dsl::AttentionDef alibiWindow() {
  dsl::AttentionDef Def("alibi_window");
  Def.inputs.declare("slope", InputShape::PerHead, 0.1, 0.9);
  Def.score_mod = [](SymbolScalar s, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar q,
                     SymbolScalar kv) { return s - in["slope"] * (q - kv); };
  Def.mask_mod = slidingWindow;
  Def.online_func = softmax();
  return Def;
}

/// Gemma-style softcap with a literal cap, no mask.
dsl::AttentionDef softcap() {
  dsl::AttentionDef Def("softcap");
  Def.score_mod = [](SymbolScalar s, const CustomInputs &, SymbolScalar,
                     SymbolScalar, SymbolScalar, SymbolScalar) {
    const double c = 1.5;
    return c * (s / c).tanh();
  };
  Def.online_func = softmax();
  return Def;
}

dsl::AttentionDef byName(const std::string &Name) {
  if (Name == "every_input")
    return everyInput();
  if (Name == "alibi_window")
    return alibiWindow();
  return softcap();
}

double maxError(const reference::AttentionOutputs &A,
                const reference::AttentionOutputs &B) {
  double E = reference::maxMixedError(A.O, B.O);
  for (const auto &[Name, T] : B.Finals)
    E = std::max(E, reference::maxMixedError(A.Finals.at(Name), T));
  return E;
}

} // namespace

TEST_CASE("online equals direct for every block size on custom definitions",
          "[online]") {
  std::string Name = GENERATE("every_input", "alibi_window", "softcap");
  INFO(Name);
  CompiledDefinition C = compile(byName(Name));
  std::mt19937_64 Rng(11);
  // Sq != Skv and Skv not a multiple of 2 or 5; GQA heads.
  reference::AttentionInputs In =
      testdefs::randomInputs(C, Rng, 2, 4, 2, 7, 11, 5, 3);
  reference::AttentionOutputs Direct = reference::attentionDirect(C, In);
  REQUIRE(Direct.Finals.count("lse"));
  for (int64_t Block : {1, 2, 5, 0}) {
    INFO("block " << Block);
    CHECK(maxError(reference::attentionOnline(C, In, Block), Direct) < 1e-12);
  }
}

TEST_CASE("check passes the custom definitions, backward against FD",
          "[online][backward]") {
  std::string Name = GENERATE("every_input", "alibi_window", "softcap");
  INFO(Name);
  reference::CheckReport R = reference::check(compile(byName(Name)));
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  reference::printReport(R, OS);
  INFO(OS.str());
  CHECK(R.passed());
  REQUIRE_FALSE(R.Rows.empty());
  CHECK_FALSE(R.Rows.back().Skipped); // the backward row ran
}

TEST_CASE("every_input computes what a hand-written softmax computes",
          "[online][inputs]") {
  // An independent implementation of every_input: it pins down how each
  // input shape class is indexed (per_key by key, full by query and key,
  // per_head by the query head) and how GQA maps heads.
  CompiledDefinition C = compile(everyInput());
  std::mt19937_64 Rng(5);
  const int64_t B = 2, Hq = 4, Hkv = 2, Sq = 6, Skv = 9, D = 3, DV = 2;
  reference::AttentionInputs In =
      testdefs::randomInputs(C, Rng, B, Hq, Hkv, Sq, Skv, D, DV);
  const reference::InputValues &X = In.Inputs;
  double Cap = X.at("cap").Data.at(0);
  Tensor O({B, Hq, Sq, DV}), Lse({B, Hq, Sq});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        int64_t hk = h / (Hq / Hkv);
        std::vector<double> S;
        std::vector<int64_t> Keys;
        for (int64_t j = 0; j < Skv; ++j) {
          if (!(i >= j && i - j < 3))
            continue;
          double Dot = 0;
          for (int64_t x = 0; x < D; ++x)
            Dot += In.Q.at({b, h, i, x}) * In.K.at({b, hk, j, x});
          double T = Dot / std::sqrt(double(D)) -
                     X.at("slope").at({h}) * double(i - j) +
                     X.at("qb").at({b, h, i}) + X.at("kb").at({b, h, j}) +
                     X.at("bias").at({b, h, i, j});
          S.push_back(Cap * std::tanh(T / Cap));
          Keys.push_back(j);
        }
        double M = *std::max_element(S.begin(), S.end()), Sum = 0;
        for (double s : S)
          Sum += std::exp(s - M);
        Lse.at({b, h, i}) = M + std::log(Sum);
        for (size_t n = 0; n < S.size(); ++n)
          for (int64_t y = 0; y < DV; ++y)
            O.at({b, h, i, y}) +=
                std::exp(S[n] - M) / Sum * In.V.at({b, hk, Keys[n], y});
      }
  for (int64_t Block : {1, 2, 5, 0}) {
    INFO("block " << Block);
    reference::AttentionOutputs Out = reference::attentionOnline(C, In, Block);
    CHECK(reference::maxMixedError(Out.O, O) < 1e-12);
    CHECK(reference::maxMixedError(Out.Finals.at("lse"), Lse) < 1e-12);
  }
}

TEST_CASE("the custom definitions' backward matches finite differences "
          "on a GQA shape",
          "[online][backward]") {
  // check() uses one fixed gradient shape; this one has GQA (4 query heads
  // over 2 key heads) and two batches, so dk/dv sum over query heads.
  std::string Name = GENERATE("every_input", "alibi_window", "softcap");
  INFO(Name);
  CompiledDefinition C = compile(byName(Name));
  std::mt19937_64 Rng(3);
  reference::AttentionInputs In =
      testdefs::randomInputs(C, Rng, 2, 4, 2, 5, 6, 3, 2);
  Tensor DO = Tensor::normal({2, 4, 5, 2}, Rng);
  reference::AttentionGrads G = reference::attentionBackward(C, In, DO);
  auto Loss = [&] {
    reference::AttentionOutputs Out = reference::attentionDirect(C, In);
    double L = 0;
    for (int64_t I = 0; I < Out.O.numel(); ++I)
      L += Out.O.Data[I] * DO.Data[I];
    return L;
  };
  std::pair<Tensor *, const Tensor *> Pairs[] = {
      {&In.Q, &G.DQ}, {&In.K, &G.DK}, {&In.V, &G.DV}};
  for (auto [X, Grad] : Pairs)
    for (int64_t I = 0; I < X->numel(); ++I) {
      double Saved = X->Data[I], Step = 1e-6;
      X->Data[I] = Saved + Step;
      double Up = Loss();
      X->Data[I] = Saved - Step;
      double Down = Loss();
      X->Data[I] = Saved;
      CHECK(Grad->Data[I] ==
            Approx((Up - Down) / (2 * Step)).epsilon(0).margin(1e-6));
    }
}
