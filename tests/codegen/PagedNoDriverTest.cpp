// Paged decode without a CUDA driver: the host model of the page index
// math against the contiguous layout, the plan's arithmetic, and every
// argument check of decodePaged, runDecode, planDecode and appendPaged.
#include "PagedTestSupport.h"

#include "Examples.h"
#include "PagedDecode.h"
#include "decode_args.cuh"

#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Paged.h"
#include "attn/runtime/Selector.h"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <numeric>
#include <random>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;
using namespace attn::pagedtest;

TEST_CASE("paged: the host model of the index math reads the contiguous "
          "layout",
          "[runtime][paged]") {
  const int Hkv = 2, D = 8;
  const std::vector<int> Lens = {0, 1, 700, 33};
  const int B = int(Lens.size());
  for (int64_t PS : {1, 16, 256})
    for (PageLayout L : {PageLayout::NHD, PageLayout::HND})
      for (bool Csr : {false, true}) {
        INFO("page size " << PS << " " << pageLayoutName(L)
                          << (Csr ? " csr" : " table"));
        // Contiguous K: [b][t][h][d] = a distinct number per element.
        auto Value = [](int b, int t, int h, int d) {
          return double(((b * 1000 + t) * 8 + h) * 16 + d);
        };
        std::vector<int64_t> Pages(B);
        int64_t Used = 0, MaxLen = 0;
        for (int b = 0; b < B; ++b) {
          Pages[b] = (Lens[b] + PS - 1) / PS;
          Used += Pages[b];
          MaxLen = std::max<int64_t>(MaxLen, Lens[b]);
        }
        int64_t NumPages = Used + 2;
        int64_t MaxPages = std::max<int64_t>(1, (MaxLen + PS - 1) / PS);
        std::vector<int32_t> Perm(NumPages);
        std::iota(Perm.begin(), Perm.end(), 0);
        std::shuffle(Perm.begin(), Perm.end(), std::mt19937_64(PS));
        std::vector<int32_t> Table(B * MaxPages, -1), SeqLens(Lens.begin(), Lens.end()),
            Indptr{0}, Indices, Last;
        for (int b = 0, Next = 0; b < B; ++b) {
          for (int64_t p = 0; p < Pages[b]; ++p) {
            Table[b * MaxPages + p] = Perm[Next];
            Indices.push_back(Perm[Next++]);
          }
          Indptr.push_back(int32_t(Indices.size()));
          Last.push_back(Lens[b] ? int32_t((Lens[b] - 1) % PS + 1) : 0);
        }
        // The cache as nested arrays: NHD [page][slot][h][d], HND
        // [page][h][slot][d], filled token by token.
        std::vector<int64_t> Shape =
            L == PageLayout::NHD ? std::vector<int64_t>{NumPages, PS, Hkv, D}
                                 : std::vector<int64_t>{NumPages, Hkv, PS, D};
        std::vector<double> Cache(NumPages * PS * Hkv * D, -1.0);
        for (int b = 0; b < B; ++b)
          for (int t = 0; t < Lens[b]; ++t)
            for (int h = 0; h < Hkv; ++h)
              for (int d = 0; d < D; ++d) {
                int64_t P = Table[b * MaxPages + t / PS], S = t % PS;
                int64_t At = L == PageLayout::NHD
                                 ? ((P * PS + S) * Hkv + h) * D + d
                                 : ((P * Hkv + h) * PS + S) * D + d;
                Cache[At] = Value(b, t, h, d);
              }
        TensorView View = TensorView::contiguous(nullptr, DType::F16, Shape);
        PageGeometry G;
        G.NumPages = NumPages;
        G.PageSize = PS;
        G.PageStride = View.Strides[0];
        G.SlotStride = L == PageLayout::NHD ? View.Strides[1] : View.Strides[2];
        G.HeadStride = L == PageLayout::NHD ? View.Strides[2] : View.Strides[1];
        PagedKVHost H;
        if (Csr) {
          H.Indptr = Indptr.data();
          H.Indices = Indices.data();
          H.LastPageLen = Last.data();
        } else {
          H.BlockTable = Table.data();
          H.SeqLens = SeqLens.data();
        }
        bool Same = true;
        for (int b = 0; b < B; ++b) {
          CHECK(pagedSeqLen(H, PS, b) == Lens[b]);
          for (int t = 0; t < Lens[b]; ++t)
            for (int h = 0; h < Hkv; ++h)
              for (int d = 0; d < D; ++d) {
                int64_t Off = pagedOffset(H, MaxPages, G, b, t, h);
                Same = Same && Off >= 0 && Cache[Off + d] == Value(b, t, h, d);
              }
          CHECK(pagedOffset(H, MaxPages, G, b, Lens[b], 0) == -1);
        }
        CHECK(Same);
        // A page index out of range reads nothing.
        std::vector<int32_t> &Ix = Csr ? Indices : Table;
        int32_t Saved = Csr ? Ix[Indptr[2]] : Ix[2 * MaxPages];
        (Csr ? Ix[Indptr[2]] : Ix[2 * MaxPages]) = int32_t(NumPages);
        CHECK(pagedOffset(H, MaxPages, G, 2, 0, 0) == -1);
        (Csr ? Ix[Indptr[2]] : Ix[2 * MaxPages]) = Saved;
        if (Csr) {
          Last[2] = int32_t(PS + 1);
          CHECK(pagedSeqLen(H, PS, 2) == -1);
          Last[2] = 0;
          CHECK(pagedSeqLen(H, PS, 2) == -1);
        }
      }
}

