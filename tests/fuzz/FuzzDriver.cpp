// attnc_fuzz: a deterministic mutation driver for the fuzz targets, so that
// CI runs them reproducibly without libFuzzer. A fixed seed, mutations of a
// committed corpus (bit flips, byte insert/delete/copy, splices, interesting
// numbers and JSON tokens), N executions per target within a time bound.
// Exits 1 on the first failure, printing the input in hex.
#include "FuzzTargets.h"

#include "Examples.h"
#include "attn/dsl/Trace.h"
#include "attn/ir/Serialize.h"
#include "attn/runtime/TuneFile.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <sanitizer/common_interface_defs.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#ifndef ATTNC_FUZZ_CORPUS_DIR
#error "ATTNC_FUZZ_CORPUS_DIR must name tests/fuzz/corpus"
#endif

using namespace attn;
using namespace attn::fuzz;
using Bytes = std::vector<uint8_t>;

// Leaks fail the run; an abort() (a failed assert) is reported like a crash.
extern "C" const char *__asan_default_options() {
  return "handle_abort=1:detect_leaks=1";
}

namespace {

constexpr size_t MaxInputSize = 1 << 16;

/// The input being run, for the sanitizer's death callback.
const char *CurrentTarget = "";
const Bytes *CurrentInput = nullptr;

void printHex(llvm::raw_ostream &OS, const Bytes &In) {
  OS << "input (hex, " << In.size() << " bytes): "
     << llvm::toHex(llvm::ArrayRef<uint8_t>(In), /*LowerCase=*/true) << "\n";
}

void writeArtifact(const std::string &Name, const Bytes &In);

void onSanitizerDeath() {
  if (!CurrentInput)
    return;
  llvm::errs() << "fuzz " << CurrentTarget << ": FAILURE (sanitizer report above)\n";
  printHex(llvm::errs(), *CurrentInput);
  llvm::errs().flush();
  writeArtifact(std::string("failure-") + CurrentTarget, *CurrentInput);
}

Bytes readBytes(const std::string &Path) {
  auto Buffer = llvm::MemoryBuffer::getFile(Path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!Buffer) {
    llvm::errs() << "attnc_fuzz: cannot read " << Path << "\n";
    std::exit(2);
  }
  llvm::StringRef S = (*Buffer)->getBuffer();
  return Bytes(S.bytes_begin(), S.bytes_end());
}

/// The files of \p Dir, sorted by name (a fixed order for a fixed seed).
std::vector<Bytes> readCorpus(const std::string &Dir) {
  std::vector<std::string> Paths;
  std::error_code EC;
  for (llvm::sys::fs::directory_iterator I(Dir, EC), End; !EC && I != End;
       I.increment(EC))
    if (I->type() == llvm::sys::fs::file_type::regular_file)
      Paths.push_back(I->path());
  std::sort(Paths.begin(), Paths.end());
  std::vector<Bytes> Corpus;
  for (const std::string &P : Paths)
    Corpus.push_back(readBytes(P));
  if (Corpus.empty())
    Corpus.push_back({});
  return Corpus;
}

// Tokens that break parsers and range checks: i32/u32/i64 edges, huge and
// tiny doubles, the non-finite spellings (JSON has none), JSON structure.
const char *const TextTokens[] = {
    "0", "-1", "-0", "1", "2147483647", "2147483648", "-2147483649",
    "4294967424", "9223372036854775808", "18446744073709551616", "1e308",
    "-1e308", "1e-400", "1e400", "0.1", "NaN", "nan", "-nan", "Infinity",
    "-inf", "\"inf\"", "\"-inf\"", "\"nan\"", "\"-nan\"", "null", "true",
    "false", "[]", "{}", "\"\"", "\"x\"", "[", "{", "}", "]", ",", ":", "\"",
    "\\u0000", "\\ud800"};
const uint64_t BinaryInts[] = {0, 1, 0xff, 0x7f, 0x80, 0xffff, 0x7fffffff,
                               0x80000000, 0xffffffff, 0x100000080,
                               0x7fffffffffffffff, 0x8000000000000000,
                               0xffffffffffffffff};

class Mutator {
public:
  explicit Mutator(uint64_t Seed) : Rng(Seed) {}
  size_t below(size_t N) { return N ? Rng() % N : 0; }

