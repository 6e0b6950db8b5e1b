// validateCall and TensorView with fake device pointers (no GPU is touched).
#include "CodegenTestDefs.h"

#include "attn/runtime/Attention.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Validate.h"

#include "ForwardLaunch.h"
#include "int_div.cuh"

#include <catch2/catch.hpp>

#include <dlpack/dlpack.h>

#include <cstring>
#include <limits>

using namespace attn;
using namespace attn::runtime;
using attn::dsl::AttentionDef;
using attn::dsl::InputShape;
using attn::dsl::InputType;
using Catch::Matchers::Contains;

namespace {

void *fake(uintptr_t Address) { return reinterpret_cast<void *>(Address); }

/// q, k, v, out and finals of a valid call: B=2, Sq=16, Skv=24, H=4, Hkv=2,
/// D=64, f16, in the signature's layout; finals [1, B, H, Sq] (mha's lse).
struct Call {
  Signature Sig;
  TensorView Q, K, V, O, F;
  bool WithFinals = true;
  InputMap In;

  explicit Call(Layout L = Layout::BSHD) {
    Sig.Dtype = DType::F16;
    Sig.HeadDim = Sig.HeadDimV = 64;
    Sig.TensorLayout = L;
    Q = seq(0x10000, 2, 16, 4);
    K = seq(0x20000, 2, 24, 2);
    V = seq(0x30000, 2, 24, 2);
    O = seq(0x40000, 2, 16, 4);
    F = TensorView::contiguous(fake(0x50000), DType::F32, {1, 2, 4, 16});
  }
  TensorView seq(uintptr_t P, int64_t B, int64_t S, int64_t H) const {
    std::vector<int64_t> Shape = Sig.TensorLayout == Layout::BSHD
                                     ? std::vector<int64_t>{B, S, H, 64}
                                     : std::vector<int64_t>{B, H, S, 64};
    return TensorView::contiguous(fake(P), DType::F16, Shape);
  }
  CallShape run(const ir::Graph &G) const {
    return validateCall(G, Sig, Q, K, V, O, WithFinals ? &F : nullptr, In);
  }
};

const ir::Graph &graphOf(const char *Name) {
  static const CompiledDefinition Mha = compile(examples::mha());
  static const CompiledDefinition Sigmoid = compile(examples::sigmoidAttn());
  static const CompiledDefinition Tensors = compile(test::tensorInputs());
  std::string N(Name);
  if (N == "mha")
    return *Mha.Graph;
  if (N == "sigmoid_attn")
    return *Sigmoid.Graph;
  REQUIRE(N == "tensor_inputs");
  return *Tensors.Graph;
}

/// The InvalidArgument message of \p C on definition \p Def.
std::string invalid(const Call &C, const char *Def = "mha") {
  try {
    C.run(graphOf(Def));
  } catch (const InvalidArgument &E) {
    return E.what();
  }
  FAIL_CHECK("validateCall accepted the call");
  return "";
}

/// Valid values for tensor_inputs' custom inputs.
InputMap tensorInputValues() {
  return {{"temp", 0.5f},
          {"slopes", TensorView::contiguous(fake(0x60000), DType::F32, {4})},
          {"row_bias",
           TensorView::contiguous(fake(0x61000), DType::F32, {2, 4, 16})},
          {"key_bias",
           TensorView::contiguous(fake(0x62000), DType::F32, {2, 4, 24})},
          {"bias", TensorView::contiguous(fake(0x63000), DType::F32,
                                          {2, 4, 16, 24})}};
}

} // namespace

TEST_CASE("validateCall: a valid BSHD call gives its shape and strides",
          "[runtime][validate]") {
  Call C;
  CallShape S = C.run(graphOf("mha"));
  CHECK(S.B == 2);
  CHECK(S.H == 4);
  CHECK(S.Hkv == 2);
  CHECK(S.Sq == 16);
  CHECK(S.Skv == 24);
  // (batch, head, seq) strides of contiguous [B, S, H, 64].
  CHECK(std::vector<int64_t>(S.Q, S.Q + 3) == std::vector<int64_t>{4096, 64, 256});
  CHECK(std::vector<int64_t>(S.K, S.K + 3) == std::vector<int64_t>{3072, 64, 128});
  CHECK(std::vector<int64_t>(S.V, S.V + 3) == std::vector<int64_t>{3072, 64, 128});
  CHECK(std::vector<int64_t>(S.O, S.O + 3) == std::vector<int64_t>{4096, 64, 256});
  // Padded rows (any multiple of 8 elements) are fine.
  C.Q.Strides = {16 * 512, 512, 64, 1};
  CHECK(C.run(graphOf("mha")).Q[2] == 512);
}

