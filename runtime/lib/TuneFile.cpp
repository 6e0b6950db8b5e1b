// The tune JSON file: schema, parsing, the per-process cache, and merged
// atomic writes under a sidecar file lock.
#include "attn/runtime/TuneFile.h"
#include "attn/codegen/Arch.h"

#include "AtomicFile.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/ir/Printer.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Skeleton.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <limits>
#include <map>
#include <mutex>
#include <type_traits>

namespace attn::runtime {

using nlohmann::json;

std::string ShapeBucket::str() const {
  return fmt::format("q{}.kv{}.bh{}", SeqQ, SeqKv, BatchHeads);
}

int64_t roundUpToPowerOfTwo(int64_t N) {
  return N <= 1 ? 1 : int64_t(llvm::PowerOf2Ceil(uint64_t(N)));
}

ShapeBucket shapeBucket(int64_t Batch, int64_t Heads, int64_t SeqQ,
                        int64_t SeqKv) {
  return {roundUpToPowerOfTwo(SeqQ), roundUpToPowerOfTwo(SeqKv),
          roundUpToPowerOfTwo(Batch * Heads)};
}

bool TuneKey::operator==(const TuneKey &O) const {
  return Device == O.Device && Arch == O.Arch && Nvrtc == O.Nvrtc &&
         Skeleton == O.Skeleton && Variant == O.Variant && Dtype == O.Dtype &&
         HeadDim == O.HeadDim && HeadDimV == O.HeadDimV && Bucket == O.Bucket;
}

std::string TuneKey::str() const {
  return fmt::format("device '{}', {}, NVRTC {}, {}, variant {}, {}, d{}/{}, "
                     "{}",
                     Device, Arch, Nvrtc, Skeleton, Variant.substr(0, 12),
                     std::string(dtypeName(Dtype)), HeadDim, HeadDimV, Bucket.str());
}

std::string variantKey(const CompiledDefinition &Def) {
  std::string Text = ir::toText(*Def.Graph);
  return llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(Text)),
                     /*LowerCase=*/true);
}

const TuneEntry *TuneFileData::find(const TuneKey &K) const {
  for (const TuneEntry &E : Entries)
    if (E.Key == K)
      return &E;
  if (!K.Nvrtc.empty())
    return nullptr;
  // No toolchain in the key: the caller runs kernels it cannot compile, so
  // an entry made with any NVRTC applies (its kernel comes from a bundle).
  for (const TuneEntry &E : Entries) {
    TuneKey Same = K;
    Same.Nvrtc = E.Key.Nvrtc;
    if (E.Key == Same)
      return &E;
  }
  return nullptr;
}

void TuneFileData::upsert(const TuneEntry &E) {
  for (TuneEntry &Old : Entries)
    if (Old.Key == E.Key) {
      Old = E;
      return;
    }
  Entries.push_back(E);
}

// ---- JSON ----------------------------------------------------------------

namespace {

json timingToJson(const TunedTiming &T) {
  return {{"config", T.Config}, {"ms", T.Ms}, {"tflops", T.Tflops}};
}

json entryToJson(const TuneEntry &E) {
  const TuneKey &K = E.Key;
  json Key = {{"device", K.Device},
              {"arch", K.Arch},
              {"nvrtc", K.Nvrtc},
              {"skeleton", K.Skeleton},
              {"variant", K.Variant},
              {"dtype", std::string(dtypeName(K.Dtype))},
              {"head_dim", K.HeadDim},
              {"head_dim_v", K.HeadDimV},
              {"bucket",
               {{"seq_q", K.Bucket.SeqQ},
                {"seq_kv", K.Bucket.SeqKv},
                {"batch_heads", K.Bucket.BatchHeads}}}};
  json RunnersUp = json::array();
  for (const TunedTiming &T : E.RunnersUp)
    RunnersUp.push_back(timingToJson(T));
  json J = {{"key", Key},
            {"definition", E.Definition},
            {"config", E.Best.Config},
            {"ms", E.Best.Ms},
            {"tflops", E.Best.Tflops},
            {"runners_up", RunnersUp},
            {"tune_seconds", E.TuneSeconds},
            {"tuned_at", E.TunedAt}};
  if (!E.Default.Config.empty())
    J["default"] = timingToJson(E.Default);
  // The timed shape, when the entry records one (entries made by hand or
  // by tests may not).
  if (E.Batch > 0)
    J["shape"] = {{"batch", E.Batch},
                  {"heads", E.Heads},
                  {"heads_kv", E.HeadsKv},
                  {"seq_q", E.SeqQ},
                  {"seq_kv", E.SeqKv},
                  {"layout", std::string(layoutName(E.TensorLayout))}};
  return J;
}

/// Reads fields of one JSON object; every failure names the file and the
/// JSON path of the field.
class FieldReader {
public:
  FieldReader(const json &Obj, std::string Where, std::string Path)
      : Obj(Obj), Where(std::move(Where)), Path(std::move(Path)) {
    if (!Obj.is_object())
      fail(this->Where, "expected an object");
  }

