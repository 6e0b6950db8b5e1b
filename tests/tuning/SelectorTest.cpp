// The selector without a GPU: the explicit config, a matching tune file
// entry, stale entries ignored, the default otherwise; on sm_90a the
// fwd_sm90 skeleton's own entries; the skeleton table's lookups and the
// policy's parsing of names.
#include "Examples.h"
#include "TempDir.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/LinearAttention.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/TuneFile.h"
#include "attn/runtime/Tuner.h"

#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;

namespace {

const std::string Device = "Test GPU 80GB";
/// The portable skeleton's arch; the sm_90a cases name theirs.
const GpuArch Arch = GpuArch::Sm80;

/// tune.json in a fresh temporary directory, removed with it.
struct TempFile {
  attn::testing::TempDir Dir{"attnc-select"};
  std::string Path = Dir.Path + "/tune.json";
};

CallShape callShape(int64_t B, int64_t H, int64_t Sq, int64_t Skv) {
  CallShape S;
  S.B = B;
  S.H = H;
  S.Hkv = H;
  S.Sq = Sq;
  S.Skv = Skv;
  return S;
}

/// An entry for \p Def at \p Shape on the test device, with \p Config.
TuneEntry entryFor(const CompiledDefinition &Def, const Signature &Sig,
                   const CallShape &S, const std::string &Config,
                   const std::string &Dev = Device, GpuArch OnArch = Arch) {
  TuneEntry E;
  E.Key = makeTuneKey(Def, Sig, OnArch,
                      TuneShape{S.B, S.H, S.Hkv, S.Sq, S.Skv}, Dev);
  E.Definition = Def.Graph->name();
  E.Best = {Config, 1.0, 100.0};
  return E;
}

/// The forward's configuration the selector chooses for a call of \p S.
std::string select(const CompiledDefinition &Def, const Signature &Sig,
                   const CallShape &S, const std::string &Dev = Device,
                   GpuArch OnArch = Arch) {
  KernelTarget T = kernelTarget(Def, Sig, OnArch, Direction::Forward);
  KernelPolicy P =
      KernelPolicy::parse(T, Sig.Skeleton, Sig.Config, Sig.TuneFile, Sig.Tune);
  TuneNow Tune = [&] {
    return tuneForward(Def, Sig, OnArch, {S.B, S.H, S.Hkv, S.Sq, S.Skv},
                       TuneOptions(), nullptr)
        .Entry;
  };
  return chooseKernel(Def, T, P, {S.B, S.H, S.Hkv, S.Sq, S.Skv}, Dev, Tune)
      .configText();
}

/// The forward's skeleton name under \p Sig on \p A.
std::string skeletonOf(const CompiledDefinition &Def, const Signature &Sig,
                       GpuArch A) {
  KernelTarget T = kernelTarget(Def, Sig, A, Direction::Forward);
  return chooseSkeleton(T, KernelPolicy::parse(T, Sig.Skeleton, Sig.Config))
      .name()
      .str();
}

} // namespace

