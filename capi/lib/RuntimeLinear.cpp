// The C interface's linear-attention objects: made through
// newLinearAttention, called (fixed-length or packed) with checked C views.
#include "RuntimeArgs.h"

using namespace attn;
using namespace attn::capi;

struct attnc_linear_attention {
  std::unique_ptr<runtime::LinearAttention> Att;
};

namespace {

runtime::LinearAttention &linearArg(const ArgContext &C,
                                    const attnc_linear_attention *A) {
  return handleArg(C, A);
}

/// The views of a backward call (fixed-length or packed), each checked by
/// name, the required ones first.
struct LinearBackwardViews {
  runtime::TensorView Q, K, V, DO, DQ, DK, DV;
  std::optional<runtime::TensorView> Decay, Init, DFinal, DDecay, DInit;
};

LinearBackwardViews
linearBackwardViews(const ArgContext &C, const attnc_tensor *q,
                    const attnc_tensor *k, const attnc_tensor *v,
                    const attnc_tensor *decay, const attnc_tensor *dout,
                    const attnc_tensor *initial_state,
                    const attnc_tensor *dfinal_state, const attnc_tensor *dq,
                    const attnc_tensor *dk, const attnc_tensor *dv,
                    const attnc_tensor *ddecay,
                    const attnc_tensor *dinitial_state) {
  // A braced list is evaluated left to right.
  return {tensorArg(C, "q", q),
          tensorArg(C, "k", k),
          tensorArg(C, "v", v),
          tensorArg(C, "dout", dout),
          tensorArg(C, "dq", dq),
          tensorArg(C, "dk", dk),
          tensorArg(C, "dv", dv),
          optionalTensorArg(C, "decay", decay),
          optionalTensorArg(C, "initial_state", initial_state),
          optionalTensorArg(C, "dfinal_state", dfinal_state),
          optionalTensorArg(C, "ddecay", ddecay),
          optionalTensorArg(C, "dinitial_state", dinitial_state)};
}

} // namespace

attnc_status attnc_linear_attention_create(const attnc_definition *def,
                                           const attnc_linear_signature *sig,
                                           attnc_linear_attention **out) {
  return createHandle(
      "attnc_linear_attention_create", def, out, [&](const ArgContext &C) {
        runtime::LinearSignature Sig = linearSignatureArg(C, sig);
        auto Made = std::make_unique<attnc_linear_attention>();
        Made->Att = newLinearAttention(*def, Sig);
        return Made;
      });
}

void attnc_linear_attention_release(attnc_linear_attention *att) {
  delete att;
}

attnc_status
attnc_linear_attention_input_count(const attnc_linear_attention *att,
                                   size_t *count) {
  return handleInputCount("attnc_linear_attention_input_count", att, count);
}

attnc_status
attnc_linear_attention_input_info(const attnc_linear_attention *att,
                                  size_t index, attnc_input_info *info) {
  return handleInputInfo("attnc_linear_attention_input_info", att, index, info);
}

attnc_status
attnc_linear_attention_uses_decay(const attnc_linear_attention *att,
                                  int32_t *uses) {
  return guarded([&] {
    ArgContext C{"attnc_linear_attention_uses_decay"};
    const runtime::LinearAttention &A = linearArg(C, att);
    requireNonNull(uses, C.Function, "uses");
    *uses = A.definition().Info.UsesDecayInput ? 1 : 0;
  });
}

attnc_status attnc_linear_attention_forward(
    attnc_linear_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *decay,
    const attnc_input *inputs, size_t num_inputs,
    const attnc_tensor *initial_state, const attnc_tensor *final_state,
    void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_linear_attention_forward"};
    runtime::LinearAttention &A = linearArg(C, att);
    runtime::TensorView Q = tensorArg(C, "q", q), K = tensorArg(C, "k", k),
                        V = tensorArg(C, "v", v), O = tensorArg(C, "out", out);
    auto Decay = optionalTensorArg(C, "decay", decay);
    auto Init = optionalTensorArg(C, "initial_state", initial_state);
    auto Final = optionalTensorArg(C, "final_state", final_state);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    A.forward(Q, K, V, O, ptr(Decay), In, ptr(Init), ptr(Final),
              static_cast<CUstream>(stream));
  });
}

