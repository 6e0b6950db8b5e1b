// Reference input validation: malformed inputs are UserErrors.
#include "TestDefs.h"

#include "Examples.h"

#include "attn/Error.h"
#include "attn/reference/Linear.h"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

using namespace attn;
using Catch::Matchers::Contains;
using reference::AttentionInputs;
using reference::LinearInputs;
using reference::Tensor;

namespace {

/// Valid sigmoid_attn inputs (it declares the scalar softmax_bias).
AttentionInputs goodAttention(const CompiledDefinition &C) {
  std::mt19937_64 Rng(1);
  return testdefs::randomInputs(C, Rng, 1, 4, 2, 3, 5, 2, 3);
}

/// Valid mamba2 inputs (per-head A, per-row dt).
LinearInputs goodLinear(const CompiledDefinition &C) {
  std::mt19937_64 Rng(2);
  LinearInputs In;
  In.Q = Tensor::normal({1, 2, 4, 3}, Rng);
  In.K = Tensor::normal({1, 2, 4, 3}, Rng);
  In.V = Tensor::normal({1, 4, 4, 2}, Rng);
  In.Decay = Tensor({1, 4, 4});
  In.Inputs = reference::sampleInputs(*C.Graph, Rng, 1, 4, 4, 4);
  return In;
}

} // namespace

TEST_CASE("attention inputs: the valid baseline is accepted", "[validation]") {
  CompiledDefinition C = compile(examples::sigmoidAttn());
  AttentionInputs In = goodAttention(C);
  CHECK_NOTHROW(reference::validateAttentionInputs(*C.Graph, In));
  CHECK_NOTHROW(reference::attentionOnline(C, In, 2));
}

TEST_CASE("attention inputs: wrong ranks and mismatched dims are UserErrors",
          "[validation]") {
  CompiledDefinition C = compile(examples::sigmoidAttn());
  AttentionInputs In = goodAttention(C);
  // \p ViaEntryPoints: also through attentionOnline/Direct.
  auto Bad = [&](auto Mutate, const char *Message, bool ViaEntryPoints = true) {
    AttentionInputs X = In;
    Mutate(X);
    INFO(Message);
    CHECK_THROWS_AS(reference::validateAttentionInputs(*C.Graph, X), UserError);
    CHECK_THROWS_WITH(reference::validateAttentionInputs(*C.Graph, X),
                      Contains(Message));
    if (!ViaEntryPoints)
      return;
    CHECK_THROWS_AS(reference::attentionOnline(C, X, 2), UserError);
    CHECK_THROWS_WITH(reference::attentionDirect(C, X), Contains(Message));
  };
  Bad([](AttentionInputs &X) { X.Q = Tensor({4, 3, 2}); }, "q must be");
  Bad([](AttentionInputs &X) { X.K = Tensor({1, 2, 5, 2, 1}); }, "k must be");
  Bad([](AttentionInputs &X) { X.K = Tensor({1, 2, 5}); }, "k must be");
  Bad([](AttentionInputs &X) { X.V = Tensor({2, 3}); }, "v must be");
  Bad([](AttentionInputs &X) { X.K = Tensor({2, 2, 5, 2}); }, "same batch");
  Bad([](AttentionInputs &X) { X.V = Tensor({1, 1, 5, 3}); }, "same heads");
  Bad(
      [](AttentionInputs &X) {
        X.K = Tensor({1, 3, 5, 2});
        X.V = Tensor({1, 3, 5, 3});
      },
      "dividing"); // 3 k heads do not divide 4 q heads
  Bad(
      [](AttentionInputs &X) {
        X.V = Tensor({1, 2, 4, 3});
      },
      "same sequence length");
  Bad([](AttentionInputs &X) { X.K = Tensor({1, 2, 5, 7}); }, "same head dim");
}

TEST_CASE("attention inputs: custom inputs are checked by name and shape",
          "[validation]") {
  CompiledDefinition C = compile(examples::sigmoidAttn());
  AttentionInputs In = goodAttention(C);
  SECTION("missing") {
    In.Inputs.clear();
    CHECK_THROWS_WITH(reference::attentionOnline(C, In, 2),
                      Contains("'softmax_bias' is declared but no value"));
  }
  SECTION("wrong shape") {
    In.Inputs["softmax_bias"] = Tensor({4});
    CHECK_THROWS_WITH(reference::attentionOnline(C, In, 2),
                      Contains("must have shape []"));
  }
  SECTION("not declared") {
    In.Inputs["extra"] = Tensor(std::vector<int64_t>{});
    CHECK_THROWS_WITH(reference::attentionOnline(C, In, 2),
                      Contains("'extra' is supplied but"));
  }
}

