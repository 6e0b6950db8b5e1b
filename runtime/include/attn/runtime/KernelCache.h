// Compiled kernels cached in memory and on disk, keyed by a readable prefix
// and a SHA-256 of everything that determines the CUBIN.
#ifndef ATTN_RUNTIME_KERNELCACHE_H
#define ATTN_RUNTIME_KERNELCACHE_H

#include "attn/codegen/KernelSource.h"
#include "attn/runtime/Bundle.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace attn::runtime {

/// Where a lookup was served from.
enum class CacheSource { Memory, Bundle, Disk, Compiled };
const char *cacheSourceName(CacheSource S);

struct CacheResult {
  std::shared_ptr<const std::vector<char>> Cubin;
  CacheSource Source;
  /// prefix + "-" + sha256 hex: the disk entry's file stem, or for a
  /// kernel that came from a bundle, its bundleKey.
  std::string FullKey;
  double CompileSeconds; ///< 0 unless Source == Compiled
  double LookupSeconds;  ///< wall time of the whole getOrCompile call
};

struct CacheStats {
  std::string Directory;
  size_t Entries = 0; ///< regular "*.cubin" files
  uint64_t Bytes = 0; ///< their total size
  /// Temporaries left by writers that died before their rename (clear()
  /// removes them).
  size_t Temporaries = 0;
  uint64_t TemporaryBytes = 0;
  /// Entry or temporary names that are not regular files (FIFOs, devices,
  /// links to either, dangling links): never read; the next write of the
  /// key replaces them, clear() removes them.
  size_t Skipped = 0;
};

/// Memory → bundles → disk → compile. Bundles (Bundle.h) are consulted
/// before the disk and NVRTC: a program that has every kernel it calls in a
/// bundle never loads NVRTC. Disk entries live in one directory
/// ($ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else ~/.cache/attnc), one
/// file per key, named "<FullKey>.cubin". Each file starts with a header:
/// magic "ATTNCKC1", format version, attnc version, payload length and the
/// payload's SHA-256; a file whose header is wrong, truncated, of another
/// version, or whose checksum fails is deleted and rebuilt, never loaded.
/// Writes go to a unique temporary file in the same directory, then rename()
/// — so concurrent processes never see half a file, and two processes
/// compiling the same key both end with a valid entry. Only regular files
/// (after symlinks) are read as entries; anything else in an entry's place is
/// recompiled over. A cache path that exists but is not a directory is an
/// InvalidArgument for lookups, stats() and clear().
class KernelCache {
public:
  /// The compile step, replaceable for tests.
  using CompileFn = std::function<std::vector<char>(
      const codegen::KernelSource &, double &Seconds)>;

  explicit KernelCache(std::string Directory, CompileFn Compile = {});
  /// The cache at the default directory with NVRTC as the compiler, and
  /// the bundles $ATTNC_BUNDLE names (paths separated by ':'; a bad one is
  /// a UserError at the first use of the cache).
  static KernelCache &global();
  static std::string defaultDirectory();

  /// The full key: Src.Key + "-" + hex SHA-256 of (source, NVRTC options,
  /// NVRTC version, attnc version, arch, embedded device library).
  std::string fullKey(const codegen::KernelSource &Src) const;

  /// The kernel of \p Src: from memory, a bundle, the disk, or compiled.
  /// CompilerUnavailable when it must be compiled and NVRTC cannot be
  /// loaded (the message names the kernel and the bundles searched).
  CacheResult getOrCompile(const codegen::KernelSource &Src);

  /// Reads the bundle at \p Path (UserError if it is not a good one) and
  /// consults it from now on, after the bundles added before it.
  void addBundle(const std::string &Path);
  void addBundle(std::shared_ptr<const KernelBundle> Bundle,
                 const std::string &Name);
  /// The names of the bundles consulted, in order.
  std::vector<std::string> bundleNames() const;

  CacheStats stats() const;
  /// Removes every cache entry and stray temporary, whatever its file type
  /// (a link goes, never its target); returns how many.
  size_t clear();
  /// Forgets the in-memory entries (tests use it to force a disk read).
  void dropMemory();

private:
  std::string Dir;
  CompileFn Compile;
  mutable std::mutex Mutex;
  /// By bundleKey (NVRTC-independent; within a process NVRTC's version
  /// and options are fixed), with the full key of each.
  struct MemoryEntry {
    std::shared_ptr<const std::vector<char>> Cubin;
    std::string FullKey;
  };
  std::map<std::string, MemoryEntry> Memory;
  std::vector<std::pair<std::string, std::shared_ptr<const KernelBundle>>>
      Bundles;
};

} // namespace attn::runtime

#endif
