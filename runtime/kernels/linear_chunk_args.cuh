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
  /// is the number of chunks, P = slices x column groups of the chunk
  /// gradients. ws_h [B][H][NC][D][DV] (T, 16-bit): the state before each
  /// chunk; ws_dh (the same): the gradient of the state after each chunk;
  /// ws_z [Z][B][H][NC]: <S_out, dS_out> of each chunk, Z partial sums
  /// (one per value slice); ws_dq, ws_dk [slices][B][H][T][D]: with several
  /// slices, dq and dk of the modded q, k per slice; ws_vin
  /// [P][inputs][B][H][T]: the v_mod part of each custom input's per-token
  /// gradient; ws_dlam [B][H][T]: q·dq − k·dk per token; ws_cin
  /// [inputs][B][H][T]: per-token custom-input gradients; ws_gq
  /// [B][heads_q][Pq][T][D], ws_gk [B][heads_k][Pk][T][D]: the raw q, k
  /// gradients summed over each sub-group of the value heads sharing them
  /// (P = heads / heads_q / group_heads sub-groups; only when heads_q or
  /// heads_k < heads).
  void *ws_h, *ws_dh;
  float *ws_z, *ws_dq, *ws_dk, *ws_vin, *ws_dlam, *ws_cin, *ws_gq, *ws_gk;

  int batch, heads, heads_q, heads_k, seq;
  /// Value-dimension slices (DV / slice width): blockIdx.x of the forward
  /// and of the state passes.
  int slices;
  /// Chunks (ceil(seq / chunk)) and the partial sums in ws_vin (slices x
  /// the chunk gradients' column groups).
  int chunks, vin_parts, z_parts;
  /// Value heads per CTA of the chunk gradients (1, or with shared q/k
  /// heads a divisor of both heads / heads_q and heads / heads_k).
  int group_heads;
  /// A packed batch's [seqs + 1] int32 token offsets (the varlen forward
  /// and backward; batch is then 1 and seq the packed tokens), else null.
  const int *cu_seqlens;
  /// The packed batch's sequences (the packed forward, which takes them
  /// longest first, and backward; see linear_chunk_seq.cuh).
  int seqs;
  /// The packed forward's CTA rows beyond seqs (a grid of seqs +
  /// seq_split rows of heads): at most this many of the longest sequences
  /// are split over two rows (lin::seq_job); 0 splits none.
  int seq_split;
  /// The backward's state pairs (linear_chunk_grads.cuh): 1 when the state
  /// passes write H only before even chunks and dH only after odd chunks
  /// and a sequence's last, and each chunk-gradient CTA recomputes the
  /// other from its neighbour chunk's tiles; 0 writes every chunk's.
  int pairs;
};

/// The last step of a custom input's gradient: ws_cin[input] summed to the
/// input's shape class (0: per row, a copy; 1: per head, over batch and
/// tokens; 2: scalar, over everything).
struct LinearInputReduceArgs {
  const float *cin; ///< [B][H][T]
  float *out;       ///< [B][H][T], [H] or [1], contiguous
  int kind, batch, heads, seq;
};

/// out[b, x, t, :] = Σ_p ws[b][x][p][t][:] for p in order, rounded to the
/// output's type: the partial sums of a shared q (or k) head's gradient.
struct LinearPartialReduceArgs {
  const float *ws; ///< [B][heads_out][parts][T][dim]
  void *out;       ///< 16-bit, [.., heads_out, .., dim] by the strides
  long long sb, sh, ss;
  int batch, heads_out, parts, seq, dim;
};

} // namespace attnc

#endif
