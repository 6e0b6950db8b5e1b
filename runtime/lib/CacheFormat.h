// Byte-level helpers the kernel cache's entries and bundles share:
// little-endian fields and SHA-256 digests.
#ifndef ATTN_RUNTIME_CACHEFORMAT_H
#define ATTN_RUNTIME_CACHEFORMAT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/SHA256.h"

#include <string>

namespace attn::runtime {

template <typename T> void appendLE(std::string &Out, T V) {
  char Bytes[sizeof(T)];
  llvm::support::endian::write<T, llvm::support::little,
                               llvm::support::unaligned>(Bytes, V);
  Out.append(Bytes, sizeof(T));
}

/// The 32-byte SHA-256 of \p Data, as raw bytes.
inline std::string sha256(llvm::StringRef Data) {
  std::array<uint8_t, 32> Digest = llvm::SHA256::hash(
      llvm::ArrayRef<uint8_t>(Data.bytes_begin(), Data.bytes_end()));
  return std::string(Digest.begin(), Digest.end());
}

/// Hashes a field with its length first, so that no two different field
/// sequences hash the same bytes ("ab","c" vs "a","bc").
inline void hashField(llvm::SHA256 &H, llvm::StringRef Field) {
  std::string Length;
  appendLE<uint64_t>(Length, Field.size());
  H.update(Length);
  H.update(Field);
}

} // namespace attn::runtime

#endif