  void mutate(Bytes &In, const std::vector<Bytes> &Pool) {
    for (size_t I = 0, N = 1 + below(4); I < N; ++I)
      once(In, Pool);
    if (In.size() > MaxInputSize)
      In.resize(MaxInputSize);
  }

private:
  std::mt19937_64 Rng;

  void insert(Bytes &In, size_t At, const uint8_t *Data, size_t Size) {
    In.insert(In.begin() + std::min(At, In.size()), Data, Data + Size);
  }

  void once(Bytes &In, const std::vector<Bytes> &Pool) {
    size_t At = below(In.size() + 1);
    switch (below(10)) {
    case 0: // flip a bit
      if (!In.empty())
        In[below(In.size())] ^= uint8_t(1u << below(8));
      return;
    case 1: // set a byte
      if (!In.empty())
        In[below(In.size())] = uint8_t(Rng());
      return;
    case 2: { // insert random bytes
      Bytes New(1 + below(4));
      for (uint8_t &B : New)
        B = uint8_t(Rng());
      insert(In, At, New.data(), New.size());
      return;
    }
    case 3: { // delete a range
      if (In.empty())
        return;
      size_t Begin = below(In.size());
      size_t Len = 1 + below(std::min<size_t>(In.size() - Begin, 16));
      In.erase(In.begin() + Begin, In.begin() + Begin + Len);
      return;
    }
    case 4: { // splice: a prefix of this input, a suffix of another
      const Bytes &Other = Pool[below(Pool.size())];
      size_t From = below(Other.size() + 1);
      In.resize(std::min(At, In.size()));
      In.insert(In.end(), Other.begin() + From, Other.end());
      return;
    }
    case 5: { // insert a text token
      const char *T = TextTokens[below(std::size(TextTokens))];
      insert(In, At, reinterpret_cast<const uint8_t *>(T), std::strlen(T));
      return;
    }
    case 6: { // replace a run of number characters by a token
      if (In.empty())
        return;
      size_t Begin = below(In.size());
      size_t End = Begin;
      while (End < In.size() &&
             (std::isdigit(In[End]) || In[End] == '-' || In[End] == '.' ||
              In[End] == 'e'))
        ++End;
      In.erase(In.begin() + Begin, In.begin() + End);
      const char *T = TextTokens[below(std::size(TextTokens))];
      insert(In, Begin, reinterpret_cast<const uint8_t *>(T), std::strlen(T));
      return;
    }
    case 7: { // overwrite with a little-endian interesting integer
      uint64_t V = BinaryInts[below(std::size(BinaryInts))];
      size_t Width = size_t(1) << below(4);
      for (size_t I = 0; I < Width && At + I < In.size(); ++I)
        In[At + I] = uint8_t(V >> (8 * I));
      return;
    }
    case 8: { // copy a chunk elsewhere
      if (In.empty())
        return;
      size_t Begin = below(In.size());
      size_t Len = 1 + below(std::min<size_t>(In.size() - Begin, 32));
      Bytes Chunk(In.begin() + Begin, In.begin() + Begin + Len);
      insert(In, At, Chunk.data(), Chunk.size());
      return;
    }
    case 9: // truncate
      In.resize(std::min(At, In.size()));
      return;
    }
  }
};

struct Counts {
  size_t Runs = 0, Accepted = 0, Rejected = 0, Internal = 0;
  /// The first input of each distinct InternalError message (at most 8).
  std::vector<std::pair<std::string, Bytes>> Internals;
};

/// Where failing inputs and internal-error inputs are written (--artifacts).
std::string ArtifactDir;

void writeArtifact(const std::string &Name, const Bytes &In) {
  if (ArtifactDir.empty())
    return;
  llvm::sys::fs::create_directories(ArtifactDir);
  std::error_code EC;
  llvm::raw_fd_ostream OS(ArtifactDir + "/" + Name, EC);
  if (!EC)
    OS.write(reinterpret_cast<const char *>(In.data()), In.size());
}

[[noreturn]] void fail(const Target &T, const Counts &C, const Bytes &In,
                       llvm::StringRef What) {
  llvm::errs() << "fuzz " << T.Name << ": FAILURE after " << C.Runs
               << " executions: " << What << "\n";
  printHex(llvm::errs(), In);
  writeArtifact(std::string("failure-") + T.Name, In);
  std::exit(1);
}

/// Runs \p In; on a failure prints it and exits 1.
void runOne(const Target &T, const Bytes &In, Counts &C) {
  CurrentTarget = T.Name;
  CurrentInput = &In;
  Outcome O;
  try {
    O = T.Run(In.data(), In.size());
  } catch (const std::exception &E) {
    fail(T, C, In, E.what());
  } catch (...) {
    fail(T, C, In, "a non-standard exception");
  }
  CurrentInput = nullptr;
  ++C.Runs;
  switch (O) {
  case Outcome::Accepted:
    ++C.Accepted;
    return;
  case Outcome::Rejected:
    ++C.Rejected;
    return;
  case Outcome::Internal: {
    ++C.Internal;
    const std::string &Message = lastError();
    for (const auto &[Seen, Input] : C.Internals)
      if (Seen == Message)
        return;
    if (C.Internals.size() < 8) {
      writeArtifact("internal-" + std::string(T.Name) + "-" +
                        std::to_string(C.Internals.size()),
                    In);
      C.Internals.emplace_back(Message, In);
    }
    return;
  }
  }
}

struct Options {
  std::vector<std::string> Targets;
  size_t Runs = 10000;
  double Seconds = 60;
  uint64_t Seed = 20261126;
  std::string CorpusRoot = ATTNC_FUZZ_CORPUS_DIR;
};

void fuzzTarget(const Target &T, const Options &Opt) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point Start = Clock::now();
  auto Elapsed = [&] {
    return std::chrono::duration<double>(Clock::now() - Start).count();
  };
  std::vector<Bytes> Pool = readCorpus(Opt.CorpusRoot + "/" + T.Name);
  size_t Seeds = Pool.size();
  Counts C;
  // Every seed as it is, then mutants. Inputs that go all the way through
  // are kept as parents (a cheap stand-in for coverage feedback).
  for (size_t I = 0; I < Seeds; ++I)
    runOne(T, Pool[I], C);
  Mutator M(Opt.Seed ^ std::hash<std::string>()(T.Name));
  while (C.Runs < Opt.Runs && Elapsed() < Opt.Seconds) {
    Bytes In = Pool[M.below(Pool.size())];
    M.mutate(In, Pool);
    size_t AcceptedBefore = C.Accepted;
    runOne(T, In, C);
    if (C.Accepted != AcceptedBefore && Pool.size() < Seeds + 256)
      Pool.push_back(std::move(In));
  }
  llvm::outs() << "fuzz " << T.Name << ": " << C.Runs << " executions, 0 failures ("
               << C.Accepted << " accepted, " << C.Rejected << " rejected, "
               << C.Internal << " internal errors) in "
               << llvm::format("%.1f", Elapsed()) << " s\n";
  // Clean rejections, but a bug all the same: a user's input should meet a
  // UserError. Listed so that they are seen and fixed.
  for (const auto &[Message, Input] : C.Internals) {
    llvm::outs() << "  internal error: " << Message << "\n  ";
    printHex(llvm::outs(), Input);
  }
  llvm::outs().flush();
}

