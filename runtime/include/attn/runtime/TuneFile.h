// The tune JSON file (docs/tuning.md): tuned tile configurations keyed by
// device, toolchain, variant, dtype, head dims and shape bucket; read once per
// process per file version, written atomically and merged under a lock.
#ifndef ATTN_RUNTIME_TUNEFILE_H
#define ATTN_RUNTIME_TUNEFILE_H

#include "attn/Pipeline.h"
#include "attn/dsl/Problem.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attn::runtime {

/// The schema version this attnc reads and writes.
inline constexpr int TuneFileVersion = 1;

/// Sizes of a problem: q's batch, heads and length; k/v heads and length.
struct TuneShape {
  int64_t Batch = 1, Heads = 1, HeadsKv = 1, SeqQ = 1, SeqKv = 1;
};

/// Problem sizes that share a tuned configuration: each sequence length
/// rounded up to a power of two, and batch x heads rounded up likewise.
struct ShapeBucket {
  int64_t SeqQ = 0, SeqKv = 0, BatchHeads = 0;
  bool operator==(const ShapeBucket &O) const {
    return SeqQ == O.SeqQ && SeqKv == O.SeqKv && BatchHeads == O.BatchHeads;
  }
  /// "q4096.kv4096.bh128"
  std::string str() const;
};

/// The smallest power of two >= \p N (1 for N <= 1; N at most 2^62).
int64_t roundUpToPowerOfTwo(int64_t N);
ShapeBucket shapeBucket(int64_t Batch, int64_t Heads, int64_t SeqQ,
                        int64_t SeqKv);

/// What an entry must match to be used. A file may hold entries of other
/// devices, toolchains or variants: those are stale here and never applied.
struct TuneKey {
  std::string Device;   ///< "NVIDIA H200"
  std::string Arch;     ///< "sm_90a"
  std::string Nvrtc;    ///< "13.0"; empty where NVRTC cannot be loaded
  std::string Skeleton; ///< a skeleton table name (Skeleton.h)
  std::string Variant;  ///< variantKey() of the analysed IR
  DType Dtype = DType::F16;
  int HeadDim = 0, HeadDimV = 0;
  ShapeBucket Bucket;
  bool operator==(const TuneKey &O) const;
  /// One line naming every field, for messages.
  std::string str() const;
};

/// The hex SHA-256 of the analysed IR's text form (ir::toText): any change
/// to the definition — its functions, mask, inputs, name — changes it.
std::string variantKey(const CompiledDefinition &Def);

/// One timed configuration.
struct TunedTiming {
  std::string Config; ///< FwdConfig::str()
  double Ms = 0;
  double Tflops = 0;
};

struct TuneEntry {
  TuneKey Key;
  std::string Definition; ///< the definition's name, for readers
  /// The shape that was timed (one member of the bucket).
  int64_t Batch = 0, Heads = 0, HeadsKv = 0, SeqQ = 0, SeqKv = 0;
  attn::Layout TensorLayout = attn::Layout::BSHD;
  TunedTiming Best;
  /// The next fastest configurations that passed, fastest first.
  std::vector<TunedTiming> RunnersUp;
  /// The default configuration's timing on the same problem, when it was
  /// timed (Config empty otherwise).
  TunedTiming Default;
  double TuneSeconds = 0;
  std::string TunedAt; ///< UTC, ISO 8601
};

struct TuneFileData {
  std::vector<TuneEntry> Entries;
  /// The entry for \p K, or nullptr. A key with an empty Nvrtc (a process
  /// without NVRTC, which runs bundled kernels) matches an entry of any
  /// toolchain that agrees on every other field: exact matches first.
  const TuneEntry *find(const TuneKey &K) const;
  /// Adds \p E, replacing an entry with the same key.
  void upsert(const TuneEntry &E);
};

/// Parses a tune file's text. InvalidArgument naming \p Path, the field's
/// JSON path and the problem (not JSON, no or another "version", a field
/// missing, of the wrong type or, for integers, out of range) when the text
/// is not a version-1 tune file.
TuneFileData parseTuneFile(llvm::StringRef Text, const std::string &Path);
/// The JSON text of \p Data (2-space indented, ending in a newline).
std::string serializeTuneFile(const TuneFileData &Data);

/// Reads \p Path: an empty TuneFileData when it does not exist;
/// InvalidArgument when it cannot be read or parsed.
TuneFileData readTuneFile(const std::string &Path);

/// Adds \p New to the file at \p Path without losing what other processes
/// or threads add meanwhile: takes an exclusive lock on "<Path>.lock",
/// re-reads the file, upserts \p New, writes a temporary and renames it
/// over \p Path, then unlocks. InvalidArgument if the existing file is not
/// a tune file (it is left alone) or cannot be written.
void mergeIntoTuneFile(const std::string &Path,
                       const std::vector<TuneEntry> &New);

/// The file at \p Path as this process last read it, re-read when its
/// modification time or size changed. An absent file gives empty data.
/// Thread-safe; errors as readTuneFile.
std::shared_ptr<const TuneFileData> cachedTuneFile(const std::string &Path);

} // namespace attn::runtime

#endif
