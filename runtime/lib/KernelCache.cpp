// Compiled kernels cached in memory and on disk.
#include "attn/runtime/KernelCache.h"

#include "AtomicFile.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/DeviceLibrary.h"
#include "attn/runtime/Errors.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <chrono>
#include <cstdlib>
#include <optional>

#ifndef ATTNC_VERSION
#error "ATTNC_VERSION must be defined (attnc_compiler exports it)"
#endif

namespace attn::runtime {

// On-disk entry "<FullKey>.cubin". Integers are little-endian.
//
//   offset   size  field
//   0        8     magic "ATTNCKC1"
//   8        4     format version (uint32, FormatVersion below)
//   12       4     N = length of the attnc version string (uint32)
//   16       N     attnc version string (ATTNC_VERSION)
//   16+N     8     payload length in bytes (uint64)
//   24+N     32    SHA-256 of the payload
//   56+N     ...   payload: the CUBIN
//
// The file must be exactly header + payload long: a truncated file, or one
// with bytes appended, is as invalid as a checksum mismatch.

namespace {

constexpr llvm::StringLiteral Magic = "ATTNCKC1";
constexpr uint32_t FormatVersion = 1;
constexpr llvm::StringLiteral AttncVersion = ATTNC_VERSION;
constexpr llvm::StringLiteral CubinSuffix = ".cubin";
constexpr size_t DigestSize = 32;
/// A version string longer than this marks a corrupt header.
constexpr uint32_t MaxVersionLength = 256;
/// The readable prefix is cut here so names stay well below the usual
/// 255-byte file-name limit (the hash covers the source, not the prefix).
constexpr size_t MaxPrefixLength = 120;

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point Start) {
  return std::chrono::duration<double>(Clock::now() - Start).count();
}

void appendLE(std::string &Out, uint64_t V, unsigned Bytes) {
  for (unsigned I = 0; I < Bytes; ++I)
    Out.push_back(static_cast<char>((V >> (8 * I)) & 0xff));
}

uint64_t readLE(llvm::StringRef In, unsigned Bytes) {
  uint64_t V = 0;
  for (unsigned I = 0; I < Bytes; ++I)
    V |= uint64_t(static_cast<unsigned char>(In[I])) << (8 * I);
  return V;
}

llvm::StringRef asStringRef(const std::vector<char> &V) {
  return llvm::StringRef(V.data(), V.size());
}

std::string sha256(llvm::StringRef Data) {
  std::array<uint8_t, 32> Digest = llvm::SHA256::hash(
      llvm::ArrayRef<uint8_t>(Data.bytes_begin(), Data.bytes_end()));
  return std::string(Digest.begin(), Digest.end());
}

std::string makeHeader(llvm::StringRef Payload) {
  std::string H(Magic);
  appendLE(H, FormatVersion, 4);
  appendLE(H, AttncVersion.size(), 4);
  H += AttncVersion;
  appendLE(H, Payload.size(), 8);
  H += sha256(Payload);
  return H;
}

/// The payload of a well-formed entry, or nothing.
std::optional<std::vector<char>> parseEntry(llvm::StringRef File) {
  if (File.size() < 16 || !File.startswith(Magic) ||
      readLE(File.substr(8), 4) != FormatVersion)
    return std::nullopt;
  uint64_t VersionLength = readLE(File.substr(12), 4);
  if (VersionLength > MaxVersionLength ||
      File.size() < 16 + VersionLength + 8 + DigestSize)
    return std::nullopt;
  if (File.substr(16, VersionLength) != AttncVersion)
    return std::nullopt;
  size_t PayloadLengthAt = 16 + VersionLength;
  uint64_t PayloadLength = readLE(File.substr(PayloadLengthAt), 8);
  size_t PayloadAt = PayloadLengthAt + 8 + DigestSize;
  if (File.size() - PayloadAt != PayloadLength)
    return std::nullopt;
  llvm::StringRef Payload = File.substr(PayloadAt);
  if (File.substr(PayloadLengthAt + 8, DigestSize) != sha256(Payload))
    return std::nullopt;
  return std::vector<char>(Payload.begin(), Payload.end());
}

/// Hashes a field with its length first, so that no two different field
/// sequences hash the same bytes ("ab","c" vs "a","bc").
void hashField(llvm::SHA256 &H, llvm::StringRef Field) {
  std::string Length;
  appendLE(Length, Field.size(), 8);
  H.update(Length);
  H.update(Field);
}

/// One digest of the embedded device library: generated code #includes it,
/// so editing a .cuh must change every key even when the attnc version
/// stays the same (as it does between a developer's builds).
const std::string &deviceLibraryDigest() {
  static const std::string Digest = [] {
    llvm::SHA256 H;
    hashField(H, std::to_string(deviceLibrary().size()));
    for (const EmbeddedHeader &Header : deviceLibrary()) {
      hashField(H, Header.Name);
      hashField(H, Header.Contents);
    }
    return H.final().str();
  }();
  return Digest;
}

bool isCacheFile(llvm::StringRef Name) { return Name.endswith(CubinSuffix); }
bool isTemporary(llvm::StringRef Name) { return Name.contains(TempMarker); }

/// Calls \p Visit(path, file name) for every regular file in \p Dir; a
/// missing directory has none.
template <typename Fn> void forEachFile(const std::string &Dir, Fn Visit) {
  std::error_code EC;
  for (llvm::sys::fs::directory_iterator I(Dir, EC), End; !EC && I != End;
       I.increment(EC)) {
    if (I->type() != llvm::sys::fs::file_type::regular_file)
      continue;
    Visit(I->path(), llvm::sys::path::filename(I->path()));
  }
}

} // namespace

