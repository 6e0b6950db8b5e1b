// validateBackwardCall with fake device pointers (no GPU is touched).
#include "Examples.h"

#include "attn/runtime/Attention.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Validate.h"

#include <catch2/catch.hpp>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;

namespace {

void *fake(uintptr_t Address) { return reinterpret_cast<void *>(Address); }

/// A valid backward call: B=2, Sq=16, Skv=24, H=4, Hkv=2, D=64, DV=64, f16,
/// BSHD; finals [1, B, H, Sq].
struct BwdCall {
  Signature Sig;
  TensorView Q, K, V, O, DO, DQ, DK, DV, F;
  bool WithOut = true, WithFinals = true;
  InputMap In;
  InputGradMap Grads;

  BwdCall() {
    Sig.Dtype = DType::F16;
    Sig.HeadDim = Sig.HeadDimV = 64;
    Q = seq(0x10000, 16, 4);
    K = seq(0x20000, 24, 2);
    V = seq(0x30000, 24, 2);
    O = seq(0x40000, 16, 4);
    DO = seq(0x50000, 16, 4);
    DQ = seq(0x60000, 16, 4);
    DK = seq(0x70000, 24, 2);
    DV = seq(0x80000, 24, 2);
    F = TensorView::contiguous(fake(0x90000), DType::F32, {1, 2, 4, 16});
  }
  static TensorView seq(uintptr_t P, int64_t S, int64_t H, int64_t D = 64) {
    return TensorView::contiguous(fake(P), DType::F16, {2, S, H, D});
  }
  BackwardCallShape run(const CompiledDefinition &Def) const {
    BackwardTensors T{Q,  K,  V,  WithOut ? &O : nullptr, DO, WithFinals ? &F : nullptr,
                      DQ, DK, DV};
    return validateBackwardCall(Def, Sig, T, In, Grads);
  }
};

const CompiledDefinition &defOf(const std::string &N) {
  static const CompiledDefinition Mha = compile(examples::mha());
  static const CompiledDefinition Sigmoid = compile(examples::sigmoidAttn());
  static const CompiledDefinition Alibi = compile(examples::alibiLearnable());
  if (N == "mha")
    return Mha;
  if (N == "sigmoid_attn")
    return Sigmoid;
  REQUIRE(N == "alibi_learnable");
  return Alibi;
}

std::string invalid(const BwdCall &C, const char *Def = "mha") {
  try {
    C.run(defOf(Def));
  } catch (const InvalidArgument &E) {
    return E.what();
  }
  FAIL_CHECK("validateBackwardCall accepted the call");
  return "";
}

/// alibi_learnable's inputs and gradient outputs.
void learnable(BwdCall &C) {
  C.In = {{"slopes", TensorView::contiguous(fake(0xa0000), DType::F32, {4})},
          {"head_bias", TensorView::contiguous(fake(0xa1000), DType::F32, {4})}};
  C.Grads = {{"slopes", TensorView::contiguous(fake(0xb0000), DType::F32, {4})},
             {"head_bias", TensorView::contiguous(fake(0xb1000), DType::F32, {4})}};
}

} // namespace

TEST_CASE("validateBackwardCall: a valid call gives its shape and strides",
          "[validate][bwd]") {
  BwdCall C;
  BackwardCallShape S = C.run(defOf("mha"));
  CHECK(S.Fwd.B == 2);
  CHECK(S.Fwd.H == 4);
  CHECK(S.Fwd.Hkv == 2);
  CHECK(S.Fwd.Sq == 16);
  CHECK(S.Fwd.Skv == 24);
  // BSHD [2, 24, 2, 64]: batch, head, seq strides.
  CHECK(S.DK[0] == 24 * 2 * 64);
  CHECK(S.DK[1] == 64);
  CHECK(S.DK[2] == 2 * 64);
  CHECK(S.DQ[2] == 4 * 64);
  CHECK(S.DOut[1] == 64);
}

