// The argument checks shared by Attention's and LinearAttention's
// validation: tensor views (pointer, dtype, alignment, strides), sequence
// tensors and custom inputs.
#include "ValidateCommon.h"

#include "attn/Error.h"
#include "attn/reference/InputBinding.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn::runtime {

void invalid(const std::string &Msg) { throw InvalidArgument(Msg); }

DType elemOf(DType T) {
  return T == DType::F16 ? DType::F16 : DType::BF16;
}

void checkNotNull(const std::string &Name, const TensorView &T) {
  if (!T.Data)
    invalid(Name + ": null data pointer");
}

void checkElemType(const std::string &Name, const TensorView &T,
                   DType Want) {
  if (T.Type != Want)
    invalid(fmt::format("{}: expected dtype {}, got {}", Name,
                        dtypeName(Want), dtypeName(T.Type)));
}

void checkAligned(const std::string &Name, const TensorView &T, int Bytes) {
  if (reinterpret_cast<uintptr_t>(T.Data) % Bytes != 0)
    invalid(fmt::format("{}: data pointer must be {}-byte aligned", Name,
                        Bytes));
}

void checkShape(const std::string &Name, const TensorView &T,
                const std::vector<int64_t> &Want) {
  if (T.Shape != Want)
    invalid(fmt::format("{}: expected shape {}, got {}", Name, shapeText(Want),
                        shapeText(T.Shape)));
}

void checkNonNegativeStrides(const std::string &Name, const TensorView &T) {
  for (int64_t S : T.Strides)
    if (S < 0)
      invalid(Name + ": strides must be non-negative");
}

void checkLike(const char *Name, const SeqTensor &G, const char *Of,
               int64_t B, int64_t S, int64_t H) {
  if (G.B != B || G.S != S || G.H != H)
    invalid(fmt::format("{}: expected batch {}, seq {} and heads {} (as {}), "
                        "got {}, {} and {}",
                        Name, B, S, H, Of, G.B, G.S, G.H));
}

void storeStrides(int64_t (&Dst)[3], const SeqTensor &S) {
  std::copy(S.Strides, S.Strides + 3, Dst);
}

namespace {

/// Checks input \p D's value against shape \p Want; \p Layout, where not
/// empty, names the axes in the shape error ("[heads, q tokens]").
void checkInput(const ir::InputDecl &D, const InputValue &Val,
                const std::vector<int64_t> &Want, const std::string &Layout) {
  bool Int = D.Elem == ir::InputType::I32;
  if (D.Shape == ir::InputShape::Scalar) {
    if (std::holds_alternative<TensorView>(Val))
      invalid("input '" + D.Name + "': a scalar input takes a number");
    if (Int != std::holds_alternative<int32_t>(Val))
      invalid("input '" + D.Name + "': the scalar input is " +
              (Int ? "int32; pass an int32_t" : "float32; pass a float") +
              ", got " + (Int ? "a float" : "an int32_t"));
    return;
  }
  if (!std::holds_alternative<TensorView>(Val))
    invalid("input '" + D.Name + "': expected " +
            (Int ? "an int32" : "a float32") + " tensor, got a number");
  const TensorView &T = std::get<TensorView>(Val);
  const std::string Name = "input '" + D.Name + "'";
  checkNotNull(Name, T);
  checkElemType(Name, T, Int ? DType::I32 : DType::F32);
  checkShape(Name + " (" + ir::inputShapeName(D.Shape).str() +
                 (Layout.empty() ? "" : " " + Layout) + ")",
             T, Want);
  if (T.Strides.size() != T.Shape.size() || T.Strides.back() != 1)
    invalid(Name + ": the last stride must be 1");
  checkNonNegativeStrides(Name, T);
  checkAligned(Name, T, 4);
}

/// Every declared input supplied and of its shape (\p Want), no other.
template <class WantFn>
void checkEachInput(const ir::Graph &G, const InputMap &Inputs, const WantFn &Want) {
  for (const ir::InputDecl &D : G.decls().Inputs) {
    auto It = Inputs.find(D.Name);
    if (It == Inputs.end())
      invalid("input '" + D.Name + "': declared by '" + G.name() +
              "' but not supplied");
    const auto [Shape, Layout] = Want(D.Shape);
    checkInput(D, It->second, Shape, Layout);
  }
  for (const auto &[Name, Value] : Inputs)
    if (!G.decls().findInput(Name))
      invalid("input '" + Name + "': '" + G.name() +
              "' declares no such input");
}

} // namespace

void checkInputsAs(const ir::Graph &G, const InputMap &Inputs,
                   const std::function<InputWant(const ir::InputDecl &)> &Want) {
  for (const ir::InputDecl &D : G.decls().Inputs) {
    auto It = Inputs.find(D.Name);
    if (It == Inputs.end())
      invalid("input '" + D.Name + "': declared by '" + G.name() +
              "' but not supplied");
    const InputWant W = Want(D);
    checkInput(D, It->second, W.Shape, W.Axes);
  }
  for (const auto &[Name, Value] : Inputs)
    if (!G.decls().findInput(Name))
      invalid("input '" + Name + "': '" + G.name() +
              "' declares no such input");
}

