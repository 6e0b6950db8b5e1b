// Validation of Attention call arguments: q, k, v, out and their gradients
// as a group, finals, and the input gradients; the single-tensor checks are
// ValidateCommon's.
#include "attn/runtime/Validate.h"

#include "ValidateCommon.h"

#include "attn/codegen/InputLayout.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn::runtime {

namespace {

/// The rules between k and v, and of q's heads, for a forward and a
/// backward alike (the batch rule's message names the tensors each has).
void checkKeyValue(const SeqTensor &q, const SeqTensor &k, const SeqTensor &v) {
  if (v.H != k.H)
    invalid(fmt::format("v: heads must equal k's ({}), got {}", k.H, v.H));
  if (q.H % k.H != 0)
    invalid(fmt::format("k: heads ({}) must divide q's heads ({})", k.H, q.H));
  if (v.S != k.S)
    invalid(fmt::format("v: seq must equal k's ({}), got {}", k.S, v.S));
}

/// The sizes and q, k, v strides of a call whose tensors passed the checks.
CallShape callShape(const SeqTensor &q, const SeqTensor &k,
                    const SeqTensor &v) {
  CallShape C;
  C.B = q.B;
  C.H = q.H;
  C.Hkv = k.H;
  C.Sq = q.S;
  C.Skv = k.S;
  storeStrides(C.Q, q);
  storeStrides(C.K, k);
  storeStrides(C.V, v);
  return C;
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
  checkNotNull("finals", *Finals);
  checkAligned("finals", *Finals, 4);
  checkElemType("finals", *Finals, ElemType::F32);
  checkShape("finals", *Finals, Want);
  std::vector<int64_t> Contiguous = {C.B * C.H * C.Sq, C.H * C.Sq, C.Sq, 1};
  if (Finals->Strides != Contiguous)
    invalid("finals: must be contiguous");
}

} // namespace

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
  checkKeyValue(q, k, v);
  if (o.S != q.S || o.H != q.H)
    invalid(
        fmt::format("out: expected seq {} and heads {} (as q), got {} and {}",
                    q.S, q.H, o.S, o.H));
  if (q.S > (1 << 30) || k.S > (1 << 30))
    invalid("q, k: sequence lengths above 2^30 are not supported");
  CallShape C = callShape(q, k, v);
  storeStrides(C.O, o);

  checkFinals(G, C, Finals);
  checkInputs(G, C.B, C.H, C.Sq, C.Skv, Inputs);
  return C;
}

namespace {

/// A gradient output must match the tensor it is the gradient of.
void checkLike(const char *Name, const SeqTensor &G, const char *Of,
               const SeqTensor &X) {
  runtime::checkLike(Name, G, Of, X.B, X.S, X.H);
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
    checkNotNull(Name, T);
    checkElemType(Name, T, ElemType::F32);
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
    checkAligned(Name, T, 4);
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
  checkKeyValue(q, k, v);
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
  C = callShape(q, k, v);
  if (T.Out)
    storeStrides(C.O, o);
  storeStrides(R.DOut, d);
  storeStrides(R.DQ, dq);
  storeStrides(R.DK, dk);
  storeStrides(R.DV, dv);
  checkFinals(G, C, T.Finals);
  checkInputs(G, C.B, C.H, C.Sq, C.Skv, Inputs);
  checkGrads(G, C, Grads);
  return R;
}

} // namespace attn::runtime
