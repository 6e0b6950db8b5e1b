// fwd_sm90's persistent form (config suffix "p"): a grid of one CTA per SM
// that walks the dense call's (query block, batch·head) tiles, for calls
// whose CTAs each have little work (short sequences, masks that keep a
// few key blocks a row), where a CTA's fixed costs (its start, the first
// Q and K/V latency, the epilogue's stores) would otherwise dominate.
// The producer runs ahead across tiles: it loads the next tile's Q as soon
// as both consumers have issued their last S = Q·Kᵀ of the current one
// (O is staged in a buffer of its own, not in Q's tile), and its K/V ring
// and mbarrier phases carry on from tile to tile, so the next tile's loads
// overlap the current tile's last P·V and epilogue. The per-block step,
// the Q load and the epilogue are FwdSm90's. Paged calls run the plain
// kernel.
// A masked variant takes its tiles in the walk's order from a counter
// (FwdArgs::tile_counter, which it needs) instead of by the grid's
// stride: tiles of a
// mask differ in their key blocks, and a fixed stride can hand one CTA
// only heavy tiles (chunks of 256 at S = 16k: every CTA of one parity
// gets the chunks' second query blocks, two key blocks each, the others
// one). The producer takes the next tile and passes it to the consumers
// through shared memory with Q's barrier. The taken walk also keeps two
// Q tiles (where the stride's walk has Q and O): tile k's Q goes to slot
// k mod 2, and its O is staged in its own slot's rows once its last S is
// done, as in the plain kernel, so that the producer loads the next
// tile's Q as soon as the tile before the current one is stored, a tile
// ahead of the stride's walk (which waits for the current tile's last S).
// A packed call (cu_seqlens) walks the (query block a sequence has, head)
// tiles of the plain kernel's packed grid the same way, taken from the
// counter. Each tile's sequence, query block and key-block range are found
// by a warp's votes (packed_block_of, key_block_range) before the walk, in
// a kernel of a warp a tile (attnc_fwd_packed_tiles, into
// FwdArgs::packed_tiles); warp 0 of the walk reads a taken tile's facts
// and hands them to the consumers in the tile's slot; its lane 0 issues
// the loads. Its entry, attnc_fwd_packed, is a kernel of its
// own (the dense kernel's registers and code stay as they were), in the
// modules of unmasked variants and masks the analysis bounds from the box
// alone (kPackedWalk); the others' range needs the whole CTA, and the host
// keeps them on the plain kernel. The packed walk's producer and tile
// search are in fwd_sm90_persist_packed.cuh.
#ifndef ATTNC_FWD_SM90_PERSIST_CUH
#define ATTNC_FWD_SM90_PERSIST_CUH