TEST_CASE("chooseKernel: explicit, tuned, stale, default",
          "[tuning][select]") {
  CompiledDefinition Mha = compile(examples::mha());
  CompiledDefinition Relu = compile(examples::reluAttn());
  const std::string Default =
      codegen::FwdConfig::defaultFor(128, 128, Arch).str();
  TempFile F;
  Signature Sig;
  Sig.TuneFile = F.Path;
  CallShape Shape = callShape(4, 32, 4096, 4096);

  // An entry for mha at this shape, and stale ones: another device, another
  // NVRTC, another head dim — none of them for relu_attn.
  TuneEntry Good = entryFor(Mha, Sig, Shape, "m128n64w4s3");
  TuneEntry OtherDevice =
      entryFor(Mha, Sig, callShape(4, 32, 1024, 1024), "m64n64w4s2", "Other");
  TuneEntry OtherNvrtc = entryFor(Mha, Sig, callShape(4, 32, 2048, 2048),
                                  "m64n64w4s3");
  OtherNvrtc.Key.Nvrtc = "0.1";
  mergeIntoTuneFile(F.Path, {Good, OtherDevice, OtherNvrtc});

  SECTION("a matching entry is used, for every shape of its bucket") {
    CHECK(select(Mha, Sig, Shape) == "m128n64w4s3");
    CHECK(select(Mha, Sig, callShape(4, 32, 3000, 4096)) ==
          "m128n64w4s3");
    CHECK(select(Mha, Sig, callShape(2, 64, 4096, 2049)) ==
          "m128n64w4s3");
  }
  SECTION("another bucket, variant, device or toolchain gets the default") {
    CHECK(select(Mha, Sig, callShape(4, 32, 4097, 4096)) == Default);
    CHECK(select(Mha, Sig, callShape(8, 32, 4096, 4096)) == Default);
    CHECK(select(Relu, Sig, Shape) == Default);
    CHECK(select(Mha, Sig, Shape, "Other GPU") == Default);
    // The "Other" device's entry is not applied on the test device...
    CHECK(select(Mha, Sig, callShape(4, 32, 1024, 1024)) == Default);
    // ...but is on that device; the stale NVRTC entry never is.
    CHECK(select(Mha, Sig, callShape(4, 32, 1024, 1024), "Other") ==
          "m64n64w4s2");
    CHECK(select(Mha, Sig, callShape(4, 32, 2048, 2048)) == Default);
    Signature Bf16 = Sig;
    Bf16.Dtype = DType::BF16;
    CHECK(select(Mha, Bf16, Shape) == Default);
    Signature D64 = Sig;
    D64.HeadDim = D64.HeadDimV = 64;
    CHECK(select(Mha, D64, Shape) ==
          codegen::FwdConfig::defaultFor(64, 64, Arch).str());
  }
  SECTION("Sig.Config wins over the file") {
    Signature Given = Sig;
    Given.Config = "m64n32w4s2";
    CHECK(select(Mha, Given, Shape) == "m64n32w4s2");
  }
  SECTION("without a tune file, the default") {
    Signature None;
    CHECK(select(Mha, None, Shape) == Default);
  }
  SECTION("a new entry written later is seen by the same process") {
    CallShape Small = callShape(1, 8, 512, 512);
    CHECK(select(Mha, Sig, Small) == Default);
    mergeIntoTuneFile(F.Path, {entryFor(Mha, Sig, Small, "m64n64w4s2")});
    CHECK(select(Mha, Sig, Small) == "m64n64w4s2");
    CHECK(select(Mha, Sig, Shape) == "m128n64w4s3");
  }
  SECTION("a file that is not a tune file is an error, a missing one is not") {
    {
      std::error_code EC;
      llvm::raw_fd_ostream OS(F.Path, EC);
      OS << "{\"version\": 99, \"entries\": []}";
    }
    CHECK_THROWS_WITH(select(Mha, Sig, Shape),
                      Contains("version 99; this attnc reads version 1"));
    Signature Missing = Sig;
    Missing.TuneFile = F.Dir.Path + "/absent.json";
    CHECK(select(Mha, Missing, Shape) == Default);
  }
  SECTION("with Tune, a matching entry is used without tuning") {
    Signature Tune = Sig;
    Tune.Tune = true;
    unsigned Before = tuneRunCount();
    CHECK(select(Mha, Tune, Shape) == "m128n64w4s3");
    CHECK(tuneRunCount() == Before);
    // No entry: tuning needs the GPU, which this machine may not have.
    if (!CudaDriver::get().available())
      CHECK_THROWS_AS(select(Mha, Tune, callShape(1, 1, 64, 64), ""),
                      DriverError);
  }
}

