// Compiled kernels cached in memory and on disk.
#include "attn/runtime/KernelCache.h"
#include "attn/codegen/Arch.h"

#include "AtomicFile.h"
#include "CacheFormat.h"
#include "NvrtcLibrary.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/DeviceLibrary.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/EventTiming.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <cstdlib>
#include <filesystem>
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

namespace endian = llvm::support::endian;

llvm::StringRef asStringRef(const std::vector<char> &V) {
  return llvm::StringRef(V.data(), V.size());
}

std::string makeHeader(llvm::StringRef Payload) {
  std::string H(Magic);
  appendLE<uint32_t>(H, FormatVersion);
  appendLE<uint32_t>(H, AttncVersion.size());
  H += AttncVersion;
  appendLE<uint64_t>(H, Payload.size());
  H += sha256(Payload);
  return H;
}

/// The payload of a well-formed entry, or nothing.
std::optional<std::vector<char>> parseEntry(llvm::StringRef File) {
  if (File.size() < 16 || !File.startswith(Magic) ||
      endian::read32le(File.data() + 8) != FormatVersion)
    return std::nullopt;
  uint64_t VersionLength = endian::read32le(File.data() + 12);
  if (VersionLength > MaxVersionLength ||
      File.size() < 16 + VersionLength + 8 + DigestSize)
    return std::nullopt;
  if (File.substr(16, VersionLength) != AttncVersion)
    return std::nullopt;
  size_t PayloadLengthAt = 16 + VersionLength;
  uint64_t PayloadLength = endian::read64le(File.data() + PayloadLengthAt);
  size_t PayloadAt = PayloadLengthAt + 8 + DigestSize;
  if (File.size() - PayloadAt != PayloadLength)
    return std::nullopt;
  llvm::StringRef Payload = File.substr(PayloadAt);
  if (File.substr(PayloadLengthAt + 8, DigestSize) != sha256(Payload))
    return std::nullopt;
  return std::vector<char>(Payload.begin(), Payload.end());
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

/// Throws unless \p Dir is a directory or does not exist yet: a cache path
/// that names a file (a typo in ATTNC_CACHE_DIR) must not pass for an
/// empty cache.
void requireDirectory(const std::string &Dir) {
  llvm::sys::fs::file_status St;
  if (llvm::sys::fs::status(Dir, St) || !llvm::sys::fs::exists(St) ||
      llvm::sys::fs::is_directory(St))
    return;
  throw InvalidArgument("kernel cache: '" + Dir +
                        "' is not a directory; expected a directory "
                        "(ATTNC_CACHE_DIR) or a path that does not exist yet");
}

/// Whether \p Path, after symlinks, is a regular file. Only those are read:
/// opening a FIFO blocks and a device (a link to /dev/zero) never ends.
bool isRegularFile(const llvm::Twine &Path) {
  llvm::sys::fs::file_status St;
  return !llvm::sys::fs::status(Path, St, /*Follow=*/true) &&
         llvm::sys::fs::is_regular_file(St);
}

/// Calls \p Visit(path, file name) for every entry in \p Dir but
/// directories; a missing directory has none. Entries are not followed.
template <typename Fn> void forEachEntry(const std::string &Dir, Fn Visit) {
  std::error_code EC;
  for (llvm::sys::fs::directory_iterator I(Dir, EC, /*FollowSymlinks=*/false),
       End;
       !EC && I != End; I.increment(EC)) {
    if (I->type() == llvm::sys::fs::file_type::directory_file)
      continue;
    Visit(I->path(), llvm::sys::path::filename(I->path()));
  }
}

/// The contents of the entry at \p Path, or nothing when it is absent or not
/// a regular file. The file is checked again once open, so that one swapped
/// in between the two checks is not read either (a FIFO swapped in after the
/// first check can still block the open: that needs a second process racing
/// on purpose).
std::unique_ptr<llvm::MemoryBuffer> readRegularFile(const std::string &Path) {
  if (!isRegularFile(Path))
    return nullptr;
  llvm::Expected<llvm::sys::fs::file_t> FD =
      llvm::sys::fs::openNativeFileForRead(Path);
  if (!FD) {
    llvm::consumeError(FD.takeError());
    return nullptr;
  }
  std::unique_ptr<llvm::MemoryBuffer> Result;
  llvm::sys::fs::file_status St;
  if (!llvm::sys::fs::status(*FD, St) && llvm::sys::fs::is_regular_file(St)) {
    auto Buffer = llvm::MemoryBuffer::getOpenFile(
        *FD, Path, St.getSize(), /*RequiresNullTerminator=*/false);
    if (Buffer)
      Result = std::move(*Buffer);
  }
  llvm::sys::fs::closeFile(*FD);
  return Result;
}

} // namespace