TEST_CASE("paged: the plan's split and workspace", "[runtime][paged]") {
  using analysis::MergeKind;
  DecodeBounds B{1, 32, 8, 1, 32768, 16};
  DecodePlan P = makeDecodePlan(B, 128, 16, 64, 132, MergeKind::LogSumExp);
  DecodeSplit S = decodeSplit(8, 32768, 64, 132, MergeKind::LogSumExp);
  CHECK(S.Splits > 1);
  CHECK(P.Splits == S.Splits);
  CHECK(P.BlocksPerSplit == S.BlocksPerSplit);
  CHECK(P.RowBlocks == 1);
  CHECK(P.WorkspaceBytes == size_t(P.Splits) * 32 * (128 + 8) * 4);
  // No merge: one pass, no workspace.
  DecodePlan None = makeDecodePlan(B, 128, 16, 64, 132, MergeKind::None);
  CHECK(None.Splits == 1);
  CHECK(None.WorkspaceBytes == 0);
  // A cap on splits spreads the 512 blocks over 4.
  B.MaxSplits = 4;
  DecodePlan Capped = makeDecodePlan(B, 128, 16, 64, 132, MergeKind::Sum);
  CHECK(Capped.Splits == 4);
  CHECK(Capped.BlocksPerSplit == 128);
  // A bound of 0 keys plans one split.
  DecodePlan Empty = makeDecodePlan(DecodeBounds{2, 8, 2, 4, 0, 1}, 64, 16, 64,
                                    132, MergeKind::Sum);
  CHECK(Empty.Splits == 1);
  CHECK(Empty.RowBlocks == 1);

  auto Bad = [](DecodeBounds X) {
    return messageOf<InvalidArgument>([&] {
      makeDecodePlan(X, 128, 16, 64, 132, MergeKind::Sum);
    });
  };
  CHECK(Bad({1, 8, 2, 1, 100, 12}) ==
        "page size: expected a power of two from 1 to 2^20, got 12");
  CHECK(Bad({1, 6, 4, 1, 100, 16}) ==
        "heads: expected a positive multiple of heads_kv (4), got 6");
  CHECK(Bad({1, 8, 2, 17, 100, 16}) ==
        "queries per sequence: expected 1 to 16, got 17");
  CHECK(Bad({0, 8, 2, 1, 100, 16}) == "batch: expected 1 to 65535, got 0");
  CHECK(Bad({1, 8, 2, 1, -1, 16}) == "max_seqlen_kv: expected 0 to 2^30, got -1");
  CHECK(Bad({1, 8, 2, 1, 100, 16, -1}) ==
        "max splits: expected 0 (no cap) or more, got -1");
}

