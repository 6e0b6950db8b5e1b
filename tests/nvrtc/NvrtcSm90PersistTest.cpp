// fwd_sm90's persistent kernel without a GPU: its configuration string and
// shared memory, the choice of it (the heuristic, the environment's switch
// and the mean key blocks per query block from the mask analysis), the
// generated text (unchanged where the option is off), and
// NVRTC compiles of it for sm_90a, CUBINs with no wgmma serialisation.
#include "Examples.h"
#include "NvrtcPtx.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/analysis/MaskBounds.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Selector.h"

#include <catch2/catch.hpp>
#include <llvm/ADT/STLExtras.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

using namespace attn;
using namespace attn::nvrtctest;
using codegen::KernelSpec;
using codegen::Sm90Config;

TEST_CASE("sm90 persistent: configuration string and shared memory", "[sm90]") {
  Sm90Config P = Sm90Config::parse("sm90.m128n128s2p");
  CHECK(P.Persistent);
  CHECK(P.Stages == 2);
  CHECK(P.str() == "sm90.m128n128s2p");
  CHECK_FALSE(Sm90Config::parse("sm90.m128n128s2").Persistent);
  for (const char *Bad : {"sm90.m128n128s2pp", "sm90.m128n128p", "sm90.m128n128s2q"})
    CHECK_THROWS_AS(Sm90Config::parse(Bad), UserError);
  CHECK_FALSE(P == Sm90Config{128, 128, 2});
  // O's tile beside Q's.
  CHECK(P.sharedBytes(128, 128) == 1024 + 2 * (2 * 128 * 128 + 2 * 128 * 256) + 256);
  // The default's three stages of d128 do not fit beside O: two.
  std::optional<Sm90Config> D128 = Sm90Config::defaultFor(128, 128).persistentFor(128, 128);
  REQUIRE(D128);
  CHECK(D128->str() == "sm90.m128n128s2p");
  std::optional<Sm90Config> D64 = Sm90Config::defaultFor(64, 64).persistentFor(64, 64);
  REQUIRE(D64);
  CHECK(D64->str() == "sm90.m128n128s3p");
  // One Q tile (p1): O staged in Q's, so three stages of d128 fit.
  Sm90Config P1 = Sm90Config::parse("sm90.m128n128s3p1");
  CHECK(P1.Persistent);
  CHECK(P1.QTiles == 1);
  CHECK(P1.str() == "sm90.m128n128s3p1");
  CHECK(P1.sharedBytes(128, 128) == 1024 + 2 * (128 * 128 + 3 * 128 * 256) + 256);
  CHECK(P1.sharedBytes(128, 128) <= archSharedLimit(GpuArch::Sm90a));
  CHECK(codegen::sm90Unsupported(kernelSpec(DType::F16, 128, 128), P1).empty());
  CHECK_FALSE(P1 == Sm90Config::parse("sm90.m128n128s3p"));
  CHECK(Sm90Config::parse("sm90.m128n128s3p").QTiles == 2);
  for (const char *Bad : {"sm90.m128n128s3p2", "sm90.m128n128s3p1p", "sm90.m128n128s3q1"})
    CHECK_THROWS_AS(Sm90Config::parse(Bad), UserError);
  // The message names the string and both persistent suffixes.
  CHECK_THROWS_WITH(Sm90Config::parse("sm90.m128n128s3p2"),
                    Catch::Contains("config 'sm90.m128n128s3p2'") &&
                        Catch::Contains("s<stages>[p|p1]") &&
                        Catch::Contains("p1: persistent with O staged in Q's tile"));
  // 256/256: two stages of 64 keys and Q alone take 161 KiB; O does not fit.
  CHECK_FALSE(Sm90Config::defaultFor(256, 256).persistentFor(256, 256));
  CHECK(has(codegen::sm90Unsupported(kernelSpec(DType::F16, 256, 256),
                                     Sm90Config{128, 64, 2, true}),
            "shared memory"));
}

