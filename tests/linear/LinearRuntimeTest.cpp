// LinearAttention without a CUDA driver: it compiles its kernels with NVRTC,
// rejects every bad argument with an InvalidArgument naming it before
// anything is launched, and only a valid call reaches the (absent) driver.
#include "Examples.h"
#include "TempDir.h"

#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/LinearAttention.h"

#include <catch2/catch.hpp>

#include <cstdlib>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;

namespace {

/// Points ATTNC_CACHE_DIR at a fresh temporary kernel-cache directory,
/// removed at exit.
void useTempCache() {
  static const attn::testing::TempDir Dir("attnc-linear-cache");
  static const bool Set = setenv("ATTNC_CACHE_DIR", Dir.Path.c_str(), 1) == 0;
  REQUIRE(Set);
}

void *fake(uintptr_t A) { return reinterpret_cast<void *>(A); }

constexpr int64_t B = 1, H = 4, T = 10, D = 64, DV = 128;

LinearSignature sig() {
  LinearSignature S;
  S.HeadDim = D;
  S.HeadDimV = DV;
  S.Arch = GpuArch::Sm80;
  return S;
}

TensorView seq16(uintptr_t P, int64_t Heads, int64_t Dim,
                 DType E = DType::F16) {
  return TensorView::contiguous(fake(P), E, {B, T, Heads, Dim});
}
TensorView f32(uintptr_t P, std::vector<int64_t> Shape) {
  return TensorView::contiguous(fake(P), DType::F32, Shape);
}

template <class E, class F> std::string messageOf(F &&Fn) {
  try {
    Fn();
  } catch (const E &Err) {
    return Err.what();
  }
  FAIL_CHECK("nothing (or another error) was thrown");
  return "";
}

/// A valid mamba2 call (q/k one group, A per head, dt per token) whose
/// pieces each check replaces with one bad argument.
struct Call {
  TensorView Q = seq16(0x10000, 1, D), K = seq16(0x20000, 1, D),
             V = seq16(0x30000, H, DV), O = seq16(0x40000, H, DV);
  InputMap Inputs = {{"A", f32(0x50000, {H})}, {"dt", f32(0x60000, {B, H, T})}};
  const TensorView *Decay = nullptr, *Init = nullptr, *Final = nullptr;
};

} // namespace

TEST_CASE("LinearAttention refuses what it cannot compile", "[linear]") {
  useTempCache();
  CHECK_THAT(messageOf<UserError>([] { LinearAttention L(examples::mha(), sig()); }),
             Contains("'mha' is not linear attention"));
  LinearSignature S = sig();
  S.HeadDim = 96;
  CHECK_THAT(messageOf<UserError>([&] { LinearAttention L(examples::mamba2(), S); }),
             Contains("head_dim 96"));
  S = sig();
  S.Config = "c64v64";
  CHECK_THAT(messageOf<UserError>([&] { LinearAttention L(examples::mamba2(), S); }),
             Contains("linear config 'c64v64'"));
  S = sig();
  S.Dtype = DType::I32;
  CHECK_THAT(messageOf<UserError>([&] { LinearAttention L(examples::mamba2(), S); }),
             Contains("signature: dtype i32 is not f16 or bf16"));
}

