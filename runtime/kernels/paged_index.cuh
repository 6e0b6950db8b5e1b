// The index math of paged prefill: a sequence's key count from its page
// description, checked, and the element offset of one of its tokens. Plain
// C++, so that the host tests run the same code against the host model of
// attn/runtime/Paged.h (tests/codegen/PagedPrefillNoDriverTest.cpp).
#ifndef ATTNC_PAGED_INDEX_CUH
#define ATTNC_PAGED_INDEX_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_PAGED_FN __device__ __forceinline__
#else
#define ATTNC_PAGED_FN inline
#endif

namespace attnc {

/// Sequence b's keys and the first of its page indices. bad where its
/// description is malformed: a CSR range outside the indices or reversed,
/// a last page length outside [1, page size], a length below 0 or above
/// the bound p.f.seq_kv (len is then 0 and nothing of it may be read).
struct PagedLen {
  int len;
  const int *pages;
  bool bad;
};

/// \p p: a PagedFwdArgs (attention_args.cuh; a template, so that this
/// header includes nothing and the host tests include it as it is).
template <class Args> ATTNC_PAGED_FN PagedLen paged_len(const Args &p, int b) {
  PagedLen r;
  int len;
  bool bad = false;
  if (p.indptr) {
    const int i0 = p.indptr[b], i1 = p.indptr[b + 1];
    const int n = i1 - i0;
    bad = i0 < 0 || n < 0 || i1 > p.num_indices;
    const int last = n > 0 && !bad ? p.last_page_len[b] : 1;
    bad = bad || last < 1 || last > (1 << p.page_shift);
    len = bad || n == 0 ? 0 : ((n - 1) << p.page_shift) + last;
    r.pages = p.pages + (bad ? 0 : i0);
  } else {
    len = p.seq_lens[b];
    r.pages = p.pages + b * p.table_stride;
  }
  r.bad = bad || len < 0 || len > p.f.seq_kv;
  r.len = r.bad ? 0 : len;
  return r;
}

/// Where token t of a sequence whose page indices start at \p pages lives:
/// page pages[t >> shift], slot t & (page size − 1).
struct PagedSlot {
  int page, slot;
};
ATTNC_PAGED_FN PagedSlot paged_slot(const int *pages, int shift, int t) {
  return PagedSlot{pages[t >> shift], t & ((1 << shift) - 1)};
}

/// The page and slot of the TMA box (fwd_sm90's paged load) that starts at
/// token t of a sequence of \p len keys: t's, or for t at or past the end,
/// page 0 at t's slot (every sequence's indices were checked, so page 0
/// exists; the consumers zero the rows past the end).
ATTNC_PAGED_FN PagedSlot paged_box(const int *pages, int shift, int len, int t) {
  return t < len ? paged_slot(pages, shift, t) : PagedSlot{0, t & ((1 << shift) - 1)};
}

/// The element offset of token t from its KV head's start in the cache,
/// page and slot strides \p ps and \p ss.
ATTNC_PAGED_FN long long paged_token_offset(const int *pages, int shift, int t, long long ps,
                                            long long ss) {
  const PagedSlot s = paged_slot(pages, shift, t);
  return s.page * ps + (long long)s.slot * ss;
}

} // namespace attnc

#endif
