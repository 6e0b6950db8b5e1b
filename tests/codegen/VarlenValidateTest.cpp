// Packed variable-length calls: every host-visible argument is checked
// with its own message (fake device pointers; no GPU is touched).
#include "CodegenTestDefs.h"

#include "attn/Error.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Validate.h"

#include "ForwardLaunch.h"
#include "LinearValidate.h"

#include <catch2/catch.hpp>
#include <dlpack/dlpack.h>

#include <type_traits>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;

namespace {

void *fake(uintptr_t Address) { return reinterpret_cast<void *>(Address); }

const CompiledDefinition &mha() {
  static const CompiledDefinition D = compile(examples::mha());
  return D;
}

/// A valid packed call: 3 sequences, 40 query and 56 key tokens, H=4,
/// Hkv=2, D=64, f16; finals [1, 4, 40] (mha's lse).
struct VarlenCall {
  Signature Sig;
  TensorView Q, K, V, O, F;
  VarlenBatch VB;
  InputMap In;

  VarlenCall() {
    Sig.HeadDim = Sig.HeadDimV = 64;
    Sig.TensorLayout = Layout::THD;
    Q = packed(0x10000, 40, 4);
    K = packed(0x20000, 56, 2);
    V = packed(0x30000, 56, 2);
    O = packed(0x40000, 40, 4);
    F = TensorView::contiguous(fake(0x50000), DType::F32, {1, 4, 40});
    VB.CuSeqlensQ = TensorView::contiguous(fake(0x60000), DType::I32, {4});
    VB.CuSeqlensKv = TensorView::contiguous(fake(0x61000), DType::I32, {4});
    VB.MaxSeqlenQ = 20;
    VB.MaxSeqlenKv = 30;
  }
  static TensorView packed(uintptr_t P, int64_t T, int64_t H) {
    return TensorView::contiguous(fake(P), DType::F16, {T, H, 64});
  }
  CallShape run(const ir::Graph &G) const {
    return validateVarlenCall(G, Sig, Q, K, V, O, &F, VB, In);
  }
  BackwardCallShape runBackward() const {
    BackwardTensors T{Q, K, V, &O, O, &F, Q, K, V};
    return validateVarlenBackwardCall(mha(), Sig, T, VB, In, {});
  }
};

std::string invalid(const VarlenCall &C) {
  try {
    C.run(*mha().Graph);
  } catch (const InvalidArgument &E) {
    return E.what();
  }
  FAIL_CHECK("validateVarlenCall accepted the call");
  return "";
}

} // namespace

TEST_CASE("varlen validation: a valid call's shape", "[runtime][varlen]") {
  VarlenCall C;
  CallShape S = C.run(*mha().Graph);
  CHECK(S.Packed);
  CHECK(S.B == 3);
  CHECK(S.H == 4);
  CHECK(S.Hkv == 2);
  CHECK(S.Sq == 20);
  CHECK(S.Skv == 30);
  CHECK(S.TotalQ == 40);
  CHECK(S.TotalKv == 56);
  CHECK(S.CuQ == fake(0x60000));
  CHECK(S.CuKv == fake(0x61000));
  // The kernels add token · seq stride and never use a batch stride.
  CHECK(S.Q[0] == 0);
  CHECK(S.Q[1] == 64);
  CHECK(S.Q[2] == 4 * 64);
  CHECK(S.K[2] == 2 * 64);
  CHECK(C.runBackward().Fwd.Packed);
}

