// KernelCache: memory → disk → compile, corrupt entries, concurrency.
#include "TempDir.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/KernelCache.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

struct TempDir : attn::testing::TempDir {
  TempDir() : attn::testing::TempDir("attnc-kc-test") {}
};

/// Stands in for NVRTC: counts its calls and "compiles" a source to an
/// ELF-looking blob derived from it, optionally slowly (to make concurrent
/// callers overlap).
struct FakeCompiler {
  std::atomic<int> Calls{0};
  int DelayMs = 0;
  KernelCache::CompileFn fn() {
    return [this](const codegen::KernelSource &Src, double &Seconds) {
      ++Calls;
      if (DelayMs)
        std::this_thread::sleep_for(std::chrono::milliseconds(DelayMs));
      Seconds = 0.25;
      return expected(Src);
    };
  }
  static std::vector<char> expected(const codegen::KernelSource &Src) {
    std::string Blob = "\x7f"
                       "ELF:" +
                       archName(Src.Arch).str() + ":" + Src.Source;
    return std::vector<char>(Blob.begin(), Blob.end());
  }
};

codegen::KernelSource source(const std::string &Text = "kernel text",
                             GpuArch Arch = GpuArch::Sm90a) {
  codegen::KernelSource Src;
  Src.Key = "mha.fwd_sm90.f16.d128x128." + archName(Arch).str() + ".m128n64w4s2";
  Src.Entries = {"attnc_fwd"};
  Src.Source = Text;
  Src.Arch = Arch;
  return Src;
}

std::vector<std::string> filesIn(const std::string &Dir) {
  std::vector<std::string> Names;
  std::error_code EC;
  for (llvm::sys::fs::directory_iterator I(Dir, EC), End; !EC && I != End;
       I.increment(EC))
    Names.push_back(llvm::sys::path::filename(I->path()).str());
  return Names;
}

std::string readFile(const std::string &Path) {
  auto Buffer = llvm::MemoryBuffer::getFile(Path);
  REQUIRE(Buffer);
  return (*Buffer)->getBuffer().str();
}

void writeFile(const std::string &Path, llvm::StringRef Bytes) {
  std::error_code EC;
  llvm::raw_fd_ostream OS(Path, EC);
  REQUIRE_FALSE(EC);
  OS << Bytes;
}

std::string entryPath(const std::string &Dir, const KernelCache &Cache,
                      const codegen::KernelSource &Src) {
  return Dir + "/" + Cache.fullKey(Src) + ".cubin";
}

/// The directory holds exactly one entry, the one for \p Src, no
/// temporaries, and a fresh cache loads it from disk as \p Expected.
void requireSingleValidEntry(const std::string &Dir,
                             const codegen::KernelSource &Src) {
  FakeCompiler Fake;
  KernelCache Fresh(Dir, Fake.fn());
  std::vector<std::string> Files = filesIn(Dir);
  REQUIRE(Files.size() == 1);
  CHECK(Files[0] == Fresh.fullKey(Src) + ".cubin");
  CacheResult R = Fresh.getOrCompile(Src);
  CHECK(R.Source == CacheSource::Disk);
  CHECK(*R.Cubin == FakeCompiler::expected(Src));
  CHECK(Fake.Calls == 0);
}

} // namespace

TEST_CASE("KernelCache serves memory, then disk, then compiles",
          "[runtime][cache]") {
  TempDir Dir;
  FakeCompiler Fake;
  KernelCache Cache(Dir.Path + "/nested/cache", Fake.fn());
  codegen::KernelSource Src = source();

  CacheResult First = Cache.getOrCompile(Src);
  CHECK(First.Source == CacheSource::Compiled);
  CHECK(First.CompileSeconds == 0.25);
  CHECK(First.LookupSeconds >= 0);
  CHECK(*First.Cubin == FakeCompiler::expected(Src));
  CHECK(First.FullKey == Cache.fullKey(Src));
  CHECK(Fake.Calls == 1);
  // The directory did not exist; the cache created it.
  CHECK(llvm::sys::fs::exists(entryPath(Dir.Path + "/nested/cache", Cache,
                                        Src)));

  CacheResult Second = Cache.getOrCompile(Src);
  CHECK(Second.Source == CacheSource::Memory);
  CHECK(Second.CompileSeconds == 0);
  CHECK(Second.Cubin == First.Cubin); // the same shared copy
  CHECK(Fake.Calls == 1);

  Cache.dropMemory();
  CacheResult Third = Cache.getOrCompile(Src);
  CHECK(Third.Source == CacheSource::Disk);
  CHECK(*Third.Cubin == *First.Cubin);
  CHECK(Fake.Calls == 1);

  FakeCompiler Other;
  KernelCache Again(Dir.Path + "/nested/cache", Other.fn());
  CacheResult Fourth = Again.getOrCompile(Src);
  CHECK(Fourth.Source == CacheSource::Disk);
  CHECK(*Fourth.Cubin == *First.Cubin);
  CHECK(Other.Calls == 0);

  CHECK(std::string(cacheSourceName(CacheSource::Memory)) == "memory");
  CHECK(std::string(cacheSourceName(CacheSource::Disk)) == "disk");
  CHECK(std::string(cacheSourceName(CacheSource::Compiled)) == "compiled");
}