TEST_CASE("validateCall: a valid BHSD call gives its shape and strides",
          "[runtime][validate]") {
  Call C(Layout::BHSD);
  CallShape S = C.run(graphOf("mha"));
  CHECK(S.B == 2);
  CHECK(S.H == 4);
  CHECK(S.Hkv == 2);
  CHECK(S.Sq == 16);
  CHECK(S.Skv == 24);
  CHECK(std::vector<int64_t>(S.Q, S.Q + 3) == std::vector<int64_t>{4096, 1024, 64});
  CHECK(std::vector<int64_t>(S.K, S.K + 3) == std::vector<int64_t>{3072, 1536, 64});
  CHECK(std::vector<int64_t>(S.O, S.O + 3) == std::vector<int64_t>{4096, 1024, 64});
}

TEST_CASE("validateCall: valid custom inputs of every shape class",
          "[runtime][validate]") {
  Call C;
  C.In = tensorInputValues();
  CHECK(C.run(graphOf("tensor_inputs")).Skv == 24);
  C.WithFinals = false;
  C.In = {{"softmax_bias", -2.0f}};
  CHECK(C.run(graphOf("sigmoid_attn")).Sq == 16); // no finals needed
}

TEST_CASE("validateCall: null q", "[runtime][validate]") {
  Call C;
  C.Q.Data = nullptr;
  CHECK_THAT(invalid(C), Contains("q: null data pointer"));
}

TEST_CASE("validateCall: rank 3 k", "[runtime][validate]") {
  Call C;
  C.K = TensorView::contiguous(fake(0x20000), DType::F16, {2, 24, 64});
  CHECK_THAT(invalid(C),
             Contains("k: expected rank 4 [batch, seq, heads, head_dim], got "
                      "rank 3"));
  C = Call(Layout::BHSD);
  C.K = TensorView::contiguous(fake(0x20000), DType::F16, {2, 24, 64});
  CHECK_THAT(invalid(C), Contains("k: expected rank 4 [batch, heads, seq, "
                                  "head_dim]"));
}

TEST_CASE("validateCall: wrong dtype v", "[runtime][validate]") {
  Call C;
  C.V.Type = DType::BF16;
  CHECK_THAT(invalid(C), Contains("v: expected dtype f16, got bf16"));
}

TEST_CASE("validateCall: head_dim mismatch", "[runtime][validate]") {
  Call C;
  C.Q = TensorView::contiguous(fake(0x10000), DType::F16, {2, 16, 4, 128});
  CHECK_THAT(invalid(C),
             Contains("q: head_dim (last dimension) must be 64, got 128"));
  C = Call();
  C.Sig.HeadDimV = 128; // v and out must then be 128 wide
  CHECK_THAT(invalid(C), Contains("v: head_dim (last dimension) must be 128"));
}

TEST_CASE("validateCall: non-unit inner stride", "[runtime][validate]") {
  Call C;
  C.K.Strides = {24 * 2 * 128, 2 * 128, 128, 2};
  CHECK_THAT(invalid(C), Contains("k: the head_dim stride must be 1, got 2"));
}

TEST_CASE("validateCall: misaligned pointer", "[runtime][validate]") {
  Call C;
  C.V.Data = fake(0x30002);
  CHECK_THAT(invalid(C), Contains("v: data pointer must be 16-byte aligned"));
}

TEST_CASE("validateCall: seq stride not a multiple of 8",
          "[runtime][validate]") {
  Call C;
  C.Q.Strides = {16 * 260, 260, 64, 1};
  CHECK_THAT(invalid(C), Contains("q: the seq stride (260) must be a "
                                  "non-negative multiple of 8 elements"));
  C = Call();
  C.O.Strides = {-4096, 256, 64, 1};
  CHECK_THAT(invalid(C), Contains("out: the batch stride (-4096)"));
}

