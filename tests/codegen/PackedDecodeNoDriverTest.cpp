// Packed (THD) decode without a CUDA driver: the query and key spans a
// decode CTA reads from cu_seqlens (the kernels' own code, run on the
// host), the plan of a packed batch, the short-query rule for packed
// forwards, and every argument check of decodePagedVarlen and
// runDecodeVarlen.
#include "PagedTestSupport.h"

#include "Examples.h"

#include "decode_args.cuh"

#include "attn/analysis/Merge.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Paged.h"

#include <catch2/catch.hpp>

#include <fmt/format.h>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;
using namespace attn::pagedtest;

TEST_CASE("packed decode: the query and key spans of each sequence",
          "[runtime][paged][packed]") {
  attnc::DecodeArgs A{};
  A.seq_q = 4; // the bound on a sequence's queries
  A.seq_kv = 100;
  // Dense: every sequence has the bound's queries from token 0 (its batch
  // stride places it) and the bound's keys.
  auto Q = attnc::decode_q_span(A, 3);
  CHECK((Q.q0 == 0 && Q.n == 4 && !Q.bad));
  auto K = attnc::decode_kv_span(A, 3);
  CHECK((K.kv0 == 0 && K.len == 100 && !K.bad));

  // Packed: counts 2, 0, 4, 1 in 9 tokens (the last two padding).
  std::vector<int> Cu = {0, 2, 2, 6, 7};
  A.cu_q = Cu.data();
  A.total_q = 9;
  const int Want[4][2] = {{0, 2}, {2, 0}, {2, 4}, {6, 1}};
  for (int b = 0; b < 4; ++b) {
    auto S = attnc::decode_q_span(A, b);
    INFO("sequence " << b);
    CHECK(S.q0 == Want[b][0]);
    CHECK(S.n == Want[b][1]);
    CHECK(!S.bad);
  }
  // A count above the bound: bad, its first seq_q tokens (NaN rows).
  Cu = {0, 5, 6, 6, 9};
  auto S = attnc::decode_q_span(A, 0);
  CHECK((S.bad && S.q0 == 0 && S.n == 4));
  CHECK(!attnc::decode_q_span(A, 1).bad);
  // A decrease: a negative count writes nothing.
  Cu = {0, 3, 1, 2, 2};
  S = attnc::decode_q_span(A, 1);
  CHECK((S.bad && S.n == 0));
  // Past q's tokens: clamped to them; a start past them, nothing.
  Cu = {0, 1, 2, 8, 12};
  S = attnc::decode_q_span(A, 3);
  CHECK((S.bad && S.q0 == 8 && S.n == 1));
  Cu = {0, 1, 2, 8, 11};
  A.total_q = 8;
  S = attnc::decode_q_span(A, 3);
  CHECK((S.bad && S.q0 == 8 && S.n == 0));
  // Entries far apart do not overflow into a valid range.
  Cu = {0, 1, 2, -2147483647 - 1, 2147483647};
  A.total_q = 9;
  S = attnc::decode_q_span(A, 3);
  CHECK((S.bad && S.q0 == 0 && S.n == 4));

  // Packed keys: lengths above the bound or past k's tokens are bad.
  std::vector<int> CuKv = {0, 100, 100, 150, 251};
  A.cu_kv = CuKv.data();
  A.total_kv = 260;
  K = attnc::decode_kv_span(A, 0);
  CHECK((K.kv0 == 0 && K.len == 100 && !K.bad));
  K = attnc::decode_kv_span(A, 1);
  CHECK((K.len == 0 && !K.bad));
  K = attnc::decode_kv_span(A, 3);
  CHECK((K.bad && K.len == 0)); // 101 keys, above the bound 100
  CuKv = {0, 100, 100, 150, 240};
  A.total_kv = 200;
  K = attnc::decode_kv_span(A, 3);
  CHECK((K.bad && K.len == 0)); // ends past k's 200 tokens

  // Finals: [F][H][total_q] rows of a packed call, [F][B][H][Sq] dense.
  A.heads = 8;
  A.batch = 4;
  CHECK(attnc::decode_final_index(A, 1, 3, 2, 6, 0) == (1 * 8 + 2) * 9 + 6);
  A.cu_q = nullptr;
  CHECK(attnc::decode_final_index(A, 1, 3, 2, 0, 3) == ((1 * 4 + 3) * 8 + 2) * 4 + 3);
}

