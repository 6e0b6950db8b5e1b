// The single-tensor checks Attention's and LinearAttention's validation
// share (runtime/lib/ValidateCommon.h): each rule's exact words, so that
// both classes keep reporting a mistake alike.
#include "ValidateCommon.h"

#include "attn/runtime/Errors.h"

#include <catch2/catch.hpp>

using namespace attn;
using namespace attn::runtime;

namespace {

TensorView f32(uintptr_t Address, std::vector<int64_t> Shape) {
  return TensorView::contiguous(reinterpret_cast<void *>(Address),
                                DType::F32, std::move(Shape));
}

} // namespace

TEST_CASE("shared checks: pointer, dtype, alignment", "[runtime][validate]") {
  TensorView T = f32(0x1000, {2, 3});
  CHECK_NOTHROW(checkNotNull("x", T));
  CHECK_NOTHROW(checkElemType("x", T, DType::F32));
  CHECK_NOTHROW(checkAligned("x", T, 16));
  TensorView Null = f32(0, {2, 3});
  CHECK_THROWS_AS(checkNotNull("x", Null), InvalidArgument);
  CHECK_THROWS_WITH(checkNotNull("x", Null), "x: null data pointer");
  CHECK_THROWS_WITH(checkElemType("input 'w'", T, DType::F16),
                    "input 'w': expected dtype f16, got f32");
  TensorView Odd = f32(0x1002, {2, 3});
  CHECK_THROWS_WITH(checkAligned("finals", Odd, 4),
                    "finals: data pointer must be 4-byte aligned");
  CHECK_THROWS_WITH(checkAligned("q", f32(0x1008, {1}), 16),
                    "q: data pointer must be 16-byte aligned");
}

TEST_CASE("shared checks: shape and strides", "[runtime][validate]") {
  TensorView T = f32(0x1000, {2, 3});
  CHECK_NOTHROW(checkShape("x", T, {2, 3}));
  CHECK_THROWS_WITH(checkShape("decay", T, {2, 4, 3}),
                    "decay: expected shape [2, 4, 3], got [2, 3]");
  CHECK_NOTHROW(checkNonNegativeStrides("x", T));
  T.Strides = {0, 1}; // a broadcast is fine
  CHECK_NOTHROW(checkNonNegativeStrides("x", T));
  T.Strides = {-3, 1};
  CHECK_THROWS_WITH(checkNonNegativeStrides("x", T),
                    "x: strides must be non-negative");
}

TEST_CASE("shared checks: a tensor like another", "[runtime][validate]") {
  SeqTensor G;
  G.B = 2;
  G.S = 16;
  G.H = 4;
  CHECK_NOTHROW(checkLike("dq", G, "q", 2, 16, 4));
  CHECK_THROWS_WITH(checkLike("dk", G, "k", 2, 24, 2),
                    "dk: expected batch 2, seq 24 and heads 2 (as k), got 2, "
                    "16 and 4");
  G.Strides[0] = 7;
  G.Strides[1] = 8;
  G.Strides[2] = 9;
  int64_t Dst[3] = {};
  storeStrides(Dst, G);
  CHECK(Dst[0] == 7);
  CHECK(Dst[1] == 8);
  CHECK(Dst[2] == 9);
}