TEST_CASE("validateCall: batch mismatch", "[runtime][validate]") {
  Call C;
  C.K = C.seq(0x20000, 3, 24, 2);
  CHECK_THAT(invalid(C),
             Contains("k, v, out: batch must equal q's (2), got 3, 2, 2"));
}

TEST_CASE("validateCall: k heads not dividing q heads", "[runtime][validate]") {
  Call C;
  C.K = C.seq(0x20000, 2, 24, 3);
  C.V = C.seq(0x30000, 2, 24, 3);
  CHECK_THAT(invalid(C), Contains("k: heads (3) must divide q's heads (4)"));
}

TEST_CASE("validateCall: v heads differ from k heads", "[runtime][validate]") {
  Call C;
  C.V = C.seq(0x30000, 2, 24, 1);
  CHECK_THAT(invalid(C), Contains("v: heads must equal k's (2), got 1"));
}

TEST_CASE("validateCall: v seq differs from k seq", "[runtime][validate]") {
  Call C;
  C.V = C.seq(0x30000, 2, 20, 2);
  CHECK_THAT(invalid(C), Contains("v: seq must equal k's (24), got 20"));
}

TEST_CASE("validateCall: out shape mismatch", "[runtime][validate]") {
  Call C;
  C.O = C.seq(0x40000, 2, 8, 4);
  CHECK_THAT(invalid(C), Contains("out: expected seq 16 and heads 4 (as q), "
                                  "got 8 and 4"));
}

TEST_CASE("validateCall: finals missing for mha", "[runtime][validate]") {
  Call C;
  C.WithFinals = false;
  CHECK_THAT(invalid(C), Contains("finals: required, a float32 tensor of "
                                  "shape [1, 2, 4, 16] for the final "
                                  "rowscales of 'mha'"));
}

TEST_CASE("validateCall: finals of the wrong shape", "[runtime][validate]") {
  Call C;
  C.F = TensorView::contiguous(fake(0x50000), DType::F32, {1, 2, 4, 8});
  CHECK_THAT(invalid(C), Contains("finals: expected shape [1, 2, 4, 16], got "
                                  "[1, 2, 4, 8]"));
  C.F = TensorView::contiguous(fake(0x50000), DType::F32, {2, 4, 16});
  CHECK_THAT(invalid(C), Contains("got [2, 4, 16]"));
}

TEST_CASE("validateCall: finals of the wrong dtype", "[runtime][validate]") {
  Call C;
  C.F.Type = DType::F16;
  CHECK_THAT(invalid(C), Contains("finals: expected dtype f32, got f16"));
}

// The kernel writes finals as floats: a misaligned pointer is refused.
TEST_CASE("validateCall: finals at a misaligned address",
          "[runtime][validate]") {
  Call C;
  C.F.Data = fake(0x50002);
  std::string M = invalid(C);
  CHECK_THAT(M, Contains("finals"));
  CHECK_THAT(M, Contains("aligned"));
}

TEST_CASE("validateCall: a custom input missing", "[runtime][validate]") {
  Call C;
  C.WithFinals = false;
  CHECK_THAT(invalid(C, "sigmoid_attn"),
             Contains("input 'softmax_bias': declared by 'sigmoid_attn' but "
                      "not supplied"));
}

TEST_CASE("validateCall: a scalar input given as a tensor",
          "[runtime][validate]") {
  Call C;
  C.WithFinals = false;
  C.In = {{"softmax_bias",
           TensorView::contiguous(fake(0x60000), DType::F32, {4})}};
  CHECK_THAT(invalid(C, "sigmoid_attn"),
             Contains("input 'softmax_bias': a scalar input takes a number"));
}

TEST_CASE("validateCall: a tensor input of the wrong shape",
          "[runtime][validate]") {
  Call C;
  C.In = tensorInputValues();
  C.In["row_bias"] =
      TensorView::contiguous(fake(0x61000), DType::F32, {2, 4, 15});
  CHECK_THAT(invalid(C, "tensor_inputs"),
             Contains("input 'row_bias' (per_row): expected shape [2, 4, 16], "
                      "got [2, 4, 15]"));
  C.In = tensorInputValues();
  C.In["bias"] =
      TensorView::contiguous(fake(0x63000), DType::F32, {2, 4, 24, 16});
  CHECK_THAT(invalid(C, "tensor_inputs"),
             Contains("input 'bias' (full): expected shape [2, 4, 16, 24]"));
  C.In = tensorInputValues();
  C.In["slopes"] = 1.0f;
  CHECK_THAT(invalid(C, "tensor_inputs"),
             Contains("input 'slopes': expected a float32 tensor, got a "
                      "number"));
}