TEST_CASE("paged: the decode kernel's row steps name each row's page and "
          "slot",
          "[runtime][paged]") {
  // Every thread row t = row0 + r0 + it·step of a block, as the row steps
  // decompose it (group g = it / 2^mode, row j = it % 2^mode of the
  // group), against t >> shift and t & (page size - 1).
  for (int LogStep : {1, 2, 3, 4})
    for (int MaxMode : {0, 1, 2, 3, 4})
      for (int Shift = 0; Shift <= 10; ++Shift) {
        const int Step = 1 << LogStep, Rows = Step << MaxMode;
        const int Mode = attnc::decode_step_mode(Shift, LogStep, MaxMode);
        const int Spp = 1 << Mode;
        CHECK(Mode >= 0);
        CHECK(Mode <= MaxMode);
        int Bad = 0;
        for (int Row0 = 0; Row0 < 4096; Row0 += Rows)
          for (int R0 = 0; R0 < Step; ++R0)
            for (int It = 0; It < (1 << MaxMode); ++It) {
              const int T0 = Row0 + R0, T = T0 + It * Step;
              const int G = It / Spp, J = It % Spp;
              const int Entry =
                  attnc::decode_step_entry(T0, Shift) +
                  G * attnc::decode_step_group_pages(Shift, Spp, Step);
              const int Slot = attnc::decode_step_slot(T0, Shift, J, Step);
              Bad += Entry != (T >> Shift) || Slot != (T & ((1 << Shift) - 1));
            }
        INFO("step " << Step << ", rows " << Rows << ", page " << (1 << Shift));
        CHECK(Bad == 0);
      }
}

TEST_CASE("paged: decode's row steps need 32-bit byte strides",
          "[runtime][paged]") {
  auto Geo = [](int64_t Page, int64_t Slot) {
    PageGeometry G;
    G.NumPages = 4;
    G.PageSize = 16;
    G.PageStride = Page;
    G.SlotStride = Slot;
    return G;
  };
  // NHD pages of 16, 8 KV heads of 128: page 16384 elements, slot 1024.
  const PageGeometry Nhd = Geo(16384, 1024);
  CHECK(pagedStrides32(Nhd, Nhd, 16, 64));
  CHECK(pagedStrides32(Nhd, Nhd, 1, 64));
  // Page strides: 2^30 - 1 elements is 2^31 - 2 bytes; 2^30 is not.
  CHECK(pagedStrides32(Geo((int64_t(1) << 30) - 1, 8), Nhd, 16, 64));
  CHECK_FALSE(pagedStrides32(Geo(int64_t(1) << 30, 8), Nhd, 16, 64));
  CHECK_FALSE(pagedStrides32(Nhd, Geo(int64_t(1) << 30, 8), 16, 64));
  // The products are unsigned: a negative stride takes the 64-bit path.
  CHECK_FALSE(pagedStrides32(Nhd, Geo(-16384, 1024), 16, 64));
  CHECK_FALSE(pagedStrides32(Geo(16384, -1024), Nhd, 16, 64));
  // Slot strides times max(page size, block): (2^31 - 1) / 2 / 2^20 is
  // 1023 (V's slot stride counts too: the NHD one above, 1024, is over).
  const PageGeometry Big = Geo(1 << 20, 1023);
  CHECK(pagedStrides32(Big, Big, int64_t(1) << 20, 64));
  CHECK_FALSE(pagedStrides32(Geo(1 << 20, 1024), Big, int64_t(1) << 20, 64));
  CHECK_FALSE(pagedStrides32(Big, Nhd, int64_t(1) << 20, 64));
  // Pages smaller than the block: the block's rows bound the slots.
  CHECK(pagedStrides32(Geo(1 << 20, (1 << 24) - 1), Nhd, 1, 64));
  CHECK_FALSE(pagedStrides32(Geo(1 << 20, 1 << 24), Nhd, 1, 64));
  CHECK_FALSE(pagedStrides32(Nhd, Geo(1 << 20, 1 << 24), 1, 64));
}

namespace {

/// A valid paged call of 2 sequences, 8 heads over 2, head dim 64, pages
/// of 16 (NHD, 10 pages), a block table of 4 columns, 64 keys at most.
struct PagedArgs {
  TensorView Q = TensorView::contiguous(fake(0x10000), DType::F16, {2, 1, 8, 64});
  TensorView O = TensorView::contiguous(fake(0x20000), DType::F16, {2, 1, 8, 64});
  TensorView F = TensorView::contiguous(fake(0x30000), DType::F32, {1, 2, 8, 1});
  PagedKV KV;
  PagedArgs() {
    KV.KCache = TensorView::contiguous(fake(0x40000), DType::F16, {10, 16, 2, 64});
    KV.VCache = TensorView::contiguous(fake(0x80000), DType::F16, {10, 16, 2, 64});
    KV.BlockTable = TensorView::contiguous(fake(0xc0000), DType::I32, {2, 4});
    KV.SeqLens = TensorView::contiguous(fake(0xd0000), DType::I32, {2});
    KV.MaxSeqlenKv = 64;
  }
};

} // namespace

