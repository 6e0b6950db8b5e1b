// The decode skeleton without a GPU: its configuration strings, the merge
// struct generated from each merge kind, NVRTC compiles of every
// transformer example for sm_80 and sm_90a (f16 and bf16), the
// selector's short-query rule and split heuristic, the public merge's
// kernel for a definition's combine (the same merge struct), and the
// runtime's public merge kernels (two columns a thread, or eight).
#include "ExampleRegistry.h"
#include "NvrtcPtx.h"
#include "PagedDecode.h"
#include "../kernels/decode_args.cuh"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/codegen/DecodeCodegen.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Selector.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>

using namespace attn;
using namespace attn::nvrtctest;
using analysis::MergeKind;
using codegen::DecodeConfig;
using codegen::KernelSpec;

namespace {

/// Compiles \p Src to CUBIN and checks it is an ELF image; a failure is
/// reported with NVRTC's log (under the caller's INFO) and returns false,
/// so the caller goes on with its next kernel.
bool compilesToElf(const codegen::KernelSource &Src) {
  runtime::CompiledCubin C;
  try {
    C = runtime::compileToCubin(Src);
  } catch (const CompileError &E) {
    FAIL_CHECK(E.what());
    return false;
  }
  CHECK(C.Cubin.size() > 4);
  CHECK(std::memcmp(C.Cubin.data(), "\x7f" "ELF", 4) == 0);
  return true;
}

/// f16 on sm_80 and bf16 on sm_90a at d128 (default configuration) to
/// CUBIN, with the entries the merge kind calls for; the PTX of one has the
/// tensor-core instructions and, with a merge, the merge kernel.
void compileDecode(const std::string &Name) {
  CompiledDefinition Def = compile(testsupport::registry().get(Name));
  MergeKind M = analysis::analyzeMerge(*Def.Graph).Kind;
  for (auto [T, Arch] : {std::pair{DType::F16, GpuArch::Sm80},
                         std::pair{DType::BF16, GpuArch::Sm90a}}) {
    KernelSpec S = kernelSpec(T, 128, 128, Arch);
    codegen::KernelSource Src =
        codegen::generateDecode(Def, S, DecodeConfig::defaultFor(128, 128, Arch));
    INFO("kernel " << Src.Key);
    CHECK(Src.Entries.size() == (M == MergeKind::None ? 1u : 2u));
    if (!compilesToElf(Src))
      continue;
    if (Arch == GpuArch::Sm80) {
      std::string Ptx = compileToPtx(Src);
      CHECK(has(Ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
      CHECK(has(Ptx, ".entry attnc_decode("));
      CHECK(has(Ptx, ".entry attnc_decode_merge(") == (M != MergeKind::None));
    }
  }
}

} // namespace

TEST_CASE("decode: configuration strings", "[decode]") {
  DecodeConfig C = DecodeConfig::parse("dec.m32n128w4s2");
  CHECK(C == DecodeConfig{32, 128, 4, 2});
  CHECK(C.str() == "dec.m32n128w4s2");
  for (const char *Bad : {"dec.m16n64w4", "m16n64w4s3", "dec.m16n64w4s3x"})
    CHECK_THROWS_WITH(DecodeConfig::parse(Bad),
                      "config '" + std::string(Bad) +
                          "': expected dec.m<rows>n<block N>w<warps>s<stages>, "
                          "e.g. dec.m16n64w4s3");
  CHECK(DecodeConfig{48, 64, 4, 3}.structuralError() ==
        "config dec.m48n64w4s3: rows per CTA must be 16 or 32");
  CHECK(DecodeConfig{16, 32, 4, 3}.structuralError() ==
        "config dec.m16n32w4s3: block N must be a multiple of 16 x warps "
        "(64), at most 256");
  CHECK(DecodeConfig{16, 64, 3, 3}.structuralError() ==
        "config dec.m16n64w3s3: warps must be 1, 2, 4 or 8");
  CHECK(DecodeConfig{16, 64, 4, 5}.structuralError() ==
        "config dec.m16n64w4s5: stages must be 2, 3 or 4");
  for (const DecodeConfig &E : DecodeConfig::enumerate())
    CHECK(E.structuralError().empty());
  CHECK(DecodeConfig::enumerate().size() == 24);
  // d256 does not fit three stages of 64 keys on sm_80 (163 KiB).
  CHECK(DecodeConfig::defaultFor(128, 128, GpuArch::Sm80).Stages == 3);
  CHECK(DecodeConfig::defaultFor(256, 256, GpuArch::Sm80).Stages == 2);
  // Two warps of 32 keys for d128 K/V, contiguous or in pages of at least
  // 16 keys; four of 16 for smaller pages and the other head dims.
  CHECK(DecodeConfig::defaultFor(128, 128, GpuArch::Sm90a).str() == "dec.m16n64w2s3");
  for (int64_t Page : {16, 64, 256})
    CHECK(DecodeConfig::defaultFor(128, 128, GpuArch::Sm90a, Page).Warps == 2);
  for (int64_t Page : {1, 2, 4, 8})
    CHECK(DecodeConfig::defaultFor(128, 128, GpuArch::Sm90a, Page).str() ==
          "dec.m16n64w4s3");
  CHECK(DecodeConfig::defaultFor(64, 64, GpuArch::Sm90a, 16).Warps == 4);
  CHECK(DecodeConfig::defaultFor(64, 64, GpuArch::Sm90a).str() == "dec.m16n64w4s3");
  CHECK(DecodeConfig::defaultFor(128, 256, GpuArch::Sm90a).Warps == 4);
  CHECK(codegen::decodeConfigError(kernelSpec(DType::F16, 96, 96, GpuArch::Sm80),
                                   DecodeConfig{}) ==
        "head_dim 96 is not supported by decode_sm80; expected 64, 128, 192 "
        "or 256");
  CHECK(codegen::decodeConfigError(kernelSpec(DType::F16, 256, 256, GpuArch::Sm80),
                                   DecodeConfig{16, 128, 4, 4}) ==
        "config dec.m16n128w4s4 needs 532480 bytes of shared memory for "
        "d256/256; sm_80 has 166912");
}

TEST_CASE("decode: the merge struct follows the merge kind", "[decode]") {
  auto MergeOf = [](const char *Name) {
    CompiledDefinition Def = compile(testsupport::registry().get(Name));
    return codegen::decodeMergeStruct(*Def.Graph,
                                      analysis::analyzeMerge(*Def.Graph));
  };
  std::string Lse = MergeOf("mha");
  CHECK(has(Lse, "static constexpr int kKind = 2; // log-sum-exp"));
  CHECK(has(Lse, "const float m = fmaxf(a.rs_0_m, b.rs_0_m);"));
  CHECK(has(Lse, "a.rs_1_r = fa * a.rs_1_r + fb * b.rs_1_r;"));
  std::string Sum = MergeOf("sigmoid_attn");
  CHECK(has(Sum, "static constexpr int kKind = 1; // sum"));
  CHECK(has(Sum, "static constexpr int kNumRowscales = 0;"));
  std::string None = MergeOf("retention");
  CHECK(has(None, "static constexpr int kKind = 0; // none"));
  CHECK(has(None, "st.rs_0_r_raw = src[0];"));
  // The definition's combine: every merged value computed from a's old
  // rowscales before a is overwritten.
  std::string Own = MergeOf("retention_combine");
  CHECK(has(Own, "static constexpr int kKind = 3; // combine"));
  size_t Fb = Own.find("fb = "), Store = Own.find("a.rs_1_r = merged1;");
  CHECK(Own.find("a.rs_0_r_raw + b.rs_0_r_raw") != std::string::npos);
  CHECK(Own.find("fa = ") < Fb);
  CHECK(Fb != std::string::npos);
  CHECK(Store != std::string::npos);
  CHECK(Fb < Store);
  CHECK(has(Own, "a.rs_0_r_raw = merged0;"));
}

TEST_CASE("decode: the short-query rule and the split", "[decode]") {
  CompiledDefinition Def = compile(testsupport::registry().get("mha"));
  runtime::KernelTarget T = runtime::KernelTarget::of(
      Def, runtime::Direction::Forward, DType::F16, 128, 128, GpuArch::Sm90a);
  runtime::KernelPolicy None;
  for (int64_t Sq : {1, 4, 16}) {
    // A dense call's queries or a packed call's max_seqlen_q alike.
    std::optional<runtime::KernelChoice> C = runtime::decodeChoice(T, None, Sq);
    REQUIRE(C);
    CHECK(C->str() == "decode_sm80 dec.m16n64w2s3 (default)");
  }
  CHECK(!runtime::decodeChoice(T, None, 17));
  // A named skeleton or configuration is kept.
  CHECK(!runtime::decodeChoice(
      T, runtime::KernelPolicy::parse(T, "fwd_sm80", ""), 1));
  CHECK(!runtime::decodeChoice(
      T, runtime::KernelPolicy::parse(T, "", "m64n64w4s2"), 1));
  // Named, it is the choice made without a shape; never by default.
  CHECK(runtime::chooseWithoutShape(
            T, runtime::KernelPolicy::parse(T, "decode_sm80", ""))
            .str() == "decode_sm80 dec.m16n64w2s3 (default)");
  CHECK(runtime::chooseWithoutShape(
            T, runtime::KernelPolicy::parse(T, "", "dec.m32n64w4s2"))
            .str() == "decode_sm80 dec.m32n64w4s2 (named)");
  CHECK(runtime::chooseWithoutShape(T, None).Skel->name() == "fwd_sm90");

  using runtime::decodeSplit;
  using runtime::DecodeSplit;
  // batch 1, 8 KV heads, 32k keys on 132 SMs: 33 wanted, 16 blocks each.
  CHECK(decodeSplit(8, 32768, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{32, 16});
  // 64 CTAs: four splits fill one wave of two CTAs per SM (five would
  // start a second, mostly idle one).
  CHECK(decodeSplit(64, 32768, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{4, 128});
  // A wave's worth of CTAs already: no split.
  CHECK(decodeSplit(256, 8192, 64, 132, MergeKind::Sum) == DecodeSplit{1, 128});
  CHECK(decodeSplit(1024, 8192, 64, 132, MergeKind::Sum) ==
        DecodeSplit{1, 128});
  // One CTA an SM where the splits then take at most 16 blocks: batch 1 at
  // 8k keys 16 splits of 8 (128 CTAs), not 32 of 4; at 16k 16 of 16.
  CHECK(decodeSplit(8, 8192, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{16, 8});
  CHECK(decodeSplit(8, 16384, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{16, 16});
  // 16 blocks give 8 splits of 2 (blocks / 2 of them, fewer than the
  // SMs' 16); 2k keys at batch 1 16 splits of 2; 4k 16 of 4.
  CHECK(decodeSplit(8, 1024, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{8, 2});
  CHECK(decodeSplit(8, 2048, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{16, 2});
  CHECK(decodeSplit(8, 4096, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{16, 4});
  // Batch 4 (32 CTAs), 2k keys: 4 splits of 8 blocks (128 CTAs); 8k keys,
  // where one CTA an SM would take 32 blocks each: two an SM, 8 splits of
  // 16 (256 CTAs, one wave).
  CHECK(decodeSplit(32, 2048, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{4, 8});
  CHECK(decodeSplit(32, 8192, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{8, 16});
  CHECK(decodeSplit(8, 100, 64, 132, MergeKind::LogSumExp) ==
        DecodeSplit{1, 2});
  // No merge, no split; no keys, one empty split.
  CHECK(decodeSplit(8, 32768, 64, 132, MergeKind::None) ==
        DecodeSplit{1, 512});
  CHECK(decodeSplit(8, 0, 64, 132, MergeKind::LogSumExp) == DecodeSplit{1, 1});
  // At most DecodeMaxSplits.
  CHECK(decodeSplit(1, 1 << 20, 64, 132, MergeKind::Sum).Splits == 128);
}

TEST_CASE("decode: mha compiles", "[decode][nvrtc]") { compileDecode("mha"); }
TEST_CASE("decode: sigmoid_attn compiles", "[decode][nvrtc]") {
  compileDecode("sigmoid_attn");
}
TEST_CASE("decode: relu_attn compiles", "[decode][nvrtc]") {
  compileDecode("relu_attn");
}
TEST_CASE("decode: retention_combine compiles with its merge kernel",
          "[decode][nvrtc]") {
  compileDecode("retention_combine");
}
TEST_CASE("decode: retention compiles", "[decode][nvrtc]") {
  compileDecode("retention");
}
TEST_CASE("decode: alibi_learnable compiles", "[decode][nvrtc]") {
  compileDecode("alibi_learnable");
}
TEST_CASE("decode: softcap_learnable compiles", "[decode][nvrtc]") {
  compileDecode("softcap_learnable");
}
TEST_CASE("decode: mha_document_ids compiles", "[decode][nvrtc]") {
  compileDecode("mha_document_ids");
}
TEST_CASE("decode: mha_prefix_lm compiles", "[decode][nvrtc]") {
  compileDecode("mha_prefix_lm");
}
TEST_CASE("decode: mha_sliding_window compiles", "[decode][nvrtc]") {
  compileDecode("mha_sliding_window");
}
TEST_CASE("decode: mha_document compiles", "[decode][nvrtc]") {
  compileDecode("mha_document");
}

TEST_CASE("decode: the paged kernels compile for each merge kind",
          "[decode][nvrtc][paged]") {
  for (const char *Name :
       {"mha", "sigmoid_attn", "retention", "alibi_learnable",
        "retention_combine"}) {
    CompiledDefinition Def = compile(testsupport::registry().get(Name));
    MergeKind M = analysis::analyzeMerge(*Def.Graph).Kind;
    KernelSpec S = kernelSpec(DType::F16, 128, 128, GpuArch::Sm80);
    const DecodeConfig C = DecodeConfig::defaultFor(128, 128, GpuArch::Sm80);
    // Pages of 16 rows: the mode the plan picks for them.
    const int Mode = attnc::decode_paged_kernel_mode(4, C.BlockN, 128, 128, C.Warps * 32);
    REQUIRE(Mode >= 0);
    codegen::KernelSource Src = codegen::generatePagedDecode(Def, S, C, Mode);
    INFO("kernel " << Src.Key);
    CHECK(has(Src.Key, fmt::format(".steps{}", Mode).c_str()));
    CHECK(has(Src.Source, fmt::format("::run_paged<{}>(a, in, smem)", Mode).c_str()));
    CHECK(Src.Key.find(".decode_paged_sm80.") != std::string::npos);
    // The contiguous kernel's key is another: the two never share a cache
    // entry.
    CHECK(Src.Key != codegen::generateDecode(
                         Def, S, DecodeConfig::defaultFor(128, 128, GpuArch::Sm80))
                         .Key);
    REQUIRE(Src.Entries.size() == (M == MergeKind::None ? 1u : 2u));
    CHECK(Src.Entries.front() == "attnc_decode_paged");
    std::string Ptx;
    try {
      Ptx = compileToPtx(Src);
    } catch (const CompileError &E) {
      FAIL_CHECK(E.what());
      continue;
    }
    CHECK(has(Ptx, ".entry attnc_decode_paged("));
    CHECK(has(Ptx, ".entry attnc_decode_merge(") == (M != MergeKind::None));
  }
}

TEST_CASE("decode: the paged kernel compiles for sm_90a, with V's own page "
          "indices where dv differs from d",
          "[decode][nvrtc][paged]") {
  // d64 / dv128: V's rows take more copies a thread than K's, so the page
  // indices of each are fetched apart (PagedKV's pv), in the prologue too.
  CompiledDefinition Def = compile(testsupport::registry().get("mha"));
  for (auto [D, DV] : {std::pair{128, 128}, std::pair{64, 128}}) {
    KernelSpec S = kernelSpec(DType::BF16, D, DV, GpuArch::Sm90a);
    const DecodeConfig C = DecodeConfig::defaultFor(D, DV, GpuArch::Sm90a);
    const int Mode = attnc::decode_paged_kernel_mode(4, C.BlockN, D, DV, C.Warps * 32);
    CHECK((Mode >= 0) == (D == DV)); // no row steps where dv differs
    codegen::KernelSource Src = codegen::generatePagedDecode(Def, S, C, Mode);
    INFO("kernel " << Src.Key);
    compilesToElf(Src);
  }
}

TEST_CASE("decode: the paged kernel's row steps compile for each thread "
          "shape",
          "[decode][nvrtc][paged]") {
  // decode_paged_kv.cuh's row steps for rows 16 (d64), 4 (d256; d128 over
  // 64 threads) and 8 apart, 4 to 16 of them a thread (a block of 128 keys
  // at d128); d192's chunks do not tile 128 threads (the gather alone).
  // Each kernel holds one mode: the first (a page a row) and the last (a
  // group the whole block) of each shape here, every mode of the default
  // d128 tile in the next test.
  CompiledDefinition Def = compile(testsupport::registry().get("mha"));
  struct Shape {
    int D;
    const char *Config;
  };
  for (const Shape &X : {Shape{64, "dec.m16n64w4s3"}, Shape{256, "dec.m16n64w4s2"},
                         Shape{128, "dec.m16n64w2s3"}, Shape{128, "dec.m16n128w4s2"},
                         Shape{192, "dec.m16n64w4s2"}}) {
    KernelSpec S = kernelSpec(DType::F16, X.D, X.D, GpuArch::Sm90a);
    const DecodeConfig C = DecodeConfig::parse(X.Config);
    const int First = attnc::decode_paged_kernel_mode(0, C.BlockN, X.D, X.D, C.Warps * 32);
    const int Last = attnc::decode_paged_kernel_mode(20, C.BlockN, X.D, X.D, C.Warps * 32);
    CHECK((First == -1) == (X.D == 192));
    for (int Mode : std::set<int>{First, Last}) {
      codegen::KernelSource Src = codegen::generatePagedDecode(Def, S, C, Mode);
      INFO("kernel " << Src.Key);
      compilesToElf(Src);
    }
  }
}

TEST_CASE("decode: the paged kernel of each page size's row-step mode "
          "compiles, each under its own key",
          "[decode][nvrtc][paged]") {
  CompiledDefinition Def = compile(testsupport::registry().get("mha"));
  KernelSpec S = kernelSpec(DType::F16, 128, 128, GpuArch::Sm90a);
  const DecodeConfig C = DecodeConfig::defaultFor(128, 128, GpuArch::Sm90a, /*PageSize=*/1);
  // Page sizes 1, 2, ... 1024: modes rise from 0 by one a doubling past
  // the step (8 rows at d128, 4 warps) and stop at the block's rows.
  std::vector<int> Modes;
  for (int Shift = 0; Shift <= 10; ++Shift) {
    const int M = attnc::decode_paged_kernel_mode(Shift, C.BlockN, 128, 128, C.Warps * 32);
    if (Modes.empty() || Modes.back() != M)
      Modes.push_back(M);
  }
  REQUIRE(C.Warps == 4);
  std::vector<int> Expected;
  for (int M = 0; (8 << M) <= C.BlockN; ++M)
    Expected.push_back(M);
  CHECK(Modes == Expected);
  std::set<std::string> Keys;
  for (int Mode : Modes) {
    codegen::KernelSource Src = codegen::generatePagedDecode(Def, S, C, Mode);
    INFO("kernel " << Src.Key);
    Keys.insert(Src.Key);
    compilesToElf(Src);
  }
  CHECK(Keys.size() == Modes.size());
  // The gather-only kernel has a key of its own; a mode past a thread's 16
  // rows is no kernel's.
  CHECK(Keys.count(codegen::generatePagedDecode(Def, S, C, -1).Key) == 0);
  CHECK_THROWS_AS(codegen::generatePagedDecode(Def, S, C, 5), InternalError);
  CHECK_THROWS_AS(codegen::generatePagedDecode(Def, S, C, -2), InternalError);
}

TEST_CASE("merge results: a combine's kernel runs decode's Merge struct and "
          "compiles",
          "[decode][nvrtc][merge]") {
  CompiledDefinition Def =
      compile(testsupport::registry().get("retention_combine"));
  const std::string Merge = codegen::decodeMergeStruct(
      *Def.Graph, analysis::analyzeMerge(*Def.Graph));
  for (auto [T, Arch] : {std::pair{DType::F16, GpuArch::Sm80},
                         std::pair{DType::BF16, GpuArch::Sm80},
                         std::pair{DType::F16, GpuArch::Sm90a},
                         std::pair{DType::BF16, GpuArch::Sm90a}}) {
    KernelSpec S = kernelSpec(T, 128, 128, Arch);
    codegen::KernelSource Src = codegen::generateMergeResults(Def, S);
    INFO("kernel " << Src.Key);
    CHECK(Src.Key == fmt::format("retention_combine.merge_results.{}.d128x128.{}",
                                 std::string(dtypeName(T)),
                                 archName(Arch).str()));
    REQUIRE(Src.Entries == std::vector<std::string>{"attnc_merge_results_combine"});
    // The same generated merge as decode's split-KV (no second one), and
    // the kernel that reads a result's finals as its state.
    CHECK(Src.Source.find(Merge) != std::string::npos);
    CHECK(has(Src.Source, "static constexpr int kKind = 3; // combine"));
    CHECK(has(Src.Source, "__launch_bounds__(64)"));
    CHECK(has(Src.Source, "attnc::merge_results_combine<attnc_gen::Variant, "
                          "attnc_gen::Merge,"));
    CHECK(has(Src.Source,
              ("attnc::" + std::string(dtypeName(T)) + ">(a);").c_str()));
    std::string Ptx;
    try {
      Ptx = compileToPtx(Src);
      runtime::CompiledCubin C = runtime::compileToCubin(Src);
      CHECK(std::memcmp(C.Cubin.data(), "\x7f" "ELF", 4) == 0);
    } catch (const CompileError &E) {
      FAIL_CHECK(E.what());
      continue;
    }
    CHECK(has(Ptx, ".entry attnc_merge_results_combine("));
  }
  // Head dim v sets the threads (two columns each).
  CHECK(has(codegen::generateMergeResults(
                Def, kernelSpec(DType::F16, 64, 64, GpuArch::Sm80))
                .Source,
            "__launch_bounds__(32)"));
}

TEST_CASE("merge results: no combine kernel for a derived merge or none",
          "[decode][merge]") {
  auto Gen = [](const char *Name) {
    CompiledDefinition Def = compile(testsupport::registry().get(Name));
    codegen::generateMergeResults(
        Def, kernelSpec(DType::F16, 128, 128, GpuArch::Sm80));
  };
  CHECK_THROWS_WITH(Gen("mha"),
                    "'mha': its results merge by the derived log-sum-exp "
                    "rule, which the runtime's attnc_merge_results runs; no "
                    "kernel of the definition's is generated");
  CHECK_THROWS_AS(Gen("sigmoid_attn"), UserError);
  CHECK_THROWS_WITH(Gen("retention"),
                    Catch::Matchers::StartsWith(
                        "'retention': its results cannot be merged: its "
                        "partial states have no merge: "));
}

TEST_CASE("merge results: the runtime's kernels compile; eight columns a "
          "thread where every tensor allows it", "[decode][merge]") {
  const std::vector<std::string> Entries = {
      "attnc_merge_results_f16", "attnc_merge_results_bf16",
      "attnc_merge_results_f16_v8", "attnc_merge_results_bf16_v8"};
  for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm90a}) {
    codegen::KernelSource Src = runtime::mergeResultsSource(Arch);
    INFO("kernel " << Src.Key);
    REQUIRE(Src.Entries == Entries);
    std::string Ptx;
    try {
      Ptx = compileToPtx(Src);
      runtime::CompiledCubin C = runtime::compileToCubin(Src);
      CHECK(std::memcmp(C.Cubin.data(), "\x7f" "ELF", 4) == 0);
    } catch (const CompileError &E) {
      FAIL_CHECK(E.what());
      continue;
    }
    for (const std::string &E : Entries)
      CHECK(has(Ptx, (".entry " + E + "(").c_str()));
    // The eight-column kernels load and store 16 bytes at once.
    CHECK(has(Ptx, "ld.global.v4"));
    CHECK(has(Ptx, "st.global.v4"));
  }
  // Which calls take them: a derived merge of aligned tensors whose
  // strides are multiples of 8 elements, HeadDimV a multiple of 8.
  runtime::MergeCall C;
  C.HeadDimV = 128;
  C.Rows = 32 * 16384;
  attnc::MergeResultsArgs &A = C.Args;
  A.parts = 2;
  auto At = [](uintptr_t P) { return reinterpret_cast<void *>(P); };
  A.o[0] = At(0x10000);
  A.o[1] = At(0x20000);
  A.out = At(0x30000);
  for (int P = 0; P < 2; ++P) {
    A.o_s[P][0] = 32LL * 16384 * 128;
    A.o_s[P][1] = 16384LL * 128;
    A.o_s[P][2] = 128;
  }
  A.out_s[0] = 32LL * 8192 * 128;
  A.out_s[1] = 8192LL * 128;
  A.out_s[2] = 128;
  CHECK(runtime::mergeResultsVec8(C));
  runtime::MergeCall Off = C;
  Off.Args.out = At(0x30008); // a view that starts 4 columns in
  CHECK_FALSE(runtime::mergeResultsVec8(Off));
  runtime::MergeCall Stride = C;
  Stride.Args.o_s[1][2] = 132; // rows of 132 elements apart
  CHECK_FALSE(runtime::mergeResultsVec8(Stride));
  runtime::MergeCall Odd = C;
  Odd.HeadDimV = 100;
  CHECK_FALSE(runtime::mergeResultsVec8(Odd));
  runtime::MergeCall Wide = C;
  Wide.HeadDimV = 2048;
  CHECK_FALSE(runtime::mergeResultsVec8(Wide));
  runtime::MergeCall Combine = C;
  Combine.Combine = true;
  CHECK_FALSE(runtime::mergeResultsVec8(Combine));
  // The parts past A.parts are not read.
  runtime::MergeCall Unused = C;
  Unused.Args.o[5] = At(0x3);
  CHECK(runtime::mergeResultsVec8(Unused));
}
