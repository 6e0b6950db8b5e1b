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
  /// (one group, or one per batch·head when mask_per_head) and query block,
  /// the number of key blocks to visit and their list; each entry is the
  /// key-block index with bit 30 set when the block is fully unmasked.
  const int *block_count;
  const int *block_list;
  int m_blocks, n_blocks, mask_per_head;
};

/// Arguments of the block-classification kernels. classes is
/// [groups][m_blocks][n_blocks] bytes: 0 empty, 1 partial, 2 full.
struct MaskArgs {
  unsigned char *classes;
  int *block_count;
  int *block_list;
  int batch, heads, seq_q, seq_kv;
  int m_blocks, n_blocks, mask_per_head;
};

} // namespace attnc

#endif
