// attnc_decode_merge's body: the partial states of decode's key splits
// merged in split order by the definition's Merge rule, then the epilogue;
// dense, packed (a sequence's rows past its queries have nothing to merge)
// and paged.
#ifndef ATTNC_DECODE_MERGE_CUH
#define ATTNC_DECODE_MERGE_CUH

#include "attnc/decode_args.cuh"
#include "attnc/sm80_primitives.cuh"
#include "attnc/varlen.cuh"

namespace attnc {

/// Two output columns of one row, for the merge kernel's epilogue.
struct DecodeOutPair {
  static constexpr int kRows = 1;
  static constexpr int kCols = 2;
  float v[2];
  __device__ __forceinline__ float &at(int, int c) { return v[c]; }
};

/// Programmatic dependent launch (sm_90): the split kernel lets the merge
/// grid start as soon as every split CTA is running, and the merge waits
/// here, before its first load of a part, for the split grid to finish
/// and its writes to be visible. The merge's launch and start then overlap
/// the splits' work instead of following it. Both are no-ops where the
/// merge was launched plainly, and below sm_90.
__device__ __forceinline__ void decode_allow_merge_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void decode_wait_for_parts() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Splits whose partial states decode_merge_parts loads before merging any
/// of them: the loads of a group are independent, so a row's merge waits
/// for one memory round trip a group rather than one a split.
constexpr int kDecodeMergeGroup = 8;

/// A row's running merge: the state, whether any part met an unmasked key,
/// and the thread's two output columns.
template <class Variant> struct DecodeMergeAcc {
  typename Variant::RowState st;
  bool seen;
  DecodeOutPair of;
  /// The merge of no part yet.
  __device__ __forceinline__ void reset() {
    Variant::init(st);
    seen = false;
    of = DecodeOutPair{{0.f, 0.f}};
  }
};

/// Folds one part into \p acc by Merge's rule (a part that met no
/// unmasked key is skipped); parts are folded in key order.
template <class Variant, class Merge>
__device__ __forceinline__ void decode_fold_part(DecodeMergeAcc<Variant> &acc,
                                                 const typename Variant::RowState &part,
                                                 float2 po) {
  float fa = 0.f, fb = 1.f;
  if (acc.seen)
    Merge::merge(acc.st, part, fa, fb);
  else
    acc.st = part;
  acc.seen = true;
  acc.of.v[0] = fa * acc.of.v[0] + fb * po.x;
  acc.of.v[1] = fa * acc.of.v[1] + fb * po.y;
}

/// Folds splits [s_begin, s_end) of query row \p row (of \p plane rows a
/// split) into \p acc, columns c and c + 1. The parts are read past L1
/// (ld.cg): the split kernel's last CTA reads what other CTAs of its own
/// grid wrote.
template <class Variant, class Merge, int kDV>
__device__ void decode_merge_parts(const DecodeArgs &a, long long row, long long plane,
                                   int c, int s_begin, int s_end,
                                   DecodeMergeAcc<Variant> &acc) {
  static_assert(kDecodeStateFloats == 8, "a state row is two float4s");
  for (int s0 = s_begin; s0 < s_end; s0 += kDecodeMergeGroup) {
    // The group's states and o columns, all loads issued before the first
    // is used (a split past the last reads as one that met no key).
    float4 raw[kDecodeMergeGroup][2];
    float2 po[kDecodeMergeGroup];
#pragma unroll
    for (int j = 0; j < kDecodeMergeGroup; ++j) {
      const long long at = (s0 + j) * plane + row;
      if (s0 + j < s_end) {
        const float4 *ps =
            reinterpret_cast<const float4 *>(a.part_st + at * kDecodeStateFloats);
        raw[j][0] = __ldcg(ps);
        raw[j][1] = __ldcg(ps + 1);
        po[j] = __ldcg(reinterpret_cast<const float2 *>(a.part_o + at * kDV + c));
      } else {
        raw[j][0] = raw[j][1] = make_float4(0.f, 0.f, 0.f, 0.f);
        po[j] = make_float2(0.f, 0.f);
      }
    }
#pragma unroll
    for (int j = 0; j < kDecodeMergeGroup; ++j) {
      if (raw[j][1].w == 0.f)
        continue;
      const float ps[kDecodeStateFloats] = {raw[j][0].x, raw[j][0].y, raw[j][0].z,
                                            raw[j][0].w, raw[j][1].x, raw[j][1].y,
                                            raw[j][1].z, raw[j][1].w};
      typename Variant::RowState part;
      Merge::load(part, ps);
      decode_fold_part<Variant, Merge>(acc, part, po[j]);
    }
  }
}

/// The epilogue of a merged row (b, h, query qi of span qs) at q_idx qi +
/// qshift, as online_fwd saw it: columns c and c + 1 of o, and the finals
/// where \p write_finals (one thread of the row).
template <class Variant, class T>
__device__ void decode_merge_finish(const DecodeArgs &a, const typename Variant::Inputs &in,
                                    DecodeMergeAcc<Variant> &acc, int b, int h, int qi,
                                    const DecodeQSpan qs, int qshift, int c,
                                    bool write_finals) {
  float finals[Variant::kNumFinals > 0 ? Variant::kNumFinals : 1];
  if (acc.seen) {
    Variant::epilogue(in, acc.st, acc.of, 0, b, h, qi + qshift, finals);
  } else {
    acc.of.v[0] = acc.of.v[1] = 0.f;
#pragma unroll
    for (int f = 0; f < Variant::kNumFinals; ++f)
      finals[f] = -__int_as_float(0x7f800000);
  }
  unsigned short *o = static_cast<unsigned short *>(a.o) + b * a.o_sb + h * a.o_sh +
                      (qs.q0 + qi) * a.o_ss;
  *reinterpret_cast<u32 *>(o + c) = pack2<T>(acc.of.v[0], acc.of.v[1]);
  if (write_finals)
#pragma unroll
    for (int f = 0; f < Variant::kNumFinals; ++f)
      a.finals[decode_final_index(a, f, b, h, qs.q0, qi)] = finals[f];
}

/// The merge of query row (b, h, query qi of span qs) by one thread: every
/// split in order, then the epilogue. The calling thread writes columns
/// 2·t and 2·t + 1 (t < kDV / 2), t 0 the finals too; threads do not
/// cooperate, so the split kernel's last CTA (decode_sm80) can run it for
/// any of its rows.
template <class Variant, class Merge, class T, int kDV>
__device__ void decode_merge_row(const DecodeArgs &a, const typename Variant::Inputs &in,
                                 int b, int h, int qi, const DecodeQSpan qs,
                                 int qshift, int t) {
  static_assert(Merge::kKind != 0, "a definition without a merge never splits");
  const long long row = ((long long)b * a.heads + h) * a.seq_q + qi;
  const long long plane = (long long)a.batch * a.heads * a.seq_q;
  DecodeMergeAcc<Variant> acc;
  acc.reset();
  decode_merge_parts<Variant, Merge, kDV>(a, row, plane, 2 * t, 0, a.splits, acc);
  decode_merge_finish<Variant, T>(a, in, acc, b, h, qi, qs, qshift, 2 * t, t == 0);
}

/// The merge kernel's row: decode_merge_threads(kDV) threads, group g of
/// kDecodeMergeSplitGroups folding its contiguous run of the splits, then
/// group 0 folding the groups' results in order (the merge is associative:
/// a run's result is the state of its keys). Splits come from the split
/// kernel, so the loads wait for it first (decode_wait_for_parts).
template <class Variant, class Merge, class T, int kDV>
__device__ void decode_merge_row_grouped(const DecodeArgs &a,
                                         const typename Variant::Inputs &in, int b, int h,
                                         int qi, const DecodeQSpan qs, int qshift) {
  static_assert(Merge::kKind != 0, "a definition without a merge never splits");
  static_assert(Merge::kNumRowscales + 1 <= kDecodeStateFloats,
                "a group's state row holds the rowscales and, last, the seen flag");
  constexpr int kGroups = kDecodeMergeSplitGroups;
  constexpr int kGroupThreads = kDV / 2;
  __shared__ float group_o[kGroups][kDV];
  __shared__ float group_st[kGroups][kDecodeStateFloats];
  const int t = threadIdx.x % kGroupThreads;
  const int g = threadIdx.x / kGroupThreads;
  const int c = 2 * t;
  const long long row = ((long long)b * a.heads + h) * a.seq_q + qi;
  const long long plane = (long long)a.batch * a.heads * a.seq_q;
  const int per = (a.splits + kGroups - 1) / kGroups;
  const int s_begin = min(a.splits, g * per);
  const int s_end = min(a.splits, s_begin + per);
  DecodeMergeAcc<Variant> acc;
  acc.reset();
  decode_wait_for_parts();
  decode_merge_parts<Variant, Merge, kDV>(a, row, plane, c, s_begin, s_end, acc);
  if (g > 0) {
    group_o[g][c] = acc.of.v[0];
    group_o[g][c + 1] = acc.of.v[1];
    if (t == 0) {
      float st[kDecodeStateFloats] = {};
      Merge::store(acc.st, st);
      st[kDecodeStateFloats - 1] = acc.seen ? 1.f : 0.f;
#pragma unroll
      for (int i = 0; i < kDecodeStateFloats; ++i)
        group_st[g][i] = st[i];
    }
  }
  __syncthreads();
  if (g > 0)
    return;
#pragma unroll
  for (int j = 1; j < kGroups; ++j) {
    if (group_st[j][kDecodeStateFloats - 1] == 0.f)
      continue;
    typename Variant::RowState part;
    Merge::load(part, group_st[j]);
    decode_fold_part<Variant, Merge>(acc, part,
                                     make_float2(group_o[j][c], group_o[j][c + 1]));
  }
  decode_merge_finish<Variant, T>(a, in, acc, b, h, qi, qs, qshift, c, t == 0);
}

/// The span a decode row's custom inputs are rebased by: in a packed call
/// the queries sit at the end of their sequence's keys (q_idx shifted by
/// the key count less the query count), in a dense one at 0.
__device__ __forceinline__ SeqSpan decode_seq_span(const DecodeArgs &a,
                                                   const DecodeQSpan &qs,
                                                   const DecodeKvSpan &ks) {
  SeqSpan sp{};
  sp.packed = a.cu_q != nullptr;
  sp.q0 = qs.q0;
  sp.kv0 = ks.kv0;
  sp.seq_q = qs.n;
  sp.seq_kv = ks.len;
  sp.shift = sp.packed ? ks.len - qs.n : 0;
  return sp;
}

/// The query row of CTA blockIdx.x: (b, h, qi) over the bound's seq_q rows
/// of each (b, h); false for a row past its sequence's queries.
__device__ __forceinline__ bool decode_merge_row_of(const DecodeArgs &a, int &b, int &h,
                                                    int &qi, DecodeQSpan &qs) {
  const long long row = blockIdx.x;
  qi = int(row % a.seq_q);
  h = int((row / a.seq_q) % a.heads);
  b = int(row / ((long long)a.seq_q * a.heads));
  qs = decode_q_span(a, b);
  return qi < qs.n;
}

/// attnc_decode_merge of contiguous (dense or packed) decode: one CTA per
/// query row of the bound.
template <class Variant, class Merge, class T, int kDV>
__device__ void decode_merge(const DecodeArgs &a, const typename Variant::Inputs &in) {
  int b, h, qi;
  DecodeQSpan qs;
  if (!decode_merge_row_of(a, b, h, qi, qs))
    return;
  const SeqSpan sp = decode_seq_span(a, qs, decode_kv_span(a, b));
  decode_merge_row_grouped<Variant, Merge, T, kDV>(a, sequence_inputs(in, sp), b, h, qi,
                                                   qs, sp.shift);
}

/// The span a paged decode row's custom inputs are rebased by, dense or
/// packed: query-side inputs start at the sequence's first query token (0
/// in a dense call, whose batch stride places the sequence) and read at
/// q_idx − (len − n), the row's own query; key-side ones stay at the
/// sequence's row of their [batch, (heads,) keys] tensor (kv0 0: kv_idx is
/// the key's position in its sequence, not its page slot), clamped to its
/// len keys.
__device__ __forceinline__ SeqSpan paged_sequence_span(const DecodeQSpan &qs, int len) {
  SeqSpan sp{};
  sp.packed = true; // always rebased: the shift is per sequence
  sp.q0 = qs.q0;
  sp.kv0 = 0;
  sp.seq_q = qs.n;
  sp.seq_kv = len;
  sp.shift = len - qs.n;
  return sp;
}

/// attnc_decode_merge of paged decode: the sequence's length from its
/// pages, for the epilogue's q_idx and the rebase of its inputs.
template <class Variant, class Merge, class T, int kDV>
__device__ void decode_merge_paged(const PagedDecodeArgs &p,
                                   const typename Variant::Inputs &in) {
  int b, h, qi;
  DecodeQSpan qs;
  if (!decode_merge_row_of(p.d, b, h, qi, qs))
    return;
  const int len = paged_decode_seq(p, b).len;
  decode_merge_row_grouped<Variant, Merge, T, kDV>(
      p.d, sequence_inputs(in, paged_sequence_span(qs, len)), b, h, qi, qs, len - qs.n);
}

} // namespace attnc

#endif
