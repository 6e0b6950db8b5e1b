// Paged prefill without a CUDA driver: the kernels' index math
// (paged_index.cuh, run on the host) against the host model of Paged.h on
// well-formed and malformed page descriptions, the plan's arithmetic, and
// every argument check of prefillPaged, planPrefill and runPrefill.
#include "PagedPrefill.h"
#include "PagedTestSupport.h"

#include "Examples.h"

#include "attention_args.cuh"
#include "paged_index.cuh"

#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Paged.h"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <numeric>
#include <random>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;
using namespace attn::pagedtest;

namespace {

/// A well-formed paged prefill call: 2 sequences, 40 query tokens of 8
/// heads, caches of 10 pages of 16 tokens and 2 KV heads, a table of 4
/// columns (a bound of 64 keys).
struct PrefillArgs {
  TensorView Q = TensorView::contiguous(fake(0x10000), DType::F16, {40, 8, 64});
  TensorView O = TensorView::contiguous(fake(0x20000), DType::F16, {40, 8, 64});
  TensorView F = TensorView::contiguous(fake(0x30000), DType::F32, {1, 8, 40});
  TensorView Cu = TensorView::contiguous(fake(0x38000), DType::I32, {3});
  int64_t MaxQ = 32;
  PagedKV KV;
  PrefillArgs() {
    KV.KCache = TensorView::contiguous(fake(0x40000), DType::F16, {10, 16, 2, 64});
    KV.VCache = TensorView::contiguous(fake(0x80000), DType::F16, {10, 16, 2, 64});
    KV.BlockTable = TensorView::contiguous(fake(0xc0000), DType::I32, {2, 4});
    KV.SeqLens = TensorView::contiguous(fake(0xd0000), DType::I32, {2});
    KV.MaxSeqlenKv = 64;
  }
};

} // namespace

TEST_CASE("paged prefill: the kernels' index math follows the host model",
          "[runtime][paged][prefill]") {
  std::mt19937_64 Rng(19);
  int Malformed = 0;
  for (int Shift : {0, 4, 8})
    for (bool Csr : {false, true})
      for (int Trial = 0; Trial < 40; ++Trial) {
        const int64_t PS = int64_t(1) << Shift;
        const int B = 5, Bound = 700, NumPages = 1200;
        INFO("page size " << PS << (Csr ? " csr" : " table") << " trial " << Trial);
        // Ragged lengths with 0, 1 and the bound; every few trials one
        // malformed sequence (a length or last page length out of range, a
        // CSR range past the indices or reversed).
        std::vector<int32_t> Lens(B);
        for (int b = 0; b < B; ++b)
          Lens[b] = int32_t(std::uniform_int_distribution<int>(0, Bound)(Rng));
        Lens[0] = Trial % 3 == 0 ? 0 : 1;
        Lens[1] = Bound;
        const int64_t MaxPages = (Bound + PS - 1) / PS;
        std::vector<int32_t> Table(B * MaxPages), Indptr{0}, Indices, Last;
        for (int b = 0; b < B; ++b) {
          int64_t N = (Lens[b] + PS - 1) / PS;
          for (int64_t p = 0; p < MaxPages; ++p) {
            int32_t Page = int32_t(std::uniform_int_distribution<int>(0, NumPages - 1)(Rng));
            Table[b * MaxPages + p] = Page;
            if (p < N)
              Indices.push_back(Page);
          }
          Indptr.push_back(int32_t(Indices.size()));
          Last.push_back(Lens[b] ? int32_t((Lens[b] - 1) % PS + 1) : 0);
        }
        const int Bad = Trial % 4 == 1 ? 2 + Trial % 3 : -1;
        if (Bad >= 0) {
          if (!Csr)
            Lens[Bad] = Trial % 8 == 1 ? -3 : Bound + 1;
          else if (Trial % 8 == 1)
            Last[Bad] = int32_t(PS + 1);
          else if (Trial % 16 == 5)
            Indptr[Bad + 1] = Indptr[Bad] - 1;
          else
            Indptr[B] = int32_t(Indices.size() + 1);
        }
        attnc::PagedFwdArgs A{};
        A.f.seq_kv = Bound;
        A.page_shift = Shift;
        A.num_pages = NumPages;
        A.num_indices = int(Indices.size());
        PagedKVHost H;
        if (Csr) {
          A.pages = Indices.data();
          A.indptr = Indptr.data();
          A.last_page_len = Last.data();
          H.Indptr = Indptr.data();
          H.Indices = Indices.data();
          H.LastPageLen = Last.data();
        } else {
          A.pages = Table.data();
          A.seq_lens = Lens.data();
          A.table_stride = MaxPages;
          H.BlockTable = Table.data();
          H.SeqLens = Lens.data();
        }
        PageGeometry G;
        G.NumPages = NumPages;
        G.PageSize = PS;
        G.PageStride = PS * 3 * 64;
        G.SlotStride = 3 * 64;
        G.HeadStride = 64;
        for (int b = 0; b < B; ++b) {
          attnc::PagedLen L = attnc::paged_len(A, b);
          int64_t Want = pagedSeqLen(H, PS, b);
          bool ModelBad = Want < 0 || Want > Bound ||
                          (Csr && (Indptr[b] < 0 || Indptr[b + 1] > int(Indices.size())));
          CHECK(L.bad == ModelBad);
          Malformed += L.bad;
          if (L.bad) {
            CHECK(L.len == 0);
            continue;
          }
          REQUIRE(L.len == Want);
          bool Same = true;
          for (int t = 0; t < L.len; ++t)
            Same = Same && attnc::paged_token_offset(L.pages, Shift, t, G.PageStride,
                                                     G.SlotStride) ==
                               pagedOffset(H, MaxPages, G, b, t, 0);
          CHECK(Same);
          // fwd_sm90's boxes: a box at any token of the sequence or up to
          // two blocks of 128 past its end (page 0 at the token's slot).
          bool SameBox = true;
          for (int t = 0; t < L.len + 256; ++t) {
            const attnc::PagedSlot At = attnc::paged_box(L.pages, Shift, L.len, t);
            const int64_t Want = t < L.len ? pagedOffset(H, MaxPages, G, b, t, 0)
                                           : (t % PS) * G.SlotStride;
            SameBox = SameBox && At.page * G.PageStride + At.slot * G.SlotStride == Want;
          }
          CHECK(SameBox);
        }
      }
  CHECK(Malformed >= 30); // the malformed cases were met
}

