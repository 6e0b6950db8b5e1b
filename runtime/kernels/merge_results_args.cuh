// The public merge's kernel arguments, shared by the host launcher and
// merge_results.cuh.
#ifndef ATTNC_MERGE_RESULTS_ARGS_CUH
#define ATTNC_MERGE_RESULTS_ARGS_CUH

namespace attnc {

constexpr int kMaxMergeParts = 8;
/// The most finals a merged result has.
constexpr int kMaxMergeFinals = 8;

/// o tensors: element strides (batch, head, query); finals contiguous
/// [num_finals][batch][heads][seq_q]. final_of: a combine merge's final of
/// each online rowscale, in declaration order (the result is the state).
struct MergeResultsArgs {
  const void *o[kMaxMergeParts];
  const float *finals[kMaxMergeParts];
  long long o_s[kMaxMergeParts][3];
  void *out;
  float *out_finals;
  long long out_s[3];
  int parts, batch, heads, seq_q, num_finals, kind, lse_final;
  int final_of[kMaxMergeFinals];
};

} // namespace attnc

#endif
