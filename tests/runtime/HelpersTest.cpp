// The small shared helpers that replaced home-made ones (docs/hardening.md,
// rows 24 and 29): runtime::WallTimer and the tests' TempDir.
#include "TempDir.h"

#include "attn/runtime/EventTiming.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <system_error>
#include <thread>

using namespace attn;

TEST_CASE("WallTimer counts seconds from its construction and never goes back",
          "[runtime]") {
  runtime::WallTimer Timer;
  const double First = Timer.seconds();
  CHECK(First >= 0.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const double Second = Timer.seconds();
  // At least the time slept, in seconds (not ms or ns), and not before.
  CHECK(Second >= 0.030);
  CHECK(Second < 30.0);
  CHECK(Second >= First);
  // A later timer starts later.
  runtime::WallTimer Later;
  CHECK(Later.seconds() < Timer.seconds());
}

TEST_CASE("TempDir makes a fresh directory each time and removes it with its "
          "contents",
          "[runtime]") {
  std::string Kept;
  {
    testing::TempDir A("attnc-helpers"), B("attnc-helpers");
    CHECK(A.Path != B.Path);
    CHECK(llvm::sys::fs::is_directory(A.Path));
    CHECK(llvm::sys::fs::is_directory(B.Path));
    CHECK(llvm::StringRef(llvm::sys::path::filename(A.Path))
              .startswith("attnc-helpers"));
    // Contents, nested, go with it.
    const std::string Sub = A.Path + "/sub";
    REQUIRE_FALSE(llvm::sys::fs::create_directory(Sub));
    std::error_code EC;
    llvm::raw_fd_ostream(Sub + "/f.txt", EC) << "x";
    REQUIRE_FALSE(EC);
    Kept = A.Path;
  }
  CHECK_FALSE(llvm::sys::fs::exists(Kept));
}
