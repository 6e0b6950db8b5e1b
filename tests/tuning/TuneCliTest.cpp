// attnc tune and bench on the command line, without a GPU: usage errors exit
// 2, a tune file that is not one is refused before anything else.
#include "AttncMain.h"
#include "ExampleRegistry.h"
#include "Examples.h"
#include "TempDir.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Bundle.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/TuneFile.h"
#include "attn/runtime/Tuner.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

using namespace attn;
using Catch::Matchers::Contains;

namespace {

struct Run {
  int Exit = 0;
  std::string Err;
};

/// Runs attncMain with stderr captured in a file.
Run attnc(std::vector<const char *> Args) {
  Args.insert(Args.begin(), "attnc");
  llvm::SmallString<128> Path;
  REQUIRE_FALSE(llvm::sys::fs::createTemporaryFile("attnc-cli", "txt", Path));
  llvm::errs().flush();
  int Saved = dup(2);
  int FD = ::open(Path.c_str(), O_WRONLY | O_TRUNC);
  REQUIRE(FD >= 0);
  dup2(FD, 2);
  ::close(FD);
  Run R;
  R.Exit = attncMain(int(Args.size()), Args.data(), testsupport::registry());
  llvm::errs().flush();
  dup2(Saved, 2);
  ::close(Saved);
  auto Buf = llvm::MemoryBuffer::getFile(Path);
  REQUIRE(Buf);
  R.Err = (*Buf)->getBuffer().str();
  llvm::sys::fs::remove(Path);
  return R;
}

} // namespace

TEST_CASE("attnc tune and bench usage errors exit 2", "[tuning][cli]") {
  Run A = attnc({"tune", "mha", "--shape", "1,2,3", "-o", "x.json"});
  CHECK(A.Exit == 2);
  CHECK_THAT(A.Err, Contains("--shape '1,2,3': expected 4 or 5 numbers"));
  Run B = attnc({"tune", "mha", "--shape", "1,2,128,64"});
  CHECK(B.Exit == 2);
  CHECK_THAT(B.Err, Contains("tune: -o FILE (the tune file to write) is "
                             "required"));
  Run C = attnc({"bench", "mha", "--shape", "1,x,128,64"});
  CHECK(C.Exit == 2);
  CHECK_THAT(C.Err, Contains("'x' is not a positive integer"));
  Run D = attnc({"bench", "mha", "--shape", "1,2,128,64", "--dtype", "f32"});
  CHECK(D.Exit == 2);
  CHECK_THAT(D.Err, Contains("--dtype 'f32': expected f16 or bf16"));
  Run E = attnc({"tune", "mha", "--shape", "1,2,128,64", "-o", "x.json",
                 "--budget", "-1"});
  CHECK(E.Exit == 2);
  // Linear definitions: their own argument errors, before any GPU work.
  Run F = attnc({"tune", "mamba2", "--shape", "1,2,128,64", "--qk-heads",
                 "4", "-o", "x.json"});
  CHECK(F.Exit == 2);
  CHECK_THAT(F.Err, Contains("--qk-heads 4: expected a divisor of the 2 "
                             "heads"));
  Run G = attnc({"tune", "mamba2", "--shape", "1,2,128,64", "--skeleton",
                 "fwd_sm90", "-o", "x.json"});
  CHECK(G.Exit == 2);
  CHECK_THAT(G.Err, Contains("--skeleton: skeleton 'fwd_sm90' has no linear "
                             "forward kernels; those that do: linear_chunk"));
  Run H = attnc({"tune", "mha", "--shape", "1,2,128,64", "--qk-heads", "1",
                 "-o", "x.json"});
  CHECK(H.Exit == 2);
  CHECK_THAT(H.Err, Contains("--qk-heads: 'mha' is not linear attention"));
  Run I = attnc({"tune", "mha", "--shape", "1,2,128,64", "--skeleton",
                 "fwd_sm70", "-o", "x.json"});
  CHECK(I.Exit == 2);
  CHECK_THAT(I.Err, Contains("--skeleton: skeleton 'fwd_sm70': no such "
                             "skeleton; expected one of fwd_sm90, fwd_sm80, "
                             "bwd_sm90, bwd_sm80, linear_chunk"));
}

