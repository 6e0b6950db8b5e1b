// The mean number of key blocks a query block visits under a block mask,
// known on the host for the choice of fwd_sm90's persistent form
// (persistentWanted) where the mask analysis cannot count the visits (masks
// that read tensors): at once for lists the user gave (built on the host),
// or, for lists classified on the GPU, from their per-row counts copied
// back behind the classification and read once that copy is done, without
// waiting for it.
#ifndef ATTN_RUNTIME_LISTVISITS_H
#define ATTN_RUNTIME_LISTVISITS_H

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace attn::runtime {

class ListVisits {
public:
  ListVisits() = default;
  ~ListVisits();
  ListVisits(const ListVisits &) = delete;
  ListVisits &operator=(const ListVisits &) = delete;

  /// Lists built on the host: their mean is known now.
  void setKnown(const std::vector<int32_t> &Counts);
  /// Lists classified on \p Stream into \p Count (\p Rows per-row visit
  /// counts): forgets the mean of the lists before and copies the counts
  /// back behind the classification. Nothing is copied (the mean stays
  /// unknown until the next classification) while \p Stream is being
  /// captured into a graph (the copy would run only with the graph) or
  /// while the copy of an earlier classification is still in flight (two
  /// copies into one buffer from different streams would race).
  void copyBack(const int *Count, int64_t Rows, CUstream Stream);
  /// The mean visits a row of the latest lists, where known: never waits
  /// for the GPU (nullopt while the copy is in flight).
  std::optional<double> mean() const;

private:
  // mean() completes what copyBack started: a block mask is read as const
  // by the calls that use it, possibly from several threads.
  mutable std::mutex Lock;
  mutable std::optional<double> Mean;
  int32_t *Host = nullptr;
  size_t Capacity = 0; // rows Host holds
  int64_t Rows = 0;
  CUevent Done = nullptr;
  /// A copy was issued and its event not yet seen complete.
  mutable bool InFlight = false;
  /// That copy's counts are those of the latest lists.
  bool Current = false;
};

/// How many forward launches the generated backend made with fwd_sm90's
/// persistent kernel in this process (a test's proof of the choice).
uint64_t persistentForwardLaunches();
void countPersistentForwardLaunch();

} // namespace attn::runtime

#endif