/// A tune file of two entries, one with runners-up and a default timing.
std::string sampleTuneFile() {
  runtime::TuneEntry E;
  E.Key = {"NVIDIA H200", "sm_90a", "13.0", "fwd_sm80", std::string(64, 'a'),
           DType::BF16, 128, 64, runtime::shapeBucket(4, 32, 4096, 4096)};
  E.Definition = "mha";
  E.Batch = 4;
  E.Heads = 32;
  E.HeadsKv = 8;
  E.SeqQ = E.SeqKv = 4096;
  E.TensorLayout = Layout::BHSD;
  E.Best = {"m128n64w4s2", 1.25, 300.5};
  E.RunnersUp = {{"m256n64w8s2", 1.5, 250.25}};
  E.Default = {"m256n64w8s2", 1.5, 250.25};
  E.TuneSeconds = 12.5;
  E.TunedAt = "2026-11-26T10:00:00Z";
  runtime::TuneFileData Data;
  Data.Entries.push_back(E);
  E.Key.Skeleton = "linear_chunk";
  E.Key.Bucket = runtime::shapeBucket(1, 1, 1000, 1000);
  E.Best = {"c64v64w4b8", 0.5, 10};
  E.RunnersUp.clear();
  E.Default = {};
  Data.Entries.push_back(E);
  return runtime::serializeTuneFile(Data);
}