TEST_CASE("KernelCache discards bad entries and rebuilds them",
          "[runtime][cache]") {
  // Header layout (KernelCache.cpp): magic at 0, format version at 8.
  struct Damage {
    const char *Name;
    std::function<std::string(std::string)> Apply;
  };
  const Damage Cases[] = {
      {"truncated in the payload",
       [](std::string F) { return F.substr(0, F.size() - 3); }},
      {"truncated in the header", [](std::string F) { return F.substr(0, 20); }},
      {"empty", [](std::string) { return std::string(); }},
      {"one payload byte flipped",
       [](std::string F) {
         F.back() ^= 0x01;
         return F;
       }},
      {"bytes appended", [](std::string F) { return F + "junk"; }},
      {"wrong magic",
       [](std::string F) {
         F[0] = 'X';
         return F;
       }},
      {"another format version",
       [](std::string F) {
         F[8] = static_cast<char>(F[8] + 1);
         return F;
       }},
  };
  for (const Damage &D : Cases) {
    DYNAMIC_SECTION(D.Name) {
      TempDir Dir;
      FakeCompiler Fake;
      KernelCache Cache(Dir.Path, Fake.fn());
      codegen::KernelSource Src = source();
      REQUIRE(Cache.getOrCompile(Src).Source == CacheSource::Compiled);
      std::string Path = entryPath(Dir.Path, Cache, Src);
      std::string Good = readFile(Path);
      writeFile(Path, D.Apply(Good));

      Cache.dropMemory();
      CacheResult R = Cache.getOrCompile(Src);
      CHECK(R.Source == CacheSource::Compiled);
      CHECK(Fake.Calls == 2);
      CHECK(*R.Cubin == FakeCompiler::expected(Src));
      // Rewritten whole and valid.
      CHECK(readFile(Path) == Good);
      requireSingleValidEntry(Dir.Path, Src);
    }
  }
}

