// attnc tune and bench on the command line, without a GPU: usage errors exit
// 2, a tune file that is not one is refused before anything else.
#include "AttncMain.h"
#include "ExampleRegistry.h"

#include "attn/runtime/CudaDriver.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

using namespace attn;
using Catch::Matchers::Contains;

namespace {

struct Run {
  int Exit = 0;
  std::string Err;
};

/// Runs attncMain with stderr captured in a file.
Run attnc(std::vector<const char *> Args) {
  Args.insert(Args.begin(), "attnc");
  llvm::SmallString<128> Path;
  REQUIRE_FALSE(llvm::sys::fs::createTemporaryFile("attnc-cli", "txt", Path));
  llvm::errs().flush();
  int Saved = dup(2);
  int FD = ::open(Path.c_str(), O_WRONLY | O_TRUNC);
  REQUIRE(FD >= 0);
  dup2(FD, 2);
  ::close(FD);
  Run R;
  R.Exit = attncMain(int(Args.size()), Args.data(), testsupport::registry());
  llvm::errs().flush();
  dup2(Saved, 2);
  ::close(Saved);
  auto Buf = llvm::MemoryBuffer::getFile(Path);
  REQUIRE(Buf);
  R.Err = (*Buf)->getBuffer().str();
  llvm::sys::fs::remove(Path);
  return R;
}

} // namespace

TEST_CASE("attnc tune and bench usage errors exit 2", "[tuning][cli]") {
  Run A = attnc({"tune", "mha", "--shape", "1,2,3", "-o", "x.json"});
  CHECK(A.Exit == 2);
  CHECK_THAT(A.Err, Contains("--shape '1,2,3': expected 4 or 5 numbers"));
  Run B = attnc({"tune", "mha", "--shape", "1,2,128,64"});
  CHECK(B.Exit == 2);
  CHECK_THAT(B.Err, Contains("tune: -o FILE (the tune file to write) is "
                             "required"));
  Run C = attnc({"bench", "mha", "--shape", "1,x,128,64"});
  CHECK(C.Exit == 2);
  CHECK_THAT(C.Err, Contains("'x' is not a positive integer"));
  Run D = attnc({"bench", "mha", "--shape", "1,2,128,64", "--dtype", "f32"});
  CHECK(D.Exit == 2);
  CHECK_THAT(D.Err, Contains("--dtype 'f32': expected f16 or bf16"));
  Run E = attnc({"tune", "mha", "--shape", "1,2,128,64", "-o", "x.json",
                 "--budget", "-1"});
  CHECK(E.Exit == 2);
  Run F = attnc({"tune", "mamba2", "--shape", "1,2,128,64", "-o", "x.json"});
  CHECK(F.Exit == 1);
  CHECK_THAT(F.Err, Contains("not supported yet: tuning linear attention"));
}

TEST_CASE("attnc tune refuses a tune file it cannot merge into",
          "[tuning][cli]") {
  llvm::SmallString<128> Path;
  REQUIRE_FALSE(llvm::sys::fs::createTemporaryFile("attnc-bad", "json", Path));
  {
    std::error_code EC;
    llvm::raw_fd_ostream OS(Path, EC);
    OS << "{\"version\": 1, \"entries\": {}}";
  }
  Run R = attnc({"tune", "mha", "--shape", "1,2,128,64", "-o", Path.c_str()});
  CHECK(R.Exit == 1);
  CHECK_THAT(R.Err, Contains("attnc: error: tune file " + std::string(Path) +
                             ": $.entries: expected an array"));
  // Left as it was.
  auto Buf = llvm::MemoryBuffer::getFile(Path);
  REQUIRE(Buf);
  CHECK((*Buf)->getBuffer() == "{\"version\": 1, \"entries\": {}}");
  llvm::sys::fs::remove(Path);
}

TEST_CASE("without a GPU, tune and bench fail with the driver's reason",
          "[tuning][cli]") {
  if (runtime::CudaDriver::get().available())
    SUCCEED("a CUDA driver is available; tests/gpu covers this machine");
  else {
    Run T = attnc({"tune", "mha", "--shape", "1,2,128,64", "-o",
                   "/nonexistent-dir/t.json"});
    CHECK(T.Exit == 1);
    CHECK_THAT(T.Err, Contains("attnc: no CUDA driver: "));
    Run B = attnc({"bench", "relu_attn", "--shape", "1,2,128,64"});
    CHECK(B.Exit == 1);
    CHECK_THAT(B.Err, Contains("attnc: no CUDA driver: "));
  }
}
