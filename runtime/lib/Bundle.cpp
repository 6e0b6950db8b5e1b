// Kernel bundles: reading, checking and writing the file. bundleKey lives
// in KernelCache.cpp, beside the cache's own key.
#include "attn/runtime/Bundle.h"
#include "attn/codegen/Arch.h"

#include "AtomicFile.h"
#include "CacheFormat.h"
#include "NvrtcLibrary.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Errors.h"

#include "llvm/Support/MemoryBuffer.h"

#include <fmt/format.h>

#ifndef ATTNC_VERSION
#error "ATTNC_VERSION must be defined (attnc_compiler exports it)"
#endif

namespace attn::runtime {

namespace {

constexpr llvm::StringLiteral Magic = "ATTNCBN1";
constexpr uint32_t FormatVersion = 1;
constexpr llvm::StringLiteral AttncVersion = ATTNC_VERSION;
constexpr size_t DigestSize = 32;

void appendString32(std::string &Out, llvm::StringRef S) {
  appendLE<uint32_t>(Out, uint32_t(S.size()));
  Out += S;
}

/// Reads fields front to back; every read checks the bytes left, so a
/// length field can never reach past the end.
class Reader {
public:
  Reader(llvm::StringRef Bytes, const std::string &Name)
      : Bytes(Bytes), Name(Name) {}