TEST_CASE("validateBackwardCall: out is needed only for a backward that "
          "reads doosum",
          "[validate][bwd]") {
  BwdCall C;
  C.WithOut = false;
  CHECK_THAT(invalid(C), Contains("out: required") && Contains("rowsum(dout * out)"));
  // sigmoid_attn's backward is dS = dP: no out, no finals.
  C.WithFinals = false;
  C.In = {{"softmax_bias", -1.0f}};
  CHECK_NOTHROW(C.run(defOf("sigmoid_attn")));
  // When given anyway, out is checked.
  C.WithOut = true;
  C.O = BwdCall::seq(0x40000, 15, 4);
  CHECK_THAT(invalid(C, "sigmoid_attn"),
             Contains("out: expected batch 2, seq 16 and heads 4 (as q)"));
}

TEST_CASE("validateBackwardCall: each gradient tensor is checked like its "
          "input",
          "[validate][bwd]") {
  BwdCall C;
  C.DO.Type = DType::BF16;
  CHECK_THAT(invalid(C), Contains("dout: expected dtype f16, got bf16"));
  C = BwdCall();
  C.DQ = BwdCall::seq(0x60000, 16, 2);
  CHECK_THAT(invalid(C), Contains("dq: expected batch 2, seq 16 and heads 4 (as q), "
                                  "got 2, 16 and 2"));
  C = BwdCall();
  C.DK = BwdCall::seq(0x70000, 23, 2);
  CHECK_THAT(invalid(C), Contains("dk: expected batch 2, seq 24 and heads 2 (as k)"));
  C = BwdCall();
  C.DV = BwdCall::seq(0x80000, 24, 2, 128);
  CHECK_THAT(invalid(C), Contains("dv: head_dim (last dimension) must be 64, got 128"));
  C = BwdCall();
  C.DV.Data = fake(0x80008);
  CHECK_THAT(invalid(C), Contains("dv: data pointer must be 16-byte aligned"));
  C = BwdCall();
  C.DQ.Strides[1] = 4 * 64 + 4;
  CHECK_THAT(invalid(C), Contains("dq: the seq stride (260) must be a non-negative "
                                  "multiple of 8"));
  C = BwdCall();
  C.DO.Data = nullptr;
  CHECK_THAT(invalid(C), Contains("dout: null data pointer"));
  C = BwdCall();
  C.WithFinals = false;
  CHECK_THAT(invalid(C), Contains("finals: required"));
}

TEST_CASE("validateBackwardCall: custom-input gradients", "[validate][bwd]") {
  BwdCall C;
  learnable(C);
  CHECK_NOTHROW(C.run(defOf("alibi_learnable")));
  BwdCall Missing = C;
  Missing.Grads.erase("slopes");
  CHECK_THAT(invalid(Missing, "alibi_learnable"),
             Contains("input gradient 'slopes': required, a float32 tensor of "
                      "shape [4]"));
  BwdCall Shape = C;
  Shape.Grads.at("head_bias") =
      TensorView::contiguous(fake(0xb1000), DType::F32, {2, 4});
  CHECK_THAT(invalid(Shape, "alibi_learnable"),
             Contains("input gradient 'head_bias' (per_head): expected shape [4], "
                      "got [2, 4]"));
  BwdCall Type = C;
  Type.Grads.at("slopes").Type = DType::F16;
  CHECK_THAT(invalid(Type, "alibi_learnable"),
             Contains("input gradient 'slopes': expected dtype f32, got f16"));
  BwdCall Unknown = C;
  Unknown.Grads["temperature"] =
      TensorView::contiguous(fake(0xb2000), DType::F32, {1});
  CHECK_THAT(invalid(Unknown, "alibi_learnable"),
             Contains("input gradient 'temperature': 'alibi_learnable' has no "
                      "input 'temperature' that requires a gradient"));
  // The custom inputs themselves are checked as for the forward.
  BwdCall NoInput = C;
  NoInput.In.erase("slopes");
  CHECK_THAT(invalid(NoInput, "alibi_learnable"),
             Contains("input 'slopes': declared by 'alibi_learnable' but not "
                      "supplied"));
}