TEST_CASE("packed decode: the plan of a packed batch", "[runtime][paged][packed]") {
  DecodeBounds B{2, 32, 8, 16, 8192, 16};
  B.Packed = true;
  DecodePlan P = makeDecodePlan(B, 128, 16, 64, 132, analysis::MergeKind::LogSumExp);
  // The bound's rows: 4 query heads x 16 queries of a KV head in 4 blocks.
  CHECK(P.RowBlocks == 4);
  CHECK(P.Bounds.Packed);
  // 64 CTAs before splitting: four splits fill a wave of 132 SMs.
  CHECK(P.Splits == 4);
  // As the dense plan of the bound's queries: the same grid and workspace.
  DecodeBounds D = B;
  D.Packed = false;
  DecodePlan PD = makeDecodePlan(D, 128, 16, 64, 132, analysis::MergeKind::LogSumExp);
  CHECK(P.Splits == PD.Splits);
  CHECK(P.WorkspaceBytes == PD.WorkspaceBytes);
  CHECK(P.WorkspaceBytes == size_t(P.Splits) * 2 * 32 * 16 * (128 + 8) * 4);
  B.QueriesPerSeq = 17;
  CHECK(messageOf<InvalidArgument>([&] {
          makeDecodePlan(B, 128, 16, 64, 132, analysis::MergeKind::LogSumExp);
        }) == "queries per sequence: expected 1 to 16, got 17");
}

TEST_CASE("packed decode: the host check of cu_seqlens_q", "[runtime][paged][packed]") {
  auto Msg = [](std::vector<int32_t> Cu, int64_t Bound, int64_t Tokens) {
    return messageOf<InvalidArgument>([&] {
      checkCuSeqlensQHost(Cu.data(), int64_t(Cu.size()) - 1, Bound, Tokens);
    });
  };
  CHECK(Msg({1, 2, 3}, 4, 8) == "cu_seqlens_q: expected to start at 0, got 1");
  CHECK(Msg({0, 4, 2, 5}, 4, 8) ==
        "cu_seqlens_q: decreases from 4 to 2 at entry 2 (sequence 1 would have "
        "-2 queries)");
  CHECK(Msg({0, 4, 21, 22}, 16, 32) ==
        "cu_seqlens_q: sequence 1 has 17 queries, above the bound 16");
  CHECK(Msg({0, 4, 8, 12}, 4, 10) == "cu_seqlens_q: ends at 12, past q's 10 tokens");
  // Counts of 0, padding tokens past the last sequence: fine.
  std::vector<int32_t> Ok = {0, 0, 4, 5, 5};
  checkCuSeqlensQHost(Ok.data(), 4, 4, 9);
}

namespace {

/// A valid packed paged call: 3 sequences of at most 4 queries in 10
/// tokens, 8 heads over 2, head dim 64, pages of 16 (NHD, 10 pages), a
/// block table of 4 columns, 64 keys at most.
struct PackedArgs {
  TensorView Q = TensorView::contiguous(fake(0x10000), DType::F16, {10, 8, 64});
  TensorView O = TensorView::contiguous(fake(0x20000), DType::F16, {10, 8, 64});
  TensorView F = TensorView::contiguous(fake(0x30000), DType::F32, {1, 8, 10});
  TensorView Cu = TensorView::contiguous(fake(0x38000), DType::I32, {4});
  int64_t MaxQ = 4;
  PagedKV KV;
  PackedArgs() {
    KV.KCache = TensorView::contiguous(fake(0x40000), DType::F16, {10, 16, 2, 64});
    KV.VCache = TensorView::contiguous(fake(0x80000), DType::F16, {10, 16, 2, 64});
    KV.BlockTable = TensorView::contiguous(fake(0xc0000), DType::I32, {3, 4});
    KV.SeqLens = TensorView::contiguous(fake(0xd0000), DType::I32, {3});
    KV.MaxSeqlenKv = 64;
  }
};

} // namespace