TEST_CASE("sm90 persistent: when it is chosen", "[sm90]") {
  using runtime::persistentHeuristic;
  const double Analysed = runtime::PersistentMaxMeanVisits;
  const double Lists = runtime::PersistentMaxListMeanVisits;
  // B16 H32 S1k, blocks of 128: 4096 tiles on 132 SMs.
  CHECK(persistentHeuristic(4096, 1.5, 8, 132, Analysed));
  CHECK(persistentHeuristic(4096, 3.0, 32, 132, Analysed));
  // Plain causal at S = 768 (B21 H32: 4032 tiles, a mean of 3.5 from the
  // analysis) stays plain; the document mask at 4k (B4 H32: 4096 tiles, a
  // mean of 3.53 from its block mask's lists) goes persistent.
  CHECK_FALSE(persistentHeuristic(4032, 3.5, 6, 132, Analysed));
  CHECK(persistentHeuristic(4096, 3.53, 32, 132, Lists));
  CHECK(persistentHeuristic(4096, 4.0, 32, 132, Lists));
  CHECK_FALSE(persistentHeuristic(4096, 4.01, 32, 132, Lists));
  // The document mask at 16k (B1 H32: 4096 tiles, 9.97).
  CHECK_FALSE(persistentHeuristic(4096, 9.97, 128, 132, Lists));
  CHECK_FALSE(persistentHeuristic(4096, 4.5, 8, 132, Analysed));
  // The mean unknown (a mask reading tensors): by the key blocks a row.
  CHECK(persistentHeuristic(4096, std::nullopt, 8, 132, Analysed));
  CHECK_FALSE(persistentHeuristic(1024, std::nullopt, 32, 132, Analysed));
  CHECK_FALSE(persistentHeuristic(4 * 132 - 1, 1.0, 8, 132, Analysed));
  CHECK(persistentHeuristic(4 * 132, 1.0, 8, 132, Analysed));
  CHECK_FALSE(persistentHeuristic(4096, 1.0, 8, 0, Analysed));
  REQUIRE(unsetenv("ATTNC_FWD_PERSISTENT") == 0);
  CHECK(runtime::persistentWanted(4096, 1.5, 8, 132));
  CHECK_FALSE(runtime::persistentWanted(4096, 3.53, 32, 132));
  CHECK(runtime::persistentWanted(4096, 3.53, 32, 132, Lists));
  REQUIRE(setenv("ATTNC_FWD_PERSISTENT", "0", 1) == 0);
  CHECK_FALSE(runtime::persistentWanted(4096, 1.5, 8, 132));
  REQUIRE(setenv("ATTNC_FWD_PERSISTENT", "1", 1) == 0);
  CHECK(runtime::persistentWanted(1, 100.0, 1000, 132));
  REQUIRE(setenv("ATTNC_FWD_PERSISTENT", "yes", 1) == 0);
  CHECK_THROWS_AS(runtime::persistentWanted(1, 1.0, 1, 132), UserError);
  CHECK_THROWS_WITH(runtime::persistentWanted(1, 1.0, 1, 132),
                    Catch::Contains("ATTNC_FWD_PERSISTENT='yes': expected 0 (plain fwd_sm90 "
                                    "grid) or 1 (persistent)"));
  REQUIRE(unsetenv("ATTNC_FWD_PERSISTENT") == 0);
}

TEST_CASE("sm90 persistent: the mean key blocks a query block visits", "[sm90]") {
  auto Mean = [](dsl::AttentionDef (*Make)(), int64_t S,
                 const std::map<std::string, double> &Scalars,
                 double Stop = 1e9) {
    const dsl::AttentionDef Example = Make();
    CompiledDefinition Def = compile(Example);
    return runtime::meanVisitedBlocks(analysis::analyzeMask(*Def.Graph), S, S, 128,
                                      128, 128, Scalars, Stop);
  };
  // Causal at 1k: query block m visits m + 1 of 8.
  CHECK(Mean(examples::mha, 1024, {}) == 4.5);
  // Stopped past 3 from the heaviest block down: 8 + 7 + 6 + 5 > 24.
  CHECK(Mean(examples::mha, 1024, {}, 3.0) == 26.0 / 8);
  // A window of 256 keys: blocks m - 2 (partial), m - 1 (full), m.
  CHECK(Mean(examples::mhaSlidingWindow, 1024, {}) == 21.0 / 8);
  CHECK(Mean(examples::mhaSlidingWindow, 4096, {}) == 93.0 / 32);
  // Chunks of 256: one block, then two, in turn.
  CHECK(Mean(examples::mhaChunked, 1024, {{"chunk", 256}}) == 1.5);
  // A prefix of 256 keys: blocks 0 and 1 for every row, then causal.
  CHECK(Mean(examples::mhaPrefixLm, 1024, {{"prefix_len", 256}}) == 37.0 / 8);
  // What the host cannot know: tensor inputs, a missing scalar.
  CHECK_FALSE(Mean(examples::mhaDocument, 1024, {}));
  CHECK_FALSE(Mean(examples::mhaChunked, 1024, {}));
}

