// The Hopper backward's (bwd_sm90) modes without a GPU: ping-pong (also at
// head dim 64), the dQ writer, the lean step, the turn warp's bulk dQ and
// the column split (also with the turn warp), each compiled by NVRTC to
// CUBINs checked for wgmma serialisation, spills and the instructions the
// mode is made of. (The configurations and the
// examples' compiles are in NvrtcBwdSm90Test.cpp.)
#include "Examples.h"
#include "NvrtcPtx.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/ResourceModel.h"

#include <catch2/catch.hpp>

#include <string>

using namespace attn;
using namespace attn::nvrtctest;
using codegen::BwdSm90Config;
using codegen::KernelSpec;

namespace {

/// A bwd_sm90 configuration of an example at head dims 128/128.
struct ModeCase {
  const dsl::DefinitionBase &Def;
  const char *Config;
  DType T;
};

codegen::KernelSource modeSource(const ModeCase &C) {
  return codegen::generateBackwardSm90(compile(C.Def), kernelSpec(C.T, 128, 128),
                                       BwdSm90Config::parse(C.Config));
}

/// The kernel's CUBIN: no wgmma serialised by ptxas, and the dK/dV kernel
/// within 168 registers (launched at 384 threads a CTA, before setmaxnreg).
void checkCubin(const codegen::KernelSource &Src) {
  runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
  INFO(Bin.Log);
  CHECK(!has(Bin.Log, "serialized"));
  runtime::KernelResources R = runtime::readCubinResources(
      llvm::StringRef(Bin.Cubin.data(), Bin.Cubin.size()), "attnc_bwd_dkdv");
  CHECK(R.Registers <= 168);
}

} // namespace

TEST_CASE("bwd_sm90: the ping-pong and dQ-writer modes compile to CUBINs without wgmma "
          "serialisation",
          "[nvrtc][bwd90][mha]") {
  const ModeCase Cases[] = {{examples::mha(), "bwd90ws.kv64x128s2.pp.fused", DType::F16},
               {examples::mha(), "bwd90ws.kv64x128s2.pp.atomic", DType::BF16},
               {examples::alibiLearnable(), "bwd90ws.kv64x128s2.pp.fused", DType::BF16},
               {examples::mhaDocument(), "bwd90ws.kv64x128s2.pp.fused", DType::F16},
               {examples::mha(), "bwd90ws.kv64x128s2.dqw.fused", DType::BF16},
               {examples::softcapLearnable(), "bwd90ws.kv64x128s2.dqw.fused", DType::F16}};
  for (const auto &C : Cases) {
    BwdSm90Config Cfg = BwdSm90Config::parse(C.Config);
    codegen::KernelSource Src = modeSource(C);
    INFO("kernel " << Src.Key);
    CHECK(has(Src.Source, "/*kPingPong=*/true") == Cfg.PingPong);
    CHECK(has(Src.Source, "/*kDqWriter=*/true") == Cfg.DqWriter);
    std::string Ptx = compileToPtx(Src);
    // The dQ writer: bulk adds (and rank 0's bulk store, in turns, unless
    // atomic); no per-thread dQ reductions in the consumers.
    CHECK(has(Ptx, "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"));
    CHECK(has(Ptx, "cp.async.bulk.global.shared::cta.bulk_group [") == !Cfg.AtomicDq);
    CHECK(has(Ptx, "ld.acquire.gpu") == !Cfg.AtomicDq);
    CHECK(!has(Ptx, "red.relaxed.gpu.global.add.v2.f32"));
    // Ping-pong: the tensor-core token on named barriers, dQ's product over
    // all 128 columns.
    CHECK(has(Ptx, "bar.arrive") == Cfg.PingPong);
    CHECK(has(Ptx, "wgmma.mma_async.sync.aligned.m64n128k16"));
    checkCubin(Src);
  }
}