TEST_CASE("packed decode: decodePagedVarlen names each malformed argument",
          "[runtime][paged][packed]") {
  cacheDir();
  Attention A(examples::mha(), sm80());
  auto Msg = [&](const PackedArgs &X) {
    return messageOf<InvalidArgument>(
        [&] { A.decodePagedVarlen(X.Q, X.Cu, X.MaxQ, X.KV, X.O, &X.F); });
  };
  {
    PackedArgs X;
    X.MaxQ = 17;
    CHECK(Msg(X) == "max_seqlen_q: expected 1 to 16 (decode's queries per "
                    "sequence), got 17");
    X.MaxQ = 0;
    CHECK(Msg(X) == "max_seqlen_q: expected 1 to 16 (decode's queries per "
                    "sequence), got 0");
  }
  {
    PackedArgs X;
    X.Q = TensorView::contiguous(fake(0x10000), DType::F16, {2, 10, 8, 64});
    CHECK_THAT(Msg(X), Contains("q: expected rank 3 [tokens, heads, head_dim]"));
  }
  {
    PackedArgs X;
    X.Cu = TensorView::contiguous(fake(0x38000), DType::I64, {4});
    CHECK(Msg(X) == "cu_seqlens_q: expected dtype i32, got i64");
    X.Cu = TensorView::contiguous(fake(0x38000), DType::I32, {1});
    CHECK(Msg(X) == "cu_seqlens_q: expected batch + 1 entries with a batch of "
                    "at least 1, got 1 entries");
  }
  {
    // Totals that disagree: out's tokens, the finals' tokens, the table's
    // sequences.
    PackedArgs X;
    X.O = TensorView::contiguous(fake(0x20000), DType::F16, {9, 8, 64});
    CHECK(Msg(X) == "out: expected tokens 10 and heads 8 (as q), got 9 and 8");
    PackedArgs Y;
    Y.F = TensorView::contiguous(fake(0x30000), DType::F32, {1, 8, 9});
    CHECK(Msg(Y) == "finals: expected shape [1, 8, 10], got [1, 8, 9]");
    PackedArgs Z;
    Z.KV.SeqLens = TensorView::contiguous(fake(0xd0000), DType::I32, {2});
    CHECK(Msg(Z) == "seq_lens: expected shape [3], got [2]");
  }
  {
    // Host copies: each query range and each page checked before launch.
    PackedArgs X;
    std::vector<int32_t> Table = {3, 4, 0, 0, 5, 6, 7, 0, 1, 2, 8, 9},
                         Lens = {20, 40, 64}, Cu = {0, 4, 5, 10};
    PagedKVHost H;
    H.BlockTable = Table.data();
    H.SeqLens = Lens.data();
    H.CuSeqlensQ = Cu.data();
    X.KV.Host = &H;
    CHECK(Msg(X) == "cu_seqlens_q: sequence 2 has 5 queries, above the bound 4");
    Cu = {0, 4, 3, 7};
    CHECK_THAT(Msg(X), Contains("cu_seqlens_q: decreases from 4 to 3 at entry 2"));
    Cu = {0, 4, 8, 12};
    CHECK(Msg(X) == "cu_seqlens_q: ends at 12, past q's 10 tokens");
    Cu = {0, 4, 4, 7};
    // Everything valid: the kernels compile, then there is no driver.
    CHECK_THAT(messageOf<DriverError>(
                   [&] { A.decodePagedVarlen(X.Q, X.Cu, X.MaxQ, X.KV, X.O, &X.F); }),
               Contains("no CUDA driver"));
  }
  // Query-side inputs follow q's tokens ([H, Tq], [Tq]); key-side ones
  // are [B, (H,) K] as in a dense call (K at least the bound 64).
  Attention Doc(examples::mhaDocument(), sm80());
  PackedArgs X;
  InputMap In;
  In["q_doc"] = TensorView::contiguous(fake(0x100000), DType::F32, {3, 1, 4});
  In["k_doc"] = TensorView::contiguous(fake(0x110000), DType::F32, {3, 8, 64});
  auto InMsg = [&] {
    return messageOf<InvalidArgument>(
        [&] { Doc.decodePagedVarlen(X.Q, X.Cu, X.MaxQ, X.KV, X.O, &X.F, In); });
  };
  CHECK(InMsg() == "input 'q_doc' (per_row [heads, q tokens] in a packed "
                 "call): expected shape [8, 10], got [3, 1, 4]");
  In["q_doc"] = TensorView::contiguous(fake(0x100000), DType::F32, {8, 10});
  In["k_doc"] = TensorView::contiguous(fake(0x110000), DType::F32, {8, 64});
  CHECK(InMsg() == "input 'k_doc' (per_key [batch, heads, keys at least the "
                 "bound max_seqlen_kv 64] in paged decode, read at kv_idx): "
                 "expected shape [3, 8, 64], got [8, 64]");
  In["k_doc"] = TensorView::contiguous(fake(0x110000), DType::F32, {3, 8, 64});
  CHECK_THAT(messageOf<DriverError>([&] {
               Doc.decodePagedVarlen(X.Q, X.Cu, X.MaxQ, X.KV, X.O, &X.F, In);
             }),
             Contains("no CUDA driver"));
}