attnc_status attnc_linear_attention_backward(
    attnc_linear_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *decay, const attnc_tensor *dout,
    const attnc_tensor *initial_state, const attnc_tensor *dfinal_state,
    const attnc_tensor *dq, const attnc_tensor *dk, const attnc_tensor *dv,
    const attnc_tensor *ddecay, const attnc_tensor *dinitial_state,
    const attnc_input *inputs, size_t num_inputs,
    const attnc_named_tensor *grads, size_t num_grads, void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_linear_attention_backward"};
    runtime::LinearAttention &A = linearArg(C, att);
    LinearBackwardViews W =
        linearBackwardViews(C, q, k, v, decay, dout, initial_state,
                            dfinal_state, dq, dk, dv, ddecay, dinitial_state);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    runtime::InputGradMap G = gradsArg(C, grads, num_grads);
    runtime::LinearBackwardTensors T{
        W.Q,  W.K,  W.V,  ptr(W.Decay),  W.DO,         ptr(W.Init),
        ptr(W.DFinal), W.DQ, W.DK, W.DV, ptr(W.DDecay), ptr(W.DInit)};
    A.backward(T, In, G, static_cast<CUstream>(stream));
  });
}

attnc_status attnc_linear_attention_forward_varlen(
    attnc_linear_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *decay,
    const attnc_tensor *cu_seqlens, const attnc_input *inputs,
    size_t num_inputs, const attnc_tensor *initial_state,
    const attnc_tensor *final_state, void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_linear_attention_forward_varlen"};
    runtime::LinearAttention &A = linearArg(C, att);
    runtime::TensorView Q = tensorArg(C, "q", q), K = tensorArg(C, "k", k),
                        V = tensorArg(C, "v", v), O = tensorArg(C, "out", out),
                        Cu = tensorArg(C, "cu_seqlens", cu_seqlens);
    auto Decay = optionalTensorArg(C, "decay", decay);
    auto Init = optionalTensorArg(C, "initial_state", initial_state);
    auto Final = optionalTensorArg(C, "final_state", final_state);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    A.forwardVarlen({Q, K, V, O, ptr(Decay), Cu, ptr(Init), ptr(Final)}, In,
                    static_cast<CUstream>(stream));
  });
}

attnc_status attnc_linear_attention_backward_varlen(
    attnc_linear_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *decay, const attnc_tensor *dout,
    const attnc_tensor *cu_seqlens, const attnc_tensor *initial_state,
    const attnc_tensor *dfinal_state, const attnc_tensor *dq,
    const attnc_tensor *dk, const attnc_tensor *dv, const attnc_tensor *ddecay,
    const attnc_tensor *dinitial_state, const attnc_input *inputs,
    size_t num_inputs, const attnc_named_tensor *grads, size_t num_grads,
    void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_linear_attention_backward_varlen"};
    runtime::LinearAttention &A = linearArg(C, att);
    LinearBackwardViews W =
        linearBackwardViews(C, q, k, v, decay, dout, initial_state,
                            dfinal_state, dq, dk, dv, ddecay, dinitial_state);
    runtime::TensorView Cu = tensorArg(C, "cu_seqlens", cu_seqlens);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    runtime::InputGradMap G = gradsArg(C, grads, num_grads);
    runtime::LinearVarlenBackwardTensors T{
        W.Q,  W.K,  W.V,  ptr(W.Decay),  W.DO, Cu, ptr(W.Init), ptr(W.DFinal),
        W.DQ, W.DK, W.DV, ptr(W.DDecay), ptr(W.DInit)};
    A.backwardVarlen(T, In, G, static_cast<CUstream>(stream));
  });
}