TEST_CASE("varlen validation: each wrong argument has its message",
          "[runtime][varlen]") {
  VarlenCall C;
  SECTION("layout") {
    C.Sig.TensorLayout = Layout::BSHD;
    CHECK(invalid(C) == "signature: a packed variable-length call needs "
                        "layout thd ([tokens, heads, head_dim]), got bshd");
  }
  SECTION("q rank") {
    C.Q = TensorView::contiguous(fake(0x10000), DType::F16, {1, 40, 4, 64});
    CHECK(invalid(C) ==
          "q: expected rank 3 [tokens, heads, head_dim], got rank 4");
  }
  SECTION("out tokens") {
    C.O = VarlenCall::packed(0x40000, 39, 4);
    CHECK(invalid(C) ==
          "out: expected tokens 40 and heads 4 (as q), got 39 and 4");
  }
  SECTION("k heads") {
    C.K = VarlenCall::packed(0x20000, 56, 3);
    C.V = VarlenCall::packed(0x30000, 56, 3);
    CHECK(invalid(C) == "k: heads (3) must divide q's heads (4)");
  }
  SECTION("cu_seqlens_q dtype") {
    C.VB.CuSeqlensQ.Type = DType::F32;
    CHECK(invalid(C) == "cu_seqlens_q: expected dtype i32, got f32");
  }
  SECTION("cu_seqlens_q rank") {
    C.VB.CuSeqlensQ =
        TensorView::contiguous(fake(0x60000), DType::I32, {2, 2});
    CHECK(invalid(C) == "cu_seqlens_q: expected rank 1 [batch + 1], got rank 2");
  }
  SECTION("cu_seqlens_q strided") {
    C.VB.CuSeqlensQ.Strides = {2};
    CHECK(invalid(C) == "cu_seqlens_q: must be contiguous");
  }
  SECTION("cu_seqlens_q misaligned") {
    C.VB.CuSeqlensQ.Data = fake(0x60002);
    CHECK(invalid(C) == "cu_seqlens_q: data pointer must be 4-byte aligned");
  }
  SECTION("cu_seqlens_kv null") {
    C.VB.CuSeqlensKv.Data = nullptr;
    CHECK(invalid(C) == "cu_seqlens_kv: null data pointer");
  }
  SECTION("no sequence") {
    C.VB.CuSeqlensQ = TensorView::contiguous(fake(0x60000), DType::I32, {1});
    C.VB.CuSeqlensKv = TensorView::contiguous(fake(0x61000), DType::I32, {1});
    CHECK(invalid(C) == "cu_seqlens_q: expected batch + 1 entries with a batch "
                        "of at least 1, got 1 entries");
  }
  SECTION("cu_seqlens_kv length") {
    C.VB.CuSeqlensKv = TensorView::contiguous(fake(0x61000), DType::I32, {3});
    CHECK(invalid(C) == "cu_seqlens_kv: expected shape [4] (batch + 1, as "
                        "cu_seqlens_q), got [3]");
  }
  SECTION("max_seqlen_q zero") {
    C.VB.MaxSeqlenQ = 0;
    CHECK(invalid(C) ==
          "max_seqlen_q: expected between 1 and q's tokens (40), got 0");
  }
  SECTION("max_seqlen_kv past the tokens") {
    C.VB.MaxSeqlenKv = 57;
    CHECK(invalid(C) ==
          "max_seqlen_kv: expected between 1 and k's tokens (56), got 57");
  }
  SECTION("finals per batch") {
    C.F = TensorView::contiguous(fake(0x50000), DType::F32, {1, 3, 4, 20});
    CHECK(invalid(C) == "finals: expected shape [1, 4, 40], got [1, 3, 4, 20]");
  }
  SECTION("finals strided") {
    C.F.Strides = {160, 1, 4};
    CHECK(invalid(C) == "finals: must be contiguous");
  }
}

TEST_CASE("varlen validation: a dense call of a thd signature is refused",
          "[runtime][varlen]") {
  VarlenCall C;
  CHECK_THROWS_MATCHES(
      validateCall(*mha().Graph, C.Sig, C.Q, C.K, C.V, C.O, &C.F, C.In),
      InvalidArgument,
      Catch::Matchers::Message("q: layout thd holds packed variable-length "
                               "batches; call forwardVarlen or backwardVarlen "
                               "with a VarlenBatch"));
}

TEST_CASE("varlen validation: custom inputs", "[runtime][varlen]") {
  static const CompiledDefinition Tensors = compile(test::tensorInputs());
  VarlenCall C;
  C.F = TensorView::contiguous(fake(0x50000), DType::F32, {1, 4, 40});
  // Full inputs have no packed layout yet: refused by name before anything
  // else about the inputs is looked at.
  CHECK_THROWS_MATCHES(
      C.run(*Tensors.Graph), NotSupportedYet,
      Catch::Matchers::Message(
          "not supported yet: input 'bias': full inputs in packed "
          "variable-length calls (scalar, per_head, per_row, per_key, "
          "per_query_token and per_key_token inputs are supported)"));
  // Scalar and per-head ones are checked as in a dense call.
  static const CompiledDefinition Alibi = compile(examples::alibiLearnable());
  C.In = {{"slopes", TensorView::contiguous(fake(0x70000), DType::F32, {4})},
          {"head_bias",
           TensorView::contiguous(fake(0x71000), DType::F32, {3})}};
  CHECK_THROWS_WITH(C.run(*Alibi.Graph), Contains("input 'head_bias'"));
  C.In["head_bias"] = TensorView::contiguous(fake(0x71000), DType::F32, {4});
  CHECK(C.run(*Alibi.Graph).Packed);
}