TEST_CASE("attnc tune --skeleton fwd_sm90 on an arch without it is an error "
          "before any GPU work",
          "[tuning][cli]") {
  Run R = attnc({"tune", "mha", "--shape", "1,2,128,64", "--skeleton",
                 "fwd_sm90", "--arch", "sm_80", "-o", "x.json"});
  CHECK(R.Exit == 1);
  CHECK_THAT(R.Err, Contains("attnc: error: skeleton fwd_sm90 cannot run "
                             "forward f16 d64/64 sm_80: fwd_sm90 needs arch "
                             "sm_90a (wgmma, setmaxnreg), not 'sm_80'"));
  Run D = attnc({"tune", "mha", "--shape", "1,2,128,96", "--skeleton",
                 "fwd_sm90", "--arch", "sm_90a", "-o", "x.json"});
  CHECK(D.Exit == 1);
  CHECK_THAT(D.Err, Contains("skeleton fwd_sm90 cannot run forward f16 "
                             "d96/96 sm_90a: head_dim 96 is not supported by "
                             "fwd_sm90"));
}

TEST_CASE("attnc tune refuses a tune file it cannot merge into",
          "[tuning][cli]") {
  llvm::SmallString<128> Path;
  REQUIRE_FALSE(llvm::sys::fs::createTemporaryFile("attnc-bad", "json", Path));
  {
    std::error_code EC;
    llvm::raw_fd_ostream OS(Path, EC);
    OS << "{\"version\": 1, \"entries\": {}}";
  }
  Run R = attnc({"tune", "mha", "--shape", "1,2,128,64", "-o", Path.c_str()});
  CHECK(R.Exit == 1);
  CHECK_THAT(R.Err, Contains("attnc: error: tune file " + std::string(Path) +
                             ": $.entries: expected an array"));
  // Left as it was.
  auto Buf = llvm::MemoryBuffer::getFile(Path);
  REQUIRE(Buf);
  CHECK((*Buf)->getBuffer() == "{\"version\": 1, \"entries\": {}}");
  llvm::sys::fs::remove(Path);
}

TEST_CASE("without a GPU, tune and bench fail with the driver's reason",
          "[tuning][cli]") {
  if (runtime::CudaDriver::get().available())
    SUCCEED("a CUDA driver is available; tests/gpu covers this machine");
  else {
    Run T = attnc({"tune", "mha", "--shape", "1,2,128,64", "-o",
                   "/nonexistent-dir/t.json"});
    CHECK(T.Exit == 1);
    CHECK_THAT(T.Err, Contains("attnc: no CUDA driver: "));
    Run B = attnc({"bench", "relu_attn", "--shape", "1,2,128,64"});
    CHECK(B.Exit == 1);
    CHECK_THAT(B.Err, Contains("attnc: no CUDA driver: "));
  }
}

TEST_CASE("attnc bench of a linear definition: bad arguments, no GPU needed",
          "[tuning][cli][linear]") {
  Run A = attnc({"bench", "mamba2", "--shape", "8,80,2048,128,64",
                 "--qk-heads", "3"});
  CHECK(A.Exit == 2);
  CHECK_THAT(A.Err, Contains("--qk-heads 3: expected a divisor of the 80 "
                             "heads of --shape"));
  Run B = attnc({"bench", "mamba2", "--shape", "1,2,64,128,64", "--config",
                 "m128n64w4s2"});
  CHECK(B.Exit == 2);
  CHECK_THAT(B.Err, Contains("--config: linear config 'm128n64w4s2': "
                             "expected c<chunk>v<value slice>w<warps>b"));
  Run C = attnc({"bench", "mamba2", "--shape", "1,2,64,96,64"});
  CHECK(C.Exit == 1);
  CHECK_THAT(C.Err, Contains("head_dim 96 is not supported by the linear "
                             "kernels"));
  Run D = attnc({"bench", "simple_gla", "--shape", "1,2,64,128",
                 "--config", "c128v64w4b4"});
  CHECK(D.Exit == 1);
  CHECK_THAT(D.Err, Contains("linear config c128v64w4b4: forward warps (4) "
                             "must be a multiple of the chunk's m16 row "
                             "tiles (8)"));
  Run E = attnc({"bench", "retention_linear", "--shape", "1,2,64,128",
                 "--backend", "reference"});
  CHECK(E.Exit == 2);
  CHECK_THAT(E.Err, Contains("'retention_linear' is linear attention, which "
                             "has the generated kernels only"));
  Run F = attnc({"bench", "mha", "--shape", "1,2,64,128", "--qk-heads", "1"});
  CHECK(F.Exit == 2);
  CHECK_THAT(F.Err, Contains("--qk-heads: 'mha' is not linear attention"));
  if (!runtime::CudaDriver::get().available()) {
    // Valid arguments get as far as the driver.
    Run G = attnc({"bench", "mamba2", "--shape", "1,2,64,128,64",
                   "--qk-heads", "1", "--config", "c32v64w4b4"});
    CHECK(G.Exit == 1);
    CHECK_THAT(G.Err, Contains("attnc: no CUDA driver: "));
  }
}

