// Decode kernel arguments, shared by the host launcher and decode_sm80.cuh.
#ifndef ATTNC_DECODE_ARGS_CUH
#define ATTNC_DECODE_ARGS_CUH

namespace attnc {

/// The state row of one query in the split workspace: the online rowscales
/// (at most 7) and, last, 1 where the part met an unmasked key.
constexpr int kDecodeStateFloats = 8;

/// Decode arguments. Strides are in elements; the head dimension is
/// contiguous. A CTA takes rows [rb·kBlockM, (rb+1)·kBlockM) of its KV
/// head's group (row = j·seq_q + i: query head hk·group + j, query i) and
/// key blocks [split·blocks_per_split, ...) of kBlockN keys. With splits >
/// 1 it writes its part to part_o ([splits][batch][heads][seq_q][dv] fp32)
/// and part_st ([splits][batch][heads][seq_q][kDecodeStateFloats]) and
/// attnc_decode_merge writes o and finals; else it writes them itself.
struct DecodeArgs {
  const void *q, *k, *v;
  void *o;
  float *finals;
  long long q_sb, q_sh, q_ss;
  long long k_sb, k_sh, k_ss;
  long long v_sb, v_sh, v_ss;
  long long o_sb, o_sh, o_ss;
  int batch, heads, heads_kv, seq_q, seq_kv;
  int group, rows, row_blocks;
  int splits, blocks_per_split;
  float *part_o;
  float *part_st;
};

} // namespace attnc

#endif