TEST_CASE("on sm_90a, fwd_sm90 has its own entries and default",
          "[tuning][select]") {
  const GpuArch Hopper = GpuArch::Sm90a;
  CompiledDefinition Mha = compile(examples::mha());
  TempFile F;
  Signature Sig;
  Sig.TuneFile = F.Path;
  Signature Sm80 = Sig;
  Sm80.Skeleton = "fwd_sm80";
  CallShape Shape = callShape(4, 32, 4096, 4096);
  const std::string Sm90Default =
      codegen::Sm90Config::defaultFor(128, 128).str();
  const std::string Sm80Default =
      codegen::FwdConfig::defaultFor(128, 128, Hopper).str();

  CHECK(skeletonOf(Mha, Sig, Hopper) == "fwd_sm90");
  CHECK(skeletonOf(Mha, Sm80, Hopper) == "fwd_sm80");
  CHECK(skeletonOf(Mha, Sig, GpuArch::Sm80) == "fwd_sm80");
  // A configuration in fwd_sm90's form implies that skeleton.
  Signature Named = Sig;
  Named.Config = "sm90.m64n128s2";
  CHECK(skeletonOf(Mha, Named, Hopper) == "fwd_sm90");
  // Head dims fwd_sm90 does not run: the next skeleton of the table. No
  // skeleton runs 96: each one's reason.
  Signature D96 = Sig;
  D96.HeadDim = D96.HeadDimV = 96;
  CHECK_THROWS_WITH(skeletonOf(Mha, D96, Hopper),
                    Contains("no skeleton runs forward f16 d96/96 sm_90a: "
                             "fwd_sm90: head_dim 96 is not supported by "
                             "fwd_sm90") &&
                        Contains("; fwd_sm80: head_dim 96 is not supported "
                                 "by fwd_sm80"));

  // No entries: each skeleton's default.
  CHECK(select(Mha, Sig, Shape, Device, Hopper) == Sm90Default);
  CHECK(select(Mha, Sm80, Shape, Device, Hopper) == Sm80Default);

  // An fwd_sm80 entry (tuned with Skeleton "fwd_sm80") serves only calls that
  // ask for fwd_sm80; an fwd_sm90 entry only the default path.
  TuneEntry Portable =
      entryFor(Mha, Sm80, Shape, "m64n64w4s2", Device, Hopper);
  CHECK(Portable.Key.Skeleton == "fwd_sm80");
  mergeIntoTuneFile(F.Path, {Portable});
  CHECK(select(Mha, Sig, Shape, Device, Hopper) == Sm90Default);
  CHECK(select(Mha, Sm80, Shape, Device, Hopper) == "m64n64w4s2");
  TuneEntry Hop =
      entryFor(Mha, Sig, Shape, "sm90.m128n128s2", Device, Hopper);
  CHECK(Hop.Key.Skeleton == "fwd_sm90");
  mergeIntoTuneFile(F.Path, {Hop});
  CHECK(select(Mha, Sig, Shape, Device, Hopper) == "sm90.m128n128s2");
  CHECK(select(Mha, Sm80, Shape, Device, Hopper) == "m64n64w4s2");

  // A hand-edited entry whose configuration is another skeleton's is
  // refused, never launched.
  CallShape Other = callShape(1, 8, 1024, 1024);
  mergeIntoTuneFile(F.Path,
                    {entryFor(Mha, Sig, Other, "m64n64w4s2", Device, Hopper)});
  CHECK_THROWS_WITH(select(Mha, Sig, Other, Device, Hopper),
                    Contains("expected sm90.m<block M>n<block N>s<stages>"));
}

TEST_CASE("the variant key follows the analysed IR", "[tuning][select]") {
  CompiledDefinition A = compile(examples::mha());
  CompiledDefinition B = compile(examples::mha());
  CompiledDefinition C = compile(examples::reluAttn());
  dsl::AttentionDef Full = examples::mha();
  Full.mask_mod = {};
  CompiledDefinition D = compile(Full);
  CHECK(variantKey(A) == variantKey(B));
  CHECK(variantKey(A).size() == 64);
  CHECK(variantKey(A) != variantKey(C));
  // Same name, no mask: a different variant (causal-or-not is part of it).
  CHECK(variantKey(A) != variantKey(D));
  Signature Sig;
  TuneShape S{1, 2, 2, 128, 128};
  CHECK(makeTuneKey(A, Sig, Arch, S, Device) ==
        makeTuneKey(B, Sig, Arch, S, Device));
  CHECK_FALSE(makeTuneKey(A, Sig, Arch, S, Device) ==
              makeTuneKey(D, Sig, Arch, S, Device));
}

