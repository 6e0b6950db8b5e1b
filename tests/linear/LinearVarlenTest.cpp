// Packed (variable-length) linear attention on the CPU: the chunked model
// over packed sequences (chunks never crossing a sequence's end) equals the
// token recurrence, lengths 0, 1 and not multiples of the chunk included;
// packing equal lengths equals the padded batch; the packed kernel's
// generated mods; LinearAttention::forwardVarlen's validation without a GPU.
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

dsl::LinearAttentionDef linearDef(const std::string &Name) {
  if (Name == "mamba2")
    return examples::mamba2();
  if (Name == "simple_gla")
    return examples::simpleGla();
  REQUIRE(Name == "retention_linear");
  return examples::retentionLinear();
}

LinearInputs packed(const CompiledDefinition &C, std::mt19937_64 &Rng,
                    int64_t B, int64_t H, int64_t T, int64_t D, int64_t DV) {
  LinearInputs In;
  In.Q = Tensor::normal({B, H, T, D}, Rng);
  In.K = Tensor::normal({B, 1, T, D}, Rng);
  In.V = Tensor::normal({B, H, T, DV}, Rng);
  In.Decay = Tensor::uniform({B, H, T}, Rng, -1.0, 0.0);
  In.Inputs = reference::sampleInputs(*C.Graph, Rng, B, H, T, T);
  return In;
}

} // namespace

TEST_CASE("the chunked model over packed sequences equals the recurrence",
          "[linear][varlen]") {
  std::string Name = GENERATE("mamba2", "simple_gla", "retention_linear");
  int64_t Chunk = GENERATE(1, 3, 4, 64);
  CompiledDefinition C = compile(linearDef(Name));
  std::mt19937_64 Rng(40 + Chunk);
  // Lengths 0, 1, 5, 9, 0, 3.
  const std::vector<int64_t> Cu = {0, 0, 1, 6, 15, 15, 18};
  LinearInputs In = packed(C, Rng, 1, 2, 18, 4, 3);
  Tensor Init = Tensor::normal({6, 2, 4, 3}, Rng);
  INFO(Name << " chunk " << Chunk);
  reference::LinearOutputs Want = reference::linearVarlen(C, In, Cu, Init);
  reference::LinearOutputs Got = reference::linearVarlen(
      C, In, Cu, Init, Chunk, [](double X) { return X; });
  CHECK(reference::maxMixedError(Got.O, Want.O) < 1e-10);
  CHECK(reference::maxMixedError(Got.FinalState, Want.FinalState) < 1e-10);
  // The empty sequences pass their initial states through.
  for (int64_t I = 0; I < 2 * 4 * 3; ++I) {
    CHECK(Want.FinalState.Data[I] == Init.Data[I]);
    CHECK(Want.FinalState.Data[4 * 24 + I] == Init.Data[4 * 24 + I]);
  }
}

TEST_CASE("packing equal lengths gives the padded batch's results",
          "[linear][varlen]") {
  std::string Name = GENERATE("mamba2", "simple_gla", "retention_linear");
  CompiledDefinition C = compile(linearDef(Name));
  std::mt19937_64 Rng(5);
  const int64_t B = 3, H = 2, T = 5, D = 4, DV = 3;
  LinearInputs Batch = packed(C, Rng, B, H, T, D, DV);
  Batch.InitialState = Tensor::normal({B, H, D, DV}, Rng);
  reference::LinearOutputs Want = reference::linearRecurrent(C, Batch);
  // Batch row b is tokens [b·T, (b+1)·T) of one packed row.
  LinearInputs Packed = packed(C, Rng, 1, H, B * T, D, DV);
  auto Pack = [&](const Tensor &X, Tensor &Into) {
    const int64_t Heads = X.dim(1), Dim = X.Shape.size() == 4 ? X.dim(3) : 1;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Heads; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < Dim; ++d)
            Into.Data[((h * B * T) + b * T + t) * Dim + d] =
                X.Data[((b * Heads + h) * T + t) * Dim + d];
  };
  Pack(Batch.Q, Packed.Q);
  Pack(Batch.K, Packed.K);
  Pack(Batch.V, Packed.V);
  Pack(Batch.Decay, Packed.Decay);
  for (const ir::InputDecl &Decl : C.Graph->decls().Inputs)
    if (Decl.Shape == ir::InputShape::PerRow)
      Pack(Batch.Inputs.at(Decl.Name), Packed.Inputs.at(Decl.Name));
    else
      Packed.Inputs.at(Decl.Name) = Batch.Inputs.at(Decl.Name);
  reference::LinearOutputs Got =
      reference::linearVarlen(C, Packed, {0, T, 2 * T, 3 * T}, Batch.InitialState);
  CHECK(reference::maxMixedError(Got.FinalState, Want.FinalState) < 1e-12);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        CHECK(Got.O.at({0, h, b * T + t, 2}) ==
              Approx(Want.O.at({b, h, t, 2})).epsilon(1e-12));
}

