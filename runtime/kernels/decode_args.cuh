// Decode kernel arguments, shared by the host launcher and decode_sm80.cuh
// (and paged_append.cuh).
#ifndef ATTNC_DECODE_ARGS_CUH
#define ATTNC_DECODE_ARGS_CUH

// The span helpers below are plain C++ so that the host tests run them.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_DECODE_FN __device__ __forceinline__
#else
#define ATTNC_DECODE_FN inline
#endif
// The same on both sides and usable in constant expressions: the host's
// plan and the kernel's template agree on a paged kernel's step mode.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_DECODE_CONST __host__ __device__ constexpr
#else
#define ATTNC_DECODE_CONST constexpr
#endif

namespace attnc {

/// The state row of one query in the split workspace: the online rowscales
/// (at most 7) and, last, 1 where the part met an unmasked key.
constexpr int kDecodeStateFloats = 8;

/// attnc_decode_merge's threads: kDecodeMergeSplitGroups groups of dv / 2
/// (a thread writes two output columns), each group merging a contiguous
/// run of a row's splits; the groups' results are then merged in order.
/// With one group a row's 32 splits cost four dependent rounds of L2 loads
/// (kDecodeMergeGroup at a time); with four, one.
constexpr int kDecodeMergeSplitGroups = 4;
ATTNC_DECODE_CONST int decode_merge_threads(int dv) {
  return kDecodeMergeSplitGroups * (dv / 2);
}

/// Decode arguments. Strides are in elements; the head dimension is
/// contiguous. A CTA takes rows [rb·kBlockM, (rb+1)·kBlockM) of its KV
/// head's group (row = j·n + i: query head hk·group + j, query i of the
/// sequence's n) and key blocks [split·blocks_per_split, ...) of kBlockN
/// keys. With splits > 1 it writes its part to part_o
/// ([splits][batch][heads][seq_q][dv] fp32) and part_st
/// ([splits][batch][heads][seq_q][kDecodeStateFloats]) and
/// attnc_decode_merge writes o and finals; else it writes them itself.
/// Where counters is set (batch x heads_kv x row_blocks arrival counts,
/// all 0 before the launch), there is no merge kernel: the last split CTA
/// of each (batch, KV head, row block) to finish merges its rows, by the
/// merge kernel's function, and sets its count back to 0 for the next
/// launch (a CUDA graph's replay included).
///
/// A packed call (cu_q set): sequence b's queries are tokens [cu_q[b],
/// cu_q[b+1]) of q and o (batch strides 0), n of them, 0 to seq_q (the
/// bound on a sequence's queries; rows and row_blocks are the bound's),
/// finals [F][heads][total_q]; with cu_kv set too (contiguous packed keys)
/// its keys are tokens [cu_kv[b], cu_kv[b+1]) of k and v, at most seq_kv
/// of them. A dense call: n = seq_q for every sequence, finals
/// [F][batch][heads][seq_q].
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
  unsigned *counters;
  const int *cu_q, *cu_kv;
  int total_q, total_kv;
};

/// The queries of one sequence: tokens [q0, q0 + n) of a packed call (q0
/// 0 in a dense one, whose batch stride places the sequence). bad: the
/// range cu_q gives is malformed (a count below 0 or above the bound
/// seq_q, a token outside [0, total_q)); q0 and n are then clamped to the
/// bound and to q's tokens, and the rows they hold are written NaN.
struct DecodeQSpan {
  int q0, n;
  bool bad;
};

ATTNC_DECODE_FN DecodeQSpan decode_q_span(const DecodeArgs &a, int b) {
  if (!a.cu_q)
    return {0, a.seq_q, false};
  const int q0 = a.cu_q[b], end = a.cu_q[b + 1];
  // In 64 bits: a garbage entry must not overflow into a valid-looking range.
  const long long n = (long long)end - q0;
  if (q0 >= 0 && n >= 0 && n <= a.seq_q && end <= a.total_q)
    return {q0, int(n), false};
  const int c0 = q0 < 0 ? 0 : (q0 > a.total_q ? a.total_q : q0);
  long long c = n < a.seq_q ? n : a.seq_q;
  c = c < a.total_q - c0 ? c : a.total_q - c0;
  return {c0, c < 0 ? 0 : int(c), true};
}

/// The keys of one sequence: tokens [kv0, kv0 + len) of a packed call's k
/// and v (cu_kv set), the first seq_kv rows of a dense one. bad: cu_kv's
/// range is malformed (a length below 0 or above the bound seq_kv, a token
/// outside [0, total_kv)); len is then 0 and the sequence's rows NaN.
struct DecodeKvSpan {
  int kv0, len;
  bool bad;
};

ATTNC_DECODE_FN DecodeKvSpan decode_kv_span(const DecodeArgs &a, int b) {
  if (!a.cu_kv)
    return {0, a.seq_kv, false};
  const int k0 = a.cu_kv[b], end = a.cu_kv[b + 1];
  const long long n = (long long)end - k0;
  if (k0 >= 0 && n >= 0 && n <= a.seq_kv && end <= a.total_kv)
    return {k0, int(n), false};
  return {0, 0, true};
}

/// Where final f of query row (b, h, query qi of the span) lives: [F][heads]
/// [total_q] rows of a packed call, [F][batch][heads][seq_q] of a dense one.
ATTNC_DECODE_FN long long decode_final_index(const DecodeArgs &a, int f,
                                                        int b, int h, int q0, int qi) {
  if (a.cu_q)
    return ((long long)f * a.heads + h) * a.total_q + q0 + qi;
  return (((long long)f * a.batch + b) * a.heads + h) * a.seq_q + qi;
}