TEST_CASE("sm90 persistent: a packed call's tiles and choice", "[sm90]") {
  using runtime::forwardTiles;
  // Dense: query blocks x batch x heads.
  CHECK(forwardTiles(32, 32, 4107, 0, false, 128) == 33 * 32 * 32);
  // Packed: the plain grid's blocks (by the tokens, at most one block a
  // sequence past them; by the longest, its blocks a sequence) x heads.
  CHECK(forwardTiles(4, 2, 100, 400, true, 128) == 4 * 2);
  CHECK(forwardTiles(3, 2, 300, 310, true, 128) == (310 + 3 * 127) / 128 * 2);
  // The varlen bench's batch: 32 sequences in [64, 8192], 131425 tokens,
  // the longest 8145; H32, blocks of 128 (docs/performance-log.md).
  const int64_t Tokens = 131425, Longest = 8145;
  const int64_t Tiles = forwardTiles(32, 32, Longest, Tokens, true, 128);
  CHECK(Tiles == (Tokens + 32 * 127) / 128 * 32);
  // Its visits over one sequence of the longest lengths decide: windows and
  // chunks walk, causal and unmasked batches do not.
  auto WalksAt = [&](dsl::AttentionDef (*Make)(), const std::map<std::string, double> &Scalars,
                     int64_t Max, int64_t Tiles) {
    const dsl::AttentionDef Example = Make();
    CompiledDefinition Def = compile(Example);
    const analysis::MaskAnalysis A = analysis::analyzeMask(*Def.Graph);
    REQUIRE(analysis::packedRangeFromBoxes(A));
    const std::optional<double> Mean = runtime::meanVisitedBlocks(
        A, Max, Max, 128, 128, 128, Scalars, runtime::PersistentMaxMeanVisits);
    return runtime::persistentHeuristic(Tiles, Mean, (Max + 127) / 128, 132,
                                        runtime::PersistentMaxMeanVisits);
  };
  auto Walks = [&](dsl::AttentionDef (*Make)(), const std::map<std::string, double> &Scalars) {
    return WalksAt(Make, Scalars, Longest, Tiles);
  };
  CHECK(Walks(examples::mhaSlidingWindow, {}));
  CHECK(Walks(examples::mhaChunked, {{"chunk", 256}}));
  CHECK_FALSE(Walks(examples::mha, {}));
  CHECK_FALSE(Walks(examples::reluAttn, {}));
  // Short sequences walk unmasked and causal: 1000 of at most 384 tokens
  // (3 key blocks, H16), but not with a longest of 385.
  const int64_t Short = forwardTiles(1000, 16, 384, 300000, true, 128);
  CHECK(WalksAt(examples::reluAttn, {}, 384, Short));
  CHECK(WalksAt(examples::mha, {}, 384, Short));
  CHECK_FALSE(WalksAt(examples::reluAttn, {}, 385, Short));
}

TEST_CASE("sm90 persistent: which masks a packed call walks", "[sm90]") {
  auto Walks = [](dsl::AttentionDef (*Make)()) {
    const dsl::AttentionDef Example = Make();
    CompiledDefinition Def = compile(Example);
    return analysis::packedRangeFromBoxes(analysis::analyzeMask(*Def.Graph));
  };
  // No mask, and masks bounded from the box alone (scalar inputs exact).
  CHECK(Walks(examples::reluAttn));
  CHECK(Walks(examples::mha));
  CHECK(Walks(examples::mhaSlidingWindow));
  CHECK(Walks(examples::mhaChunked));
  CHECK(Walks(examples::mhaPrefixLm));
  // Document ids bounded per block: the range needs the whole CTA's scan.
  CHECK_FALSE(Walks(examples::mhaDocument));
  CHECK_FALSE(Walks(examples::mhaDocumentIds));
}