TEST_CASE("LinearAttention::forward validates every argument", "[linear]") {
  useTempCache();
  LinearAttention L(examples::mamba2(), sig());
  CHECK(L.spec().Config.str() == "c32v128w4b4");
  auto Fails = [&](const Call &C) {
    return messageOf<InvalidArgument>([&] {
      L.forward(C.Q, C.K, C.V, C.O, C.Decay, C.Inputs, C.Init, C.Final);
    });
  };
  Call C;
  C.Q.Data = nullptr;
  CHECK_THAT(Fails(C), Contains("q: null data pointer"));
  C = Call();
  C.Q.Shape = {B, T, D};
  C.Q.Strides = {T * D, D, 1};
  CHECK_THAT(Fails(C), Contains("q: expected rank 4 [batch, seq, heads, head_dim]"));
  C = Call();
  C.K = seq16(0x20000, 1, D, DType::BF16);
  CHECK_THAT(Fails(C), Contains("k: expected dtype f16, got bf16"));
  C = Call();
  C.V = seq16(0x30000, H, 64);
  CHECK_THAT(Fails(C), Contains("v: head_dim (last dimension) must be 128, got 64"));
  C = Call();
  C.Q.Data = fake(0x10008);
  CHECK_THAT(Fails(C), Contains("q: data pointer must be 16-byte aligned"));
  C = Call();
  C.V.Strides = {T * H * DV, H * DV + 4, DV, 1};
  CHECK_THAT(Fails(C), Contains("v: the seq stride (516) must be a "
                                "non-negative multiple of 8"));
  C = Call();
  C.K = seq16(0x20000, 3, D);
  CHECK_THAT(Fails(C), Contains("k: heads (3) must divide v's heads (4)"));
  C = Call();
  C.Q = TensorView::contiguous(fake(0x10000), DType::F16, {B, T + 1, 1, D});
  CHECK_THAT(Fails(C), Contains("q, k: seq must equal v's (10), got 11 and 10"));
  C = Call();
  C.O = seq16(0x40000, 2, DV);
  CHECK_THAT(Fails(C), Contains("out: expected batch 1, seq 10 and heads 4"));
  C = Call();
  TensorView Decay = f32(0x70000, {B, H, T});
  C.Decay = &Decay;
  CHECK_THAT(Fails(C), Contains("decay: must be null; the decay_mod of "
                                "'mamba2' does not read the decay"));
  C = Call();
  C.Inputs.erase("A");
  CHECK_THAT(Fails(C), Contains("input 'A': declared by 'mamba2' but not supplied"));
  C = Call();
  C.Inputs["bias"] = 1.0f;
  CHECK_THAT(Fails(C), Contains("input 'bias': 'mamba2' declares no such input"));
  C = Call();
  C.Inputs["dt"] = f32(0x60000, {B, H, T + 1});
  CHECK_THAT(Fails(C), Contains("input 'dt' (per_row): expected shape [1, 4, 10], "
                                "got [1, 4, 11]"));
  C = Call();
  C.Inputs["A"] = 2.0f;
  CHECK_THAT(Fails(C), Contains("input 'A': expected a float32 tensor, got a number"));
  C = Call();
  TensorView Init = f32(0x80000, {B, H, DV, D});
  C.Init = &Init;
  CHECK_THAT(Fails(C), Contains("initial_state: expected shape [1, 4, 64, 128], "
                                "got [1, 4, 128, 64]"));
  C = Call();
  TensorView Final = f32(0x80000, {B, H, D, DV});
  Final.Strides = {H * D * DV, D * DV, 1, D};
  C.Final = &Final;
  CHECK_THAT(Fails(C), Contains("final_state: must be contiguous"));
  C = Call();
  C.V = TensorView::contiguous(fake(0x30000), DType::F16, {70000, T, 1, DV});
  C.O = TensorView::contiguous(fake(0x40000), DType::F16, {70000, T, 1, DV});
  C.Q = TensorView::contiguous(fake(0x10000), DType::F16, {70000, T, 1, D});
  C.K = C.Q;
  C.Inputs = {{"A", f32(0x50000, {1})}, {"dt", f32(0x60000, {70000, 1, T})}};
  CHECK_THAT(Fails(C), Contains("batch x heads is 70000; at most 65535"));
}

