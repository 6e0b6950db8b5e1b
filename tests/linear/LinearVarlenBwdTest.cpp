// The packed (variable-length) linear backward on the CPU: the fp64
// reference gradients over packed sequences (lengths 0, 1 and not multiples
// of the chunk) against finite differences of the packed forward, the
// chunked model's against the recurrence's; the packed backward kernels'
// generated code and its NVRTC compile for every example;
// LinearAttention::backwardVarlen's validation without a GPU.
#include "Examples.h"
#include "TempDir.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/KernelCache.h"
#include "attn/runtime/LinearAttention.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

using namespace attn;
using reference::LinearInputs;
using reference::Tensor;
using Catch::Matchers::Contains;

namespace {

dsl::LinearAttentionDef linearDef(const std::string &Name) {
  if (Name == "mamba2")
    return examples::mamba2();
  if (Name == "simple_gla")
    return examples::simpleGla();
  REQUIRE(Name == "retention_linear");
  return examples::retentionLinear();
}

// Lengths 0, 1, 5, 9, 0, 3: empty sequences first, inside and a chunk's
// worth of non-multiples.
const std::vector<int64_t> Cu = {0, 0, 1, 6, 15, 15, 18};
constexpr int64_t S = 6, H = 2, T = 18, D = 4, DV = 3;

struct Problem {
  LinearInputs In;
  Tensor Init, DO, DFinal;
};

Problem problem(const CompiledDefinition &C, uint64_t Seed) {
  std::mt19937_64 Rng(Seed);
  Problem P;
  P.In.Q = Tensor::normal({1, H, T, D}, Rng);
  P.In.K = Tensor::normal({1, 1, T, D}, Rng); // one k head for both
  P.In.V = Tensor::normal({1, H, T, DV}, Rng);
  P.In.Decay = Tensor::uniform({1, H, T}, Rng, -1.0, 0.0);
  P.In.Inputs = reference::sampleInputs(*C.Graph, Rng, 1, H, T, T);
  P.Init = Tensor::normal({S, H, D, DV}, Rng);
  P.DO = Tensor::normal({1, H, T, DV}, Rng);
  P.DFinal = Tensor::normal({S, H, D, DV}, Rng);
  return P;
}

/// L = <O, DO> + <Final, DFinal> of the packed recurrence.
double loss(const CompiledDefinition &C, const Problem &P) {
  reference::LinearOutputs O = reference::linearVarlen(C, P.In, Cu, P.Init);
  double L = 0;
  for (size_t I = 0; I < O.O.Data.size(); ++I)
    L += O.O.Data[I] * P.DO.Data[I];
  for (size_t I = 0; I < O.FinalState.Data.size(); ++I)
    L += O.FinalState.Data[I] * P.DFinal.Data[I];
  return L;
}

/// Central difference of the loss in element \p I of the tensor \p Pick
/// selects.
template <class PickFn>
double numeric(const CompiledDefinition &C, Problem P, PickFn &&Pick, size_t I) {
  const double Eps = 1e-6;
  double &X = Pick(P).Data[I];
  const double X0 = X;
  X = X0 + Eps;
  const double Up = loss(C, P);
  X = X0 - Eps;
  const double Down = loss(C, P);
  return (Up - Down) / (2 * Eps);
}

} // namespace