TEST_CASE("bwd_sm90: ping-pong at head dim 64 issues dQ's product with dV's and dK's",
          "[nvrtc][bwd90][mha]") {
  // Each warpgroup takes all 64 of dQ's columns (the fused check's 32 a
  // warpgroup does not apply), and dQ's product is in the token's second
  // group: two commits a step (mha has a step for full blocks and one for
  // masked ones) against three at d128, where it runs alone.
  auto Commits = [](const std::string &Ptx) {
    size_t N = 0;
    for (size_t P = Ptx.find("wgmma.commit_group"); P != std::string::npos;
         P = Ptx.find("wgmma.commit_group", P + 1))
      ++N;
    return N;
  };
  CompiledDefinition Mha = compile(examples::mha());
  CHECK(Commits(compileToPtx(codegen::generateBackwardSm90(
            Mha, kernelSpec(DType::F16, 128, 128),
            BwdSm90Config::parse("bwd90ws.kv64x128s2.pp.fused")))) == 6);
  struct {
    const dsl::DefinitionBase &Def;
    const char *Config;
    DType T;
    bool IsMha;
  } Cases[] = {{examples::mha(), "bwd90ws.kv64x128s2.pp.fused", DType::F16, true},
               {examples::mha(), "bwd90ws.kv64x128s3.pp.fused", DType::BF16, true},
               {examples::mha(), "bwd90ws.kv64x128s2.pp.atomic", DType::F16, true},
               {examples::alibiLearnable(), "bwd90ws.kv64x128s2.pp.fused", DType::BF16, false},
               {examples::softcapLearnable(), "bwd90ws.kv64x128s2.pp.fused", DType::F16, false},
               {examples::mhaDocument(), "bwd90ws.kv64x128s2.pp.fused", DType::F16, false}};
  for (const auto &C : Cases) {
    BwdSm90Config Cfg = BwdSm90Config::parse(C.Config);
    codegen::KernelSource Src =
        codegen::generateBackwardSm90(compile(C.Def), kernelSpec(C.T, 64, 64), Cfg);
    INFO("kernel " << Src.Key);
    CHECK(has(Src.Source, "/*kPingPong=*/true"));
    std::string Ptx = compileToPtx(Src);
    if (C.IsMha)
      CHECK(Commits(Ptx) == 4);
    CHECK(has(Ptx, "wgmma.mma_async.sync.aligned.m64n64k16"));
    CHECK(!has(Ptx, "wgmma.mma_async.sync.aligned.m64n128k16"));
    CHECK(has(Ptx, "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"));
    CHECK(has(Ptx, "ld.acquire.gpu") == !Cfg.AtomicDq);
    checkCubin(Src);
  }
  // Split columns stay refused where a warpgroup's would be 32.
  CHECK_THROWS_AS(codegen::generateBackwardSm90(Mha, kernelSpec(DType::F16, 64, 64),
                                                BwdSm90Config::parse(
                                                    "bwd90ws.kv64x128s2.lean2.fused")),
                  UserError);
}

