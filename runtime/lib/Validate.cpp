// Validation of Attention call arguments: q, k, v, out and their gradients
// as a group, finals, and the input gradients; the single-tensor checks are
// ValidateCommon's.
#include "attn/runtime/Validate.h"

#include "ValidateCommon.h"

#include "attn/codegen/InputLayout.h"
#include "attn/Error.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn::runtime {

namespace {

/// A dense call of a signature made for packed batches has no cu_seqlens.
void refusePackedLayout(const Signature &Sig) {
  if (Sig.TensorLayout == Layout::THD)
    invalid("q: layout thd holds packed variable-length batches; call "
            "forwardVarlen or backwardVarlen with a VarlenBatch");
}

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

/// A signature for packed calls, and its cu_seqlens pair.
void requirePackedLayout(const Signature &Sig) {
  if (Sig.TensorLayout != Layout::THD)
    invalid(fmt::format("signature: a packed variable-length call needs "
                        "layout thd ([tokens, heads, head_dim]), got {}",
                        std::string(layoutName(Sig.TensorLayout))));
}

void checkCuSeqlens(const char *Name, const TensorView &T) {
  checkNotNull(Name, T);
  checkElemType(Name, T, DType::I32);
  if (T.Shape.size() != 1)
    invalid(fmt::format("{}: expected rank 1 [batch + 1], got rank {}", Name,
                        T.Shape.size()));
  if (T.Strides.size() != 1 || T.Strides[0] != 1)
    invalid(fmt::format("{}: must be contiguous", Name));
  checkAligned(Name, T, 4);
}

/// Fills the batch of a packed call into \p C, whose tensors are checked
/// (B = 1, S = the tokens): B from cu_seqlens, Sq and Skv the max lengths.
void applyVarlenBatch(CallShape &C, const VarlenBatch &VB) {
  checkCuSeqlens("cu_seqlens_q", VB.CuSeqlensQ);
  checkCuSeqlens("cu_seqlens_kv", VB.CuSeqlensKv);
  int64_t Entries = VB.CuSeqlensQ.Shape[0];
  if (Entries < 2)
    invalid(fmt::format("cu_seqlens_q: expected batch + 1 entries with a "
                        "batch of at least 1, got {} entries",
                        Entries));
  if (VB.CuSeqlensKv.Shape[0] != Entries)
    invalid(fmt::format("cu_seqlens_kv: expected shape [{}] (batch + 1, as "
                        "cu_seqlens_q), got {}",
                        Entries, shapeText(VB.CuSeqlensKv.Shape)));
  if (VB.MaxSeqlenQ < 1 || VB.MaxSeqlenQ > C.Sq)
    invalid(fmt::format("max_seqlen_q: expected between 1 and q's tokens "
                        "({}), got {}",
                        C.Sq, VB.MaxSeqlenQ));
  if (VB.MaxSeqlenKv < 1 || VB.MaxSeqlenKv > C.Skv)
    invalid(fmt::format("max_seqlen_kv: expected between 1 and k's tokens "
                        "({}), got {}",
                        C.Skv, VB.MaxSeqlenKv));
  C.Packed = true;
  C.TotalQ = C.Sq;
  C.TotalKv = C.Skv;
  C.B = Entries - 1;
  C.Sq = VB.MaxSeqlenQ;
  C.Skv = VB.MaxSeqlenKv;
  C.CuQ = static_cast<const int *>(VB.CuSeqlensQ.Data);
  C.CuKv = static_cast<const int *>(VB.CuSeqlensKv.Data);
}

} // namespace

void checkFinals(const ir::Graph &G, const CallShape &C,
                 const TensorView *Finals) {
  size_t NumFinals = G.decls().FinalRowscales.size();
  if (NumFinals == 0)
    return;
  // Packed calls: one row per query token, by head ([F, H, Tq]).
  std::vector<int64_t> Want =
      C.Packed ? std::vector<int64_t>{int64_t(NumFinals), C.H, C.TotalQ}
               : std::vector<int64_t>{int64_t(NumFinals), C.B, C.H, C.Sq};
  if (!Finals)
    invalid(fmt::format("finals: required, a float32 tensor of shape {} "
                        "for the final rowscales of '{}'",
                        shapeText(Want), G.name()));
  checkNotNull("finals", *Finals);
  checkAligned("finals", *Finals, 4);
  checkElemType("finals", *Finals, DType::F32);
  checkShape("finals", *Finals, Want);
  std::vector<int64_t> Contiguous =
      C.Packed ? std::vector<int64_t>{C.H * C.TotalQ, C.TotalQ, 1}
               : std::vector<int64_t>{C.B * C.H * C.Sq, C.H * C.Sq, C.Sq, 1};
  if (Finals->Strides != Contiguous)
    invalid("finals: must be contiguous");
}

