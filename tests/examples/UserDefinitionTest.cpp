// A user's own definition and registry served by the attnc_main library.
#include "AttncMain.h"

#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/dsl/Registry.h"
#include "attn/reference/Attention.h"
#include "attn/reference/InputBinding.h"

#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace attn;
using namespace attn::dsl;

namespace {

/// The user's online softmax (with its exact backward); \p Broken forgets
/// to rescale the running sum, which `attnc check` must report.
class MySoftmax final : public OnlineFunc {
public:
  explicit MySoftmax(bool Broken = false)
      : OnlineFunc({{"m", Var("-inf")}, {"r", Var(0.0)}}, {{"lse", Var(0.0)}}),
        Broken(Broken) {}
  OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs, SymbolScalar,
                             SymbolScalar, SymbolScalar) const override {
    SymbolScalar m_new = rs["m"].max(s.get_reduce("max"));
    SymbolScalar scale = (rs["m"] - m_new).exp();
    SymbolScalar p = (s - m_new).exp();
    SymbolScalar r = (Broken ? rs["r"] : rs["r"] * scale) + p.get_reduce("sum");
    return {p, {{"m", m_new}, {"r", r}}, scale};
  }
  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    return {o / rs["r"], {{"lse", rs["r"].log() + rs["m"]}}};
  }
  SymbolScalar forward(SymbolScalar s, const Rowscales &fr, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (s - fr["lse"]).exp();
  }
  std::optional<SymbolScalar> backward(SymbolScalar dp, SymbolScalar p,
                                       const Rowscales &, SymbolScalar doosum,
                                       SymbolScalar, SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
    return (dp - doosum) * p;
  }

private:
  bool Broken;
};

constexpr int Window = 4;

/// ALiBi softmax with per-head slopes and a causal sliding window that stays
/// inside a document; the document ids are per-query and per-key inputs, read
/// by the five-argument mask_mod. `attnc check` draws every id as 0 (one
/// document); the test below supplies real ids.
AttentionDef alibiDoc(bool Broken = false) {
  AttentionDef Def(Broken ? "alibi_doc_broken" : "alibi_doc");
  Def.description = "ALiBi softmax, sliding window within documents";
  Def.inputs.declare("slopes", InputShape::PerHead, 0.05, 0.5)
      .declare("doc_q", InputShape::PerRow, 0.0, 0.0)
      .declare("doc_k", InputShape::PerKey, 0.0, 0.0);
  Def.score_mod = [](SymbolScalar s, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar q, SymbolScalar kv) {
    return s * in.head_dim().rsqrt() - in["slopes"] * (q - kv);
  };
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar kv,
                    const CustomInputs &in) {
    return (q >= kv) & (q - kv < Window) & (in["doc_q"] == in["doc_k"]);
  };
  Def.online_func = std::make_shared<MySoftmax>(Broken);
  return Def;
}

/// Runs attncMain on \p Args (\p Calls times) in a child process with stdout
/// and stderr sent to a file; returns the exit code (-signal if the child was
/// killed) and sets \p Out to what was printed. A child per call so that its
/// output can be captured.
int runAttnc(const Registry &R, std::vector<const char *> Args,
             std::string &Out, int Calls = 1) {
  char Path[] = "/tmp/attnc_user_testXXXXXX";
  int Fd = mkstemp(Path);
  REQUIRE(Fd >= 0);
  llvm::outs().flush();
  std::fflush(nullptr);
  pid_t Pid = fork();
  REQUIRE(Pid >= 0);
  if (Pid == 0) {
    dup2(Fd, 1);
    dup2(Fd, 2);
    int Rc = 0;
    for (int I = 0; I < Calls; ++I)
      Rc = attncMain(int(Args.size()), Args.data(), R);
    llvm::outs().flush();
    std::fflush(nullptr);
    _exit(Rc);
  }
  close(Fd);
  int Status = 0;
  REQUIRE(waitpid(Pid, &Status, 0) == Pid);
  std::ifstream In(Path);
  std::stringstream SS;
  SS << In.rdbuf();
  Out = SS.str();
  std::remove(Path);
  return WIFEXITED(Status) ? WEXITSTATUS(Status) : -WTERMSIG(Status);
}

Registry userRegistry() {
  Registry R;
  R.add(alibiDoc());
  return R;
}

} // namespace

