// bwd_sm90's packed variable-length form (.varlen, bwd_sm90_varlen.cuh)
// without a GPU: its configuration strings and refusals, the choice a
// packed backward makes (packedBackwardChoice: bwd_sm90 on sm_90a, bwd_sm80's
// two-kernel mode elsewhere), the dense form's source left as it was, and
// NVRTC compiles of every definition of the varlen GPU test's matrix for
// sm_90a in f16 and bf16, with the warp-specialised kernel's markers.
#include "BackwardRunner.h"
#include "NvrtcPtx.h"
#include "TestDefinitions.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/ResourceModel.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/Skeleton.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

using namespace attn;
using namespace attn::nvrtctest;
using codegen::BwdSm90Config;
using codegen::KernelSpec;
using Catch::Matchers::Contains;

namespace {

/// What packedBackwardChoice makes of the dense default at \p D / \p DV:
/// its .varlen form, the lean step with its turn warp kept at d64 and d128
/// (d128's dQ slots dropped: the packed walk has its own turn warp), the
/// column split's turn warp dropped at 192 and 256.
/// The backward choice of a dense call of \p Def (f16, D = DV = \p D, \p A):
/// the configuration named, or the default.
runtime::KernelChoice denseChoice(const CompiledDefinition &Def, int D, GpuArch A,
                                  const char *Named = "") {
  using namespace attn::runtime;
  KernelTarget T = KernelTarget::of(Def, Direction::Backward, DType::F16, D, D, A);
  return chooseWithoutShape(T, KernelPolicy::parse(T, "", Named));
}

BwdSm90Config packedDefault(int D, int DV) {
  BwdSm90Config Cfg = BwdSm90Config::defaultFor(D, DV);
  if (Cfg.BulkForm == 0) // as packedBackwardChoice: the turns taken ahead
    Cfg.BulkDq = false;  // stay, the bulk dQ's one turn warp does not
  if (Cfg.SplitCols) {
    Cfg.Lean = 0; // as packedBackwardChoice: the column split without its
    Cfg.SplitRoles = false; // turn warp or roles form
  }
  Cfg.Varlen = true;
  return Cfg;
}

/// The packed form of the dense default at \p D / \p DV (or \p Named),
/// compiled to PTX in both dtypes, with the markers of the warp-specialised
/// packed kernel (and of the turn warp's named barriers where it has one).
void compilePacked(const std::string &Name, int D, int DV, const char *Named = nullptr) {
  CompiledDefinition Def = compile(gputest::makeDefinition(Name));
  for (DType T : {DType::F16, DType::BF16}) {
    BwdSm90Config Cfg = Named ? BwdSm90Config::parse(Named) : packedDefault(D, DV);
    codegen::KernelSource Src = codegen::generateBackwardSm90(Def, kernelSpec(T, D, DV), Cfg);
    INFO("kernel " << Src.Key);
    CHECK(has(Src.Source, "attnc::BwdDkDvSm90Varlen<"));
    CHECK(has(Src.Key, ".varlen"));
    std::string Ptx = compileToPtx(Src);
    for (const char *Entry : {".entry attnc_bwd_dkdv", ".entry attnc_bwd_dq_init",
                              ".entry attnc_bwd_dq_convert", ".entry attnc_bwd_preprocess",
                              ".entry attnc_bwd_input_grads"})
      CHECK(has(Ptx, Entry));
    CHECK(!has(Ptx, ".entry attnc_bwd_block_classify"));
    // Sᵀ's N is the query step (128 at d64), dV's and dK's N the head dims.
    CHECK(has(Ptx, Cfg.KvBlockM == 128 ? "wgmma.mma_async.sync.aligned.m64n128k16"
                                       : "wgmma.mma_async.sync.aligned.m64n64k16"));
    CHECK(has(Ptx, fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16", DV).c_str()));
    CHECK(has(Ptx, T == DType::F16 ? ".f32.f16.f16" : ".f32.bf16.bf16"));
    CHECK(has(Ptx, "cp.async.bulk.tensor.4d"));
    CHECK(has(Ptx, "setmaxnreg.inc"));
    // The producer's end-of-head stage and the dQ turns (none in an
    // atomic form).
    CHECK(has(Ptx, "mbarrier.arrive.shared::cta.b64"));
    CHECK(has(Ptx, "ld.acquire.gpu.global.b32") == !Cfg.AtomicDq);
    // The turn warp and the compute threads arrive at each other's named
    // barriers (the lockstep step without it only syncs; with the turns
    // taken ahead the compute warpgroups meet each other, and the turn
    // warps add the dQ slots, by bulk reductions in .bulk2.).
    CHECK(has(Ptx, "bar.arrive") ==
          (Cfg.Lean >= 2 && !Cfg.SplitCols && !Cfg.AtomicDq && !Cfg.BulkDq));
    if (Cfg.BulkDq)
      CHECK(has(Ptx, "cp.reduce.async.bulk") == (Cfg.BulkForm == 1));
  }
}

} // namespace

TEST_CASE("bwd_sm90 varlen: configuration strings and refusals", "[bwd90][varlen]") {
  BwdSm90Config C = BwdSm90Config::parse("bwd90ws.kv64x128s2.fused.varlen");
  CHECK(C.Varlen);
  CHECK(C.WarpSpecialized);
  CHECK(C.FusedDq);
  CHECK(C.str() == "bwd90ws.kv64x128s2.fused.varlen");
  CHECK(!(C == BwdSm90Config::defaultFor(128, 128)));
  // The same tiles and shared memory as the dense form.
  BwdSm90Config CDense = C;
  CDense.Varlen = false;
  CHECK(C.dkdvSharedBytes(128, 128, 1, false) == CDense.dkdvSharedBytes(128, 128, 1, false));
  for (std::string Text : {"bwd90ws.kv64x64s2.split.fused.varlen",
                           "bwd90ws2.kv64x128s3.atomic.varlen",
                           "bwd90ws.kv64x128s2.lean2.fused.varlen",
                           "bwd90ws.kv128x128s2.lean2.fused.varlen",
                           "bwd90ws.kv64x128s2.lean3.atomic.varlen",
                           "bwd90ws.kv64x128s2.lean2.bulk2.fused.varlen",
                           "bwd90ws.kv64x128s2.lean2.red2.atomic.varlen",
                           "bwd90ws.kv128x128s2.lean2.red.fused.varlen"})
    CHECK(BwdSm90Config::parse(Text).str() == Text);
  // The lean step's packed form: the dense default's fields and tiles.
  BwdSm90Config L = BwdSm90Config::parse("bwd90ws.kv128x128s2.lean2.fused.varlen");
  CHECK(L.Varlen);
  CHECK(L.Lean == 2);
  BwdSm90Config LDense = L;
  LDense.Varlen = false;
  CHECK(LDense == BwdSm90Config::defaultFor(64, 64));
  CHECK(L.dkdvSharedBytes(64, 64, 1, false) == LDense.dkdvSharedBytes(64, 64, 1, false));
  for (const char *Bad : {"bwd90.kv64x128s2.q128x64w8.varlen", "bwd90ws.kv64x128s2.varlen.fused",
                          "bwd90ws.kv64x128s2.fused.varlen.varlen"})
    CHECK_THROWS_WITH(BwdSm90Config::parse(Bad), Contains("(then .varlen for packed calls)"));
  // Parsed, but refused: the packed kernel is the lockstep warp-specialised
  // step's.
  KernelSpec S = kernelSpec(DType::F16, 128, 128);
  for (const char *Refused : {"bwd90.kv64x128s2.fused.varlen", "bwd90ws.kv64x128s2.pp.fused.varlen",
                              "bwd90ws.kv64x128s2.dqw.fused.varlen"})
    CHECK_THAT(codegen::bwdSm90Unsupported(S, BwdSm90Config::parse(Refused), 1, false),
               Contains(".varlen is a form of the warp-specialised fused-dQ configurations"));
  CHECK(codegen::bwdSm90Unsupported(S, C, 1, false).empty());
  // The lean step at d128 and d64 (the dense defaults' packed forms).
  for (const char *Lean : {"bwd90ws.kv64x128s2.lean2.fused.varlen",
                           "bwd90ws.kv64x128s2.lean.fused.varlen",
                           "bwd90ws.kv64x128s2.lean2.atomic.varlen"})
    CHECK(codegen::bwdSm90Unsupported(S, BwdSm90Config::parse(Lean), 1, false).empty());
  // The turns taken ahead: the packed walk's stages tell the turn warps
  // their steps (d128's dense default, and d64's 128-row forms).
  for (const char *Ahead : {"bwd90ws.kv64x128s2.lean2.bulk2.fused.varlen",
                            "bwd90ws.kv64x128s2.lean2.red2.fused.varlen",
                            "bwd90ws.kv64x128s2.lean2.red.atomic.varlen"})
    CHECK(codegen::bwdSm90Unsupported(S, BwdSm90Config::parse(Ahead), 1, false).empty());
  KernelSpec S64 = kernelSpec(DType::F16, 64, 64);
  CHECK(codegen::bwdSm90Unsupported(
            S64, BwdSm90Config::parse("bwd90ws.kv128x128s2.lean2.fused.varlen"), 1, false)
            .empty());
  // d64's row split needs its 128-row steps, packed or not.
  CHECK_THAT(codegen::bwdSm90Unsupported(
                 S64, BwdSm90Config::parse("bwd90ws.kv64x128s2.lean2.fused.varlen"), 1, false),
             Contains("the query step must be 128"));
  // The bulk dQ's one turn warp and the column split's turn warp walk the
  // dense lists.
  for (const char *Refused : {"bwd90ws.kv64x128s2.lean2.bulk.fused.varlen",
                              "bwd90ws.kv64x64s2.split.tw.fused.varlen",
                              "bwd90ws.kv64x64s2.split.ro.fused.varlen"})
    CHECK_THAT(codegen::bwdSm90Unsupported(kernelSpec(DType::F16, 128, 128),
                                           BwdSm90Config::parse(Refused), 1, false),
               Contains(".varlen is not a form of the bulk dQ"));
  // The roles form without its turn warp's level is refused packed too (its
  // kernel has no packed walk).
  BwdSm90Config Roles = BwdSm90Config::parse("bwd90ws.kv64x64s2.split.ro.fused");
  Roles.Lean = 0;
  Roles.Varlen = true;
  CHECK_THAT(codegen::bwdSm90Unsupported(kernelSpec(DType::F16, 192, 128), Roles, 1, false),
             Contains(".varlen is not a form of the bulk dQ"));
}

TEST_CASE("bwd_sm90 varlen: a packed backward runs bwd_sm90 on sm_90a, bwd_sm80 "
          "elsewhere",
          "[bwd90][varlen][skeleton]") {
  using namespace attn::runtime;
  CompiledDefinition Def = compile(gputest::makeDefinition("mha"));
  auto Packed = [&](int D, GpuArch A, const char *Named = "") {
    std::optional<KernelChoice> P = packedBackwardChoice(denseChoice(Def, D, A, Named));
    if (!P) // already a packed form
      return std::string();
    // A packed form is its own packed choice.
    CHECK(!packedBackwardChoice(*P));
    return P->Skel->name().str() + " " + P->configText();
  };
  // The dense defaults' lean step, packed (d128 with its turns taken
  // ahead, and d64's dQ row split).
  CHECK(Packed(128, GpuArch::Sm90a) ==
        "bwd_sm90 bwd90ws.kv64x128s2.lean2.bulk2.fused.varlen");
  CHECK(Packed(128, GpuArch::Sm90a, "bwd90ws.kv64x128s2.lean2.red2.fused") ==
        "bwd_sm90 bwd90ws.kv64x128s2.lean2.red2.fused.varlen");
  CHECK(Packed(64, GpuArch::Sm90a) == "bwd_sm90 bwd90ws.kv128x128s2.lean2.fused.varlen");
  CHECK(Packed(64, GpuArch::Sm90a, "bwd90ws.kv128x128s3.lean2.fused") ==
        "bwd_sm90 bwd90ws.kv128x128s3.lean2.fused.varlen");
  CHECK(Packed(128, GpuArch::Sm90a, "bwd90ws.kv64x128s2.fused") ==
        "bwd_sm90 bwd90ws.kv64x128s2.fused.varlen");
  // The bulk dQ's one turn warp: its packed form is the lean step's; the column
  // split's without its turn warp (256/256 below: the dense default there
  // is .split.tw.).
  CHECK(Packed(128, GpuArch::Sm90a, "bwd90ws.kv64x128s2.lean2.bulk.fused") ==
        "bwd_sm90 bwd90ws.kv64x128s2.lean2.fused.varlen");
  CHECK(Packed(128, GpuArch::Sm90a, "bwd90ws.kv64x64s2.split.tw.fused") ==
        "bwd_sm90 bwd90ws.kv64x64s2.split.fused.varlen");
  // The column split's packed form: chosen where the dense choice is the
  // split (the default at 256/256, which bwd_sm80 does not run, or named);
  // named, it is its own packed choice.
  CHECK(Packed(128, GpuArch::Sm90a, "bwd90ws.kv64x64s2.split.fused") ==
        "bwd_sm90 bwd90ws.kv64x64s2.split.fused.varlen");
  CHECK(Packed(256, GpuArch::Sm90a) == "bwd_sm90 bwd90ws.kv64x64s2.split.fused.varlen");
  CHECK(Packed(128, GpuArch::Sm90a, "bwd90ws.kv64x64s2.split.fused.varlen").empty());
  CHECK(Packed(128, GpuArch::Sm90a, "bwd90ws2.kv64x128s2.atomic") ==
        "bwd_sm90 bwd90ws2.kv64x128s2.atomic.varlen");
  // bwd_sm80 elsewhere, and for bwd_sm90 configurations the packed kernel
  // does not take (the two-kernel mode, ping-pong).
  CHECK(Packed(128, GpuArch::Sm80) == "bwd_sm80 kv64x128w8.q128x64w8.s2");
  CHECK(Packed(64, GpuArch::Sm80) == "bwd_sm80 kv64x128w8.q128x64w8.s2");
  CHECK(Packed(64, GpuArch::Sm90a, "bwd90.kv128x128s3.q128x128w8") ==
        "bwd_sm80 kv64x128w8.q128x64w8.s2");
  CHECK(Packed(128, GpuArch::Sm90a, "bwd90ws.kv64x128s2.pp.fused") ==
        "bwd_sm80 kv64x128w8.q128x64w8.s2");
}

TEST_CASE("bwd_sm90 varlen: the dense form's source has no packed code",
          "[bwd90][varlen]") {
  // The packed form is a template of its own: the dense kernels' text (and
  // so their cache keys and CUBINs) do not change with it.
  CompiledDefinition Def = compile(gputest::makeDefinition("mha"));
  BwdSm90Config Dense = BwdSm90Config::defaultFor(128, 128);
  BwdSm90Config P = packedDefault(128, 128);
  BwdSm90Config Plain = P;
  Plain.Varlen = false;
  codegen::KernelSource A = codegen::generateBackwardSm90(Def, kernelSpec(DType::F16, 128, 128), Dense);
  codegen::KernelSource B = codegen::generateBackwardSm90(Def, kernelSpec(DType::F16, 128, 128), P);
  codegen::KernelSource APlain =
      codegen::generateBackwardSm90(Def, kernelSpec(DType::F16, 128, 128), Plain);
  for (const codegen::KernelSource *D : {&A, &APlain}) {
    CHECK(!has(D->Source, "varlen"));
    CHECK(!has(D->Source, "Varlen"));
    CHECK(has(D->Source, "attnc::BwdDkDvSm90<"));
  }
  CHECK(APlain.Key + ".varlen" == B.Key);
  CHECK(std::find(A.Entries.begin(), A.Entries.end(), "attnc_bwd_block_classify") !=
        A.Entries.end());
  CHECK(std::find(B.Entries.begin(), B.Entries.end(), "attnc_bwd_block_classify") ==
        B.Entries.end());
}

TEST_CASE("bwd_sm90 varlen: mha's packed forms compile to CUBINs without wgmma "
          "serialisation, the plain step without spills",
          "[nvrtc][bwd90][varlen]") {
  CompiledDefinition Def = compile(gputest::makeDefinition("mha"));
  // The packed defaults at d128 and d64 (the lean step with its turn warp),
  // and the plain lockstep step that d128 ran packed before. The lean
  // forms spill in the producer warpgroup alone (24 registers after
  // setmaxnreg: the producer's walk and the turn warps' branches; the SASS
  // of d128's on 2026-11-28 has every STL/LDL between the turn warp's exit
  // and the TMA loads), a 56 to 104-byte stack frame; the bound catches a
  // spill of the compute warpgroups' accumulators, which would be far
  // more.
  for (auto [D, Cfg, MaxStack] :
       {std::tuple{128, packedDefault(128, 128), 128}, std::tuple{64, packedDefault(64, 64), 128},
        std::tuple{128, BwdSm90Config::parse("bwd90ws.kv64x128s2.fused.varlen"), 0}}) {
    codegen::KernelSource Src = codegen::generateBackwardSm90(Def, kernelSpec(DType::F16, D, D), Cfg);
    runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
    INFO("kernel " << Src.Key << "\n" << Bin.Log);
    CHECK(std::memcmp(Bin.Cubin.data(), "\x7f" "ELF", 4) == 0);
    CHECK(!has(Bin.Log, "serialized"));
    runtime::KernelResources R = runtime::readCubinResources(
        llvm::StringRef(Bin.Cubin.data(), Bin.Cubin.size()), "attnc_bwd_dkdv");
    CHECK(R.Registers <= 168); // 384 threads a CTA before setmaxnreg
    CHECK(R.StackFrameBytes <= MaxStack);
  }
}

// The definitions of gpu_varlen_test's matrix, one case each for ctest -j.
TEST_CASE("bwd_sm90 varlen: mha compiles", "[nvrtc][bwd90][varlen][mha]") {
  compilePacked("mha", 128, 128);
}
TEST_CASE("bwd_sm90 varlen: mha_full compiles", "[nvrtc][bwd90][varlen][mha_full]") {
  compilePacked("mha_full", 128, 128);
}
TEST_CASE("bwd_sm90 varlen: alibi_learnable compiles",
          "[nvrtc][bwd90][varlen][alibi_learnable]") {
  compilePacked("alibi_learnable", 128, 128);
}
TEST_CASE("bwd_sm90 varlen: mha_window compiles", "[nvrtc][bwd90][varlen][mha_window]") {
  compilePacked("mha_window", 128, 128);
}
TEST_CASE("bwd_sm90 varlen: mha_prefix_lm compiles", "[nvrtc][bwd90][varlen][mha_prefix_lm]") {
  compilePacked("mha_prefix_lm", 128, 128);
}
TEST_CASE("bwd_sm90 varlen: mha_sliding_window compiles",
          "[nvrtc][bwd90][varlen][mha_sliding_window]") {
  compilePacked("mha_sliding_window", 128, 128);
}
TEST_CASE("bwd_sm90 varlen: mha_chunked compiles", "[nvrtc][bwd90][varlen][mha_chunked]") {
  compilePacked("mha_chunked", 128, 128);
}
TEST_CASE("bwd_sm90 varlen: the column split compiles", "[nvrtc][bwd90][varlen][split]") {
  compilePacked("mha", 192, 128);
}
// d64's packed default (the lean step with dQ's rows split over the two
// warpgroups), over the masks of the varlen GPU test's d64 cases: the
// unmasked walk, the per-element one and the box-bounded one (votes).
TEST_CASE("bwd_sm90 varlen: d64's lean step compiles", "[nvrtc][bwd90][varlen][d64]") {
  for (const char *Name : {"mha", "mha_full", "alibi_learnable", "mha_window", "mha_document"})
    compilePacked(Name, 64, 64);
}
// The lean step with its one turn warp (the packed default at d128 before
// the turns taken ahead had a packed form), without it, and the plain
// lockstep step at d128 (before the lean step had one); the other forms of
// the turns taken ahead, and their atomic one.
TEST_CASE("bwd_sm90 varlen: the lean step's levels compile", "[nvrtc][bwd90][varlen][lean]") {
  compilePacked("mha", 128, 128, "bwd90ws.kv64x128s2.lean2.fused.varlen");
  compilePacked("mha", 128, 128, "bwd90ws.kv64x128s2.lean.fused.varlen");
  compilePacked("mha", 128, 128, "bwd90ws.kv64x128s2.fused.varlen");
  compilePacked("alibi_learnable", 128, 128, "bwd90ws.kv64x128s2.lean2.red2.fused.varlen");
  compilePacked("mha_window", 128, 128, "bwd90ws.kv64x128s2.lean2.red.fused.varlen");
  compilePacked("mha", 128, 128, "bwd90ws.kv64x128s2.lean2.bulk2.atomic.varlen");
}

// Per-row, per-key and per-token inputs in packed calls (of_sequence): the
// packed bwd_sm90 above, and every other kernel such a call runs.
TEST_CASE("bwd_sm90 varlen: mha_document compiles", "[nvrtc][bwd90][varlen][mha_document]") {
  compilePacked("mha_document", 128, 128);
}
TEST_CASE("bwd_sm90 varlen: mha_document_ids compiles",
          "[nvrtc][bwd90][varlen][mha_document_ids]") {
  compilePacked("mha_document_ids", 128, 128);
}
TEST_CASE("bwd_sm90 varlen: mha_row_scale compiles", "[nvrtc][bwd90][varlen][mha_row_scale]") {
  compilePacked("mha_row_scale", 128, 128);
}

TEST_CASE("packed token inputs: the forward skeletons and bwd_sm80's packed mode "
          "compile for sm_80 and sm_90a, rebasing the inputs per sequence",
          "[nvrtc][varlen][inputs]") {
  for (const char *Name : {"mha_document", "mha_document_ids", "mha_row_scale"}) {
    INFO("definition " << Name);
    CompiledDefinition Def = compile(gputest::makeDefinition(Name));
    for (GpuArch A : {GpuArch::Sm80, GpuArch::Sm90a}) {
      std::vector<codegen::KernelSource> Srcs;
      Srcs.push_back(codegen::generateForward(Def, kernelSpec(DType::F16, 64, 64, A)));
      if (A == GpuArch::Sm90a)
        Srcs.push_back(codegen::generateForwardSm90(Def, kernelSpec(DType::F16, 128, 128, A),
                                                    codegen::Sm90Config::defaultFor(128, 128)));
      // packedBackwardChoice's bwd_sm80 mode (d64 on sm_90a, every d on sm_80).
      Srcs.push_back(codegen::generateBackward(
          Def, kernelSpec(DType::F16, 64, 64, A),
          codegen::BwdConfig::parse("kv64x128w8.q128x64w8.s2")));
      for (const codegen::KernelSource &Src : Srcs) {
        INFO("kernel " << Src.Key);
        CHECK(has(Src.Source, "static constexpr bool kSequenceInputs = true;"));
        CHECK(has(Src.Source, "of_sequence(int q0, int kv0, int seq_q, int seq_kv, int shift)"));
        runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
        CHECK(std::memcmp(Bin.Cubin.data(), "\x7f" "ELF", 4) == 0);
      }
    }
  }
  // A variant without such inputs has no of_sequence (its kernels are as
  // before: SequenceInputs passes the call's inputs by reference).
  CompiledDefinition Mha = compile(gputest::makeDefinition("alibi_learnable"));
  codegen::KernelSource Src =
      codegen::generateForward(Mha, kernelSpec(DType::F16, 64, 64, GpuArch::Sm80));
  CHECK(has(Src.Source, "static constexpr bool kSequenceInputs = false;"));
  CHECK(!has(Src.Source, "Inputs of_sequence("));
}

TEST_CASE("bwd_sm90: a dense backward with long or masked walks at head dim 64 takes the dQ "
          "turns ahead",
          "[bwd90][skeleton]") {
  using namespace attn::runtime;
  CompiledDefinition Def = compile(gputest::makeDefinition("mha"));
  auto Long = [&](int D, GpuArch A, const char *Named = "") {
    KernelChoice Dense = denseChoice(Def, D, A, Named);
    std::optional<KernelChoice> L = longWalkBackwardChoice(Dense);
    if (!L)
      return std::string();
    CHECK(L->Origin == Dense.Origin);
    // Its own form has none.
    CHECK(!longWalkBackwardChoice(*L));
    return L->Skel->name().str() + " " + L->configText();
  };
  CHECK(Long(64, GpuArch::Sm90a) == "bwd_sm90 bwd90ws.kv128x128s2.lean2.red2.fused");
  // Only the default: a named configuration runs as named.
  CHECK(Long(64, GpuArch::Sm90a, "bwd90ws.kv128x128s2.lean2.fused").empty());
  CHECK(Long(128, GpuArch::Sm90a).empty());
  CHECK(Long(64, GpuArch::Sm80).empty());
  // A packed form has none either.
  KernelChoice Dense = denseChoice(Def, 64, GpuArch::Sm90a);
  CHECK(!longWalkBackwardChoice(*packedBackwardChoice(Dense)));
  // Which calls: masked ones from 4096 queries, unmasked ones from 16384.
  CHECK(!wantsLongWalkBackward(true, 4095));
  CHECK(wantsLongWalkBackward(true, 4096));
  CHECK(!wantsLongWalkBackward(false, 16383));
  CHECK(wantsLongWalkBackward(false, 16384));
  // What a dense call runs: the twin only where both say so.
  CHECK(denseBackwardChoice(Dense, true, 4096).configText() ==
        "bwd90ws.kv128x128s2.lean2.red2.fused");
  CHECK(denseBackwardChoice(Dense, false, 4096).configText() == Dense.configText());
  CHECK(denseBackwardChoice(Dense, true, 4095).configText() == Dense.configText());
  // A packed call by its longest sequence, in the packed forms.
  CHECK(packedCallBackwardChoice(Dense, true, 4096).configText() ==
        "bwd90ws.kv128x128s2.lean2.red2.fused.varlen");
  CHECK(packedCallBackwardChoice(Dense, true, 4095).configText() ==
        "bwd90ws.kv128x128s2.lean2.fused.varlen");
  CHECK(packedCallBackwardChoice(Dense, false, 8192).configText() ==
        "bwd90ws.kv128x128s2.lean2.fused.varlen");
  CHECK(packedCallBackwardChoice(Dense, false, 16384).configText() ==
        "bwd90ws.kv128x128s2.lean2.red2.fused.varlen");
  // d128's default has no twin: its packed form whatever the lengths; a
  // packed form is run as it is.
  KernelChoice Dense128 = denseChoice(Def, 128, GpuArch::Sm90a);
  CHECK(packedCallBackwardChoice(Dense128, true, 65536).configText() ==
        "bwd90ws.kv64x128s2.lean2.bulk2.fused.varlen");
  KernelChoice Packed = *packedBackwardChoice(Dense);
  CHECK(packedCallBackwardChoice(Packed, true, 65536).configText() == Packed.configText());
}
