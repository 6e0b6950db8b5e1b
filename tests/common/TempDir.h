// A fresh temporary directory for a test, removed with its contents.
#ifndef ATTN_TESTS_COMMON_TEMPDIR_H
#define ATTN_TESTS_COMMON_TEMPDIR_H

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"

#include <catch2/catch.hpp>

#include <string>

namespace attn::testing {

/// A directory made with llvm::sys::fs::createUniqueDirectory (under the
/// system temporary directory, its name starting with \p Prefix), removed
/// with everything in it when the object goes.
struct TempDir {
  std::string Path;
  explicit TempDir(llvm::StringRef Prefix = "attnc-test") {
    llvm::SmallString<256> P;
    REQUIRE_FALSE(llvm::sys::fs::createUniqueDirectory(Prefix, P));
    Path = std::string(P);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  ~TempDir() { llvm::sys::fs::remove_directories(Path); }
};

} // namespace attn::testing

#endif