TEST_CASE("KernelCache full keys", "[runtime][cache]") {
  TempDir Dir;
  KernelCache Cache(Dir.Path, FakeCompiler().fn());
  codegen::KernelSource Src = source();
  std::string Key = Cache.fullKey(Src);
  CHECK_THAT(Key, StartsWith(Src.Key + "-"));
  CHECK(Key.size() == Src.Key.size() + 1 + 64);
  std::string Hex = Key.substr(Src.Key.size() + 1);
  CHECK(Hex.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(Cache.fullKey(Src) == Key); // deterministic

  codegen::KernelSource OtherText = source("other kernel text");
  CHECK(Cache.fullKey(OtherText) != Key);
  codegen::KernelSource OtherArch = source("kernel text", GpuArch::Sm80);
  OtherArch.Key = Src.Key; // same prefix: the hash alone must differ
  CHECK(Cache.fullKey(OtherArch) != Key);
  // The entries do not change the CUBIN, so not the key either.
  codegen::KernelSource OtherEntries = Src;
  OtherEntries.Entries.push_back("attnc_fwd_split");
  CHECK(Cache.fullKey(OtherEntries) == Key);

  codegen::KernelSource Bad = Src;
  Bad.Key = "../escape";
  CHECK_THROWS_AS(Cache.fullKey(Bad), InvalidArgument);
  Bad.Key = "";
  CHECK_THROWS_AS(Cache.fullKey(Bad), InvalidArgument);
}

TEST_CASE("KernelCache stats and clear", "[runtime][cache]") {
  TempDir Dir;
  FakeCompiler Fake;
  KernelCache Cache(Dir.Path, Fake.fn());
  CHECK(Cache.stats().Directory == Dir.Path);
  CHECK(Cache.stats().Entries == 0);
  CHECK(Cache.stats().Bytes == 0);

  Cache.getOrCompile(source("a"));
  Cache.getOrCompile(source("b"));
  Cache.getOrCompile(source("c", GpuArch::Sm80));
  // Unrelated files are neither counted nor removed; a stray temporary (a
  // writer that died mid-write) is not counted but is removed.
  writeFile(Dir.Path + "/notes.txt", "keep me");
  writeFile(Dir.Path + "/x.cubin.tmp-abc123", "half");

  CacheStats S = Cache.stats();
  CHECK(S.Entries == 3);
  CHECK(S.Temporaries == 1);
  CHECK(S.TemporaryBytes == 4);
  CHECK(S.Skipped == 0);
  uint64_t Bytes = 0;
  for (const std::string &Name : filesIn(Dir.Path))
    if (llvm::StringRef(Name).endswith(".cubin"))
      Bytes += readFile(Dir.Path + "/" + Name).size();
  CHECK(S.Bytes == Bytes);
  CHECK(S.Bytes > 3 * 56);

  CHECK(Cache.clear() == 4);
  CHECK(Cache.stats().Entries == 0);
  CHECK(Cache.stats().Temporaries == 0);
  CHECK(Cache.stats().TemporaryBytes == 0);
  CHECK(filesIn(Dir.Path) == std::vector<std::string>{"notes.txt"});
  // Memory was cleared too: the next lookup compiles again.
  CHECK(Cache.getOrCompile(source("a")).Source == CacheSource::Compiled);

  KernelCache Missing(Dir.Path + "/does-not-exist", Fake.fn());
  CHECK(Missing.stats().Entries == 0);
  CHECK(Missing.clear() == 0);
}

TEST_CASE("KernelCache default directory", "[runtime][cache]") {
  const char *Saved = std::getenv("ATTNC_CACHE_DIR");
  std::string SavedValue = Saved ? Saved : "";
  setenv("ATTNC_CACHE_DIR", "/somewhere/attnc-cache", 1);
  CHECK(KernelCache::defaultDirectory() == "/somewhere/attnc-cache");
  unsetenv("ATTNC_CACHE_DIR");
  CHECK_FALSE(KernelCache::defaultDirectory().empty());
  CHECK(llvm::StringRef(KernelCache::defaultDirectory()).endswith("attnc"));
  const char *SavedXdg = std::getenv("XDG_CACHE_HOME");
  std::string SavedXdgValue = SavedXdg ? SavedXdg : "";
  setenv("XDG_CACHE_HOME", "/xdg/cache", 1);
  CHECK(KernelCache::defaultDirectory() == "/xdg/cache/attnc");
  if (SavedXdg)
    setenv("XDG_CACHE_HOME", SavedXdgValue.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
  if (Saved)
    setenv("ATTNC_CACHE_DIR", SavedValue.c_str(), 1);
}

/// Runs \p Body in a child process that is killed after \p Seconds and may
/// allocate at most 2 GiB; true when it returned normally in time. A lookup
/// that blocks on a FIFO or reads /dev/zero without end fails the test
/// instead of hanging it.
bool finishesInTime(const std::function<void()> &Body, unsigned Seconds) {
  pid_t Child = fork();
  REQUIRE(Child >= 0);
  if (Child == 0) {
    alarm(Seconds);
    rlimit Limit{rlim_t(2) << 30, rlim_t(2) << 30};
    setrlimit(RLIMIT_AS, &Limit);
    int Status = 1;
    try {
      Body();
      Status = 0;
    } catch (...) {
      Status = 3;
    }
    _exit(Status); // no Catch2 teardown or TempDir cleanup in the child
  }
  int Status = 0;
  REQUIRE(waitpid(Child, &Status, 0) == Child);
  return WIFEXITED(Status) && WEXITSTATUS(Status) == 0;
}

TEST_CASE("KernelCache reads only regular files as entries",
          "[runtime][cache]") {
  struct Planted {
    const char *Name;
    std::function<void(const std::string &)> Make;
  };
  const Planted Cases[] = {
      {"a FIFO",
       [](const std::string &P) { REQUIRE(mkfifo(P.c_str(), 0600) == 0); }},
      {"a symlink to /dev/zero",
       [](const std::string &P) {
         REQUIRE_FALSE(llvm::sys::fs::create_link("/dev/zero", P));
       }},
      {"a dangling symlink",
       [](const std::string &P) {
         REQUIRE_FALSE(llvm::sys::fs::create_link(P + ".gone", P));
       }},
  };
  for (const Planted &C : Cases) {
    DYNAMIC_SECTION(C.Name) {
      TempDir Dir;
      codegen::KernelSource Src = source();
      FakeCompiler Fake;
      KernelCache Cache(Dir.Path, Fake.fn());
      std::string Path = entryPath(Dir.Path, Cache, Src);
      C.Make(Path);

      CacheStats Before = Cache.stats();
      CHECK(Before.Entries == 0);
      CHECK(Before.Skipped == 1);

      // In a child: before the fix this blocked in open() or read forever.
      CHECK(finishesInTime(
          [&] {
            FakeCompiler ChildFake;
            KernelCache ChildCache(Dir.Path, ChildFake.fn());
            CacheResult R = ChildCache.getOrCompile(Src);
            if (R.Source != CacheSource::Compiled ||
                *R.Cubin != FakeCompiler::expected(Src))
              throw std::runtime_error("wrong result");
          },
          /*Seconds=*/20));
      // The child's rename replaced the planted file with a real entry.
      CHECK(Cache.stats().Skipped == 0);
      requireSingleValidEntry(Dir.Path, Src);
    }
  }
}

TEST_CASE("KernelCache clear removes planted non-regular entries, not "
          "their targets",
          "[runtime][cache]") {
  TempDir Dir;
  KernelCache Cache(Dir.Path, FakeCompiler().fn());
  std::string Target = Dir.Path + "/target.txt";
  writeFile(Target, "keep me");
  REQUIRE(mkfifo((Dir.Path + "/a.cubin").c_str(), 0600) == 0);
  REQUIRE_FALSE(llvm::sys::fs::create_link(Target, Dir.Path + "/b.cubin"));
  CHECK(Cache.stats().Skipped == 1); // the link leads to a regular file
  CHECK(Cache.stats().Entries == 1);
  CHECK(Cache.clear() == 2);
  CHECK(filesIn(Dir.Path) == std::vector<std::string>{"target.txt"});
  CHECK(readFile(Target) == "keep me");
}

TEST_CASE("KernelCache at a path that is a file is an error",
          "[runtime][cache]") {
  TempDir Dir;
  std::string File = Dir.Path + "/not-a-dir";
  writeFile(File, "x");
  FakeCompiler Fake;
  KernelCache Cache(File, Fake.fn());
  auto NamesPath = Contains("'" + File + "' is not a directory");
  CHECK_THROWS_AS(Cache.stats(), InvalidArgument);
  CHECK_THROWS_WITH(Cache.stats(), NamesPath);
  CHECK_THROWS_WITH(Cache.clear(), NamesPath);
  CHECK_THROWS_WITH(Cache.getOrCompile(source()), NamesPath);
  CHECK(Fake.Calls == 0);
  CHECK(readFile(File) == "x");
}

TEST_CASE("Two threads asking for one new key", "[runtime][cache]") {
  TempDir Dir;
  FakeCompiler Fake;
  Fake.DelayMs = 100;
  KernelCache Cache(Dir.Path, Fake.fn());
  codegen::KernelSource Src = source();

  std::atomic<bool> Go{false};
  CacheResult Results[2];
  std::thread Threads[2];
  for (int I = 0; I < 2; ++I)
    Threads[I] = std::thread([&, I] {
      while (!Go)
        std::this_thread::yield();
      Results[I] = Cache.getOrCompile(Src);
    });
  Go = true;
  for (std::thread &T : Threads)
    T.join();

  for (const CacheResult &R : Results) {
    REQUIRE(R.Cubin);
    CHECK(*R.Cubin == FakeCompiler::expected(Src));
  }
  CHECK(Results[0].Cubin == Results[1].Cubin); // one shared copy
  CHECK(Fake.Calls >= 1);
  requireSingleValidEntry(Dir.Path, Src);
}

TEST_CASE("Two processes asking for one new key", "[runtime][cache]") {
  TempDir Dir;
  codegen::KernelSource Src = source();
  // Both children block on the pipe until the parent closes it, then race.
  int Gate[2];
  REQUIRE(pipe(Gate) == 0);
  pid_t Children[2];
  for (pid_t &Child : Children) {
    Child = fork();
    REQUIRE(Child >= 0);
    if (Child == 0) {
      close(Gate[1]);
      char C;
      (void)!read(Gate[0], &C, 1); // EOF when the parent closes its end
      int Status = 1;
      try {
        FakeCompiler Fake;
        Fake.DelayMs = 100;
        KernelCache Cache(Dir.Path, Fake.fn());
        CacheResult R = Cache.getOrCompile(Src);
        Status = *R.Cubin == FakeCompiler::expected(Src) ? 0 : 2;
      } catch (...) {
        Status = 3;
      }
      _exit(Status); // no Catch2 teardown or TempDir cleanup in the child
    }
  }
  close(Gate[0]);
  close(Gate[1]);
  for (pid_t Child : Children) {
    int Status = 0;
    REQUIRE(waitpid(Child, &Status, 0) == Child);
    CHECK(WIFEXITED(Status));
    CHECK(WEXITSTATUS(Status) == 0);
  }
  requireSingleValidEntry(Dir.Path, Src);
}
