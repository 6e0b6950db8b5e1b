// The extra kernel argument of the sm90 forward skeleton: the TMA tensor
// maps of q, k and v. Plain structs, included by the host launcher too, so
// the layouts agree by construction.
#ifndef ATTNC_SM90_ARGS_CUH
#define ATTNC_SM90_ARGS_CUH

namespace attnc {

/// The bytes of a CUtensorMap (cuda.h's opaque 128-byte, 128-byte aligned
/// struct), declared here so that device code needs no toolkit header. The
/// host fills it with cuTensorMapEncodeTiled; the kernel takes it by value
/// in a __grid_constant__ parameter, whose address TMA instructions use.
struct alignas(128) TmaDesc {
  unsigned long long bits[16];
};

/// The tensor maps of one sm90 forward call. q, k and v are described as
/// 4-D tensors: the head dimension, then sequence, heads and batch in the
/// order the host chose (increasing stride); *_pos give the coordinate
/// slot (1..3) of the sequence, head and batch index, two bits each: bits
/// 0-1 sequence, 2-3 heads, 4-5 batch.
struct Sm90Maps {
  TmaDesc q, k, v;
  int q_pos, k_pos, v_pos, pad_;
};

/// The tensor maps of one warp-specialised bwd_sm90 call (the producer
/// streams q and dout): the same 4-D description as Sm90Maps, boxes of 64
/// columns x the query step.
struct Sm90BwdMaps {
  TmaDesc q, dout;
  int q_pos, do_pos, pad_[2];
};

} // namespace attnc

#endif