TEST_CASE("the skeleton table: names, kinds, directions", "[tuning][skeleton]") {
  CHECK(skeletonNames() ==
        "fwd_sm90, fwd_sm80, bwd_sm90, bwd_sm80, linear_chunk, decode_sm80");
  CHECK(skeletonNames(ir::DefinitionKind::Transformer, Direction::Forward) ==
        "fwd_sm90, fwd_sm80, decode_sm80");
  // Only the decode entry says it is one (the short-query rule's and the
  // decode runner's question).
  for (const Skeleton *S : skeletonTable())
    CHECK(S->isDecode() == (S->name() == "decode_sm80"));
  CHECK(skeletonNames(ir::DefinitionKind::Transformer, Direction::Backward) ==
        "bwd_sm90, bwd_sm80");
  CHECK(skeletonNames(ir::DefinitionKind::Linear, Direction::Backward) ==
        "linear_chunk");
  CHECK(findSkeleton("nope") == nullptr);
  CHECK_THROWS_WITH(skeletonNamed("nope"),
                    Contains("skeleton 'nope': no such skeleton; expected one "
                             "of fwd_sm90, fwd_sm80, bwd_sm90, bwd_sm80, "
                             "linear_chunk"));
  // Every entry prints what it parses, and its default is valid where the
  // entry says it supports the target.
  CompiledDefinition Mha = compile(examples::mha());
  CompiledDefinition Gla = compile(examples::simpleGla());
  for (const Skeleton *S : skeletonTable())
    for (Direction D : {Direction::Forward, Direction::Backward}) {
      if (!S->serves(D))
        continue;
      const CompiledDefinition &Def =
          S->kind() == ir::DefinitionKind::Linear ? Gla : Mha;
      for (GpuArch A : AllGpuArchs) {
        KernelTarget T = KernelTarget::of(Def, D, DType::F16, 128, 128, A);
        INFO(S->name().str() << " " << T.str());
        if (!S->unsupported(T).empty())
          continue;
        SkeletonConfig C = S->defaultFor(T);
        CHECK(S->print(S->parse(S->print(C))) == S->print(C));
        CHECK(S->configError(C, T).empty());
        LaunchShape L = S->launchShape(C, T);
        CHECK(L.Threads > 0);
        CHECK(L.SharedBytes <= archSharedLimit(A));
        for (const SkeletonConfig &E : S->enumerate(T))
          CHECK(S->print(S->parse(S->print(E))) == S->print(E));
      }
    }
}

TEST_CASE("KernelPolicy: names are parsed once and refused with reasons",
          "[tuning][skeleton]") {
  CompiledDefinition Mha = compile(examples::mha());
  CompiledDefinition Gla = compile(examples::simpleGla());
  KernelTarget Fwd =
      KernelTarget::of(Mha, Direction::Forward, DType::F16, 128, 128,
                       GpuArch::Sm90a);
  KernelTarget Bwd = Fwd;
  Bwd.Dir = Direction::Backward;
  KernelTarget Lin =
      KernelTarget::of(Gla, Direction::Forward, DType::F16, 128, 128,
                       GpuArch::Sm80);

  KernelPolicy P = KernelPolicy::parse(Fwd, "", "m64n64w4s2");
  REQUIRE(P.ConfigOf);
  CHECK(P.ConfigOf->name() == "fwd_sm80");
  KernelChoice C = chooseWithoutShape(Fwd, P);
  CHECK(C.str() == "fwd_sm80 m64n64w4s2 (named)");
  CHECK(chooseWithoutShape(Fwd, KernelPolicy()).str() ==
        "fwd_sm90 sm90.m128n128s3 (default)");
  CHECK(chooseWithoutShape(Bwd, KernelPolicy()).Skel->name() == "bwd_sm90");
  CHECK(chooseWithoutShape(Lin, KernelPolicy()).Skel->name() == "linear_chunk");

  CHECK_THROWS_WITH(KernelPolicy::parse(Fwd, "bwd_sm80", ""),
                    Contains("skeleton 'bwd_sm80' has no attention forward "
                             "kernels; those that do: fwd_sm90, fwd_sm80"));
  CHECK_THROWS_WITH(KernelPolicy::parse(Lin, "fwd_sm80", ""),
                    Contains("those that do: linear_chunk"));
  CHECK_THROWS_WITH(KernelPolicy::parse(Fwd, "", "c64v64w4b8"),
                    Contains("config 'c64v64w4b8' is not a configuration of "
                             "any skeleton with attention forward kernels") &&
                        Contains("for fwd_sm90") && Contains("for fwd_sm80"));
  // A named skeleton's own message for a configuration in another form.
  CHECK_THROWS_WITH(KernelPolicy::parse(Fwd, "fwd_sm90", "m64n64w4s2"),
                    Contains("expected sm90.m<block M>n<block N>s<stages>"));
  // Named but unable to run the target: why, when the choice is made.
  KernelTarget Fwd80 = Fwd;
  Fwd80.Arch = GpuArch::Sm80;
  CHECK_THROWS_WITH(chooseWithoutShape(Fwd80,
                                       KernelPolicy::parse(Fwd80, "fwd_sm90", "")),
                    Contains("skeleton fwd_sm90 cannot run forward f16 "
                             "d128/128 sm_80") &&
                        Contains("needs arch sm_90a"));
  // A configuration that parses but does not fit the target.
  CHECK_THROWS_WITH(chooseWithoutShape(Fwd80, KernelPolicy::parse(
                                                  Fwd80, "", "m64n128w4s3")),
                    Contains("sm_80 has 166912"));
  // The backward's head dims are refused when the choice is made (192/192:
  // bwd_sm90's column split runs 192 with head_dim_v 128 or 256 only).
  KernelTarget Bwd192 = Bwd;
  Bwd192.HeadDim = 192;
  Bwd192.HeadDimV = 192;
  CHECK_THROWS_WITH(chooseWithoutShape(Bwd192, KernelPolicy()),
                    Contains("head_dim 192 is not supported by bwd_sm90") &&
                        Contains("head_dim 192 is not supported by bwd_sm80"));
}

