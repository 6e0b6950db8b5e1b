// paged_append: new K/V tokens copied into the pages of a cache by a slot
// mapping (slot = page · page_size + position in the page), one CTA per
// token and KV head, 16 bytes a thread. A negative slot (padding) or one
// past the cache is skipped.
#ifndef ATTNC_PAGED_APPEND_CUH
#define ATTNC_PAGED_APPEND_CUH

#include "attnc/decode_args.cuh"

namespace attnc {

template <class Slot> __device__ void paged_append(const PagedAppendArgs &a) {
  const int t = blockIdx.x, h = blockIdx.y, c = threadIdx.x;
  const long long slot = static_cast<const Slot *>(a.slots)[t];
  if (slot < 0 || slot >= a.num_slots)
    return;
  const long long page = slot >> a.page_shift;
  const long long pos = slot & ((1LL << a.page_shift) - 1);
  if (c < a.d_chunks) {
    const uint4 x = *reinterpret_cast<const uint4 *>(
        static_cast<const unsigned short *>(a.k) + t * a.k_st + h * a.k_sh + c * 8);
    *reinterpret_cast<uint4 *>(static_cast<unsigned short *>(a.k_cache) +
                               page * a.kc_ps + pos * a.kc_ss + h * a.kc_sh + c * 8) = x;
  }
  if (c < a.dv_chunks) {
    const uint4 x = *reinterpret_cast<const uint4 *>(
        static_cast<const unsigned short *>(a.v) + t * a.v_st + h * a.v_sh + c * 8);
    *reinterpret_cast<uint4 *>(static_cast<unsigned short *>(a.v_cache) +
                               page * a.vc_ps + pos * a.vc_ss + h * a.vc_sh + c * 8) = x;
  }
}

} // namespace attnc

#endif