CallShape validateVarlenCall(const ir::Graph &G, const Signature &Sig,
                             const TensorView &Q, const TensorView &K,
                             const TensorView &V, const TensorView &Out,
                             const TensorView *Finals, const VarlenBatch &VB,
                             const InputMap &Inputs) {
  requirePackedLayout(Sig);
  SeqTensor q = checkSeqTensor("q", Q, Sig.Dtype, Layout::THD, Sig.HeadDim);
  SeqTensor k = checkSeqTensor("k", K, Sig.Dtype, Layout::THD, Sig.HeadDim);
  SeqTensor v = checkSeqTensor("v", V, Sig.Dtype, Layout::THD, Sig.HeadDimV);
  SeqTensor o =
      checkSeqTensor("out", Out, Sig.Dtype, Layout::THD, Sig.HeadDimV);
  checkKeyValue(q, k, v);
  if (o.S != q.S || o.H != q.H)
    invalid(fmt::format("out: expected tokens {} and heads {} (as q), got {} "
                        "and {}",
                        q.S, q.H, o.S, o.H));
  if (q.S > (1 << 30) || k.S > (1 << 30))
    invalid("q, k: token counts above 2^30 are not supported");
  CallShape C = callShape(q, k, v);
  storeStrides(C.O, o);
  applyVarlenBatch(C, VB);
  checkFinals(G, C, Finals);
  checkPackedInputs(G, C.H, C.TotalQ, C.TotalKv, Inputs);
  return C;
}

CallShape validateCall(const ir::Graph &G, const Signature &Sig,
                       const TensorView &Q, const TensorView &K,
                       const TensorView &V, const TensorView &Out,
                       const TensorView *Finals, const InputMap &Inputs) {
  refusePackedLayout(Sig);
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
    checkElemType(Name, T, DType::F32);
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

BackwardCallShape validateVarlenBackwardCall(const CompiledDefinition &Def,
                                             const Signature &Sig,
                                             const BackwardTensors &T,
                                             const VarlenBatch &VB,
                                             const InputMap &Inputs,
                                             const InputGradMap &Grads) {
  const ir::Graph &G = *Def.Graph;
  requirePackedLayout(Sig);
  const Layout L = Layout::THD;
  SeqTensor q = checkSeqTensor("q", T.Q, Sig.Dtype, L, Sig.HeadDim);
  SeqTensor k = checkSeqTensor("k", T.K, Sig.Dtype, L, Sig.HeadDim);
  SeqTensor v = checkSeqTensor("v", T.V, Sig.Dtype, L, Sig.HeadDimV);
  SeqTensor d = checkSeqTensor("dout", T.DOut, Sig.Dtype, L, Sig.HeadDimV);
  if (Def.Info.BackwardUsesDoosum && !T.Out)
    invalid(fmt::format("out: required, the forward's output; the backward "
                        "of '{}' reads rowsum(dout * out)",
                        G.name()));
  SeqTensor o{};
  if (T.Out)
    o = checkSeqTensor("out", *T.Out, Sig.Dtype, L, Sig.HeadDimV);
  SeqTensor dq = checkSeqTensor("dq", T.DQ, Sig.Dtype, L, Sig.HeadDim);
  SeqTensor dk = checkSeqTensor("dk", T.DK, Sig.Dtype, L, Sig.HeadDim);
  SeqTensor dv = checkSeqTensor("dv", T.DV, Sig.Dtype, L, Sig.HeadDimV);
  checkKeyValue(q, k, v);
  checkLike("dout", d, "q", q);
  if (T.Out)
    checkLike("out", o, "q", q);
  checkLike("dq", dq, "q", q);
  checkLike("dk", dk, "k", k);
  checkLike("dv", dv, "v", v);
  if (q.S > (1 << 30) || k.S > (1 << 30))
    invalid("q, k: token counts above 2^30 are not supported");

  BackwardCallShape R;
  CallShape &C = R.Fwd;
  C = callShape(q, k, v);
  if (T.Out)
    storeStrides(C.O, o);
  storeStrides(R.DOut, d);
  storeStrides(R.DQ, dq);
  storeStrides(R.DK, dk);
  storeStrides(R.DV, dv);
  applyVarlenBatch(C, VB);
  checkFinals(G, C, T.Finals);
  checkPackedInputs(G, C.H, C.TotalQ, C.TotalKv, Inputs);
  checkGrads(G, C, Grads);
  return R;
}

BackwardCallShape validateBackwardCall(const CompiledDefinition &Def,
                                       const Signature &Sig,
                                       const BackwardTensors &T,
                                       const InputMap &Inputs,
                                       const InputGradMap &Grads) {
  const ir::Graph &G = *Def.Graph;
  refusePackedLayout(Sig);
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
