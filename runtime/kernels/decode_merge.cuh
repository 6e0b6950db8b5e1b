// attnc_decode_merge's body: the partial states of decode's key splits
// merged in split order by the definition's Merge rule, then the epilogue.
#ifndef ATTNC_DECODE_MERGE_CUH
#define ATTNC_DECODE_MERGE_CUH

#include "attnc/decode_args.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

/// Two output columns of one row, for the merge kernel's epilogue.
struct DecodeOutPair {
  static constexpr int kRows = 1;
  static constexpr int kCols = 2;
  float v[2];
  __device__ __forceinline__ float &at(int, int c) { return v[c]; }
};

/// attnc_decode_merge: one CTA per query row (b, h, i), kDV / 2 threads of
/// two columns each: the splits' states merged in order by Merge's rule
/// (a part that met no unmasked key is skipped), then the epilogue.
template <class Variant, class Merge, class T, int kDV>
__device__ void decode_merge(const DecodeArgs &a, const typename Variant::Inputs &in) {
  static_assert(Merge::kKind != 0, "a definition without a merge never splits");
  const long long row = blockIdx.x;
  const long long plane = (long long)a.batch * a.heads * a.seq_q;
  const int qi = int(row % a.seq_q);
  const int h = int((row / a.seq_q) % a.heads);
  const int b = int(row / ((long long)a.seq_q * a.heads));
  const int c = 2 * threadIdx.x;
  typename Variant::RowState st;
  Variant::init(st);
  bool seen = false;
  DecodeOutPair of{{0.f, 0.f}};
  for (int s = 0; s < a.splits; ++s) {
    const float *ps = a.part_st + (s * plane + row) * kDecodeStateFloats;
    if (ps[kDecodeStateFloats - 1] == 0.f)
      continue;
    typename Variant::RowState part;
    Merge::load(part, ps);
    const float2 po =
        *reinterpret_cast<const float2 *>(a.part_o + (s * plane + row) * kDV + c);
    float fa = 0.f, fb = 1.f;
    if (seen)
      Merge::merge(st, part, fa, fb);
    else
      st = part;
    seen = true;
    of.v[0] = fa * of.v[0] + fb * po.x;
    of.v[1] = fa * of.v[1] + fb * po.y;
  }
  float finals[Variant::kNumFinals > 0 ? Variant::kNumFinals : 1];
  if (seen) {
    Variant::epilogue(in, st, of, 0, b, h, qi, finals);
  } else {
    of.v[0] = of.v[1] = 0.f;
#pragma unroll
    for (int f = 0; f < Variant::kNumFinals; ++f)
      finals[f] = -__int_as_float(0x7f800000);
  }
  unsigned short *o = static_cast<unsigned short *>(a.o) + b * a.o_sb + h * a.o_sh +
                      qi * a.o_ss;
  *reinterpret_cast<u32 *>(o + c) = pack2<T>(of.v[0], of.v[1]);
  if (threadIdx.x == 0)
#pragma unroll
    for (int f = 0; f < Variant::kNumFinals; ++f)
      a.finals[f * plane + row] = finals[f];
}

} // namespace attnc

#endif
