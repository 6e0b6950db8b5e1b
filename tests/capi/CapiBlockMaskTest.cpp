// The C interface's block masks (attnc_block_mask_*, the _masked calls):
// every malformed argument refused with the function and the argument
// named, before anything reaches the device. Making a mask and the calls
// that use one are run on the GPU (gpu_capi_blockmask_test).
#include "CapiTestSupport.h"

#include <catch2/catch.hpp>

#include <map>

using namespace capitest;
using Catch::Matchers::Contains;

namespace {

attnc_attention *attention(const char *Name,
                           int32_t Layout = ATTNC_LAYOUT_BSHD) {
  static std::map<std::pair<std::string, int32_t>, AttPtr> Made;
  AttPtr &A = Made[{Name, Layout}];
  if (!A) {
    DefPtr D = example(Name);
    REQUIRE(D);
    attnc_signature S = sm80Signature();
    S.layout = Layout;
    attnc_attention *Raw = nullptr;
    REQUIRE(attnc_attention_create(D.get(), &S, &Raw) == ATTNC_OK);
    A.reset(Raw);
  }
  return A.get();
}

/// Lists for a [1, 1, 256, 256] problem in blocks of 128: two query blocks
/// of two key blocks each, causal (block 0 sees key block 0, partial; block
/// 1 sees key block 0 full and key block 1 partial).
struct Lists {
  std::vector<int32_t> Num{1, 1}, Idx{0, 0, 1, 0}, FullNum{0, 1},
      FullIdx{0, 0, 0, 0};
  attnc_block_lists L{};
  Lists() {
    L.batch = L.heads = 1;
    L.block_q = L.block_kv = 128;
    point();
  }
  void point() {
    L.kv_num_blocks = Num.data();
    L.kv_num_blocks_len = Num.size();
    L.kv_indices = Idx.data();
    L.kv_indices_len = Idx.size();
    L.full_kv_num_blocks = FullNum.data();
    L.full_kv_num_blocks_len = FullNum.size();
    L.full_kv_indices = FullIdx.data();
    L.full_kv_indices_len = FullIdx.size();
  }
};

const attnc_mask_shape Shape{1, 1, 256, 256, 0};

attnc_status fromLists(attnc_attention *A, const attnc_block_lists *L,
                       attnc_block_mask **Out,
                       const attnc_mask_shape *S = &Shape) {
  return attnc_block_mask_from_lists(A, S, L, 0, Out);
}

} // namespace