TEST_CASE("the packed reference rejects bad offsets", "[linear][varlen]") {
  CompiledDefinition C = compile(examples::simpleGla());
  std::mt19937_64 Rng(2);
  LinearInputs In = packed(C, Rng, 1, 1, 6, 2, 2);
  CHECK_THROWS_WITH(reference::linearVarlen(C, In, {0, 5}, std::nullopt),
                    Contains("cu_seqlens must run from 0 to the 6 tokens"));
  CHECK_THROWS_WITH(reference::linearVarlen(C, In, {0, 4, 3, 6}, std::nullopt),
                    Contains("cu_seqlens must not decrease"));
  CHECK_THROWS_WITH(reference::linearVarlen(C, In, {0, 6}, Tensor({2, 1, 2, 2})),
                    Contains("initial states must be [1, 1, 2, 2]"));
  LinearInputs Two = packed(C, Rng, 2, 1, 3, 2, 2);
  CHECK_THROWS_WITH(reference::linearVarlen(C, Two, {0, 3}, std::nullopt),
                    Contains("a packed batch is batch 1, got 2"));
}

TEST_CASE("the packed kernel reads inputs at the packed token",
          "[linear][varlen]") {
  CompiledDefinition C = compile(examples::mamba2());
  codegen::LinearKernelSpec Spec;
  Spec.HeadDim = 128;
  Spec.HeadDimV = 64;
  Spec.Config = codegen::LinearConfig::defaultFor(128, 64, GpuArch::Sm80);
  codegen::KernelSource Src = codegen::generateLinearForwardVarlen(C, Spec);
  CHECK(Src.Key == "mamba2.linear_fwd_varlen.f16.d128x64.sm_80." +
                       Spec.Config.str());
  CHECK(Src.Entries == std::vector<std::string>{"attnc_linear_fwd_varlen"});
  CHECK_THAT(Src.Source, Contains("/*kVarlen=*/true>"));
  CHECK_THAT(Src.Source, Contains("in.load_in_1_dt(b, h, ti, 0)"));
}

TEST_CASE("the packed forward's registers are capped for the CTAs shared "
          "memory lets an SM hold",
          "[linear][varlen]") {
  // mamba2 d128/64 at c32v64w4 takes 57744 bytes: three CTAs an SM of
  // sm_90a (170 registers a thread), two of sm_80 (no cap below 255).
  CompiledDefinition C = compile(examples::mamba2());
  codegen::LinearKernelSpec Spec;
  Spec.HeadDim = 128;
  Spec.HeadDimV = 64;
  Spec.Config = codegen::LinearConfig::parse("c32v64w4b8");
  Spec.Arch = GpuArch::Sm90a;
  CHECK(codegen::linearSharedBytes(Spec).FwdMinBlocks == 3);
  CHECK_THAT(codegen::generateLinearForwardVarlen(C, Spec).Source,
             Contains("__launch_bounds__(128, 3)"));
  Spec.Arch = GpuArch::Sm80;
  CHECK(codegen::linearSharedBytes(Spec).FwdMinBlocks == 2);
  // 256 threads: two CTAs would leave 128 registers, under the floor of 160.
  Spec.HeadDim = 256;
  Spec.HeadDimV = 128;
  Spec.Config = codegen::LinearConfig::parse("c64v128w8b8");
  Spec.Arch = GpuArch::Sm90a;
  CHECK(codegen::linearSharedBytes(Spec).FwdMinBlocks == 1);
}

