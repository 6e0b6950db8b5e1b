// PerStream<T>: one T for each CUDA stream a runner is called on, so that
// calls on different streams never share scratch memory.
#ifndef ATTN_RUNTIME_PERSTREAM_H
#define ATTN_RUNTIME_PERSTREAM_H

#include "DeviceArena.h"

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
  /// Whether a stream is being captured into a CUDA graph.
  using CapturePredicate = std::function<bool(CUstream)>;

  /// \p Make builds the entry of a stream seen for the first time;
  /// \p Capturing says whether a stream is being captured (the driver's
  /// cuStreamIsCapturing by default).
  explicit PerStream(std::function<std::unique_ptr<T>()> Make,
                     CapturePredicate Capturing = streamIsCapturing)
      : Make(std::move(Make)), Capturing(std::move(Capturing)) {}

  /// The entry of \p Stream (the null stream is a stream like the others).
  /// A stream being captured that has none takes over the entry used last
  /// instead of making one: nothing may be allocated during a capture, and
  /// the documented way to capture (a warm-up call, then the capture on the
  /// capturing library's own stream, as torch.cuda.graph does) sizes that
  /// entry in the warm-up. The entry then belongs to the capture stream
  /// alone: the graph's replays use its memory, so the stream it came from
  /// makes a new one at its next call (outside the capture) rather than
  /// sharing, growing or freeing the graph's memory from another stream —
  /// or from another thread, whose stream may have been the last.
  T &get(CUstream Stream) {
    auto It = Entries.find(Stream);
    if (It == Entries.end()) {
      if (HasLast && Capturing(Stream)) {
        std::unique_ptr<T> Taken = std::move(Entries[LastStream]);
        Entries.erase(LastStream);
        It = Entries.try_emplace(Stream, std::move(Taken)).first;
      } else {
        It = Entries.try_emplace(Stream, Make()).first;
      }
    }
    LastStream = Stream;
    HasLast = true;
    return *It->second;
  }

  /// How many entries there are (one a stream that has one).
  size_t size() const { return Entries.size(); }

private:
  std::function<std::unique_ptr<T>()> Make;
  CapturePredicate Capturing;
  llvm::DenseMap<CUstream, std::unique_ptr<T>> Entries;
  /// The stream of the last call (the null stream is a valid one).
  CUstream LastStream = nullptr;
  bool HasLast = false;
};

/// A PerStream of objects constructed from \p Args (copied into the maker).
template <typename T, typename... Args>
PerStream<T> perStream(Args... A) {
  return PerStream<T>([=] { return std::make_unique<T>(A...); });
}

} // namespace attn::runtime

#endif
