// Kernel bundles: the file format and its checks, the cache consulting
// bundles first, and precompile's kernels being the ones calls load.
#include "TempDir.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Bundle.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/KernelCache.h"
#include "attn/runtime/LinearAttention.h"

#include "Examples.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/SHA256.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <thread>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;

namespace {

codegen::KernelSource source(const std::string &Text, GpuArch Arch) {
  codegen::KernelSource Src;
  Src.Key = "test.bundle." + archName(Arch).str();
  Src.Entries = {"attnc_fwd"};
  Src.Source = Text;
  Src.Arch = Arch;
  return Src;
}

std::shared_ptr<const std::vector<char>> blob(const std::string &S) {
  return std::make_shared<const std::vector<char>>(S.begin(), S.end());
}

KernelBundle twoKernels() {
  KernelBundle B;
  B.add(source("one", GpuArch::Sm80), "13.0", blob("\x7f" "ELF one"));
  B.add(source("two", GpuArch::Sm90a), "13.0", blob("\x7f" "ELF two"));
  return B;
}

/// \p Body with a fresh checksum, as a writer would have made it.
std::string resealed(std::string Body) {
  std::array<uint8_t, 32> D = llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(Body.data()), Body.size()));
  return Body + std::string(D.begin(), D.end());
}

std::string parseError(const std::string &Bytes) {
  try {
    KernelBundle::parse(Bytes, "b.attncb");
  } catch (const UserError &E) {
    return E.what();
  }
  FAIL("the bundle was accepted");
  return "";
}

} // namespace

TEST_CASE("a bundle survives a write and a read, key by key",
          "[bundle]") {
  attn::testing::TempDir Dir("attnc-bundle-test");
  KernelBundle B = twoKernels();
  REQUIRE(B.size() == 2);
  B.write(Dir.Path + "/b.attncb");
  KernelBundle R = KernelBundle::read(Dir.Path + "/b.attncb");
  REQUIRE(R.size() == 2);
  for (const char *Text : {"one", "two"}) {
    GpuArch A = std::string(Text) == "one" ? GpuArch::Sm80 : GpuArch::Sm90a;
    const BundleEntry *E = R.find(bundleKey(source(Text, A)));
    REQUIRE(E);
    CHECK(E->Arch == A);
    CHECK(E->Nvrtc == "13.0");
    CHECK(std::string(E->Cubin->begin(), E->Cubin->end()) ==
          std::string("\x7f" "ELF ") + Text);
  }
  // The key covers the text and the arch.
  CHECK_FALSE(R.find(bundleKey(source("one", GpuArch::Sm90a))));
  CHECK_FALSE(R.find(bundleKey(source("three", GpuArch::Sm80))));
}

TEST_CASE("a damaged or foreign bundle is refused, saying what is wrong",
          "[bundle]") {
  std::string Good = twoKernels().serialize();
  REQUIRE_NOTHROW(KernelBundle::parse(Good, "b.attncb"));

  std::string Flipped = Good;
  Flipped[Good.size() / 2] ^= 1;
  CHECK_THAT(parseError(Flipped), Contains("checksum mismatch"));
  CHECK_THAT(parseError(Good.substr(0, Good.size() - 1)),
             Contains("checksum mismatch"));
  CHECK_THAT(parseError("ELF\x7f and more bytes than a header"),
             Contains("not a kernel bundle"));
  CHECK_THAT(parseError(Good + "x"), Contains("checksum mismatch"));

  std::string Body = Good.substr(0, Good.size() - 32);
  // Another format version (bytes 8..11), sealed properly.
  std::string V2 = Body;
  V2[8] = 2;
  CHECK_THAT(parseError(resealed(V2)),
             Contains("format version 2; this program reads version 1"));
  // Another attnc version: same length, one character changed.
  std::string Other = Body;
  Other[16] = Other[16] == '9' ? '8' : '9';
  CHECK_THAT(parseError(resealed(Other)), Contains("made by attnc"));
  // Bytes after the last entry, sealed.
  CHECK_THAT(parseError(resealed(Body + "xyz")),
             Contains("3 bytes after the last of its 2 entries"));
  // A length field past the end.
  std::string Short = Body.substr(0, Body.size() - 4);
  CHECK_THAT(parseError(resealed(Short)), Contains("truncated"));
  CHECK_THROWS_WITH(KernelBundle::read("/nonexistent/b.attncb"),
                    Contains("bundle '/nonexistent/b.attncb': cannot read"));
}

TEST_CASE("the cache takes a bundle's kernel before the disk and NVRTC",
          "[bundle]") {
  attn::testing::TempDir Dir("attnc-bundle-cache");
  int Compiles = 0;
  KernelCache Cache(Dir.Path, [&](const codegen::KernelSource &S,
                                  double &Seconds) {
    ++Compiles;
    Seconds = 0;
    return std::vector<char>(S.Source.begin(), S.Source.end());
  });
  auto B = std::make_shared<KernelBundle>(twoKernels());
  Cache.addBundle(B, "two.attncb");
  CHECK(Cache.bundleNames() == std::vector<std::string>{"two.attncb"});

  CacheResult R = Cache.getOrCompile(source("one", GpuArch::Sm80));
  CHECK(R.Source == CacheSource::Bundle);
  CHECK(R.FullKey == bundleKey(source("one", GpuArch::Sm80)));
  CHECK(std::string(R.Cubin->begin(), R.Cubin->end()) == "\x7f" "ELF one");
  CHECK(Compiles == 0);
  // Then from memory; a kernel no bundle has is compiled as before.
  CHECK(Cache.getOrCompile(source("one", GpuArch::Sm80)).Source ==
        CacheSource::Memory);
  CHECK(Cache.getOrCompile(source("three", GpuArch::Sm80)).Source ==
        CacheSource::Compiled);
  CHECK(Compiles == 1);
  CHECK_THROWS_AS(Cache.addBundle(nullptr, "none"), InvalidArgument);
}

