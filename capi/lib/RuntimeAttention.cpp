// The C interface's attention objects: made through newAttention, called
// with checked C views, introspected for the Python layer.
#include "RuntimeArgs.h"

#include "attn/Error.h"

using namespace attn;
using namespace attn::capi;

namespace {

const runtime::Attention &attentionArg(const ArgContext &C,
                                       const attnc_attention *A) {
  return handleArg(C, A);
}

/// The tensors of both backward calls, checked in this order.
struct BackwardViews {
  runtime::TensorView Q, K, V, DO, DQ, DK, DV;
  std::optional<runtime::TensorView> O, F;
};

BackwardViews backwardViews(const ArgContext &C, const attnc_tensor *q,
                            const attnc_tensor *k, const attnc_tensor *v,
                            const attnc_tensor *out, const attnc_tensor *dout,
                            const attnc_tensor *finals, const attnc_tensor *dq,
                            const attnc_tensor *dk, const attnc_tensor *dv) {
  // A braced list is evaluated left to right.
  return {tensorArg(C, "q", q),
          tensorArg(C, "k", k),
          tensorArg(C, "v", v),
          tensorArg(C, "dout", dout),
          tensorArg(C, "dq", dq),
          tensorArg(C, "dk", dk),
          tensorArg(C, "dv", dv),
          optionalTensorArg(C, "out", out),
          optionalTensorArg(C, "finals", finals)};
}

} // namespace

attnc_status attnc_attention_create(const attnc_definition *def,
                                    const attnc_signature *sig,
                                    attnc_attention **out) {
  return createHandle("attnc_attention_create", def, out,
                      [&](const ArgContext &C) {
                        runtime::Signature Sig = signatureArg(C, sig);
                        auto Made = std::make_unique<attnc_attention>();
                        Made->Att = newAttention(*def, Sig);
                        Made->Finals = Made->Att->finalNames();
                        return Made;
                      });
}

void attnc_attention_release(attnc_attention *att) { delete att; }

attnc_status attnc_attention_input_count(const attnc_attention *att,
                                         size_t *count) {
  return handleInputCount("attnc_attention_input_count", att, count);
}

attnc_status attnc_attention_input_info(const attnc_attention *att,
                                        size_t index, attnc_input_info *info) {
  return handleInputInfo("attnc_attention_input_info", att, index, info);
}

attnc_status attnc_attention_final_count(const attnc_attention *att,
                                         size_t *count) {
  return guarded([&] {
    ArgContext C{"attnc_attention_final_count"};
    attentionArg(C, att);
    requireNonNull(count, C.Function, "count");
    *count = att->Finals.size();
  });
}

attnc_status attnc_attention_final_name(const attnc_attention *att,
                                        size_t index, const char **name) {
  return guarded([&] {
    ArgContext C{"attnc_attention_final_name"};
    attentionArg(C, att);
    requireNonNull(name, C.Function, "name");
    requireIndex(C, index, att->Finals.size());
    *name = att->Finals[index].c_str();
  });
}

attnc_status attnc_attention_arch(const attnc_attention *att, int32_t *arch) {
  return guarded([&] {
    ArgContext C{"attnc_attention_arch"};
    const runtime::Attention &A = attentionArg(C, att);
    requireNonNull(arch, C.Function, "arch");
    *arch = archCode(A.arch());
  });
}

namespace {

/// The forward with or without a block mask (\p Masked: the _masked entry
/// point, whose mask must not be NULL).
attnc_status forwardCall(const char *Function, attnc_attention *att,
                         const attnc_tensor *q, const attnc_tensor *k,
                         const attnc_tensor *v, const attnc_tensor *out,
                         const attnc_tensor *finals, const attnc_input *inputs,
                         size_t num_inputs, bool Masked,
                         const attnc_block_mask *mask, void *stream) {
  return guarded([&] {
    ArgContext C{Function};
    attentionArg(C, att);
    runtime::TensorView Q = tensorArg(C, "q", q), K = tensorArg(C, "k", k),
                        V = tensorArg(C, "v", v), O = tensorArg(C, "out", out);
    auto F = optionalTensorArg(C, "finals", finals);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    const runtime::BlockMask *M = Masked ? &blockMaskArg(C, mask) : nullptr;
    att->Att->forward(Q, K, V, O, ptr(F), In, static_cast<CUstream>(stream),
                      M);
  });
}

attnc_status backwardCall(const char *Function, attnc_attention *att,
                          const attnc_tensor *q, const attnc_tensor *k,
                          const attnc_tensor *v, const attnc_tensor *out,
                          const attnc_tensor *dout, const attnc_tensor *finals,
                          const attnc_tensor *dq, const attnc_tensor *dk,
                          const attnc_tensor *dv, const attnc_input *inputs,
                          size_t num_inputs, const attnc_named_tensor *grads,
                          size_t num_grads, bool Masked,
                          const attnc_block_mask *mask, void *stream) {
  return guarded([&] {
    ArgContext C{Function};
    attentionArg(C, att);
    BackwardViews T = backwardViews(C, q, k, v, out, dout, finals, dq, dk, dv);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    runtime::InputGradMap G = gradsArg(C, grads, num_grads);
    const runtime::BlockMask *M = Masked ? &blockMaskArg(C, mask) : nullptr;
    att->Att->backward(T.Q, T.K, T.V, ptr(T.O), T.DO, ptr(T.F), T.DQ, T.DK,
                       T.DV, In, G, static_cast<CUstream>(stream), M);
  });
}

} // namespace

