// NVRTC loaded at run time through llvm::sys::DynamicLibrary.
#include "NvrtcLibrary.h"

#include "attn/runtime/Errors.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/DynamicLibrary.h"

#include <cstdlib>
#include <optional>
#include <vector>

#ifndef ATTNC_NVRTC_SONAME
#error "ATTNC_NVRTC_SONAME must be defined (runtime/CMakeLists.txt)"
#endif

namespace attn::runtime {

namespace {

/// The loaded library, or why none could be.
struct LoadResult {
  std::optional<NvrtcLibrary> Library;
  std::string Reason;
};

/// The files to try, first to last.
std::vector<std::string> candidates() {
  if (const char *Env = std::getenv("ATTNC_NVRTC_LIBRARY"); Env && *Env)
    // Only the user's choice: a fall-back would hide their mistake (and
    // tests make NVRTC unavailable by naming a file that does not exist).
    return {Env};
  std::vector<std::string> Out;
#ifdef ATTNC_NVRTC_DIRS
  // The folders the build found libnvrtc in (colon-separated).
  llvm::StringRef Dirs = ATTNC_NVRTC_DIRS;
  while (!Dirs.empty()) {
    auto [Dir, Rest] = Dirs.split(':');
    if (!Dir.empty())
      Out.push_back(Dir.str() + "/" + ATTNC_NVRTC_SONAME);
    Dirs = Rest;
  }
#endif
  // The dynamic loader's search (LD_LIBRARY_PATH, ldconfig).
  Out.push_back(ATTNC_NVRTC_SONAME);
  return Out;
}

LoadResult load() {
  LoadResult R;
  for (const std::string &Path : candidates()) {
    std::string Why;
    // Permanent: compiled CUBINs never point into NVRTC, but programs may
    // compile until exit, so it is never closed.
    llvm::sys::DynamicLibrary Lib =
        llvm::sys::DynamicLibrary::getPermanentLibrary(Path.c_str(), &Why);
    if (!Lib.isValid()) {
      // dlerror's text names the file already.
      if (Why.empty())
        Why = Path + ": dlopen failed";
      else if (Why.find(Path) == std::string::npos)
        Why = Path + ": " + Why;
      R.Reason += (R.Reason.empty() ? "" : "; ") + Why;
      continue;
    }
    NvrtcLibrary L;
    L.Path = Path;
    std::string Missing;
#define ATTN_NVRTC_RESOLVE(Name)                                               \
  if (void *Address = Lib.getAddressOfSymbol(#Name))                           \
    L.Name = reinterpret_cast<decltype(L.Name)>(Address);                      \
  else                                                                         \
    Missing += (Missing.empty() ? "" : ", ") + std::string(#Name);
    ATTN_NVRTC_ENTRY_POINTS(ATTN_NVRTC_RESOLVE)
#undef ATTN_NVRTC_RESOLVE
    if (!Missing.empty()) {
      R.Reason += (R.Reason.empty() ? "" : "; ") + Path +
                  ": not NVRTC, or too old: it lacks " + Missing;
      continue;
    }
    R.Library = std::move(L);
    return R;
  }
  return R;
}

const LoadResult &loaded() {
  // A function-local static: one thread loads, the others wait.
  static const LoadResult R = load();
  return R;
}

} // namespace

const NvrtcLibrary &nvrtc() {
  const LoadResult &R = loaded();
  if (!R.Library)
    throw CompilerUnavailable("NVRTC cannot be loaded (" + R.Reason +
                              "); install the CUDA toolkit's NVRTC, set "
                              "ATTNC_NVRTC_LIBRARY to libnvrtc's path, or "
                              "load a bundle that has the kernel "
                              "(docs/runtime.md, \"Ahead of time\")");
  return *R.Library;
}

bool nvrtcAvailable(std::string *Why) {
  const LoadResult &R = loaded();
  if (Why && !R.Library)
    *Why = R.Reason;
  return R.Library.has_value();
}

} // namespace attn::runtime
