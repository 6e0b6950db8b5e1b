// The linear-attention calls of the C interface: creation for an explicit
// arch, the declarations and whether the decay input is read, and each
// argument checked with the function and the argument named.
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
