// attnc_attention_create and the introspection calls: every argument
// checked, kernels compiled for an explicit arch, inputs and finals named.
#include "CapiTestSupport.h"

#include <catch2/catch.hpp>

using namespace capitest;
using Catch::Matchers::Contains;

TEST_CASE("attention create: NULL arguments are named", "[capi]") {
  DefPtr Mha = example("mha");
  REQUIRE(Mha);
  attnc_signature S = sm80Signature();
  attnc_attention *A = reinterpret_cast<attnc_attention *>(1);
  CHECK(attnc_attention_create(Mha.get(), &S, nullptr) ==
        ATTNC_USER_ERROR);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_create: argument 'out' is NULL"));
  CHECK(attnc_attention_create(nullptr, &S, &A) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_create: argument 'def' is NULL"));
  CHECK(A == nullptr); // *out is cleared before anything can fail
  CHECK(attnc_attention_create(Mha.get(), nullptr, &A) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_create: argument 'sig': is NULL"));
}

TEST_CASE("attention create: signature fields out of range are named",
          "[capi]") {
  DefPtr Mha = example("mha");
  attnc_attention *A = nullptr;
  struct Case {
    const char *Field;
    void (*Break)(attnc_signature &);
    const char *Says;
  } Cases[] = {
      {"sig.dtype", [](attnc_signature &S) { S.dtype = ATTNC_DTYPE_F32; },
       "2 is not ATTNC_DTYPE_F16"},
      {"sig.layout", [](attnc_signature &S) { S.layout = 7; },
       "7 is not an attnc_layout"},
      {"sig.arch", [](attnc_signature &S) { S.arch = 75; },
       "75 is not an attnc_arch"},
      {"sig.head_dim", [](attnc_signature &S) { S.head_dim = 0; },
       "0 is not positive"},
      {"sig.head_dim_v", [](attnc_signature &S) { S.head_dim_v = -64; },
       "-64 is not positive"},
  };
  for (const Case &C : Cases) {
    INFO(C.Field);
    attnc_signature S = sm80Signature();
    C.Break(S);
    CHECK(attnc_attention_create(Mha.get(), &S, &A) ==
          ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains(std::string("attnc_attention_create: "
                                                 "argument '") +
                                     C.Field + "': " + C.Says));
    CHECK(A == nullptr);
  }
}

TEST_CASE("attention create: the runtime's own errors come through",
          "[capi]") {
  DefPtr Mha = example("mha");
  attnc_attention *A = nullptr;
  attnc_signature S = sm80Signature();
  S.backend = "no_such_backend";
  CHECK(attnc_attention_create(Mha.get(), &S, &A) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("no_such_backend"));
  S = sm80Signature();
  S.config = "not_a_config";
  CHECK(attnc_attention_create(Mha.get(), &S, &A) != ATTNC_OK);
  CHECK_THAT(lastError(), Contains("not_a_config"));
  CHECK(A == nullptr);
}

TEST_CASE("attention create: mha compiles for sm_80 and names its LSE",
          "[capi]") {
  DefPtr Mha = example("mha");
  attnc_signature S = sm80Signature();
  attnc_attention *Raw = nullptr;
  REQUIRE(attnc_attention_create(Mha.get(), &S, &Raw) == ATTNC_OK);
  AttPtr A(Raw);
  int32_t Arch = 0;
  REQUIRE(attnc_attention_arch(A.get(), &Arch) == ATTNC_OK);
  CHECK(Arch == ATTNC_ARCH_SM80);
  size_t N = 99;
  REQUIRE(attnc_attention_input_count(A.get(), &N) == ATTNC_OK);
  CHECK(N == 0);
  REQUIRE(attnc_attention_final_count(A.get(), &N) == ATTNC_OK);
  REQUIRE(N == 1);
  const char *Name = nullptr;
  REQUIRE(attnc_attention_final_name(A.get(), 0, &Name) == ATTNC_OK);
  CHECK(std::string(Name) == "lse");

  CHECK(attnc_attention_final_name(A.get(), 1, &Name) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_final_name: argument "
                                   "'index': 1 is out of range"));
  attnc_input_info Info;
  CHECK(attnc_attention_input_info(A.get(), 0, &Info) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_input_info: argument "
                                   "'index': 0 is out of range"));
}

TEST_CASE("attention introspection: declared inputs with their classes",
          "[capi]") {
  DefPtr Alibi = example("alibi_learnable");
  attnc_signature S = sm80Signature();
  attnc_attention *Raw = nullptr;
  REQUIRE(attnc_attention_create(Alibi.get(), &S, &Raw) == ATTNC_OK);
  AttPtr A(Raw);
  size_t N = 0;
  REQUIRE(attnc_attention_input_count(A.get(), &N) == ATTNC_OK);
  REQUIRE(N == 2);
  attnc_input_info Info;
  REQUIRE(attnc_attention_input_info(A.get(), 0, &Info) == ATTNC_OK);
  CHECK(std::string(Info.name) == "slopes");
  CHECK(Info.shape == ATTNC_SHAPE_PER_HEAD);
  CHECK(Info.dtype == ATTNC_DTYPE_F32);
  CHECK(Info.requires_grad == 1);

  DefPtr Doc = example("mha_document_ids");
  REQUIRE(Doc);
  REQUIRE(attnc_attention_create(Doc.get(), &S, &Raw) == ATTNC_OK);
  AttPtr D(Raw);
  REQUIRE(attnc_attention_input_info(D.get(), 1, &Info) == ATTNC_OK);
  CHECK(std::string(Info.name) == "doc_k");
  CHECK(Info.shape == ATTNC_SHAPE_PER_KEY_TOKEN);
  CHECK(Info.dtype == ATTNC_DTYPE_I32);
  CHECK(Info.requires_grad == 0);
}

TEST_CASE("attention introspection: NULL handles and outputs are named",
          "[capi]") {
  size_t N;
  const char *Name;
  attnc_input_info Info;
  int32_t Arch;
  CHECK(attnc_attention_input_count(nullptr, &N) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_input_count: argument 'att' is NULL"));
  CHECK(attnc_attention_final_count(nullptr, &N) == ATTNC_INVALID_ARGUMENT);
  CHECK(attnc_attention_final_name(nullptr, 0, &Name) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK(attnc_attention_input_info(nullptr, 0, &Info) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK(attnc_attention_arch(nullptr, &Arch) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_arch: argument 'att' is NULL"));
  attnc_attention_release(nullptr); // does nothing

  DefPtr Mha = example("mha");
  attnc_signature S = sm80Signature();
  attnc_attention *Raw = nullptr;
  REQUIRE(attnc_attention_create(Mha.get(), &S, &Raw) == ATTNC_OK);
  AttPtr A(Raw);
  CHECK(attnc_attention_input_count(A.get(), nullptr) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_input_count: argument 'count' is "
                      "NULL"));
  CHECK(attnc_attention_final_name(A.get(), 0, nullptr) == ATTNC_USER_ERROR);
  CHECK(attnc_attention_input_info(A.get(), 0, nullptr) == ATTNC_USER_ERROR);
  CHECK(attnc_attention_arch(A.get(), nullptr) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_arch: argument 'arch' is NULL"));
}
