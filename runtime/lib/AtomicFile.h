// Whole-file writes that readers never see half done (runtime-internal).
#ifndef ATTN_RUNTIME_LIB_ATOMICFILE_H
#define ATTN_RUNTIME_LIB_ATOMICFILE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <system_error>

namespace attn::runtime {

/// The marker in the names of in-progress files: "<Path>.tmp-<random>".
inline constexpr llvm::StringLiteral TempMarker = ".tmp-";

/// Writes the concatenation of \p Parts to \p Path: first into a unique
/// temporary next to it, then rename()d over \p Path. A concurrent reader
/// sees the old file or the new one, never a mix; concurrent writers each
/// leave a whole file (the last rename wins). On failure the temporary is
/// removed and \p Path is untouched, and so it is when a signal (not
/// SIGKILL) ends the process mid-write: llvm::sys::fs::TempFile registers
/// the temporary for removal. (TempFile falls back to copying when the
/// rename fails, which within one directory only a target that is a
/// directory or not writable causes; the copy fails then too.)
std::error_code writeFileAtomically(llvm::StringRef Path,
                                    llvm::ArrayRef<llvm::StringRef> Parts);

} // namespace attn::runtime

#endif