TEST_CASE("precompile returns the kernels that calls of the signature load",
          "[bundle]") {
  dsl::AttentionDef Def = examples::mha();
  Signature Sig;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.Arch = GpuArch::Sm80;
  Attention A(Def, Sig);
  PrecompileSet All;
  All.Backward = All.Decode = true;
  std::vector<PrecompiledKernel> K = A.precompile(All);
  std::set<std::string> Keys;
  for (const PrecompiledKernel &P : K) {
    Keys.insert(P.Source.Key);
    CHECK(P.Source.Arch == GpuArch::Sm80);
    REQUIRE(P.Cubin);
    CHECK_FALSE(P.Cubin->empty());
  }
  // forward, the short-query decode kernel, backward, paged decode of each
  // row-step mode (d64: a thread's rows 16 apart, 4 of them in a block of
  // 64 keys: groups of 1, 2 or 4 rows, three kernels), append and merge:
  // eight distinct kernels.
  CHECK(K.size() == 8);
  CHECK(Keys.size() == 8);
  CHECK(std::count_if(Keys.begin(), Keys.end(), [](const std::string &Key) {
          return Key.find("decode_paged_sm80") != std::string::npos;
        }) == 3);
  // The forward is the one the Attention compiled when it was made.
  CHECK(K[0].Source.Source == A.source().Source);
  CHECK(bundleKey(K[0].Source) == bundleKey(A.source()));

  // Forward only: the two forward kernels, nothing else.
  PrecompileSet Fwd;
  CHECK(A.precompile(Fwd).size() == 2);
}

TEST_CASE("one Attention precompiled from several threads at once",
          "[bundle][concurrency]") {
  // The lazily made members (the backward's selector and runner, the paged
  // runner, the backends) are made under the object's call lock: threads
  // racing for them all get the same eight kernels.
  dsl::AttentionDef Def = examples::mha();
  Signature Sig;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.Arch = GpuArch::Sm80;
  Attention A(Def, Sig);
  PrecompileSet All;
  All.Backward = All.Decode = true;
  constexpr int Threads = 4;
  std::vector<std::vector<std::string>> Keys(Threads);
  std::vector<std::string> Errors(Threads);
  std::vector<std::thread> Pool;
  for (int T = 0; T < Threads; ++T)
    Pool.emplace_back([&, T] {
      try {
        for (const PrecompiledKernel &P : A.precompile(All))
          Keys[T].push_back(bundleKey(P.Source));
      } catch (const std::exception &E) {
        Errors[T] = E.what();
      }
    });
  for (std::thread &T : Pool)
    T.join();
  for (int T = 0; T < Threads; ++T) {
    INFO("thread " << T);
    CHECK(Errors[T].empty());
    CHECK(Keys[T].size() == 8);
    CHECK(Keys[T] == Keys[0]);
  }
  CHECK(A.lastBackend().empty()); // nothing ran
}

TEST_CASE("precompile for several archs, and the linear twin",
          "[bundle]") {
  dsl::AttentionDef Def = examples::mha();
  Signature Sig;
  Sig.HeadDim = Sig.HeadDimV = 64;
  PrecompileSet Fwd;
  std::vector<PrecompiledKernel> K =
      precompileAttention(Def, Sig, Fwd, {GpuArch::Sm80, GpuArch::Sm86});
  REQUIRE(K.size() == 4);
  CHECK(K[0].Source.Arch == GpuArch::Sm80);
  CHECK(K[3].Source.Arch == GpuArch::Sm86);
  CHECK_THROWS_AS(precompileAttention(Def, Sig, Fwd, {}), InvalidArgument);

  Signature Thd = Sig;
  Thd.TensorLayout = Layout::THD;
  Thd.Arch = GpuArch::Sm80;
  PrecompileSet Decode;
  Decode.Forward = false;
  Decode.Decode = true;
  Attention Packed(Def, Thd);
  // A packed signature's decode set: paged decode's kernels (they serve
  // decodePagedVarlen), one a row-step mode, as a plan of any page size
  // may pick, and the append; no merge (mergeResults takes dense results).
  std::vector<PrecompiledKernel> PK = Packed.precompile(Decode);
  REQUIRE(PK.size() >= 3);
  std::set<std::string> PagedKeys;
  for (size_t I = 0; I + 1 < PK.size(); ++I) {
    CHECK_THAT(PK[I].Source.Key, Contains("decode_paged_sm80"));
    CHECK_THAT(PK[I].Source.Key, Contains(fmt::format(".steps{}", I)));
    PagedKeys.insert(PK[I].Source.Key);
  }
  CHECK(PagedKeys.size() == PK.size() - 1);
  CHECK_THAT(PK.back().Source.Key, Contains("paged_append"));

  dsl::LinearAttentionDef Gla = examples::simpleGla();
  LinearSignature L;
  L.HeadDim = L.HeadDimV = 64;
  PrecompileSet LinAll;
  LinAll.Backward = LinAll.Decode = true;
  std::vector<PrecompiledKernel> LK =
      precompileLinear(Gla, L, LinAll, {GpuArch::Sm80});
  // forward, packed forward, backward, packed backward, decode step.
  CHECK(LK.size() == 5);
}