  [[noreturn]] void fail(const std::string &What) const {
    throw UserError(fmt::format("bundle '{}': {}", Name, What));
  }
  llvm::StringRef take(uint64_t N, const char *What) {
    if (N > Bytes.size() - At)
      fail(fmt::format("truncated: {} needs {} bytes at offset {}, {} are "
                       "left",
                       What, N, At, Bytes.size() - At));
    llvm::StringRef Out = Bytes.substr(At, N);
    At += N;
    return Out;
  }
  uint32_t u32(const char *What) {
    return llvm::support::endian::read32le(take(4, What).data());
  }
  uint64_t u64(const char *What) {
    return llvm::support::endian::read64le(take(8, What).data());
  }
  llvm::StringRef string32(const char *What) { return take(u32(What), What); }
  bool done() const { return At == Bytes.size(); }
  size_t offset() const { return At; }

private:
  llvm::StringRef Bytes;
  const std::string &Name;
  size_t At = 0;
};

} // namespace

void KernelBundle::add(const codegen::KernelSource &Src,
                       const std::string &NvrtcVersion,
                       std::shared_ptr<const std::vector<char>> Cubin) {
  if (!Cubin || Cubin->empty())
    throw InternalError("KernelBundle::add: no CUBIN for " + Src.Key);
  std::string Key = bundleKey(Src);
  Entries.try_emplace(Key, BundleEntry{Key, Src.Arch, NvrtcVersion,
                                       std::move(Cubin)});
}

void KernelBundle::add(const std::vector<PrecompiledKernel> &Kernels) {
  if (Kernels.empty())
    return;
  // Kernels a bundle supplied carry no NVRTC of this process: the version
  // stays unknown for them only if NVRTC cannot be loaded at all.
  std::string Version = nvrtcAvailable() ? nvrtcVersion() : "unknown";
  for (const PrecompiledKernel &K : Kernels)
    add(K.Source, Version, K.Cubin);
}

const BundleEntry *KernelBundle::find(const std::string &Key) const {
  auto It = Entries.find(Key);
  return It == Entries.end() ? nullptr : &It->second;
}

std::vector<const BundleEntry *> KernelBundle::entries() const {
  std::vector<const BundleEntry *> Out;
  for (const auto &[Key, E] : Entries)
    Out.push_back(&E);
  return Out;
}

uint64_t KernelBundle::cubinBytes() const {
  uint64_t Bytes = 0;
  for (const auto &[Key, E] : Entries)
    Bytes += E.Cubin->size();
  return Bytes;
}

std::string KernelBundle::serialize() const {
  std::string Out(Magic);
  appendLE<uint32_t>(Out, FormatVersion);
  appendString32(Out, AttncVersion);
  appendLE<uint32_t>(Out, uint32_t(Entries.size()));
  for (const auto &[Key, E] : Entries) {
    appendString32(Out, E.Key);
    appendString32(Out, archName(E.Arch));
    appendString32(Out, E.Nvrtc);
    appendLE<uint64_t>(Out, E.Cubin->size());
    Out.append(E.Cubin->data(), E.Cubin->size());
  }
  Out += sha256(Out);
  return Out;
}

KernelBundle KernelBundle::parse(const std::string &Bytes,
                                 const std::string &Name) {
  Reader R(Bytes, Name);
  if (Bytes.size() < Magic.size() ||
      llvm::StringRef(Bytes).substr(0, Magic.size()) != Magic)
    R.fail("not a kernel bundle (no \"ATTNCBN1\" at its start); expected a "
           "file `attnc bundle` wrote");
  if (Bytes.size() < Magic.size() + DigestSize)
    R.fail("truncated: " + std::to_string(Bytes.size()) + " bytes");
  llvm::StringRef Body(Bytes.data(), Bytes.size() - DigestSize);
  if (sha256(Body) != llvm::StringRef(Bytes).take_back(DigestSize))
    R.fail("checksum mismatch: the file is damaged or was cut short; make "
           "it again with `attnc bundle`");

  Reader Fields(Body, Name);
  Fields.take(Magic.size(), "magic");
  if (uint32_t V = Fields.u32("format version"); V != FormatVersion)
    R.fail(fmt::format("format version {}; this program reads version {}", V,
                       FormatVersion));
  llvm::StringRef Version = Fields.string32("attnc version");
  if (Version != AttncVersion)
    R.fail(fmt::format("made by attnc {}; this program is attnc {}, whose "
                       "kernels differ: make the bundle again with its "
                       "`attnc bundle`",
                       Version.str(), AttncVersion.str()));
  uint32_t Count = Fields.u32("entry count");
  KernelBundle Out;
  for (uint32_t I = 0; I < Count; ++I) {
    BundleEntry E;
    E.Key = Fields.string32("a key").str();
    llvm::StringRef Arch = Fields.string32("an arch");
    std::optional<GpuArch> A = archFromName(Arch);
    if (!A)
      R.fail(fmt::format("entry {} ({}): arch '{}'; expected {}", I, E.Key,
                         Arch.str(), archNamesText().str()));
    E.Arch = *A;
    E.Nvrtc = Fields.string32("an NVRTC version").str();
    uint64_t Size = Fields.u64("a CUBIN length");
    llvm::StringRef Cubin = Fields.take(Size, "a CUBIN");
    if (Cubin.empty())
      R.fail(fmt::format("entry {} ({}): an empty CUBIN", I, E.Key));
    E.Cubin = std::make_shared<const std::vector<char>>(Cubin.begin(),
                                                        Cubin.end());
    std::string Key = E.Key;
    if (!Out.Entries.try_emplace(Key, std::move(E)).second)
      R.fail(fmt::format("entry {}: key {} appears twice", I, Key));
  }
  if (!Fields.done())
    R.fail(fmt::format("{} bytes after the last of its {} entries",
                       Body.size() - Fields.offset(), Count));
  return Out;
}

KernelBundle KernelBundle::read(const std::string &Path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> Buffer =
      llvm::MemoryBuffer::getFile(Path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!Buffer)
    throw UserError(fmt::format("bundle '{}': cannot read it: {}", Path,
                                Buffer.getError().message()));
  return parse((*Buffer)->getBuffer().str(), Path);
}

void KernelBundle::write(const std::string &Path) const {
  std::string Bytes = serialize();
  if (std::error_code EC = writeFileAtomically(Path, {Bytes}))
    throw UserError(
        fmt::format("bundle '{}': cannot write it: {}", Path, EC.message()));
}

} // namespace attn::runtime