  const json &get(const char *Name) const {
    auto It = Obj.find(Name);
    if (It == Obj.end())
      fail(at(Name), "missing");
    return *It;
  }
  bool has(const char *Name) const { return Obj.contains(Name); }

  std::string string(const char *Name) const {
    const json &V = get(Name);
    if (!V.is_string())
      fail(at(Name), "expected a string");
    return V.get<std::string>();
  }
  /// The integer field \p Name, which must lie in [Min, Max] — checked on
  /// the value as JSON holds it (signed or unsigned 64-bit), before it is
  /// converted to T, so that no value is narrowed into range.
  template <typename T>
  T integer(const char *Name, T Min,
            T Max = std::numeric_limits<T>::max()) const {
    static_assert(std::is_signed_v<T>, "fields are signed integers");
    const json &V = get(Name);
    bool InRange = false;
    if (V.is_number_unsigned())
      InRange = Max >= 0 && V.get<uint64_t>() <= uint64_t(Max) &&
                (Min <= 0 || V.get<uint64_t>() >= uint64_t(Min));
    else if (V.is_number_integer())
      InRange = V.get<int64_t>() >= int64_t(Min) &&
                V.get<int64_t>() <= int64_t(Max);
    if (!InRange)
      fail(at(Name),
           fmt::format("expected an integer in [{}, {}]{}", Min, Max,
                       V.is_number_integer() ? ", got " + V.dump() : ""));
    return static_cast<T>(V.get<int64_t>());
  }
  double number(const char *Name) const {
    const json &V = get(Name);
    if (!V.is_number() || V.get<double>() < 0)
      fail(at(Name), "expected a non-negative number");
    return V.get<double>();
  }
  FieldReader object(const char *Name) const {
    return FieldReader(get(Name), at(Name), Path);
  }
  std::string at(const char *Name) const { return Where + "." + Name; }
  const std::string &path() const { return Path; }

