// The hand-written device library (runtime/kernels/*.cuh), embedded at build
// time as data: NVRTC gets it as in-memory headers, `attnc emit --standalone`
// inlines it.
#ifndef ATTN_RUNTIME_DEVICELIBRARY_H
#define ATTN_RUNTIME_DEVICELIBRARY_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace attn::runtime {

struct EmbeddedHeader {
  llvm::StringRef Name;     ///< include name, "attnc/fwd_sm80.cuh"
  llvm::StringRef Contents; ///< the file's text
};

/// Every header of runtime/kernels, in a stable order.
llvm::ArrayRef<EmbeddedHeader> deviceLibrary();

/// The header named \p Name, or nullptr.
const EmbeddedHeader *findDeviceHeader(llvm::StringRef Name);

} // namespace attn::runtime

#endif
