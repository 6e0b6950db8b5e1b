// merge_results: N partial results (o and finals, after the epilogue) of
// disjoint key sets merged into the result of their union by the rule the
// result-merge analysis derives (analysis/Merge.h, analyzeResultMerge):
// kind 1 sums o and the finals, kind 2 weighs each o by e^(lse_i - lse).
// One CTA per query row (b, h, i), two columns a thread. A part whose
// first final is -inf met no key and is skipped.
#ifndef ATTNC_MERGE_RESULTS_CUH
#define ATTNC_MERGE_RESULTS_CUH

#include "attnc/merge_results_args.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

template <class T> __device__ void merge_results(const MergeResultsArgs &a) {
  const long long row = blockIdx.x;
  const long long plane = (long long)a.batch * a.heads * a.seq_q;
  const int qi = int(row % a.seq_q);
  const int h = int((row / a.seq_q) % a.heads);
  const int b = int(row / ((long long)a.seq_q * a.heads));
  const int c = 2 * threadIdx.x;
  const float ninf = __int_as_float(0xff800000);
  float o0 = 0.f, o1 = 0.f, lse = ninf;
  float fin[8];
  for (int f = 0; f < 8; ++f)
    fin[f] = 0.f;
  bool seen = false;
  for (int p = 0; p < a.parts; ++p) {
    const float *pf = a.finals[p];
    if (a.num_finals > 0 && pf[row] == ninf)
      continue;
    const u32 x = *reinterpret_cast<const u32 *>(
        static_cast<const unsigned short *>(a.o[p]) + b * a.o_s[p][0] +
        h * a.o_s[p][1] + qi * a.o_s[p][2] + c);
    const float x0 = unpack_half<T>(x, false), x1 = unpack_half<T>(x, true);
    if (a.kind == 2) {
      const float l = pf[a.lse_final * plane + row];
      const float m = fmaxf(lse, l);
      const float wa = seen ? __expf(lse - m) : 0.f, wb = __expf(l - m);
      // o and the sum of weights kept relative to the running max m.
      const float s = wa + wb;
      o0 = (wa * o0 + wb * x0) / s;
      o1 = (wa * o1 + wb * x1) / s;
      lse = m + __logf(s);
    } else {
      o0 += x0;
      o1 += x1;
      for (int f = 0; f < a.num_finals && f < 8; ++f)
        fin[f] = seen ? fin[f] + pf[f * plane + row] : pf[f * plane + row];
    }
    seen = true;
  }
  *reinterpret_cast<u32 *>(static_cast<unsigned short *>(a.out) + b * a.out_s[0] +
                           h * a.out_s[1] + qi * a.out_s[2] + c) = pack2<T>(o0, o1);
  if (threadIdx.x != 0)
    return;
  for (int f = 0; f < a.num_finals && f < 8; ++f)
    a.out_finals[f * plane + row] =
        !seen ? ninf : (a.kind == 2 && f == a.lse_final ? lse : fin[f]);
}

} // namespace attnc

#endif