TEST_CASE("attention reference: wrong kind, dO shape, derived backward",
          "[validation]") {
  CompiledDefinition Lin = compile(examples::simpleGla());
  CompiledDefinition Sig = compile(examples::sigmoidAttn());
  AttentionInputs In = goodAttention(Sig);
  CHECK_THROWS_AS(reference::attentionDirect(Lin, In), UserError);
  CHECK_THROWS_WITH(reference::attentionBackward(Sig, In, Tensor({1, 4, 3, 2})),
                    Contains("dO must have shape"));
  CHECK_NOTHROW(reference::attentionBackward(Sig, In, Tensor({1, 4, 3, 3})));
  CompiledDefinition NoBwd = compile(testdefs::softmaxDef(
      "fwd_only", std::make_shared<testdefs::OnlineSoftmax>(
                      true, testdefs::SoftmaxBackward::None)));
  std::mt19937_64 Rng(3);
  AttentionInputs In2 = testdefs::randomInputs(NoBwd, Rng, 1, 1, 1, 2, 2, 2, 2);
  // Without a written backward the derived one serves.
  REQUIRE(NoBwd.Graph->decls().BackwardDerived);
  CHECK_NOTHROW(reference::attentionBackward(NoBwd, In2, Tensor({1, 1, 2, 2})));
}

TEST_CASE("linear inputs: the valid baseline is accepted", "[validation]") {
  CompiledDefinition C = compile(examples::mamba2());
  LinearInputs In = goodLinear(C);
  CHECK_NOTHROW(reference::validateLinearInputs(*C.Graph, In));
  CHECK_NOTHROW(reference::linearRecurrent(C, In));
}

TEST_CASE("linear inputs: wrong ranks and mismatched dims are UserErrors",
          "[validation]") {
  CompiledDefinition C = compile(examples::mamba2());
  LinearInputs In = goodLinear(C);
  auto Bad = [&](auto Mutate, const char *Message, bool ViaEntryPoints = true) {
    LinearInputs X = In;
    Mutate(X);
    INFO(Message);
    CHECK_THROWS_WITH(reference::validateLinearInputs(*C.Graph, X),
                      Contains(Message));
    if (!ViaEntryPoints)
      return;
    CHECK_THROWS_AS(reference::linearRecurrent(C, X), UserError);
    CHECK_THROWS_WITH(reference::linearChunked(C, X, 2), Contains(Message));
  };
  Bad([](LinearInputs &X) { X.Q = Tensor({2, 4, 3}); }, "q must be");
  Bad([](LinearInputs &X) { X.K = Tensor({1, 2, 4}); }, "k must be");
  Bad([](LinearInputs &X) { X.V = Tensor({1, 4, 4, 2, 1}); }, "v must be");
  Bad(
      [](LinearInputs &X) {
        X.Q = Tensor({1, 2, 5, 3});
      },
      "share batch and seq");
  Bad(
      [](LinearInputs &X) {
        X.K = Tensor({2, 2, 4, 3});
      },
      "share batch and seq");
  Bad(
      [](LinearInputs &X) {
        X.Q = Tensor({1, 3, 4, 3});
      },
      "must divide v heads");
  Bad(
      [](LinearInputs &X) {
        X.K = Tensor({1, 3, 4, 3});
      },
      "must divide v heads");
  Bad([](LinearInputs &X) { X.K = Tensor({1, 2, 4, 2}); }, "same head dim");
  Bad([](LinearInputs &X) { X.Decay = Tensor({1, 4}); }, "decay must be");
  Bad([](LinearInputs &X) { X.Decay = Tensor({1, 4, 5}); }, "decay must be");
  Bad(
      [](LinearInputs &X) {
        X.InitialState = Tensor({1, 4, 3, 3});
      },
      "initial state must be");
  Bad([](LinearInputs &X) { X.Inputs.erase("A"); }, "'A' is declared");
  Bad(
      [](LinearInputs &X) {
        X.Inputs["dt"] = Tensor({1, 4, 5});
      },
      "'dt' (per_row) must have shape [1, 4, 4]");
}