TEST_CASE("validateCall: a tensor input's strides", "[runtime][validate]") {
  Call C;
  C.In = tensorInputValues();
  std::get<TensorView>(C.In["row_bias"]).Strides = {64, 16, 2};
  CHECK_THAT(invalid(C, "tensor_inputs"),
             Contains("input 'row_bias': the last stride must be 1"));
  C.In = tensorInputValues();
  // Rows of a per-row input read backwards: refused, not read out of range.
  std::get<TensorView>(C.In["row_bias"]).Strides = {64, 16, -1};
  CHECK_THAT(invalid(C, "tensor_inputs"),
             Contains("input 'row_bias': the last stride must be 1"));
  C.In = tensorInputValues();
  std::get<TensorView>(C.In["row_bias"]).Strides = {64, -16, 1};
  CHECK_THAT(invalid(C, "tensor_inputs"),
             Contains("input 'row_bias': strides must be non-negative"));
  // Broadcast along a dimension (stride 0) is allowed.
  C.In = tensorInputValues();
  std::get<TensorView>(C.In["row_bias"]).Strides = {0, 16, 1};
  CHECK(C.run(graphOf("tensor_inputs")).Sq == 16);
}

TEST_CASE("validateCall: an extra undeclared input", "[runtime][validate]") {
  Call C;
  C.WithFinals = false;
  C.In = {{"softmax_bias", -2.0f}, {"temperature", 1.0f}};
  CHECK_THAT(invalid(C, "sigmoid_attn"),
             Contains("input 'temperature': 'sigmoid_attn' declares no such "
                      "input"));
}

TEST_CASE("TensorView::contiguous: row-major strides", "[runtime][tensor]") {
  TensorView T = TensorView::contiguous(fake(0x10), DType::BF16, {2, 3, 4, 5});
  CHECK(T.Data == fake(0x10));
  CHECK(T.Type == DType::BF16);
  CHECK(T.Shape == std::vector<int64_t>{2, 3, 4, 5});
  CHECK(T.Strides == std::vector<int64_t>{60, 20, 5, 1});
  CHECK(TensorView::contiguous(nullptr, DType::F32, {7}).Strides ==
        std::vector<int64_t>{1});
  CHECK(TensorView::contiguous(nullptr, DType::F32, {}).Strides.empty());
}

TEST_CASE("TensorView::fromDLPack: CUDA tensors of 16/32-bit floats",
          "[runtime][tensor]") {
  int64_t Shape[4] = {2, 16, 4, 64};
  int64_t Strides[4] = {8192, 512, 64, 1};
  DLTensor T{};
  T.data = fake(0x10000);
  T.device = {kDLCUDA, 0};
  T.ndim = 4;
  T.dtype = {kDLFloat, 16, 1};
  T.shape = Shape;
  T.strides = nullptr; // compact row-major
  T.byte_offset = 0;
  TensorView V = TensorView::fromDLPack(T);
  CHECK(V.Data == fake(0x10000));
  CHECK(V.Type == DType::F16);
  CHECK(V.Shape == std::vector<int64_t>{2, 16, 4, 64});
  CHECK(V.Strides == std::vector<int64_t>{4096, 256, 64, 1});

  T.strides = Strides;
  T.byte_offset = 256;
  T.dtype = {kDLBfloat, 16, 1};
  V = TensorView::fromDLPack(T);
  CHECK(V.Data == fake(0x10100));
  CHECK(V.Type == DType::BF16);
  CHECK(V.Strides == std::vector<int64_t>{8192, 512, 64, 1});
  T.dtype = {kDLFloat, 32, 1};
  CHECK(TensorView::fromDLPack(T).Type == DType::F32);
  T.dtype = {kDLInt, 32, 1}; // int32 ids for an InputType::I32 input
  CHECK(TensorView::fromDLPack(T).Type == DType::I32);
  T.dtype = {kDLInt, 64, 1}; // int64 slots for a paged append
  CHECK(TensorView::fromDLPack(T).Type == DType::I64);
  T.dtype = {kDLFloat, 64, 1};
  CHECK_THROWS_WITH(TensorView::fromDLPack(T),
                    "DLPack tensor: expected float16, bfloat16, float32, "
                    "int32 or int64");

  T.device = {kDLCPU, 0};
  CHECK_THROWS_MATCHES(TensorView::fromDLPack(T), InvalidArgument,
                       Catch::Matchers::Message(
                           "DLPack tensor: expected a CUDA device tensor"));
  T.device = {kDLCUDA, 0};
  T.dtype = {kDLFloat, 64, 1};
  CHECK_THROWS_AS(TensorView::fromDLPack(T), InvalidArgument);
  T.dtype = {kDLFloat, 16, 2};
  CHECK_THROWS_AS(TensorView::fromDLPack(T), InvalidArgument);
}