TEST_CASE("packed decode: runDecodeVarlen checks the plan's bounds and kind",
          "[runtime][paged][packed]") {
  cacheDir();
  Attention A(examples::mha(), sm80());
  DecodeBounds B{3, 8, 2, 4, 4096, 16};
  B.Packed = true;
  DecodePlan P = makeDecodePlan(B, 64, 16, 64, 132, analysis::MergeKind::LogSumExp);
  REQUIRE(P.WorkspaceBytes > 0);
  PackedArgs X;
  X.KV.BlockTable = TensorView::contiguous(fake(0xc0000), DType::I32, {3, 256});
  auto Run = [&](const DecodePlan &Plan, const PackedArgs &Y, void *W, size_t N) {
    return messageOf<InvalidArgument>([&] {
      A.runDecodeVarlen(Plan, Y.Q, Y.Cu, Y.KV, Y.O, &Y.F, W, N);
    });
  };
  CHECK(Run(P, X, nullptr, 0) == fmt::format("workspace: expected at least {} "
                                             "bytes (the plan's), got 0",
                                             P.WorkspaceBytes));
  PackedArgs W;
  W.Cu = TensorView::contiguous(fake(0x38000), DType::I32, {5});
  CHECK(Run(P, W, fake(0x100000), P.WorkspaceBytes) ==
        "cu_seqlens_q: expected shape [4] (the plan's batch + 1), got [5]");
  PackedArgs Hd;
  Hd.Q = TensorView::contiguous(fake(0x10000), DType::F16, {10, 16, 64});
  CHECK(Run(P, Hd, fake(0x100000), P.WorkspaceBytes) ==
        "q: expected 8 heads (the plan's), got 16");
  X.KV.MaxSeqlenKv = 5000;
  CHECK(Run(P, X, fake(0x100000), P.WorkspaceBytes) ==
        "max_seqlen_kv: expected 0 to the plan's bound 4096, got 5000");
  X.KV.MaxSeqlenKv = 64;
  // A dense plan for a packed call, and a packed plan for a dense call.
  DecodeBounds DB = B;
  DB.Packed = false;
  DecodePlan PD = makeDecodePlan(DB, 64, 16, 64, 132, analysis::MergeKind::LogSumExp);
  CHECK(Run(PD, X, fake(0x100000), PD.WorkspaceBytes) ==
        "plan: made for dense calls (runDecode); a packed call needs a plan of "
        "bounds with Packed set");
  TensorView Q4 = TensorView::contiguous(fake(0x10000), DType::F16, {3, 4, 8, 64});
  TensorView F4 = TensorView::contiguous(fake(0x30000), DType::F32, {1, 3, 8, 4});
  CHECK(messageOf<InvalidArgument>([&] {
          A.runDecode(P, Q4, X.KV, Q4, &F4, fake(0x100000), P.WorkspaceBytes);
        }) == "plan: made for packed calls (bounds with Packed set); run it "
              "with runDecodeVarlen");
  // A plan this Attention did not make is refused before any launch.
  CHECK_THAT(Run(P, X, fake(0x100000), P.WorkspaceBytes),
             Contains("plan: made for kernel '', not by this Attention"));
}

TEST_CASE("packed decode: a packed forward of at most 16 queries per sequence "
          "runs decode_sm80",
          "[runtime][packed]") {
  cacheDir();
  Signature S = sm80();
  S.TensorLayout = Layout::THD;
  S.Skeleton = "decode_sm80";
  Attention A(examples::mha(), S);
  TensorView Q = TensorView::contiguous(fake(0x10000), DType::F16, {10, 8, 64});
  TensorView K = TensorView::contiguous(fake(0x40000), DType::F16, {300, 2, 64});
  TensorView F = TensorView::contiguous(fake(0x30000), DType::F32, {1, 8, 10});
  VarlenBatch VB;
  VB.CuSeqlensQ = TensorView::contiguous(fake(0x38000), DType::I32, {4});
  VB.CuSeqlensKv = TensorView::contiguous(fake(0x39000), DType::I32, {4});
  VB.MaxSeqlenQ = 4;
  VB.MaxSeqlenKv = 200;
  // Named, a packed call reaches the driver (no NotSupportedYet); above 16
  // queries per sequence it is refused before any launch.
  CHECK_THAT(messageOf<DriverError>([&] { A.forwardVarlen(Q, K, K, Q, &F, VB); }),
             Contains("no CUDA driver"));
  TensorView Q20 = TensorView::contiguous(fake(0x10000), DType::F16, {20, 8, 64});
  TensorView F20 = TensorView::contiguous(fake(0x30000), DType::F32, {1, 8, 20});
  VB.MaxSeqlenQ = 17;
  CHECK(messageOf<InvalidArgument>([&] { A.forwardVarlen(Q20, K, K, Q20, &F20, VB); }) ==
        "max_seqlen_q: decode_sm80 runs 0 to 16 queries per sequence; "
        "max_seqlen_q is 17");
}