TEST_CASE("block mask: make names its NULL arguments", "[capi][blockmask]") {
  attnc_block_mask *M = reinterpret_cast<attnc_block_mask *>(1);
  CHECK(attnc_block_mask_make(nullptr, &Shape, nullptr, 0, 0, nullptr, &M) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK(M == nullptr); // *out is cleared before anything is checked
  CHECK_THAT(lastError(),
             Contains("attnc_block_mask_make: argument 'att': is NULL"));
  attnc_attention *A = attention("mha");
  CHECK(attnc_block_mask_make(A, nullptr, nullptr, 0, 0, nullptr, &M) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_block_mask_make: argument 'shape': is NULL"));
  CHECK(attnc_block_mask_make(A, &Shape, nullptr, 0, 0, nullptr, nullptr) ==
        ATTNC_USER_ERROR);
  CHECK_THAT(lastError(),
             Contains("attnc_block_mask_make: argument 'out' is NULL"));
}

TEST_CASE("block mask: a bad shape, input, layout or definition is refused "
          "before the device",
          "[capi][blockmask]") {
  attnc_attention *A = attention("mha");
  attnc_block_mask *M = nullptr;
  attnc_mask_shape S = Shape;
  S.seq_kv = 0;
  CHECK(attnc_block_mask_make(A, &S, nullptr, 0, 0, nullptr, &M) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_block_mask_make: argument 'shape': "
                                   "block mask shape: SeqKv is 0"));
  S = Shape;
  S.heads = 4;
  S.heads_kv = 3;
  CHECK(attnc_block_mask_make(A, &S, nullptr, 0, 0, nullptr, &M) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("argument 'shape': block mask shape: HeadsKv 3 does not "
                      "divide Heads 4"));
  // An input mha does not declare (the runtime's checkInputs).
  attnc_input In{};
  In.name = "prefix_len";
  In.kind = ATTNC_INPUT_I32;
  In.i32 = 3;
  CHECK(attnc_block_mask_make(A, &Shape, &In, 1, 0, nullptr, &M) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_block_mask_make: argument 'inputs': "
                                   "input 'prefix_len'"));
  // A mask's kind must be known: an attnc_input kind out of range.
  In.kind = 7;
  CHECK(attnc_block_mask_make(A, &Shape, &In, 1, 0, nullptr, &M) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK(M == nullptr);
  // A definition without a mask_mod, and a packed layout.
  CHECK(attnc_block_mask_make(attention("relu_attn"), &Shape, nullptr, 0, 0,
                              nullptr, &M) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("'relu_attn' has no mask_mod"));
  CHECK(attnc_block_mask_make(attention("mha", ATTNC_LAYOUT_THD), &Shape,
                              nullptr, 0, 0, nullptr,
                              &M) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("packed variable-length signature (THD) "
                                   "takes no block mask"));
}

TEST_CASE("block mask: from_lists names the list and the field",
          "[capi][blockmask]") {
  attnc_attention *A = attention("mha");
  attnc_block_mask *M = nullptr;
  CHECK(fromLists(A, nullptr, &M) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_block_mask_from_lists: argument "
                                   "'lists': is NULL"));
  {
    Lists L;
    L.L.kv_indices = nullptr;
    CHECK(fromLists(A, &L.L, &M) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(),
               Contains("argument 'lists.kv_indices': is NULL with length 4"));
  }
  {
    Lists L;
    L.L.kv_num_blocks_len = 1;
    CHECK(fromLists(A, &L.L, &M) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(),
               Contains("attnc_block_mask_from_lists: argument 'lists': block "
                        "lists: KvNumBlocks (kv_num_blocks) has 1 entries"));
  }
  {
    Lists L;
    L.Idx[2] = 2; // query block 1 names key block 2 of 2
    CHECK(fromLists(A, &L.L, &M) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("KvIndices (kv_indices)[0][0][1][0] is "
                                     "2; expected a key block in [0, 2)"));
  }
  {
    Lists L;
    L.FullIdx[2] = 1; // key block 1 of query block 1 in both lists
    CHECK(fromLists(A, &L.L, &M) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("both name key block 1 of query block 1"));
  }
  {
    Lists L;
    L.L.full_kv_indices = nullptr;
    L.L.full_kv_indices_len = 0;
    CHECK(fromLists(A, &L.L, &M) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(),
               Contains("argument 'lists': block lists: FullKvIndices "
                        "(full_kv_indices) is empty and FullKvNumBlocks "
                        "(full_kv_num_blocks) is not"));
  }
  {
    Lists L;
    L.L.heads = 3;
    CHECK(fromLists(A, &L.L, &M) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("block lists: Heads is 3; expected 1 or "
                                     "the shape's heads 1"));
    L.L.heads = 1;
    L.L.block_q = 0;
    CHECK(fromLists(A, &L.L, &M) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("block size 0x128"));
  }
  {
    Lists L;
    attnc_mask_shape S = Shape;
    S.batch = -1;
    CHECK(fromLists(A, &L.L, &M, &S) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("attnc_block_mask_from_lists: argument "
                                     "'shape': block mask shape: Batch is -1"));
    CHECK(fromLists(A, &L.L, &M, nullptr) == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("argument 'shape': is NULL"));
  }
  CHECK(M == nullptr);
  if (!hasDriver()) {
    // Valid lists pass every check and stop at the missing driver (the
    // copy to the device).
    Lists L;
    CHECK(fromLists(A, &L.L, &M) == ATTNC_DRIVER_ERROR);
    CHECK(M == nullptr);
  }
}

TEST_CASE("block mask: the masked calls, refresh and info name a NULL mask",
          "[capi][blockmask]") {
  attnc_attention *A = attention("mha");
  FakeTensor Q{{1, 256, 1, 64}}, K{{1, 256, 1, 64}}, V{{1, 256, 1, 64}},
      O{{1, 256, 1, 64}}, F{{1, 1, 1, 256}, ATTNC_DTYPE_F32};
  CHECK(attnc_attention_forward_masked(A, &Q, &K, &V, &O, &F, nullptr, 0,
                                       nullptr,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_forward_masked: argument "
                                   "'mask': is NULL"));
  // The tensors are checked first, as in attnc_attention_forward.
  CHECK(attnc_attention_forward_masked(A, nullptr, &K, &V, &O, &F, nullptr, 0,
                                       nullptr,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_forward_masked: argument "
                                   "'q': is NULL"));
  CHECK(attnc_attention_backward_masked(A, &Q, &K, &V, &O, &O, &F, &Q, &K, &V,
                                        nullptr, 0, nullptr, 0, nullptr,
                                        nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_backward_masked: argument "
                                   "'mask': is NULL"));
  CHECK(attnc_block_mask_refresh(A, nullptr, nullptr, 0, nullptr) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_block_mask_refresh: argument 'mask': is NULL"));
  CHECK(attnc_block_mask_refresh(nullptr, nullptr, nullptr, 0, nullptr) ==
        ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_block_mask_refresh: argument 'att': is NULL"));
  attnc_mask_shape S{};
  CHECK(attnc_block_mask_info(nullptr, &S, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_block_mask_info: argument 'mask': is NULL"));
  attnc_block_mask_release(nullptr); // nothing to release
}

TEST_CASE("block mask: the classification counter", "[capi][blockmask]") {
  CHECK(attnc_block_classify_launches(nullptr) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("attnc_block_classify_launches: argument "
                                   "'count' is NULL"));
  uint64_t N = ~uint64_t(0);
  CHECK(attnc_block_classify_launches(&N) == ATTNC_OK);
  CHECK(N == 0); // nothing in this process has classified
}
