// Whole-file writes through a temporary and rename().
#include "AtomicFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace attn::runtime {

std::error_code writeFileAtomically(llvm::StringRef Path,
                                    llvm::ArrayRef<llvm::StringRef> Parts) {
  // Same directory as the target: rename() is atomic only within one file
  // system.
  int FD = -1;
  llvm::SmallString<256> TempPath;
  if (std::error_code EC = llvm::sys::fs::createUniqueFile(
          Path + TempMarker + "%%%%%%%%%%%%", FD, TempPath))
    return EC;

  std::error_code EC;
  {
    llvm::raw_fd_ostream OS(FD, /*shouldClose=*/true);
    for (llvm::StringRef Part : Parts)
      OS << Part;
    OS.close();
    if (OS.has_error()) {
      EC = OS.error();
      OS.clear_error(); // raw_fd_ostream aborts on an unchecked error
    }
  }
  if (!EC)
    EC = llvm::sys::fs::rename(TempPath, Path);
  if (EC)
    llvm::sys::fs::remove(TempPath);
  return EC;
}

} // namespace attn::runtime
