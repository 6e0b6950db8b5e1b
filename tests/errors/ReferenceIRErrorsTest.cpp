// User mistakes in reference tensors and in IR JSON documents: each gives
// its own message saying what and where.
#include "Examples.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/ir/Serialize.h"
#include "attn/reference/Attention.h"
#include "attn/reference/Linear.h"

#include <catch2/catch.hpp>

using namespace attn;
using namespace attn::dsl;
using Catch::Contains;
using Catch::StartsWith;

namespace {

/// Small random-free inputs for the reference: q [1,2,4,8], k/v [1,2,5,8].
reference::AttentionInputs smallInputs() {
  reference::AttentionInputs In;
  In.Q = reference::Tensor({1, 2, 4, 8}, 0.1);
  In.K = reference::Tensor({1, 2, 5, 8}, 0.2);
  In.V = reference::Tensor({1, 2, 5, 8}, 0.3);
  return In;
}

} // namespace

TEST_CASE("reference: backward of a definition without one that cannot be "
          "derived") {
  // P = |s|: its derivative needs the sign of the score, which P does not
  // tell (see tests/autodiff for the other reasons).
  struct NoBackward : OnlineFunc {
    NoBackward() : OnlineFunc({}, {}) {}
    OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &, SymbolScalar,
                               SymbolScalar, SymbolScalar) const override {
      return {s.abs(), {}, 1.0};
    }
    EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &,
                                       SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
      return {o, {}};
    }
    SymbolScalar forward(SymbolScalar s, const Rowscales &, SymbolScalar,
                         SymbolScalar, SymbolScalar,
                         SymbolScalar) const override {
      return s.abs();
    }
  };
  AttentionDef Def("nobwd");
  Def.online_func = std::make_shared<NoBackward>();
  CompiledDefinition C = compile(Def);
  reference::AttentionInputs In = smallInputs();
  reference::Tensor DO({1, 2, 4, 8}, 1.0);
  REQUIRE_THROWS_AS(reference::attentionBackward(C, In, DO), UserError);
  REQUIRE_THROWS_WITH(reference::attentionBackward(C, In, DO),
                      StartsWith("nobwd: cannot derive backward: forward "
                                 "`abs(scores)`") &&
                          Contains("; write OnlineFunc::backward"));
}

// The entry points validate before they read a size, so a rank-3 q is the
// UserError validateAttentionInputs gives, not std::out_of_range.
TEST_CASE("reference: q of the wrong rank") {
  CompiledDefinition C = compile(examples::mha());
  reference::AttentionInputs In = smallInputs();
  In.Q = reference::Tensor({1, 2, 4});
  // validateAttentionInputs itself gets it right ...
  REQUIRE_THROWS_WITH(reference::validateAttentionInputs(*C.Graph, In),
                      Contains("reference: q must be [batch, heads, seq, "
                               "dim], got [1, 2, 4]"));
  // ... and the entry points call it first.
  CHECK_THROWS_AS(reference::attentionDirect(C, In), UserError);
  CHECK_THROWS_AS(reference::attentionOnline(C, In, 2), UserError);
  CHECK_THROWS_AS(
      reference::attentionBackward(C, In, reference::Tensor({1, 2, 4, 8})),
      UserError);
}

// The same for linear attention.
TEST_CASE("linear reference: q of the wrong rank") {
  CompiledDefinition C = compile(examples::simpleGla());
  reference::LinearInputs In;
  In.Q = reference::Tensor({1, 2, 4});
  In.K = reference::Tensor({1, 2, 4, 8});
  In.V = reference::Tensor({1, 2, 4, 8});
  In.Decay = reference::Tensor({1, 2, 4});
  REQUIRE_THROWS_WITH(reference::validateLinearInputs(*C.Graph, In),
                      Contains("linear reference: q must be [batch, heads, "
                               "seq, dim], got [1, 2, 4]"));
  CHECK_THROWS_AS(reference::linearRecurrent(C, In), UserError);
  CHECK_THROWS_AS(reference::linearChunked(C, In, 2), UserError);
}