namespace {

using namespace attn::runtime;

void useTempCache() {
  static const attn::testing::TempDir Dir("attnc-linear-varlen-cache");
  static const bool Set = setenv("ATTNC_CACHE_DIR", Dir.Path.c_str(), 1) == 0;
  REQUIRE(Set);
}

void *fake(uintptr_t A) { return reinterpret_cast<void *>(A); }

constexpr int64_t S = 3, H = 4, T = 50, D = 64, DV = 128;

TensorView tok16(uintptr_t P, int64_t Heads, int64_t Dim, int64_t Tokens = T) {
  return TensorView::contiguous(fake(P), DType::F16, {Tokens, Heads, Dim});
}
TensorView f32(uintptr_t P, std::vector<int64_t> Shape) {
  return TensorView::contiguous(fake(P), DType::F32, Shape);
}

/// A valid simple_gla packed call of S sequences, T tokens in all.
struct Call {
  TensorView Q = tok16(0x10000, H, D), K = tok16(0x20000, 1, D),
             V = tok16(0x30000, H, DV), O = tok16(0x40000, H, DV);
  TensorView Decay = f32(0x50000, {1, H, T});
  TensorView Cu = TensorView::contiguous(fake(0x60000), DType::I32, {S + 1});
  TensorView Init = f32(0x100000, {S, H, D, DV}), Final = Init;
};

std::string failure(LinearAttention &L, const Call &C) {
  try {
    L.forwardVarlen({C.Q, C.K, C.V, C.O, &C.Decay, C.Cu, &C.Init, &C.Final});
  } catch (const InvalidArgument &E) {
    return E.what();
  } catch (const DriverError &) {
    return "reached the driver";
  }
  return "nothing thrown";
}

} // namespace

TEST_CASE("LinearAttention::forwardVarlen validates every argument",
          "[linear][varlen]") {
  useTempCache();
  LinearSignature Sig;
  Sig.HeadDim = D;
  Sig.HeadDimV = DV;
  Sig.Arch = GpuArch::Sm80;
  LinearAttention L(examples::simpleGla(), Sig);
  CHECK(failure(L, Call()) == "reached the driver");
  auto Fails = [&](auto &&Edit) {
    Call X;
    Edit(X);
    return failure(L, X);
  };
  CHECK_THAT(Fails([](Call &X) { X.Q = TensorView::contiguous(fake(0x10000), DType::F16, {1, T, H, D}); }),
             Contains("q: expected rank 3 [tokens, heads, head_dim]"));
  CHECK_THAT(Fails([](Call &X) { X.K = tok16(0x20000, 3, D); }),
             Contains("k: heads (3) must divide v's heads (4)"));
  CHECK_THAT(Fails([](Call &X) { X.V = tok16(0x30000, H, DV, T + 1); }),
             Contains("q, k: seq must equal v's (51)"));
  CHECK_THAT(Fails([](Call &X) { X.O = tok16(0x40000, 2, DV); }),
             Contains("out: expected batch 1, seq 50 and heads 4"));
  CHECK_THAT(Fails([](Call &X) { X.Decay = f32(0x50000, {S, H, T}); }),
             Contains("decay: expected shape [1, 4, 50], got [3, 4, 50]"));
  CHECK_THAT(Fails([](Call &X) { X.Cu.Data = nullptr; }),
             Contains("cu_seqlens: null data pointer"));
  CHECK_THAT(Fails([](Call &X) { X.Cu.Type = DType::F32; }),
             Contains("cu_seqlens: expected dtype i32, got f32"));
  CHECK_THAT(Fails([](Call &X) {
               X.Cu = TensorView::contiguous(fake(0x60000), DType::I32, {1});
             }),
             Contains("cu_seqlens: expected [batch + 1] with batch >= 1, got "
                      "shape [1]"));
  CHECK_THAT(Fails([](Call &X) {
               X.Cu = TensorView::contiguous(fake(0x60000), DType::I32, {2, 2});
             }),
             Contains("cu_seqlens: expected [batch + 1]"));
  CHECK_THAT(Fails([](Call &X) { X.Cu.Data = fake(0x60002); }),
             Contains("cu_seqlens: data pointer must be 4-byte aligned"));
  CHECK_THAT(Fails([](Call &X) {
               X.Cu = TensorView::contiguous(fake(0x60000), DType::I32, {20000});
             }),
             Contains("cu_seqlens: sequences x heads is 79996; at most 65535"));
  CHECK_THAT(Fails([](Call &X) { X.Init = f32(0x100000, {1, H, D, DV}); }),
             Contains("initial_state: expected shape [3, 4, 64, 128], got [1, 4, "
                      "64, 128]"));
  CHECK_THAT(Fails([](Call &X) { X.Final = f32(0x100000, {S, H, DV, D}); }),
             Contains("final_state: expected shape [3, 4, 64, 128]"));
  LinearSignature Thd = Sig;
  Thd.TensorLayout = Layout::THD;
  LinearAttention LT(examples::simpleGla(), Thd);
  const Call C;
  TensorView Q4 = TensorView::contiguous(fake(0x10000), DType::F16, {1, T, H, D});
  CHECK_THROWS_WITH(LT.forward(Q4, Q4, Q4, Q4, &C.Decay),
                    Contains("signature: layout thd is not a signature layout "
                             "of linear attention (packed batches go to "
                             "forwardVarlen)"));
}