TEST_CASE("bwd_sm90: the lean step compiles to CUBINs without wgmma serialisation",
          "[nvrtc][bwd90][mha]") {
  struct : ModeCase {
    bool IsMha;
  } Cases[] = {{examples::mha(), "bwd90ws.kv64x128s2.lean.fused", DType::F16, true},
               {examples::mha(), "bwd90ws.kv64x128s2.lean2.fused", DType::BF16, true},
               {examples::alibiLearnable(), "bwd90ws.kv64x128s2.lean2.fused", DType::F16, false},
               {examples::mhaDocument(), "bwd90ws.kv64x128s2.lean.fused", DType::BF16, false},
               {examples::softcapLearnable(), "bwd90ws.kv64x128s2.lean2.fused", DType::BF16,
                false},
               {examples::mha(), "bwd90ws.kv64x128s2.lean3.fused", DType::F16, true},
               {examples::alibiLearnable(), "bwd90ws.kv64x128s2.lean3.fused", DType::BF16, false}};
  // The lockstep step commits two wgmma groups (Sᵀ with dPᵀ; dV, dK and
  // dQ), the lean step three (dV and dK before the dSᵀ tile is stored);
  // mha's walk has a step for full blocks and one for masked blocks.
  CompiledDefinition Mha = compile(examples::mha());
  auto Commits = [](const std::string &Ptx) {
    size_t N = 0;
    for (size_t P = Ptx.find("wgmma.commit_group"); P != std::string::npos;
         P = Ptx.find("wgmma.commit_group", P + 1))
      ++N;
    return N;
  };
  const size_t LockstepCommits = Commits(compileToPtx(codegen::generateBackwardSm90(
      Mha, kernelSpec(DType::F16, 128, 128), BwdSm90Config::parse("bwd90ws.kv64x128s2.fused"))));
  CHECK(LockstepCommits == 4);
  for (const auto &C : Cases) {
    BwdSm90Config Cfg = BwdSm90Config::parse(C.Config);
    codegen::KernelSource Src = modeSource(C);
    INFO("kernel " << Src.Key);
    CHECK(has(Src.Source, ("/*kLeanLevel=*/" + std::to_string(Cfg.Lean)).c_str()));
    std::string Ptx = compileToPtx(Src);
    if (C.IsMha)
      CHECK(Commits(Ptx) == 6);
    // The turn warp: the compute threads arrive once their adds are
    // issued, and they no longer read the semaphores (only that warp does).
    CHECK(has(Ptx, "bar.arrive") == (Cfg.Lean >= 2));
    CHECK(has(Ptx, "ld.acquire.gpu"));
    // Level 3: 16-byte adds (and rank 0's stores) only.
    CHECK(has(Ptx, "red.relaxed.gpu.global.add.v2.f32") == (Cfg.Lean < 3));
    CHECK(has(Ptx, "red.relaxed.gpu.global.add.v4.f32") == (Cfg.Lean == 3));
    CHECK(has(Ptx, "st.global.cg.v4.f32") == (Cfg.Lean == 3));
    checkCubin(Src);
  }
}

TEST_CASE("bwd_sm90: the turn warp's bulk dQ compiles to CUBINs without wgmma serialisation",
          "[nvrtc][bwd90][mha]") {
  const ModeCase Cases[] = {{examples::mha(), "bwd90ws.kv64x128s2.lean2.bulk.fused", DType::F16},
               {examples::mha(), "bwd90ws.kv64x128s2.lean2.bulk.fused", DType::BF16},
               {examples::alibiLearnable(), "bwd90ws.kv64x128s2.lean2.bulk.fused", DType::F16},
               {examples::mhaDocument(), "bwd90ws.kv64x128s2.lean2.bulk.fused", DType::BF16},
               {examples::softcapLearnable(), "bwd90ws.kv64x128s2.lean2.bulk.fused", DType::BF16},
               {examples::mha(), "bwd90ws.kv64x128s2.lean2.bulk.atomic", DType::F16}};
  // Bulk stores from shared memory: dK's and dV's staged rows in every
  // mode, and rank 0's dQ in the ordered one.
  auto bulkStores = [](const std::string &Ptx) {
    size_t N = 0;
    const std::string Op = "cp.async.bulk.global.shared::cta.bulk_group [";
    for (size_t At = Ptx.find(Op); At != std::string::npos; At = Ptx.find(Op, At + 1))
      ++N;
    return N;
  };
  size_t OrderedStores = 0, AtomicStores = 0;
  for (const auto &C : Cases) {
    BwdSm90Config Cfg = BwdSm90Config::parse(C.Config);
    codegen::KernelSource Src = modeSource(C);
    INFO("kernel " << Src.Key);
    CHECK(has(Src.Source, "/*kLeanLevel=*/2, /*kBulkDq=*/true>"));
    std::string Ptx = compileToPtx(Src);
    // The compute threads store dQ into the slots and add nothing to the
    // sum; the turn warp adds it (rank 0 stores) with bulk copies, frees
    // the slot once they have read it and publishes once they are done
    // (atomic: adds every slot, nothing stored, no turn published).
    CHECK(!has(Ptx, "red.relaxed.gpu.global.add"));
    CHECK(!has(Ptx, "st.global.cg.v2.f32"));
    CHECK(has(Ptx, "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"));
    CHECK(bulkStores(Ptx) > 0); // dK and dV (BwdDkDvSm90::kStagedStore)
    if (Src.Key.rfind("mha.bwd_sm90.f16.", 0) == 0)
      (Cfg.AtomicDq ? AtomicStores : OrderedStores) = bulkStores(Ptx);
    CHECK(has(Ptx, "cp.async.bulk.wait_group.read 0"));
    CHECK(has(Ptx, "cp.async.bulk.wait_group 0") == !Cfg.AtomicDq);
    CHECK(has(Ptx, "st.shared.v2.f32"));
    CHECK(has(Ptx, "st.release.gpu") == !Cfg.AtomicDq);
    checkCubin(Src);
  }
  // The atomic mode stores no dQ: fewer bulk stores than the ordered one.
  CHECK(AtomicStores > 0);
  CHECK(AtomicStores < OrderedStores);
}

