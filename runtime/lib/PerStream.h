// PerStream<T>: one T for each CUDA stream a runner is called on, so that
// calls on different streams never share scratch memory.
#ifndef ATTN_RUNTIME_PERSTREAM_H
#define ATTN_RUNTIME_PERSTREAM_H

#include "llvm/ADT/DenseMap.h"

#include <cuda.h>

#include <functional>
#include <memory>

namespace attn::runtime {

/// Scratch a runner keeps between calls (a DeviceArena, the block lists it
/// last computed) is only safe to reuse by a call that the stream orders
/// after the one that wrote it. Keeping one per stream gives exactly that:
/// a call on stream S finds what earlier calls on S left, and calls on
/// other streams, which may run on the GPU at the same time, have their
/// own. Entries are made on first use and live as long as the runner (a
/// handful of streams in practice; a stream handle that the driver reuses
/// after cuStreamDestroy finds the old entry, which its stream order then
/// covers only once the destroyed stream's work is done — callers destroy
/// streams after synchronising them).
///
/// Not synchronised itself: the owning object serialises its calls (see
/// Attention's call lock).
template <typename T> class PerStream {
public:
  /// \p Make builds the entry of a stream seen for the first time.
  explicit PerStream(std::function<std::unique_ptr<T>()> Make)
      : Make(std::move(Make)) {}

  /// The entry of \p Stream (the null stream is a stream like the others).
  T &get(CUstream Stream) {
    std::unique_ptr<T> &E = Entries[Stream];
    if (!E)
      E = Make();
    return *E;
  }

  /// How many streams have an entry.
  size_t size() const { return Entries.size(); }

private:
  std::function<std::unique_ptr<T>()> Make;
  llvm::DenseMap<CUstream, std::unique_ptr<T>> Entries;
};

/// A PerStream of objects constructed from \p Args (copied into the maker).
template <typename T, typename... Args>
PerStream<T> perStream(Args... A) {
  return PerStream<T>([=] { return std::make_unique<T>(A...); });
}

} // namespace attn::runtime

#endif