namespace attnc {

/// kQTiles: 2, Q and O in tiles of their own (the taken walks: two Q
/// tiles, each hand-over's O staged in its own), or 1, O staged in Q's tile
/// and the next tile's Q loaded once it is stored (config "p1"), which
/// leaves room for a third stage at d128.
template <class Fwd, int kQTiles = 2> struct FwdSm90Persist;

/// Whether a packed call's tiles may be walked: unmasked, or a mask the
/// analysis bounds from the box alone (an unmasked variant has no mask
/// members to ask).
template <class Variant, bool = Variant::kHasMask> struct PackedWalkable {
  static constexpr bool value = true;
};
template <class Variant> struct PackedWalkable<Variant, true> {
  static constexpr bool value = Variant::kMaskAnalysed && Variant::kMaskBounds == 0;
};

template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN, int kStages,
          int kQTiles>
struct FwdSm90Persist<FwdSm90<Variant, T, kD, kDV, kBlockM, kBlockN, kStages>, kQTiles> {
  static_assert(kQTiles == 1 || kQTiles == 2, "one Q tile (O staged in it) or Q and O");
  using Fwd = FwdSm90<Variant, T, kD, kDV, kBlockM, kBlockN, kStages>;
  using Visits = typename Fwd::Visits;
  static constexpr int kConsumers = Fwd::kConsumers;
  static constexpr int NT = Fwd::NT;
  static constexpr int VT = Fwd::VT;
  static constexpr int kQSlab = Fwd::kQSlab, kKVSlab = Fwd::kKVSlab;
  static constexpr int kQBytes = Fwd::kQBytes, kKBytes = Fwd::kKBytes;
  static constexpr int kStageBytes = Fwd::kStageBytes;
  // Shared memory: Q, O (the epilogue's staging, laid out as Q's slabs; in
  // Q's tile with one Q tile), then per stage K and V, then the mbarriers.
  static constexpr int kOOffset = kQTiles == 2 ? kQBytes : 0;
  static constexpr int kKVOffset = kQTiles * kQBytes;
  static constexpr int kBarOffset = kKVOffset + kStages * kStageBytes;
  /// Sm90Config::sharedBytes with Persistent says the same.
  static constexpr int kSmemBytes = 1024 + kBarOffset + 256;
  static_assert(32 + 16 * kStages <= 128, "the taken walk's tile slots fit beside the mbarriers");
  /// Whether a packed call may walk: its tiles' key-block ranges come from
  /// one warp's votes (key_block_range without a CTA-wide scan).
  static constexpr bool kPackedWalk = PackedWalkable<Variant>::value;
  /// The packed walk's producer warp finds each tile's sequence and range
  /// (a chunked mask's box classes divide): in 24 registers it spilled.
  static constexpr int kPackedProducerRegs = 40, kPackedConsumerRegs = 232;
  /// setmaxnreg moves registers within the CTA's allocation at launch
  /// (168 a thread at 384 threads); a consumer asking for more than the
  /// producer gave back would wait for ever.
  static_assert(kConsumers != 2 || 128 * kPackedProducerRegs + 256 * kPackedConsumerRegs <=
                                       384 * (65536 / 384 / 8 * 8),
                "the packed walk's register split fits the CTA's allocation");

  /// The walks: by the grid's stride (unmasked dense calls), tiles taken
  /// from FwdArgs::tile_counter (masked dense calls), and the packed walk
  /// (taken, each tile's facts handed over in its slot).
  enum class Walk { Stride, Taken, Packed };

  /// One tile: its query block and batch·head.
  struct Tile {
    int m_block, bh;
  };
  /// Tile \p t of the walk. Groups of G batch·heads, G the grid's size over
  /// the query blocks (rounded up): within a group, the last query block of
  /// every batch·head first, then the one before, so that the grid's CTAs
  /// work at once on about one group, whose K and V stay in L2, and that the
  /// stride of the grid hands each CTA query blocks of every position (a
  /// causal-like mask's long and short rows alike).
  __device__ static __forceinline__ Tile tile_of(int t, int m_blocks, int bhs) {
    const int g = max(1, (int)((gridDim.x + m_blocks - 1) / m_blocks));
    const int group = t / (g * m_blocks);
    const int first = group * g;
    const int in_group = min(g, bhs - first);
    const int r = t - group * g * m_blocks;
    return {m_blocks - 1 - r / in_group, first + r % in_group};
  }
  /// The key blocks tile \p tl visits (the dense path of FwdSm90::body).
  __device__ static __forceinline__ Visits visits(const FwdArgs &a, const SeqSpan &sp,
                                                  const Tile &tl) {
    Visits vis{(sp.seq_kv + kBlockN - 1) / kBlockN, 0, nullptr};
    if constexpr (Variant::kHasMask) {
      const long long group = mask_group(a.mask_grouping, tl.bh, a.heads);
      const long long row = group * a.m_blocks + tl.m_block;
      vis.count = a.block_count[row];
      vis.list = a.block_list + row * a.n_blocks;
    }
    return vis;
  }
  __device__ static __forceinline__ SeqSpan span_of(const FwdArgs &a, int bh) {
    return seq_span(nullptr, nullptr, a.total_q, a.batch, a.heads, a.seq_q, a.seq_kv,
                    bh / a.heads, bh % a.heads);
  }

