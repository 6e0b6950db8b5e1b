// Validation of Attention call arguments.
#include "attn/runtime/Validate.h"

#include "attn/runtime/Errors.h"

#include <fmt/format.h>

namespace attn::runtime {

namespace {

[[noreturn]] void invalid(const std::string &Msg) { throw InvalidArgument(Msg); }

std::string shapeText(const std::vector<int64_t> &S) {
  std::string T = "[";
  for (size_t I = 0; I < S.size(); ++I)
    T += (I ? ", " : "") + std::to_string(S[I]);
  return T + "]";
}

ElemType elemOf(DType T) { return T == DType::F16 ? ElemType::F16 : ElemType::BF16; }

/// Dims and strides of a q/k/v/o view as (B, S, H, D) and (sb, ss, sh).
struct Seq4 {
  int64_t B, S, H, D, SB, SS, SH;
};

Seq4 checkSeqTensor(const char *Name, const TensorView &T, const Signature &Sig,
                    int64_t HeadDim) {
  const char *Order = Sig.TensorLayout == Layout::BSHD
                          ? "[batch, seq, heads, head_dim]"
                          : "[batch, heads, seq, head_dim]";
  if (!T.Data)
    invalid(fmt::format("{}: null data pointer", Name));
  if (T.Shape.size() != 4)
    invalid(fmt::format("{}: expected rank 4 {}, got rank {}", Name, Order,
                        T.Shape.size()));
  if (T.Strides.size() != 4)
    invalid(fmt::format("{}: strides must have 4 entries, got {}", Name,
                        T.Strides.size()));
  if (T.Type != elemOf(Sig.Dtype))
    invalid(fmt::format("{}: expected dtype {}, got {}", Name,
                        elemTypeName(elemOf(Sig.Dtype)), elemTypeName(T.Type)));
  for (size_t I = 0; I < 4; ++I)
    if (T.Shape[I] < 1)
      invalid(fmt::format("{}: dimension {} is {}, must be at least 1", Name,
                          I, T.Shape[I]));
  if (T.Shape[3] != HeadDim)
    invalid(fmt::format("{}: head_dim (last dimension) must be {}, got {}",
                        Name, HeadDim, T.Shape[3]));
  if (T.Strides[3] != 1)
    invalid(fmt::format("{}: the head_dim stride must be 1, got {}", Name,
                        T.Strides[3]));
  if (reinterpret_cast<uintptr_t>(T.Data) % 16 != 0)
    invalid(fmt::format("{}: data pointer must be 16-byte aligned", Name));
  Seq4 R;
  bool BSHD = Sig.TensorLayout == Layout::BSHD;
  R.B = T.Shape[0];
  R.S = BSHD ? T.Shape[1] : T.Shape[2];
  R.H = BSHD ? T.Shape[2] : T.Shape[1];
  R.D = T.Shape[3];
  R.SB = T.Strides[0];
  R.SS = BSHD ? T.Strides[1] : T.Strides[2];
  R.SH = BSHD ? T.Strides[2] : T.Strides[1];
  for (auto [What, S] : {std::pair{"batch", R.SB}, {"seq", R.SS}, {"heads", R.SH}})
    if (S % 8 != 0 || S < 0)
      invalid(fmt::format("{}: the {} stride ({}) must be a non-negative "
                          "multiple of 8 elements (16-byte rows)",
                          Name, What, S));
  return R;
}

void checkInput(const ir::InputDecl &D, const InputValue &Val,
                const CallShape &C) {
  if (D.Shape == ir::InputShape::Scalar) {
    if (!std::holds_alternative<float>(Val))
      invalid("input '" + D.Name + "': a scalar input takes a number");
    return;
  }
  if (!std::holds_alternative<TensorView>(Val))
    invalid("input '" + D.Name + "': expected a float32 tensor, got a number");
  const TensorView &T = std::get<TensorView>(Val);
  std::vector<int64_t> Want;
  switch (D.Shape) {
  case ir::InputShape::Scalar:
    break;
  case ir::InputShape::PerHead:
    Want = {C.H};
    break;
  case ir::InputShape::PerRow:
    Want = {C.B, C.H, C.Sq};
    break;
  case ir::InputShape::PerKey:
    Want = {C.B, C.H, C.Skv};
    break;
  case ir::InputShape::Full:
    Want = {C.B, C.H, C.Sq, C.Skv};
    break;
  }
  if (!T.Data)
    invalid("input '" + D.Name + "': null data pointer");
  if (T.Type != ElemType::F32)
    invalid(fmt::format("input '{}': expected dtype f32, got {}", D.Name,
                        elemTypeName(T.Type)));
  if (T.Shape != Want)
    invalid(fmt::format("input '{}' ({}): expected shape {}, got {}", D.Name,
                        ir::inputShapeName(D.Shape).str(), shapeText(Want),
                        shapeText(T.Shape)));
  if (T.Strides.size() != T.Shape.size() || T.Strides.back() != 1)
    invalid("input '" + D.Name + "': the last stride must be 1");
  if (reinterpret_cast<uintptr_t>(T.Data) % 4 != 0)
    invalid("input '" + D.Name + "': data pointer must be 4-byte aligned");
}

} // namespace

CallShape validateCall(const ir::Graph &G, const Signature &Sig,
                       const TensorView &Q, const TensorView &K,
                       const TensorView &V, const TensorView &Out,
                       const TensorView *Finals, const InputMap &Inputs) {
  Seq4 q = checkSeqTensor("q", Q, Sig, Sig.HeadDim);
  Seq4 k = checkSeqTensor("k", K, Sig, Sig.HeadDim);
  Seq4 v = checkSeqTensor("v", V, Sig, Sig.HeadDimV);
  Seq4 o = checkSeqTensor("out", Out, Sig, Sig.HeadDimV);
  if (k.B != q.B || v.B != q.B || o.B != q.B)
    invalid(fmt::format("k, v, out: batch must equal q's ({}), got {}, {}, {}",
                        q.B, k.B, v.B, o.B));
  if (v.H != k.H)
    invalid(fmt::format("v: heads must equal k's ({}), got {}", k.H, v.H));
  if (q.H % k.H != 0)
    invalid(fmt::format("k: heads ({}) must divide q's heads ({})", k.H, q.H));
  if (v.S != k.S)
    invalid(fmt::format("v: seq must equal k's ({}), got {}", k.S, v.S));
  if (o.S != q.S || o.H != q.H)
    invalid(fmt::format("out: expected seq {} and heads {} (as q), got {} and {}",
                        q.S, q.H, o.S, o.H));
  if (q.S > (1 << 30) || k.S > (1 << 30))
    invalid("q, k: sequence lengths above 2^30 are not supported");
  CallShape C;
  C.B = q.B;
  C.H = q.H;
  C.Hkv = k.H;
  C.Sq = q.S;
  C.Skv = k.S;
  auto Store = [](int64_t (&Dst)[3], const Seq4 &S) {
    Dst[0] = S.SB;
    Dst[1] = S.SH;
    Dst[2] = S.SS;
  };
  Store(C.Q, q);
  Store(C.K, k);
  Store(C.V, v);
  Store(C.O, o);

  size_t NumFinals = G.decls().FinalRowscales.size();
  if (NumFinals > 0) {
    std::vector<int64_t> Want = {int64_t(NumFinals), C.B, C.H, C.Sq};
    if (!Finals)
      invalid(fmt::format("finals: required, a float32 tensor of shape {} "
                          "for the final rowscales of '{}'",
                          shapeText(Want), G.name()));
    if (!Finals->Data)
      invalid("finals: null data pointer");
    if (reinterpret_cast<uintptr_t>(Finals->Data) % 4 != 0)
      invalid("finals: data pointer must be 4-byte aligned");
    if (Finals->Type != ElemType::F32)
      invalid(fmt::format("finals: expected dtype f32, got {}",
                          elemTypeName(Finals->Type)));
    if (Finals->Shape != Want)
      invalid(fmt::format("finals: expected shape {}, got {}", shapeText(Want),
                          shapeText(Finals->Shape)));
    std::vector<int64_t> Contiguous = {C.B * C.H * C.Sq, C.H * C.Sq, C.Sq, 1};
    if (Finals->Strides != Contiguous)
      invalid("finals: must be contiguous");
  }
  for (const ir::InputDecl &D : G.decls().Inputs) {
    auto It = Inputs.find(D.Name);
    if (It == Inputs.end())
      invalid("input '" + D.Name + "': declared by '" + G.name() +
              "' but not supplied");
    checkInput(D, It->second, C);
  }
  for (const auto &[Name, Value] : Inputs)
    if (!G.decls().findInput(Name))
      invalid("input '" + Name + "': '" + G.name() + "' declares no such input");
  return C;
}

} // namespace attn::runtime
