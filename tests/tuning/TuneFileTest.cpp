// The tune file: buckets, the JSON schema round trip, errors on files that
// are not tune files, the per-process cache, and concurrent writers.
#include "TempDir.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/TuneFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <thread>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;

namespace {

struct TempDir : attn::testing::TempDir {
  TempDir() : attn::testing::TempDir("attnc-tune") {}
  std::string file(const std::string &Name) const { return Path + "/" + Name; }
};

void writeText(const std::string &Path, const std::string &Text) {
  std::error_code EC;
  llvm::raw_fd_ostream OS(Path, EC);
  REQUIRE_FALSE(EC);
  OS << Text;
}

TuneEntry sampleEntry(int64_t SeqQ = 4096,
                      const std::string &Config = "m128n64w4s2") {
  TuneEntry E;
  E.Key.Device = "NVIDIA H200";
  E.Key.Arch = "sm_90a";
  E.Key.Nvrtc = "13.0";
  E.Key.Skeleton = "fwd_sm80";
  E.Key.Variant = std::string(64, 'a');
  E.Key.Dtype = DType::BF16;
  E.Key.HeadDim = 128;
  E.Key.HeadDimV = 64;
  E.Key.Bucket = shapeBucket(4, 32, SeqQ, 4096);
  E.Definition = "mha";
  E.Batch = 4;
  E.Heads = 32;
  E.HeadsKv = 8;
  E.SeqQ = SeqQ;
  E.SeqKv = 4096;
  E.TensorLayout = Layout::BHSD;
  E.Best = {Config, 1.25, 300.5};
  E.RunnersUp = {{"m256n64w8s2", 1.5, 250.25}, {"m64n64w4s2", 2.0, 187.5}};
  E.Default = {"m256n64w8s2", 1.5, 250.25};
  E.TuneSeconds = 12.5;
  E.TunedAt = "2026-11-26T10:00:00Z";
  return E;
}

std::string validFileWith(const std::string &EntryJsonTail) {
  return R"({"version": 1, "entries": [{"key": {"device": "D", "arch": "sm_80",
    "nvrtc": "13.0", "skeleton": "fwd_sm80", "variant": "v", "dtype": "f16",
    "head_dim": 64, "head_dim_v": 64,
    "bucket": {"seq_q": 128, "seq_kv": 128, "batch_heads": 2}})" +
         EntryJsonTail + "}]}";
}

} // namespace

TEST_CASE("shape buckets round each size up to a power of two",
          "[tuning][tunefile]") {
  CHECK(roundUpToPowerOfTwo(0) == 1);
  CHECK(roundUpToPowerOfTwo(1) == 1);
  CHECK(roundUpToPowerOfTwo(2) == 2);
  CHECK(roundUpToPowerOfTwo(3) == 4);
  CHECK(roundUpToPowerOfTwo(1000) == 1024);
  CHECK(roundUpToPowerOfTwo(1024) == 1024);
  CHECK(roundUpToPowerOfTwo(1025) == 2048);
  CHECK(roundUpToPowerOfTwo(int64_t(1) << 40) == int64_t(1) << 40);
  ShapeBucket B = shapeBucket(3, 32, 4000, 333);
  CHECK(B.SeqQ == 4096);
  CHECK(B.SeqKv == 512);
  CHECK(B.BatchHeads == 128);
  CHECK(B.str() == "q4096.kv512.bh128");
  // Same bucket, different shape; a longer sequence is another bucket.
  CHECK(shapeBucket(4, 32, 4096, 300) == B);
  CHECK_FALSE(shapeBucket(4, 32, 4097, 333) == B);
  CHECK_FALSE(shapeBucket(5, 32, 4000, 333) == B);
}

