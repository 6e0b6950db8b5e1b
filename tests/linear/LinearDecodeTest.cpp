// The linear decode step on the CPU: the reference step (a pool of states,
// an index table, positions) run over pieces of a sequence equals the token
// recurrence over the whole of it; the generated decode kernel's mods; and
// LinearAttention::decodeStep's validation of every argument without a GPU.
#include "Examples.h"
#include "TempDir.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/LinearAttention.h"

#include <catch2/catch.hpp>

#include <cstdlib>

using namespace attn;
using reference::LinearInputs;
using reference::Tensor;
using Catch::Matchers::Contains;

namespace {

/// A definition whose mods read the token position t and a per-token
/// input, so that positions and the decode step's input index are both
/// exercised: q scaled by s_t, g_t = -0.05 - 0.01·t.
dsl::LinearAttentionDef positional() {
  dsl::LinearAttentionDef Def("positional_linear");
  Def.inputs.declare("s", ir::InputShape::PerRow, 0.5, 1.5);
  Def.q_mod = [](dsl::SymbolScalar Q, const dsl::CustomInputs &In) {
    return Q * In["s"];
  };
  Def.decay_mod = [](dsl::SymbolScalar, const dsl::CustomInputs &,
                     dsl::SymbolScalar, dsl::SymbolScalar,
                     dsl::SymbolScalar T) { return -0.05 - 0.01 * T; };
  return Def;
}

dsl::LinearAttentionDef linearDef(const std::string &Name) {
  if (Name == "mamba2")
    return examples::mamba2();
  if (Name == "simple_gla")
    return examples::simpleGla();
  if (Name == "retention_linear")
    return examples::retentionLinear();
  REQUIRE(Name == "positional_linear");
  return positional();
}

LinearInputs randomInputs(const CompiledDefinition &C, std::mt19937_64 &Rng,
                          int64_t B, int64_t H, int64_t Hq, int64_t Hk,
                          int64_t T, int64_t D, int64_t DV) {
  LinearInputs In;
  In.Q = Tensor::normal({B, Hq, T, D}, Rng);
  In.K = Tensor::normal({B, Hk, T, D}, Rng);
  In.V = Tensor::normal({B, H, T, DV}, Rng);
  In.Decay = Tensor::uniform({B, H, T}, Rng, -1.0, 0.0);
  In.Inputs = reference::sampleInputs(*C.Graph, Rng, B, H, T, T);
  In.InitialState = Tensor::normal({B, H, D, DV}, Rng);
  return In;
}

} // namespace

TEST_CASE("decode steps over pieces equal the token recurrence",
          "[linear][decode]") {
  std::string Name = GENERATE("mamba2", "simple_gla", "retention_linear",
                              "positional_linear");
  int64_t Piece = GENERATE(1, 3, 16);
  CompiledDefinition C = compile(linearDef(Name));
  const int64_t B = 3, H = 2, T = 21, D = 4, DV = 3;
  std::mt19937_64 Rng(100 + Piece);
  LinearInputs In = randomInputs(C, Rng, B, H, 1, 2, T, D, DV);
  reference::LinearOutputs Want = reference::linearRecurrent(C, In);
  INFO(Name << " pieces of " << Piece);

  // A pool of five entries: row b's state at entry Slot[b], the others
  // must stay as they are.
  const std::vector<int64_t> Slot = {4, 0, 2};
  reference::LinearDecodeInputs Step;
  Step.States = Tensor::normal({5, H, D, DV}, Rng);
  const Tensor Before = Step.States;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t x = 0; x < D; ++x)
        for (int64_t y = 0; y < DV; ++y)
          Step.States.at({Slot[b], h, x, y}) = In.InitialState->at({b, h, x, y});
  Step.StateIndex = Slot;
  Tensor Got({B, H, T, DV});
  for (int64_t T0 = 0; T0 < T; T0 += Piece) {
    int64_t N = std::min(Piece, T - T0);
    Step.Tokens = reference::linearTokenSlice(*C.Graph, In, T0, N);
    Step.Positions = std::vector<int64_t>(B, T0);
    reference::LinearDecodeOutputs Out = reference::linearDecodeStep(C, Step);
    Step.States = Out.States;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < N; ++t)
          for (int64_t y = 0; y < DV; ++y)
            Got.at({b, h, T0 + t, y}) = Out.O.at({b, h, t, y});
  }
  CHECK(reference::maxMixedError(Got, Want.O) < 1e-12);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t x = 0; x < D; ++x)
        for (int64_t y = 0; y < DV; ++y)
          CHECK(Step.States.at({Slot[b], h, x, y}) ==
                Approx(Want.FinalState.at({b, h, x, y})).epsilon(1e-12));
  for (int64_t x = 0; x < D; ++x) // entries 1 and 3: no row names them
    CHECK(Step.States.at({1, 1, x, 0}) == Before.at({1, 1, x, 0}));
  CHECK(Step.States.at({3, 0, 0, 2}) == Before.at({3, 0, 0, 2}));
}