namespace {

const ir::Graph &documentGraph() {
  static const CompiledDefinition D = compile(examples::mhaDocumentIds());
  return *D.Graph;
}

/// Valid int32 [B, S] ids for mha_document_ids on Call's shape.
InputMap documentIds() {
  return {{"doc_q", TensorView::contiguous(fake(0x70000), DType::I32,
                                           {2, 16})},
          {"doc_k", TensorView::contiguous(fake(0x71000), DType::I32,
                                           {2, 24})}};
}

std::string invalidOn(const Call &C, const ir::Graph &G) {
  try {
    C.run(G);
  } catch (const InvalidArgument &E) {
    return E.what();
  }
  FAIL_CHECK("validateCall accepted the call");
  return "";
}

} // namespace

TEST_CASE("validateCall: int32 per-token inputs", "[runtime][validate]") {
  Call C;
  C.In = documentIds();
  CHECK(C.run(documentGraph()).Skv == 24);
  // A row of a wider buffer (batch stride past the length) is fine.
  std::get<TensorView>(C.In["doc_k"]).Strides = {64, 1};
  CHECK(C.run(documentGraph()).Skv == 24);

  C.In = documentIds();
  std::get<TensorView>(C.In["doc_q"]).Type = DType::F32;
  CHECK_THAT(invalidOn(C, documentGraph()),
             Contains("input 'doc_q': expected dtype i32, got f32"));
  C.In = documentIds();
  C.In["doc_k"] =
      TensorView::contiguous(fake(0x71000), DType::I32, {2, 4, 24});
  CHECK_THAT(invalidOn(C, documentGraph()),
             Contains("input 'doc_k' (per_key_token): expected shape "
                      "[2, 24], got [2, 4, 24]"));
  C.In = documentIds();
  C.In["doc_q"] = TensorView::contiguous(fake(0x70000), DType::I32, {2, 24});
  CHECK_THAT(invalidOn(C, documentGraph()),
             Contains("input 'doc_q' (per_query_token): expected shape "
                      "[2, 16], got [2, 24]"));
  C.In = documentIds();
  C.In["doc_q"] = int32_t(3);
  CHECK_THAT(invalidOn(C, documentGraph()),
             Contains("input 'doc_q': expected an int32 tensor, got a "
                      "number"));
}

