// `attnc emit --standalone`: device library inlined once per header; nvcc builds it.
#include "AttncMain.h"
#include "Examples.h"
#include "Standalone.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/DeviceLibrary.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace attn;
using Catch::Matchers::Contains;

namespace {

const char *const Nvcc = "/usr/local/cuda/bin/nvcc";

size_t count(llvm::StringRef Text, llvm::StringRef Needle) {
  return Text.count(Needle);
}

std::string begin(llvm::StringRef Header) {
  return "// ---- begin " + Header.str() + " ----\n";
}
std::string end(llvm::StringRef Header) {
  return "// ---- end " + Header.str() + " ----\n";
}

std::string readFile(const std::string &Path) {
  std::ifstream In(Path);
  std::stringstream SS;
  SS << In.rdbuf();
  return SS.str();
}

/// A fresh directory for one test's files.
std::string tempDir() {
  char Dir[] = "/tmp/attnc_standalone_XXXXXX";
  REQUIRE(mkdtemp(Dir) != nullptr);
  return Dir;
}

/// Runs `attnc <Args>` in a child process, so that its output goes to \p Log
/// without touching this process's streams; returns the exit status.
int runAttnc(std::vector<const char *> Args, const std::string &Log) {
  dsl::Registry R;
  examples::registerExamples(R);
  Args.insert(Args.begin(), "attnc");
  llvm::outs().flush();
  std::fflush(nullptr);
  pid_t Pid = fork();
  REQUIRE(Pid >= 0);
  if (Pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);
    std::signal(SIGABRT, SIG_DFL);
    int Fd = open(Log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(Fd, 1);
    dup2(Fd, 2);
    int Rc = attncMain(int(Args.size()), Args.data(), R);
    llvm::outs().flush();
    llvm::errs().flush();
    std::fflush(nullptr);
    _exit(Rc);
  }
  int Status = 0;
  REQUIRE(waitpid(Pid, &Status, 0) == Pid);
  return WIFEXITED(Status) ? WEXITSTATUS(Status) : 128 + WTERMSIG(Status);
}

/// Emits mha with \p EmitArgs as a standalone .cu and builds it with
/// `nvcc -arch=<NvccArch> -c`.
void emitAndBuild(std::vector<const char *> EmitArgs, const char *NvccArch,
                  const char *Skeleton = "attnc/fwd_sm80.cuh") {
  if (access(Nvcc, X_OK) != 0) {
    WARN("no " << Nvcc << "; skipping the nvcc build");
    return;
  }
  std::string Dir = tempDir();
  std::string Cu = Dir + "/mha.cu", Obj = Dir + "/mha.o", Log = Dir + "/log";
  std::vector<const char *> Args = {"emit", "mha", "--standalone", "-o",
                                    Cu.c_str()};
  Args.insert(Args.end(), EmitArgs.begin(), EmitArgs.end());
  int Rc = runAttnc(Args, Log);
  INFO("attnc emit: " << readFile(Log));
  REQUIRE(Rc == 0);
  std::string Source = readFile(Cu);
  CHECK_THAT(Source, Contains(begin(Skeleton)));
  CHECK_FALSE(llvm::StringRef(Source).contains("#include \"attnc/"));

  // NvccArch: "sm_80" (-arch=sm_80), or nvcc's own flags ("-gencode=...").
  std::string Target = NvccArch[0] == '-' ? std::string(NvccArch)
                                          : "-arch=" + std::string(NvccArch);
  std::string Cmd = std::string(Nvcc) + " " + Target + " -c " + Cu +
                    " -o " + Obj + " > " + Log + " 2>&1";
  int NvccRc = std::system(Cmd.c_str());
  INFO(Cmd << "\n" << readFile(Log));
  CHECK(NvccRc == 0);
  // The object holds host stubs (and device code) for the three entries.
  std::string Object = readFile(Obj);
  for (const char *Entry :
       {"attnc_fwd", "attnc_block_classify", "attnc_block_compact"})
    CHECK_THAT(Object, Contains(std::string("__device_stub__Z") +
                                std::to_string(std::strlen(Entry)) + Entry));
  for (const std::string &F : {Cu, Obj, Log})
    std::remove(F.c_str());
  rmdir(Dir.c_str());
}

} // namespace

