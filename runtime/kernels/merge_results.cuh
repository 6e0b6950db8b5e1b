// merge_results: N partial results (o and finals, after the epilogue) of
// disjoint key sets merged into the result of their union by the rule the
// result-merge analysis derives (analysis/Merge.h, analyzeResultMerge):
// kind 1 sums o and the finals, kind 2 weighs each o by e^(lse_i - lse),
// kind 3 (merge_results_combine, generated per definition) runs the
// definition's combine through the same struct Merge that decode's split-KV
// runs. One CTA per query row (b, h, i), two columns a thread. A part whose
// first final is -inf met no key and is skipped.
#ifndef ATTNC_MERGE_RESULTS_CUH
#define ATTNC_MERGE_RESULTS_CUH

#include "attnc/merge_results_args.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

/// One CTA's query row and this thread's two columns of o.
struct MergeRow {
  long long row, plane;
  int b, h, qi, c;
  __device__ explicit MergeRow(const MergeResultsArgs &a)
      : row(blockIdx.x), plane((long long)a.batch * a.heads * a.seq_q),
        b(int(row / ((long long)a.seq_q * a.heads))),
        h(int((row / a.seq_q) % a.heads)), qi(int(row % a.seq_q)),
        c(2 * threadIdx.x) {}

  /// Part p's two columns.
  template <class T>
  __device__ float2 load(const MergeResultsArgs &a, int p) const {
    const u32 x = *reinterpret_cast<const u32 *>(
        static_cast<const unsigned short *>(a.o[p]) + b * a.o_s[p][0] +
        h * a.o_s[p][1] + qi * a.o_s[p][2] + c);
    return make_float2(unpack_half<T>(x, false), unpack_half<T>(x, true));
  }

  template <class T>
  __device__ void store(const MergeResultsArgs &a, float o0, float o1) const {
    *reinterpret_cast<u32 *>(static_cast<unsigned short *>(a.out) +
                             b * a.out_s[0] + h * a.out_s[1] +
                             qi * a.out_s[2] + c) = pack2<T>(o0, o1);
  }

  /// Whether part p met no key (its first final is -inf).
  __device__ bool empty(const MergeResultsArgs &a, int p) const {
    return a.num_finals > 0 && a.finals[p][row] == __int_as_float(0xff800000);
  }
};

template <class T> __device__ void merge_results(const MergeResultsArgs &a) {
  const MergeRow r(a);
  const long long row = r.row, plane = r.plane;
  const float ninf = __int_as_float(0xff800000);
  float o0 = 0.f, o1 = 0.f, lse = ninf;
  float fin[kMaxMergeFinals];
  for (int f = 0; f < kMaxMergeFinals; ++f)
    fin[f] = 0.f;
  bool seen = false;
  for (int p = 0; p < a.parts; ++p) {
    if (r.empty(a, p))
      continue;
    const float *pf = a.finals[p];
    const float2 x = r.load<T>(a, p);
    if (a.kind == 2) {
      const float l = pf[a.lse_final * plane + row];
      const float m = fmaxf(lse, l);
      const float wa = seen ? __expf(lse - m) : 0.f, wb = __expf(l - m);
      // o and the sum of weights kept relative to the running max m.
      const float s = wa + wb;
      o0 = (wa * o0 + wb * x.x) / s;
      o1 = (wa * o1 + wb * x.y) / s;
      lse = m + __logf(s);
    } else {
      o0 += x.x;
      o1 += x.y;
      for (int f = 0; f < a.num_finals && f < kMaxMergeFinals; ++f)
        fin[f] = seen ? fin[f] + pf[f * plane + row] : pf[f * plane + row];
    }
    seen = true;
  }
  r.store<T>(a, o0, o1);
  if (threadIdx.x != 0)
    return;
  for (int f = 0; f < a.num_finals && f < kMaxMergeFinals; ++f)
    a.out_finals[f * plane + row] =
        !seen ? ninf : (a.kind == 2 && f == a.lse_final ? lse : fin[f]);
}

/// The merge by a definition's combine (Merge::kKind 3): a result is its
/// state (the epilogue returns o and each online rowscale as a final, which
/// analyzeResultMerge proves), so each part's finals load as the rowscales
/// (a.final_of) and the parts merge in order by the generated Merge::merge,
/// o becoming fa * o + fb * o_part; the merged rowscales are the finals.
template <class Variant, class Merge, class T>
__device__ void merge_results_combine(const MergeResultsArgs &a) {
  static_assert(Merge::kKind == 3, "merge_results_combine runs a combine");
  static_assert(Merge::kNumRowscales <= kMaxMergeFinals,
                "a final for every rowscale");
  constexpr int kN = Merge::kNumRowscales > 0 ? Merge::kNumRowscales : 1;
  const MergeRow r(a);
  typename Variant::RowState st;
  Variant::init(st);
  float o0 = 0.f, o1 = 0.f;
  bool seen = false;
  for (int p = 0; p < a.parts; ++p) {
    if (r.empty(a, p))
      continue;
    float src[kN];
#pragma unroll
    for (int i = 0; i < Merge::kNumRowscales; ++i)
      src[i] = a.finals[p][a.final_of[i] * r.plane + r.row];
    typename Variant::RowState part;
    Variant::init(part);
    Merge::load(part, src);
    const float2 x = r.load<T>(a, p);
    float fa = 0.f, fb = 1.f;
    if (seen)
      Merge::merge(st, part, fa, fb);
    else
      st = part;
    seen = true;
    o0 = fa * o0 + fb * x.x;
    o1 = fa * o1 + fb * x.y;
  }
  r.store<T>(a, o0, o1);
  if (threadIdx.x != 0)
    return;
  float dst[kN];
  Merge::store(st, dst);
#pragma unroll
  for (int i = 0; i < Merge::kNumRowscales; ++i)
    a.out_finals[a.final_of[i] * r.plane + r.row] =
        seen ? dst[i] : __int_as_float(0xff800000);
}

} // namespace attnc

#endif