TEST_CASE("bwd_sm90: the turns taken ahead (.bulk2., .red2., .red.) compile to CUBINs without wgmma "
          "serialisation",
          "[nvrtc][bwd90][mha]") {
  const ModeCase Cases[] = {
      {examples::mha(), "bwd90ws.kv64x128s2.lean2.bulk2.fused", DType::F16},
      {examples::mhaDocument(), "bwd90ws.kv64x128s2.lean2.bulk2.fused", DType::BF16},
      {examples::mha(), "bwd90ws.kv64x128s2.lean2.bulk2.atomic", DType::BF16},
      {examples::mha(), "bwd90ws.kv64x128s2.lean2.red2.fused", DType::F16},
      {examples::mha(), "bwd90ws.kv64x128s2.lean2.red2.fused", DType::BF16},
      {examples::alibiLearnable(), "bwd90ws.kv64x128s2.lean2.red2.fused", DType::F16},
      {examples::softcapLearnable(), "bwd90ws.kv64x128s2.lean2.red2.fused", DType::BF16},
      {examples::mha(), "bwd90ws.kv64x128s2.lean2.red2.atomic", DType::F16},
      {examples::mhaDocument(), "bwd90ws.kv64x128s2.lean2.red.fused", DType::F16},
      {examples::mha(), "bwd90ws.kv64x128s2.lean2.red.atomic", DType::BF16}};
  for (const auto &C : Cases) {
    BwdSm90Config Cfg = BwdSm90Config::parse(C.Config);
    REQUIRE(Cfg.BulkDq);
    const bool Red = Cfg.BulkForm >= 2;
    codegen::KernelSource Src = modeSource(C);
    INFO("kernel " << Src.Key);
    const std::string Args =
        "/*kLeanLevel=*/2, /*kBulkDq=*/" + std::to_string(1 + Cfg.BulkForm) + ">";
    CHECK(has(Src.Source, Args.c_str()));
    std::string Ptx = compileToPtx(Src);
    // The compute threads store dQ into the slots (8-byte shared stores)
    // and add nothing to the sum; the turn warps add it from the slots,
    // with bulk copies or with 16-byte reductions read back from shared
    // memory 16 bytes a lane (rank 0 stores), and publish (not atomic).
    CHECK(!has(Ptx, "red.relaxed.gpu.global.add.v2.f32"));
    CHECK(!has(Ptx, "st.global.cg.v2.f32"));
    CHECK(has(Ptx, "st.shared.v2.f32"));
    CHECK(has(Ptx, "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == !Red);
    CHECK(has(Ptx, "cp.async.bulk.wait_group 0") == (!Red && !Cfg.AtomicDq));
    CHECK(has(Ptx, "red.relaxed.gpu.global.add.v4.f32") == Red);
    CHECK(has(Ptx, "ld.shared.v4.f32") == Red);
    CHECK(has(Ptx, "st.global.cg.v4.f32") == (Red && !Cfg.AtomicDq));
    CHECK(has(Ptx, "st.release.gpu") == !Cfg.AtomicDq);
    CHECK(has(Ptx, "ld.acquire.gpu") == !Cfg.AtomicDq);
    checkCubin(Src);
  }
}

TEST_CASE("bwd_sm90: at head dim 64 the 128-row steps take dQ through the slots with the turns "
          "taken ahead",
          "[nvrtc][bwd90][mha]") {
  // Each warpgroup stores its chain's 64 rows into the slot (8-byte shared
  // stores); the turn warps add its 128 rows of 64 floats by bulk
  // reductions (.bulk2.) or two rows a pass of 16-byte adds (.red2., .red.).
  const ModeCase Cases[] = {
      {examples::mha(), "bwd90ws.kv128x128s2.lean2.red2.fused", DType::F16},
      {examples::mhaDocument(), "bwd90ws.kv128x128s2.lean2.red2.fused", DType::BF16},
      {examples::alibiLearnable(), "bwd90ws.kv128x128s2.lean2.red2.fused", DType::F16},
      {examples::mha(), "bwd90ws.kv128x128s2.lean2.bulk2.fused", DType::BF16},
      {examples::mha(), "bwd90ws.kv128x128s2.lean2.red.fused", DType::F16}};
  for (const auto &C : Cases) {
    BwdSm90Config Cfg = BwdSm90Config::parse(C.Config);
    REQUIRE(Cfg.BulkDq);
    const bool Red = Cfg.BulkForm >= 2;
    codegen::KernelSource Src =
        codegen::generateBackwardSm90(compile(C.Def), kernelSpec(C.T, 64, 64), Cfg);
    INFO("kernel " << Src.Key);
    std::string Ptx = compileToPtx(Src);
    CHECK(has(Ptx, "wgmma.mma_async.sync.aligned.m64n64k16")); // dQ: a chain's 64 columns
    CHECK(!has(Ptx, "m64n32k16"));
    CHECK(!has(Ptx, "red.relaxed.gpu.global.add.v2.f32"));
    CHECK(has(Ptx, "st.shared.v2.f32"));
    CHECK(has(Ptx, "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == !Red);
    CHECK(has(Ptx, "red.relaxed.gpu.global.add.v4.f32") == Red);
    CHECK(has(Ptx, "ld.shared.v4.f32") == Red);
    CHECK(has(Ptx, "st.release.gpu"));
    checkCubin(Src);
  }
  // The slots' 128 rows of a step: 2 · 128 · (4 · 64 + 32) bytes beside the
  // lean step's; three stages do not fit.
  BwdSm90Config Two = BwdSm90Config::parse("bwd90ws.kv128x128s2.lean2.red2.fused");
  BwdSm90Config Lean = BwdSm90Config::parse("bwd90ws.kv128x128s2.lean2.fused");
  CHECK(Two.dkdvSharedBytes(64, 64, 1, false) ==
        Lean.dkdvSharedBytes(64, 64, 1, false) + 2 * 128 * (4 * 64 + 32));
  CHECK_THROWS_WITH(codegen::generateBackwardSm90(
                        compile(examples::mha()), kernelSpec(DType::F16, 64, 64),
                        BwdSm90Config::parse("bwd90ws.kv128x128s3.lean2.red2.fused")),
                    Catch::Matchers::Contains("shared memory"));
  // At head dim 128 the step is 64 rows, and .bulk. (one turn warp) has no
  // 128-row form.
  CHECK_THROWS_WITH(codegen::generateBackwardSm90(
                        compile(examples::mha()), kernelSpec(DType::F16, 64, 64),
                        BwdSm90Config::parse("bwd90ws.kv128x128s2.lean2.bulk.fused")),
                    Catch::Matchers::Contains("turns taken ahead"));
}

TEST_CASE("bwd_sm90: the column split compiles to CUBINs without wgmma "
          "serialisation",
          "[nvrtc][bwd90][mha]") {
  // dV's and dK's products are waited for before dQ's is issued: with all
  // three in flight, alibi_learnable's at 256/256 had its wgmma serialised.
  struct {
    const dsl::DefinitionBase &Def;
    DType T;
    int D, DV;
  } Cases[] = {{examples::alibiLearnable(), DType::F16, 256, 256},
               {examples::mha(), DType::BF16, 192, 128}};
  for (const auto &C : Cases) {
    CompiledDefinition Def = compile(C.Def);
    codegen::KernelSource Src = codegen::generateBackwardSm90(
        Def, kernelSpec(C.T, C.D, C.DV), BwdSm90Config::parse("bwd90ws.kv64x64s2.split.fused"));
    CHECK(has(Src.Source, "/*kSplit=*/true"));
    INFO("kernel " << Src.Key);
    checkCubin(Src);
  }
  // With the turn warp (.split.tw., the default there): the compute threads arrive once their
  // adds are issued (the unaligned form: the warpgroups' code differs) and
  // no longer read or publish the semaphores; that warp does.
  for (const auto &C : Cases) {
    CompiledDefinition Def = compile(C.Def);
    codegen::KernelSource Src = codegen::generateBackwardSm90(
        Def, kernelSpec(C.T, C.D, C.DV),
        BwdSm90Config::defaultFor(C.D, C.DV));
    INFO("kernel " << Src.Key);
    CHECK(Src.Key.find(C.D == 192 ? "split.ro.fused" : "split.tw.fused") != std::string::npos);
    CHECK(has(Src.Source, "/*kSplit=*/true, /*kPingPong=*/false, /*kDqWriter=*/false, "
                          "/*kLeanLevel=*/2"));
    std::string Ptx = compileToPtx(Src);
    CHECK(has(Ptx, "barrier.arrive"));
    CHECK(has(Ptx, "ld.acquire.gpu"));
    CHECK(has(Ptx, "st.release.gpu"));
    checkCubin(Src);
  }
}

TEST_CASE("bwd_sm90: the column split's roles form compiles to CUBINs without wgmma "
          "serialisation",
          "[nvrtc][bwd90][mha]") {
  // Warpgroup 1 multiplies the Pᵀ and dSᵀ tiles from shared memory with dO
  // and Q transposed (A K-major, B MN-major), warpgroup 0 hands them over
  // through the ps mbarriers and alone takes the dQ turns with the turn warp.
  const ModeCase Cases[] = {{examples::mha(), "bwd90ws.kv64x64s2.split.ro.fused", DType::F16},
                            {examples::alibiLearnable(), "bwd90ws.kv64x64s2.split.ro.fused",
                             DType::BF16},
                            {examples::mhaDocument(), "bwd90ws.kv64x64s3.split.ro.fused",
                             DType::F16}};
  for (int D : {192, 128})
    for (const auto &C : Cases) {
      CompiledDefinition Def = compile(C.Def);
      codegen::KernelSource Src = codegen::generateBackwardSm90(
          Def, kernelSpec(C.T, D, 128), BwdSm90Config::parse(C.Config));
      INFO("kernel " << Src.Key);
      CHECK(has(Src.Source, "/*kLeanLevel=*/2, /*kBulkDq=*/false, /*kRoles=*/true"));
      std::string Ptx = compileToPtx(Src);
      CHECK(has(Ptx, D == 192 ? "wgmma.mma_async.sync.aligned.m64n192k16"
                              : "wgmma.mma_async.sync.aligned.m64n128k16"));
      CHECK(has(Ptx, "mbarrier.arrive"));
      CHECK(has(Ptx, "st.release.gpu"));
      checkCubin(Src);
    }
  // Warpgroup 1 would hold 256 floats of dK and dV a thread at 256/256.
  BwdSm90Config R = BwdSm90Config::parse("bwd90ws.kv64x64s2.split.ro.fused");
  CHECK_THAT(codegen::bwdSm90Unsupported(kernelSpec(DType::F16, 256, 256), R, 1, true),
             Catch::Matchers::Contains("roles form"));
  CHECK(codegen::bwdSm90Unsupported(kernelSpec(DType::F16, 192, 128), R, 1, true).empty());
}

TEST_CASE("bwd_sm90: fused dQ at head dim 64 splits dQ's rows between the warpgroups",
          "[nvrtc][bwd90][mha]") {
  // 128-row steps of 128 keys: each warpgroup's dQ product is one 64-row
  // chain over all 128 keys and all 64 columns (m64n64k16, eight k16 steps
  // from its own slab of the dSᵀ tile), added to its chain's rows; Sᵀ and
  // dPᵀ of 128 queries fit beside dK and dV.
  struct : ModeCase {
    bool IsMha;
  } Cases[] = {{examples::mha(), "bwd90ws.kv128x128s2.lean2.fused", DType::F16, true},
               {examples::mha(), "bwd90ws.kv128x128s3.lean2.fused", DType::BF16, true},
               {examples::mha(), "bwd90ws.kv128x128s2.lean3.fused", DType::F16, true},
               {examples::mha(), "bwd90ws.kv128x128s2.atomic", DType::BF16, true},
               {examples::mha(), "bwd90.kv128x128s3.fused", DType::F16, true},
               {examples::alibiLearnable(), "bwd90ws.kv128x128s2.lean2.fused", DType::BF16, false},
               {examples::softcapLearnable(), "bwd90ws.kv128x128s2.lean2.fused", DType::F16,
                false},
               {examples::mhaDocument(), "bwd90ws.kv128x128s2.lean2.fused", DType::BF16, false}};
  for (const auto &C : Cases) {
    BwdSm90Config Cfg = BwdSm90Config::parse(C.Config);
    codegen::KernelSource Src =
        codegen::generateBackwardSm90(compile(C.Def), kernelSpec(C.T, 64, 64), Cfg);
    INFO("kernel " << Src.Key);
    std::string Ptx = compileToPtx(Src);
    CHECK(has(Ptx, ".entry attnc_bwd_dq_convert"));
    CHECK(!has(Ptx, ".entry attnc_bwd_dq("));
    CHECK(has(Ptx, "wgmma.mma_async.sync.aligned.m64n128k16")); // Sᵀ, dPᵀ
    CHECK(has(Ptx, "wgmma.mma_async.sync.aligned.m64n64k16"));  // dV, dK, dQ
    CHECK(!has(Ptx, "m64n32k16"));
    CHECK(has(Ptx, "ld.acquire.gpu") == !Cfg.AtomicDq);
    CHECK(has(Ptx, "red.relaxed.gpu.global.add.v4.f32") == (Cfg.Lean == 3));
    runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
    INFO(Bin.Log);
    CHECK(!has(Bin.Log, "serialized"));
    runtime::KernelResources R = runtime::readCubinResources(
        llvm::StringRef(Bin.Cubin.data(), Bin.Cubin.size()), "attnc_bwd_dkdv");
    // (Warp-specialised: launched at 384 threads, before setmaxnreg.)
    CHECK(R.Registers <= (Cfg.WarpSpecialized ? 168 : 255));
    // A few loop-invariant words spilled (ptxas: 24-32 bytes of frame at
    // 168 registers), never the accumulators (which would be 256 or more).
    if (C.IsMha)
      CHECK(R.StackFrameBytes <= 32);
  }
}
