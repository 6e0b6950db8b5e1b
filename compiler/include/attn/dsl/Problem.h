// The problem signature, in the spirit of the seeds' meta_tensor.
#ifndef ATTN_DSL_PROBLEM_H
#define ATTN_DSL_PROBLEM_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace attn {

/// The element type of a tensor, one enum for signatures and tensor views:
/// q, k, v and o are F16 or BF16 (isAttentionDtype); finals, decays,
/// states and float custom inputs F32; int32 custom inputs, sequence
/// offsets and page indices I32; a paged append's slot mapping I32 or I64.
enum class DType : uint8_t { F16, BF16, F32, I32, I64 };
/// "f16", "bf16", "f32", "i32", "i64".
std::string_view dtypeName(DType T);
/// dtypeName's spellings, and "fp16", "float16", "bfloat16", "float32",
/// "int32", "int64".
std::optional<DType> dtypeFromName(std::string_view Name);
/// Whether \p T is a dtype of q, k, v and o (what a signature's Dtype
/// names): F16 or BF16.
constexpr bool isAttentionDtype(DType T) {
  return T == DType::F16 || T == DType::BF16;
}
/// UserError unless isAttentionDtype(\p T): "\p What: dtype f32 is not
/// f16 or bf16 (the dtype of q, k, v and o)".
void checkAttentionDtype(DType T, std::string_view What);

/// Memory order of q, k, v and o: [batch, seq, heads, dim] or
/// [batch, heads, seq, dim] (any strides are accepted at run time), or THD:
/// the sequences of a batch packed one after another, [total_tokens, heads,
/// dim], for variable-length calls (runtime::VarlenBatch says where each
/// sequence starts).
enum class Layout : uint8_t { BSHD, BHSD, THD };
std::string_view layoutName(Layout L);
std::optional<Layout> layoutFromName(std::string_view Name);

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

  /// UserError naming the first field that is out of range (a dtype that
  /// is not f16 or bf16 included).
  void validate() const;
  /// "b2 h8/8 s1024x1024 d128/128 f16 bshd"
  std::string str() const;
};

} // namespace attn

#endif