TEST_CASE("varlen validation: the backward's tensors", "[runtime][varlen]") {
  VarlenCall C;
  TensorView DK = VarlenCall::packed(0x80000, 55, 2);
  BackwardTensors T{C.Q, C.K, C.V, &C.O, C.O, &C.F, C.Q, DK, C.V};
  CHECK_THROWS_MATCHES(
      validateVarlenBackwardCall(mha(), C.Sig, T, C.VB, C.In, {}),
      InvalidArgument,
      Catch::Matchers::Message(
          "dk: expected batch 1, seq 56 and heads 2 (as k), got 1, 55 and 2"));
  VarlenBatch Bad = C.VB;
  Bad.MaxSeqlenKv = 0;
  BackwardTensors Good{C.Q, C.K, C.V, &C.O, C.O, &C.F, C.Q, C.K, C.V};
  CHECK_THROWS_WITH(validateVarlenBackwardCall(mha(), C.Sig, Good, Bad, C.In, {}),
                    "max_seqlen_kv: expected between 1 and k's tokens (56), "
                    "got 0");
}

TEST_CASE("varlen: DLPack int32 tensors are views of i32", "[runtime][varlen]") {
  int64_t Shape[1] = {5};
  DLTensor T{};
  T.data = fake(0x1000);
  T.device = {kDLCUDA, 0};
  T.ndim = 1;
  T.dtype = {kDLInt, 32, 1};
  T.shape = Shape;
  TensorView V = TensorView::fromDLPack(T);
  CHECK(V.Type == DType::I32);
  CHECK(V.Shape == std::vector<int64_t>{5});
  CHECK(std::string(dtypeName(DType::I32)) == "i32");
}

// runtime::ElemType, the tensor views' enum before DType was the one enum,
// stays for a release as a deprecated alias of it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static_assert(std::is_same_v<attn::runtime::ElemType, attn::DType>,
              "ElemType is DType");
TEST_CASE("varlen: the deprecated ElemType names DType's values",
          "[runtime][varlen]") {
  CHECK(std::string(attn::runtime::elemTypeName(attn::DType::I64)) == "i64");
}
#pragma GCC diagnostic pop

TEST_CASE("varlen validation: per-row and per-key inputs are [heads, tokens]",
          "[runtime][varlen][inputs]") {
  static const CompiledDefinition Doc = compile(examples::mhaDocument());
  VarlenCall C;
  auto F32 = [](uintptr_t P, std::vector<int64_t> Shape) {
    return TensorView::contiguous(fake(P), DType::F32, std::move(Shape));
  };
  C.In = {{"q_doc", F32(0x70000, {4, 40})}, {"k_doc", F32(0x71000, {4, 56})}};
  CallShape S = C.run(*Doc.Graph);
  CHECK(S.Packed);
  // Slots: no batch stride (b is the sequence), the head stride, the token
  // count as the bound, the row shift 0 (the kernels set it per sequence).
  std::vector<uint64_t> Slots = inputSlots(*Doc.Graph, S, C.In);
  REQUIRE(Slots.size() == 12);
  CHECK(Slots[0] == 0x70000);
  CHECK(Slots[1] == 0);
  CHECK(Slots[2] == 40);
  CHECK(Slots[4] == 40);
  CHECK(Slots[5] == 0);
  CHECK(Slots[6] == 0x71000);
  CHECK(Slots[7] == 0);
  CHECK(Slots[8] == 56);
  CHECK(Slots[10] == 56);
  CHECK(Slots[11] == 0);
  // A head stride other than the token count (a view of a wider buffer).
  TensorView Wide = F32(0x72000, {4, 56});
  Wide.Strides = {64, 1};
  C.In["k_doc"] = Wide;
  CHECK(inputSlots(*Doc.Graph, C.run(*Doc.Graph), C.In)[8] == 64);

  auto Refused = [&](const char *Name, TensorView T) {
    VarlenCall Bad = C;
    Bad.In[Name] = std::move(T);
    try {
      Bad.run(*Doc.Graph);
    } catch (const InvalidArgument &E) {
      return std::string(E.what());
    }
    FAIL_CHECK("validateVarlenCall accepted the input");
    return std::string();
  };
  // The dense shape, the other side's tokens, a dtype, a stride, null.
  CHECK(Refused("q_doc", F32(0x70000, {1, 4, 40})) ==
        "input 'q_doc' (per_row [heads, q tokens] in a packed call): expected "
        "shape [4, 40], got [1, 4, 40]");
  CHECK(Refused("k_doc", F32(0x71000, {4, 40})) ==
        "input 'k_doc' (per_key [heads, kv tokens] in a packed call): expected "
        "shape [4, 56], got [4, 40]");
  CHECK_THAT(Refused("q_doc", TensorView::contiguous(fake(0x70000), DType::I32, {4, 40})),
             Contains("input 'q_doc': expected dtype"));
  TensorView Strided = F32(0x70000, {4, 40});
  Strided.Strides = {80, 2};
  CHECK(Refused("q_doc", Strided) == "input 'q_doc': the last stride must be 1");
  CHECK(Refused("q_doc", F32(0, {4, 40})) == "input 'q_doc': null data pointer");
  VarlenCall Missing = C;
  Missing.In.erase("k_doc");
  CHECK_THROWS_WITH(Missing.run(*Doc.Graph),
                    "input 'k_doc': declared by 'mha_document' but not supplied");
}