  /// A dense call (attnc_fwd).
  __device__ static void run(const FwdArgs &a, const typename Variant::Inputs &in,
                             const Sm90Maps &maps, unsigned char *smem) {
    const u32 base = init_barriers(smem, Variant::kHasMask);
    const int tiles = a.m_blocks * a.batch * a.heads;
    walk<Variant::kHasMask ? Walk::Taken : Walk::Stride>(a, in, maps, tiles, base);
  }

  /// A packed call (attnc_fwd_packed, in the modules of variants that
  /// kPackedWalk allows): the plain kernel's packed grid, (blocks, heads),
  /// as tiles.
  __device__ static void run_packed(const FwdArgs &a, const typename Variant::Inputs &in,
                                    const Sm90Maps &maps, unsigned char *smem) {
    static_assert(kPackedWalk, "a packed walk needs a range from one warp's votes");
    const u32 base = init_barriers(smem, true);
    walk<Walk::Packed>(a, in, maps, packed_tiles(a), base);
  }

  /// The tiles of a packed call's walk: the plain kernel's packed grid,
  /// (blocks, heads).
  __device__ static __forceinline__ int packed_tiles(const FwdArgs &a) {
    return int(packed_block_bound(a.total_q, a.batch, kBlockM, a.seq_q) * a.heads);
  }

  /// attnc_fwd_packed_tiles: packed_tile of every tile of the walk into
  /// a.packed_tiles, a warp a tile, before the walk. The search (the
  /// sequence of a block, its key-block range and full blocks) is code the
  /// producer would otherwise run for every tile it takes: kept out of the
  /// walk's kernel, the consumers' loop keeps the instruction cache (ncu:
  /// "no instruction" stalls 15% of the packed walk's samples against 2.5%
  /// of the dense walk's, which has no search).
  __device__ static void find_packed_tiles(const FwdArgs &a,
                                           const typename Variant::Inputs &in) {
    const int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (t >= packed_tiles(a))
      return; // the whole warp: t is the warp's
    const PackedTile p = packed_tile(a, in, t);
    if (threadIdx.x % 32 == 0) {
      int4 *out = reinterpret_cast<int4 *>(a.packed_tiles) + t * (kPackedTileInts / 4);
      out[0] = make_int4(p.bh, p.m_block, p.first, p.count);
      out[1] = make_int4(int(p.full), p.q0, p.q1, p.kv0);
      out[2] = make_int4(p.kv1, 0, 0, 0);
    }
  }

  /// The mbarriers (the taken walks' second Q slot's where \p taken), then
  /// a CTA barrier; returns the shared memory's 1024-aligned base.
  __device__ static __forceinline__ u32 init_barriers(unsigned char *smem, bool taken) {
    const u32 base = (smem_addr(smem) + 1023u) & ~1023u;
    const u32 bar_q = base + kBarOffset;
    const u32 bar_full = bar_q + 8;               // [kStages]
    const u32 bar_empty = bar_full + 8 * kStages; // [kStages]
    const u32 bar_qfree = bar_empty + 8 * kStages;
    if (threadIdx.x == 0) {
      mbar_init(bar_q, 1);
      for (int s = 0; s < kStages; ++s) {
        mbar_init(bar_full + 8 * s, 1);
        mbar_init(bar_empty + 8 * s, 4 * kConsumers); // one arrival per consumer warp
      }
      mbar_init(bar_qfree, 4 * kConsumers);
      if (taken) {
        mbar_init(bar_qfree + 8, 1);                 // the taken walk's Q slot 1
        mbar_init(bar_qfree + 16, 4 * kConsumers);
      }
      mbar_init_fence();
    }
    __syncthreads();
    return base;
  }