TEST_CASE("simple_gla takes a decay, and only a well-formed one", "[linear]") {
  useTempCache();
  LinearSignature S = sig();
  S.TensorLayout = Layout::BHSD;
  LinearAttention L(examples::simpleGla(), S);
  auto View = [&](uintptr_t P, int64_t Dim) {
    return TensorView::contiguous(fake(P), DType::F16, {B, H, T, Dim});
  };
  TensorView Q = View(0x10000, D), K = View(0x20000, D), V = View(0x30000, DV),
             O = View(0x40000, DV);
  CHECK_THAT(messageOf<InvalidArgument>([&] { L.forward(Q, K, V, O, nullptr); }),
             Contains("decay: required, a float32 tensor [1, 4, 10]; the "
                      "decay_mod of 'simple_gla' reads it"));
  TensorView Decay = f32(0x70000, {B, T, H});
  CHECK_THAT(messageOf<InvalidArgument>([&] { L.forward(Q, K, V, O, &Decay); }),
             Contains("decay: expected shape [1, 4, 10], got [1, 10, 4]"));
  // [B,T,H] memory seen as [B,H,T] through strides is fine.
  Decay = f32(0x70000, {B, H, T});
  Decay.Strides = {T * H, 1, H};
  if (!CudaDriver::get().available())
    CHECK_THROWS_AS(L.forward(Q, K, V, O, &Decay), DriverError);
}

TEST_CASE("LinearAttention::backward validates every argument", "[linear]") {
  useTempCache();
  LinearAttention L(examples::mamba2(), sig());
  Call C;
  TensorView DO = seq16(0x90000, H, DV), DQ = seq16(0xa0000, 1, D),
             DK = seq16(0xb0000, 1, D), DV_ = seq16(0xc0000, H, DV);
  TensorView State = f32(0xd0000, {B, H, D, DV});
  auto Fails = [&](const TensorView &dO, const TensorView &dQ,
                   const TensorView *DDecay, const TensorView *DFinal,
                   const LinearInputGrads &Grads) {
    return messageOf<InvalidArgument>([&] {
      L.backward({C.Q, C.K, C.V, nullptr, dO, nullptr, DFinal, dQ, DK, DV_,
                  DDecay, nullptr},
                 C.Inputs, Grads);
    });
  };
  CHECK_THAT(Fails(seq16(0x90000, 2, DV), DQ, nullptr, nullptr, {}),
             Contains("dout: expected batch 1, seq 10 and heads 4 (as v)"));
  CHECK_THAT(Fails(DO, seq16(0xa0000, H, D), nullptr, nullptr, {}),
             Contains("dq: expected batch 1, seq 10 and heads 1 (as q)"));
  TensorView DDecay = f32(0xe0000, {B, H, T});
  CHECK_THAT(Fails(DO, DQ, &DDecay, nullptr, {}),
             Contains("ddecay: must be null; 'mamba2' takes no decay input"));
  TensorView BadFinal = f32(0xd0000, {B, H, D});
  CHECK_THAT(Fails(DO, DQ, nullptr, &BadFinal, {}),
             Contains("dfinal_state: expected shape [1, 4, 64, 128]"));
  CHECK_THAT(Fails(DO, DQ, nullptr, nullptr, {{"gamma", f32(0xf0000, {H})}}),
             Contains("input gradient 'gamma': 'mamba2' declares no such input"));
  CHECK_THAT(Fails(DO, DQ, nullptr, nullptr, {{"A", f32(0xf0000, {H, 1})}}),
             Contains("input gradient 'A' (per_head): expected shape [4]"));
  CHECK_THAT(Fails(DO, DQ, nullptr, nullptr, {{"dt", f32(0xf0000, {B, H})}}),
             Contains("input gradient 'dt' (per_row): expected shape [1, 4, 10]"));
  if (!CudaDriver::get().available()) {
    // Valid: the backward kernels compile, then the launch needs a driver.
    CHECK_THROWS_AS(L.backward({C.Q, C.K, C.V, nullptr, DO, &State, &State, DQ,
                                DK, DV_, nullptr, &State},
                               C.Inputs,
                               {{"A", f32(0xf0000, {H})},
                                {"dt", f32(0xf1000, {B, H, T})}}),
                    DriverError);
    CHECK(L.backwardSource().Key ==
          "mamba2.linear_bwd.f16.d64x128.sm_80.c32v128w4b4");
  }
}
