// Kernel arguments shared by the host launcher and the skeletons. Plain
// structs of pointers and integers, identical in layout on both sides.
#ifndef ATTNC_ATTENTION_ARGS_CUH
#define ATTNC_ATTENTION_ARGS_CUH

namespace attnc {

/// Forward arguments. Strides are in elements; the head dimension is
/// contiguous. finals is [kNumFinals][batch][heads][seq_q] fp32.
struct FwdArgs {
  const void *q, *k, *v;
  void *o;
  float *finals;
  long long q_sb, q_sh, q_ss;
  long long k_sb, k_sh, k_ss;
  long long v_sb, v_sh, v_ss;
  long long o_sb, o_sh, o_ss;
  int batch, heads, heads_kv, seq_q, seq_kv;
  /// Block classification (only read when the variant masks): per group
  /// (mask_grouping: 0 one group, 1 one per batch, 2 one per batch·head;
  /// attnc::mask_group) and query block, the number of key blocks to visit
  /// and their list; each entry is the key-block index with bit 30 set when
  /// the block is fully unmasked.
  const int *block_count;
  const int *block_list;
  int m_blocks, n_blocks, mask_grouping;
  /// A packed variable-length call (varlen.cuh), else null: sequence b's
  /// query tokens are [cu_seqlens_q[b], cu_seqlens_q[b+1]) of the packed q
  /// and o (whose batch strides are 0), its keys likewise; seq_q and seq_kv
  /// are the longest lengths, total_q the tokens of q; finals is then
  /// [kNumFinals][heads][total_q].
  const int *cu_seqlens_q, *cu_seqlens_kv;
  int total_q;
  /// fwd_sm90's persistent kernel under a mask or over a packed call
  /// (fwd_sm90_persist.cuh): two counters, 0 at every launch, from which
  /// its CTAs take their tiles after the first (the kernel's last CTA puts
  /// them back to 0). Unread by the other kernels and by an unmasked
  /// variant's dense call, which walks the grid.
  int *tile_counter;
  /// fwd_sm90's persistent walk over a packed call (attnc_fwd_packed): the
  /// facts of each of its tiles (sequence, query block, key-block range,
  /// full blocks, tokens; kPackedTileInts ints a tile, 16-byte aligned),
  /// which attnc_fwd_packed_tiles writes just before it on the stream.
  /// Unread by the other kernels.
  int *packed_tiles;
};

/// The ints of one tile of FwdArgs::packed_tiles: nine facts, padded to
/// three 16-byte loads.
inline constexpr int kPackedTileInts = 12;

/// Paged prefill arguments. In f: q and o are packed [total_q, heads, dim]
/// (batch strides 0) with cu_seqlens_q; k and v are the page caches, k_sb
/// and v_sb their page strides, k_ss and v_ss their slot strides, k_sh and
/// v_sh their head strides (NHD and HND are both strides); seq_q and seq_kv
/// are the plan's bounds on a sequence's queries and keys; cu_seqlens_kv is
/// null. The page description is paged decode's (PagedDecodeArgs): pages
/// with table_stride and seq_lens (block table), or with indptr and
/// last_page_len (CSR, num_indices entries).
struct PagedFwdArgs {
  FwdArgs f;
  const int *pages;
  const int *seq_lens;
  const int *indptr;
  const int *last_page_len;
  long long table_stride;
  int page_shift, num_pages, num_indices;
};

/// Arguments of the block-classification kernels. classes is
/// [groups][m_blocks][n_blocks] bytes: 0 empty, 1 partial, 2 full.
/// An analysed mask (Variant::kMaskAnalysed) is classified in two phases of
/// attnc_block_classify: phase 0 writes bounds, per bounded input i, group
/// and row (or key) block, its minimum and maximum ([i][groups]
/// [bound_lines][2] fp32, NaN for a block holding a non-finite value);
/// phase 1 classifies each block from them; phase 2 does what phase 1 and
/// attnc_block_compact do, writing the lists and no classes. An
/// element-evaluated mask has one phase and no bounds.
struct MaskArgs {
  unsigned char *classes;
  int *block_count;
  int *block_list;
  float *bounds;
  int batch, heads, seq_q, seq_kv;
  int m_blocks, n_blocks, mask_grouping;
  int bound_lines, phase;
};

/// The most custom inputs whose gradients one backward computes.
constexpr int kMaxInputGrads = 8;

/// Backward arguments. Strides are in elements; the head dimension is
/// contiguous. finals is [kNumFinals][batch][heads][seq_q] fp32 as the
/// forward wrote it; doosum is [batch·heads][seq_q] fp32, written by the
/// preprocess when the variant's backward reads it (else null).
struct BwdArgs {
  const void *q, *k, *v, *o, *dout;
  void *dq, *dk, *dv;
  const float *finals;
  float *doosum;
  long long q_sb, q_sh, q_ss;
  long long k_sb, k_sh, k_ss;
  long long v_sb, v_sh, v_ss;
  long long o_sb, o_sh, o_ss;
  long long do_sb, do_sh, do_ss;
  long long dq_sb, dq_sh, dq_ss;
  long long dk_sb, dk_sh, dk_ss;
  long long dv_sb, dv_sh, dv_ss;
  int batch, heads, heads_kv, seq_q, seq_kv, mask_grouping;
  /// Block lists (only read when the variant masks), per group (as
  /// FwdArgs::mask_grouping); entries carry bit 30 when the block
  /// is fully unmasked. The dQ kernel's: per query block of q_block_m rows,
  /// the key blocks of q_block_n keys to visit. The dK/dV kernel's: per key
  /// block of kv_block_n keys, the query blocks of kv_block_m rows.
  const int *q_count, *q_list;
  const int *kv_count, *kv_list;
  int q_m_blocks, q_n_blocks, kv_m_blocks, kv_n_blocks;
  /// Custom-input gradients: per-CTA partial sums of the dK/dV kernel,
  /// [kNumInputGrads][kv_n_blocks][batch·heads], then the outputs (fp32) and
  /// their shapes (0: scalar, one value; 1: per head, [heads]).
  float *grad_partial;
  float *grad_out[kMaxInputGrads];
  int grad_shape[kMaxInputGrads];
  /// Fused dQ (BwdConfig::FusedDq, bwd_sm80_fused_dq.cuh): the fp32 partial
  /// sums [batch·heads][kv_m_blocks·kv_block_m][head_dim], one semaphore per
  /// (batch·head, query block) and, when the variant masks, per entry of
  /// kv_list its rank among the key blocks that visit the query block. Null
  /// in the two-kernel mode.
  float *dq_accum;
  int *dq_sem;
  const int *kv_rank;
  /// Fused dQ without a mask: a row (batch·head, or a packed call's
  /// sequence·head) of at most this many key blocks starts its key blocks'
  /// walks spread over the query blocks (BwdFusedDq::first_block); 0: no
  /// row does. A rotated walk waits for CTAs dispatched after it, so the
  /// host allows it only where a row's CTAs fit on the GPU's SMs at once.
  int dq_rotate;
  /// A packed variable-length call, as in FwdArgs (null otherwise); finals
  /// and doosum are then [..][heads][total_q]. Never in the fused dQ mode.
  const int *cu_seqlens_q, *cu_seqlens_kv;
  int total_q;
};

/// Arguments of the backward's block-list kernels: the fine classes of
/// classify_blocks ([groups][fine_m][fine_n]) combined into blocks of
/// ratio_m x ratio_n fine blocks, listed per coarse row (transposed false)
/// or per coarse column (transposed true).
struct BwdListArgs {
  const unsigned char *classes;
  int *count;
  int *list;
  int groups, fine_m, fine_n, ratio_m, ratio_n, m_blocks, n_blocks;
  /// Columns of the fused dQ mode only (else null): the rows' lists, made
  /// first on the same tiling, and the rank of each column entry (BwdArgs).
  const int *row_count, *row_list;
  int *rank;
};

} // namespace attnc

#endif
