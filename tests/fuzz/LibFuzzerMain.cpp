// libFuzzer entry for one target (ATTNC_FUZZ_TARGET names it), built with
// ATTNC_FUZZ_LIBFUZZER=ON and Clang.
#include "FuzzTargets.h"

#ifndef ATTNC_FUZZ_TARGET
#error "ATTNC_FUZZ_TARGET must name the target"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  static const attn::fuzz::Target *T =
      attn::fuzz::findTarget(ATTNC_FUZZ_TARGET);
  // attn::Error is caught inside; anything else escapes and aborts, which
  // libFuzzer reports as a crash with the input saved.
  (void)T->Run(Data, Size);
  return 0;
}