TEST_CASE("inlineDeviceLibrary: every header of the forward kernel, once",
          "[codegen][standalone]") {
  std::string Src =
      codegen::generateForward(compile(examples::mha()), {}).Source;
  std::string Out = inlineDeviceLibrary(Src);
  for (llvm::StringRef Line : llvm::split(Out, '\n'))
    CHECK_FALSE(Line.trim().startswith("#include \"attnc/"));
  // The template includes three headers; they include two more.
  const char *Reached[] = {"attnc/block_mask.cuh", "attnc/attention_args.cuh",
                           "attnc/fwd_sm80.cuh", "attnc/sm80_primitives.cuh",
                           "attnc/variant_support.cuh"};
  for (const char *H : Reached) {
    INFO(H);
    CHECK(count(Out, begin(H)) == 1);
    CHECK(count(Out, end(H)) == 1);
    // The header's own lines are all there.
    for (llvm::StringRef Line :
         llvm::split(runtime::findDeviceHeader(H)->Contents, '\n'))
      if (!Line.trim().startswith("#include \"attnc/"))
        CHECK(llvm::StringRef(Out).contains(Line));
  }
  // Nothing includes common.cuh; no header is inlined twice.
  CHECK(count(Out, begin("attnc/common.cuh")) == 0);
  for (const runtime::EmbeddedHeader &H : runtime::deviceLibrary())
    CHECK(count(Out, begin(H.Name)) <= 1);
  // A header is inlined where it is first included: attention_args inside
  // block_mask, the template's first include.
  size_t BlockMask = Out.find(begin("attnc/block_mask.cuh"));
  size_t Args = Out.find(begin("attnc/attention_args.cuh"));
  size_t BlockMaskEnd = Out.find(end("attnc/block_mask.cuh"));
  CHECK((BlockMask < Args && Args < BlockMaskEnd));
  // The generated part follows, unchanged.
  CHECK_THAT(Out, Contains("struct Variant {"));
  CHECK(Out.size() > Src.size());
}

TEST_CASE("inlineDeviceLibrary: repeated includes and other includes",
          "[codegen][standalone]") {
  std::string Out = inlineDeviceLibrary("#include \"attnc/common.cuh\"\n"
                                        "  #include \"attnc/common.cuh\"\n"
                                        "#include <cuda_fp16.h>\n"
                                        "#include \"mine.h\"\n"
                                        "int x;\n");
  CHECK(count(Out, begin("attnc/common.cuh")) == 1);
  CHECK_FALSE(llvm::StringRef(Out).contains("#include \"attnc/"));
  CHECK_THAT(Out, Contains("#include <cuda_fp16.h>\n#include \"mine.h\"\n"
                           "int x;\n"));
  CHECK(inlineDeviceLibrary("no includes\nat all") == "no includes\nat all\n");
}

TEST_CASE("inlineDeviceLibrary: an unknown header is an internal error",
          "[codegen][standalone]") {
  try {
    inlineDeviceLibrary("int a;\n#include \"attnc/no_such.cuh\"\n");
    FAIL_CHECK("no error");
  } catch (const InternalError &E) {
    CHECK_THAT(E.what(), Contains("unknown device header attnc/no_such.cuh"));
  }
}

TEST_CASE("emit --standalone: nvcc builds mha's fwd_sm80 kernel for sm_90a",
          "[codegen][standalone][nvcc]") {
  emitAndBuild({"--arch", "sm_90a", "--skeleton", "fwd_sm80"}, "sm_90a");
}

TEST_CASE("emit --standalone --arch sm_90a: nvcc builds the kernel the "
          "runtime runs there, mha's fwd_sm90",
          "[codegen][standalone][nvcc]") {
  // wgmma and setmaxnreg exist for sm_90a only: -arch=sm_90a would also
  // build compute_90 PTX, which ptxas rejects for them.
  emitAndBuild({"--arch", "sm_90a"}, "-gencode=arch=compute_90a,code=sm_90a",
               "attnc/fwd_sm90.cuh");
}

TEST_CASE("emit --standalone: nvcc builds mha bf16 d64 for sm_80",
          "[codegen][standalone][nvcc]") {
  emitAndBuild({"--arch", "sm_80", "--dtype", "bf16", "--head-dim", "64"},
               "sm_80");
}
