// Paged decode with per-row, per-key and per-token custom inputs on a GPU
// against the double-precision reference: dense (q [B, Sq, H, D]) and
// packed (q [Tq, H, D], cu_seqlens_q) calls over block tables and CSR,
// pages of 1 and 16, every sequence's keys split over CTAs and merged;
// query-side inputs follow q's rows, key-side ones are [B, (H,) K] read at
// the key's position in its sequence (K above the bound: an engine's
// tensor of its longest sequence). Then a plan captured in a CUDA graph and
// replayed with new lengths, tables and input values at the same
// addresses. ATTNC_PAGED_INPUTS_COMPILE_ONLY=sm_90a compiles the kernels
// into the kernel cache without a GPU. Exits 77 without a GPU.
#include "PackedDecodeSupport.h"

#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Paged.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>

using namespace attn;
using namespace attn::gputest;
using runtime::PageLayout;
using runtime::TensorView;

namespace {

/// A test definition: pagedDefinition's, or mha_key_bias (causal softmax
/// with a per-key, per-head additive bias: a per_key score input).
dsl::AttentionDef definitionOf(const std::string &Name) {
  if (Name != "mha_key_bias")
    return pagedDefinition(Name);
  dsl::AttentionDef D = makeDefinition("mha");
  D.name = Name;
  D.inputs.declare("key_bias", dsl::InputShape::PerKey, -1.0, 1.0);
  D.score_mod = [](dsl::SymbolScalar S, const dsl::CustomInputs &In,
                   dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
                   dsl::SymbolScalar) {
    return S * In.head_dim().rsqrt() + In["key_bias"];
  };
  return D;
}

/// Whether an input holds document ids (compared for equality): its
/// values are documentId's, not random draws.
bool isDocument(const ir::InputDecl &D) {
  return D.Elem == ir::InputType::I32 || D.SampleLo == D.SampleHi;
}

/// The custom inputs of one paged decode call, on the host in the layout
/// the call takes and on the device. Query-side: dense [B, H, Sq] / [B, Sq],
/// packed [H, Tq] / [Tq]; key-side [B, H, K] / [B, K]. Values: document
/// ids by position (a query row at its q_idx), else uniform draws in the
/// declared range; key columns past a sequence's keys hold junk (1e4) that
/// a read would show.
struct CallInputs {
  const ir::Graph &G;
  int B, H, K;
  bool Packed;
  const BatchRows &Rows;
  int Tq; ///< packed: q's tokens
  std::map<std::string, std::vector<double>> Host;
  std::map<std::string, std::unique_ptr<DeviceBuffer>> Dev;
  reference::InputValues Fixed; ///< scalar and per-head values
  runtime::InputMap Map;

  CallInputs(const ir::Graph &G, int B, int H, int K, bool Packed,
             const BatchRows &Rows, int Tq)
      : G(G), B(B), H(H), K(K), Packed(Packed), Rows(Rows), Tq(Tq) {}

  static bool querySide(ir::InputShape S) {
    return S == ir::InputShape::PerRow || S == ir::InputShape::PerQueryToken;
  }
  static bool headAxis(ir::InputShape S) {
    return S == ir::InputShape::PerRow || S == ir::InputShape::PerKey;
  }
  int sq() const { return Rows.Sq.empty() ? 1 : Rows.Sq[0]; }
  std::vector<int64_t> shapeOf(ir::InputShape S) const {
    const bool Hd = headAxis(S);
    if (querySide(S)) {
      if (Packed)
        return Hd ? std::vector<int64_t>{H, Tq} : std::vector<int64_t>{Tq};
      return Hd ? std::vector<int64_t>{B, H, sq()} : std::vector<int64_t>{B, sq()};
    }
    return Hd ? std::vector<int64_t>{B, H, K} : std::vector<int64_t>{B, K};
  }
  /// Element (b, h, s) of an input of class \p S: s a query of the
  /// sequence (query side) or a key position.
  size_t at(ir::InputShape S, int b, int h, int s) const {
    const bool Hd = headAxis(S);
    if (querySide(S)) {
      if (Packed)
        return Hd ? size_t(h) * Tq + Rows.Row0[b] + s : size_t(Rows.Row0[b] + s);
      return Hd ? (size_t(b) * H + h) * sq() + s : size_t(b) * sq() + s;
    }
    return Hd ? (size_t(b) * H + h) * K + s : size_t(b) * K + s;
  }

