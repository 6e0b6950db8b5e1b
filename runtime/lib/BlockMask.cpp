// BlockMask and the host side of a user's BlockLists.
#include "BlockMaskData.h"

#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn::runtime {

std::string BwdTiles::str() const {
  return fmt::format("dQ {}x{}, dK/dV {}x{}{}", QBlockM, QBlockN, KvBlockM,
                     KvBlockN, Fused ? ", fused dQ" : "");
}

BlockMask::BlockMask() : D(std::make_unique<BlockMaskData>()) {}
BlockMask::BlockMask(std::unique_ptr<BlockMaskData> Data)
    : D(std::move(Data)) {}
BlockMask::BlockMask(BlockMask &&) = default;
BlockMask &BlockMask::operator=(BlockMask &&) = default;
BlockMask::~BlockMask() = default;

const MaskShape &BlockMask::shape() const { return D->Shape; }
bool BlockMask::forBackward() const { return D->HasBwd; }

std::string BlockMask::describe() const {
  std::string S = fmt::format("block mask of [{}, {}, {}, {}]: forward {}x{}",
                              D->Shape.Batch, D->Shape.Heads, D->Shape.SeqQ,
                              D->Shape.SeqKv, D->FwdBlockM, D->FwdBlockN);
  if (D->HasBwd)
    S += ", backward " + D->Bwd.str();
  if (D->UserBlockQ)
    S += fmt::format(", given in blocks of {}x{}", D->UserBlockQ,
                     D->UserBlockKv);
  return S;
}

namespace {

int64_t ceilDiv(int64_t A, int64_t B) { return (A + B - 1) / B; }

/// One list pair (counts and indices) of \p L: every count in [0, KvBlocks],
/// every listed block in [0, KvBlocks) and named once per row, marked
/// \p Class in \p Out (a block marked before is named by both lists).
void readList(const std::vector<int32_t> &Num, const std::vector<int32_t> &Idx,
              const char *NumName, const char *IdxName, const BlockLists &L,
              int64_t QBlocks, int64_t KvBlocks, uint8_t Class,
              HostClasses &Out) {
  const int64_t Rows = L.Batch * L.Heads * QBlocks;
  if (int64_t(Num.size()) != Rows)
    throw InvalidArgument(fmt::format(
        "block lists: {} has {} entries; expected Batch x Heads x QBlocks = "
        "{} x {} x {} = {}",
        NumName, Num.size(), L.Batch, L.Heads, QBlocks, Rows));
  if (int64_t(Idx.size()) != Rows * KvBlocks)
    throw InvalidArgument(fmt::format(
        "block lists: {} has {} entries; expected Batch x Heads x QBlocks x "
        "KvBlocks = {} x {} x {} x {} = {}",
        IdxName, Idx.size(), L.Batch, L.Heads, QBlocks, KvBlocks,
        Rows * KvBlocks));
  for (int64_t R = 0; R < Rows; ++R) {
    const int64_t B = R / (L.Heads * QBlocks), H = R / QBlocks % L.Heads,
                  M = R % QBlocks;
    if (Num[R] < 0 || Num[R] > KvBlocks)
      throw InvalidArgument(fmt::format(
          "block lists: {}[{}][{}][{}] is {}; expected 0 to KvBlocks = {}",
          NumName, B, H, M, Num[R], KvBlocks));
    for (int32_t J = 0; J < Num[R]; ++J) {
      const int32_t N = Idx[R * KvBlocks + J];
      if (N < 0 || N >= KvBlocks)
        throw InvalidArgument(fmt::format(
            "block lists: {}[{}][{}][{}][{}] is {}; expected a key block in "
            "[0, {})",
            IdxName, B, H, M, J, N, KvBlocks));
      uint8_t &C = Out.C[(size_t(R) * KvBlocks) + N];
      if (C == Class)
        throw InvalidArgument(fmt::format(
            "block lists: {}[{}][{}][{}] names key block {} twice; expected "
            "distinct blocks",
            IdxName, B, H, M, N));
      if (C != 0)
        throw InvalidArgument(fmt::format(
            "block lists: KvIndices and FullKvIndices both name key block {} "
            "of query block {} (batch {}, head {}); expected it in one of them",
            N, M, B, H));
      C = Class;
    }
  }
}

} // namespace