const char *cacheSourceName(CacheSource S) {
  switch (S) {
  case CacheSource::Memory:
    return "memory";
  case CacheSource::Disk:
    return "disk";
  case CacheSource::Compiled:
    return "compiled";
  }
  return "unknown";
}

KernelCache::KernelCache(std::string Directory, CompileFn Compile)
    : Dir(std::move(Directory)), Compile(std::move(Compile)) {
  if (!this->Compile)
    this->Compile = [](const codegen::KernelSource &Src, double &Seconds) {
      CompiledCubin C = compileToCubin(Src);
      Seconds = C.Seconds;
      return std::move(C.Cubin);
    };
}

KernelCache &KernelCache::global() {
  static KernelCache Cache(defaultDirectory());
  return Cache;
}

std::string KernelCache::defaultDirectory() {
  if (const char *D = std::getenv("ATTNC_CACHE_DIR"); D && *D)
    return D;
  if (const char *X = std::getenv("XDG_CACHE_HOME"); X && *X)
    return std::string(X) + "/attnc";
  llvm::SmallString<256> Home;
  if (llvm::sys::path::home_directory(Home))
    return std::string(Home) + "/.cache/attnc";
  // No home (a bare container user): a per-machine temporary cache is
  // better than none.
  llvm::SmallString<256> Tmp;
  llvm::sys::path::system_temp_directory(/*erasedOnReboot=*/true, Tmp);
  return std::string(Tmp) + "/attnc-cache";
}

std::string KernelCache::fullKey(const codegen::KernelSource &Src) const {
  if (Src.Key.empty())
    throw InvalidArgument("KernelCache: KernelSource.Key is empty; expected "
                          "a readable prefix of [A-Za-z0-9._-]");
  for (char C : Src.Key)
    if (!(llvm::isAlnum(C) || C == '.' || C == '_' || C == '-'))
      throw InvalidArgument("KernelCache: KernelSource.Key \"" + Src.Key +
                            "\" contains '" + std::string(1, C) +
                            "'; expected only [A-Za-z0-9._-]");

  llvm::SHA256 H;
  hashField(H, Src.Source);
  std::vector<std::string> Options = nvrtcOptions(Src.Arch);
  hashField(H, std::to_string(Options.size()));
  for (const std::string &O : Options)
    hashField(H, O);
  hashField(H, nvrtcVersion());
  hashField(H, AttncVersion);
  hashField(H, archName(Src.Arch));
  hashField(H, deviceLibraryDigest());
  std::string Prefix = Src.Key.substr(0, MaxPrefixLength);
  return Prefix + "-" + llvm::toHex(H.final(), /*LowerCase=*/true);
}

