// TMA tensor maps for the sm90 forward: q, k, v as 4-D tiled tensors.
#include "TmaMaps.h"

#include "attn/runtime/CudaDriver.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace attn::runtime {

static_assert(sizeof(attnc::TmaDesc) == sizeof(CUtensorMap) &&
                  alignof(attnc::TmaDesc) == alignof(CUtensorMap),
              "the device's TmaDesc must be a CUtensorMap");

TmaLayout tmaLayout(int64_t HeadDim, int64_t Seq, int64_t Heads, int64_t Batch,
                    const int64_t (&StridesBHS)[3], int BoxRows) {
  // The outer dims in order of increasing stride (the driver documents
  // strides that grow with the dimension); an extent-1 dim is never stepped
  // along, so it goes last with a stride past everything else.
  struct Outer {
    int Which; // 0 seq, 1 heads, 2 batch
    int64_t Extent, Stride;
  } O[3] = {{0, Seq, StridesBHS[2]}, {1, Heads, StridesBHS[1]},
            {2, Batch, StridesBHS[0]}};
  int64_t Span = HeadDim;
  for (const Outer &X : O)
    if (X.Extent > 1)
      Span = std::max(Span, X.Stride * X.Extent);
  for (Outer &X : O)
    if (X.Extent == 1)
      X.Stride = Span;
  std::stable_sort(O, O + 3, [](const Outer &A, const Outer &B) {
    if ((A.Extent == 1) != (B.Extent == 1))
      return B.Extent == 1;
    return A.Stride < B.Stride;
  });
  TmaLayout L{};
  L.Dims[0] = uint64_t(HeadDim);
  L.Box[0] = 64;
  for (int I = 0; I < 3; ++I) {
    L.Dims[I + 1] = uint64_t(O[I].Extent);
    L.Strides[I] = uint64_t(O[I].Stride) * 2;
    L.Box[I + 1] = O[I].Which == 0 ? uint32_t(BoxRows) : 1;
    L.Pos |= (I + 1) << (2 * O[I].Which);
  }
  return L;
}

static std::string encode(const char *Name, const TensorView &V,
                          const TmaLayout &L, attnc::TmaDesc &Out) {
  CudaDriver &D = CudaDriver::get();
  D.require();
  const cuuint32_t ElemStrides[4] = {1, 1, 1, 1};
  CUtensorMap Map;
  CUresult R = D.cuTensorMapEncodeTiled(
      &Map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, V.Data, L.Dims, L.Strides,
      L.Box, ElemStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (R != CUDA_SUCCESS) {
    const char *Err = nullptr;
    if (D.cuGetErrorName(R, &Err) != CUDA_SUCCESS)
      Err = "unknown error";
    return fmt::format("cuTensorMapEncodeTiled({}) failed: {} (strides {}, "
                       "{}, {} bytes)",
                       Name, Err, L.Strides[0], L.Strides[1], L.Strides[2]);
  }
  std::memcpy(&Out, &Map, sizeof Map);
  return "";
}

std::string makeSm90Maps(const CallShape &C, const ForwardTensors &T,
                         int BlockM, int BlockN, attnc::Sm90Maps &Out) {
  // A packed call: one batch of all tokens (the kernel starts each tile at
  // its sequence's first token).
  const int64_t Sq = C.Packed ? C.TotalQ : C.Sq;
  const int64_t Skv = C.Packed ? C.TotalKv : C.Skv;
  const int64_t B = C.Packed ? 1 : C.B;
  int64_t D = T.Q.Shape.back(), DV = T.V.Shape.back();
  TmaLayout LQ = tmaLayout(D, Sq, C.H, B, C.Q, BlockM);
  TmaLayout LK = tmaLayout(D, Skv, C.Hkv, B, C.K, BlockN);
  TmaLayout LV = tmaLayout(DV, Skv, C.Hkv, B, C.V, BlockN);
  Out = attnc::Sm90Maps{};
  if (std::string Why = encode("q", T.Q, LQ, Out.q); !Why.empty())
    return Why;
  if (std::string Why = encode("k", T.K, LK, Out.k); !Why.empty())
    return Why;
  if (std::string Why = encode("v", T.V, LV, Out.v); !Why.empty())
    return Why;
  Out.q_pos = LQ.Pos;
  Out.k_pos = LK.Pos;
  Out.v_pos = LV.Pos;
  return "";
}

std::string makeSm90PagedMaps(const CallShape &C, const TensorView &Q,
                              const PageGeometry &K, const void *KData,
                              int64_t HeadDim, const PageGeometry &V,
                              const void *VData, int64_t HeadDimV, int BlockM,
                              int BlockN, attnc::Sm90Maps &Out) {
  TmaLayout LQ = tmaLayout(HeadDim, C.TotalQ, C.H, 1, C.Q, BlockM);
  auto Cache = [&](const PageGeometry &G, int64_t Dim) {
    const int64_t Strides[3] = {G.PageStride, G.HeadStride, G.SlotStride};
    return tmaLayout(Dim, G.PageSize, C.Hkv, G.NumPages, Strides,
                     int(std::min<int64_t>(G.PageSize, BlockN)));
  };
  TmaLayout LK = Cache(K, HeadDim), LV = Cache(V, HeadDimV);
  TensorView KV, VV;
  KV.Data = const_cast<void *>(KData);
  VV.Data = const_cast<void *>(VData);
  Out = attnc::Sm90Maps{};
  if (std::string Why = encode("q", Q, LQ, Out.q); !Why.empty())
    return Why;
  if (std::string Why = encode("k_cache", KV, LK, Out.k); !Why.empty())
    return Why;
  if (std::string Why = encode("v_cache", VV, LV, Out.v); !Why.empty())
    return Why;
  Out.q_pos = LQ.Pos;
  Out.k_pos = LK.Pos;
  Out.v_pos = LV.Pos;
  return "";
}

std::string makeSm90BwdMaps(const BackwardCallShape &S, const BackwardTensors &T,
                            int BlockM, attnc::Sm90BwdMaps &Out) {
  // A packed call (bwd_sm90's packed form): one batch of all tokens, as
  // the forward's maps (a tile starts at its sequence's first token).
  const CallShape &C = S.Fwd;
  const int64_t Sq = C.Packed ? C.TotalQ : C.Sq;
  const int64_t B = C.Packed ? 1 : C.B;
  TmaLayout LQ = tmaLayout(T.Q.Shape.back(), Sq, C.H, B, C.Q, BlockM);
  TmaLayout LO = tmaLayout(T.DOut.Shape.back(), Sq, C.H, B, S.DOut, BlockM);
  Out = attnc::Sm90BwdMaps{};
  if (std::string Why = encode("q", T.Q, LQ, Out.q); !Why.empty())
    return Why;
  if (std::string Why = encode("dout", T.DOut, LO, Out.dout); !Why.empty())
    return Why;
  Out.q_pos = LQ.Pos;
  Out.do_pos = LO.Pos;
  return "";
}

} // namespace attn::runtime
