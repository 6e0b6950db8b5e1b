// Kernel arguments and sizes of the linear decode step, shared by the host
// launcher and the device code (plain structs and constants).
#ifndef ATTNC_LINEAR_DECODE_ARGS_CUH
#define ATTNC_LINEAR_DECODE_ARGS_CUH

#ifdef __CUDACC__
#define ATTNC_DECODE_HD __host__ __device__
#else
#define ATTNC_DECODE_HD
#endif

namespace attnc {

/// The decode step's kernel arguments (one layout on host and device).
/// Strides are in elements (batch, head, token); the feature dimension of
/// q, k, v, o is contiguous; the states are contiguous [pool, H, D, DV].
struct LinearDecodeArgs {
  const void *q, *k, *v; ///< raw inputs (before the mods), 16-bit
  void *o;               ///< like v
  const float *decay;    ///< [B,H,N] fp32, null when decay_mod ignores it
  const float *state_in; ///< [pool, H, D, DV]
  float *state_out;      ///< the same shape; may be state_in (in place)
  /// [B] int32: row b's state is pool entry state_index[b]; an entry
  /// outside [0, pool) leaves row b untouched. Null: entry b.
  const int *state_index;
  /// [B] int32: the position (the mods' t) of row b's first new token.
  /// Null: 0.
  const int *positions;
  long long q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, v_sb, v_sh, v_ss;
  long long o_sb, o_sh, o_ss;
  long long decay_sb, decay_sh, decay_ss;
  int batch, heads, heads_q, heads_k, tokens, pool;
};

namespace dec {
/// Columns of S per CTA, threads, and the most tokens of one call. Four
/// warps: each thread then holds D / 16 float4 of S (80 registers at D =
/// 128, six CTAs an SM), twice the state bytes in flight per thread of
/// eight warps (64 registers, four CTAs an SM: 65-69% of a device copy's
/// bandwidth on an H200 at batch >= 32, docs/performance.md).
constexpr int kCols = 32;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxTokens = 16;
/// Row lanes of a warp: lane % 8 owns 4 columns, lane / 8 one row.
constexpr int kRowsPerStep = kWarps * 4;

/// Dynamic shared memory for \p n tokens at head dim \p d: the modded q and
/// k [n][d], v [n][kCols], the warps' partial outputs [kWarps][n][kCols]
/// and exp(g) [n], all fp32.
ATTNC_DECODE_HD constexpr int smem_bytes(int d, int n) {
  return 4 * (n * (2 * d + kCols + 1) + kWarps * n * kCols);
}
} // namespace dec

} // namespace attnc

#endif
