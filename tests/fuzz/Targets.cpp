// The table of fuzz targets and the driver's self-test targets.
#include "FuzzTargets.h"

#include <cstring>
#include <memory>

namespace attn::fuzz {

std::string &lastError() {
  static std::string Message;
  return Message;
}

Outcome fuzzSelfTestThrow(const uint8_t *Data, size_t Size) {
  if (Size > 0 && Data[0] == '!')
    throw std::runtime_error("selftest_throw: the input starts with '!'");
  return Size ? Outcome::Accepted : Outcome::Rejected;
}

Outcome fuzzSelfTestAsan(const uint8_t *Data, size_t Size) {
  std::unique_ptr<uint8_t[]> Copy(new uint8_t[Size + 1]);
  std::memcpy(Copy.get(), Data, Size);
  // One past the copy's end when the input starts with '#': a heap overflow
  // that only a sanitizer notices.
  volatile uint8_t Byte = Copy[Size > 0 && Data[0] == '#' ? Size + 1 : 0];
  (void)Byte;
  return Size ? Outcome::Accepted : Outcome::Rejected;
}

namespace {
const Target Table[] = {
    {"ir_json", fuzzIrJson},
    {"tune_file", fuzzTuneFile},
    {"kernel_cache", fuzzKernelCache},
    {"dsl", fuzzDsl},
    {"selftest_throw", fuzzSelfTestThrow},
    {"selftest_asan", fuzzSelfTestAsan},
};
} // namespace

const Target *targets(size_t &Count) {
  Count = sizeof(Table) / sizeof(Table[0]);
  return Table;
}

const Target *findTarget(const char *Name) {
  for (const Target &T : Table)
    if (std::strcmp(T.Name, Name) == 0)
      return &T;
  return nullptr;
}

} // namespace attn::fuzz
