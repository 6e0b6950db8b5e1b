// Problem signature: names, validation, text form.
#include "attn/dsl/Problem.h"

#include "attn/Error.h"

#include "llvm/ADT/StringRef.h"

#include <fmt/format.h>

namespace attn {

std::string_view dtypeName(DType T) {
  switch (T) {
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F32:
    return "f32";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  }
  return "?";
}

std::optional<DType> dtypeFromName(std::string_view Name) {
  if (Name == "f16" || Name == "fp16" || Name == "float16")
    return DType::F16;
  if (Name == "bf16" || Name == "bfloat16")
    return DType::BF16;
  if (Name == "f32" || Name == "float32")
    return DType::F32;
  if (Name == "i32" || Name == "int32")
    return DType::I32;
  if (Name == "i64" || Name == "int64")
    return DType::I64;
  return std::nullopt;
}

void checkAttentionDtype(DType T, std::string_view What) {
  if (!isAttentionDtype(T))
    throw UserError(fmt::format("{}: dtype {} is not f16 or bf16 (the dtype "
                                "of q, k, v and o)",
                                What, dtypeName(T)));
}

std::string_view layoutName(Layout L) {
  switch (L) {
  case Layout::BSHD:
    return "bshd";
  case Layout::BHSD:
    return "bhsd";
  case Layout::THD:
    return "thd";
  }
  return "?";
}

std::optional<Layout> layoutFromName(std::string_view NameText) {
  llvm::StringRef Name = NameText;
  if (Name.equals_insensitive("bshd"))
    return Layout::BSHD;
  if (Name.equals_insensitive("bhsd"))
    return Layout::BHSD;
  if (Name.equals_insensitive("thd"))
    return Layout::THD;
  return std::nullopt;
}

ProblemShape ProblemShape::meta(int64_t B, int64_t H, int64_t S, int64_t D,
                                int64_t DV, DType T) {
  ProblemShape P;
  P.batch = B;
  P.heads = H;
  P.heads_kv = H;
  P.seq_q = S;
  P.seq_kv = S;
  P.head_dim = D;
  P.head_dim_v = DV;
  P.dtype = T;
  return P;
}

void ProblemShape::validate() const {
  auto Positive = [](const char *Field, int64_t V) {
    if (V < 1)
      throw UserError(fmt::format("problem: {} must be at least 1, got {}",
                                  Field, V));
  };
  Positive("batch", batch);
  Positive("heads", heads);
  Positive("heads_kv", heads_kv);
  Positive("seq_q", seq_q);
  Positive("seq_kv", seq_kv);
  Positive("head_dim", head_dim);
  Positive("head_dim_v", head_dim_v);
  checkAttentionDtype(dtype, "problem");
  if (heads % heads_kv != 0)
    throw UserError(fmt::format(
        "problem: heads_kv ({}) must divide heads ({})", heads_kv, heads));
}

std::string ProblemShape::str() const {
  return fmt::format("b{} h{}/{} s{}x{} d{}/{} {} {}", batch, heads, heads_kv,
                     seq_q, seq_kv, head_dim, head_dim_v,
                     std::string(dtypeName(dtype)), std::string(layoutName(layout)));
}

} // namespace attn
