// Fuzz target: the kernel cache's disk-entry reader. The entry parser is
// private to KernelCache.cpp, so the bytes are written as the entry file of
// a fixed key and read through getOrCompile, with a stand-in compiler.
#include "FuzzTargets.h"

#include "attn/runtime/KernelCache.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace attn::fuzz {

using runtime::CacheResult;
using runtime::CacheSource;
using runtime::KernelCache;

namespace {

/// The cache directory of this process, removed at exit.
struct CacheDir {
  std::string Path;
  CacheDir() {
    llvm::SmallString<256> P;
    if (llvm::sys::fs::createUniqueDirectory("attnc-fuzz-kc", P))
      throw std::runtime_error("kernel_cache: cannot create a temp directory");
    Path = std::string(P);
  }
  ~CacheDir() { llvm::sys::fs::remove_directories(Path); }
};

const std::string &cacheDir() {
  static CacheDir Dir;
  return Dir.Path;
}

codegen::KernelSource source() {
  codegen::KernelSource Src;
  Src.Key = "fuzz.entry";
  Src.Entries = {"attnc_fwd"};
  Src.Source = "fuzz kernel";
  Src.Arch = GpuArch::Sm80;
  return Src;
}

std::vector<char> expectedCubin() {
  std::string Blob = "\x7f"
                     "ELF:fuzz";
  return std::vector<char>(Blob.begin(), Blob.end());
}

/// Stands in for NVRTC; counts its calls.
KernelCache::CompileFn fakeCompiler(int &Calls) {
  return [&Calls](const codegen::KernelSource &, double &Seconds) {
    ++Calls;
    Seconds = 0;
    return expectedCubin();
  };
}

void writeFile(const std::string &Path, llvm::StringRef Bytes) {
  std::error_code EC;
  llvm::raw_fd_ostream OS(Path, EC);
  if (EC)
    throw std::runtime_error("kernel_cache: cannot write " + Path);
  OS << Bytes;
}

} // namespace

/// The bytes of a valid entry for the target's key (a seed).
std::string kernelCacheSeedEntry() {
  llvm::sys::fs::remove_directories(cacheDir() + "/seed");
  int Calls = 0;
  KernelCache Cache(cacheDir() + "/seed", fakeCompiler(Calls));
  CacheResult R = Cache.getOrCompile(source());
  std::string Path = cacheDir() + "/seed/" + R.FullKey + ".cubin";
  auto Buffer = llvm::MemoryBuffer::getFile(Path);
  if (!Buffer)
    throw std::runtime_error("kernel_cache: no entry written at " + Path);
  return (*Buffer)->getBuffer().str();
}

Outcome fuzzKernelCache(const uint8_t *Data, size_t Size) {
  llvm::StringRef Bytes(reinterpret_cast<const char *>(Data), Size);
  const std::string &Dir = cacheDir();
  codegen::KernelSource Src = source();
  int Calls = 0;
  KernelCache Cache(Dir, fakeCompiler(Calls));
  std::string Path = Dir + "/" + Cache.fullKey(Src) + ".cubin";
  writeFile(Path, Bytes);

  CacheResult R = Cache.getOrCompile(Src);
  if (R.Source == CacheSource::Disk) {
    // A loaded entry is the file's tail after a header that begins with the
    // magic; the compiler was not asked.
    if (Calls != 0 || !Bytes.startswith("ATTNCKC1") ||
        !Bytes.endswith(llvm::StringRef(R.Cubin->data(), R.Cubin->size())))
      throw OracleFailure("kernel_cache: loaded an entry that is not valid");
    return Outcome::Accepted;
  }
  if (R.Source != CacheSource::Compiled || Calls != 1 ||
      *R.Cubin != expectedCubin())
    throw OracleFailure("kernel_cache: a rejected entry was not recompiled");
  // The rejected file was replaced by a valid entry that a fresh cache loads.
  int FreshCalls = 0;
  KernelCache Fresh(Dir, fakeCompiler(FreshCalls));
  CacheResult Again = Fresh.getOrCompile(Src);
  if (Again.Source != CacheSource::Disk || FreshCalls != 0 ||
      *Again.Cubin != expectedCubin())
    throw OracleFailure("kernel_cache: the rebuilt entry does not load");
  return Outcome::Rejected;
}

} // namespace attn::fuzz