CacheResult KernelCache::getOrCompile(const codegen::KernelSource &Src) {
  Clock::time_point Start = Clock::now();
  CacheResult Result;
  Result.FullKey = fullKey(Src);
  Result.CompileSeconds = 0;

  auto Finish = [&](std::shared_ptr<const std::vector<char>> Cubin,
                    CacheSource Source) {
    std::lock_guard<std::mutex> Lock(Mutex);
    // Another thread may have stored the same key meanwhile; keep the first
    // so every caller shares one copy.
    Result.Cubin = Memory.emplace(Result.FullKey, std::move(Cubin))
                       .first->second;
    Result.Source = Source;
    Result.LookupSeconds = secondsSince(Start);
    return Result;
  };

  {
    std::lock_guard<std::mutex> Lock(Mutex);
    auto It = Memory.find(Result.FullKey);
    if (It != Memory.end()) {
      Result.Cubin = It->second;
      Result.Source = CacheSource::Memory;
      Result.LookupSeconds = secondsSince(Start);
      return Result;
    }
  }

  // Disk and compilation run unlocked: compiles of different keys (the
  // autotuner's candidates) proceed in parallel. Two threads asking for the
  // same new key may both compile; both results are the same CUBIN.
  std::string Path = Dir + "/" + Result.FullKey + CubinSuffix.str();
  if (auto Buffer = llvm::MemoryBuffer::getFile(
          Path, /*IsText=*/false, /*RequiresNullTerminator=*/false)) {
    if (std::optional<std::vector<char>> Payload =
            parseEntry((*Buffer)->getBuffer()))
      return Finish(std::make_shared<const std::vector<char>>(
                        std::move(*Payload)),
                    CacheSource::Disk);
    // Corrupt, truncated, or from another format or attnc version: never
    // load it. If another process has just replaced it with a good entry,
    // removing that costs one recompile, nothing worse.
    llvm::sys::fs::remove(Path);
  }

  auto Cubin = std::make_shared<const std::vector<char>>(
      Compile(Src, Result.CompileSeconds));

  // A cache that cannot be written (read-only or full disk) only costs
  // recompiles in later processes; the kernel itself is fine, so the error
  // is not the caller's problem.
  if (!llvm::sys::fs::create_directories(Dir)) {
    llvm::StringRef Payload = asStringRef(*Cubin);
    std::string Header = makeHeader(Payload);
    (void)writeFileAtomically(Path, {Header, Payload});
  }
  return Finish(std::move(Cubin), CacheSource::Compiled);
}

CacheStats KernelCache::stats() const {
  CacheStats S;
  S.Directory = Dir;
  forEachFile(Dir, [&](const std::string &Path, llvm::StringRef Name) {
    if (!isCacheFile(Name))
      return;
    uint64_t Size = 0;
    if (llvm::sys::fs::file_size(Path, Size))
      return; // removed meanwhile by another process
    ++S.Entries;
    S.Bytes += Size;
  });
  return S;
}

size_t KernelCache::clear() {
  size_t Removed = 0;
  forEachFile(Dir, [&](const std::string &Path, llvm::StringRef Name) {
    if ((isCacheFile(Name) || isTemporary(Name)) &&
        !llvm::sys::fs::remove(Path, /*IgnoreNonExisting=*/false))
      ++Removed;
  });
  // The memory entries go too: after clear() the cache is empty, and the
  // next lookup compiles.
  dropMemory();
  return Removed;
}

void KernelCache::dropMemory() {
  std::lock_guard<std::mutex> Lock(Mutex);
  Memory.clear();
}

} // namespace attn::runtime