HostClasses checkBlockLists(const BlockLists &L, const MaskShape &S) {
  if (L.BlockQ < 1 || L.BlockKv < 1)
    throw InvalidArgument(fmt::format(
        "block lists: block size {}x{}; expected BlockQ and BlockKv of at "
        "least 1",
        L.BlockQ, L.BlockKv));
  if (L.Batch != 1 && L.Batch != S.Batch)
    throw InvalidArgument(fmt::format(
        "block lists: Batch is {}; expected 1 or the shape's batch {}",
        L.Batch, S.Batch));
  if (L.Heads != 1 && L.Heads != S.Heads)
    throw InvalidArgument(fmt::format(
        "block lists: Heads is {}; expected 1 or the shape's heads {}",
        L.Heads, S.Heads));
  if (L.FullKvNumBlocks.empty() != L.FullKvIndices.empty())
    throw InvalidArgument(
        fmt::format("block lists: {} is empty and {} is not; expected both "
                    "or neither",
                    L.FullKvNumBlocks.empty() ? "FullKvNumBlocks"
                                              : "FullKvIndices",
                    L.FullKvNumBlocks.empty() ? "FullKvIndices"
                                              : "FullKvNumBlocks"));
  const int64_t QBlocks = ceilDiv(S.SeqQ, L.BlockQ);
  const int64_t KvBlocks = ceilDiv(S.SeqKv, L.BlockKv);
  HostClasses U;
  U.BlockM = L.BlockQ;
  U.BlockN = L.BlockKv;
  U.MBlocks = int(QBlocks);
  U.NBlocks = int(KvBlocks);
  U.Groups = L.Batch * L.Heads;
  U.C.assign(size_t(U.Groups * QBlocks * KvBlocks), 0);
  readList(L.KvNumBlocks, L.KvIndices, "KvNumBlocks", "KvIndices", L, QBlocks,
           KvBlocks, 1, U);
  if (!L.FullKvNumBlocks.empty())
    readList(L.FullKvNumBlocks, L.FullKvIndices, "FullKvNumBlocks",
             "FullKvIndices", L, QBlocks, KvBlocks, 2, U);
  // The kernels' groups: one, one per batch, or one per batch·head (lists
  // given per head for one batch serve every batch).
  if (L.Heads == 1) {
    U.Grouping = L.Batch == 1 ? 0 : 1;
    return U;
  }
  U.Grouping = 2;
  if (L.Batch == S.Batch)
    return U;
  HostClasses All = U;
  All.Groups = S.Batch * S.Heads;
  All.C.clear();
  for (int64_t B = 0; B < S.Batch; ++B)
    All.C.insert(All.C.end(), U.C.begin(), U.C.end());
  return All;
}

HostClasses retile(const HostClasses &U, int64_t SeqQ, int64_t SeqKv,
                   int BlockM, int BlockN) {
  HostClasses T;
  T.Grouping = U.Grouping;
  T.Groups = U.Groups;
  T.BlockM = BlockM;
  T.BlockN = BlockN;
  T.MBlocks = int(ceilDiv(SeqQ, BlockM));
  T.NBlocks = int(ceilDiv(SeqKv, BlockN));
  T.C.assign(size_t(T.Groups) * T.MBlocks * T.NBlocks, 0);
  for (int64_t G = 0; G < T.Groups; ++G)
    for (int M = 0; M < T.MBlocks; ++M) {
      const int64_t Q0 = int64_t(M) * BlockM,
                    Q1 = std::min<int64_t>(Q0 + BlockM, SeqQ) - 1;
      for (int N = 0; N < T.NBlocks; ++N) {
        const int64_t K0 = int64_t(N) * BlockN, KEnd = K0 + BlockN,
                      K1 = std::min<int64_t>(KEnd, SeqKv) - 1;
        bool Any = false, All = true;
        for (int64_t UM = Q0 / U.BlockM; UM <= Q1 / U.BlockM; ++UM)
          for (int64_t UN = K0 / U.BlockN; UN <= K1 / U.BlockN; ++UN) {
            const uint8_t C = U.at(G, int(UM), int(UN));
            Any = Any || C != 0;
            All = All && C == 2;
          }
        if (KEnd > SeqKv)
          All = false; // keys past the end must be masked
        T.C[(size_t(G) * T.MBlocks + M) * T.NBlocks + N] =
            Any ? (All ? 2 : 1) : 0;
      }
    }
  return T;
}

namespace {

HostLists listLines(const HostClasses &C, bool Transposed) {
  const int Lines = Transposed ? C.NBlocks : C.MBlocks;
  HostLists L;
  L.Len = Transposed ? C.MBlocks : C.NBlocks;
  L.Count.assign(size_t(C.Groups) * Lines, 0);
  L.List.assign(size_t(C.Groups) * Lines * L.Len, 0);
  for (int64_t G = 0; G < C.Groups; ++G)
    for (int Line = 0; Line < Lines; ++Line) {
      const size_t Id = size_t(G) * Lines + Line;
      int32_t Count = 0;
      for (int X = 0; X < L.Len; ++X) {
        const uint8_t K = Transposed ? C.at(G, X, Line) : C.at(G, Line, X);
        if (K)
          L.List[Id * L.Len + Count++] = X | (K == 2 ? (1 << 30) : 0);
      }
      L.Count[Id] = Count;
    }
  return L;
}

} // namespace

HostLists listRows(const HostClasses &C) { return listLines(C, false); }
HostLists listColumns(const HostClasses &C) { return listLines(C, true); }

std::vector<int32_t> columnRanks(const HostLists &Rows, const HostLists &Cols,
                                 int64_t Groups) {
  const int64_t NLines = int64_t(Cols.Count.size()) / Groups;
  std::vector<int32_t> Rank(Cols.List.size(), 0);
  for (int64_t G = 0; G < Groups; ++G)
    for (int64_t N = 0; N < NLines; ++N) {
      const size_t Col = size_t(G * NLines + N);
      for (int32_t J = 0; J < Cols.Count[Col]; ++J) {
        const int M = Cols.List[Col * Cols.Len + J] & 0x3fffffff;
        const size_t Row = size_t(G) * Rows.Count.size() / Groups + M;
        const int32_t *Keys = Rows.List.data() + Row * Rows.Len;
        const int32_t Len = Rows.Count[Row];
        const int32_t At = int32_t(
            std::find_if(Keys, Keys + Len,
                         [&](int32_t E) { return (E & 0x3fffffff) >= N; }) -
            Keys);
        Rank[Col * Cols.Len + J] = Len - 1 - At;
      }
    }
  return Rank;
}

} // namespace attn::runtime