TEST_CASE("positions are the mods' t", "[linear][decode]") {
  // Without positions every step starts at t = 0: a position-dependent
  // decay then differs from the recurrence after the first piece.
  CompiledDefinition C = compile(positional());
  std::mt19937_64 Rng(7);
  LinearInputs In = randomInputs(C, Rng, 1, 1, 1, 1, 4, 2, 2);
  reference::LinearOutputs Want = reference::linearRecurrent(C, In);
  reference::LinearDecodeInputs Step;
  Step.States = *In.InitialState;
  Step.Tokens = reference::linearTokenSlice(*C.Graph, In, 0, 2);
  Step.States = reference::linearDecodeStep(C, Step).States;
  Step.Tokens = reference::linearTokenSlice(*C.Graph, In, 2, 2);
  Tensor NoPos = reference::linearDecodeStep(C, Step).O;
  Step.Positions = std::vector<int64_t>{2};
  Tensor WithPos = reference::linearDecodeStep(C, Step).O;
  CHECK(WithPos.at({0, 0, 1, 0}) == Approx(Want.O.at({0, 0, 3, 0})).epsilon(1e-12));
  CHECK(std::fabs(NoPos.at({0, 0, 1, 0}) - Want.O.at({0, 0, 3, 0})) > 1e-6);
}

TEST_CASE("a decode row whose index is outside the pool is skipped",
          "[linear][decode]") {
  CompiledDefinition C = compile(examples::simpleGla());
  std::mt19937_64 Rng(9);
  reference::LinearDecodeInputs Step;
  Step.Tokens = randomInputs(C, Rng, 2, 1, 1, 1, 2, 2, 2);
  Step.States = Tensor::normal({2, 1, 2, 2}, Rng);
  Step.StateIndex = std::vector<int64_t>{-1, 0};
  reference::LinearDecodeOutputs Out = reference::linearDecodeStep(C, Step);
  CHECK(Out.O.at({0, 0, 1, 1}) == 0.0);
  CHECK(Out.O.at({1, 0, 1, 1}) != 0.0);
  CHECK(Out.States.at({1, 0, 1, 1}) == Step.States.at({1, 0, 1, 1}));
  CHECK(Out.States.at({0, 0, 1, 1}) != Step.States.at({0, 0, 1, 1}));
}

TEST_CASE("the reference decode step rejects mismatched shapes",
          "[linear][decode]") {
  CompiledDefinition C = compile(examples::simpleGla());
  std::mt19937_64 Rng(3);
  reference::LinearDecodeInputs Step;
  Step.Tokens = randomInputs(C, Rng, 2, 2, 2, 2, 1, 4, 4);
  Step.States = Tensor({2, 2, 4, 3});
  CHECK_THROWS_WITH(reference::linearDecodeStep(C, Step),
                    Contains("decode states must be [pool, 2, 4, 4]"));
  Step.States = Tensor({3, 2, 4, 4});
  CHECK_THROWS_WITH(reference::linearDecodeStep(C, Step),
                    Contains("without a state index the pool must hold one "
                             "state per sequence (2), got 3"));
  Step.StateIndex = std::vector<int64_t>{0};
  CHECK_THROWS_WITH(reference::linearDecodeStep(C, Step),
                    Contains("state index must have 2 entries, got 1"));
  Step.StateIndex = std::vector<int64_t>{0, 1};
  Step.Positions = std::vector<int64_t>{0, 1, 2};
  CHECK_THROWS_WITH(reference::linearDecodeStep(C, Step),
                    Contains("positions must have 2 entries, got 3"));
  CHECK_THROWS_WITH(reference::linearTokenSlice(*C.Graph, Step.Tokens, 0, 2),
                    Contains("tokens [0, 2) are not inside the 1 tokens"));
}

