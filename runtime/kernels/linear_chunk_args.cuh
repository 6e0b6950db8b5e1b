// Kernel arguments of the chunked linear-attention skeletons, shared by the
// host launcher and the device code (plain structs, one layout on both sides).
#ifndef ATTNC_LINEAR_CHUNK_ARGS_CUH
#define ATTNC_LINEAR_CHUNK_ARGS_CUH

namespace attnc {

/// Every linear-attention kernel takes this struct. Strides are in elements
/// (batch, head, seq); the feature dimension of q/k/v/o and their gradients
/// is contiguous. Per (batch, value head): q from head h / (heads /
/// heads_q), k from head h / (heads / heads_k). Fields a kernel does not use
/// may be null or zero.
struct LinearArgs {
  // ---- forward ----
  const void *q, *k, *v;   ///< raw inputs (before the mods), 16-bit
  const float *decay;      ///< [B,H,T] fp32, null when decay_mod ignores it
  void *o;                 ///< [B,T,H,DV] or [B,H,T,DV], 16-bit
  const float *init_state; ///< [B,H,D,DV] fp32 contiguous, or null (zero)
  float *final_state;      ///< [B,H,D,DV] fp32 contiguous, or null
  long long q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, v_sb, v_sh, v_ss;
  long long o_sb, o_sh, o_ss;
  long long decay_sb, decay_sh, decay_ss;

  // ---- backward ----
  const void *dout;          ///< like o
  void *dq, *dk, *dv;        ///< like q, k, v (gradients of the raw inputs)
  float *ddecay;             ///< [B,H,T] fp32 contiguous, or null
  const float *dfinal_state; ///< [B,H,D,DV] fp32 contiguous, or null (zero)
  float *dinit_state;        ///< [B,H,D,DV] fp32 contiguous, or null
  long long do_sb, do_sh, do_ss, dq_sb, dq_sh, dq_ss, dk_sb, dk_sh, dk_ss;
  long long dv_sb, dv_sh, dv_ss;
  /// Workspace, all written before it is read (nothing needs zeroing). NC
  /// is the number of chunks, P = slices x column groups of the dk/dv scan.
  /// ws_h [B][H][NC][D][DV] (T, 16-bit): the state after each chunk;
  /// ws_z [Z][B][H][NC]: <S_out, dS_out> of each chunk, Z partial sums;
  /// ws_dq, ws_dk [slices][B][H][T][D]: dq, dk of the modded q, k, one
  /// partial sum per value slice; ws_vin [P][inputs][B][H][T]: the v_mod
  /// part of each custom input's per-token gradient; ws_dlam [B][H][T]:
  /// q·dq − k·dk per token; ws_cin [inputs][B][H][T]: per-token
  /// custom-input gradients; ws_dxq, ws_dxk [B][H][T][D]: per value head
  /// gradients of the raw q, k before the sum over a head group (only when
  /// heads_q or heads_k < heads).
  void *ws_h;
  float *ws_z, *ws_dq, *ws_dk, *ws_vin, *ws_dlam, *ws_cin, *ws_dxq, *ws_dxk;

  int batch, heads, heads_q, heads_k, seq;
  /// Value-dimension slices (DV / slice width): blockIdx.x of the scans.
  int slices;
  /// Chunks (ceil(seq / chunk)), the partial sums in ws_vin (slices x the
  /// dk/dv scan's column groups) and in ws_z (slices x its warps).
  int chunks, vin_parts, z_parts;
};

/// The last step of a custom input's gradient: ws_cin[input] summed to the
/// input's shape class (0: per row, a copy; 1: per head, over batch and
/// tokens; 2: scalar, over everything).
struct LinearInputReduceArgs {
  const float *cin; ///< [B][H][T]
  float *out;       ///< [B][H][T], [H] or [1], contiguous
  int kind, batch, heads, seq;
};

/// The sum of per-value-head raw q (or k) gradients over a head group.
struct LinearGroupReduceArgs {
  const float *ws; ///< [B][H][T][D]
  void *out;       ///< 16-bit, [.., heads_out, .., D] by the strides
  long long sb, sh, ss;
  int batch, heads, heads_out, seq, dim;
};

} // namespace attnc

#endif