TEST_CASE("attnc bundle --tune adds the tune file's configurations",
          "[tuning][cli][bundle]") {
  attn::testing::TempDir Dir("attnc-bundle-tune");
  const std::string Tune = Dir.Path + "/tune.json";
  const std::string Out = Dir.Path + "/mha.attncb";
  CompiledDefinition Mha = compile(examples::mha());
  runtime::Signature Sig;
  Sig.HeadDim = Sig.HeadDimV = 64;
  // Two entries of mha at d64 on sm_80 (one of another device and
  // toolchain: a bundle serves every machine it is deployed on), one at
  // d128 (another signature) and one of another definition.
  auto Entry = [&](const CompiledDefinition &Def, const runtime::Signature &S,
                   int64_t Seq, const std::string &Config) {
    runtime::TuneEntry E;
    E.Key = runtime::makeTuneKey(Def, S, GpuArch::Sm80,
                                 {1, 8, 8, Seq, Seq}, "Test GPU");
    E.Definition = Def.Graph->name();
    E.Best = {Config, 1.0, 10.0};
    return E;
  };
  runtime::TuneEntry Other = Entry(Mha, Sig, 4096, "m128n32w4s2");
  Other.Key.Device = "Another GPU";
  Other.Key.Nvrtc = "0.1";
  runtime::Signature D128;
  runtime::mergeIntoTuneFile(
      Tune, {Entry(Mha, Sig, 512, "m64n32w4s2"), Other,
             Entry(Mha, D128, 512, "m64n64w4s3"),
             Entry(compile(examples::reluAttn()), Sig, 512, "m64n64w4s3")});

  Run R = attnc({"bundle", "mha", "--arch", "sm_80", "--head-dim", "64",
                 "--tune", Tune.c_str(), "-o", Out.c_str()});
  INFO(R.Err);
  REQUIRE(R.Exit == 0);
  runtime::KernelBundle B = runtime::KernelBundle::read(Out);
  std::vector<std::string> Keys;
  for (const runtime::BundleEntry *E : B.entries())
    Keys.push_back(E->Key);
  auto Has = [&](llvm::StringRef Text) {
    return llvm::any_of(Keys, [&](const std::string &K) {
      return llvm::StringRef(K).contains(Text);
    });
  };
  const std::string Default = codegen::FwdConfig::defaultFor(64, 64,
                                                             GpuArch::Sm80)
                                  .str();
  CHECK(Has("mha.fwd_sm80.f16.d64x64.sm_80." + Default));
  CHECK(Has("mha.fwd_sm80.f16.d64x64.sm_80.m64n32w4s2"));
  CHECK(Has("mha.fwd_sm80.f16.d64x64.sm_80.m128n32w4s2"));
  CHECK_FALSE(Has("m64n64w4s3"));

  Run Missing = attnc({"bundle", "mha", "--arch", "sm_80", "--tune",
                       (Dir.Path + "/absent.json").c_str(), "-o",
                       Out.c_str()});
  CHECK(Missing.Exit == 2);
  CHECK_THAT(Missing.Err, Contains("absent.json': no such file (attnc tune "
                                   "writes one)"));
}