const char *cacheSourceName(CacheSource S) {
  switch (S) {
  case CacheSource::Memory:
    return "memory";
  case CacheSource::Bundle:
    return "bundle";
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

namespace {

/// The cache global() returns, with $ATTNC_BUNDLE's bundles added. A bad
/// bundle throws, and the next global() tries again: every use fails with
/// the same message instead of running without the bundle.
std::unique_ptr<KernelCache> makeGlobal() {
  auto Cache = std::make_unique<KernelCache>(KernelCache::defaultDirectory());
  if (const char *Env = std::getenv("ATTNC_BUNDLE"); Env && *Env) {
    llvm::SmallVector<llvm::StringRef, 4> Paths;
    llvm::StringRef(Env).split(Paths, ':', /*MaxSplit=*/-1,
                               /*KeepEmpty=*/false);
    for (llvm::StringRef P : Paths) {
      try {
        Cache->addBundle(P.str());
      } catch (const UserError &E) {
        throw UserError(std::string("ATTNC_BUNDLE: ") + E.what());
      }
    }
  }
  return Cache;
}

} // namespace

KernelCache &KernelCache::global() {
  static std::unique_ptr<KernelCache> Cache = makeGlobal();
  return *Cache;
}

void KernelCache::addBundle(const std::string &Path) {
  addBundle(std::make_shared<const KernelBundle>(KernelBundle::read(Path)),
            Path);
}

void KernelCache::addBundle(std::shared_ptr<const KernelBundle> Bundle,
                            const std::string &Name) {
  if (!Bundle)
    throw InvalidArgument("KernelCache::addBundle: Bundle is null");
  std::lock_guard<std::mutex> Lock(Mutex);
  Bundles.emplace_back(Name, std::move(Bundle));
}

std::vector<std::string> KernelCache::bundleNames() const {
  std::lock_guard<std::mutex> Lock(Mutex);
  std::vector<std::string> Out;
  for (const auto &B : Bundles)
    Out.push_back(B.first);
  return Out;
}

std::string KernelCache::defaultDirectory() {
  if (const char *D = std::getenv("ATTNC_CACHE_DIR"); D && *D)
    return D;
  // $XDG_CACHE_HOME, else ~/.cache.
  llvm::SmallString<256> Cache;
  if (llvm::sys::path::cache_directory(Cache))
    return std::string(Cache) + "/attnc";
  // No home (a bare container user): a per-machine temporary cache is
  // better than none.
  llvm::SmallString<256> Tmp;
  llvm::sys::path::system_temp_directory(/*erasedOnReboot=*/true, Tmp);
  return std::string(Tmp) + "/attnc-cache";
}

namespace {

void checkKeyPrefix(const codegen::KernelSource &Src) {
  if (Src.Key.empty())
    throw InvalidArgument("KernelCache: KernelSource.Key is empty; expected "
                          "a readable prefix of [A-Za-z0-9._-]");
  for (char C : Src.Key)
    if (!(llvm::isAlnum(C) || C == '.' || C == '_' || C == '-'))
      throw InvalidArgument("KernelCache: KernelSource.Key \"" + Src.Key +
                            "\" contains '" + std::string(1, C) +
                            "'; expected only [A-Za-z0-9._-]");
}

/// Src.Key's prefix + "-" + the hex SHA-256 of the source, the fields
/// \p Toolchain hashes (nothing for a bundle key; NVRTC's options and
/// version for the disk key), the attnc version, the arch and the device
/// library, in that order.
std::string hashedKey(const codegen::KernelSource &Src,
                      llvm::function_ref<void(llvm::SHA256 &)> Toolchain) {
  checkKeyPrefix(Src);
  llvm::SHA256 H;
  hashField(H, Src.Source);
  Toolchain(H);
  hashField(H, AttncVersion);
  hashField(H, archName(Src.Arch));
  hashField(H, deviceLibraryDigest());
  std::string Prefix = Src.Key.substr(0, MaxPrefixLength);
  return Prefix + "-" + llvm::toHex(H.final(), /*LowerCase=*/true);
}

} // namespace

std::string bundleKey(const codegen::KernelSource &Src) {
  return hashedKey(Src, [](llvm::SHA256 &) {});
}

std::string KernelCache::fullKey(const codegen::KernelSource &Src) const {
  return hashedKey(Src, [&](llvm::SHA256 &H) {
    std::vector<std::string> Options = nvrtcOptions(Src.Arch);
    hashField(H, std::to_string(Options.size()));
    for (const std::string &O : Options)
      hashField(H, O);
    hashField(H, nvrtcVersion());
  });
}

CacheResult KernelCache::getOrCompile(const codegen::KernelSource &Src) {
  WallTimer Timer;
  CacheResult Result;
  Result.CompileSeconds = 0;
  std::string MemoryKey = bundleKey(Src);

  auto Finish = [&](std::shared_ptr<const std::vector<char>> Cubin,
                    CacheSource Source) {
    std::lock_guard<std::mutex> Lock(Mutex);
    // Another thread may have stored the same key meanwhile; keep the first
    // so every caller shares one copy.
    const MemoryEntry &E =
        Memory.try_emplace(MemoryKey, MemoryEntry{std::move(Cubin),
                                                  Result.FullKey})
            .first->second;
    Result.Cubin = E.Cubin;
    Result.Source = Source;
    Result.LookupSeconds = Timer.seconds();
    return Result;
  };

  std::vector<std::string> Searched;
  std::shared_ptr<const std::vector<char>> FromBundle;
  {
    std::lock_guard<std::mutex> Lock(Mutex);
    auto It = Memory.find(MemoryKey);
    if (It != Memory.end()) {
      Result.Cubin = It->second.Cubin;
      Result.FullKey = It->second.FullKey;
      Result.Source = CacheSource::Memory;
      Result.LookupSeconds = Timer.seconds();
      return Result;
    }
    for (const auto &[Name, Bundle] : Bundles) {
      if (const BundleEntry *E = Bundle->find(MemoryKey)) {
        FromBundle = E->Cubin;
        break;
      }
      Searched.push_back(Name);
    }
  }
  if (FromBundle) {
    Result.FullKey = MemoryKey;
    return Finish(std::move(FromBundle), CacheSource::Bundle);
  }

  // Past the bundles, the disk key and a compile both need NVRTC.
  std::string Why;
  if (!nvrtcAvailable(&Why))
    throw CompilerUnavailable(
        "kernel " + MemoryKey + " (" + archName(Src.Arch).str() +
        ") is in no loaded bundle" +
        (Searched.empty() ? std::string(" (none is loaded: ATTNC_BUNDLE)")
                          : " (searched: " + llvm::join(Searched, ", ") +
                                ")") +
        ", and NVRTC cannot be loaded to compile it (" + Why +
        "); make a bundle that covers this call with `attnc bundle`, or "
        "install NVRTC");
  Result.FullKey = fullKey(Src);

  // Disk and compilation run unlocked: compiles of different keys (the
  // autotuner's candidates) proceed in parallel. Two threads asking for the
  // same new key may both compile; both results are the same CUBIN.
  requireDirectory(Dir);
  std::string Path = Dir + "/" + Result.FullKey + CubinSuffix.str();
  // Anything but a regular file in an entry's place is skipped, never
  // opened; the rename below replaces it with a real entry.
  if (std::unique_ptr<llvm::MemoryBuffer> Buffer = readRegularFile(Path)) {
    if (std::optional<std::vector<char>> Payload =
            parseEntry(Buffer->getBuffer()))
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
  requireDirectory(Dir);
  CacheStats S;
  S.Directory = Dir;
  forEachEntry(Dir, [&](const std::string &Path, llvm::StringRef Name) {
    bool Temporary = isTemporary(Name);
    if (!Temporary && !isCacheFile(Name))
      return;
    if (!isRegularFile(Path)) {
      // A FIFO, device or dangling link where an entry or temporary
      // would be: never read, replaced by the next write of its key.
      ++S.Skipped;
      return;
    }
    uint64_t Size = 0;
    if (llvm::sys::fs::file_size(Path, Size))
      return; // removed meanwhile by another process
    if (Temporary) {
      ++S.Temporaries;
      S.TemporaryBytes += Size;
      return;
    }
    ++S.Entries;
    S.Bytes += Size;
  });
  return S;
}

size_t KernelCache::clear() {
  requireDirectory(Dir);
  size_t Removed = 0;
  // Links are removed, not their targets. std::filesystem, because
  // llvm::sys::fs::remove refuses FIFOs and other special files.
  forEachEntry(Dir, [&](const std::string &Path, llvm::StringRef Name) {
    std::error_code EC;
    if ((isCacheFile(Name) || isTemporary(Name)) &&
        std::filesystem::remove(Path, EC) && !EC)
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
