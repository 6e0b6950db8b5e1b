// Whole-file writes through llvm::sys::fs::TempFile and its rename.
#include "AtomicFile.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace attn::runtime {

std::error_code writeFileAtomically(llvm::StringRef Path,
                                    llvm::ArrayRef<llvm::StringRef> Parts) {
  // Same directory as the target: rename() is atomic only within one file
  // system. TempFile also removes the temporary if a signal ends the process
  // before keep().
  llvm::Expected<llvm::sys::fs::TempFile> Temp =
      llvm::sys::fs::TempFile::create(Path + TempMarker + "%%%%%%%%%%%%");
  if (!Temp)
    return llvm::errorToErrorCode(Temp.takeError());

  std::error_code EC;
  {
    llvm::raw_fd_ostream OS(Temp->FD, /*shouldClose=*/false);
    for (llvm::StringRef Part : Parts)
      OS << Part;
    OS.flush();
    if (OS.has_error()) {
      EC = OS.error();
      OS.clear_error(); // raw_fd_ostream aborts on an unchecked error
    }
  }
  if (EC) {
    llvm::consumeError(Temp->discard());
    return EC;
  }
  // keep() renames over Path; when that fails it leaves the temporary (and
  // the TempFile done), so the temporary is removed by name.
  std::string TempPath = Temp->TmpName;
  if (llvm::Error E = Temp->keep(Path)) {
    EC = llvm::errorToErrorCode(std::move(E));
    llvm::sys::fs::remove(TempPath);
  }
  return EC;
}

} // namespace attn::runtime
