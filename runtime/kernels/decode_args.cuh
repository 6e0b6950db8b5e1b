// Decode kernel arguments, shared by the host launcher and decode_sm80.cuh
// (and paged_append.cuh).
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

/// Paged decode arguments. In d, k and v are the page caches, k_sb/v_sb
/// their page strides, k_ss/v_ss their slot strides, k_sh/v_sh their head
/// strides (NHD and HND are both strides), and seq_kv the plan's bound on
/// a sequence's keys (blocks_per_split x splits cover it). Sequence b's
/// pages are pages[b·table_stride ...] with seq_lens[b] keys (a block
/// table), or, where indptr is set, pages[indptr[b] .. indptr[b+1]) with
/// (n - 1)·page size + last_page_len[b] keys (CSR, num_indices pages in
/// all). Lengths are read on the device: a bad one, an indptr range
/// outside the indices, or a page index outside [0, num_pages), makes the
/// rows of that sequence NaN.
struct PagedDecodeArgs {
  DecodeArgs d;
  const int *pages;
  const int *seq_lens;
  const int *indptr;
  const int *last_page_len;
  long long table_stride;
  int page_shift, num_pages, num_indices;
};

/// The append of new tokens into pages (paged_append.cuh). Strides in
/// elements: new tokens (token, head), caches (page, slot, head); the head
/// dims are contiguous and multiples of 8.
struct PagedAppendArgs {
  const void *k, *v;
  void *k_cache, *v_cache;
  const void *slots;
  long long k_st, k_sh, v_st, v_sh;
  long long kc_ps, kc_ss, kc_sh, vc_ps, vc_ss, vc_sh;
  long long num_slots;
  int tokens, d_chunks, dv_chunks, page_shift;
};

} // namespace attnc

#endif