TEST_CASE("fallbackChoice: the portable skeleton after fwd_sm90",
          "[tuning][skeleton]") {
  CompiledDefinition Mha = compile(examples::mha());
  KernelTarget T = KernelTarget::of(Mha, Direction::Forward, DType::BF16, 128,
                                    128, GpuArch::Sm90a);
  KernelChoice F = fallbackChoice(T, skeletonNamed("fwd_sm90"));
  CHECK(F.Skel->name() == "fwd_sm80");
  CHECK(F.configText() ==
        codegen::FwdConfig::defaultFor(128, 128, GpuArch::Sm90a).str());
  CHECK_THROWS_AS(fallbackChoice(T, skeletonNamed("fwd_sm80")), InternalError);
}

// Hidden: ctest runs it in a process where NVRTC cannot be loaded
// (ATTNC_NVRTC_LIBRARY names no file; tests/tuning/CMakeLists.txt), as a
// deployed program that runs bundled kernels is.
TEST_CASE("without NVRTC, a tune file's entry of any toolchain is used",
          "[.no-nvrtc][tuning][select]") {
  REQUIRE_THROWS_AS(nvrtcVersion(), CompilerUnavailable);
  CompiledDefinition Mha = compile(examples::mha());
  TempFile F;
  Signature Sig;
  Sig.TuneFile = F.Path;
  CallShape Shape = callShape(4, 32, 4096, 4096);
  TuneEntry E = entryFor(Mha, Sig, Shape, "m128n64w4s3");
  // The key made here names no toolchain; the file's names the one that
  // compiled and timed the configuration.
  CHECK(E.Key.Nvrtc.empty());
  E.Key.Nvrtc = "13.0";
  TuneEntry OtherDevice = entryFor(Mha, Sig, callShape(4, 32, 1024, 1024),
                                   "m64n64w4s2", "Other");
  OtherDevice.Key.Nvrtc = "13.0";
  mergeIntoTuneFile(F.Path, {E, OtherDevice});
  CHECK(select(Mha, Sig, Shape) == "m128n64w4s3");
  // Every other field still has to match.
  CHECK(select(Mha, Sig, callShape(4, 32, 1024, 1024)) ==
        codegen::FwdConfig::defaultFor(128, 128, Arch).str());
  CHECK(select(Mha, Sig, callShape(4, 32, 1024, 1024), "Other") ==
        "m64n64w4s2");
}