TEST_CASE("the packed reference gradients are the packed forward's",
          "[linear][varlen][backward]") {
  std::string Name = GENERATE("mamba2", "simple_gla", "retention_linear");
  CompiledDefinition C = compile(linearDef(Name));
  const Problem P = problem(C, 70);
  reference::LinearGrads G =
      reference::linearVarlenBackward(C, P.In, Cu, P.Init, P.DO, P.DFinal);
  INFO(Name);
  REQUIRE(G.DInitialState);
  auto Near = [](double Got, double Want) {
    return std::fabs(Got - Want) <= 1e-6 * std::max(1.0, std::fabs(Want));
  };
  // Every token of q, k, v and the decay at one feature, every initial
  // state entry of the sequences of 0 and 5 tokens.
  for (int64_t t = 0; t < T; ++t) {
    INFO("token " << t);
    CHECK(Near(G.DQ.at({0, 1, t, 2}),
               numeric(C, P, [](Problem &X) -> Tensor & { return X.In.Q; },
                       P.In.Q.offset({0, 1, t, 2}))));
    CHECK(Near(G.DK.at({0, 0, t, 1}),
               numeric(C, P, [](Problem &X) -> Tensor & { return X.In.K; },
                       P.In.K.offset({0, 0, t, 1}))));
    CHECK(Near(G.DV.at({0, 0, t, 2}),
               numeric(C, P, [](Problem &X) -> Tensor & { return X.In.V; },
                       P.In.V.offset({0, 0, t, 2}))));
    CHECK(Near(G.DDecay.at({0, 1, t}),
               numeric(C, P, [](Problem &X) -> Tensor & { return X.In.Decay; },
                       P.In.Decay.offset({0, 1, t}))));
  }
  for (int64_t Seq : {0, 2, 4})
    for (int64_t X = 0; X < D; ++X) {
      INFO("sequence " << Seq << " row " << X);
      CHECK(Near(G.DInitialState->at({Seq, 1, X, 1}),
                 numeric(C, P, [](Problem &Y) -> Tensor & { return Y.Init; },
                         P.Init.offset({Seq, 1, X, 1}))));
    }
  // An empty sequence's initial state gets its final state's gradient.
  CHECK(G.DInitialState->at({0, 1, 2, 0}) == P.DFinal.at({0, 1, 2, 0}));
  for (const ir::InputDecl &Decl : C.Graph->decls().Inputs) {
    const Tensor &X = P.In.Inputs.at(Decl.Name);
    for (size_t I = 0; I < X.Data.size(); ++I) {
      INFO("input " << Decl.Name << " element " << I);
      CHECK(Near(G.DInputs.at(Decl.Name).Data[I],
                 numeric(C, P,
                         [&](Problem &Y) -> Tensor & {
                           return Y.In.Inputs.at(Decl.Name);
                         },
                         I)));
    }
  }
}

TEST_CASE("the packed chunked model's gradients equal the recurrence's",
          "[linear][varlen][backward]") {
  std::string Name = GENERATE("mamba2", "simple_gla", "retention_linear");
  int64_t Chunk = GENERATE(1, 3, 4, 64);
  CompiledDefinition C = compile(linearDef(Name));
  const Problem P = problem(C, 80 + Chunk);
  INFO(Name << " chunk " << Chunk);
  reference::LinearGrads Want =
      reference::linearVarlenBackward(C, P.In, Cu, P.Init, P.DO, P.DFinal);
  reference::LinearGrads Got = reference::linearVarlenBackward(
      C, P.In, Cu, P.Init, P.DO, P.DFinal, Chunk, [](double X) { return X; });
  CHECK(reference::maxMixedError(Got.DQ, Want.DQ) < 1e-9);
  CHECK(reference::maxMixedError(Got.DK, Want.DK) < 1e-9);
  CHECK(reference::maxMixedError(Got.DV, Want.DV) < 1e-9);
  CHECK(reference::maxMixedError(Got.DDecay, Want.DDecay) < 1e-9);
  CHECK(reference::maxMixedError(*Got.DInitialState, *Want.DInitialState) < 1e-9);
  for (const auto &[N, X] : Want.DInputs)
    CHECK(reference::maxMixedError(Got.DInputs.at(N), X) < 1e-9);
}

TEST_CASE("the packed reference backward rejects bad gradients",
          "[linear][varlen][backward]") {
  CompiledDefinition C = compile(examples::simpleGla());
  const Problem P = problem(C, 3);
  CHECK_THROWS_WITH(reference::linearVarlenBackward(C, P.In, Cu, P.Init,
                                                    Tensor({1, H, T - 1, DV}),
                                                    std::nullopt),
                    Contains("dout must be [1, 2, 18, 3], got [1, 2, 17, 3]"));
  CHECK_THROWS_WITH(reference::linearVarlenBackward(C, P.In, Cu, P.Init, P.DO,
                                                    Tensor({1, H, D, DV})),
                    Contains("final-state gradients must be [6, 2, 4, 3]"));
  CHECK_THROWS_WITH(reference::linearVarlenBackward(C, P.In, {0, 4, 3, 18},
                                                    std::nullopt, P.DO,
                                                    std::nullopt),
                    Contains("cu_seqlens must not decrease"));
}