  [[noreturn]] void fail(const std::string &Field,
                         const std::string &Why) const {
    throw InvalidArgument(
        fmt::format("tune file {}: {}: {}", Path, Field, Why));
  }

private:
  const json &Obj;
  std::string Where;
  std::string Path;
};

/// Why \p Config is not a configuration that \p K's skeleton can run for
/// K's dtype, head dims and arch, or empty: a tuned entry that would fail
/// at the first call (or, worse, launch another skeleton's kernel) is
/// refused when the file is read.
std::string configError(const TuneKey &K, const std::string &Config) {
  const Skeleton *S = findSkeleton(K.Skeleton);
  if (!S)
    return "unknown skeleton '" + K.Skeleton + "'; expected one of " +
           skeletonNames();
  std::optional<GpuArch> Arch = archFromName(K.Arch);
  if (!Arch)
    return "unknown arch '" + K.Arch + "'; expected " + archNamesText().str();
  try {
    KernelTarget T;
    T.Kind = S->kind();
    T.Dir = S->serves(Direction::Forward) ? Direction::Forward
                                          : Direction::Backward;
    T.Dtype = K.Dtype;
    T.HeadDim = K.HeadDim;
    T.HeadDimV = K.HeadDimV;
    T.Arch = *Arch;
    return S->configError(S->parse(Config), T);
  } catch (const UserError &E) {
    return E.what();
  }
}

TunedTiming timingFromJson(const FieldReader &R, const TuneKey &K) {
  TunedTiming T;
  T.Config = R.string("config");
  if (std::string Why = configError(K, T.Config); !Why.empty())
    R.fail(R.at("config"), Why);
  T.Ms = R.number("ms");
  T.Tflops = R.number("tflops");
  return T;
}

TuneEntry entryFromJson(const FieldReader &R) {
  TuneEntry E;
  FieldReader K = R.object("key");
  E.Key.Device = K.string("device");
  E.Key.Arch = K.string("arch");
  E.Key.Nvrtc = K.string("nvrtc");
  E.Key.Skeleton = K.string("skeleton");
  E.Key.Variant = K.string("variant");
  std::optional<DType> T = dtypeFromName(K.string("dtype"));
  if (!T || !isAttentionDtype(*T))
    K.fail(K.at("dtype"), "expected \"f16\" or \"bf16\"");
  E.Key.Dtype = *T;
  E.Key.HeadDim = K.integer<int>("head_dim", 1);
  E.Key.HeadDimV = K.integer<int>("head_dim_v", 1);
  FieldReader B = K.object("bucket");
  E.Key.Bucket = {B.integer<int64_t>("seq_q", 1),
                  B.integer<int64_t>("seq_kv", 1),
                  B.integer<int64_t>("batch_heads", 1)};
  E.Best = timingFromJson(R, E.Key);
  const json &Runners = R.get("runners_up");
  if (!Runners.is_array())
    R.fail(R.at("runners_up"), "expected an array");
  for (size_t I = 0; I < Runners.size(); ++I)
    E.RunnersUp.push_back(timingFromJson(FieldReader(
        Runners[I], R.at("runners_up") + fmt::format("[{}]", I), R.path()),
        E.Key));
  if (R.has("default"))
    E.Default = timingFromJson(R.object("default"), E.Key);
  // Informational fields: read when present.
  if (R.has("definition"))
    E.Definition = R.string("definition");
  if (R.has("shape")) {
    FieldReader S = R.object("shape");
    E.Batch = S.integer<int64_t>("batch", 1);
    E.Heads = S.integer<int64_t>("heads", 1);
    E.HeadsKv = S.integer<int64_t>("heads_kv", 1);
    E.SeqQ = S.integer<int64_t>("seq_q", 1);
    E.SeqKv = S.integer<int64_t>("seq_kv", 1);
    if (S.has("layout")) {
      std::optional<attn::Layout> L = layoutFromName(S.string("layout"));
      if (!L)
        S.fail(S.at("layout"), "expected \"bshd\" or \"bhsd\"");
      E.TensorLayout = *L;
    }
  }
  if (R.has("tune_seconds"))
    E.TuneSeconds = R.number("tune_seconds");
  if (R.has("tuned_at"))
    E.TunedAt = R.string("tuned_at");
  return E;
}

} // namespace

