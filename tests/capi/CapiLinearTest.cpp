// The linear-attention calls of the C interface: creation for an explicit
// arch, the declarations and whether the decay input is read, and each
// argument of the fixed-length and packed calls checked with the function
// and the argument named.
#include "CapiTestSupport.h"

#include <catch2/catch.hpp>

using namespace capitest;
using Catch::Matchers::Contains;

namespace {

struct LinDeleter {
  void operator()(attnc_linear_attention *A) const {
    attnc_linear_attention_release(A);
  }
};
using LinPtr = std::unique_ptr<attnc_linear_attention, LinDeleter>;

attnc_linear_signature linearSm80() {
  attnc_linear_signature S{};
  S.dtype = ATTNC_DTYPE_F16;
  S.head_dim = 64;
  S.head_dim_v = 64;
  S.layout = ATTNC_LAYOUT_BSHD;
  S.arch = ATTNC_ARCH_SM80;
  return S;
}

LinPtr linear(const char *Name) {
  DefPtr D = example(Name);
  REQUIRE(D);
  attnc_linear_signature S = linearSm80();
  attnc_linear_attention *Raw = nullptr;
  attnc_status St = attnc_linear_attention_create(D.get(), &S, &Raw);
  INFO(lastError());
  REQUIRE(St == ATTNC_OK);
  return LinPtr(Raw);
}

} // namespace

TEST_CASE("linear create: arguments and definitions are checked", "[capi]") {
  DefPtr Gla = example("simple_gla");
  attnc_linear_signature S = linearSm80();
  attnc_linear_attention *A = nullptr;
  CHECK(attnc_linear_attention_create(Gla.get(), &S, nullptr) ==
        ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("attnc_linear_attention_create: argument "
                                   "'out' is NULL"));
  CHECK(attnc_linear_attention_create(nullptr, &S, &A) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("argument 'def' is NULL"));
  CHECK(attnc_linear_attention_create(Gla.get(), nullptr, &A) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_linear_attention_create: argument "
                                   "'sig': is NULL"));
  S.arch = 3;
  CHECK(attnc_linear_attention_create(Gla.get(), &S, &A) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'sig.arch': 3 is not an "
                                   "attnc_arch"));
  S = linearSm80();
  S.head_dim_v = 0;
  CHECK(attnc_linear_attention_create(Gla.get(), &S, &A) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'sig.head_dim_v': 0 is not "
                                   "positive"));
  // A transformer definition is not a linear one (the runtime says so).
  DefPtr Mha = example("mha");
  S = linearSm80();
  CHECK(attnc_linear_attention_create(Mha.get(), &S, &A) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("mha"));
  CHECK(A == nullptr);
}

TEST_CASE("linear introspection: inputs and the decay input", "[capi]") {
  LinPtr Mamba = linear("mamba2");
  size_t N = 0;
  REQUIRE(attnc_linear_attention_input_count(Mamba.get(), &N) == ATTNC_OK);
  REQUIRE(N == 2);
  attnc_input_info Info;
  REQUIRE(attnc_linear_attention_input_info(Mamba.get(), 1, &Info) ==
          ATTNC_OK);
  CHECK(std::string(Info.name) == "dt");
  CHECK(Info.shape == ATTNC_SHAPE_PER_ROW);
  CHECK(attnc_linear_attention_input_info(Mamba.get(), 2, &Info) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'index': 2 is out of range"));
  int32_t Uses = -1;
  REQUIRE(attnc_linear_attention_uses_decay(Mamba.get(), &Uses) == ATTNC_OK);
  CHECK(Uses == 0); // mamba2's decay comes from A and dt
  LinPtr Gla = linear("simple_gla");
  REQUIRE(attnc_linear_attention_uses_decay(Gla.get(), &Uses) == ATTNC_OK);
  CHECK(Uses == 1);
  CHECK(attnc_linear_attention_uses_decay(nullptr, &Uses) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_linear_attention_uses_decay: "
                                   "argument 'att' is NULL"));
  CHECK(attnc_linear_attention_uses_decay(Gla.get(), nullptr) ==
        ATTNC_USER_ERROR);
  CHECK(attnc_linear_attention_input_count(Gla.get(), nullptr) ==
        ATTNC_USER_ERROR);
  attnc_linear_attention_release(nullptr);
}

