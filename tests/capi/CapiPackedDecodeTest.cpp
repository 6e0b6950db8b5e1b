// attnc_attention_decode_paged_varlen, attnc_attention_plan_decode_varlen
// and attnc_attention_run_decode_varlen without a GPU: every argument is
// checked, by name and with the expected value, before anything compiles or
// launches (the calls here stop at those checks). A plan's kind against the
// call (a dense plan given to the packed run and the reverse) needs a plan,
// hence a device: tests/gpu/gpu_capi_packed_decode_test.
#include "CapiTestSupport.h"

#include <catch2/catch.hpp>

using namespace capitest;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {

constexpr int64_t B = 3, H = 8, Hkv = 2, D = 64, Pages = 12, Page = 16;

/// A packed decode call of 3 sequences over 10 query tokens and a block
/// table of pages of 16 (fake device addresses: it never launches).
struct Call {
  FakeTensor Q{{10, H, D}}, Out{{10, H, D}};
  FakeTensor Finals{{1, H, 10}, ATTNC_DTYPE_F32};
  FakeTensor Cu{{B + 1}, ATTNC_DTYPE_I32};
  FakeTensor KCache{{Pages, Page, Hkv, D}}, VCache{{Pages, Page, Hkv, D}};
  FakeTensor Table{{B, 4}, ATTNC_DTYPE_I32}, Lens{{B}, ATTNC_DTYPE_I32};
  attnc_paged_kv KV{};
  Call() {
    KV.k_cache = KCache.T;
    KV.v_cache = VCache.T;
    KV.layout = ATTNC_PAGE_NHD;
    KV.block_table = Table.T;
    KV.seq_lens = Lens.T;
    KV.max_seqlen_kv = 64;
  }
  attnc_status decode(attnc_attention *A, int64_t MaxQ = 4) {
    return attnc_attention_decode_paged_varlen(A, &Q, &Cu, MaxQ, &KV, &Out,
                                               &Finals, nullptr, 0, nullptr);
  }
};

/// \p F given shape \p S (and dtype \p Dtype) in place: a FakeTensor's
/// attnc_tensor points into its own shape vector.
void reshape(FakeTensor &F, std::vector<int64_t> S,
             int32_t Dtype = ATTNC_DTYPE_F16) {
  F.Shape = std::move(S);
  F.T.ndim = int32_t(F.Shape.size());
  F.T.shape = F.Shape.data();
  F.T.dtype = Dtype;
}

attnc_decode_bounds bounds() {
  attnc_decode_bounds Bd{};
  Bd.batch = B;
  Bd.heads = H;
  Bd.heads_kv = Hkv;
  Bd.queries_per_seq = 4;
  Bd.max_seqlen_kv = 64;
  Bd.page_size = Page;
  return Bd;
}

} // namespace