TEST_CASE("paged prefill: which kernel and load a page size takes",
          "[runtime][paged][prefill]") {
  using codegen::PagedLoad;
  for (int64_t PS : {1, 2, 4, 8, 16, 64, 128, 256, 1024}) {
    INFO("page size " << PS);
    // fwd_sm80's kernel where fwd_sm90 does not serve the signature.
    CHECK_FALSE(prefillLoadFor(false, PS, std::nullopt).has_value());
    CHECK_FALSE(prefillLoadFor(false, PS, PagedLoad::Warp).has_value());
    CHECK_FALSE(prefillLoadFor(false, PS, PagedLoad::Gather).has_value());
    // fwd_sm90's gather for pages under 8 tokens (no TMA box fits), even
    // where a box load is named.
    if (PS < 8) {
      CHECK(prefillLoadFor(true, PS, std::nullopt) == PagedLoad::Gather);
      CHECK(prefillLoadFor(true, PS, PagedLoad::Thread) == PagedLoad::Gather);
      CHECK(prefillLoadFor(true, PS, PagedLoad::Warp) == PagedLoad::Gather);
      continue;
    }
    // The gather where a block of 128 keys spans four pages or more
    // (measured faster than the boxes at pages of 16), the thread's boxes
    // from pages of 64 on (measured faster at 64 and 256).
    CHECK(prefillLoadFor(true, PS, std::nullopt) ==
          (PS < 64 ? PagedLoad::Gather : PagedLoad::Thread));
    CHECK(prefillLoadFor(true, PS, PagedLoad::Thread) == PagedLoad::Thread);
    CHECK(prefillLoadFor(true, PS, PagedLoad::Warp) == PagedLoad::Warp);
    CHECK(prefillLoadFor(true, PS, PagedLoad::Gather) == PagedLoad::Gather);
  }
}