  /// New values for every tensor input (lengths \p Lens), uploaded to the
  /// same buffers where they exist.
  void fill(std::mt19937_64 &Rng, const std::vector<int> &Lens, int Shift) {
    Fixed = referenceInputs(G, H);
    for (const ir::InputDecl &D : G.decls().Inputs) {
      if (D.Shape == ir::InputShape::Scalar) {
        const double X = Fixed.at(D.Name).Data[0];
        Map[D.Name] = D.Elem == ir::InputType::I32 ? runtime::InputValue(int32_t(X))
                                                   : runtime::InputValue(float(X));
        continue;
      }
      std::vector<int64_t> Shape = D.Shape == ir::InputShape::PerHead
                                       ? std::vector<int64_t>{H}
                                       : shapeOf(D.Shape);
      size_t N = 1;
      for (int64_t E : Shape)
        N *= size_t(E);
      std::vector<double> &V = Host[D.Name];
      V.assign(N, isDocument(D) ? -7.0 : 1e4);
      if (D.Shape == ir::InputShape::PerHead) {
        for (int h = 0; h < H; ++h)
          V[h] = Fixed.at(D.Name).Data[h];
      } else {
        std::uniform_real_distribution<double> U(D.SampleLo, D.SampleHi);
        const int Heads = headAxis(D.Shape) ? H : 1;
        for (int b = 0; b < B; ++b) {
          const int Count = querySide(D.Shape) ? Rows.Sq[b] : Lens[b];
          for (int h = 0; h < Heads; ++h)
            for (int s = 0; s < Count; ++s) {
              // A query row's position is its q_idx (aligned to the end).
              const int Pos = querySide(D.Shape) ? Lens[b] - Rows.Sq[b] + s : s;
              V[at(D.Shape, b, h, s)] =
                  isDocument(D) ? documentId(b + Shift, Pos) : float(U(Rng));
            }
        }
      }
      std::unique_ptr<DeviceBuffer> &Buf = Dev[D.Name];
      if (!Buf)
        Buf = std::make_unique<DeviceBuffer>(N * 4);
      if (D.Elem == ir::InputType::I32) {
        std::vector<int32_t> I(V.begin(), V.end());
        Buf->upload(I.data(), N * 4);
      } else {
        std::vector<float> F(V.begin(), V.end());
        Buf->upload(F.data(), N * 4);
      }
      Map[D.Name] = TensorView::contiguous(
          Buf->get(), D.Elem == ir::InputType::I32 ? DType::I32 : DType::F32, Shape);
    }
  }