TEST_CASE("the decode kernel reads inputs at ti and positions at t",
          "[linear][decode]") {
  CompiledDefinition C = compile(positional());
  codegen::LinearKernelSpec Spec;
  Spec.HeadDim = Spec.HeadDimV = 64;
  codegen::KernelSource Src = codegen::generateLinearDecode(C, Spec);
  CHECK(Src.Key == "positional_linear.linear_dec.f16.d64x64.sm_80");
  CHECK(Src.Entries == std::vector<std::string>{"attnc_linear_decode"});
  CHECK_THAT(Src.Source, Contains("q_mod(const Inputs &in, float x, int b, "
                                  "int h, int t, int ti)"));
  CHECK_THAT(Src.Source, Contains("in.load_in_0_s(b, h, ti, 0)"));
  CHECK_THAT(Src.Source, Contains("#include \"attnc/linear_decode.cuh\""));
  // The chunk kernels keep their five-argument mods.
  codegen::LinearKernelSpec F = Spec;
  F.Config = codegen::LinearConfig::defaultFor(64, 64, GpuArch::Sm80);
  codegen::KernelSource Fwd = codegen::generateLinearForward(C, F);
  CHECK_THAT(Fwd.Source, Contains("in.load_in_0_s(b, h, t, 0)"));
  CHECK_THAT(Fwd.Source, !Contains("int ti"));
}

namespace {

using namespace attn::runtime;

void useTempCache() {
  static const attn::testing::TempDir Dir("attnc-linear-decode-cache");
  static const bool Set = setenv("ATTNC_CACHE_DIR", Dir.Path.c_str(), 1) == 0;
  REQUIRE(Set);
}

void *fake(uintptr_t A) { return reinterpret_cast<void *>(A); }

constexpr int64_t B = 2, H = 4, N = 3, D = 64, DV = 128, P = 6;

TensorView tok16(uintptr_t Ptr, int64_t Heads, int64_t Dim, int64_t Tokens = N,
                 DType E = DType::F16) {
  return TensorView::contiguous(fake(Ptr), E, {B, Tokens, Heads, Dim});
}
TensorView f32(uintptr_t Ptr, std::vector<int64_t> Shape) {
  return TensorView::contiguous(fake(Ptr), DType::F32, Shape);
}
TensorView i32(uintptr_t Ptr, std::vector<int64_t> Shape) {
  return TensorView::contiguous(fake(Ptr), DType::I32, Shape);
}

/// A valid mamba2 decode step over a pool of P states with an index table
/// and positions, updated in place, whose pieces each check replaces.
struct Call {
  TensorView Q = tok16(0x10000, 1, D), K = tok16(0x20000, 1, D),
             V = tok16(0x30000, H, DV), O = tok16(0x40000, H, DV);
  InputMap Inputs = {{"A", f32(0x50000, {H})}, {"dt", f32(0x60000, {B, H, N})}};
  const TensorView *Decay = nullptr;
  TensorView In = f32(0x1000000, {P, H, D, DV});
  TensorView Out = In;
  TensorView Index = i32(0x70000, {B}), Pos = i32(0x80000, {B});
  bool UseIndex = true, UsePos = true;
};

std::string failure(LinearAttention &L, const Call &C) {
  try {
    L.decodeStep({C.Q, C.K, C.V, C.O, C.Decay, C.In, C.Out,
                  C.UseIndex ? &C.Index : nullptr, C.UsePos ? &C.Pos : nullptr},
                 C.Inputs);
  } catch (const InvalidArgument &E) {
    return E.what();
  } catch (const DriverError &) {
    return "reached the driver";
  }
  return "nothing thrown";
}

} // namespace