  /// The producer and the consumers of walk \p W over \p tiles tiles.
  template <Walk W>
  __device__ static __forceinline__ void walk(const FwdArgs &a,
                                              const typename Variant::Inputs &in,
                                              const Sm90Maps &maps, int tiles, u32 base) {
    const u32 bar_q = base + kBarOffset;
    const u32 bar_full = bar_q + 8;               // [kStages]
    const u32 bar_empty = bar_full + 8 * kStages; // [kStages]
    const u32 bar_qfree = bar_empty + 8 * kStages;
    const int wg = threadIdx.x / 128;
    // The packed walk's producer (its tile facts), and the one-Q-tile
    // producer's early K/V, need more registers than the plain kernel's.
    constexpr bool kWideProducer = W == Walk::Packed || kQTiles == 1;
    if (wg == 0) {
      if constexpr (kConsumers == 2)
        setmaxnreg_dec<kWideProducer ? kPackedProducerRegs : Fwd::kProducerRegs>();
      // The packed walk's tile facts take warp 0's votes.
      if constexpr (W == Walk::Packed) {
        if (threadIdx.x < 32)
          produce_packed(a, maps, tiles, base, bar_q, bar_full, bar_empty, bar_qfree);
      } else if (threadIdx.x == 0) {
        produce<W>(a, maps, tiles, base, bar_q, bar_full, bar_empty, bar_qfree);
      }
    } else {
      if constexpr (kConsumers == 2)
        setmaxnreg_inc<kWideProducer ? kPackedConsumerRegs : Fwd::kConsumerRegs>();
      consume<W>(a, in, tiles, base, bar_q, bar_full, bar_empty, bar_qfree, wg - 1);
    }
  }