attnc_status attnc_attention_forward(attnc_attention *att,
                                     const attnc_tensor *q,
                                     const attnc_tensor *k,
                                     const attnc_tensor *v,
                                     const attnc_tensor *out,
                                     const attnc_tensor *finals,
                                     const attnc_input *inputs,
                                     size_t num_inputs, void *stream) {
  return forwardCall("attnc_attention_forward", att, q, k, v, out, finals,
                     inputs, num_inputs, false, nullptr, stream);
}

attnc_status attnc_attention_forward_masked(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *finals,
    const attnc_input *inputs, size_t num_inputs,
    const attnc_block_mask *mask, void *stream) {
  return forwardCall("attnc_attention_forward_masked", att, q, k, v, out,
                     finals, inputs, num_inputs, true, mask, stream);
}

attnc_status attnc_attention_forward_varlen(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *finals,
    const attnc_varlen *batch, const attnc_input *inputs, size_t num_inputs,
    void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_forward_varlen"};
    attentionArg(C, att);
    runtime::TensorView Q = tensorArg(C, "q", q), K = tensorArg(C, "k", k),
                        V = tensorArg(C, "v", v), O = tensorArg(C, "out", out);
    auto F = optionalTensorArg(C, "finals", finals);
    runtime::VarlenBatch VB = varlenArg(C, batch);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    att->Att->forwardVarlen(Q, K, V, O, ptr(F), VB, In,
                            static_cast<CUstream>(stream));
  });
}

attnc_status attnc_attention_backward(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *dout,
    const attnc_tensor *finals, const attnc_tensor *dq, const attnc_tensor *dk,
    const attnc_tensor *dv, const attnc_input *inputs, size_t num_inputs,
    const attnc_named_tensor *grads, size_t num_grads, void *stream) {
  return backwardCall("attnc_attention_backward", att, q, k, v, out, dout,
                      finals, dq, dk, dv, inputs, num_inputs, grads, num_grads,
                      false, nullptr, stream);
}

attnc_status attnc_attention_backward_masked(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *dout,
    const attnc_tensor *finals, const attnc_tensor *dq, const attnc_tensor *dk,
    const attnc_tensor *dv, const attnc_input *inputs, size_t num_inputs,
    const attnc_named_tensor *grads, size_t num_grads,
    const attnc_block_mask *mask, void *stream) {
  return backwardCall("attnc_attention_backward_masked", att, q, k, v, out,
                      dout, finals, dq, dk, dv, inputs, num_inputs, grads,
                      num_grads, true, mask, stream);
}

attnc_status attnc_attention_backward_varlen(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *dout,
    const attnc_tensor *finals, const attnc_tensor *dq, const attnc_tensor *dk,
    const attnc_tensor *dv, const attnc_varlen *batch,
    const attnc_input *inputs, size_t num_inputs,
    const attnc_named_tensor *grads, size_t num_grads, void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_backward_varlen"};
    attentionArg(C, att);
    BackwardViews T = backwardViews(C, q, k, v, out, dout, finals, dq, dk, dv);
    runtime::VarlenBatch VB = varlenArg(C, batch);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    runtime::InputGradMap G = gradsArg(C, grads, num_grads);
    att->Att->backwardVarlen(T.Q, T.K, T.V, ptr(T.O), T.DO, ptr(T.F), T.DQ,
                             T.DK, T.DV, VB, In, G,
                             static_cast<CUstream>(stream));
  });
}

// ---- the packed forward call (attnc_forward_call) ------------------------

attnc_status attnc_attention_forward_call(const attnc_forward_call *call) {
  if (!call) {
    setLastError("attnc_attention_forward_call: argument 'call' is NULL");
    return ATTNC_INVALID_ARGUMENT;
  }
  return forwardCall("attnc_attention_forward_call", call->att, call->q,
                     call->k, call->v, call->out, call->finals, call->inputs,
                     call->num_inputs, call->mask != nullptr, call->mask,
                     call->stream);
}