void checkInputs(const ir::Graph &G, int64_t B, int64_t H, int64_t Sq, int64_t Skv,
                 const InputMap &Inputs) {
  checkEachInput(G, Inputs, [&](ir::InputShape S) {
    return std::pair{reference::expectedInputShape(S, B, H, Sq, Skv), std::string()};
  });
}

void checkPackedInputs(const ir::Graph &G, int64_t H, int64_t TotalQ, int64_t TotalKv,
                       const InputMap &Inputs) {
  for (const ir::InputDecl &D : G.decls().Inputs)
    if (D.Shape == ir::InputShape::Full)
      throw NotSupportedYet(fmt::format(
          "input '{}': full inputs in packed variable-length calls (scalar, "
          "per_head, per_row, per_key, per_query_token and per_key_token "
          "inputs are supported)",
          D.Name));
  checkEachInput(G, Inputs, [&](ir::InputShape S) {
    switch (S) {
    case ir::InputShape::Scalar:
      return std::pair{std::vector<int64_t>{}, std::string()};
    case ir::InputShape::PerHead:
      return std::pair{std::vector<int64_t>{H}, std::string()};
    case ir::InputShape::PerRow:
      return std::pair{std::vector<int64_t>{H, TotalQ},
                       std::string("[heads, q tokens] in a packed call")};
    case ir::InputShape::PerKey:
      return std::pair{std::vector<int64_t>{H, TotalKv},
                       std::string("[heads, kv tokens] in a packed call")};
    case ir::InputShape::PerQueryToken:
      return std::pair{std::vector<int64_t>{TotalQ},
                       std::string("[q tokens] in a packed call")};
    case ir::InputShape::PerKeyToken:
      return std::pair{std::vector<int64_t>{TotalKv},
                       std::string("[kv tokens] in a packed call")};
    case ir::InputShape::Full:
      break;
    }
    throw InternalError("checkPackedInputs: a full input passed the refusal");
  });
}

std::string shapeText(const std::vector<int64_t> &S) {
  std::string T = "[";
  for (size_t I = 0; I < S.size(); ++I)
    T += (I ? ", " : "") + std::to_string(S[I]);
  return T + "]";
}

SeqTensor checkSeqTensor(const char *Name, const TensorView &T, DType Dtype,
                         attn::Layout L, int64_t HeadDim) {
  const char *Order = L == Layout::BSHD   ? "[batch, seq, heads, head_dim]"
                      : L == Layout::BHSD ? "[batch, heads, seq, head_dim]"
                                          : "[tokens, heads, head_dim]";
  const size_t Rank = L == Layout::THD ? 3 : 4;
  checkNotNull(Name, T);
  if (T.Shape.size() != Rank)
    invalid(fmt::format("{}: expected rank {} {}, got rank {}", Name, Rank,
                        Order, T.Shape.size()));
  if (T.Strides.size() != Rank)
    invalid(fmt::format("{}: strides must have {} entries, got {}", Name, Rank,
                        T.Strides.size()));
  checkElemType(Name, T, elemOf(Dtype));
  for (size_t I = 0; I < Rank; ++I)
    if (T.Shape[I] < 1)
      invalid(fmt::format("{}: dimension {} is {}, must be at least 1", Name, I,
                          T.Shape[I]));
  if (T.Shape[Rank - 1] != HeadDim)
    invalid(fmt::format("{}: head_dim (last dimension) must be {}, got {}",
                        Name, HeadDim, T.Shape[Rank - 1]));
  if (T.Strides[Rank - 1] != 1)
    invalid(fmt::format("{}: the head_dim stride must be 1, got {}", Name,
                        T.Strides[Rank - 1]));
  checkAligned(Name, T, 16);
  SeqTensor R;
  if (L == Layout::THD) {
    // One batch of all tokens: the kernels find each sequence's first
    // token from cu_seqlens, so the batch stride is never used.
    R.B = 1;
    R.S = T.Shape[0];
    R.H = T.Shape[1];
    R.D = T.Shape[2];
    R.Strides[0] = 0;
    R.Strides[1] = T.Strides[1];
    R.Strides[2] = T.Strides[0];
  } else {
    bool BSHD = L == Layout::BSHD;
    R.B = T.Shape[0];
    R.S = BSHD ? T.Shape[1] : T.Shape[2];
    R.H = BSHD ? T.Shape[2] : T.Shape[1];
    R.D = T.Shape[3];
    R.Strides[0] = T.Strides[0];
    R.Strides[1] = BSHD ? T.Strides[2] : T.Strides[1];
    R.Strides[2] = BSHD ? T.Strides[1] : T.Strides[2];
  }
  for (auto [What, S] : {std::pair{"batch", R.Strides[0]},
                         {"seq", R.Strides[2]},
                         {"heads", R.Strides[1]}})
    if (S % 8 != 0 || S < 0)
      invalid(fmt::format("{}: the {} stride ({}) must be a non-negative "
                          "multiple of 8 elements (16-byte rows)",
                          Name, What, S));
  return R;
}

} // namespace attn::runtime