TEST_CASE("tune file JSON round trip", "[tuning][tunefile]") {
  TuneFileData Data;
  Data.Entries = {sampleEntry(4096), sampleEntry(1000, "m64n32w4s3")};
  Data.Entries[1].Default = {}; // "default" is optional
  std::string Text = serializeTuneFile(Data);
  CHECK_THAT(Text, Contains("\"version\": 1"));
  CHECK_THAT(Text, Contains("\"runners_up\""));
  TuneFileData Back = parseTuneFile(Text, "t.json");
  REQUIRE(Back.Entries.size() == 2);
  for (size_t I = 0; I < 2; ++I) {
    const TuneEntry &A = Data.Entries[I], &B = Back.Entries[I];
    CHECK(A.Key == B.Key);
    CHECK(B.Definition == "mha");
    CHECK(B.Batch == 4);
    CHECK(B.Heads == 32);
    CHECK(B.HeadsKv == 8);
    CHECK(B.SeqQ == A.SeqQ);
    CHECK(B.SeqKv == 4096);
    CHECK(B.TensorLayout == Layout::BHSD);
    CHECK(B.Best.Config == A.Best.Config);
    CHECK(B.Best.Ms == A.Best.Ms);
    CHECK(B.Best.Tflops == A.Best.Tflops);
    REQUIRE(B.RunnersUp.size() == 2);
    CHECK(B.RunnersUp[1].Config == "m64n64w4s2");
    CHECK(B.RunnersUp[1].Tflops == 187.5);
    CHECK(B.Default.Config == A.Default.Config);
    CHECK(B.TuneSeconds == 12.5);
    CHECK(B.TunedAt == "2026-11-26T10:00:00Z");
  }
  // Serialising what was parsed gives the same text.
  CHECK(serializeTuneFile(Back) == Text);
  // find and upsert go by the whole key.
  CHECK(Back.find(Data.Entries[0].Key) == &Back.Entries[0]);
  TuneKey Other = Data.Entries[0].Key;
  Other.HeadDimV = 128;
  CHECK(Back.find(Other) == nullptr);
  TuneEntry Newer = sampleEntry(4096, "m64n64w4s2");
  Back.upsert(Newer);
  CHECK(Back.Entries.size() == 2);
  CHECK(Back.find(Newer.Key)->Best.Config == "m64n64w4s2");
}

TEST_CASE("every key field takes part in matching", "[tuning][tunefile]") {
  TuneKey K = sampleEntry().Key;
  std::vector<TuneKey> Others(9, K);
  Others[0].Device = "NVIDIA H100 80GB HBM3";
  Others[1].Arch = "sm_80";
  Others[2].Nvrtc = "12.8";
  Others[3].Skeleton = "fwd_sm90";
  Others[4].Variant = std::string(64, 'b');
  Others[5].Dtype = DType::F16;
  Others[6].HeadDim = 64;
  Others[7].HeadDimV = 128;
  Others[8].Bucket.SeqKv *= 2;
  TuneFileData Data;
  Data.Entries = {sampleEntry()};
  for (const TuneKey &O : Others) {
    CHECK_FALSE(O == K);
    CHECK(Data.find(O) == nullptr);
  }
}