TEST_CASE("linear reference: chunk size and definition kind", "[validation]") {
  CompiledDefinition C = compile(examples::mamba2());
  LinearInputs In = goodLinear(C);
  CHECK_THROWS_WITH(reference::linearChunked(C, In, 0),
                    Contains("chunk size must be at least 1"));
  CHECK_THROWS_AS(reference::linearChunked(C, In, -3), UserError);
  CompiledDefinition Att = compile(examples::mha());
  CHECK_THROWS_WITH(reference::linearRecurrent(Att, In),
                    Contains("not linear attention"));
}

// attentionOnline, attentionDirect, attentionBackward, linearRecurrent and
// linearChunked validate before they read a size, so a q (or, for attention,
// a v) of rank < 4 is the UserError "q must be [batch, heads, seq, dim]", not
// std::out_of_range from Tensor::dim.
TEST_CASE("reference entry points report a low-rank q or v as a UserError",
          "[validation]") {
  CompiledDefinition C = compile(examples::sigmoidAttn());
  AttentionInputs In = goodAttention(C);
  In.Q = Tensor({4, 3, 2});
  CHECK_THROWS_AS(reference::attentionOnline(C, In, 2), UserError);
  CHECK_THROWS_AS(reference::attentionDirect(C, In), UserError);
  CHECK_THROWS_AS(reference::attentionBackward(C, In, Tensor({1, 4, 3, 3})),
                  UserError);
  In = goodAttention(C);
  In.V = Tensor({2, 3});
  CHECK_THROWS_AS(reference::attentionOnline(C, In, 2), UserError);
  CompiledDefinition L = compile(examples::mamba2());
  LinearInputs LIn = goodLinear(L);
  LIn.Q = Tensor({2, 4, 3});
  CHECK_THROWS_AS(reference::linearRecurrent(L, LIn), UserError);
  CHECK_THROWS_AS(reference::linearChunked(L, LIn, 2), UserError);
}

// validateLinearInputs checks every size is at least 1 before it divides
// by the q and k head counts, so q (or k) of shape [B, 0, T, D] is a
// UserError, not SIGFPE. (The attention validation checks Hkv < 1 first.)
// Run in a child process so that a crash cannot take the test binary down.
TEST_CASE("linear inputs with zero q or k heads are a UserError",
          "[validation]") {
  CompiledDefinition C = compile(examples::simpleGla());
  for (bool ZeroQ : {true, false}) {
    LinearInputs In;
    In.Q = Tensor({1, ZeroQ ? 0 : 1, 2, 1});
    In.K = Tensor({1, ZeroQ ? 1 : 0, 2, 1});
    In.V = Tensor({1, 1, 2, 1});
    In.Decay = Tensor({1, 1, 2});
    pid_t Pid = fork();
    REQUIRE(Pid >= 0);
    if (Pid == 0) {
      int Rc = 3;
      try {
        reference::validateLinearInputs(*C.Graph, In);
        Rc = 2;
      } catch (const UserError &) {
        Rc = 0;
      } catch (...) {
        Rc = 1;
      }
      _exit(Rc);
    }
    int Status = 0;
    REQUIRE(waitpid(Pid, &Status, 0) == Pid);
    INFO((ZeroQ ? "zero q heads" : "zero k heads"));
    CHECK(WIFEXITED(Status));
    CHECK((WIFEXITED(Status) && WEXITSTATUS(Status) == 0));
  }
  // In this process too, now that it cannot crash: the message names the
  // tensor, and an empty sequence or head dim is rejected the same way.
  LinearInputs In;
  In.Q = Tensor({1, 0, 2, 1});
  In.K = Tensor({1, 1, 2, 1});
  In.V = Tensor({1, 1, 2, 1});
  In.Decay = Tensor({1, 1, 2});
  CHECK_THROWS_WITH(reference::validateLinearInputs(*C.Graph, In),
                    Contains("linear reference: q must have every dimension "
                             "at least 1, got [1, 0, 2, 1]"));
  In.Q = Tensor({1, 1, 2, 1});
  In.V = Tensor({1, 1, 0, 1});
  CHECK_THROWS_WITH(reference::linearRecurrent(C, In),
                    Contains("v must have every dimension at least 1"));
  In.V = Tensor({1, 1, 2, 1});
  In.K = Tensor({1, 1, 2, 0});
  CHECK_THROWS_WITH(reference::linearChunked(C, In, 2),
                    Contains("k must have every dimension at least 1"));
}
