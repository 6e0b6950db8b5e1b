// Validation of Attention call arguments.
#include "attn/runtime/Validate.h"

#include "attn/codegen/InputLayout.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn::runtime {

namespace {

[[noreturn]] void invalid(const std::string &Msg) {
  throw InvalidArgument(Msg);
}

ElemType elemOf(DType T) {
  return T == DType::F16 ? ElemType::F16 : ElemType::BF16;
}

void checkInput(const ir::InputDecl &D, const InputValue &Val, int64_t B, int64_t H,
                int64_t Sq, int64_t Skv) {
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
    Want = {H};
    break;
  case ir::InputShape::PerRow:
    Want = {B, H, Sq};
    break;
  case ir::InputShape::PerKey:
    Want = {B, H, Skv};
    break;
  case ir::InputShape::Full:
    Want = {B, H, Sq, Skv};
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
  for (int64_t S : T.Strides)
    if (S < 0)
      invalid("input '" + D.Name + "': strides must be non-negative");
  if (reinterpret_cast<uintptr_t>(T.Data) % 4 != 0)
    invalid("input '" + D.Name + "': data pointer must be 4-byte aligned");
}

void checkFinals(const ir::Graph &G, const CallShape &C,
                 const TensorView *Finals) {
  size_t NumFinals = G.decls().FinalRowscales.size();
  if (NumFinals == 0)
    return;
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

} // namespace

void checkInputs(const ir::Graph &G, int64_t B, int64_t H, int64_t Sq, int64_t Skv,
                 const InputMap &Inputs) {
  for (const ir::InputDecl &D : G.decls().Inputs) {
    auto It = Inputs.find(D.Name);
    if (It == Inputs.end())
      invalid("input '" + D.Name + "': declared by '" + G.name() +
              "' but not supplied");
    checkInput(D, It->second, B, H, Sq, Skv);
  }
  for (const auto &[Name, Value] : Inputs)
    if (!G.decls().findInput(Name))
      invalid("input '" + Name + "': '" + G.name() +
              "' declares no such input");
}

std::string shapeText(const std::vector<int64_t> &S) {
  std::string T = "[";
  for (size_t I = 0; I < S.size(); ++I)
    T += (I ? ", " : "") + std::to_string(S[I]);
  return T + "]";
}

SeqTensor checkSeqTensor(const char *Name, const TensorView &T, DType Dtype,
                         attn::Layout L, int64_t HeadDim) {
  const char *Order = L == Layout::BSHD ? "[batch, seq, heads, head_dim]"
                                        : "[batch, heads, seq, head_dim]";
  if (!T.Data)
    invalid(fmt::format("{}: null data pointer", Name));
  if (T.Shape.size() != 4)
    invalid(fmt::format("{}: expected rank 4 {}, got rank {}", Name, Order,
                        T.Shape.size()));
  if (T.Strides.size() != 4)
    invalid(fmt::format("{}: strides must have 4 entries, got {}", Name,
                        T.Strides.size()));
  if (T.Type != elemOf(Dtype))
    invalid(fmt::format("{}: expected dtype {}, got {}", Name,
                        elemTypeName(elemOf(Dtype)), elemTypeName(T.Type)));
  for (size_t I = 0; I < 4; ++I)
    if (T.Shape[I] < 1)
      invalid(fmt::format("{}: dimension {} is {}, must be at least 1", Name, I,
                          T.Shape[I]));
  if (T.Shape[3] != HeadDim)
    invalid(fmt::format("{}: head_dim (last dimension) must be {}, got {}",
                        Name, HeadDim, T.Shape[3]));
  if (T.Strides[3] != 1)
    invalid(fmt::format("{}: the head_dim stride must be 1, got {}", Name,
                        T.Strides[3]));
  if (reinterpret_cast<uintptr_t>(T.Data) % 16 != 0)
    invalid(fmt::format("{}: data pointer must be 16-byte aligned", Name));
  SeqTensor R;
  bool BSHD = L == Layout::BSHD;
  R.B = T.Shape[0];
  R.S = BSHD ? T.Shape[1] : T.Shape[2];
  R.H = BSHD ? T.Shape[2] : T.Shape[1];
  R.D = T.Shape[3];
  R.Strides[0] = T.Strides[0];
  R.Strides[1] = BSHD ? T.Strides[2] : T.Strides[1];
  R.Strides[2] = BSHD ? T.Strides[1] : T.Strides[2];
  for (auto [What, S] : {std::pair{"batch", R.Strides[0]},
                         {"seq", R.Strides[2]},
                         {"heads", R.Strides[1]}})
    if (S % 8 != 0 || S < 0)
      invalid(fmt::format("{}: the {} stride ({}) must be a non-negative "
                          "multiple of 8 elements (16-byte rows)",
                          Name, What, S));
  return R;
}

CallShape validateCall(const ir::Graph &G, const Signature &Sig,
                       const TensorView &Q, const TensorView &K,
                       const TensorView &V, const TensorView &Out,
                       const TensorView *Finals, const InputMap &Inputs) {
  SeqTensor q =
      checkSeqTensor("q", Q, Sig.Dtype, Sig.TensorLayout, Sig.HeadDim);
  SeqTensor k =
      checkSeqTensor("k", K, Sig.Dtype, Sig.TensorLayout, Sig.HeadDim);
  SeqTensor v =
      checkSeqTensor("v", V, Sig.Dtype, Sig.TensorLayout, Sig.HeadDimV);
  SeqTensor o =
      checkSeqTensor("out", Out, Sig.Dtype, Sig.TensorLayout, Sig.HeadDimV);
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
    invalid(
        fmt::format("out: expected seq {} and heads {} (as q), got {} and {}",
                    q.S, q.H, o.S, o.H));
  if (q.S > (1 << 30) || k.S > (1 << 30))
    invalid("q, k: sequence lengths above 2^30 are not supported");
  CallShape C;
  C.B = q.B;
  C.H = q.H;
  C.Hkv = k.H;
  C.Sq = q.S;
  C.Skv = k.S;
  for (auto [Dst, S] :
       {std::pair{&C.Q, &q}, {&C.K, &k}, {&C.V, &v}, {&C.O, &o}})
    std::copy(S->Strides, S->Strides + 3, *Dst);

  checkFinals(G, C, Finals);
  checkInputs(G, C.B, C.H, C.Sq, C.Skv, Inputs);
  return C;
}

namespace {

/// A gradient output must match the tensor it is the gradient of.
void checkLike(const char *Name, const SeqTensor &G, const char *Of,
               const SeqTensor &X) {
  if (G.B != X.B || G.S != X.S || G.H != X.H)
    invalid(fmt::format("{}: expected batch {}, seq {} and heads {} (as {}), "
                        "got {}, {} and {}",
                        Name, X.B, X.S, X.H, Of, G.B, G.S, G.H));
}

void store(int64_t (&Dst)[3], const SeqTensor &S) {
  std::copy(S.Strides, S.Strides + 3, Dst);
}

void checkGrads(const ir::Graph &G, const CallShape &C,
                const InputGradMap &Grads) {
  std::vector<codegen::GradInput> Want = codegen::gradInputs(G);
  for (const codegen::GradInput &I : Want) {
    std::string Name = "input gradient '" + I.Name + "'";
    std::vector<int64_t> Shape;
    std::string ShapeText = "[] or [1]";
    if (I.Shape == ir::InputShape::PerHead) {
      Shape = {C.H};
      ShapeText = shapeText(Shape);
    } else if (I.Shape != ir::InputShape::Scalar) {
      invalid(fmt::format("{}: gradients of {} inputs are not computed by the "
                          "backward kernels",
                          Name, ir::inputShapeName(I.Shape).str()));
    }
    auto It = Grads.find(I.Name);
    if (It == Grads.end())
      invalid(fmt::format("{}: required, a float32 tensor of shape {}; '{}' "
                          "requires the gradient of '{}'",
                          Name, ShapeText, G.name(), I.Name));
    const TensorView &T = It->second;
    if (!T.Data)
      invalid(Name + ": null data pointer");
    if (T.Type != ElemType::F32)
      invalid(fmt::format("{}: expected dtype f32, got {}", Name,
                          elemTypeName(T.Type)));
    bool ShapeOk = I.Shape == ir::InputShape::Scalar
                       ? (T.Shape.empty() || T.Shape == std::vector<int64_t>{1})
                       : T.Shape == Shape;
    if (!ShapeOk)
      invalid(fmt::format("{} ({}): expected shape {}, got {}", Name,
                          ir::inputShapeName(I.Shape).str(), ShapeText,
                          shapeText(T.Shape)));
    if (T.Strides.size() != T.Shape.size() ||
        (!T.Shape.empty() && T.Strides.back() != 1))
      invalid(Name + ": must be contiguous");
    if (reinterpret_cast<uintptr_t>(T.Data) % 4 != 0)
      invalid(Name + ": data pointer must be 4-byte aligned");
  }
  for (const auto &[Name, View] : Grads) {
    bool Known = false;
    for (const codegen::GradInput &I : Want)
      Known = Known || I.Name == Name;
    if (!Known)
      invalid(fmt::format("input gradient '{}': '{}' has no input '{}' that "
                          "requires a gradient",
                          Name, G.name(), Name));
  }
}

} // namespace

BackwardCallShape validateBackwardCall(const CompiledDefinition &Def,
                                       const Signature &Sig,
                                       const BackwardTensors &T,
                                       const InputMap &Inputs,
                                       const InputGradMap &Grads) {
  const ir::Graph &G = *Def.Graph;
  SeqTensor q =
      checkSeqTensor("q", T.Q, Sig.Dtype, Sig.TensorLayout, Sig.HeadDim);
  SeqTensor k =
      checkSeqTensor("k", T.K, Sig.Dtype, Sig.TensorLayout, Sig.HeadDim);
  SeqTensor v =
      checkSeqTensor("v", T.V, Sig.Dtype, Sig.TensorLayout, Sig.HeadDimV);
  SeqTensor d =
      checkSeqTensor("dout", T.DOut, Sig.Dtype, Sig.TensorLayout, Sig.HeadDimV);
  bool NeedOut = Def.Info.BackwardUsesDoosum;
  if (NeedOut && !T.Out)
    invalid(fmt::format("out: required, the forward's output; the backward "
                        "of '{}' reads rowsum(dout * out)",
                        G.name()));
  SeqTensor o{};
  if (T.Out)
    o = checkSeqTensor("out", *T.Out, Sig.Dtype, Sig.TensorLayout,
                       Sig.HeadDimV);
  SeqTensor dq =
      checkSeqTensor("dq", T.DQ, Sig.Dtype, Sig.TensorLayout, Sig.HeadDim);
  SeqTensor dk =
      checkSeqTensor("dk", T.DK, Sig.Dtype, Sig.TensorLayout, Sig.HeadDim);
  SeqTensor dv =
      checkSeqTensor("dv", T.DV, Sig.Dtype, Sig.TensorLayout, Sig.HeadDimV);
  if (k.B != q.B || v.B != q.B)
    invalid(fmt::format("k, v: batch must equal q's ({}), got {}, {}", q.B, k.B,
                        v.B));
  if (v.H != k.H)
    invalid(fmt::format("v: heads must equal k's ({}), got {}", k.H, v.H));
  if (q.H % k.H != 0)
    invalid(fmt::format("k: heads ({}) must divide q's heads ({})", k.H, q.H));
  if (v.S != k.S)
    invalid(fmt::format("v: seq must equal k's ({}), got {}", k.S, v.S));
  checkLike("dout", d, "q", q);
  if (T.Out)
    checkLike("out", o, "q", q);
  checkLike("dq", dq, "q", q);
  checkLike("dk", dk, "k", k);
  checkLike("dv", dv, "v", v);
  if (q.S > (1 << 30) || k.S > (1 << 30))
    invalid("q, k: sequence lengths above 2^30 are not supported");

  BackwardCallShape R;
  CallShape &C = R.Fwd;
  C.B = q.B;
  C.H = q.H;
  C.Hkv = k.H;
  C.Sq = q.S;
  C.Skv = k.S;
  store(C.Q, q);
  store(C.K, k);
  store(C.V, v);
  if (T.Out)
    store(C.O, o);
  store(R.DOut, d);
  store(R.DQ, dq);
  store(R.DK, dk);
  store(R.DV, dv);
  checkFinals(G, C, T.Finals);
  checkInputs(G, C.B, C.H, C.Sq, C.Skv, Inputs);
  checkGrads(G, C, Grads);
  return R;
}

} // namespace attn::runtime