TEST_CASE("paged: decodePaged names each malformed argument",
          "[runtime][paged]") {
  cacheDir();
  Attention A(examples::mha(), sm80());
  auto Msg = [&](const PagedArgs &X) {
    return messageOf<InvalidArgument>(
        [&] { A.decodePaged(X.Q, X.KV, X.O, &X.F); });
  };
  const std::string Forms = "paged kv: give either block_table and seq_lens, "
                            "or indptr, indices and last_page_len";
  {
    PagedArgs X;
    X.KV.BlockTable = TensorView();
    X.KV.SeqLens = TensorView();
    CHECK(Msg(X) == Forms);
    PagedArgs Y;
    Y.KV.Indptr = TensorView::contiguous(fake(0xe0000), DType::I32, {3});
    CHECK(Msg(Y) == Forms);
  }
  {
    PagedArgs X;
    X.KV.BlockTable = TensorView::contiguous(fake(0xc0000), DType::I32, {2, 3});
    CHECK(Msg(X) == "block_table: expected at least 4 columns (the bound of 64 "
                    "keys in pages of 16), got 3");
  }
  {
    PagedArgs X;
    X.KV.KCache = TensorView::contiguous(fake(0x40000), DType::F16, {10, 12, 2, 64});
    CHECK(Msg(X) == "k_cache: the page size (second dimension) must be a power "
                    "of two, got 12");
    X.KV.Layout = PageLayout::HND;
    X.KV.KCache = TensorView::contiguous(fake(0x40000), DType::F16, {10, 2, 12, 64});
    CHECK(Msg(X) == "k_cache: the page size (third dimension) must be a power "
                    "of two, got 12");
  }
  {
    PagedArgs X;
    X.KV.VCache = TensorView::contiguous(fake(0x80000), DType::F16, {9, 16, 2, 64});
    CHECK(Msg(X) == "v_cache: expected 10 pages of 16 tokens and 2 KV heads "
                    "(as k_cache), got 9, 16 and 2");
  }
  {
    PagedArgs X;
    X.KV.SeqLens = TensorView::contiguous(fake(0xd0000), DType::F32, {2});
    CHECK(Msg(X) == "seq_lens: expected dtype i32, got f32");
    X.KV.SeqLens = TensorView::contiguous(fake(0xd0000), DType::I32, {3});
    CHECK(Msg(X) == "seq_lens: expected shape [2], got [3]");
  }
  {
    PagedArgs X;
    X.O = TensorView::contiguous(fake(0x20000), DType::F16, {2, 2, 8, 64});
    CHECK_THAT(Msg(X), Contains("out: expected batch 2, seq 1 and heads 8 (as q)"));
  }
  {
    // The host copies: every page index and length checked.
    PagedArgs X;
    std::vector<int32_t> Table = {3, 4, 0, 0, 5, 6, 10, 0}, Lens = {20, 40};
    PagedKVHost H;
    H.BlockTable = Table.data();
    H.SeqLens = Lens.data();
    X.KV.Host = &H;
    CHECK(Msg(X) == "block_table: sequence 1's page 2 is 10, outside [0, 10)");
    Lens = {65, 40};
    CHECK(Msg(X) == "seq_lens: sequence 0 has 65 keys, above the bound 64");
    Lens = {-1, 40};
    CHECK(Msg(X) == "seq_lens: sequence 0 has a negative length or a last page "
                    "length outside [1, 16]");
    PagedArgs C;
    C.KV.BlockTable = TensorView();
    C.KV.SeqLens = TensorView();
    C.KV.Indptr = TensorView::contiguous(fake(0xe0000), DType::I32, {3});
    C.KV.Indices = TensorView::contiguous(fake(0xf0000), DType::I32, {4});
    C.KV.LastPageLen = TensorView::contiguous(fake(0xf8000), DType::I32, {2});
    std::vector<int32_t> Indptr = {0, 2, 4}, Indices = {1, 2, 3, 4}, Last = {0, 5};
    PagedKVHost HC;
    HC.Indptr = Indptr.data();
    HC.Indices = Indices.data();
    HC.LastPageLen = Last.data();
    C.KV.Host = &HC;
    CHECK(Msg(C) == "indptr, last_page_len: sequence 0 has a negative length or "
                    "a last page length outside [1, 16]");
    Last = {16, 5};
    Indptr = {0, 2, 5};
    CHECK(Msg(C) == "indptr: sequence 1 uses indices [2, 5), outside the 4 of "
                    "indices");
    Indptr = {0, 2, 4};
    Indices = {1, 2, 3, -1};
    CHECK(Msg(C) == "indices: sequence 1's page 1 is -1, outside [0, 10)");
    Indices = {1, 2, 3, 4};
    // Everything valid: the paged kernel compiles, then there is no driver.
    CHECK_THAT(messageOf<DriverError>([&] { A.decodePaged(C.Q, C.KV, C.O, &C.F); }),
               Contains("no CUDA driver"));
    CHECK(A.lastBackend().empty());
  }
}

