// Tensor maps (TMA descriptors) of q, k and v for the sm90 forward skeleton,
// built on the host per call from the validated pointers and strides.
#ifndef ATTN_RUNTIME_TMAMAPS_H
#define ATTN_RUNTIME_TMAMAPS_H

#include "attn/runtime/Backend.h"
#include "attn/runtime/Paged.h"

#include "../kernels/sm90_args.cuh"

#include <cstdint>
#include <string>

namespace attn::runtime {

/// Fills \p Out with 4-D tensor maps of q (boxes of 64 columns x \p BlockM
/// rows), k and v (64 x \p BlockN) with the 128-byte swizzle, rows past the
/// sequence zero-filled. Returns empty, or why the driver refused a map (an
/// unusual stride); the caller then runs another kernel. Needs the driver.
std::string makeSm90Maps(const CallShape &C, const ForwardTensors &T,
                         int BlockM, int BlockN, attnc::Sm90Maps &Out);

/// Fills \p Out with the maps of paged prefill's fwd_sm90 kernel: q packed
/// [TotalQ, H, D] as a packed call's (boxes of \p BlockM rows), and the
/// caches \p KData and \p VData of geometries \p K and \p V as 4-D tensors
/// [pages][slots][heads][dim] (boxes of min(page size, \p BlockN) slots of
/// one page and head). As makeSm90Maps, empty or why the driver refused
/// one.
std::string makeSm90PagedMaps(const CallShape &C, const TensorView &Q,
                              const PageGeometry &K, const void *KData,
                              int64_t HeadDim, const PageGeometry &V,
                              const void *VData, int64_t HeadDimV, int BlockM,
                              int BlockN, attnc::Sm90Maps &Out);

/// Fills \p Out with the tensor maps of q and dout for the warp-specialised
/// bwd_sm90 (boxes of 64 columns x \p BlockM rows); as makeSm90Maps, empty
/// or why the driver refused one.
std::string makeSm90BwdMaps(const BackwardCallShape &S, const BackwardTensors &T,
                            int BlockM, attnc::Sm90BwdMaps &Out);

/// One tensor's description, as makeSm90Maps gives it to the driver: the
/// dims and byte strides in TMA order (head dim first, then sequence, heads
/// and batch sorted by stride, extent-1 dims last) and the slot of each of
/// the sequence, head and batch indices (Sm90Maps::*_pos). Exposed for
/// tests.
struct TmaLayout {
  uint64_t Dims[4];
  uint64_t Strides[3]; ///< bytes, of dims 1..3
  uint32_t Box[4];
  int Pos; ///< slot of seq in bits 0-1, heads 2-3, batch 4-5
};
TmaLayout tmaLayout(int64_t HeadDim, int64_t Seq, int64_t Heads, int64_t Batch,
                    const int64_t (&StridesBHS)[3], int BoxRows);

} // namespace attn::runtime

#endif