TEST_CASE("sm90 persistent: generated text", "[sm90]") {
  CompiledDefinition Mha = compile(examples::mha());
  KernelSpec Spec = kernelSpec(DType::F16, 128, 128);
  codegen::KernelSource Plain =
      codegen::generateForwardSm90(Mha, Spec, Sm90Config{128, 128, 2});
  codegen::KernelSource Persist =
      codegen::generateForwardSm90(Mha, Spec, Sm90Config{128, 128, 2, true});
  CHECK(Persist.Key == "mha.fwd_sm90.f16.d128x128.sm_90a.sm90.m128n128s2p");
  CHECK(has(Persist.Source, "#include \"attnc/fwd_sm90_persist.cuh\"\n"));
  CHECK(has(Persist.Source, "using FwdP = attnc::FwdSm90Persist<Fwd>;\n"
                            "static_assert(FwdP::kSmemBytes == 197888,"));
  CHECK(has(Persist.Source, "attnc_gen::FwdP::run(a, in, maps, smem);"));
  // The packed walk's entry, where the mask's ranges come from box classes.
  CHECK(has(Persist.Source, "attnc_fwd_packed(const attnc::FwdArgs a"));
  CHECK(has(Persist.Source, "attnc_gen::FwdP::run_packed(a, in, maps, smem);"));
  CHECK(llvm::is_contained(Persist.Entries, std::string(codegen::PackedPersistentEntry)));
  CHECK_FALSE(llvm::is_contained(Plain.Entries, std::string(codegen::PackedPersistentEntry)));
  // Its tiles' facts, found by a kernel of their own before the walk.
  CHECK(has(Persist.Source, "attnc_fwd_packed_tiles(const attnc::FwdArgs a, "
                            "const attnc_gen::Inputs in) {\n"
                            "  attnc_gen::FwdP::find_packed_tiles(a, in);"));
  CHECK(llvm::is_contained(Persist.Entries, std::string(codegen::PackedTilesEntry)));
  CHECK_FALSE(llvm::is_contained(Plain.Entries, std::string(codegen::PackedTilesEntry)));
  // Document ids are bounded per block: no packed walk.
  CompiledDefinition Doc = compile(examples::mhaDocument());
  codegen::KernelSource DocPersist =
      codegen::generateForwardSm90(Doc, Spec, Sm90Config{128, 128, 2, true});
  CHECK(!has(DocPersist.Source, "run_packed"));
  CHECK_FALSE(
      llvm::is_contained(DocPersist.Entries, std::string(codegen::PackedPersistentEntry)));
  CHECK_FALSE(llvm::is_contained(DocPersist.Entries, std::string(codegen::PackedTilesEntry)));
  // One Q tile: the struct's second argument; two: the text as before.
  codegen::KernelSource OneTile = codegen::generateForwardSm90(
      Mha, Spec, Sm90Config::parse("sm90.m128n128s3p1"));
  CHECK(has(OneTile.Source, "using FwdP = attnc::FwdSm90Persist<Fwd, 1>;"));
  CHECK(has(OneTile.Source, "static_assert(FwdP::kSmemBytes == 230656,"));
  // Off, the text is the one before the option (the same CUBINs).
  CHECK(!has(Plain.Source, "persist"));
  CHECK(!has(Plain.Source, "FwdP"));
  CHECK(has(Plain.Source, "#include \"attnc/variant_support.cuh\"\n\nnamespace attnc_gen {"));
  CHECK(has(Plain.Source, " 128, 128, 2>;\n"
                          "static_assert(Fwd::kSmemBytes == 165120,"));
  CHECK(has(Plain.Source, "attnc_gen::Fwd::run(a, in, maps, smem);"));
}

TEST_CASE("sm90 persistent: compiles for sm_90a", "[nvrtc][sm90][masks]") {
  struct {
    dsl::AttentionDef (*Make)();
    DType T;
    int D;
  } Cases[] = {{examples::mha, DType::F16, 128},
               {examples::mhaDocument, DType::F16, 128},
               {examples::mhaChunked, DType::BF16, 128},
               {examples::mhaSlidingWindow, DType::F16, 64}};
  for (const auto &C : Cases) {
    const dsl::AttentionDef Example = C.Make();
    CompiledDefinition Def = compile(Example);
    std::optional<Sm90Config> P = Sm90Config::defaultFor(C.D, C.D).persistentFor(C.D, C.D);
    REQUIRE(P);
    // The default's persistent form, and the one-Q-tile form of three stages.
    for (const Sm90Config &Config : {*P, Sm90Config::parse("sm90.m128n128s3p1")}) {
      checkedWgmmaCubin(
          codegen::generateForwardSm90(Def, kernelSpec(C.T, C.D, C.D), Config));
    }
  }
}
