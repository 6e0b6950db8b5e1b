// The problem signature, in the spirit of the seeds' meta_tensor.
#ifndef ATTN_DSL_PROBLEM_H
#define ATTN_DSL_PROBLEM_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace attn {

enum class DType : uint8_t { F16, BF16 };
llvm::StringRef dtypeName(DType T);
std::optional<DType> dtypeFromName(llvm::StringRef Name);

/// Memory order of q, k, v and o: [batch, seq, heads, dim] or
/// [batch, heads, seq, dim] (any strides are accepted at run time), or THD:
/// the sequences of a batch packed one after another, [total_tokens, heads,
/// dim], for variable-length calls (runtime::VarlenBatch says where each
/// sequence starts).
enum class Layout : uint8_t { BSHD, BHSD, THD };
llvm::StringRef layoutName(Layout L);
std::optional<Layout> layoutFromName(llvm::StringRef Name);

/// Shapes and types of one attention call. For linear attention, seq_q is
/// the sequence length T, heads counts value heads, heads_kv the q/k heads
/// (which must divide heads: the seeds' ngroups).
struct ProblemShape {
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t heads_kv = 1;
  int64_t seq_q = 1;
  int64_t seq_kv = 1;
  int64_t head_dim = 64;
  int64_t head_dim_v = 64;
  DType dtype = DType::F16;
  Layout layout = Layout::BSHD;

  /// Shapes as the seeds' meta_tensor gives them: q [B,H,S,D], v [.., DV].
  static ProblemShape meta(int64_t B, int64_t H, int64_t S, int64_t D,
                           int64_t DV, DType T = DType::F16);

  /// UserError naming the first field that is out of range.
  void validate() const;
  /// "b2 h8/8 s1024x1024 d128/128 f16 bshd"
  std::string str() const;
};

} // namespace attn

#endif