TEST_CASE("reference: a linear definition given to the attention reference") {
  CompiledDefinition C = compile(examples::mamba2());
  reference::AttentionInputs In = smallInputs();
  REQUIRE_THROWS_AS(reference::attentionDirect(C, In), UserError);
  REQUIRE_THROWS_WITH(reference::attentionDirect(C, In),
                      Contains("'mamba2' is linear attention; use the linear "
                               "reference"));
}

TEST_CASE("reference: k and v with different sequence lengths") {
  CompiledDefinition C = compile(examples::mha());
  reference::AttentionInputs In = smallInputs();
  In.V = reference::Tensor({1, 2, 6, 8});
  REQUIRE_THROWS_AS(reference::attentionDirect(C, In), UserError);
  REQUIRE_THROWS_WITH(reference::attentionDirect(C, In),
                      Contains("k and v must have the same sequence length"));
}

TEST_CASE("IR JSON that is not JSON") {
  REQUIRE_THROWS_AS(ir::loadJSON("{"), UserError);
  REQUIRE_THROWS_WITH(ir::loadJSON("{"),
                      StartsWith("IR JSON: document: not valid JSON"));
}

TEST_CASE("IR JSON of another format") {
  REQUIRE_THROWS_AS(ir::loadJSON("{\"format\": \"other\"}"), UserError);
  REQUIRE_THROWS_WITH(ir::loadJSON("{\"format\": \"other\"}"),
                      StartsWith("IR JSON: document: ") &&
                          Contains("not an attnc IR file"));
}

TEST_CASE("IR JSON of another version") {
  const char *Doc = "{\"format\": \"attnc-ir\", \"version\": 99}";
  REQUIRE_THROWS_AS(ir::loadJSON(Doc), UserError);
  REQUIRE_THROWS_WITH(ir::loadJSON(Doc),
                      Contains("unsupported version 99 (expected 1)"));
}

TEST_CASE("IR JSON with an unknown op") {
  // A valid document with one op renamed: the message names the node.
  CompiledDefinition C = compile(examples::reluAttn());
  std::string S = ir::saveJSON(*C.Graph);
  size_t At = S.find("\"rsqrt\"");
  REQUIRE(At != std::string::npos);
  S.replace(At, 7, "\"rsqrX\"");
  REQUIRE_THROWS_AS(ir::loadJSON(S), UserError);
  REQUIRE_THROWS_WITH(ir::loadJSON(S), StartsWith("IR JSON: /nodes/") &&
                                           Contains("/op: unknown op 'rsqrX'"));
}

TEST_CASE("IR JSON errors in a node carry the prefix once") {
  // A minimal document with the given nodes.
  auto Doc = [](const std::string &Nodes) {
    return "{\"format\": \"attnc-ir\", \"version\": 1, \"name\": \"x\", "
           "\"kind\": \"attention\", \"has_mask\": false, "
           "\"has_backward\": false, \"decay_sample\": [-1, 0], "
           "\"rowscales\": [], \"finals\": [], \"inputs\": [], "
           "\"nodes\": [" +
           Nodes + "], \"functions\": []}";
  };
  // The document's own mistake ...
  REQUIRE_THROWS_AS(
      ir::loadJSON(Doc("{\"op\": \"foo\", \"type\": \"f32\", "
                       "\"space\": \"const\"}")),
      UserError);
  REQUIRE_THROWS_WITH(
      ir::loadJSON(Doc("{\"op\": \"foo\", \"type\": \"f32\", "
                       "\"space\": \"const\"}")),
      Catch::Equals("IR JSON: /nodes/0/op: unknown op 'foo'"));
  // ... and one the graph builder finds: 'not' of a number.
  std::string NotOfNumber =
      Doc("{\"op\": \"const\", \"value\": 1, \"type\": \"f32\", "
          "\"space\": \"const\"}, {\"op\": \"not\", \"args\": [0], "
          "\"type\": \"i1\", \"space\": \"const\"}");
  REQUIRE_THROWS_AS(ir::loadJSON(NotOfNumber), UserError);
  REQUIRE_THROWS_WITH(ir::loadJSON(NotOfNumber),
                      Catch::Equals("IR JSON: /nodes/1: 'not' needs a "
                                    "boolean, but `1` is a number"));
}