  /// The taken walk's tile of hand-over \p k: two slots of 48 bytes
  /// beside the mbarriers, written before the arrival on its Q barrier that
  /// hands it over and read after the wait for it: the tile's index (-1:
  /// the walk is over), or in the packed walk its facts (PackedTile).
  static constexpr int kSlotBytes = 48;
  static_assert(128 + 2 * kSlotBytes <= 256, "the tile slots fit the mbarriers' 256 bytes");
  __device__ static __forceinline__ u32 tile_slot(u32 base, int k) {
    return base + kBarOffset + 128 + kSlotBytes * (k & 1);
  }
  /// The taken walk's Q slot of hand-over \p k (its O staged there too),
  /// the barrier its Q lands on and the one its consumers free it on
  /// (slot 0: bar_q and bar_qfree; slot 1: the two after bar_qfree); each
  /// completes once per kQTiles hand-overs, in phase q_phase(k).
  __device__ static __forceinline__ u32 q_slot(u32 base, int k) {
    return base + (k % kQTiles) * kQBytes;
  }
  __device__ static __forceinline__ u32 q_bar(u32 bar_q, u32 bar_qfree, int k) {
    return k % kQTiles ? bar_qfree + 8 : bar_q;
  }
  __device__ static __forceinline__ u32 qfree_bar(u32 bar_qfree, int k) {
    return k % kQTiles ? bar_qfree + 16 : bar_qfree;
  }
  __device__ static __forceinline__ int q_phase(int k) { return (k / kQTiles) & 1; }
  /// The producer's wait before hand-over \p k: its slots are free once
  /// the consumers have stored the tile kQTiles hand-overs back, whose O
  /// they staged in that Q slot.
  __device__ static __forceinline__ void wait_slot_free(u32 bar_qfree, int k) {
    if (k >= kQTiles)
      mbar_wait(qfree_bar(bar_qfree, k), q_phase(k - kQTiles));
  }
  /// The producer's wait before filling stage n % kStages for key block
  /// \p n of its walk: from the second round of the ring on, until the
  /// consumers have released the block kStages before.
  __device__ static __forceinline__ void wait_stage_free(u32 bar_empty, int n) {
    if (n >= kStages)
      mbar_wait(bar_empty + 8 * (n % kStages), ((n / kStages) + 1) & 1);
  }
  __device__ static __forceinline__ void put_tile(u32 slot, int t) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(slot), "r"(t) : "memory");
  }
  __device__ static __forceinline__ int get_tile(u32 slot) {
    int t;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(t) : "r"(slot) : "memory");
    return t;
  }
  /// A packed tile as handed over: its batch·head (bh = sequence · heads +
  /// head; -1: the walk is over), query block and key-block range, which
  /// of the range's first 32 blocks are full (bit j: block first + j;
  /// tile_full's answer, found by the producer's lanes so that the
  /// consumers' steps need not divide), and its sequence's tokens (so that
  /// the consumers need not load cu_seqlens).
  struct PackedTile {
    int bh, m_block, first, count;
    unsigned full;
    int q0, q1, kv0, kv1;
  };
  __device__ static __forceinline__ void put_packed(u32 slot, const PackedTile &p);
  __device__ static __forceinline__ PackedTile get_packed(u32 slot);
  /// Packed tile \p t of the walk (t = block · heads + head over the plain
  /// kernel's packed grid, so that a group's heads, which share their keys,
  /// are taken together): its sequence and query block (longest first
  /// within the sequence, as the plain kernel's), the key blocks it visits
  /// and which are full, and the sequence's tokens. bh = -1 past the
  /// sequences' blocks, which end the walk (the tiles are taken in
  /// increasing order). A warp's lanes call it, converged
  /// (find_packed_tiles).
  __device__ static __forceinline__ PackedTile packed_tile(const FwdArgs &a,
                                                           const typename Variant::Inputs &in0,
                                                           int t);
  /// Tile \p t's facts as find_packed_tiles wrote them (every lane reads
  /// the same 48 bytes).
  __device__ static __forceinline__ PackedTile load_packed(const FwdArgs &a, int t) {
    static_assert(kPackedTileInts == 12, "three 16-byte loads a tile");
    const int4 *at = reinterpret_cast<const int4 *>(a.packed_tiles) + t * (kPackedTileInts / 4);
    const int4 x = at[0], y = at[1], z = at[2];
    return {x.x, x.y, x.z, x.w, unsigned(y.x), y.y, y.z, y.w, z.x};
  }

  /// The producer of a dense walk: one thread issues every TMA load of
  /// every tile. \p n counts the K/V blocks loaded so far (the ring's
  /// position and phase), \p loaded the tiles whose Q was loaded (bar_q's
  /// and bar_qfree's phase). Taken (Walk::Taken): every tile, the last (-1)
  /// included, is handed over on its slot's Q barrier, with its Q or (no
  /// key block to visit) by a plain arrival, and \p loaded counts the
  /// hand-overs.
  template <Walk W>
  __device__ static void produce(const FwdArgs &a, const Sm90Maps &maps, int tiles, u32 base,
                                 u32 bar_q, u32 bar_full, u32 bar_empty, u32 bar_qfree) {
    constexpr bool kTaken = W == Walk::Taken;
    tma_prefetch_desc(&maps.q);
    tma_prefetch_desc(&maps.k);
    tma_prefetch_desc(&maps.v);
    const int bhs = a.batch * a.heads;
    int n = 0, loaded = 0;
    // With one Q tile, hand-over k's Q and any arrival for it wait for the
    // consumers to have stored hand-over k - 1 (the Q barrier must not run
    // two phases ahead of them); its first stages' K/V need not.
    auto wait_q_free = [&]() {
      if constexpr (kQTiles == 1)
        if (loaded > 0)
          mbar_wait(bar_qfree, (loaded - 1) & 1);
    };
    for (int t = blockIdx.x; kTaken || t < tiles; t += gridDim.x) {
      if constexpr (kTaken) {
        if (loaded > 0)
          t = gridDim.x + atomicAdd(a.tile_counter, 1);
        if constexpr (kQTiles == 2)
          wait_slot_free(bar_qfree, loaded);
        // Tile slot k & 1 was last read after hand-over k - 2's Q, which
        // the consumers freed before hand-over k - 1 was loaded.
        put_tile(tile_slot(base, loaded), t < tiles ? t : -1);
        if (t >= tiles) {
          wait_q_free();
          mbar_arrive(q_bar(bar_q, bar_qfree, loaded));
          break;
        }
      }
      const Tile tl = tile_of(t, a.m_blocks, bhs);
      const SeqSpan sp = span_of(a, tl.bh);
      const Visits vis = visits(a, sp, tl);
      if (vis.count <= 0) {
        if constexpr (kTaken || kQTiles == 1) {
          // Handed over without a Q (with one Q tile its consumers stage
          // zeros in Q's tile).
          wait_q_free();
          mbar_arrive(q_bar(bar_q, bar_qfree, loaded));
          ++loaded;
        }
        continue;
      }
      const int h = tl.bh % a.heads, b = tl.bh / a.heads;
      const int hk = h / (a.heads / a.heads_kv);
      // With one Q tile the first stages' K/V go before Q, under the end
      // of the tile before (their stages were released by its last P·V).
      const int early = kQTiles == 1 ? min(vis.count, kStages) : 0;
      int j = 0;
      for (; j < early; ++j, ++n) {
        wait_stage_free(bar_empty, n);
        load_block(maps, sp, vis, j, n, hk, b, base, bar_full);
      }
      // Q's tile is free once both consumers' last S of the tile before
      // has completed (with one Q tile: once they have stored its O).
      if constexpr (kTaken) {
        wait_q_free();
        Fwd::load_q(maps, sp, tl.m_block, h, b, q_slot(base, loaded),
                    q_bar(bar_q, bar_qfree, loaded));
      } else {
        if (loaded > 0)
          mbar_wait(bar_qfree, (loaded - 1) & 1);
        Fwd::load_q(maps, sp, tl.m_block, h, b, base, bar_q);
      }
      ++loaded;
      for (; j < vis.count; ++j, ++n) {
        wait_stage_free(bar_empty, n);
        load_block(maps, sp, vis, j, n, hk, b, base, bar_full);
      }
    }
    if constexpr (kTaken)
      walk_done(a);
  }

  /// Block \p j of \p vis into the ring's stage of position \p n (its
  /// stage is free), with K/V head \p hk and TMA batch \p b.
  __device__ static __forceinline__ void load_block(const Sm90Maps &maps, const SeqSpan &sp,
                                                    const Visits &vis, int j, int n, int hk,
                                                    int b, u32 base, u32 bar_full) {
    const int stage = n % kStages;
    bool full;
    const int row = sp.kv0 + Fwd::block_of(vis, sp, Fwd::entry_of(vis, j), full) * kBlockN;
    const u32 bar = bar_full + 8 * stage;
    const u32 s_k = base + kKVOffset + stage * kStageBytes;
    mbar_arrive_expect_tx(bar, kStageBytes);
    Fwd::load_kv(maps, row, hk, b, s_k, bar);
  }

  /// A taken walk's end on this CTA (one thread): the last CTA to finish
  /// taking puts the counters back to 0 for the next launch (on the same
  /// stream, so after this one); every other CTA counted itself done after
  /// its last take.
  __device__ static __forceinline__ void walk_done(const FwdArgs &a) {
    __threadfence();
    if (atomicAdd(a.tile_counter + 1, 1) == (int)gridDim.x - 1) {
      atomicExch(a.tile_counter, 0);
      atomicExch(a.tile_counter + 1, 0);
    }
  }

  /// The packed walk's producer: warp 0's lanes read each taken tile's
  /// facts from a.packed_tiles (load_packed), lane 0 alone issuing the
  /// loads and arrivals; otherwise the taken walk's producer.
  __device__ static void produce_packed(const FwdArgs &a,
                                        const Sm90Maps &maps, int tiles, u32 base, u32 bar_q,
                                        u32 bar_full, u32 bar_empty, u32 bar_qfree);

  /// One consumer warpgroup (\p wgc of kConsumers), 64 query rows of every
  /// tile; the same walk, counters and turns as the producer's (taken: the
  /// tile of each hand-over read from its slot once its Q barrier
  /// completes, Q and the staged O in its Q slot, which the consumers free
  /// after its epilogue).
  template <Walk W>
  __device__ static void consume(const FwdArgs &a, const typename Variant::Inputs &in0,
                                 int tiles, u32 base, u32 bar_q, u32 bar_full, u32 bar_empty,
                                 u32 bar_qfree, int wgc) {
    constexpr bool kTaken = W != Walk::Stride, kPacked = W == Walk::Packed;
    const int bhs = a.batch * a.heads;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    // Descriptors as 64-bit values; one k16 step moves the start address
    // (the low field, in 16-byte units) within the swizzle atom.
    const u64 q_desc = wgmma_desc_sw128(base + wgc * 64 * 128, 16, 1024);
    const u64 k_desc0 = wgmma_desc_sw128(base + kKVOffset, 16, 1024);
    const u64 v_desc0 = wgmma_desc_sw128(base + kKVOffset + kKBytes, kKVSlab, 1024);
    int n = 0, loaded = 0;
    for (int t = blockIdx.x; kTaken || t < tiles; t += gridDim.x) {
      Tile tl;
      SeqSpan sp;
      Visits vis;
      unsigned full_bits = 0;
      if constexpr (kPacked) {
        mbar_wait(q_bar(bar_q, bar_qfree, loaded), q_phase(loaded));
        const PackedTile p = get_packed(tile_slot(base, loaded));
        if (p.bh < 0)
          break;
        tl = {p.m_block, p.bh};
        sp = packed_span(p.q0, p.q1, p.kv0, p.kv1, a.total_q, a.heads, p.bh % a.heads);
        vis = {p.count, p.first, nullptr};
        full_bits = p.full;
      } else {
        if constexpr (kTaken) {
          mbar_wait(q_bar(bar_q, bar_qfree, loaded), q_phase(loaded));
          t = get_tile(tile_slot(base, loaded));
          if (t < 0)
            break;
        }
        tl = tile_of(t, a.m_blocks, bhs);
        sp = span_of(a, tl.bh);
        vis = visits(a, sp, tl);
      }
      // Q's tile, and O's staging. The stride walk with one Q tile hands
      // every tile over on bar_q (one without keys by a plain arrival).
      constexpr bool kHandOver = kTaken || kQTiles == 1;
      const u32 q_at = kTaken ? q_slot(base, loaded) : base;
      const u32 o_at = kTaken ? q_at : base + kOOffset;
      if constexpr (!kTaken && kQTiles == 1)
        mbar_wait(bar_q, loaded & 1);
      const auto &in = sequence_inputs(in0, sp);
      const int count = vis.count;
      const int b = tl.bh / a.heads, h = tl.bh % a.heads;
      const int row0 = tl.m_block * kBlockM + wgc * 64 + warp * 16 + g;

      float acc_o[VT][4];
      typename Variant::RowState st[2];
      bool seen[2];
      Fwd::start_rows(acc_o, st, seen);

      if (count > 0) {
        float acc_s[NT][4];
        zero_tiles(acc_s); // overwritten by the first k step; defined for the compiler
        u32 pf[kBlockN / 16][4];
        float o_scale[2];

        auto issue_s = [&](int stage) {
          Fwd::issue_s(acc_s, q_desc + ((q_at - base) >> 4), k_desc0, stage);
        };
        auto issue_pv = [&](int stage) { Fwd::issue_pv(acc_o, pf, v_desc0, stage); };
        // Ping-pong as in FwdSm90::consume; each tile's turns end even.
        auto turn_begin = [&]() { Fwd::turn_begin(wgc); };
        auto turn_end = [&](bool hand_over) { Fwd::turn_end(wgc, hand_over); };
        auto softmax = [&](int e) {
          fence_regs(acc_s);
          bool full;
          const int col0 = Fwd::block_of(vis, sp, e, full) * kBlockN;
          // A packed tile has no list: the analysis proves its full blocks
          // (the producer's for the first 32).
          if constexpr (kPacked && Variant::kHasMask) {
            const int j = e - vis.first;
            full = j < 32 ? (full_bits >> j) & 1
                          : tile_full<Variant, kBlockM, kBlockN>(in, b, h, tl.m_block * kBlockM,
                                                                 col0, sp);
          }
          if (full)
            Fwd::template step<true>(in, sp.seq_kv, acc_s, st, seen, o_scale, b, h,
                                     row0 + sp.shift, col0, tq);
          else
            Fwd::template step<false>(in, sp.seq_kv, acc_s, st, seen, o_scale, b, h,
                                      row0 + sp.shift, col0, tq);
        };
        auto rescale_and_pack = [&]() { Fwd::rescale_and_pack(acc_o, acc_s, pf, o_scale); };
        // One arrival per warp on \p bar: the warp's reads of what it
        // guards (a stage's K and V, or Q) are complete.
        auto arrive = [&](u32 bar) {
          __syncwarp();
          if (lane == 0)
            mbar_arrive(bar);
        };
        auto release = [&](int stage) {
          fence_regs(acc_o);
          arrive(bar_empty + 8 * stage);
        };

        if constexpr (!kHandOver)
          mbar_wait(bar_q, loaded & 1);
        if constexpr (kConsumers == 2)
          if (wgc == 1)
            named_bar_arrive(1, 256);
        int e = Fwd::entry_of(vis, 0);
        mbar_wait(bar_full + 8 * (n % kStages), (n / kStages) & 1);
        turn_begin();
        wgmma_fence();
        issue_s(n % kStages);
        turn_end(true);
        wgmma_wait<0>();
        if constexpr (!kHandOver)
          if (count == 1)
            arrive(bar_qfree);
        softmax(e);
        rescale_and_pack();
        for (int j = 1; j < count; ++j) {
          const int stage = (n + j) % kStages;
          const int prev = (n + j - 1) % kStages;
          e = Fwd::entry_of(vis, j);
          mbar_wait(bar_full + 8 * stage, ((n + j) / kStages) & 1);
          turn_begin();
          wgmma_fence();
          issue_s(stage);
          issue_pv(prev);
          turn_end(true);
          wgmma_wait<1>();
          if constexpr (!kHandOver)
            if (j == count - 1)
              arrive(bar_qfree); // the tile's last S is complete: the next Q may land
          softmax(e);
          wgmma_wait<0>();
          release(prev);
          rescale_and_pack();
        }
        turn_begin();
        wgmma_fence();
        issue_pv((n + count - 1) % kStages);
        turn_end(wgc == 0);
        wgmma_wait<0>();
        release((n + count - 1) % kStages);
        n += count;
        if constexpr (!kHandOver)
          ++loaded;
      }
      // The warpgroup's reads of its O staging for the tile before are done.
      named_bar_sync(3 + wgc, 128);
      Fwd::epilogue(a, in, sp, acc_o, st, seen, b, h, row0, tq, o_at, wgc);
      if constexpr (kHandOver) {
        // The slots of this hand-over are free once every consumer warp has
        // read its staged O back; the next Q comes by the async proxy.
        fence_proxy_async_shared();
        __syncwarp();
        if (lane == 0)
          mbar_arrive(qfree_bar(bar_qfree, loaded));
        ++loaded;
      }
    }
  }
};

} // namespace attnc

// The packed walk's members, defined out of the struct.
#define ATTNC_FWD_SM90_PERSIST_TEMPLATE                                                      \
  template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN, int kStages, \
            int kQTiles>
#define ATTNC_FWD_SM90_PERSIST                                                               \
  FwdSm90Persist<FwdSm90<Variant, T, kD, kDV, kBlockM, kBlockN, kStages>, kQTiles>
#include "attnc/fwd_sm90_persist_packed.cuh"
#undef ATTNC_FWD_SM90_PERSIST
#undef ATTNC_FWD_SM90_PERSIST_TEMPLATE

#endif
