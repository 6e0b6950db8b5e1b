// attnc_attention_merge_kind and attnc_attention_merge_results: the derived
// rule's kind per variant, a variant without one refused with the
// analysis' reason, and every argument checked before anything runs.
#include "CapiTestSupport.h"

#include <catch2/catch.hpp>


using namespace capitest;
using Catch::Matchers::Contains;

namespace {

/// Two partial results of a small BSHD call and the merged one.
struct Merge {
  FakeTensor O0{{2, 128, 4, 64}}, O1{{2, 128, 4, 64}}, O{{2, 128, 4, 64}};
  FakeTensor F0{{1, 2, 4, 128}, ATTNC_DTYPE_F32},
      F1{{1, 2, 4, 128}, ATTNC_DTYPE_F32}, F{{1, 2, 4, 128}, ATTNC_DTYPE_F32};
  attnc_tensor Outs[2]{}, Finals[2]{};
  Merge() {
    Outs[0] = O0.T;
    Outs[1] = O1.T;
    Finals[0] = F0.T;
    Finals[1] = F1.T;
  }
  attnc_status run(attnc_attention *A, size_t N = 2, bool WithFinals = true) {
    return attnc_attention_merge_results(A, Outs, WithFinals ? Finals : nullptr,
                                         N, &O, WithFinals ? &F : nullptr,
                                         nullptr);
  }
};

} // namespace

TEST_CASE("merge kind: the derived rule per variant", "[capi]") {
  int32_t Kind = -1;
  const char *Reason = nullptr;
  REQUIRE(attnc_attention_merge_kind(sm80Attention("mha"), &Kind, &Reason) ==
          ATTNC_OK);
  CHECK(Kind == ATTNC_MERGE_LOG_SUM_EXP);
  REQUIRE(attnc_attention_merge_kind(sm80Attention("sigmoid_attn"), &Kind,
                                     nullptr) == ATTNC_OK);
  CHECK(Kind == ATTNC_MERGE_SUM);
  REQUIRE(attnc_attention_merge_kind(sm80Attention("retention"), &Kind, &Reason) ==
          ATTNC_OK);
  CHECK(Kind == ATTNC_MERGE_NONE);
  REQUIRE(Reason);
  CHECK_THAT(std::string(Reason), Contains("o_scale"));
  REQUIRE(attnc_attention_merge_kind(sm80Attention("retention_combine"), &Kind,
                                     nullptr) == ATTNC_OK);
  CHECK(Kind == ATTNC_MERGE_COMBINE);
  CHECK(attnc_attention_merge_kind(nullptr, &Kind, nullptr) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_merge_kind: argument "
                                   "'att' is NULL"));
  CHECK(attnc_attention_merge_kind(sm80Attention("mha"), nullptr, nullptr) ==
        ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("'kind'"));
}

TEST_CASE("merge results: a variant without a merge is refused with why",
          "[capi]") {
  Merge M;
  CHECK(M.run(sm80Attention("retention")) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("its results cannot be merged"));
  CHECK_THAT(lastError(), Contains("o_scale"));
}

TEST_CASE("merge results: arguments are checked by name", "[capi]") {
  attnc_attention *A = sm80Attention("mha");
  Merge M;
  CHECK(M.run(nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_merge_results: argument "
                                   "'att' is NULL"));
  CHECK(attnc_attention_merge_results(A, nullptr, M.Finals, 2, &M.O, &M.F,
                                      nullptr) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("'part_outs'"));
  for (size_t N : {size_t(0), size_t(1), size_t(9)}) {
    INFO(N);
    CHECK(M.run(A, N) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("argument 'num_parts': " +
                                     std::to_string(N) + "; expected 2 to 8"));
  }
  // A malformed part is named by its index.
  M.Outs[1].shape = nullptr;
  CHECK(M.run(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'part_outs[1]': shape is NULL"));
  M.Outs[1] = M.O1.T;
  M.Finals[0].ndim = -1;
  CHECK(M.run(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("'part_finals[0]'"));
  M.Finals[0] = M.F0.T;
  CHECK(attnc_attention_merge_results(A, M.Outs, M.Finals, 2, nullptr, &M.F,
                                      nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'out': is NULL"));
}

TEST_CASE("merge results: the runtime's checks see the C views", "[capi]") {
  attnc_attention *A = sm80Attention("mha");
  Merge M;
  // A part of other rows than out's.
  M.O1.Shape[1] = 64;
  CHECK(M.run(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("parts[1].out"));
  M.O1.Shape[1] = 128;
  // mha has a final (the LSE): the parts' finals may not be left out.
  CHECK(M.run(A, 2, false) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("finals"));
  M.F1.Shape[3] = 64;
  CHECK(M.run(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("parts[1].finals"));
  M.F1.Shape[3] = 128;
  if (hasDriver())
    return; // the fake pointers would be launched on
  CHECK(M.run(A) == ATTNC_DRIVER_ERROR);
}
