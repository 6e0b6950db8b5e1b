// merge_results: N partial results (o and finals, after the epilogue) of
// disjoint key sets merged into the result of their union by the rule the
// result-merge analysis derives (analysis/Merge.h, analyzeResultMerge):
// kind 1 sums o and the finals, kind 2 weighs each o by e^(lse_i - lse),
// kind 3 (merge_results_combine, generated per definition) runs the
// definition's combine through the same struct Merge that decode's split-KV
// runs. One CTA per query row (b, h, i), two columns a thread; or
// (merge_results_vec, kinds 1 and 2) several rows a CTA, up to eight
// columns a thread. A part whose first final is -inf met no key and is
// skipped.
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
/// kWords 32-bit words (two halves each) at p: one 16-, 8- or 4-byte
/// access.
template <int kWords>
__device__ __forceinline__ void merge_load(u32 (&x)[kWords],
                                           const unsigned short *p) {
  if constexpr (kWords == 4) {
    const uint4 v = *reinterpret_cast<const uint4 *>(p);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else if constexpr (kWords == 2) {
    const uint2 v = *reinterpret_cast<const uint2 *>(p);
    x[0] = v.x, x[1] = v.y;
  } else {
    x[0] = *reinterpret_cast<const u32 *>(p);
  }
}

template <int kWords>
__device__ __forceinline__ void merge_store(unsigned short *p,
                                            const u32 (&x)[kWords]) {
  if constexpr (kWords == 4)
    *reinterpret_cast<uint4 *>(p) = make_uint4(x[0], x[1], x[2], x[3]);
  else if constexpr (kWords == 2)
    *reinterpret_cast<uint2 *>(p) = make_uint2(x[0], x[1]);
  else
    *reinterpret_cast<u32 *>(p) = x[0];
}

/// merge_results with kVec columns a thread (16-byte loads and stores for
/// kVec 8) and several rows a block: blockDim.x threads a row (HeadDimV /
/// kVec), blockDim.y rows; the same arithmetic, column by column, in the
/// same order. merge_results' row of HeadDimV / 2 threads a block moves 4
/// bytes a thread: on an H200 (2026-11-28, B1 H32, 16k rows, D128 bf16, two
/// parts) it merged 384 MiB in 0.45-0.55 ms, under 1 TB/s. The launch
/// takes this kernel where every part's and the output's address and
/// strides are multiples of kVec elements (launchMergeResults).
template <class T, int kVec>
__device__ void merge_results_vec(const MergeResultsArgs &a) {
  static_assert(kVec == 2 || kVec == 4 || kVec == 8, "2 to 8 halves");
  constexpr int kWords = kVec / 2;
  const long long plane = (long long)a.batch * a.heads * a.seq_q;
  const long long row = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= plane)
    return;
  const int b = int(row / ((long long)a.seq_q * a.heads));
  const int h = int((row / a.seq_q) % a.heads);
  const int qi = int(row % a.seq_q);
  const int c = kVec * int(threadIdx.x);
  const float ninf = __int_as_float(0xff800000);
  float o[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i)
    o[i] = 0.f;
  float lse = ninf;
  float fin[kMaxMergeFinals];
  for (int f = 0; f < kMaxMergeFinals; ++f)
    fin[f] = 0.f;
  bool seen = false;
  for (int p = 0; p < a.parts; ++p) {
    const float *pf = a.finals[p];
    if (a.num_finals > 0 && pf[row] == ninf)
      continue;
    u32 x[kWords];
    merge_load<kWords>(x, static_cast<const unsigned short *>(a.o[p]) +
                              b * a.o_s[p][0] + h * a.o_s[p][1] +
                              qi * a.o_s[p][2] + c);
    if (a.kind == 2) {
      const float l = pf[a.lse_final * plane + row];
      const float m = fmaxf(lse, l);
      const float wa = seen ? __expf(lse - m) : 0.f, wb = __expf(l - m);
      const float s = wa + wb;
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        o[2 * w] = (wa * o[2 * w] + wb * unpack_half<T>(x[w], false)) / s;
        o[2 * w + 1] =
            (wa * o[2 * w + 1] + wb * unpack_half<T>(x[w], true)) / s;
      }
      lse = m + __logf(s);
    } else {
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        o[2 * w] += unpack_half<T>(x[w], false);
        o[2 * w + 1] += unpack_half<T>(x[w], true);
      }
      for (int f = 0; f < a.num_finals && f < kMaxMergeFinals; ++f)
        fin[f] = seen ? fin[f] + pf[f * plane + row] : pf[f * plane + row];
    }
    seen = true;
  }
  u32 y[kWords];
#pragma unroll
  for (int w = 0; w < kWords; ++w)
    y[w] = pack2<T>(o[2 * w], o[2 * w + 1]);
  merge_store<kWords>(static_cast<unsigned short *>(a.out) + b * a.out_s[0] +
                          h * a.out_s[1] + qi * a.out_s[2] + c,
                      y);
  if (threadIdx.x != 0)
    return;
  for (int f = 0; f < a.num_finals && f < kMaxMergeFinals; ++f)
    a.out_finals[f * plane + row] =
        !seen ? ninf : (a.kind == 2 && f == a.lse_final ? lse : fin[f]);
}

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