/// Paged decode arguments. In d, k and v are the page caches, k_sb/v_sb
/// their page strides, k_ss/v_ss their slot strides, k_sh/v_sh their head
/// strides (NHD and HND are both strides), and seq_kv the plan's bound on
/// a sequence's keys (blocks_per_split x splits cover it). Sequence b's
/// pages are pages[b·table_stride ...] with seq_lens[b] keys (a block
/// table), or, where indptr is set, pages[indptr[b] .. indptr[b+1]) with
/// (n - 1)·page size + last_page_len[b] keys (CSR, num_indices pages in
/// all). Lengths are read on the device: a bad one, an indptr range
/// outside the indices, or a page index outside [0, num_pages), makes the
/// rows of that sequence NaN. strides32: 1 where the caches' page strides
/// and their slot strides times max(page size, key block) fit in 31 bits
/// as bytes (pagedStrides32), so that the kernel's copies address a page
/// group by 32-bit products (decode_paged_kv.cuh's row steps).
struct PagedDecodeArgs {
  DecodeArgs d;
  const int *pages;
  const int *seq_lens;
  const int *indptr;
  const int *last_page_len;
  long long table_stride;
  int page_shift, num_pages, num_indices;
  int strides32;
};

/// Sequence b's keys in pages: its length and first page (the table row
/// or its indptr entry). bad: a length below 0 or above the bound seq_kv,
/// an indptr range outside the indices or a last page length outside [1,
/// page size]; the length is then 0.
struct DecodePagedSeq {
  const int *pages;
  int len;
  bool bad;
};

ATTNC_DECODE_FN DecodePagedSeq paged_decode_seq(const PagedDecodeArgs &p, int b) {
  DecodePagedSeq s{p.pages, 0, false};
  long long len = 0;
  if (p.indptr) {
    const int first_page = p.indptr[b];
    const long long n = (long long)p.indptr[b + 1] - first_page;
    const int last = n > 0 ? p.last_page_len[b] : 0;
    s.bad = n < 0 || first_page < 0 || first_page + n > p.num_indices ||
            (n > 0 && (last < 1 || last > (1 << p.page_shift)));
    len = s.bad ? 0 : ((n > 0 ? n - 1 : 0) << p.page_shift) + last;
    s.pages = p.pages + (s.bad ? 0 : first_page);
  } else {
    len = p.seq_lens[b];
    s.pages = p.pages + b * p.table_stride;
  }
  // A length past the plan's bound would need keys no split visits.
  s.bad = s.bad || len < 0 || len > p.d.seq_kv;
  s.len = s.bad ? 0 : int(len);
  return s;
}

/// The row-step addressing of paged decode (decode_paged_kv.cuh): a
/// thread copies rows t0, t0 + step, ... of a block (t0 = the block's
/// first row + the thread's first, below step; step and the block's rows
/// powers of two, rows = step · 2^max_mode). Its rows fall in groups of
/// 2^mode that share a page: each row its own page (mode 0) where a page
/// holds step rows or fewer, else pages of step · 2^mode rows, the whole
/// block in one group for pages of the block's rows or more.
ATTNC_DECODE_CONST int decode_step_mode(int shift, int log_step, int max_mode) {
  const int m = shift - log_step;
  return m < 0 ? 0 : (m > max_mode ? max_mode : m);
}

/// log2 of a power of two (0 for 1).
ATTNC_DECODE_CONST int decode_log2(int x) { return x <= 1 ? 0 : 1 + decode_log2(x / 2); }

/// The row-step tile of paged decode for key blocks of \p rows rows, head
/// dims \p d and \p dv, \p threads threads copying 16 bytes each: a
/// thread's rows are step = threads / (d / 8) apart, rows / step of them a
/// block. Row steps need K and V to share the rows (d == dv), the chunks to
/// tile the threads, and at most 16 rows a thread (their page pointers
/// live in registers); else 0 (every copy gathers).
ATTNC_DECODE_CONST int decode_step_rows(int rows, int d, int dv, int threads) {
  if (d != dv || d < 8 || threads % (d / 8) != 0)
    return 0;
  const int step = threads / (d / 8);
  return step > 0 && rows % step == 0 && rows / step <= 16 ? step : 0;
}

/// The step mode a paged decode kernel compiles for pages of 2^\p shift
/// rows (decode_step_mode of its tile), or -1 where the tile has no row
/// steps. The kernel holds only that mode's copies (and the gather, for
/// strides too wide for 32-bit products); the plan picks the kernel.
ATTNC_DECODE_CONST int decode_paged_kernel_mode(int shift, int rows, int d, int dv,
                                                int threads) {
  const int step = decode_step_rows(rows, d, dv, threads);
  return step == 0 ? -1 : decode_step_mode(shift, decode_log2(step), decode_log2(rows / step));
}

/// The page-table entry of the rows from t0's first group; group g (of
/// 2^mode rows, spp) is decode_step_group_pages entries further:
/// consecutive pages, or step >> shift pages apart where a page holds
/// fewer than step rows.
ATTNC_DECODE_FN int decode_step_entry(int t0, int shift) { return t0 >> shift; }
ATTNC_DECODE_FN int decode_step_group_pages(int shift, int spp, int step) {
  return spp > 1 ? 1 : step >> shift;
}

/// The slot of row j of its group (t0 + (g · spp + j) · step): t0's slot
/// plus j steps, inside the group's page.
ATTNC_DECODE_FN int decode_step_slot(int t0, int shift, int j, int step) {
  return (t0 & ((1 << shift) - 1)) + j * step;
}

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