TEST_CASE("attncMain serves a user's own registry: check --all and list",
          "[examples][user]") {
  Registry R = userRegistry();
  std::string Out;
  CHECK(runAttnc(R, {"attnc", "check", "--all"}, Out) == 0);
  INFO(Out);
  CHECK(Out.find("alibi_doc") != std::string::npos);
  CHECK(Out.find("backward vs finite differences") != std::string::npos);
  CHECK(Out.find("1 passed, 0 failed") != std::string::npos);

  CHECK(runAttnc(R, {"attnc", "list"}, Out) == 0);
  CHECK(Out.find("alibi_doc") != std::string::npos);
  CHECK(Out.find("ALiBi softmax, sliding window within documents") !=
        std::string::npos);
  // The shipped examples are not in the user's registry.
  CHECK(Out.find("mha") == std::string::npos);
  CHECK(runAttnc(R, {"attnc", "check", "mha"}, Out) == 1);
  CHECK(Out.find("unknown definition 'mha'; known: alibi_doc") !=
        std::string::npos);
}

TEST_CASE("attncMain shows a user's definition and fails a broken one",
          "[examples][user]") {
  Registry R = userRegistry();
  R.add(alibiDoc(/*Broken=*/true));
  std::string Out;
  CHECK(runAttnc(R, {"attnc", "show", "alibi_doc", "--after", "dce"}, Out) ==
        0);
  CHECK(Out.find("input doc_q : per_row") != std::string::npos);
  CHECK(Out.find("input doc_k : per_key") != std::string::npos);
  CHECK(Out.find("func mask_mod {") != std::string::npos);
  // One good and one broken definition: the run fails and says which.
  CHECK(runAttnc(R, {"attnc", "check", "--all"}, Out) == 1);
  INFO(Out);
  CHECK(Out.find("1 passed, 1 failed") != std::string::npos);
  CHECK(runAttnc(R, {"attnc", "check", "alibi_doc"}, Out) == 0);
}

TEST_CASE("the document mask keeps only keys of the query's document",
          "[examples][user]") {
  // Real document ids (attnc check uses one document): compare with a
  // hand-written masked softmax.
  CompiledDefinition C = compile(alibiDoc());
  std::mt19937_64 Rng(99);
  const int64_t H = 2, S = 9, D = 3, DV = 2;
  reference::AttentionInputs In;
  In.Q = reference::Tensor::normal({1, H, S, D}, Rng);
  In.K = reference::Tensor::normal({1, H, S, D}, Rng);
  In.V = reference::Tensor::normal({1, H, S, DV}, Rng);
  const double Docs[S] = {0, 0, 0, 1, 1, 1, 1, 1, 2};
  In.Inputs["slopes"] = reference::Tensor({H});
  In.Inputs["slopes"].Data = {0.25, 0.125};
  In.Inputs["doc_q"] = reference::Tensor({1, H, S});
  In.Inputs["doc_k"] = reference::Tensor({1, H, S});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < S; ++i)
      In.Inputs["doc_q"].at({0, h, i}) = In.Inputs["doc_k"].at({0, h, i}) =
          Docs[i];
  reference::AttentionOutputs Out = reference::attentionOnline(C, In, 2);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> W(S, 0.0);
      double M = -INFINITY, Sum = 0;
      for (int64_t j = 0; j < S; ++j)
        if (j <= i && i - j < Window && Docs[i] == Docs[j]) {
          double Dot = 0;
          for (int64_t x = 0; x < D; ++x)
            Dot += In.Q.at({0, h, i, x}) * In.K.at({0, h, j, x});
          W[j] = Dot / std::sqrt(double(D)) -
                 In.Inputs["slopes"].at({h}) * double(i - j);
          M = std::max(M, W[j]);
        } else {
          W[j] = -INFINITY;
        }
      for (double w : W)
        Sum += std::exp(w - M);
      for (int64_t y = 0; y < DV; ++y) {
        double O = 0;
        for (int64_t j = 0; j < S; ++j)
          O += std::exp(W[j] - M) / Sum * In.V.at({0, h, j, y});
        INFO("h " << h << " i " << i << " y " << y);
        CHECK(Out.O.at({0, h, i, y}) == Approx(O).epsilon(1e-12));
      }
      CHECK(Out.Finals.at("lse").at({0, h, i}) ==
            Approx(M + std::log(Sum)).epsilon(1e-12));
    }
}

// attncMain builds its options (SubCommands included) per call, and they
// leave LLVM's global parser when the call returns, so a second call in the
// same process works ("attncMain can run more than once in a process").
TEST_CASE("attncMain can run twice in one process", "[examples][user]") {
  Registry R = userRegistry();
  std::string Out;
  CHECK(runAttnc(R, {"attnc", "list"}, Out, /*Calls=*/2) == 0);
  // Both calls listed the definition.
  REQUIRE(Out.find("alibi_doc") != std::string::npos);
  CHECK(Out.find("alibi_doc") != Out.rfind("alibi_doc"));
}