TEST_CASE("paged: decodePaged checks per-row and per-key inputs",
          "[runtime][paged]") {
  cacheDir();
  // Query-side inputs follow q's rows ([B, H, Sq], [B, Sq]); key-side ones
  // are [B, (H,) K] with K at least the bound (64), read at kv_idx.
  Attention Doc(examples::mhaDocument(), sm80());
  PagedArgs X;
  InputMap In;
  In["q_doc"] = TensorView::contiguous(fake(0x100000), DType::F32, {2, 8, 1});
  In["k_doc"] = TensorView::contiguous(fake(0x110000), DType::F32, {2, 8, 63});
  auto Msg = [&] {
    return messageOf<InvalidArgument>(
        [&] { Doc.decodePaged(X.Q, X.KV, X.O, &X.F, In); });
  };
  CHECK(Msg() == "input 'k_doc' (per_key [batch, heads, keys at least the "
                 "bound max_seqlen_kv 64] in paged decode, read at kv_idx): "
                 "expected shape [2, 8, 64], got [2, 8, 63]");
  In["k_doc"] = TensorView::contiguous(fake(0x110000), DType::F32, {2, 4, 100});
  CHECK(Msg() == "input 'k_doc' (per_key [batch, heads, keys at least the "
                 "bound max_seqlen_kv 64] in paged decode, read at kv_idx): "
                 "expected shape [2, 8, 100], got [2, 4, 100]");
  In["k_doc"] = TensorView::contiguous(fake(0x110000), DType::I32, {2, 8, 100});
  CHECK(Msg() == "input 'k_doc': expected dtype f32, got i32");
  In["k_doc"] = TensorView::contiguous(fake(0x110000), DType::F32, {2, 8, 100});
  In["q_doc"] = TensorView::contiguous(fake(0x100000), DType::F32, {2, 8, 64});
  CHECK(Msg() == "input 'q_doc' (per_row [batch, heads, queries]): expected "
                 "shape [2, 8, 1], got [2, 8, 64]");
  In["q_doc"] = TensorView::contiguous(fake(0x100002), DType::F32, {2, 8, 1});
  CHECK(Msg() == "input 'q_doc': data pointer must be 4-byte aligned");
  In.erase("q_doc");
  CHECK(Msg() == "input 'q_doc': declared by 'mha_document' but not supplied");
  // Everything valid (a key tensor longer than the bound among it): the
  // kernels compile, then there is no driver.
  In["q_doc"] = TensorView::contiguous(fake(0x100000), DType::F32, {2, 8, 1});
  CHECK_THAT(messageOf<DriverError>(
                 [&] { Doc.decodePaged(X.Q, X.KV, X.O, &X.F, In); }),
             Contains("no CUDA driver"));
  // Per-token ids: [B, Sq] and [B, K].
  Attention Ids(examples::mhaDocumentIds(), sm80());
  InputMap T;
  T["doc_q"] = TensorView::contiguous(fake(0x100000), DType::I32, {2, 1});
  T["doc_k"] = TensorView::contiguous(fake(0x110000), DType::I32, {2, 8, 64});
  CHECK(messageOf<InvalidArgument>([&] {
          Ids.decodePaged(X.Q, X.KV, X.O, &X.F, T);
        }) == "input 'doc_k' (per_key_token [batch, keys at least the bound "
              "max_seqlen_kv 64] in paged decode, read at kv_idx): expected "
              "shape [2, 64], got [2, 8, 64]");
  // A full input is not supported.
  dsl::AttentionDef Full = examples::mha();
  Full.name = "mha_full_bias";
  Full.inputs.declare("bias", dsl::InputShape::Full);
  Attention FA(Full, sm80());
  CHECK_THAT(messageOf<NotSupportedYet>(
                 [&] { FA.decodePaged(X.Q, X.KV, X.O, &X.F); }),
             Contains("input 'bias': full inputs in paged decode"));
}

