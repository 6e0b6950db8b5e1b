// Unit tests of the definition registry, ProblemShape and the attnc CLI
// library (exit codes).
#include "AttncMain.h"
#include "Examples.h"

#include "attn/Error.h"
#include "attn/dsl/Problem.h"
#include "attn/dsl/Registry.h"

#include <catch2/catch.hpp>

#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace attn;

namespace {

dsl::Registry exampleRegistry() {
  dsl::Registry R;
  examples::registerExamples(R);
  return R;
}

/// Runs the CLI once per entry of \p Runs (each the arguments after the
/// program name) in this process and returns the last exit code. attncMain
/// leaves nothing registered with llvm::cl's process-wide parser, so calls
/// can follow each other.
int runCliSequence(std::vector<std::vector<const char *>> Runs,
                   const dsl::Registry &R) {
  int Rc = 0;
  for (std::vector<const char *> Args : Runs) {
    Args.insert(Args.begin(), "attnc");
    Rc = attncMain(static_cast<int>(Args.size()), Args.data(), R);
  }
  llvm::outs().flush();
  llvm::errs().flush();
  return Rc;
}

/// Runs the CLI once per entry of \p Runs in a child process, with stdout
/// and stderr sent to \p Out, and returns the last exit code (128 + the
/// signal number if the child crashed): for --help and --version, which
/// exit the process.
int runCliInChild(std::vector<std::vector<const char *>> Runs,
                  const dsl::Registry &R, std::string &Out) {
  char Path[] = "/tmp/attnc_cli_testXXXXXX";
  int Fd = mkstemp(Path);
  REQUIRE(Fd >= 0);
  llvm::outs().flush();
  llvm::errs().flush();
  std::fflush(nullptr);
  pid_t Pid = fork();
  REQUIRE(Pid >= 0);
  if (Pid == 0) {
    // Catch's handlers would report a crash here as the parent's failure.
    std::signal(SIGSEGV, SIG_DFL);
    std::signal(SIGABRT, SIG_DFL);
    std::signal(SIGBUS, SIG_DFL);
    dup2(Fd, 1);
    dup2(Fd, 2);
    int Rc = runCliSequence(std::move(Runs), R);
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
  if (WIFSIGNALED(Status))
    return 128 + WTERMSIG(Status);
  return WEXITSTATUS(Status);
}

int runCli(std::vector<const char *> Args, const dsl::Registry &R) {
  return runCliSequence({Args}, R);
}

} // namespace

TEST_CASE("Registry: find, get and all see the registered definitions") {
  dsl::Registry R = exampleRegistry();
  std::vector<std::string> Names;
  for (const dsl::DefinitionBase *D : R.all())
    Names.push_back(D->name);
  // Registration order is kept.
  CHECK(Names == std::vector<std::string>{
                     "mha", "sigmoid_attn", "relu_attn", "retention",
                     "retention_combine",
                     "alibi_learnable", "softcap_learnable", "mha_document_ids",
                     "mha_prefix_lm",
                     "mha_sliding_window", "mha_document", "mha_chunked",
                     "mamba2",
                     "simple_gla", "retention_linear"});
  const dsl::DefinitionBase *M = R.find("mha");
  REQUIRE(M);
  CHECK(M->name == "mha");
  CHECK(M->kind() == ir::DefinitionKind::Transformer);
  CHECK(&R.get("mha") == M);
  CHECK(R.get("mamba2").kind() == ir::DefinitionKind::Linear);
  CHECK(R.find("nope") == nullptr);
  CHECK(R.find("") == nullptr);
}

TEST_CASE("Registry: a second definition with the same name is rejected") {
  dsl::Registry R = exampleRegistry();
  CHECK_THROWS_AS(R.add(examples::mha()), UserError);
  CHECK_THROWS_WITH(R.add(examples::mha()),
                    Catch::Contains("definition 'mha' is registered twice"));
  // The failed add left the registry as it was.
  CHECK(R.all().size() == 15);
}

TEST_CASE("Registry: an unknown name's message lists the known names") {
  dsl::Registry R;
  R.add(examples::mha());
  R.add(examples::mamba2());
  CHECK_THROWS_AS(R.get("mah"), UserError);
  CHECK_THROWS_WITH(R.get("mah"),
                    Catch::Equals("unknown definition 'mah'; known: mha, "
                                  "mamba2"));
  dsl::Registry Empty;
  CHECK_THROWS_WITH(Empty.get("x"), Catch::Contains("known: none"));
}

TEST_CASE("Registry: a definition name must be an identifier") {
  dsl::Registry R;
  dsl::AttentionDef Def = examples::mha();
  Def.name = "my attn";
  CHECK_THROWS_WITH(R.add(Def), Catch::Contains("definition 'my attn': not "
                                                "a valid name"));
  CHECK(R.all().empty());
}

TEST_CASE("Registry: registration mistakes are UserErrors, not crashes") {
  dsl::Registry R;
  CHECK_THROWS_AS(R.add(std::shared_ptr<const dsl::DefinitionBase>()),
                  UserError);
  CHECK_THROWS_WITH(R.add(std::shared_ptr<const dsl::DefinitionBase>()),
                    Catch::Contains("no definition (a null pointer)"));
  CHECK(R.all().empty());
  // A NaN initial value, as text or as a number.
  CHECK_THROWS_AS(dsl::Var("nan"), UserError);
  CHECK_THROWS_AS(dsl::Var(std::nan("")), UserError);
  CHECK_THROWS_WITH(dsl::Var(std::nan("")),
                    Catch::StartsWith("Var(nan): not an initial value"));
  CHECK(dsl::Var(-INFINITY).value() == -INFINITY);
}

TEST_CASE("ProblemShape::meta fills the seeds' meta_tensor signature") {
  ProblemShape P = ProblemShape::meta(2, 8, 1024, 128, 64, DType::BF16);
  CHECK(P.batch == 2);
  CHECK(P.heads == 8);
  CHECK(P.heads_kv == 8);
  CHECK(P.seq_q == 1024);
  CHECK(P.seq_kv == 1024);
  CHECK(P.head_dim == 128);
  CHECK(P.head_dim_v == 64);
  CHECK(P.dtype == DType::BF16);
  CHECK(P.layout == Layout::BSHD);
  CHECK(ProblemShape::meta(1, 1, 1, 64, 64).dtype == DType::F16);
  CHECK_NOTHROW(P.validate());
}

TEST_CASE("ProblemShape::str is the compact text form") {
  CHECK(ProblemShape::meta(2, 8, 1024, 128, 128).str() ==
        "b2 h8/8 s1024x1024 d128/128 f16 bshd");
  ProblemShape P = ProblemShape::meta(1, 4, 16, 64, 32, DType::BF16);
  P.heads_kv = 2;
  P.seq_kv = 48;
  P.layout = Layout::BHSD;
  CHECK(P.str() == "b1 h4/2 s16x48 d64/32 bf16 bhsd");
}

TEST_CASE("ProblemShape::validate names the first field out of range") {
  struct Case {
    const char *Field;
    int64_t ProblemShape::*Member;
  } Cases[] = {{"batch", &ProblemShape::batch},
               {"heads", &ProblemShape::heads},
               {"heads_kv", &ProblemShape::heads_kv},
               {"seq_q", &ProblemShape::seq_q},
               {"seq_kv", &ProblemShape::seq_kv},
               {"head_dim", &ProblemShape::head_dim},
               {"head_dim_v", &ProblemShape::head_dim_v}};
  for (const Case &C : Cases) {
    INFO(C.Field);
    ProblemShape P = ProblemShape::meta(1, 4, 16, 64, 64);
    P.*C.Member = 0;
    CHECK_THROWS_AS(P.validate(), UserError);
    CHECK_THROWS_WITH(P.validate(),
                      Catch::Equals(std::string("problem: ") + C.Field +
                                    " must be at least 1, got 0"));
  }
  ProblemShape P = ProblemShape::meta(1, 4, 16, 64, 64);
  P.heads_kv = 3;
  CHECK_THROWS_WITH(P.validate(),
                    Catch::Contains("heads_kv (3) must divide heads (4)"));
  P.heads_kv = -2;
  CHECK_THROWS_WITH(P.validate(),
                    Catch::Contains("heads_kv must be at least 1, got -2"));
}

TEST_CASE("one dtype enum: only f16 and bf16 are q/k/v dtypes") {
  CHECK(isAttentionDtype(DType::F16));
  CHECK(isAttentionDtype(DType::BF16));
  CHECK_FALSE(isAttentionDtype(DType::F32));
  CHECK_FALSE(isAttentionDtype(DType::I32));
  CHECK_NOTHROW(checkAttentionDtype(DType::BF16, "signature"));
  CHECK_THROWS_WITH(checkAttentionDtype(DType::F32, "signature"),
                    "signature: dtype f32 is not f16 or bf16 (the dtype of "
                    "q, k, v and o)");
  ProblemShape P;
  P.dtype = DType::I64;
  CHECK_THROWS_WITH(P.validate(),
                    Catch::Contains("problem: dtype i64 is not f16 or bf16"));
}

TEST_CASE("dtype and layout names parse and print") {
  CHECK(dtypeFromName("bf16") == DType::BF16);
  CHECK(dtypeFromName("float16") == DType::F16);
  CHECK(dtypeFromName("f32") == DType::F32);
  CHECK(dtypeFromName("int32") == DType::I32);
  CHECK(dtypeFromName("i64") == DType::I64);
  CHECK_FALSE(dtypeFromName("f8"));
  CHECK(dtypeName(DType::BF16) == "bf16");
  CHECK(dtypeName(DType::I64) == "i64");
  CHECK(layoutFromName("BHSD") == Layout::BHSD);
  CHECK_FALSE(layoutFromName("sbhd"));
  CHECK(layoutName(Layout::BSHD) == "bshd");
}

TEST_CASE("attncMain: list succeeds") {
  dsl::Registry R = exampleRegistry();
  CHECK(runCli({"list"}, R) == 0);
}

TEST_CASE("attncMain: an unknown option is bad usage (2)") {
  dsl::Registry R = exampleRegistry();
  CHECK(runCli({"--no-such-option"}, R) == 2);
  CHECK(runCli({"list", "--no-such-option"}, R) == 2);
  // No command at all is bad usage too.
  CHECK(runCli(std::vector<const char *>{}, R) == 2);
}

TEST_CASE("attncMain: show of an unknown definition is a user error (1)") {
  dsl::Registry R = exampleRegistry();
  CHECK(runCli({"show", "no_such_def"}, R) == 1);
  // An unknown pass is bad usage, like an unknown option.
  CHECK(runCli({"show", "mha", "--after", "no-such-pass"}, R) == 2);
}

TEST_CASE("attncMain: check with no names, or names and --all, is bad usage "
          "(2)") {
  dsl::Registry R = exampleRegistry();
  CHECK(runCli({"check"}, R) == 2);
  CHECK(runCli({"check", "mha", "--all"}, R) == 2);
}

TEST_CASE("attncMain: show of a known definition succeeds") {
  dsl::Registry R = exampleRegistry();
  CHECK(runCli({"show", "relu_attn", "--after", "dce"}, R) == 0);
  CHECK(runCli({"show", "mamba2", "--json"}, R) == 0);
}

// attncMain can run more than once in a process: each call's options leave
// llvm::cl's global parser when the call returns, also after a failed parse.
TEST_CASE("attncMain can run more than once in a process") {
  dsl::Registry R = exampleRegistry();
  CHECK(runCliSequence({{"--no-such-option"}, {"list"}}, R) == 0);
  CHECK(runCliSequence({{"list"}, {"show", "no_such_def"}, {"list"}}, R) ==
        0);
}

TEST_CASE("attncMain: calls in one process keep their own exit codes") {
  dsl::Registry R = exampleRegistry();
  const char *List[] = {"attnc", "list"};
  const char *Bad[] = {"attnc", "--no-such-option"};
  const char *Show[] = {"attnc", "show", "no_such_def"};
  const char *CheckAll[] = {"attnc", "check", "--all", "--seed", "7"};
  CHECK(attncMain(2, List, R) == 0);
  CHECK(attncMain(2, Bad, R) == 2);
  CHECK(attncMain(3, Show, R) == 1);
  CHECK(attncMain(2, List, R) == 0);
  // A later call starts from the defaults: --all and --seed do not stick.
  CHECK(attncMain(5, CheckAll, R) == 0);
  const char *Check[] = {"attnc", "check"};
  CHECK(attncMain(2, Check, R) == 2);
  CHECK(attncMain(2, List, R) == 0);
}

TEST_CASE("attncMain: --version and --help still work after earlier calls") {
  dsl::Registry R = exampleRegistry();
  std::string Out;
  CHECK(runCliInChild({{"list"}, {"--bogus"}, {"--version"}}, R, Out) == 0);
  CHECK(Out.find(std::string("attnc ") + ATTNC_VERSION + "\n") !=
        std::string::npos);
  CHECK(Out.find("LLVM") == std::string::npos);
  CHECK(runCliInChild({{"list"}, {"show", "--help"}}, R, Out) == 0);
  CHECK(Out.find("SUBCOMMAND 'show'") != std::string::npos);
}

TEST_CASE("attncMain: an exception that is not an attn::Error is an internal "
          "error (1)") {
  dsl::Registry R;
  dsl::AttentionDef Def = examples::mha();
  Def.name = "throws";
  Def.score_mod = [](dsl::SymbolScalar, const dsl::CustomInputs &,
                     dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
                     dsl::SymbolScalar) -> dsl::SymbolScalar {
    throw std::runtime_error("boom");
  };
  R.add(Def);
  std::string Out;
  CHECK(runCliInChild({{"show", "throws"}}, R, Out) == 1);
  CHECK(Out.find("attnc: internal error: boom") != std::string::npos);
  // In this process too: nothing escapes attncMain.
  const char *Show[] = {"attnc", "show", "throws"};
  CHECK(attncMain(3, Show, R) == 1);
}