TEST_CASE("the packed backward's kernels take the packed token",
          "[linear][varlen][backward]") {
  CompiledDefinition C = compile(examples::mamba2());
  codegen::LinearKernelSpec Spec;
  Spec.HeadDim = 128;
  Spec.HeadDimV = 64;
  Spec.Config = codegen::LinearConfig::defaultFor(128, 64, GpuArch::Sm80);
  codegen::KernelSource Src = codegen::generateLinearBackwardVarlen(C, Spec);
  codegen::KernelSource Fixed = codegen::generateLinearBackward(C, Spec);
  CHECK(Src.Key == "mamba2.linear_bwd_varlen.f16.d128x64.sm_80." +
                       Spec.Config.str());
  CHECK(Src.Entries == Fixed.Entries);
  CHECK_THAT(Src.Source, Contains("/*kVarlen=*/true>"));
  // The derivatives read the per-token input dt at the packed token too.
  CHECK_THAT(Src.Source,
             Contains("v_mod_din(const Inputs &in, float x, int b, int h, int t, "
                      "int ti, float *d)"));
  CHECK_THAT(Src.Source, Contains("in.load_in_1_dt(b, h, ti, 0)"));
  CHECK_THAT(Fixed.Source, !Contains("kVarlen") && !Contains("int ti"));
}

TEST_CASE("the packed backward compiles for every example",
          "[linear][varlen][backward][nvrtc]") {
  // ATTNC_CACHE_DIR as set (a disk cache to warm), else the default.
  struct Ex {
    const char *Name;
    int D, DV;
  } Exs[] = {{"mamba2", 128, 64},
             {"simple_gla", 64, 128},
             {"simple_gla", 128, 128},
             {"retention_linear", 256, 128}};
  for (const Ex &E : Exs)
    for (DType Dt : {DType::F16, DType::BF16}) {
      CompiledDefinition C = compile(linearDef(E.Name));
      codegen::LinearKernelSpec Spec;
      Spec.Dtype = Dt;
      Spec.HeadDim = E.D;
      Spec.HeadDimV = E.DV;
      Spec.Arch = GpuArch::Sm90a;
      Spec.Config = codegen::LinearConfig::defaultFor(E.D, E.DV, Spec.Arch);
      INFO(E.Name << " d" << E.D << "/" << E.DV);
      CHECK_NOTHROW(runtime::KernelCache::global().getOrCompile(
          codegen::generateLinearBackwardVarlen(C, Spec)));
    }
}

namespace {

using namespace attn::runtime;

void useTempCache() {
  static const attn::testing::TempDir Dir("attnc-linear-varlen-bwd-cache");
  static const bool Set = setenv("ATTNC_CACHE_DIR", Dir.Path.c_str(), 1) == 0;
  REQUIRE(Set);
}

void *fake(uintptr_t A) { return reinterpret_cast<void *>(A); }

constexpr int64_t RS = 3, RH = 4, RT = 50, RD = 64, RDV = 128;

TensorView tok16(uintptr_t P, int64_t Heads, int64_t Dim, int64_t Tokens = RT) {
  return TensorView::contiguous(fake(P), DType::F16, {Tokens, Heads, Dim});
}
TensorView f32(uintptr_t P, std::vector<int64_t> Shape) {
  return TensorView::contiguous(fake(P), DType::F32, Shape);
}

/// A valid simple_gla packed backward of RS sequences, RT tokens in all.
struct Call {
  TensorView Q = tok16(0x10000, RH, RD), K = tok16(0x20000, 1, RD),
             V = tok16(0x30000, RH, RDV), DO = tok16(0x40000, RH, RDV);
  TensorView DQ = Q, DK = K, DV = V;
  TensorView Decay = f32(0x50000, {1, RH, RT}), DDecay = Decay;
  TensorView Cu = TensorView::contiguous(fake(0x60000), DType::I32, {RS + 1});
  TensorView Init = f32(0x100000, {RS, RH, RD, RDV}), DFinal = Init, DInit = Init;
};

std::string failure(LinearAttention &L, const Call &C) {
  try {
    L.backwardVarlen({C.Q, C.K, C.V, &C.Decay, C.DO, C.Cu, &C.Init, &C.DFinal,
                      C.DQ, C.DK, C.DV, &C.DDecay, &C.DInit});
  } catch (const InvalidArgument &E) {
    return E.what();
  } catch (const DriverError &) {
    return "reached the driver";
  }
  return "nothing thrown";
}

} // namespace

