// The fuzz targets: one entry per input format, shared by libFuzzer and the
// deterministic driver (FuzzDriver.cpp).
#ifndef ATTN_TESTS_FUZZ_FUZZTARGETS_H
#define ATTN_TESTS_FUZZ_FUZZTARGETS_H

#include <cstddef>
#include <cstdint>
#include "attn/Error.h"

#include <stdexcept>
#include <string>

namespace attn::fuzz {

/// What one input did. An attn::Error is a clean rejection; any other
/// exception, a crash or a sanitizer report is a failure (exceptions other
/// than attn::Error escape the target, so both drivers see them).
enum class Outcome {
  Accepted, ///< the input went through every stage
  Rejected, ///< an attn::Error other than InternalError
  Internal, ///< an attn::InternalError: clean, but counted and reported
};

/// Thrown by a target when one of its own oracles fails (a round trip that
/// does not reproduce its input, a cache that loads what it should not).
class OracleFailure : public std::logic_error {
public:
  using std::logic_error::logic_error;
};

/// The IR-JSON loader, a save/load round trip, then the pipeline and the
/// forward code generator.
Outcome fuzzIrJson(const uint8_t *Data, size_t Size);
/// The tune-file reader, then a serialize/parse round trip.
Outcome fuzzTuneFile(const uint8_t *Data, size_t Size);
/// The kernel cache's disk-entry reader, through KernelCache::getOrCompile
/// on a cache directory holding the bytes as the entry.
Outcome fuzzKernelCache(const uint8_t *Data, size_t Size);
/// The DSL tracer: the bytes are a small program of SymbolScalar operations
/// building a definition's functions, which the pipeline then compiles.
Outcome fuzzDsl(const uint8_t *Data, size_t Size);
/// The driver's own tests: a target that throws a foreign exception on an
/// input starting with '!', and one that reads out of bounds (a sanitizer
/// report) on an input starting with '#'.
Outcome fuzzSelfTestThrow(const uint8_t *Data, size_t Size);
Outcome fuzzSelfTestAsan(const uint8_t *Data, size_t Size);
/// The bytes of a valid kernel-cache entry for kernel_cache's key (a seed).
std::string kernelCacheSeedEntry();

/// The message of the last attn::Error a target caught (for the report).
std::string &lastError();

/// Runs \p Body, mapping attn::Error to Rejected or Internal; everything
/// else propagates.
template <typename Fn> Outcome classify(Fn Body) {
  try {
    Body();
    return Outcome::Accepted;
  } catch (const InternalError &E) {
    lastError() = E.what();
    return Outcome::Internal;
  } catch (const Error &E) {
    lastError() = E.what();
    return Outcome::Rejected;
  }
}

struct Target {
  const char *Name;
  Outcome (*Run)(const uint8_t *, size_t);
};

/// Every target: the four real ones first, then the self-tests.
const Target *targets(size_t &Count);
/// The target named \p Name, or nullptr.
const Target *findTarget(const char *Name);

} // namespace attn::fuzz

#endif