TEST_CASE("packed paged decode: arguments are checked by name", "[capi]") {
  attnc_attention *A = sm80Attention("mha");
  Call C;
  CHECK(C.decode(nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Equals("attnc_attention_decode_paged_varlen: "
                                 "argument 'att' is NULL"));
  CHECK(attnc_attention_decode_paged_varlen(A, &C.Q, nullptr, 4, &C.KV, &C.Out,
                                            &C.Finals, nullptr, 0,
                                            nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Equals("attnc_attention_decode_paged_varlen: "
                                 "argument 'cu_seqlens_q': is NULL"));
  CHECK(attnc_attention_decode_paged_varlen(A, &C.Q, &C.Cu, 4, nullptr,
                                            &C.Out, &C.Finals, nullptr, 0,
                                            nullptr) != ATTNC_OK);
  CHECK_THAT(lastError(), Contains("attnc_attention_decode_paged_varlen: "
                                   "argument 'kv'"));
  // The bound on a sequence's queries: 1 to 16.
  for (int64_t MaxQ : {int64_t(0), int64_t(17)}) {
    INFO(MaxQ);
    CHECK(C.decode(A, MaxQ) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(),
               Equals("max_seqlen_q: expected 1 to 16 (decode's queries per "
                      "sequence), got " +
                      std::to_string(MaxQ)));
  }
  C.KV.layout = 5;
  CHECK(C.decode(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Equals("attnc_attention_decode_paged_varlen: "
                                 "argument 'kv.layout': 5 is not "
                                 "ATTNC_PAGE_NHD (0) or ATTNC_PAGE_HND (1)"));
}

TEST_CASE("packed paged decode: shapes are checked against the call",
          "[capi]") {
  attnc_attention *A = sm80Attention("mha");
  {
    Call C;
    reshape(C.Out, {9, H, D});
    CHECK(C.decode(A) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Equals("out: expected tokens 10 and heads 8 (as "
                                   "q), got 9 and 8"));
  }
  {
    Call C;
    reshape(C.Finals, {1, H, 9}, ATTNC_DTYPE_F32);
    CHECK(C.decode(A) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("finals: expected shape [1, 8, 10], got "
                                     "[1, 8, 9]"));
  }
  {
    // A dense q ([B, S, H, D]) where packed decode takes [Tq, H, D].
    Call C;
    reshape(C.Q, {B, 4, H, D});
    CHECK(C.decode(A) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("q:"));
  }
  {
    Call C;
    reshape(C.Cu, {B + 1}, ATTNC_DTYPE_F32);
    CHECK(C.decode(A) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("cu_seqlens_q"));
    CHECK_THAT(lastError(), Contains("i32"));
  }
  {
    // The block table's rows are the sequences: B from cu_seqlens_q.
    Call C;
    reshape(C.Table, {B + 1, 4}, ATTNC_DTYPE_I32);
    C.KV.block_table = C.Table.T;
    CHECK(C.decode(A) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Equals("block_table: expected shape [3, 4], got "
                                   "[4, 4]"));
  }
}

TEST_CASE("packed decode plans: bounds are checked before any compile",
          "[capi]") {
  attnc_attention *A = sm80Attention("mha");
  attnc_decode_plan *P = reinterpret_cast<attnc_decode_plan *>(1);
  size_t Bytes = 0;
  attnc_decode_bounds Bd = bounds();
  CHECK(attnc_attention_plan_decode_varlen(nullptr, &Bd, &P, &Bytes) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK(P == nullptr); // cleared before anything else is checked
  CHECK_THAT(lastError(), Equals("attnc_attention_plan_decode_varlen: "
                                 "argument 'att' is NULL"));
  CHECK(attnc_attention_plan_decode_varlen(A, nullptr, &P, &Bytes) !=
        ATTNC_OK);
  CHECK_THAT(lastError(), Contains("attnc_attention_plan_decode_varlen"));
  CHECK_THAT(lastError(), Contains("'bounds'"));
  CHECK(attnc_attention_plan_decode_varlen(A, &Bd, &P, nullptr) != ATTNC_OK);
  CHECK_THAT(lastError(), Contains("'workspace_bytes'"));
  CHECK(attnc_attention_plan_decode_varlen(A, &Bd, nullptr, &Bytes) !=
        ATTNC_OK);
  CHECK_THAT(lastError(), Contains("'out'"));
  Bd.queries_per_seq = 17;
  CHECK(attnc_attention_plan_decode_varlen(A, &Bd, &P, &Bytes) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Equals("queries per sequence: expected 1 to 16, got 17"));
  Bd = bounds();
  Bd.page_size = 12;
  CHECK(attnc_attention_plan_decode_varlen(A, &Bd, &P, &Bytes) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Equals("page size: expected a power of two from 1 "
                                 "to 2^20, got 12"));
  Bd = bounds();
  Bd.heads = 7;
  CHECK(attnc_attention_plan_decode_varlen(A, &Bd, &P, &Bytes) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Equals("heads: expected a positive multiple of "
                                 "heads_kv (2), got 7"));
}

TEST_CASE("packed decode runs: the plan is checked first", "[capi]") {
  attnc_attention *A = sm80Attention("mha");
  Call C;
  char Work[64];
  CHECK(attnc_attention_run_decode_varlen(A, nullptr, &C.Q, &C.Cu, &C.KV,
                                          &C.Out, &C.Finals, Work,
                                          sizeof(Work), nullptr, 0,
                                          nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Equals("attnc_attention_run_decode_varlen: argument "
                                 "'plan' is NULL"));
  CHECK(attnc_attention_run_decode_varlen(nullptr, nullptr, &C.Q, &C.Cu,
                                          &C.KV, &C.Out, &C.Finals, Work,
                                          sizeof(Work), nullptr, 0,
                                          nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Equals("attnc_attention_run_decode_varlen: argument "
                                 "'att' is NULL"));
}