TEST_CASE("paged prefill: the plan's grid and bounds", "[runtime][paged][prefill]") {
  PrefillPlan P = makePrefillPlan(PrefillBounds{8, 32, 8, 1000, 5096, 16}, 128, 64);
  CHECK(P.QueryBlocks == 8);
  CHECK(makePrefillPlan(PrefillBounds{1, 4, 4, 1, 0, 1}, 128, 64).QueryBlocks == 1);
  CHECK(makePrefillPlan(PrefillBounds{1, 4, 4, 129, 0, 256}, 128, 64).QueryBlocks == 2);
  auto Msg = [](const PrefillBounds &B) {
    return messageOf<InvalidArgument>([&] { makePrefillPlan(B, 128, 64); });
  };
  CHECK(Msg({0, 8, 2, 16, 64, 16}) == "batch: expected 1 to 65535, got 0");
  CHECK(Msg({2, 8, 0, 16, 64, 16}) == "heads_kv: expected at least 1, got 0");
  CHECK(Msg({2, 6, 4, 16, 64, 16}) ==
        "heads: expected a positive multiple of heads_kv (4), got 6");
  CHECK(Msg({4096, 32, 8, 16, 64, 16}) ==
        "batch x heads is 131072; at most 65535 are supported");
  CHECK(Msg({2, 8, 2, 0, 64, 16}) == "max_seqlen_q: expected 1 to 2^30, got 0");
  CHECK(Msg({2, 8, 2, 16, -1, 16}) == "max_seqlen_kv: expected 0 to 2^30, got -1");
  CHECK(Msg({2, 8, 2, 16, 64, 24}) ==
        "page size: expected a power of two from 1 to 2^20, got 24");
}

TEST_CASE("paged prefill: prefillPaged names each malformed argument",
          "[runtime][paged][prefill]") {
  cacheDir();
  Attention A(examples::mha(), sm80());
  auto Msg = [&](const PrefillArgs &X) {
    return messageOf<InvalidArgument>(
        [&] { A.prefillPaged(X.Q, X.Cu, X.MaxQ, X.KV, X.O, &X.F); });
  };
  {
    PrefillArgs X;
    X.Q = TensorView::contiguous(fake(0x10000), DType::F16, {1, 40, 8, 64});
    CHECK_THAT(Msg(X), Contains("q: expected rank 3"));
  }
  {
    PrefillArgs X;
    X.Cu = TensorView::contiguous(fake(0x38000), DType::I64, {3});
    CHECK(Msg(X) == "cu_seqlens_q: expected dtype i32, got i64");
    X.Cu = TensorView::contiguous(fake(0x38000), DType::I32, {1});
    CHECK(Msg(X) == "cu_seqlens_q: expected batch + 1 entries with a batch of "
                    "at least 1, got 1 entries");
  }
  {
    PrefillArgs X;
    X.MaxQ = 41;
    CHECK(Msg(X) == "max_seqlen_q: expected between 1 and q's tokens (40), got 41");
  }
  {
    PrefillArgs X;
    X.Q = TensorView::contiguous(fake(0x10000), DType::F16, {40, 5, 64});
    CHECK(Msg(X) == "heads: expected a positive multiple of heads_kv (2), got 5");
  }
  {
    PrefillArgs X;
    X.KV.KCache = TensorView::contiguous(fake(0x40000), DType::F16, {10, 12, 2, 64});
    CHECK(Msg(X) == "k_cache: the page size (second dimension) must be a power "
                    "of two, got 12");
    PrefillArgs Y;
    Y.KV.VCache = TensorView::contiguous(fake(0x80000), DType::F16, {9, 16, 2, 64});
    CHECK(Msg(Y) == "v_cache: expected 10 pages of 16 tokens and 2 KV heads "
                    "(as k_cache), got 9, 16 and 2");
  }
  {
    PrefillArgs X;
    X.O = TensorView::contiguous(fake(0x20000), DType::F16, {39, 8, 64});
    CHECK(Msg(X) == "out: expected tokens 40 and heads 8 (as q), got 39 and 8");
  }
  {
    PrefillArgs X;
    X.F = TensorView::contiguous(fake(0x30000), DType::F32, {1, 2, 8, 40});
    CHECK(Msg(X) == "finals: expected shape [1, 8, 40], got [1, 2, 8, 40]");
  }
  {
    PrefillArgs X;
    X.KV.BlockTable = TensorView::contiguous(fake(0xc0000), DType::I32, {2, 3});
    CHECK(Msg(X) == "block_table: expected at least 4 columns (the bound of 64 "
                    "keys in pages of 16), got 3");
    PrefillArgs Y;
    Y.KV.Indptr = TensorView::contiguous(fake(0xe0000), DType::I32, {3});
    CHECK(Msg(Y) == "paged kv: give either block_table and seq_lens, or indptr, "
                    "indices and last_page_len");
    PrefillArgs Z;
    Z.KV.SeqLens = TensorView::contiguous(fake(0xd0000), DType::I32, {3});
    CHECK(Msg(Z) == "seq_lens: expected shape [2], got [3]");
  }
  {
    // Host copies: every length and page index checked.
    PrefillArgs X;
    std::vector<int32_t> Table = {3, 4, 0, 0, 5, 6, 10, 0}, Lens = {20, 40};
    PagedKVHost H;
    H.BlockTable = Table.data();
    H.SeqLens = Lens.data();
    X.KV.Host = &H;
    CHECK(Msg(X) == "block_table: sequence 1's page 2 is 10, outside [0, 10)");
    Lens = {65, 20};
    CHECK(Msg(X) == "seq_lens: sequence 0 has 65 keys, above the bound 64");
    Lens = {20, 20};
    // Everything valid: the paged kernel compiles, then there is no driver.
    CHECK_THAT(messageOf<DriverError>(
                   [&] { A.prefillPaged(X.Q, X.Cu, X.MaxQ, X.KV, X.O, &X.F); }),
               Contains("no CUDA driver"));
    CHECK(A.lastBackend().empty());
  }
  // Inputs other than scalar and per-head ones are not supported.
  Attention Ids(examples::mhaDocumentIds(), sm80());
  PrefillArgs X;
  CHECK_THAT(messageOf<NotSupportedYet>(
                 [&] { Ids.prefillPaged(X.Q, X.Cu, X.MaxQ, X.KV, X.O, &X.F); }),
             Contains("inputs in paged prefill (scalar and per_head inputs are "
                      "supported)"));
}