/// Writes the seeds that come from the code (the examples' traced IR JSON,
/// a tune file, a kernel-cache entry) under \p Root.
void makeSeeds(const std::string &Root) {
  auto Write = [](const std::string &Path, llvm::StringRef Text) {
    llvm::sys::fs::create_directories(llvm::sys::path::parent_path(Path));
    std::error_code EC;
    llvm::raw_fd_ostream OS(Path, EC);
    if (EC) {
      llvm::errs() << "attnc_fuzz: cannot write " << Path << "\n";
      std::exit(2);
    }
    OS << Text;
  };
  Write(Root + "/ir_json/mha.json", ir::saveJSON(*dsl::trace(examples::mha())));
  Write(Root + "/ir_json/softcap_learnable.json",
        ir::saveJSON(*dsl::trace(examples::softcapLearnable())));
  Write(Root + "/ir_json/mamba2.json",
        ir::saveJSON(*dsl::trace(examples::mamba2())));
  Write(Root + "/tune_file/two_entries.json", sampleTuneFile());
  Write(Root + "/kernel_cache/valid_entry.bin", kernelCacheSeedEntry());
}

[[noreturn]] void usage() {
  llvm::errs()
      << "usage: attnc_fuzz [--target NAME]... [--runs N] [--seconds S]\n"
         "                  [--seed N] [--corpus DIR] [--artifacts DIR]\n"
         "       attnc_fuzz --replay NAME FILE...   (says what each did)\n"
         "       attnc_fuzz --make-seeds DIR\n"
         "Runs each target (default: ir_json tune_file kernel_cache dsl) on its\n"
         "corpus DIR/<target>/ and N mutants (default 10000) within S seconds\n"
         "(default 60) per target; exits 1 on the first failure. --artifacts:\n"
         "write the failing input and each distinct internal error's input\n"
         "there.\n";
  std::exit(2);
}

} // namespace

int main(int argc, char **argv) {
  __sanitizer_set_death_callback(onSanitizerDeath);
  Options Opt;
  for (int I = 1; I < argc; ++I) {
    llvm::StringRef A = argv[I];
    auto Value = [&]() -> llvm::StringRef {
      if (I + 1 >= argc)
        usage();
      return argv[++I];
    };
    if (A == "--target") {
      Opt.Targets.push_back(Value().str());
    } else if (A == "--runs") {
      if (Value().getAsInteger(10, Opt.Runs))
        usage();
    } else if (A == "--seconds") {
      if (Value().getAsDouble(Opt.Seconds))
        usage();
    } else if (A == "--seed") {
      if (Value().getAsInteger(10, Opt.Seed))
        usage();
    } else if (A == "--artifacts") {
      ArtifactDir = Value().str();
    } else if (A == "--corpus") {
      Opt.CorpusRoot = Value().str();
    } else if (A == "--make-seeds") {
      makeSeeds(Value().str());
      return 0;
    } else if (A == "--replay") {
      const Target *T = findTarget(Value().str().c_str());
      if (!T || I + 1 >= argc)
        usage();
      Counts C;
      for (++I; I < argc; ++I) {
        size_t Accepted = C.Accepted;
        runOne(*T, readBytes(argv[I]), C);
        llvm::outs() << argv[I] << ": "
                     << (C.Accepted != Accepted ? "accepted"
                                                : "rejected: " + lastError())
                     << "\n";
      }
      llvm::outs() << "fuzz " << T->Name << ": replayed " << C.Runs
                   << " inputs, 0 failures (" << C.Internal
                   << " internal errors)\n";
      return 0;
    } else {
      usage();
    }
  }
  if (Opt.Targets.empty())
    Opt.Targets = {"ir_json", "tune_file", "kernel_cache", "dsl"};
  for (const std::string &Name : Opt.Targets) {
    const Target *T = findTarget(Name.c_str());
    if (!T) {
      llvm::errs() << "attnc_fuzz: unknown target '" << Name << "'\n";
      return 2;
    }
    fuzzTarget(*T, Opt);
  }
  return 0;
}