TuneFileData parseTuneFile(llvm::StringRef Text, const std::string &Path) {
  json J = json::parse(Text.begin(), Text.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (J.is_discarded())
    throw InvalidArgument(fmt::format(
        "tune file {}: not valid JSON; expected a tune file (docs/tuning.md)",
        Path));
  FieldReader Top(J, "$", Path);
  const json &Version = Top.get("version");
  if (!Version.is_number_integer())
    Top.fail("$.version", "expected an integer");
  // Compared as JSON holds it: an unsigned value read as int64_t could
  // wrap onto the version number.
  if (Version != json(TuneFileVersion))
    Top.fail("$.version",
             fmt::format("version {}; this attnc reads version {}",
                         Version.dump(), TuneFileVersion));
  const json &Entries = Top.get("entries");
  if (!Entries.is_array())
    Top.fail("$.entries", "expected an array");
  TuneFileData Data;
  for (size_t I = 0; I < Entries.size(); ++I)
    Data.Entries.push_back(entryFromJson(
        FieldReader(Entries[I], fmt::format("$.entries[{}]", I), Path)));
  return Data;
}

std::string serializeTuneFile(const TuneFileData &Data) {
  json Entries = json::array();
  for (const TuneEntry &E : Data.Entries)
    Entries.push_back(entryToJson(E));
  json J = {{"version", TuneFileVersion}, {"entries", Entries}};
  return J.dump(2) + "\n";
}

TuneFileData readTuneFile(const std::string &Path) {
  auto Buffer = llvm::MemoryBuffer::getFile(Path, /*IsText=*/true);
  if (!Buffer) {
    if (Buffer.getError() == std::errc::no_such_file_or_directory)
      return {};
    throw InvalidArgument(fmt::format("tune file {}: cannot read: {}", Path,
                                      Buffer.getError().message()));
  }
  return parseTuneFile((*Buffer)->getBuffer(), Path);
}

namespace {

/// An exclusive lock on "<Path>.lock", held for the object's lifetime.
/// llvm::sys::fs::lockFile takes a POSIX record lock, which excludes other
/// processes but not other threads of this one (and any close() of the file
/// in this process would drop it), so a process-wide mutex is held first:
/// one thread at a time opens, locks and closes lock files here.
/// The lock file is never removed: removing it would let a process that
/// opened the old one and one that creates a new one both hold "the" lock.
class SidecarLock {
public:
  explicit SidecarLock(const std::string &Path)
      : InProcess(processMutex()), LockPath(Path + ".lock") {
    if (std::error_code EC = llvm::sys::fs::openFileForReadWrite(
            LockPath, FD, llvm::sys::fs::CD_OpenAlways,
            llvm::sys::fs::OF_None))
      throw InvalidArgument(fmt::format("tune file {}: cannot open lock file "
                                        "{}: {}",
                                        Path, LockPath, EC.message()));
    std::error_code EC;
    do
      EC = llvm::sys::fs::lockFile(FD);
    while (EC == std::errc::interrupted);
    if (EC) {
      llvm::sys::Process::SafelyCloseFileDescriptor(FD);
      throw InvalidArgument(fmt::format("tune file {}: cannot lock {}: {}",
                                        Path, LockPath, EC.message()));
    }
  }
  ~SidecarLock() {
    (void)llvm::sys::fs::unlockFile(FD);
    llvm::sys::Process::SafelyCloseFileDescriptor(FD);
  }
  SidecarLock(const SidecarLock &) = delete;
  SidecarLock &operator=(const SidecarLock &) = delete;

private:
  static std::mutex &processMutex() {
    static std::mutex M;
    return M;
  }
  std::lock_guard<std::mutex> InProcess;
  std::string LockPath;
  int FD = -1;
};

} // namespace

void mergeIntoTuneFile(const std::string &Path,
                       const std::vector<TuneEntry> &New) {
  SidecarLock Lock(Path);
  // Read under the lock: whatever another writer renamed into place before
  // we got it is kept.
  TuneFileData Data = readTuneFile(Path);
  for (const TuneEntry &E : New)
    Data.upsert(E);
  std::string Text = serializeTuneFile(Data);
  if (std::error_code EC = writeFileAtomically(Path, {Text}))
    throw InvalidArgument(
        fmt::format("tune file {}: cannot write: {}", Path, EC.message()));
}

std::shared_ptr<const TuneFileData> cachedTuneFile(const std::string &Path) {
  struct Cached {
    bool Exists = false;
    llvm::sys::fs::UniqueID Id;
    llvm::sys::TimePoint<> Modified;
    uint64_t Size = 0;
    std::shared_ptr<const TuneFileData> Data;
  };
  static std::mutex Mutex;
  static std::map<std::string, Cached> Files;

  llvm::sys::fs::file_status St;
  bool Exists = !llvm::sys::fs::status(Path, St) &&
                llvm::sys::fs::exists(St);
  std::lock_guard<std::mutex> Guard(Mutex);
  Cached &C = Files[Path];
  // Every write renames a new file into place, so the file's identity
  // changes with its contents; mtime and size catch an edit in place.
  if (C.Data && C.Exists == Exists &&
      (!Exists || (C.Id == St.getUniqueID() &&
                   C.Modified == St.getLastModificationTime() &&
                   C.Size == St.getSize())))
    return C.Data;
  C.Data = std::make_shared<const TuneFileData>(
      Exists ? readTuneFile(Path) : TuneFileData());
  C.Exists = Exists;
  if (Exists) {
    C.Id = St.getUniqueID();
    C.Modified = St.getLastModificationTime();
    C.Size = St.getSize();
  }
  return C.Data;
}

} // namespace attn::runtime