TEST_CASE("paged prefill: a bad ATTNC_PAGED_LOAD is refused by name before any "
          "kernel",
          "[runtime][paged][prefill]") {
  cacheDir();
  REQUIRE(setenv("ATTNC_PAGED_LOAD", "Warp", 1) == 0);
  Attention A(examples::mha(), sm80());
  PrefillArgs X;
  const std::string Got = messageOf<UserError>(
      [&] { A.prefillPaged(X.Q, X.Cu, X.MaxQ, X.KV, X.O, &X.F); });
  REQUIRE(unsetenv("ATTNC_PAGED_LOAD") == 0);
  CHECK(Got == "ATTNC_PAGED_LOAD: paged load 'Warp': expected 'thread', 'warp' or "
               "'gather'");
  CHECK(A.lastBackend().empty());
}

TEST_CASE("paged prefill: runPrefill and planPrefill check the plan's bounds",
          "[runtime][paged][prefill]") {
  cacheDir();
  Attention A(examples::mha(), sm80());
  CHECK(messageOf<InvalidArgument>([&] {
          A.planPrefill(PrefillBounds{2, 8, 2, 32, 64, 3});
        }) == "page size: expected a power of two from 1 to 2^20, got 3");
  // A plan made by the same arithmetic (planPrefill needs a device).
  PrefillPlan P = makePrefillPlan(PrefillBounds{2, 8, 2, 32, 64, 16}, 128, 64);
  auto Run = [&](const PrefillPlan &Plan, const PrefillArgs &Y) {
    return messageOf<InvalidArgument>(
        [&] { A.runPrefill(Plan, Y.Q, Y.Cu, Y.KV, Y.O, &Y.F); });
  };
  PrefillArgs X;
  X.KV.MaxSeqlenKv = 65;
  CHECK(Run(P, X) == "max_seqlen_kv: expected 0 to the plan's bound 64, got 65");
  X.KV.MaxSeqlenKv = 64;
  PrefillPlan P3 = makePrefillPlan(PrefillBounds{3, 8, 2, 32, 64, 16}, 128, 64);
  CHECK(Run(P3, X) == "cu_seqlens_q: expected shape [4] (the plan's batch + 1), "
                      "got [3]");
  PrefillPlan P4 = makePrefillPlan(PrefillBounds{2, 4, 2, 32, 64, 16}, 128, 64);
  CHECK(Run(P4, X) == "q: expected 4 heads (the plan's), got 8");
  PrefillPlan P1 = makePrefillPlan(PrefillBounds{2, 8, 2, 32, 64, 1}, 128, 64);
  CHECK(Run(P1, X) ==
        "k_cache: expected heads_kv 2 and page size 1 (the plan's), got 2 and 16");
  // A plan this Attention did not make is refused before any launch.
  CHECK_THAT(Run(P, X), Contains("plan: made for kernel '', not by this Attention"));
}