TEST_CASE("paged: runDecode and planDecode check the plan's bounds",
          "[runtime][paged]") {
  cacheDir();
  Attention A(examples::mha(), sm80());
  CHECK(messageOf<InvalidArgument>([&] {
          A.planDecode(DecodeBounds{1, 8, 2, 1, 100, 3});
        }) == "page size: expected a power of two from 1 to 2^20, got 3");
  // A plan made by the same arithmetic (planDecode needs a device).
  DecodePlan P = makeDecodePlan(DecodeBounds{2, 8, 2, 1, 4096, 16}, 64, 16, 64,
                                132, analysis::MergeKind::LogSumExp);
  REQUIRE(P.WorkspaceBytes > 0);
  PagedArgs X;
  X.KV.BlockTable = TensorView::contiguous(fake(0xc0000), DType::I32, {2, 256});
  auto Run = [&](const DecodePlan &Plan, const PagedArgs &Y, void *W, size_t N) {
    return messageOf<InvalidArgument>(
        [&] { A.runDecode(Plan, Y.Q, Y.KV, Y.O, &Y.F, W, N); });
  };
  CHECK(Run(P, X, nullptr, 0) == fmt::format("workspace: expected at least {} "
                                             "bytes (the plan's), got 0",
                                             P.WorkspaceBytes));
  CHECK(Run(P, X, fake(0x100008), P.WorkspaceBytes) ==
        "workspace: expected a non-null device pointer, 16-byte aligned");
  X.KV.MaxSeqlenKv = 5000;
  CHECK(Run(P, X, fake(0x100000), P.WorkspaceBytes) ==
        "max_seqlen_kv: expected 0 to the plan's bound 4096, got 5000");
  DecodePlan P3 = makeDecodePlan(DecodeBounds{3, 8, 2, 1, 4096, 16}, 64, 16, 64,
                                 132, analysis::MergeKind::LogSumExp);
  X.KV.MaxSeqlenKv = 64;
  CHECK(Run(P3, X, fake(0x100000), P3.WorkspaceBytes) ==
        "q: expected batch 3, queries 1 and heads 8 (the plan's), got 2, 1 and 8");
  DecodePlan P1 = makeDecodePlan(DecodeBounds{2, 8, 2, 1, 4096, 1}, 64, 16, 64,
                                 132, analysis::MergeKind::LogSumExp);
  CHECK(Run(P1, X, fake(0x100000), P1.WorkspaceBytes) ==
        "k_cache: expected heads_kv 2 and page size 1 (the plan's), got 2 and 16");
  // A plan this Attention did not make is refused before any launch.
  CHECK_THAT(Run(P, X, fake(0x100000), P.WorkspaceBytes),
             Contains("plan: made for kernel '', not by this Attention"));
}