TEST_CASE("linear calls: tensors are checked, then the runtime's checks",
          "[capi]") {
  LinPtr Gla = linear("simple_gla");
  FakeTensor Q{{2, 128, 4, 64}}, K{{2, 128, 4, 64}}, V{{2, 128, 4, 64}},
      O{{2, 128, 4, 64}}, Decay{{2, 4, 128}, ATTNC_DTYPE_F32},
      BadDecay{{2, 4, 100}, ATTNC_DTYPE_F32};
  CHECK(attnc_linear_attention_forward(nullptr, &Q, &K, &V, &O, &Decay,
                                       nullptr, 0, nullptr, nullptr,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_linear_attention_forward: argument "
                                   "'att' is NULL"));
  CHECK(attnc_linear_attention_forward(Gla.get(), &Q, nullptr, &V, &O,
                                       &Decay, nullptr, 0, nullptr, nullptr,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'k': is NULL"));
  attnc_tensor Init = Decay.T;
  Init.ndim = 12;
  CHECK(attnc_linear_attention_forward(Gla.get(), &Q, &K, &V, &O, &Decay,
                                       nullptr, 0, &Init, nullptr,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'initial_state': ndim 12"));
  CHECK(attnc_linear_attention_forward(Gla.get(), &Q, &K, &V, &O, &BadDecay,
                                       nullptr, 0, nullptr, nullptr,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("decay"));
  // simple_gla reads the decay input: leaving it out is the runtime's error.
  CHECK(attnc_linear_attention_forward(Gla.get(), &Q, &K, &V, &O, nullptr,
                                       nullptr, 0, nullptr, nullptr,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("decay"));

  FakeTensor DO{{2, 128, 4, 64}}, DQ{{2, 128, 4, 64}}, DK{{2, 128, 4, 64}},
      DV{{2, 128, 4, 64}};
  CHECK(attnc_linear_attention_backward(
            Gla.get(), &Q, &K, &V, &Decay, nullptr, nullptr, nullptr, &DQ,
            &DK, &DV, nullptr, nullptr, nullptr, 0, nullptr, 0,
            nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_linear_attention_backward: "
                                   "argument 'dout': is NULL"));
  attnc_named_tensor G{};
  CHECK(attnc_linear_attention_backward(
            Gla.get(), &Q, &K, &V, &Decay, &DO, nullptr, nullptr, &DQ, &DK,
            &DV, nullptr, nullptr, nullptr, 0, &G, 1,
            nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'grads[0]': name is NULL"));
  FakeTensor BadDq{{2, 128, 4, 32}};
  CHECK(attnc_linear_attention_backward(
            Gla.get(), &Q, &K, &V, &Decay, &DO, nullptr, nullptr, &BadDq,
            &DK, &DV, nullptr, nullptr, nullptr, 0, nullptr, 0,
            nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("dq"));
}

TEST_CASE("linear packed calls: tensors are checked, then the runtime's "
          "checks",
          "[capi]") {
  LinPtr Gla = linear("simple_gla");
  // Three sequences, 200 tokens in all, 4 heads.
  FakeTensor Q{{200, 4, 64}}, K{{200, 4, 64}}, V{{200, 4, 64}},
      O{{200, 4, 64}}, Decay{{1, 4, 200}, ATTNC_DTYPE_F32},
      Cu{{4}, ATTNC_DTYPE_I32}, Init{{3, 4, 64, 64}, ATTNC_DTYPE_F32},
      Final{{3, 4, 64, 64}, ATTNC_DTYPE_F32};
  const char *Fwd = "attnc_linear_attention_forward_varlen: argument ";
  CHECK(attnc_linear_attention_forward_varlen(
            nullptr, &Q, &K, &V, &O, &Decay, &Cu, nullptr, 0, &Init, &Final,
            nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(std::string(Fwd) + "'att' is NULL"));
  CHECK(attnc_linear_attention_forward_varlen(
            Gla.get(), &Q, &K, &V, nullptr, &Decay, &Cu, nullptr, 0, &Init,
            &Final, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(std::string(Fwd) + "'out': is NULL"));
  CHECK(attnc_linear_attention_forward_varlen(
            Gla.get(), &Q, &K, &V, &O, &Decay, nullptr, nullptr, 0, &Init,
            &Final, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(std::string(Fwd) + "'cu_seqlens': is "
                                                      "NULL"));
  attnc_tensor BadFinal = Final.T;
  BadFinal.dtype = 99;
  CHECK(attnc_linear_attention_forward_varlen(
            Gla.get(), &Q, &K, &V, &O, &Decay, &Cu, nullptr, 0, &Init,
            &BadFinal, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(std::string(Fwd) + "'final_state'"));
  attnc_input BadInput{};
  CHECK(attnc_linear_attention_forward_varlen(
            Gla.get(), &Q, &K, &V, &O, &Decay, &Cu, &BadInput, 1, &Init,
            &Final, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(std::string(Fwd) + "'inputs[0]'"));
  // The runtime's checks: the offsets' dtype, the states' count (one per
  // sequence), a fixed-length q, the decay that simple_gla reads.
  FakeTensor CuF16{{4}};
  CHECK(attnc_linear_attention_forward_varlen(
            Gla.get(), &Q, &K, &V, &O, &Decay, &CuF16, nullptr, 0, &Init,
            &Final, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("cu_seqlens"));
  FakeTensor Init2{{2, 4, 64, 64}, ATTNC_DTYPE_F32};
  CHECK(attnc_linear_attention_forward_varlen(
            Gla.get(), &Q, &K, &V, &O, &Decay, &Cu, nullptr, 0, &Init2,
            &Final, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("initial_state"));
  FakeTensor Q4{{1, 200, 4, 64}};
  CHECK(attnc_linear_attention_forward_varlen(
            Gla.get(), &Q4, &K, &V, &O, &Decay, &Cu, nullptr, 0, nullptr,
            nullptr, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("q"));
  CHECK(attnc_linear_attention_forward_varlen(
            Gla.get(), &Q, &K, &V, &O, nullptr, &Cu, nullptr, 0, nullptr,
            nullptr, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("decay"));

  FakeTensor DO{{200, 4, 64}}, DQ{{200, 4, 64}}, DK{{200, 4, 64}},
      DV{{200, 4, 64}}, DDecay{{1, 4, 200}, ATTNC_DTYPE_F32},
      DInit{{3, 4, 64, 64}, ATTNC_DTYPE_F32};
  auto Bwd = [&](const attnc_tensor *Dout, const attnc_tensor *CuArg,
                 const attnc_tensor *DqArg, const attnc_tensor *DInitArg,
                 const attnc_named_tensor *Grads, size_t NumGrads,
                 attnc_linear_attention *Att) {
    return attnc_linear_attention_backward_varlen(
        Att, &Q, &K, &V, &Decay, Dout, CuArg, &Init, &Final, DqArg, &DK,
        &DV, &DDecay, DInitArg, nullptr, 0, Grads, NumGrads, nullptr);
  };
  const std::string BwdArg = "attnc_linear_attention_backward_varlen: "
                             "argument ";
  CHECK(Bwd(&DO, &Cu, &DQ, &DInit, nullptr, 0, nullptr) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(BwdArg + "'att' is NULL"));
  CHECK(Bwd(nullptr, &Cu, &DQ, &DInit, nullptr, 0, Gla.get()) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(BwdArg + "'dout': is NULL"));
  CHECK(Bwd(&DO, nullptr, &DQ, &DInit, nullptr, 0, Gla.get()) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(BwdArg + "'cu_seqlens': is NULL"));
  CHECK(Bwd(&DO, &Cu, nullptr, &DInit, nullptr, 0, Gla.get()) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(BwdArg + "'dq': is NULL"));
  attnc_tensor BadDInit = DInit.T;
  BadDInit.shape = nullptr;
  CHECK(Bwd(&DO, &Cu, &DQ, &BadDInit, nullptr, 0, Gla.get()) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(BwdArg + "'dinitial_state'"));
  attnc_named_tensor G{};
  CHECK(Bwd(&DO, &Cu, &DQ, &DInit, &G, 1, Gla.get()) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains(BwdArg + "'grads[0]': name is NULL"));
  // The runtime's: dq's head dim, the gradients' state count, the offsets'
  // shape, a gradient of an input simple_gla does not declare.
  FakeTensor BadDq{{200, 4, 32}};
  CHECK(Bwd(&DO, &Cu, &BadDq, &DInit, nullptr, 0, Gla.get()) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("dq"));
  FakeTensor DInit4{{4, 4, 64, 64}, ATTNC_DTYPE_F32};
  CHECK(Bwd(&DO, &Cu, &DQ, &DInit4, nullptr, 0, Gla.get()) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("dinitial_state"));
  FakeTensor Cu1{{1}, ATTNC_DTYPE_I32};
  CHECK(Bwd(&DO, &Cu1, &DQ, &DInit, nullptr, 0, Gla.get()) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("cu_seqlens: expected [batch + 1]"));
  FakeTensor Scale{{1}, ATTNC_DTYPE_F32};
  attnc_named_tensor Unknown{"nope", Scale.T};
  CHECK(Bwd(&DO, &Cu, &DQ, &DInit, &Unknown, 1, Gla.get()) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("input gradient 'nope'"));
}

TEST_CASE("linear packed backward: a valid call passes every check",
          "[capi]") {
  if (hasDriver())
    return; // the fake pointers would be launched on
  LinPtr Gla = linear("simple_gla");
  FakeTensor Q{{200, 4, 64}}, K{{200, 4, 64}}, V{{200, 4, 64}},
      Decay{{1, 4, 200}, ATTNC_DTYPE_F32}, Cu{{4}, ATTNC_DTYPE_I32},
      Init{{3, 4, 64, 64}, ATTNC_DTYPE_F32},
      DFinal{{3, 4, 64, 64}, ATTNC_DTYPE_F32}, DO{{200, 4, 64}},
      DQ{{200, 4, 64}}, DK{{200, 4, 64}}, DV{{200, 4, 64}},
      DDecay{{1, 4, 200}, ATTNC_DTYPE_F32},
      DInit{{3, 4, 64, 64}, ATTNC_DTYPE_F32};
  // Every argument in its place: the call gets past the checks to the
  // missing driver.
  CHECK(attnc_linear_attention_backward_varlen(
            Gla.get(), &Q, &K, &V, &Decay, &DO, &Cu, &Init, &DFinal, &DQ,
            &DK, &DV, &DDecay, &DInit, nullptr, 0, nullptr, 0,
            nullptr) == ATTNC_DRIVER_ERROR);
}