TEST_CASE("a file that is not a version-1 tune file is an error naming it",
          "[tuning][tunefile]") {
  auto Error = [](const std::string &Text) {
    try {
      parseTuneFile(Text, "bad.json");
    } catch (const InvalidArgument &E) {
      return std::string(E.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(Error("{not json"), Contains("tune file bad.json: not valid JSON"));
  CHECK_THAT(Error("[]"), Contains("tune file bad.json: $: expected an object"));
  CHECK_THAT(Error("{\"entries\": []}"), Contains("$.version: missing"));
  CHECK_THAT(Error("{\"version\": 2, \"entries\": []}"),
             Contains("$.version: version 2; this attnc reads version 1"));
  CHECK_THAT(Error("{\"version\": \"1\", \"entries\": []}"),
             Contains("$.version: expected an integer"));
  CHECK_THAT(Error("{\"version\": 1}"), Contains("$.entries: missing"));
  CHECK(Error("{\"version\": 1, \"entries\": []}") == "no error");
  CHECK(Error(validFileWith(R"(, "config": "m64n64w4s2", "ms": 1, "tflops": 2,
                               "runners_up": [])")) == "no error");
  CHECK_THAT(Error(validFileWith(R"(, "ms": 1, "tflops": 2, "runners_up": [])")),
             Contains("$.entries[0].config: missing"));
  CHECK_THAT(
      Error(validFileWith(
          R"(, "config": "big", "ms": 1, "tflops": 2, "runners_up": [])")),
      Contains("$.entries[0].config: config 'big': expected m<block M>"));
  // Syntactically fine but more shared memory than sm_80 has at d64.
  CHECK_THAT(Error(validFileWith(R"(, "config": "m256n256w8s4", "ms": 1,
                                    "tflops": 2, "runners_up": [])")),
             Contains("$.entries[0].config: config m256n256w8s4"));
  CHECK_THAT(Error(validFileWith(R"(, "config": "m64n64w4s2", "ms": -1,
                                    "tflops": 2, "runners_up": [])")),
             Contains("$.entries[0].ms: expected a non-negative number"));
  CHECK_THAT(Error(validFileWith(R"(, "config": "m64n64w4s2", "ms": 1,
                    "tflops": 2, "runners_up": [{"config": "m64n64w4s2"}])")),
             Contains("$.entries[0].runners_up[0].ms: missing"));
  CHECK_THAT(Error(R"({"version": 1, "entries": [{"key": {"device": "D"}}]})"),
             Contains("$.entries[0].key.arch: missing"));
  // Each entry's config is checked against its own skeleton.
  auto WithSkeleton = [](const std::string &Skeleton, const std::string &Arch,
                         const std::string &Config) {
    std::string Text = validFileWith(", \"config\": \"" + Config +
                                     "\", \"ms\": 1, \"tflops\": 2, "
                                     "\"runners_up\": []");
    auto Replace = [&Text](const std::string &From, const std::string &To) {
      Text.replace(Text.find(From), From.size(), To);
    };
    Replace("\"skeleton\": \"fwd_sm80\"", "\"skeleton\": \"" + Skeleton + "\"");
    Replace("\"arch\": \"sm_80\"", "\"arch\": \"" + Arch + "\"");
    return Text;
  };
  CHECK(Error(WithSkeleton("fwd_sm90", "sm_90a", "sm90.m128n128s3")) ==
        "no error");
  CHECK_THAT(Error(WithSkeleton("fwd_sm90", "sm_90a", "m64n64w4s2")),
             Contains("$.entries[0].config: config 'm64n64w4s2': expected "
                      "sm90.m<block M>n<block N>s<stages>"));
  CHECK_THAT(Error(WithSkeleton("fwd_sm90", "sm_80", "sm90.m128n128s3")),
             Contains("fwd_sm90 needs arch sm_90a"));
  CHECK_THAT(Error(WithSkeleton("fwd_sm80", "sm_80", "sm90.m128n128s3")),
             Contains("$.entries[0].config: config 'sm90.m128n128s3': "
                      "expected m<block M>"));
  CHECK(Error(WithSkeleton(
            "linear_chunk", "sm_90a",
            codegen::LinearConfig::defaultFor(64, 64, GpuArch::Sm90a).str())) ==
        "no error");
  CHECK_THAT(Error(WithSkeleton("linear_chunk", "sm_90a", "c32v64w4b16")),
             Contains("$.entries[0].config: linear config c32v64w4b16: "
                      "backward: 64 output columns do not split into 8 "
                      "column groups of a multiple of 16"));
  CHECK_THAT(Error(WithSkeleton("bwd_sm70", "sm_80", "m64n64w4s2")),
             Contains("$.entries[0].config: unknown skeleton 'bwd_sm70'; "
                      "expected one of fwd_sm90, fwd_sm80, bwd_sm90, "
                      "bwd_sm80, linear_chunk"));
}

TEST_CASE("integer fields are range-checked before any narrowing",
          "[tuning][tunefile]") {
  auto Error = [](const std::string &Text) {
    try {
      parseTuneFile(Text, "bad.json");
    } catch (const InvalidArgument &E) {
      return std::string(E.what());
    }
    return std::string("no error");
  };
  const std::string Timing =
      R"(, "config": "m64n64w4s2", "ms": 1, "tflops": 2, "runners_up": [])";
  // The valid file with \p Field's value (its first occurrence) replaced.
  auto With = [&](const std::string &Field, const std::string &Old,
                  const std::string &New, const std::string &Tail = "") {
    std::string Text = validFileWith(Timing + Tail);
    std::string From = "\"" + Field + "\": " + Old;
    size_t At = Text.find(From);
    REQUIRE(At != std::string::npos);
    Text.replace(At, From.size(), "\"" + Field + "\": " + New);
    return Text;
  };
  const char *IntRange = "expected an integer in [1, 2147483647]";
  const char *Int64Range = "expected an integer in [1, 9223372036854775807]";
  // 2^32 + 128: a conversion to int reads 128, the file's own head dim.
  CHECK_THAT(Error(With("head_dim", "64", "4294967360")),
             Contains(std::string("tune file bad.json: "
                                  "$.entries[0].key.head_dim: ") +
                      IntRange + ", got 4294967360"));
  CHECK_THAT(Error(With("head_dim_v", "64", "4294967360")),
             Contains(std::string("$.entries[0].key.head_dim_v: ") + IntRange));
  CHECK_THAT(Error(With("head_dim", "64", "2147483648")),
             Contains(std::string("$.entries[0].key.head_dim: ") + IntRange));
  CHECK_THAT(Error(With("head_dim", "64", "0")),
             Contains(std::string("$.entries[0].key.head_dim: ") + IntRange +
                      ", got 0"));
  CHECK_THAT(Error(With("head_dim", "64", "64.0")),
             Contains(std::string("$.entries[0].key.head_dim: ") + IntRange));
  // 2^64 - 1 and 2^63 are unsigned in JSON: read as int64_t they wrap to -1
  // and to INT64_MIN.
  CHECK_THAT(Error(With("seq_q", "128", "18446744073709551615")),
             Contains(std::string("$.entries[0].key.bucket.seq_q: ") +
                      Int64Range + ", got 18446744073709551615"));
  CHECK_THAT(Error(With("batch_heads", "2", "9223372036854775808")),
             Contains(std::string("$.entries[0].key.bucket.batch_heads: ") +
                      Int64Range));
  const std::string Shape = R"(, "shape": {"batch": 1, "heads": 2,
    "heads_kv": 2, "seq_q": 128, "seq_kv": 128})";
  CHECK(Error(validFileWith(Timing + Shape)) == "no error");
  for (const char *Field : {"batch", "heads", "heads_kv"}) {
    std::string Old = std::string(Field) == "batch" ? "1" : "2";
    CHECK_THAT(Error(With(Field, Old, "18446744073709551615", Shape)),
               Contains(std::string("$.entries[0].shape.") + Field + ": " +
                        Int64Range));
    CHECK_THAT(Error(With(Field, Old, "-3", Shape)),
               Contains(std::string("$.entries[0].shape.") + Field + ": " +
                        Int64Range + ", got -3"));
  }
  // Beyond 2^64 - 1 nlohmann keeps a double, which is not an integer; the
  // version is reported as written, not as a wrapped int64_t (-1).
  CHECK_THAT(Error(R"({"version": 18446744073709551617, "entries": []})"),
             Contains("$.version: expected an integer"));
  CHECK_THAT(Error(R"({"version": 18446744073709551615, "entries": []})"),
             Contains("$.version: version 18446744073709551615; this attnc "
                      "reads version 1"));
  // The largest value in range reads back exactly.
  TuneFileData Data = parseTuneFile(
      With("batch", "1", "9223372036854775807", Shape), "ok.json");
  REQUIRE(Data.Entries.size() == 1);
  CHECK(Data.Entries[0].Batch == INT64_MAX);
  CHECK(Data.Entries[0].Key.HeadDim == 64);
}

TEST_CASE("reading: a missing file is empty, a bad one an error",
          "[tuning][tunefile]") {
  TempDir Dir;
  CHECK(readTuneFile(Dir.file("none.json")).Entries.empty());
  CHECK(cachedTuneFile(Dir.file("none.json"))->Entries.empty());
  writeText(Dir.file("bad.json"), "{\"version\": 7, \"entries\": []}");
  CHECK_THROWS_WITH(readTuneFile(Dir.file("bad.json")),
                    Contains("version 7; this attnc reads version 1"));
  CHECK_THROWS_AS(cachedTuneFile(Dir.file("bad.json")), InvalidArgument);
  // mergeIntoTuneFile leaves a file it cannot parse alone.
  CHECK_THROWS_AS(mergeIntoTuneFile(Dir.file("bad.json"), {sampleEntry()}),
                  InvalidArgument);
  auto Buf = llvm::MemoryBuffer::getFile(Dir.file("bad.json"));
  REQUIRE(Buf);
  CHECK((*Buf)->getBuffer() == "{\"version\": 7, \"entries\": []}");
}

TEST_CASE("the cache re-reads a file only when it changes",
          "[tuning][tunefile]") {
  TempDir Dir;
  std::string Path = Dir.file("t.json");
  mergeIntoTuneFile(Path, {sampleEntry(4096)});
  std::shared_ptr<const TuneFileData> A = cachedTuneFile(Path);
  REQUIRE(A->Entries.size() == 1);
  CHECK(cachedTuneFile(Path) == A); // unchanged: the same object
  mergeIntoTuneFile(Path, {sampleEntry(1000)});
  std::shared_ptr<const TuneFileData> B = cachedTuneFile(Path);
  CHECK(B != A);
  CHECK(B->Entries.size() == 2);
  // Replacing an entry keeps the count and takes the new value.
  mergeIntoTuneFile(Path, {sampleEntry(1000, "m64n64w4s3")});
  std::shared_ptr<const TuneFileData> C = cachedTuneFile(Path);
  REQUIRE(C->Entries.size() == 2);
  CHECK(C->find(sampleEntry(1000).Key)->Best.Config == "m64n64w4s3");
  // An edit in place (not through a rename) is seen too.
  writeText(Path, serializeTuneFile(TuneFileData()));
  CHECK(cachedTuneFile(Path)->Entries.empty());
}

TEST_CASE("concurrent writers keep each other's entries",
          "[tuning][tunefile]") {
  TempDir Dir;
  std::string Path = Dir.file("t.json");
  constexpr int Writers = 6, PerWriter = 8;
  // Each writer adds entries with its own sequence lengths.
  auto Write = [&](int W) {
    for (int I = 0; I < PerWriter; ++I)
      mergeIntoTuneFile(Path,
                        {sampleEntry(int64_t(1) << (W * PerWriter + I))});
  };

  SECTION("threads") {
    std::vector<std::thread> Threads;
    for (int W = 0; W < Writers; ++W)
      Threads.emplace_back(Write, W);
    for (std::thread &T : Threads)
      T.join();
  }
  SECTION("processes") {
    std::vector<pid_t> Children;
    for (int W = 0; W < Writers; ++W) {
      pid_t Pid = fork();
      REQUIRE(Pid >= 0);
      if (Pid == 0) {
        int Status = 0;
        try {
          Write(W);
        } catch (...) {
          Status = 1;
        }
        _exit(Status);
      }
      Children.push_back(Pid);
    }
    for (pid_t Pid : Children) {
      int Status = 0;
      REQUIRE(waitpid(Pid, &Status, 0) == Pid);
      CHECK(WIFEXITED(Status));
      CHECK(WEXITSTATUS(Status) == 0);
    }
  }

  TuneFileData Data = readTuneFile(Path);
  std::set<int64_t> Buckets;
  for (const TuneEntry &E : Data.Entries)
    Buckets.insert(E.Key.Bucket.SeqQ);
  CHECK(Data.Entries.size() == size_t(Writers * PerWriter));
  CHECK(Buckets.size() == size_t(Writers * PerWriter));
  // No temporaries left behind; the lock file stays (by design).
  std::error_code EC;
  for (llvm::sys::fs::directory_iterator I(Dir.Path, EC), End; I != End;
       I.increment(EC))
    CHECK_FALSE(llvm::StringRef(I->path()).contains(".tmp-"));
  CHECK(llvm::sys::fs::exists(Path + ".lock"));
}