TEST_CASE("LinearAttention::backwardVarlen validates every argument",
          "[linear][varlen][backward]") {
  useTempCache();
  LinearSignature Sig;
  Sig.HeadDim = RD;
  Sig.HeadDimV = RDV;
  Sig.Arch = GpuArch::Sm80;
  LinearAttention L(examples::simpleGla(), Sig);
  // The valid call compiles the packed backward (NVRTC) and stops at the
  // absent driver.
  CHECK(failure(L, Call()) == "reached the driver");
  auto Fails = [&](auto &&Edit) {
    Call X;
    Edit(X);
    return failure(L, X);
  };
  CHECK_THAT(Fails([](Call &X) {
               X.Q = TensorView::contiguous(fake(0x10000), DType::F16, {1, RT, RH, RD});
             }),
             Contains("q: expected rank 3 [tokens, heads, head_dim]"));
  CHECK_THAT(Fails([](Call &X) { X.K = tok16(0x20000, 3, RD); }),
             Contains("k: heads (3) must divide v's heads (4)"));
  CHECK_THAT(Fails([](Call &X) { X.V = tok16(0x30000, RH, RDV, RT + 1); }),
             Contains("q, k: seq must equal v's (51)"));
  CHECK_THAT(Fails([](Call &X) { X.Decay = f32(0x50000, {RS, RH, RT}); }),
             Contains("decay: expected shape [1, 4, 50], got [3, 4, 50]"));
  CHECK_THAT(Fails([](Call &X) { X.Cu.Data = nullptr; }),
             Contains("cu_seqlens: null data pointer"));
  CHECK_THAT(Fails([](Call &X) { X.Cu.Type = DType::F32; }),
             Contains("cu_seqlens: expected dtype i32, got f32"));
  CHECK_THAT(Fails([](Call &X) {
               X.Cu = TensorView::contiguous(fake(0x60000), DType::I32, {1});
             }),
             Contains("cu_seqlens: expected [batch + 1] with batch >= 1"));
  CHECK_THAT(Fails([](Call &X) { X.Cu.Data = fake(0x60002); }),
             Contains("cu_seqlens: data pointer must be 4-byte aligned"));
  CHECK_THAT(Fails([](Call &X) {
               X.Cu = TensorView::contiguous(fake(0x60000), DType::I32, {20000});
             }),
             Contains("cu_seqlens: sequences x heads is 79996; at most 65535"));
  CHECK_THAT(Fails([](Call &X) { X.Init = f32(0x100000, {1, RH, RD, RDV}); }),
             Contains("initial_state: expected shape [3, 4, 64, 128], got [1, 4, "
                      "64, 128]"));
  CHECK_THAT(Fails([](Call &X) {
               X.DO = TensorView::contiguous(fake(0x40000), DType::F16,
                                             {1, RT, RH, RDV});
             }),
             Contains("dout: expected rank 3 [tokens, heads, head_dim]"));
  CHECK_THAT(Fails([](Call &X) { X.DO = tok16(0x40000, 2, RDV); }),
             Contains("dout: expected batch 1, seq 50 and heads 4"));
  CHECK_THAT(Fails([](Call &X) { X.DQ = tok16(0x10000, RH, RD, RT - 1); }),
             Contains("dq: expected batch 1, seq 50 and heads 4"));
  CHECK_THAT(Fails([](Call &X) { X.DK = tok16(0x20000, 2, RD); }),
             Contains("dk: expected batch 1, seq 50 and heads 1"));
  CHECK_THAT(Fails([](Call &X) { X.DV.Type = DType::BF16; }),
             Contains("dv: expected dtype f16, got bf16"));
  CHECK_THAT(Fails([](Call &X) { X.DFinal = f32(0x100000, {RS, RH, RDV, RD}); }),
             Contains("dfinal_state: expected shape [3, 4, 64, 128]"));
  CHECK_THAT(Fails([](Call &X) { X.DInit = f32(0x100000, {RS + 1, RH, RD, RDV}); }),
             Contains("dinitial_state: expected shape [3, 4, 64, 128]"));
  CHECK_THAT(Fails([](Call &X) { X.DDecay = f32(0x50000, {RS, RH, RT}); }),
             Contains("ddecay: expected shape [1, 4, 50], got [3, 4, 50]"));
  // Per-token input gradients are [1, H, T] like the inputs.
  LinearAttention M(examples::mamba2(), Sig);
  const Call C;
  TensorView A = f32(0x70000, {RH}), Dt = f32(0x80000, {1, RH, RT});
  TensorView BadDt = f32(0x90000, {RS, RH, RT});
  InputMap In = {{"A", A}, {"dt", Dt}};
  CHECK_THROWS_WITH(
      M.backwardVarlen({C.Q, C.K, C.V, nullptr, C.DO, C.Cu, nullptr, nullptr, C.DQ,
                        C.DK, C.DV, nullptr, nullptr},
                       In, {{"dt", BadDt}}),
      Contains("input gradient 'dt' (per_row): expected shape [1, 4, 50], got [3, "
               "4, 50]"));
}
