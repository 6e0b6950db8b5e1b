// attnc_attention_forward/backward (and the varlen calls): each argument
// checked before anything runs, with the function and the argument named;
// the runtime's own validation reached through the C views.
#include "CapiTestSupport.h"

#include <catch2/catch.hpp>


using namespace capitest;
using Catch::Matchers::Contains;

namespace {

/// q, k, v, out and finals of a small BSHD mha call.
struct Call {
  FakeTensor Q{{2, 128, 4, 64}}, K{{2, 128, 4, 64}}, V{{2, 128, 4, 64}},
      O{{2, 128, 4, 64}}, F{{1, 2, 4, 128}, ATTNC_DTYPE_F32};
  attnc_status forward(attnc_attention *A, const attnc_input *In = nullptr,
                       size_t N = 0) {
    return attnc_attention_forward(A, &Q, &K, &V, &O, &F, In, N, nullptr);
  }
};

} // namespace

TEST_CASE("forward: NULL handle and tensors are named", "[capi]") {
  Call C;
  CHECK(C.forward(nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_forward: argument 'att' is NULL"));
  attnc_attention *A = sm80Attention("mha");
  for (const char *Which : {"q", "k", "v", "out"}) {
    INFO(Which);
    std::string W = Which;
    attnc_status St = attnc_attention_forward(
        A, W == "q" ? nullptr : &C.Q, W == "k" ? nullptr : &C.K,
        W == "v" ? nullptr : &C.V, W == "out" ? nullptr : &C.O, &C.F,
        nullptr, 0, nullptr);
    CHECK(St == ATTNC_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Contains("attnc_attention_forward: argument '" +
                                     W + "': is NULL"));
  }
}

TEST_CASE("forward: malformed tensors are named", "[capi]") {
  attnc_attention *A = sm80Attention("mha");
  Call C;
  C.K.T.ndim = ATTNC_MAX_NDIM + 1;
  CHECK(C.forward(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'k': ndim 9 is out of range"));
  C.K.T.ndim = -1;
  CHECK(C.forward(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'k': ndim -1 is out of range"));
  C.K.T.ndim = 4;
  C.V.T.shape = nullptr;
  CHECK(C.forward(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'v': shape is NULL with ndim 4"));
  C.V.T.shape = C.V.Shape.data();
  C.O.T.dtype = 9;
  CHECK(C.forward(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("argument 'out': dtype 9 is not an attnc_dtype"));
  C.O.T.dtype = ATTNC_DTYPE_F16;
  C.Q.Shape[1] = -5;
  CHECK(C.forward(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("argument 'q': shape[1] is negative (-5)"));
}

TEST_CASE("forward: the runtime's checks see the C views", "[capi]") {
  attnc_attention *A = sm80Attention("mha");
  Call C;
  // Shapes, dtypes and strides reach the runtime's validation unchanged.
  C.K.Shape[3] = 32;
  CHECK(C.forward(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("k"));
  C.K.Shape[3] = 64;
  C.V.T.dtype = ATTNC_DTYPE_BF16;
  CHECK(C.forward(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("v"));
  C.V.T.dtype = ATTNC_DTYPE_F16;
  // Explicit strides: the innermost one must be 1 for q.
  int64_t Strides[] = {128 * 4 * 64, 4 * 64, 64, 2};
  C.Q.T.strides = Strides;
  CHECK(C.forward(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("q"));
  C.Q.T.strides = nullptr;
  // mha has final rowscales: finals may not be left out.
  CHECK(attnc_attention_forward(A, &C.Q, &C.K, &C.V, &C.O, nullptr, nullptr,
                                0, nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("finals"));
}

TEST_CASE("forward: custom inputs are checked", "[capi]") {
  attnc_attention *A = sm80Attention("sigmoid_attn");
  Call C;
  CHECK(C.forward(A, nullptr, 1) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_forward: argument "
                                   "'inputs': is NULL with num_inputs 1"));
  attnc_input In[2]{};
  In[0].kind = ATTNC_INPUT_F32;
  CHECK(C.forward(A, In, 1) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'inputs[0]': name is NULL"));
  In[0].name = "softmax_bias";
  In[0].kind = 7;
  CHECK(C.forward(A, In, 1) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'inputs[0] ('softmax_bias')': "
                                   "kind 7 is not an attnc_input_kind"));
  In[0].kind = ATTNC_INPUT_F32;
  In[1] = In[0];
  CHECK(C.forward(A, In, 2) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'inputs[1] ('softmax_bias')': "
                                   "the name is given twice"));
  // A tensor input's tensor is checked like any tensor.
  In[0].kind = ATTNC_INPUT_TENSOR;
  In[0].tensor.ndim = 1;
  In[0].tensor.shape = nullptr;
  CHECK(C.forward(A, In, 1) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("argument 'inputs[0] ('softmax_bias').tensor': shape "
                      "is NULL with ndim 1"));
  // The runtime knows the declarations: an unknown or missing input, and an
  // int32 value for a float32 scalar, are its errors.
  In[0].kind = ATTNC_INPUT_I32;
  CHECK(C.forward(A, In, 1) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("softmax_bias"));
  CHECK(C.forward(A) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("softmax_bias"));
  In[0].kind = ATTNC_INPUT_F32;
  In[1] = In[0];
  In[1].name = "no_such_input";
  CHECK(C.forward(A, In, 2) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("no_such_input"));
}

TEST_CASE("forward: a valid call without a driver is a driver error",
          "[capi]") {
  if (hasDriver())
    return; // the fake pointers would be launched on
  attnc_attention *A = sm80Attention("sigmoid_attn");
  Call C;
  attnc_input In{};
  In.name = "softmax_bias";
  In.kind = ATTNC_INPUT_F32;
  In.f32 = -1.5f;
  CHECK(C.forward(A, &In, 1) == ATTNC_DRIVER_ERROR);
  CHECK_FALSE(lastError().empty());
}

TEST_CASE("backward: tensors, inputs and gradients are checked", "[capi]") {
  attnc_attention *A = sm80Attention("alibi_learnable");
  Call C;
  FakeTensor DO{{2, 128, 4, 64}}, DQ{{2, 128, 4, 64}}, DK{{2, 128, 4, 64}},
      DV{{2, 128, 4, 64}}, Slopes{{4}, ATTNC_DTYPE_F32},
      Bias{{4}, ATTNC_DTYPE_F32}, GSlopes{{4}, ATTNC_DTYPE_F32},
      GBias{{4}, ATTNC_DTYPE_F32};
  attnc_input In[2]{};
  In[0].name = "slopes";
  In[0].kind = ATTNC_INPUT_TENSOR;
  In[0].tensor = Slopes.T;
  In[1].name = "head_bias";
  In[1].kind = ATTNC_INPUT_TENSOR;
  In[1].tensor = Bias.T;
  attnc_named_tensor G[2]{};
  G[0].name = "slopes";
  G[0].tensor = GSlopes.T;
  G[1].name = "head_bias";
  G[1].tensor = GBias.T;
  auto Run = [&](const attnc_tensor *DOut, const attnc_named_tensor *Grads,
                 size_t NG) {
    return attnc_attention_backward(A, &C.Q, &C.K, &C.V, &C.O, DOut, &C.F,
                                    &DQ, &DK, &DV, In, 2, Grads, NG, nullptr);
  };
  CHECK(attnc_attention_backward(nullptr, &C.Q, &C.K, &C.V, &C.O, &DO, &C.F,
                                 &DQ, &DK, &DV, In, 2, G, 2,
                                 nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_backward: argument 'att' is NULL"));
  CHECK(Run(nullptr, G, 2) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("attnc_attention_backward: argument 'dout': is NULL"));
  CHECK(Run(&DO, nullptr, 2) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(),
             Contains("argument 'grads': is NULL with num_grads 2"));
  attnc_named_tensor Twice[2] = {G[0], G[0]};
  CHECK(Run(&DO, Twice, 2) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'grads[1] ('slopes')': the "
                                   "name is given twice"));
  attnc_named_tensor Unnamed[1] = {G[0]};
  Unnamed[0].name = nullptr;
  CHECK(Run(&DO, Unnamed, 1) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'grads[0]': name is NULL"));
  // alibi_learnable's two inputs require gradients: the runtime asks for
  // the one left out, by name.
  CHECK(Run(&DO, G, 1) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("head_bias"));
  // A gradient of the wrong shape.
  GBias.Shape[0] = 3;
  CHECK(Run(&DO, G, 2) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("head_bias"));
}

TEST_CASE("varlen: the batch is checked", "[capi]") {
  DefPtr D = example("mha");
  attnc_signature S = sm80Signature();
  S.layout = ATTNC_LAYOUT_THD;
  attnc_attention *Raw = nullptr;
  REQUIRE(attnc_attention_create(D.get(), &S, &Raw) == ATTNC_OK);
  AttPtr A(Raw);
  FakeTensor Q{{256, 4, 64}}, K{{256, 4, 64}}, V{{256, 4, 64}},
      O{{256, 4, 64}}, F{{1, 4, 256}, ATTNC_DTYPE_F32},
      Cu{{3}, ATTNC_DTYPE_I32}, DO{{256, 4, 64}}, DQ{{256, 4, 64}},
      DK{{256, 4, 64}}, DV{{256, 4, 64}};
  CHECK(attnc_attention_forward_varlen(A.get(), &Q, &K, &V, &O, &F, nullptr,
                                       nullptr, 0,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_forward_varlen: argument "
                                   "'batch': is NULL"));
  attnc_varlen B{};
  B.cu_seqlens_q = Cu.T;
  B.cu_seqlens_kv = Cu.T;
  B.cu_seqlens_kv.dtype = 12;
  B.max_seqlen_q = B.max_seqlen_kv = 128;
  CHECK(attnc_attention_forward_varlen(A.get(), &Q, &K, &V, &O, &F, &B,
                                       nullptr, 0,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'batch.cu_seqlens_kv': dtype 12"));
  B.cu_seqlens_kv.dtype = ATTNC_DTYPE_F32; // the runtime wants int32
  CHECK(attnc_attention_forward_varlen(A.get(), &Q, &K, &V, &O, &F, &B,
                                       nullptr, 0,
                                       nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("cu_seqlens"));
  B.cu_seqlens_kv.dtype = ATTNC_DTYPE_I32;
  CHECK(attnc_attention_backward_varlen(A.get(), &Q, &K, &V, &O, &DO, &F, &DQ,
                                        &DK, &DV, nullptr, nullptr, 0,
                                        nullptr, 0,
                                        nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("attnc_attention_backward_varlen: "
                                   "argument 'batch': is NULL"));
  CHECK(attnc_attention_backward_varlen(A.get(), &Q, &K, &V, &O, nullptr, &F,
                                        &DQ, &DK, &DV, &B, nullptr, 0,
                                        nullptr, 0,
                                        nullptr) == ATTNC_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Contains("argument 'dout': is NULL"));
  // The bshd object refuses varlen calls (the runtime's check).
  attnc_attention *Bshd = sm80Attention("mha");
  CHECK(attnc_attention_forward_varlen(Bshd, &Q, &K, &V, &O, &F, &B, nullptr,
                                       0, nullptr) != ATTNC_OK);
}
