// fwd_sm90's persistent walk over a packed call's tiles (attnc_fwd_packed):
// the tile slot's packed facts, the tile search of a warp's lanes (run by
// attnc_fwd_packed_tiles before the walk) and the producer, defined out of
// the FwdSm90Persist
// struct; included by fwd_sm90_persist.cuh only, inside its
// ATTNC_FWD_SM90_PERSIST_TEMPLATE / ATTNC_FWD_SM90_PERSIST macros.
#ifndef ATTNC_FWD_SM90_PERSIST_PACKED_CUH
#define ATTNC_FWD_SM90_PERSIST_PACKED_CUH

namespace attnc {

ATTNC_FWD_SM90_PERSIST_TEMPLATE
__device__ __forceinline__ void ATTNC_FWD_SM90_PERSIST::put_packed(u32 slot,
                                                                  const PackedTile &p) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(slot), "r"(p.bh),
               "r"(p.m_block), "r"(p.first), "r"(p.count)
               : "memory");
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(slot + 16), "r"(p.full),
               "r"(p.q0), "r"(p.q1), "r"(p.kv0)
               : "memory");
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(slot + 32), "r"(p.kv1) : "memory");
}
ATTNC_FWD_SM90_PERSIST_TEMPLATE
__device__ __forceinline__ typename ATTNC_FWD_SM90_PERSIST::PackedTile
ATTNC_FWD_SM90_PERSIST::get_packed(u32 slot) {
  PackedTile p;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(p.bh), "=r"(p.m_block), "=r"(p.first), "=r"(p.count)
               : "r"(slot)
               : "memory");
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(p.full), "=r"(p.q0), "=r"(p.q1), "=r"(p.kv0)
               : "r"(slot + 16)
               : "memory");
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(p.kv1) : "r"(slot + 32) : "memory");
  return p;
}

ATTNC_FWD_SM90_PERSIST_TEMPLATE
__device__ __forceinline__ typename ATTNC_FWD_SM90_PERSIST::PackedTile
ATTNC_FWD_SM90_PERSIST::packed_tile(const FwdArgs &a, const typename Variant::Inputs &in0,
                                    int t) {
  const int lane = threadIdx.x % 32;
  const int h = t % a.heads;
  const PackedBlock pb =
      packed_block_of(a.cu_seqlens_q, a.batch, kBlockM, (long long)(t / a.heads),
                      WarpLanes{lane});
  if (pb.seq < 0)
    return {-1};
  const int q0 = a.cu_seqlens_q[pb.seq], q1 = a.cu_seqlens_q[pb.seq + 1];
  const int kv0 = a.cu_seqlens_kv[pb.seq], kv1 = a.cu_seqlens_kv[pb.seq + 1];
  const SeqSpan sp = packed_span(q0, q1, kv0, kv1, a.total_q, a.heads, h);
  PackedTile p{pb.seq * a.heads + h,
               (sp.seq_q + kBlockM - 1) / kBlockM - 1 - pb.index,
               0,
               (sp.seq_kv + kBlockN - 1) / kBlockN,
               0u,
               q0,
               q1,
               kv0,
               kv1};
  if constexpr (Variant::kHasMask && kPackedWalk) {
    const auto &in = sequence_inputs(in0, sp);
    const int2 range = key_block_range<Variant, kBlockM, kBlockN>(in, pb.seq, h, p.m_block, sp);
    p.first = range.x;
    p.count = range.y - range.x;
    const int block = p.first + lane;
    p.full = __ballot_sync(0xffffffffu,
                           lane < p.count && tile_full<Variant, kBlockM, kBlockN>(
                                                 in, pb.seq, h, p.m_block * kBlockM,
                                                 block * kBlockN, sp));
  }
  return p;
}

ATTNC_FWD_SM90_PERSIST_TEMPLATE
__device__ void ATTNC_FWD_SM90_PERSIST::produce_packed(const FwdArgs &a,
                                                     const Sm90Maps &maps, int tiles, u32 base,
                                                     u32 bar_q, u32 bar_full, u32 bar_empty,
                                                     u32 bar_qfree) {
  const bool leader = threadIdx.x == 0;
  if (leader) {
    tma_prefetch_desc(&maps.q);
    tma_prefetch_desc(&maps.k);
    tma_prefetch_desc(&maps.v);
  }
  auto take = [&]() {
    int taken = 0;
    if (leader)
      taken = atomicAdd(a.tile_counter, 1);
    const int t = gridDim.x + __shfl_sync(0xffffffffu, taken, 0);
    return t < tiles ? load_packed(a, t) : PackedTile{-1};
  };
  int n = 0;
  for (int loaded = 0;; ++loaded) {
    const PackedTile p = loaded == 0 ? ((int)blockIdx.x < tiles ? load_packed(a, blockIdx.x)
                                                                : PackedTile{-1})
                                     : take();
    wait_slot_free(bar_qfree, loaded);
    if (leader)
      put_packed(tile_slot(base, loaded), p);
    if (p.bh < 0 || p.count <= 0) {
      if (leader)
        mbar_arrive(q_bar(bar_q, bar_qfree, loaded));
      if (p.bh < 0)
        break;
      continue;
    }
    const Visits vis{p.count, p.first, nullptr};
    const int h = p.bh % a.heads;
    const int hk = h / (a.heads / a.heads_kv);
    const SeqSpan sp = packed_span(p.q0, p.q1, p.kv0, p.kv1, a.total_q, a.heads, h);
    // A packed call's maps have one batch of all tokens (FwdSm90::produce).
    if (leader)
      Fwd::load_q(maps, sp, p.m_block, h, 0, q_slot(base, loaded),
                  q_bar(bar_q, bar_qfree, loaded));
    for (int j = 0; j < vis.count; ++j, ++n) {
      wait_stage_free(bar_empty, n);
      if (leader)
        load_block(maps, sp, vis, j, n, hk, 0, base, bar_full);
    }
  }
  if (leader)
    walk_done(a);
}

} // namespace attnc

#endif