TEST_CASE("varlen validation: per-token inputs are [tokens], int32 ids",
          "[runtime][varlen][inputs]") {
  static const CompiledDefinition Ids = compile(examples::mhaDocumentIds());
  VarlenCall C;
  auto I32 = [](uintptr_t P, std::vector<int64_t> Shape) {
    return TensorView::contiguous(fake(P), DType::I32, std::move(Shape));
  };
  C.In = {{"doc_q", I32(0x70000, {40})}, {"doc_k", I32(0x71000, {56})}};
  CallShape S = C.run(*Ids.Graph);
  std::vector<uint64_t> Slots = inputSlots(*Ids.Graph, S, C.In);
  REQUIRE(Slots.size() == 12);
  CHECK(Slots[0] == 0x70000);
  CHECK(Slots[1] == 0);
  CHECK(Slots[2] == 0);
  CHECK(Slots[4] == 40);
  CHECK(Slots[5] == 0);
  CHECK(Slots[6] == 0x71000);
  CHECK(Slots[10] == 56);

  auto Message = [&](const char *Name, TensorView T) {
    VarlenCall Bad = C;
    Bad.In[Name] = std::move(T);
    try {
      Bad.run(*Ids.Graph);
    } catch (const InvalidArgument &E) {
      return std::string(E.what());
    }
    FAIL_CHECK("validateVarlenCall accepted the input");
    return std::string();
  };
  CHECK(Message("doc_q", I32(0x70000, {1, 40})) ==
        "input 'doc_q' (per_query_token [q tokens] in a packed call): expected "
        "shape [40], got [1, 40]");
  CHECK(Message("doc_k", I32(0x71000, {40})) ==
        "input 'doc_k' (per_key_token [kv tokens] in a packed call): expected "
        "shape [56], got [40]");
  CHECK_THAT(Message("doc_k", TensorView::contiguous(fake(0x71000), DType::F32, {56})),
             Contains("input 'doc_k': expected dtype"));
  CHECK(Message("doc_q", I32(0x70002, {40})) ==
        "input 'doc_q': data pointer must be 4-byte aligned");
  // The backward checks them the same way.
  VarlenCall Bwd = C;
  Bwd.In["doc_k"] = I32(0x71000, {1, 56});
  BackwardTensors T{Bwd.Q, Bwd.K, Bwd.V, &Bwd.O, Bwd.O, &Bwd.F, Bwd.Q, Bwd.K, Bwd.V};
  CHECK_THROWS_WITH(validateVarlenBackwardCall(Ids, Bwd.Sig, T, Bwd.VB, Bwd.In, {}),
                    Contains("input 'doc_k' (per_key_token [kv tokens] in a packed "
                             "call): expected shape [56], got [1, 56]"));
}

TEST_CASE("linear packed forward: the sequence split's rule and its switch",
          "[runtime][varlen][linear]") {
  using runtime::linearVarlenSplitRows;
  REQUIRE(unsetenv("ATTNC_LINEAR_SPLIT") == 0);
  // Under one wave (Ctas < Slots) every sequence may split; from one, none.
  CHECK(linearVarlenSplitRows(32, 8, 256, 264) == 32);
  CHECK(linearVarlenSplitRows(32, 32, 1024, 396) == 0);
  // More sequences than the kernel ranks, or a grid past 65535 rows: none.
  CHECK(linearVarlenSplitRows(129, 1, 129, 1000) == 0);
  CHECK(linearVarlenSplitRows(64, 1024, 100, 1000) == 0);
  REQUIRE(setenv("ATTNC_LINEAR_SPLIT", "1", 1) == 0);
  CHECK(linearVarlenSplitRows(32, 32, 1024, 396) == 32);
  CHECK(linearVarlenSplitRows(129, 1, 129, 1000) == 0);
  REQUIRE(setenv("ATTNC_LINEAR_SPLIT", "0", 1) == 0);
  CHECK(linearVarlenSplitRows(32, 8, 256, 264) == 0);
  REQUIRE(setenv("ATTNC_LINEAR_SPLIT", "on", 1) == 0);
  CHECK_THROWS_AS(linearVarlenSplitRows(32, 8, 256, 264), UserError);
  CHECK_THROWS_WITH(linearVarlenSplitRows(200, 8, 256, 264),
                    Catch::Contains("ATTNC_LINEAR_SPLIT='on': expected 0 (no "
                                    "sequence split) or 1"));
  REQUIRE(unsetenv("ATTNC_LINEAR_SPLIT") == 0);
}