  /// The reference inputs of sequence b's rows [S0, S0 + N) over its
  /// \p Len keys (a dense call of one batch).
  reference::InputValues sequence(int b, int S0, int N, int Len) const {
    reference::InputValues R = Fixed;
    for (const ir::InputDecl &D : G.decls().Inputs) {
      if (D.Shape == ir::InputShape::Scalar || D.Shape == ir::InputShape::PerHead)
        continue;
      const std::vector<double> &V = Host.at(D.Name);
      const bool Q = querySide(D.Shape);
      const int Count = Q ? N : Len, Heads = headAxis(D.Shape) ? H : 1;
      reference::Tensor T(headAxis(D.Shape) ? std::vector<int64_t>{1, H, Count}
                                            : std::vector<int64_t>{1, Count});
      for (int h = 0; h < Heads; ++h)
        for (int s = 0; s < Count; ++s) {
          double X = V[at(D.Shape, b, h, Q ? S0 + s : s)];
          if (headAxis(D.Shape))
            T.at({0, h, s}) = X;
          else
            T.at({0, s}) = X;
        }
      R[D.Name] = T;
    }
    return R;
  }
};

struct Case {
  std::string Def;
  DType Dt;
  bool Packed, Csr;
  int PageSize;
  PageLayout Layout;
  int H, Hkv;
  std::vector<int> Lens;
  std::vector<int> Counts; ///< packed: queries per sequence; dense: {Sq}
};

runtime::Signature signatureOf(DType Dt, std::optional<GpuArch> Arch = std::nullopt) {
  return pagedSignature(Dt, Arch);
}

bool runCase(const Case &C, uint64_t Seed) {
  runtime::Attention A(definitionOf(C.Def), signatureOf(C.Dt));
  const ir::Graph &G = *A.definition().Graph;
  std::mt19937_64 Rng(Seed);
  PagedHost P = makeBatch(Rng, C.Dt, C.Hkv, C.PageSize, C.Layout, C.Lens);
  const int B = P.B, H = C.H, D = P.D;
  DeviceCaches Caches = uploadCaches(P, C.Dt, B, C.Hkv, C.PageSize, D);
  DeviceIndex Idx(P);
  const int MaxLen = maxOf(C.Lens);
  runtime::PagedKV KV = Idx.view(P, C.Csr, Caches.K->get(), Caches.V->get(), C.Dt, MaxLen);
  // Queries: packed with two padding rows, or dense [B, Sq, H, D].
  Queries X = makeQueries(Rng, C.Dt, H,
                          C.Packed ? C.Counts : std::vector<int>(B, C.Counts[0]),
                          C.Packed ? 2 : 0);
  BatchRows R = C.Packed ? rowsOf(X) : BatchRows::dense(B, C.Counts[0]);
  CallInputs In(G, B, H, MaxLen + 5, C.Packed, R, X.Tq);
  In.fill(Rng, C.Lens, 0);
  DeviceBuffer DQ(X.Bits.size() * 2);
  DQ.upload(X.Bits.data(), DQ.size());
  Outputs Out(A, C.Dt, X.Tq, H);
  std::vector<uint16_t> OBits;
  std::vector<float> FVals;
  FinalAt F;
  if (C.Packed) {
    DeviceBuffer Cu(X.Cu.size() * 4);
    Cu.upload(X.Cu.data(), Cu.size());
    A.decodePagedVarlen(TensorView::contiguous(DQ.get(), C.Dt, {X.Tq, H, D}),
                        TensorView::contiguous(Cu.get(), DType::I32, {B + 1}),
                        X.MaxQ, KV, Out.OV, Out.finals(), In.Map);
    Out.download(OBits, FVals);
    F = [&](size_t f, int b, int h, int s) {
      return double(FVals[(f * H + h) * X.Tq + R.Row0[b] + s]);
    };
  } else {
    const int Sq = C.Counts[0];
    TensorView FV = TensorView::contiguous(Out.F.get(), DType::F32,
                                           {int64_t(Out.NF), B, H, Sq});
    A.decodePaged(TensorView::contiguous(DQ.get(), C.Dt, {B, Sq, H, D}), KV,
                  TensorView::contiguous(Out.O.get(), C.Dt, {B, Sq, H, D}),
                  Out.NF ? &FV : nullptr, In.Map);
    Out.download(OBits, FVals);
    // Sq by value: it ends with this block, the check reads F after it.
    F = [&, Sq](size_t f, int b, int h, int s) {
      return double(FVals[((f * B + b) * H + h) * Sq + s]);
    };
  }
  BatchReference Want = batchReference(
      A, C.Dt, P, H, R, X.Bits, In.Fixed,
      [&](int b, int S0, int N) { return In.sequence(b, S0, N, P.Lens[b]); });
  runtime::DecodeBounds Bd{B, H, C.Hkv, X.MaxQ, MaxLen, C.PageSize};
  const std::string What = fmt::format(
      "{} {} {} {} page{} {} H{}/{} B{} maxkv{} splits {}", C.Def,
      std::string(dtypeName(C.Dt)), C.Packed ? "packed" : "dense",
      C.Csr ? "csr" : "table", C.PageSize, runtime::pageLayoutName(C.Layout), H,
      C.Hkv, B, MaxLen, A.planDecode(Bd).Splits);
  bool Pass = checkRows(What.c_str(), A, C.Dt, Want, H, D, R, OBits, F);
  if (C.Packed) // the padding rows after the last sequence: never written
    Pass = untouched(What.c_str(), OBits, H, X.Cu.back(), X.Tq) && Pass;
  return Pass;
}

/// A dense plan with per-row and per-key-token inputs (mha_row_scale)
/// captured once and replayed three times with new lengths, tables, caches,
/// q and input values at the same addresses.
bool graphReplay(const std::string &Def, uint64_t Seed) {
  const DType Dt = DType::F16;
  const int H = 8, Hkv = 2, Sq = 2, PageSize = 16, B = 4, MaxLen = 4096, D = 128;
  runtime::Attention A(definitionOf(Def), signatureOf(Dt));
  const ir::Graph &G = *A.definition().Graph;
  runtime::DecodePlan Plan =
      A.planDecode(runtime::DecodeBounds{B, H, Hkv, Sq, MaxLen, PageSize});
  std::mt19937_64 Rng(Seed);
  GraphPages Pages(Dt, B, Hkv, PageSize, D, MaxLen, /*Csr=*/false);
  DeviceBuffer DQ(size_t(B) * Sq * H * D * 2), Work(std::max<size_t>(16, Plan.WorkspaceBytes));
  Outputs Out(A, Dt, B * Sq, H);
  TensorView O = TensorView::contiguous(Out.O.get(), Dt, {B, Sq, H, D});
  TensorView FV = TensorView::contiguous(Out.F.get(), DType::F32, {int64_t(Out.NF), B, H, Sq});
  BatchRows R = BatchRows::dense(B, Sq);
  CallInputs In(G, B, H, MaxLen, false, R, B * Sq);
  const std::vector<std::vector<int>> Rounds = {
      {4096, 1, 0, 777}, {33, 4000, 2048, 16}, {0, 2, 4095, 1}};
  In.fill(Rng, Rounds[0], 0);

  CapturedGraph Graph([&](CUstream S) {
    A.runDecode(Plan, TensorView::contiguous(DQ.get(), Dt, {B, Sq, H, D}), Pages.KV, O,
                Out.NF ? &FV : nullptr, Work.get(), Work.size(), In.Map, S);
  });
  bool Pass = true;
  for (size_t Round = 0; Round < Rounds.size(); ++Round) {
    PagedHost P = refillGraphBatch(Rng, Dt, Hkv, PageSize, D, Pages.NumPages, Pages.MaxPages,
                                   Rounds[Round], Pages.buffers());
    In.fill(Rng, Rounds[Round], int(Round) + 1); // same buffers, new values
    Queries X = makeQueries(Rng, Dt, H, std::vector<int>(B, Sq), 0);
    DQ.upload(X.Bits.data(), DQ.size());
    Out.O.poison();
    Out.F.poison();
    Graph.replay();
    std::vector<uint16_t> OBits;
    std::vector<float> FVals;
    Out.download(OBits, FVals);
    BatchReference Want = batchReference(
        A, Dt, P, H, R, X.Bits, In.Fixed,
        [&](int b, int S0, int N) { return In.sequence(b, S0, N, P.Lens[b]); });
    FinalAt F = [&](size_t f, int b, int h, int s) {
      return double(FVals[((f * B + b) * H + h) * Sq + s]);
    };
    const std::string What = fmt::format("graph replay {} (splits {}) round {}", Def,
                                         Plan.Splits, Round);
    Pass = checkRows(What.c_str(), A, Dt, Want, H, D, R, OBits, F) && Pass;
  }
  return Pass;
}

std::vector<Case> cases() {
  // Ragged lengths with 0 and 1, one long enough to split over many CTAs;
  // packed counts 0, 1, 16 and more queries than keys.
  const std::vector<int> Lens = {2000, 1, 0, 3000, 37};
  const std::vector<int> Counts = {3, 1, 2, 16, 0};
  std::vector<Case> All;
  for (const char *Def : {"mha_key_bias", "mha_document", "mha_document_ids",
                          "mha_row_scale", "alibi_learnable"}) {
    All.push_back({Def, DType::F16, false, false, 16, PageLayout::NHD, 8, 2, Lens, {2}});
    All.push_back({Def, DType::F16, true, true, 1, PageLayout::HND, 8, 2, Lens, Counts});
  }
  All.push_back({"mha_row_scale", DType::BF16, false, true, 1, PageLayout::NHD, 8, 8, Lens, {1}});
  All.push_back({"mha_document", DType::BF16, true, false, 16, PageLayout::NHD, 8, 1, Lens, Counts});
  return All;
}

/// The cases' kernels compiled into the kernel cache for \p ArchName.
int compileOnly(const char *ArchName) {
  std::optional<GpuArch> Arch = archFromName(ArchName);
  if (!Arch) {
    std::printf("ATTNC_PAGED_INPUTS_COMPILE_ONLY: unknown arch %s\n", ArchName);
    return 2;
  }
  int N = 0;
  for (const Case &C : cases()) {
    runtime::Attention A(definitionOf(C.Def), signatureOf(C.Dt, Arch));
    runtime::PrecompileSet Set;
    Set.Decode = true;
    A.precompile(Set);
    ++N;
  }
  std::printf("compiled the kernels of %d paged input cases\n", N);
  return 0;
}

} // namespace

int main() {
  if (const char *Only = std::getenv("ATTNC_PAGED_INPUTS_COMPILE_ONLY"))
    return compileOnly(Only);
  auto &Drv = runtime::CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  CaseGuard Guard;
  uint64_t Seed = 11;
  for (const Case &C : cases())
    Guard.run(C.Def, [&] { return runCase(C, Seed++); });
  Guard.run("graph replay", [&] { return graphReplay("mha_row_scale", 201); });
  Guard.run("graph replay", [&] { return graphReplay("mha_document", 202); });
  std::printf("%s\n",
              Guard.pass() ? "all paged input cases pass" : "some paged input cases FAIL");
  return Guard.pass() ? 0 : 1;
}
