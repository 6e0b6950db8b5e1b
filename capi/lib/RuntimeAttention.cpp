// The C interface's attention objects: made through newAttention, called
// with checked C views, introspected for the Python layer.
#include "RuntimeArgs.h"

#include "attn/Error.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

using namespace attn;
using namespace attn::capi;

namespace {

const runtime::Attention &
attentionArg(const ArgContext &C, const attnc_attention *A) {
  if (!A)
    throw InvalidArgument(
        fmt::format("{}: argument 'att' is NULL", C.Function));
  return *A->Att;
}

const std::vector<ir::InputDecl> &decls(const runtime::Attention &A) {
  return A.definition().Graph->decls().Inputs;
}

} // namespace

attnc_status attnc_attention_create(const attnc_definition *def,
                                    const attnc_signature *sig,
                                    attnc_attention **out) {
  return guarded([&] {
    ArgContext C{"attnc_attention_create"};
    requireNonNull(out, C.Function, "out");
    *out = nullptr;
    requireNonNull(def, C.Function, "def");
    runtime::Signature Sig = signatureArg(C, sig);
    auto Made = std::make_unique<attnc_attention>();
    Made->Att = newAttention(*def, Sig);
    Made->Finals = Made->Att->finalNames();
    *out = Made.release();
  });
}

void attnc_attention_release(attnc_attention *att) { delete att; }

attnc_status attnc_attention_input_count(const attnc_attention *att,
                                         size_t *count) {
  return guarded([&] {
    ArgContext C{"attnc_attention_input_count"};
    const runtime::Attention &A = attentionArg(C, att);
    requireNonNull(count, C.Function, "count");
    *count = decls(A).size();
  });
}

attnc_status attnc_attention_input_info(const attnc_attention *att,
                                        size_t index, attnc_input_info *info) {
  return guarded([&] {
    ArgContext C{"attnc_attention_input_info"};
    const runtime::Attention &A = attentionArg(C, att);
    inputInfoAt(C, decls(A), index, info);
  });
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
    runtime::TensorView Q = tensorArg(C, "q", q), K = tensorArg(C, "k", k),
                        V = tensorArg(C, "v", v),
                        DO = tensorArg(C, "dout", dout),
                        DQ = tensorArg(C, "dq", dq),
                        DK = tensorArg(C, "dk", dk),
                        DV = tensorArg(C, "dv", dv);
    auto O = optionalTensorArg(C, "out", out);
    auto F = optionalTensorArg(C, "finals", finals);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    runtime::InputGradMap G = gradsArg(C, grads, num_grads);
    const runtime::BlockMask *M = Masked ? &blockMaskArg(C, mask) : nullptr;
    att->Att->backward(Q, K, V, ptr(O), DO, ptr(F), DQ, DK, DV, In, G,
                       static_cast<CUstream>(stream), M);
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
    runtime::TensorView Q = tensorArg(C, "q", q), K = tensorArg(C, "k", k),
                        V = tensorArg(C, "v", v),
                        DO = tensorArg(C, "dout", dout),
                        DQ = tensorArg(C, "dq", dq),
                        DK = tensorArg(C, "dk", dk),
                        DV = tensorArg(C, "dv", dv);
    auto O = optionalTensorArg(C, "out", out);
    auto F = optionalTensorArg(C, "finals", finals);
    runtime::VarlenBatch VB = varlenArg(C, batch);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    runtime::InputGradMap G = gradsArg(C, grads, num_grads);
    att->Att->backwardVarlen(Q, K, V, ptr(O), DO, ptr(F), DQ, DK, DV, VB, In,
                             G, static_cast<CUstream>(stream));
  });
}