TEST_CASE("LinearAttention::decodeStep validates every argument",
          "[linear][decode]") {
  useTempCache();
  LinearSignature Sig;
  Sig.HeadDim = D;
  Sig.HeadDimV = DV;
  Sig.Arch = GpuArch::Sm80;
  LinearAttention L(examples::mamba2(), Sig);
  Call C;
  // Valid, in place and to a second buffer: the kernel compiles, then the
  // launch needs a driver.
  CHECK(failure(L, C) == "reached the driver");
  C.Out = f32(0x2000000, {P, H, D, DV});
  CHECK(failure(L, C) == "reached the driver");
  CHECK_THAT(L.decodeSource().Key, Contains("mamba2.linear_dec.f16.d64x128"));

  auto Fails = [&](auto &&Edit) {
    Call X;
    Edit(X);
    return failure(L, X);
  };
  CHECK_THAT(Fails([](Call &X) { X.Q.Data = nullptr; }),
             Contains("q: null data pointer"));
  CHECK_THAT(Fails([](Call &X) { X.K = tok16(0x20000, 1, D, N, DType::BF16); }),
             Contains("k: expected dtype f16, got bf16"));
  CHECK_THAT(Fails([](Call &X) { X.V = tok16(0x30000, H, 64); }),
             Contains("v: head_dim (last dimension) must be 128, got 64"));
  CHECK_THAT(Fails([](Call &X) { X.K = tok16(0x20000, 3, D); }),
             Contains("k: heads (3) must divide v's heads (4)"));
  CHECK_THAT(Fails([](Call &X) {
               X.Q = tok16(0x10000, 1, D, 17);
               X.K = tok16(0x20000, 1, D, 17);
               X.V = tok16(0x30000, H, DV, 17);
               X.O = tok16(0x40000, H, DV, 17);
               X.Inputs["dt"] = f32(0x60000, {B, H, 17});
             }),
             Contains("v: 17 new tokens per sequence; the decode step takes "
                      "1 to 16"));
  CHECK_THAT(Fails([](Call &X) { X.O = tok16(0x40000, 2, DV); }),
             Contains("out: expected batch 2, seq 3 and heads 4"));
  TensorView Decay = f32(0x90000, {B, H, N});
  CHECK_THAT(Fails([&](Call &X) { X.Decay = &Decay; }),
             Contains("decay: must be null"));
  CHECK_THAT(Fails([](Call &X) { X.Inputs["dt"] = f32(0x60000, {B, H, N + 1}); }),
             Contains("input 'dt' (per_row): expected shape [2, 4, 3]"));
  CHECK_THAT(Fails([](Call &X) { X.Inputs.erase("A"); }),
             Contains("input 'A': declared by 'mamba2' but not supplied"));
  CHECK_THAT(Fails([](Call &X) { X.In.Data = nullptr; }),
             Contains("state_in: null data pointer"));
  CHECK_THAT(Fails([](Call &X) {
               X.In = f32(0x1000000, {P, H, D});
               X.Out = X.In;
             }),
             Contains("state_in: expected rank 4 [pool, heads, head_dim, "
                      "head_dim_v], got rank 3"));
  CHECK_THAT(Fails([](Call &X) { X.In = f32(0x1000000, {P, H, DV, D}); }),
             Contains("state_in: expected shape [6, 4, 64, 128], got [6, 4, "
                      "128, 64]"));
  CHECK_THAT(Fails([](Call &X) {
               X.In = TensorView::contiguous(fake(0x1000000), DType::F16,
                                             {P, H, D, DV});
             }),
             Contains("state_in: expected dtype f32, got f16"));
  CHECK_THAT(Fails([](Call &X) {
               X.In.Data = fake(0x1000008);
               X.Out = X.In;
             }),
             Contains("state_in: data pointer must be 16-byte aligned"));
  CHECK_THAT(Fails([](Call &X) {
               X.In.Strides = {H * D * DV, D * DV, 1, D};
               X.Out = X.In;
             }),
             Contains("state_in: must be contiguous"));
  CHECK_THAT(Fails([](Call &X) { X.Out = f32(0x2000000, {P + 1, H, D, DV}); }),
             Contains("state_out: expected shape [6, 4, 64, 128], got [7, 4, "
                      "64, 128]"));
  CHECK_THAT(Fails([](Call &X) { X.Out.Data = fake(0x1000000 + 4 * D * DV); }),
             Contains("state_out: overlaps state_in without being the same "
                      "tensor"));
  CHECK_THAT(Fails([](Call &X) { X.Out.Data = fake(0x2000004); }),
             Contains("state_out: data pointer must be 16-byte aligned"));
  CHECK_THAT(Fails([](Call &X) { X.Index = i32(0x70000, {B + 1}); }),
             Contains("state_index: expected shape [2], got [3]"));
  CHECK_THAT(Fails([](Call &X) { X.Index = f32(0x70000, {B}); }),
             Contains("state_index: expected dtype i32, got f32"));
  CHECK_THAT(Fails([](Call &X) { X.Index.Data = nullptr; }),
             Contains("state_index: null data pointer"));
  CHECK_THAT(Fails([](Call &X) { X.UseIndex = false; }),
             Contains("state_in: without state_index the pool holds one state "
                      "per sequence: expected 2 entries, got 6"));
  CHECK_THAT(Fails([](Call &X) { X.Pos = i32(0x80000, {B, 1}); }),
             Contains("positions: expected shape [2], got [2, 1]"));
  CHECK_THAT(Fails([](Call &X) { X.Pos.Data = fake(0x80002); }),
             Contains("positions: data pointer must be 4-byte aligned"));
}
