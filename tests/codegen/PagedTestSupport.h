// Helpers of the paged decode and paged prefill tests without a driver: a
// kernel cache of their own, an error's message, fake device pointers and
// the sm_80 signature they validate against.
#ifndef ATTNC_TESTS_PAGEDTESTSUPPORT_H
#define ATTNC_TESTS_PAGEDTESTSUPPORT_H

#include "TempDir.h"

#include "attn/runtime/Attention.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace attn::pagedtest {

/// A temporary kernel cache for the process (ATTNC_CACHE_DIR), made once.
inline const std::string &cacheDir() {
  static const attn::testing::TempDir Dir("attnc-paged-cache");
  static const bool Set = setenv("ATTNC_CACHE_DIR", Dir.Path.c_str(), 1) == 0;
  REQUIRE(Set);
  return Dir.Path;
}

/// The message of the \p E that \p Fn throws (a failed check otherwise).
template <class E, class F> std::string messageOf(F &&Fn) {
  try {
    Fn();
  } catch (const E &Err) {
    return Err.what();
  }
  FAIL_CHECK("nothing (or another error) was thrown");
  return "";
}

/// A device address that is never dereferenced (calls stop before a launch).
inline void *fake(uintptr_t A) { return reinterpret_cast<void *>(A); }

inline runtime::Signature sm80() {
  runtime::Signature S;
  S.Dtype = DType::F16;
  S.HeadDim = S.HeadDimV = 64;
  S.Arch = GpuArch::Sm80;
  return S;
}

} // namespace attn::pagedtest

#endif
