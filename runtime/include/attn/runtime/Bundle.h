// Ahead-of-time kernel bundles: compiled kernels for several archs in one
// versioned, checksummed file, which the runtime consults before its cache
// and NVRTC (docs/runtime.md, "Ahead of time").
#ifndef ATTN_RUNTIME_BUNDLE_H
#define ATTN_RUNTIME_BUNDLE_H

#include "attn/codegen/KernelSource.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace attn::runtime {

/// One compiled kernel of a bundle.
struct BundleEntry {
  std::string Key; ///< bundleKey() of its source
  GpuArch Arch = GpuArch::Sm80;
  std::string Nvrtc; ///< the NVRTC version that compiled it ("13.0")
  std::shared_ptr<const std::vector<char>> Cubin;
};

/// What Attention::precompile and LinearAttention::precompile compile.
struct PrecompileSet {
  /// The forward: the signature's kernel (dense or packed, by its layout)
  /// and the short-query rule's decode kernel where it has one.
  bool Forward = true;
  /// The backward (with a THD layout, the packed backward's too).
  bool Backward = false;
  /// Attention: paged decode, paged append and the merge of partial
  /// results. LinearAttention: the recurrent decode step.
  bool Decode = false;
};

/// One kernel a precompile compiled or found, and where it was found.
struct PrecompiledKernel {
  codegen::KernelSource Source;
  std::shared_ptr<const std::vector<char>> Cubin;
  /// "memory", "bundle", "disk" or "compiled" (cacheSourceName).
  std::string From;
};

/// The key a bundle files a kernel under: the source's readable prefix and
/// a SHA-256 of the source, its arch, the attnc version and the embedded
/// device library — not of NVRTC's version or options, so a program without
/// NVRTC computes it too.
std::string bundleKey(const codegen::KernelSource &Src);

/// Kernels by bundleKey. The file format (little-endian):
///
///   magic "ATTNCBN1", format version (uint32), attnc version (uint32
///   length + bytes), entry count (uint32), then per entry: key, arch name
///   and NVRTC version (each uint32 length + bytes), CUBIN (uint64 length +
///   bytes); last, the SHA-256 of every byte before it.
///
/// A bundle made by another attnc version is refused when read (its keys
/// could never match); so is one whose checksum, lengths or arch names are
/// wrong.
class KernelBundle {
public:
  /// Files \p Cubin, compiled from \p Src, under bundleKey(Src); a kernel
  /// already there is kept (the same key is the same CUBIN).
  void add(const codegen::KernelSource &Src, const std::string &NvrtcVersion,
           std::shared_ptr<const std::vector<char>> Cubin);
  /// Adds every kernel of \p Kernels (NVRTC's version read once).
  void add(const std::vector<PrecompiledKernel> &Kernels);
  const BundleEntry *find(const std::string &Key) const;
  /// The entries, in key order.
  std::vector<const BundleEntry *> entries() const;
  size_t size() const { return Entries.size(); }
  /// The bytes of all its CUBINs.
  uint64_t cubinBytes() const;

  /// Writes the bundle to \p Path atomically (a temporary, then a rename);
  /// UserError naming the path when it cannot.
  void write(const std::string &Path) const;
  /// Reads and checks a bundle; UserError naming \p Path and what is wrong.
  static KernelBundle read(const std::string &Path);
  /// The file's bytes (write()'s contents).
  std::string serialize() const;
  /// Parses serialize()'s bytes; \p Name names them in errors.
  static KernelBundle parse(const std::string &Bytes, const std::string &Name);

private:
  std::map<std::string, BundleEntry> Entries;
};

} // namespace attn::runtime

#endif
