// Problem signature: names, validation, text form.
#include "attn/dsl/Problem.h"

#include "attn/Error.h"

#include <fmt/format.h>

namespace attn {

llvm::StringRef dtypeName(DType T) {
  switch (T) {
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  }
  return "?";
}

std::optional<DType> dtypeFromName(llvm::StringRef Name) {
  if (Name == "f16" || Name == "fp16" || Name == "float16")
    return DType::F16;
  if (Name == "bf16" || Name == "bfloat16")
    return DType::BF16;
  return std::nullopt;
}

llvm::StringRef layoutName(Layout L) {
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

std::optional<Layout> layoutFromName(llvm::StringRef Name) {
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
  if (heads % heads_kv != 0)
    throw UserError(fmt::format(
        "problem: heads_kv ({}) must divide heads ({})", heads_kv, heads));
}

std::string ProblemShape::str() const {
  return fmt::format("b{} h{}/{} s{}x{} d{}/{} {} {}", batch, heads, heads_kv,
                     seq_q, seq_kv, head_dim, head_dim_v,
                     dtypeName(dtype).str(), layoutName(layout).str());
}

} // namespace attn