TEST_CASE("validateCall: a scalar input takes its declared type",
          "[runtime][validate]") {
  AttentionDef Def = examples::sigmoidAttn();
  Def.name = "int_scalar";
  Def.inputs.declare("shift", InputShape::Scalar, InputType::I32);
  CompiledDefinition D = compile(Def);
  Call C;
  C.WithFinals = false;
  C.In = {{"softmax_bias", -2.0f}, {"shift", int32_t(4)}};
  CHECK(C.run(*D.Graph).Sq == 16);
  C.In["shift"] = 4.0f;
  CHECK_THAT(invalidOn(C, *D.Graph),
             Contains("input 'shift': the scalar input is int32; pass an "
                      "int32_t, got a float"));
  C.In["shift"] = int32_t(4);
  C.In["softmax_bias"] = int32_t(-2);
  CHECK_THAT(invalidOn(C, *D.Graph),
             Contains("input 'softmax_bias': the scalar input is float32; "
                      "pass a float, got an int32_t"));
  // The slots hold the int32 bits.
  C.In["softmax_bias"] = -2.0f;
  CallShape S = C.run(*D.Graph);
  std::vector<uint64_t> Slots = inputSlots(*D.Graph, S, C.In);
  REQUIRE(Slots.size() == 2);
  int32_t Shift = 0;
  std::memcpy(&Shift, &Slots[1], sizeof Shift);
  CHECK(Shift == 4);
  // Its high 4 bytes the floordiv multiplier the generated code divides by
  // (int_div.cuh's floordiv_by: it trusts the host to have made it), for
  // every value, 0 for 0 alone; a float's high bytes stay 0.
  for (int32_t V : {4, 1, 3, 256, 1000003, -7, 0, std::numeric_limits<int32_t>::max(),
                    std::numeric_limits<int32_t>::min()}) {
    C.In["shift"] = V;
    S = C.run(*D.Graph);
    Slots = inputSlots(*D.Graph, S, C.In);
    INFO("shift " << V);
    CHECK(uint32_t(Slots[1]) == uint32_t(V));
    CHECK(uint32_t(Slots[1] >> 32) == attnc::int_div_multiplier(V));
    CHECK((Slots[1] >> 32 == 0) == (V == 0));
    CHECK(Slots[0] >> 32 == 0);
    for (int32_t A : {0, 1, -1, 255, 256, -256, 1 << 20, -(1 << 20) - 3}) {
      const int64_t Q = V == 0 ? 0 : int64_t(A) / V - ((int64_t(A) % V != 0) && ((A < 0) != (V < 0)));
      CHECK(attnc::floordiv_by(A, V, uint32_t(Slots[1] >> 32)) == Q);
    }
  }
}

TEST_CASE("inputSlots: a per-token input has a batch stride and a length, "
          "no head stride",
          "[runtime][validate]") {
  Call C;
  C.In = documentIds();
  std::get<TensorView>(C.In["doc_k"]).Strides = {64, 1};
  CallShape S = C.run(documentGraph());
  std::vector<uint64_t> Slots = inputSlots(documentGraph(), S, C.In);
  REQUIRE(Slots.size() == 12);
  CHECK(Slots[0] == 0x70000);
  CHECK(Slots[1] == 16); // batch stride
  CHECK(Slots[2] == 0);  // head stride: unused
  CHECK(Slots[4] == 16); // rows
  CHECK(Slots[6] == 0x71000);
  CHECK(Slots[7] == 64);
  CHECK(Slots[10] == 24);
}

TEST_CASE("TensorView::broadcastDim: a [B, S] buffer seen as [B, H, S]",
          "[runtime][validate]") {
  TensorView Ids = TensorView::contiguous(fake(0x80000), DType::F32, {2, 16});
  TensorView V = Ids.broadcastDim(1, 4);
  CHECK(V.Data == Ids.Data);
  CHECK(V.Type == DType::F32);
  CHECK(V.Shape == std::vector<int64_t>{2, 4, 16});
  CHECK(V.Strides == std::vector<int64_t>{16, 0, 1});
  // At the front and at the back; a view without strides is contiguous.
  TensorView NoStrides{fake(0x80000), DType::I32, {3, 5}, {}};
  CHECK(NoStrides.broadcastDim(0, 2).Strides ==
        std::vector<int64_t>{0, 5, 1});
  CHECK(NoStrides.broadcastDim(2, 7).Shape == std::vector<int64_t>{3, 5, 7});
  CHECK(NoStrides.broadcastDim(2, 7).Strides ==
        std::vector<int64_t>{5, 1, 0});
  CHECK_THROWS_WITH(Ids.broadcastDim(3, 4),
                    Contains("broadcastDim: dimension 3 is past the rank 2"));
  CHECK_THROWS_WITH(Ids.broadcastDim(1, -1),
                    Contains("broadcastDim: the size -1 is negative"));

  // tensor_inputs' per_row and per_key inputs take the broadcast views.
  Call C;
  C.In = tensorInputValues();
  C.In["row_bias"] = Ids.broadcastDim(1, 4);
  C.In["key_bias"] =
      TensorView::contiguous(fake(0x90000), DType::F32, {2, 24})
          .broadcastDim(1, 4);
  CallShape S = C.run(graphOf("tensor_inputs"));
  std::vector<uint64_t> Slots = inputSlots(graphOf("tensor_inputs"), S, C.In);
  CHECK(Slots[7 + 1] == 16); // row_bias: batch stride
  CHECK(Slots[7 + 2] == 0);  // head stride 0: every head reads one row
}