TEST_CASE("paged: appendPaged names each malformed argument",
          "[runtime][paged]") {
  cacheDir();
  Attention A(examples::mha(), sm80());
  PagedArgs X;
  TensorView K = TensorView::contiguous(fake(0x200000), DType::F16, {5, 2, 64});
  TensorView V = TensorView::contiguous(fake(0x300000), DType::F16, {5, 2, 64});
  TensorView Slots = TensorView::contiguous(fake(0x400000), DType::I64, {5});
  auto Msg = [&](const TensorView &K, const TensorView &V, const TensorView &S) {
    return messageOf<InvalidArgument>([&] { A.appendPaged(K, V, X.KV, S); });
  };
  CHECK(Msg(K, V, TensorView::contiguous(fake(0x400000), DType::F32, {5})) ==
        "slot_mapping: expected dtype i32 or i64, got f32");
  CHECK(Msg(K, V, TensorView::contiguous(fake(0x400000), DType::I32, {4})) ==
        "slot_mapping: expected shape [5], got [4]");
  CHECK(Msg(TensorView::contiguous(fake(0x200000), DType::F16, {5, 3, 64}), V,
            Slots) == "k: expected 2 heads (the caches' KV heads), got 3");
  CHECK(Msg(K, TensorView::contiguous(fake(0x300000), DType::F16, {4, 2, 64}),
            Slots) == "v: expected 5 tokens and 2 heads (as k), got 4 and 2");
  CHECK_THAT(messageOf<DriverError>([&] { A.appendPaged(K, V, X.KV, Slots); }),
             Contains("no CUDA driver"));
}

TEST_CASE("paged: mergeResults refuses what does not merge and names each "
          "malformed argument",
          "[runtime][paged][merge]") {
  cacheDir();
  TensorView O = TensorView::contiguous(fake(0x10000), DType::F16, {2, 1, 8, 64});
  TensorView F = TensorView::contiguous(fake(0x30000), DType::F32, {1, 2, 8, 1});
  Attention R(examples::retention(), sm80());
  CHECK_THAT(messageOf<UserError>([&] { R.mergeResults({{O, &F}, {O, &F}}, O, &F); }),
             Contains("'retention': its results cannot be merged: its partial "
                      "states have no merge: o_scale"));
  // A definition's combine: its kernel is generated (no driver needed)
  // and the call reaches the driver; its two finals are checked as any.
  Attention RC(examples::retentionCombine(), sm80());
  TensorView F2 = TensorView::contiguous(fake(0x30000), DType::F32, {2, 2, 8, 1});
  CHECK_THAT(messageOf<DriverError>(
                 [&] { RC.mergeResults({{O, &F2}, {O, &F2}}, O, &F2); }),
             Contains("no CUDA driver"));
  CHECK(messageOf<InvalidArgument>(
            [&] { RC.mergeResults({{O, &F2}, {O, &F}}, O, &F2); }) ==
        "parts[1].finals: expected shape [2, 2, 8, 1], got [1, 2, 8, 1]");
  CHECK_THAT(messageOf<InvalidArgument>(
                 [&] { RC.mergeResults({{O, &F2}, {O, &F2}}, O, &F); }),
             Contains("finals: expected shape [2, 2, 8, 1], got [1, 2, 8, 1]"));
  Attention A(examples::mha(), sm80());
  auto Msg = [&](const std::vector<PartialResult> &Parts) {
    return messageOf<InvalidArgument>([&] { A.mergeResults(Parts, O, &F); });
  };
  CHECK(Msg({{O, &F}}) == "parts: expected 2 to 8 partial results, got 1");
  TensorView BadF = TensorView::contiguous(fake(0x30000), DType::F32, {1, 2, 8, 2});
  CHECK(Msg({{O, &F}, {O, &BadF}}) ==
        "parts[1].finals: expected shape [1, 2, 8, 1], got [1, 2, 8, 2]");
  CHECK(Msg({{O, &F}, {O, nullptr}}) ==
        "parts[1].finals: required, a float32 tensor of shape [1, 2, 8, 1] for "
        "the final rowscales of 'mha'");
  TensorView BadO = TensorView::contiguous(fake(0x10000), DType::F16, {2, 1, 4, 64});
  CHECK_THAT(Msg({{BadO, &F}, {O, &F}}),
             Contains("parts[0].out: expected batch 2, seq 1 and heads 8 (as out)"));
  CHECK_THAT(messageOf<DriverError>([&] { A.mergeResults({{O, &F}, {O, &F}}, O, &F); }),
             Contains("no CUDA driver"));
  // Sigmoid attention has no finals: its parts need none.
  Attention S(examples::sigmoidAttn(), sm80());
  CHECK_THAT(messageOf<DriverError>(
                 [&] { S.mergeResults({{O, nullptr}, {O, nullptr}}, O, nullptr); }),
             Contains("no CUDA driver"));
}
