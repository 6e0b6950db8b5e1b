// The Hopper backward skeleton (bwd_sm90) without a GPU: its configuration
// strings and checks, NVRTC compiles of every transformer example's
// backward for sm_90a carrying wgmma, and the choice between bwd_sm90 and
// bwd_sm80.
#include "Examples.h"
#include "NvrtcPtx.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/dsl/Registry.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/ResourceModel.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/Skeleton.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

using namespace attn;
using namespace attn::nvrtctest;
using codegen::BwdSm90Config;
using codegen::KernelSpec;
using Catch::Matchers::Contains;

namespace {

/// f16 and bf16 x head dims 64/64, 128/128, 192/128 and 256/256 to PTX
/// with the default configuration, each with wgmma in the dtype and the
/// proxy fence its cp.async tiles need (192/128 and 256/256: the column
/// split, warp-specialised with TMA), and 128/128 in the ping-pong and
/// dQ-writer modes too (the writer's bulk adds); and one CUBIN (\p CubinType,
/// \p CubinDim) whose NVRTC log has no wgmma serialisation warning.
void compileExample(const dsl::DefinitionBase &D, DType CubinType, int CubinDim) {
  CompiledDefinition Def = compile(D);
  unsigned Compiled = 0;
  for (DType T : {DType::F16, DType::BF16})
    for (auto [Dim, DimV] : {std::pair{64, 64}, {128, 128}, {192, 128}, {256, 256}}) {
      BwdSm90Config Cfg = BwdSm90Config::defaultFor(Dim, DimV);
      codegen::KernelSource Src =
          codegen::generateBackwardSm90(Def, kernelSpec(T, Dim, DimV), Cfg);
      std::string Ptx = compileToPtx(Src);
      INFO("kernel " << Src.Key);
      CHECK(has(Ptx, ".entry attnc_bwd_dkdv"));
      CHECK(has(Ptx, "wgmma.mma_async.sync.aligned.m64n64k16"));
      CHECK(has(Ptx, Dim == 64 ? "wgmma.mma_async.sync.aligned.m64n64k16"
                               : "wgmma.mma_async.sync.aligned.m64n128k16"));
      CHECK(has(Ptx, T == DType::F16 ? ".f32.f16.f16" : ".f32.bf16.bf16"));
      CHECK(has(Ptx, "fence.proxy.async.shared::cta"));
      CHECK(Cfg.SplitCols == (Dim > 128));
      CHECK(has(Ptx, "cp.async.bulk.tensor.4d") == Cfg.WarpSpecialized);
      CHECK(has(Ptx, "setmaxnreg.inc") == Cfg.WarpSpecialized);
      // Every default fuses dQ into the dK/dV kernel (both operands of
      // dS·K MN-major): no dQ kernel.
      CHECK(has(Ptx, ".entry attnc_bwd_dq_convert"));
      CHECK(has(Ptx, "p, 1, 1, 1, 1;"));
      CHECK(!has(Ptx, ".entry attnc_bwd_dq("));
      ++Compiled;
    }
  for (DType T : {DType::F16, DType::BF16})
    for (const char *Mode : {"bwd90ws.kv64x128s2.pp.fused", "bwd90ws.kv64x128s2.dqw.fused"}) {
      codegen::KernelSource Src = codegen::generateBackwardSm90(
          Def, kernelSpec(T, 128, 128), BwdSm90Config::parse(Mode));
      std::string Ptx = compileToPtx(Src);
      INFO("kernel " << Src.Key);
      CHECK(has(Ptx, "wgmma.mma_async.sync.aligned.m64n128k16"));
      CHECK(has(Ptx, T == DType::F16 ? ".f32.f16.f16" : ".f32.bf16.bf16"));
      CHECK(has(Ptx, "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"));
      ++Compiled;
    }
  // d64's long-walk twin (longWalkBackwardChoice: the default with the dQ
  // turns taken ahead), which long or masked calls run.
  for (DType T : {DType::F16, DType::BF16}) {
    codegen::KernelSource Src = codegen::generateBackwardSm90(
        Def, kernelSpec(T, 64, 64), BwdSm90Config::parse("bwd90ws.kv128x128s2.lean2.red2.fused"));
    std::string Ptx = compileToPtx(Src);
    INFO("kernel " << Src.Key);
    CHECK(has(Ptx, "red.relaxed.gpu.global.add.v4.f32"));
    CHECK(has(Ptx, "st.shared.v2.f32"));
    CHECK(!has(Ptx, "red.relaxed.gpu.global.add.v2.f32"));
    ++Compiled;
  }
  CHECK(Compiled == 14);
  checkedWgmmaCubin(codegen::generateBackwardSm90(
      Def, kernelSpec(CubinType, CubinDim, CubinDim),
      BwdSm90Config::defaultFor(CubinDim, CubinDim)));
}

} // namespace

TEST_CASE("bwd_sm90: configuration strings", "[bwd90]") {
  BwdSm90Config C = BwdSm90Config::parse("bwd90.kv128x64s3.q64x32w4");
  CHECK(C.KvBlockM == 128);
  CHECK(C.KvBlockN == 64);
  CHECK(C.Stages == 3);
  CHECK(C.QBlockM == 64);
  CHECK(C.QBlockN == 32);
  CHECK(C.QWarps == 4);
  CHECK(C.dkdvThreads() == 128);
  CHECK(C.str() == "bwd90.kv128x64s3.q64x32w4");
  CHECK(!C.FusedDq);
  CHECK(BwdSm90Config::defaultFor(128, 128).str() == "bwd90ws.kv64x128s2.lean2.bulk2.fused");
  CHECK(BwdSm90Config::defaultFor(64, 64).str() == "bwd90ws.kv128x128s2.lean2.fused");
  // The fused dQ mode: the Q tiles are the dK/dV kernel's, warps its own.
  BwdSm90Config F = BwdSm90Config::parse("bwd90.kv128x64s3.fused");
  CHECK(F.FusedDq);
  CHECK(F.KvBlockM == 128);
  CHECK(F.KvBlockN == 64);
  CHECK(F.Stages == 3);
  CHECK(F.QBlockM == 128);
  CHECK(F.QBlockN == 64);
  CHECK(F.QWarps == 4);
  CHECK(F.str() == "bwd90.kv128x64s3.fused");
  CHECK(F == BwdSm90Config::fused(128, 64, 3));
  CHECK(!(F == BwdSm90Config::parse("bwd90.kv128x64s3.q128x64w4")));
  for (const char *Bad : {"kv64x128w8.fused.s2", "bwd90.kv64x128s2", "bwd90.kv64x128s2.q128x64w8 ",
                          "sm90.m128n128s3", "bwd90.kv64x128s2.fused ", "bwd90.kv64x128.fused",
                          "bwd90.kv64x128s2.fused.q128x64w8", "bwd90ws.kv64x128s2.q128x64w8",
                          "bwd90.kv64x128s2.atomic.fused", "bwd90ws.kv64x128s2.atomic ",
                          "bwd90ws.kv64x128.fused", "bwd90ws1.kv64x128s2.fused",
                          "bwd90ws2.kv64x128s2.q128x64w8"})
    CHECK_THROWS_WITH(BwdSm90Config::parse(Bad),
                      Contains("expected bwd90.kv<M>x<N>s<stages>.q<M>x<N>w<warps>, "
                               "bwd90.kv<M>x<N>s<stages>.fused or .atomic, or "
                               "bwd90ws[2].kv<M>x<N>s<stages>[.split|.pp|.dqw|.lean|.lean2|.lean3]"
                               ".fused or .atomic"));
  // The opt-in modes: atomic dQ adds, warp specialisation (a producer
  // warpgroup beside the two of keys, 256 bytes of mbarriers).
  BwdSm90Config A = BwdSm90Config::parse("bwd90.kv64x128s2.atomic");
  CHECK(A.FusedDq);
  CHECK(A.AtomicDq);
  CHECK(!A.WarpSpecialized);
  CHECK(A.str() == "bwd90.kv64x128s2.atomic");
  CHECK(A.dkdvThreads() == 256);
  CHECK(!(A == BwdSm90Config::fused(64, 128, 2)));
  for (std::string Text : {"bwd90ws.kv64x128s2.fused", "bwd90ws.kv64x128s3.atomic",
                           "bwd90ws2.kv64x128s2.fused"}) {
    BwdSm90Config W = BwdSm90Config::parse(Text);
    CHECK(W.FusedDq);
    CHECK(W.WarpSpecialized);
    CHECK(W.AtomicDq == has(Text, ".atomic"));
    CHECK(W.TwoPass == has(Text, "ws2."));
    CHECK(W.str() == Text);
    CHECK(W.dkdvThreads() == 384);
    BwdSm90Config Plain = W;
    Plain.WarpSpecialized = false;
    CHECK(W.dkdvSharedBytes(128, 128, 1, false) ==
          Plain.dkdvSharedBytes(128, 128, 1, false) + 256);
    CHECK(!W.SplitCols);
  }
  // The column split: two consumer warpgroups over 64 keys, the producer.
  CHECK(BwdSm90Config::defaultFor(256, 256).str() == "bwd90ws.kv64x64s2.split.tw.fused");
  CHECK(BwdSm90Config::defaultFor(192, 128).str() == "bwd90ws.kv64x64s2.split.ro.fused");
  CHECK(BwdSm90Config::defaultFor(256, 128).str() == "bwd90ws.kv64x64s2.split.tw.fused");
  CHECK(BwdSm90Config::defaultFor(192, 256).str() == "bwd90ws.kv64x64s2.split.tw.fused");
  CHECK(BwdSm90Config::defaultFor(192, 192).str() == BwdSm90Config{}.str());
  CHECK(BwdSm90Config::defaultFor(128, 256).str() == BwdSm90Config{}.str());
  for (std::string Text : {"bwd90ws.kv64x64s2.split.fused", "bwd90ws.kv64x64s3.split.atomic",
                           "bwd90ws.kv64x64s2.split.tw.fused"}) {
    BwdSm90Config S = BwdSm90Config::parse(Text);
    CHECK(S.SplitCols);
    // .split.tw.: the lean step's turn warp, nothing else of the lean step.
    CHECK(S.Lean == (has(Text, ".tw.") ? 2 : 0));
    CHECK(!S.BulkDq);
    CHECK(S.WarpSpecialized);
    CHECK(S.FusedDq);
    CHECK(S.AtomicDq == has(Text, ".atomic"));
    CHECK(S.str() == Text);
    CHECK(S.dkdvWarpgroups() == 2);
    CHECK(S.dkdvThreads() == 384);
    // 256/256: K and V of 64 keys, two stages of Q, dO and the rows, the
    // dSᵀ tile and the mbarriers.
    if (S.Stages == 2)
      CHECK(S.dkdvSharedBytes(256, 256, 1, true) ==
            1024 + 2 * 64 * 512 + 2 * (2 * 64 * 512 + 1024) + 2 * 64 * 64 + 256);
  }
  // The roles form: the column split with the turn warp, two slots of a
  // Pᵀ and a dSᵀ tile instead of the one dSᵀ tile.
  {
    BwdSm90Config R = BwdSm90Config::parse("bwd90ws.kv64x64s2.split.ro.fused");
    CHECK(R.SplitCols);
    CHECK(R.SplitRoles);
    CHECK(R.Lean == 2);
    CHECK(R.str() == "bwd90ws.kv64x64s2.split.ro.fused");
    CHECK(R.dkdvThreads() == 384);
    BwdSm90Config Tw = BwdSm90Config::parse("bwd90ws.kv64x64s2.split.tw.fused");
    CHECK(!Tw.SplitRoles);
    CHECK(R.dkdvSharedBytes(192, 128, 1, true) ==
          Tw.dkdvSharedBytes(192, 128, 1, true) + 3 * 2 * 64 * 64);
    BwdSm90Config A = R;
    A.AtomicDq = true;
    CHECK_THAT(codegen::bwdSm90Unsupported(kernelSpec(DType::F16, 192, 128), A, 1, true),
               Contains("the column split's turn warp"));
  }
  for (const char *Bad : {"bwd90ws.kv64x64s2.fused.split", "bwd90ws.kv64x64s2.split",
                          "bwd90.kv64x64s2.split.q128x64w8"})
    CHECK_THROWS_WITH(BwdSm90Config::parse(Bad), Contains("[.split|.pp|.dqw|.lean|.lean2|.lean3].fused or .atomic"));
  for (const char *Bad : {"bwd90ws.kv64x64s2.split.lean2.fused", "bwd90ws.kv64x64s2.tw.fused",
                          "bwd90ws.kv64x64s2.lean2.tw.fused"})
    CHECK_THROWS_WITH(BwdSm90Config::parse(Bad), Contains(".split.tw.fused"));
  // The turn warp has no turns to take in the atomic mode.
  {
    BwdSm90Config S = BwdSm90Config::parse("bwd90ws.kv64x64s2.split.tw.fused");
    S.AtomicDq = true;
    CHECK_THAT(codegen::bwdSm90Unsupported(kernelSpec(DType::F16, 256, 256), S, 1, true),
               Contains("the column split's turn warp"));
  }
  // Ping-pong: the warpgroups take turns at the tensor cores, and two fp32
  // dQ slots of 64 rows (4·D + 32 bytes each) come before the mbarriers.
  for (std::string Text : {"bwd90ws.kv64x128s2.pp.fused", "bwd90ws.kv64x128s3.pp.atomic"}) {
    BwdSm90Config P = BwdSm90Config::parse(Text);
    CHECK(P.PingPong);
    CHECK(!P.SplitCols);
    CHECK(P.WarpSpecialized);
    CHECK(P.FusedDq);
    CHECK(P.AtomicDq == has(Text, ".atomic"));
    CHECK(P.str() == Text);
    CHECK(P.dkdvThreads() == 384);
    BwdSm90Config NoPp = P;
    NoPp.PingPong = false;
    CHECK(!(P == NoPp));
    CHECK(P.dkdvSharedBytes(128, 128, 1, true) ==
          NoPp.dkdvSharedBytes(128, 128, 1, true) + 2 * 64 * (4 * 128 + 32));
  }
  // The dQ writer alone: the same slots, the lockstep step.
  for (std::string Text : {"bwd90ws.kv64x128s2.dqw.fused", "bwd90ws.kv64x128s2.dqw.atomic"}) {
    BwdSm90Config Q = BwdSm90Config::parse(Text);
    CHECK(Q.DqWriter);
    CHECK(!Q.PingPong);
    CHECK(Q.AtomicDq == has(Text, ".atomic"));
    CHECK(Q.str() == Text);
    BwdSm90Config NoQ = Q;
    NoQ.DqWriter = false;
    CHECK(Q.dkdvSharedBytes(128, 128, 1, true) ==
          NoQ.dkdvSharedBytes(128, 128, 1, true) + 2 * 64 * (4 * 128 + 32));
  }
  // The lean step (1), with the turn warp (2), with 16-byte dQ adds (3): the lockstep step's
  // tiles and shared memory.
  for (std::string Text : {"bwd90ws.kv64x128s2.lean.fused", "bwd90ws.kv64x128s2.lean2.fused",
                           "bwd90ws.kv64x128s2.lean.atomic", "bwd90ws.kv64x128s2.lean3.fused"}) {
    BwdSm90Config L = BwdSm90Config::parse(Text);
    CHECK(L.Lean == (has(Text, ".lean2.") ? 2 : has(Text, ".lean3.") ? 3 : 1));
    CHECK(L.WarpSpecialized);
    CHECK(!L.PingPong);
    CHECK(!L.DqWriter);
    CHECK(L.AtomicDq == has(Text, ".atomic"));
    CHECK(L.str() == Text);
    BwdSm90Config NoL = L;
    NoL.Lean = 0;
    CHECK(!(L == NoL));
    CHECK(L.dkdvSharedBytes(128, 128, 1, true) == NoL.dkdvSharedBytes(128, 128, 1, true));
  }
  // The turn warp's bulk dQ: .lean2.'s tiles, the dQ writer's two slots.
  {
    const std::string Text = "bwd90ws.kv64x128s2.lean2.bulk.fused";
    BwdSm90Config B = BwdSm90Config::parse(Text);
    CHECK(B.BulkDq);
    CHECK(B.Lean == 2);
    CHECK(!B.DqWriter);
    CHECK(!B.AtomicDq);
    CHECK(B.str() == Text);
    BwdSm90Config NoB = B;
    NoB.BulkDq = false;
    CHECK(!(B == NoB));
    CHECK(NoB.str() == "bwd90ws.kv64x128s2.lean2.fused");
    CHECK(B.dkdvSharedBytes(128, 128, 1, true) ==
          NoB.dkdvSharedBytes(128, 128, 1, true) + 2 * 64 * (4 * 128 + 32));
    CHECK(B.dkdvThreads() == 384);
    CHECK(!BwdSm90Config::parse("bwd90ws.kv64x128s2.lean2.fused").BulkDq);
    BwdSm90Config A = BwdSm90Config::parse("bwd90ws.kv64x128s2.lean2.bulk.atomic");
    CHECK(A.BulkDq);
    CHECK(A.AtomicDq);
    CHECK(A.str() == "bwd90ws.kv64x128s2.lean2.bulk.atomic");
  }
  // Turns taken ahead (.bulk2., .red2., .red.): the same slots, BulkForm 1
  // to 3.
  const std::pair<const char *, int> Ahead[] = {{"bwd90ws.kv64x128s2.lean2.bulk2.fused", 1},
                                                {"bwd90ws.kv64x128s2.lean2.bulk2.atomic", 1},
                                                {"bwd90ws.kv64x128s2.lean2.red2.fused", 2},
                                                {"bwd90ws.kv64x128s2.lean2.red2.atomic", 2},
                                                {"bwd90ws.kv64x128s2.lean2.red.fused", 3},
                                                {"bwd90ws.kv64x128s2.lean2.red.atomic", 3}};
  for (auto [Text, Form] : Ahead) {
    INFO(Text);
    BwdSm90Config T = BwdSm90Config::parse(Text);
    CHECK(T.BulkDq);
    CHECK(T.Lean == 2);
    CHECK(T.BulkForm == Form);
    CHECK(T.str() == Text);
    BwdSm90Config One = T;
    One.BulkForm = 0;
    CHECK(!(T == One));
    CHECK(T.dkdvSharedBytes(128, 128, 1, true) == One.dkdvSharedBytes(128, 128, 1, true));
    CHECK(T.dkdvThreads() == 384);
  }
  for (const char *Bad : {"bwd90ws.kv64x128s2.lean.bulk2.fused", "bwd90ws.kv64x128s2.red2.fused",
                          "bwd90ws.kv64x128s2.lean2.red2.bulk.fused",
                          "bwd90ws.kv64x128s2.lean2.red.red2.fused",
                          "bwd90ws.kv64x128s2.lean2.fused.red2"})
    CHECK_THROWS_WITH(BwdSm90Config::parse(Bad), Contains(".red2. or .red."));
  for (const char *Bad : {"bwd90ws.kv64x128s2.bulk.fused", "bwd90ws.kv64x128s2.lean.bulk.fused",
                          "bwd90ws.kv64x128s2.lean3.bulk.fused",
                          "bwd90ws.kv64x128s2.bulk.lean2.fused",
                          "bwd90ws.kv64x128s2.lean2.fused.bulk"})
    CHECK_THROWS_WITH(BwdSm90Config::parse(Bad), Contains(".lean2.bulk.fused"));
  for (const char *Bad : {"bwd90ws.kv64x128s2.lean", "bwd90ws.kv64x128s2.fused.lean",
                          "bwd90ws.kv64x128s2.lean4.fused", "bwd90ws.kv64x128s2.pp.lean.fused",
                          "bwd90.kv64x128s2.lean.q128x64w8"})
    CHECK_THROWS_WITH(BwdSm90Config::parse(Bad),
                      Contains("[.split|.pp|.dqw|.lean|.lean2|.lean3].fused or .atomic"));
  for (const char *Bad : {"bwd90ws.kv64x128s2.fused.pp", "bwd90ws.kv64x128s2.pp",
                          "bwd90ws.kv64x128s2.pp.dqw.fused", "bwd90ws.kv64x128s2.dqw",
                          "bwd90ws.kv64x128s2.pp.split.fused", "bwd90.kv64x128s2.pp.q128x64w8"})
    CHECK_THROWS_WITH(BwdSm90Config::parse(Bad), Contains("[.split|.pp|.dqw|.lean|.lean2|.lean3].fused or .atomic"));
  // Shared memory: 1024 bytes of slack, K and V, then per stage Q, dO and
  // the rows' floats rounded to 1024 bytes.
  CHECK(C.dkdvSharedBytes(64, 64, 1, true) ==
        1024 + 2 * 64 * 128 + 3 * (2 * 128 * 128 + 1024));
  CHECK(BwdSm90Config{}.dkdvSharedBytes(128, 128, 1, false) ==
        1024 + 2 * 128 * 256 + 2 * (2 * 64 * 256 + 1024));
  // Fused: the dSᵀ tile on top, and no dQ kernel.
  CHECK(BwdSm90Config::fused(64, 128, 2).dkdvSharedBytes(128, 128, 1, false) ==
        1024 + 2 * 128 * 256 + 2 * (2 * 64 * 256 + 1024) + 2 * 128 * 64);
  CHECK(F.dqSharedBytes(64, 64) == 0);
  CHECK(C.dqSharedBytes(64, 64) > 0);
}

TEST_CASE("bwd_sm90: what the skeleton supports", "[bwd90]") {
  BwdSm90Config C;
  auto Why = [&](KernelSpec S, BwdSm90Config Cfg) {
    return codegen::bwdSm90Unsupported(S, Cfg, 1, false);
  };
  for (DType T : {DType::F16, DType::BF16})
    for (int D : {64, 128})
      CHECK(Why(kernelSpec(T, D, D), C).empty());
  CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128, GpuArch::Sm80), C),
             Contains("needs arch sm_90a"));
  CHECK_THAT(Why(kernelSpec(DType::F16, 192, 128), C),
             Contains("head_dim 192 is not supported by bwd_sm90 with backward config "
                      "bwd90.kv64x128s2.q128x64w8; expected 64 or 128, or 128, 192 or "
                      "256 (head_dim_v 128 or 256) in the column-split mode"));
  // The column split: 128, 192 or 256 with 128 or 256, 64 keys and
  // query rows a step, warp-specialised with fused dQ.
  BwdSm90Config Split = BwdSm90Config::defaultFor(256, 256);
  for (DType T : {DType::F16, DType::BF16})
    for (auto [D, DV] : {std::pair{256, 256}, {192, 128}, {128, 128}, {128, 256},
                         {192, 256}, {256, 128}})
      CHECK(Why(kernelSpec(T, D, DV), Split).empty());
  for (auto [D, DV] : {std::pair{64, 64}, {192, 192}, {256, 64}, {96, 128}})
    CHECK_THAT(Why(kernelSpec(DType::F16, D, DV), Split),
               Contains("not supported by bwd_sm90's column split; expected head_dim "
                        "128, 192 or 256 and head_dim_v 128 or 256"));
  CHECK_THAT(Why(kernelSpec(DType::F16, 256, 256, GpuArch::Sm80), Split),
             Contains("needs arch sm_90a"));
  for (const char *Bad : {"bwd90ws.kv64x128s2.split.fused", "bwd90.kv64x64s2.split.fused",
                          "bwd90ws2.kv64x64s2.split.fused"})
    CHECK_THAT(Why(kernelSpec(DType::F16, 256, 256), BwdSm90Config::parse(Bad)),
               Contains("the column split is a bwd90ws. mode with a key block of 64"));
  CHECK_THAT(Why(kernelSpec(DType::F16, 256, 256), BwdSm90Config::parse("bwd90ws.kv128x64s2.split.fused")),
             Contains("the column split's query step must be 64"));
  // Two stages fit at 256/256 (203 KiB with one final rowscale), three do
  // not; four fit at 192/128.
  CHECK_THAT(Why(kernelSpec(DType::F16, 256, 256), BwdSm90Config::parse("bwd90ws.kv64x64s3.split.fused")),
             Contains("bytes of shared memory"));
  CHECK(Why(kernelSpec(DType::F16, 192, 128), BwdSm90Config::parse("bwd90ws.kv64x64s4.split.fused"))
            .empty());
  CHECK_THAT(Why(kernelSpec(DType::F16, 128, 256), C),
             Contains("head_dim_v 256 is not supported by bwd_sm90"));
  BwdSm90Config Regs = C; // 128 query rows a step beside dK and dV of d128
  Regs.KvBlockM = 128;
  CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128), Regs),
             Contains("256 accumulator floats"));
  CHECK(Why(kernelSpec(DType::F16, 64, 64), Regs).empty());
  BwdSm90Config Keys = C;
  Keys.KvBlockN = 192;
  CHECK_THAT(Why(kernelSpec(DType::F16, 64, 64), Keys), Contains("key block must be 64 or 128"));
  // Four stages fit at d128 with one final rowscale, not with 40.
  BwdSm90Config Shared = C;
  Shared.Stages = 4;
  CHECK(Why(kernelSpec(DType::F16, 128, 128), Shared).empty());
  CHECK_THAT(codegen::bwdSm90Unsupported(kernelSpec(DType::F16, 128, 128), Shared, 40, true),
             Contains("bytes of shared memory"));
  // Fused dQ: each warpgroup's columns one or two 64-column slabs, and
  // the registers beside dK and dV.
  CHECK(Why(kernelSpec(DType::F16, 128, 128), BwdSm90Config::fused(64, 128, 2)).empty());
  CHECK(Why(kernelSpec(DType::BF16, 64, 64), BwdSm90Config::fused(64, 64, 3)).empty());
  CHECK(Why(kernelSpec(DType::BF16, 64, 64), BwdSm90Config::fused(128, 64, 2)).empty());
  // At d64 two warpgroups split dQ's rows, a 64-row chain each (128-row
  // steps), in every fused form but ping-pong's (its own keys each).
  for (const char *Ok : {"bwd90ws.kv128x128s2.lean2.fused", "bwd90ws.kv128x128s3.lean2.fused",
                         "bwd90ws.kv128x128s2.lean3.fused", "bwd90ws.kv128x128s2.atomic",
                         "bwd90.kv128x128s3.fused"})
    CHECK(Why(kernelSpec(DType::BF16, 64, 64), BwdSm90Config::parse(Ok)).empty());
  for (const char *Bad : {"bwd90.kv64x128s2.fused", "bwd90ws.kv64x128s2.lean2.fused",
                          "bwd90ws.kv64x128s2.dqw.fused"})
    CHECK_THAT(Why(kernelSpec(DType::F16, 64, 64), BwdSm90Config::parse(Bad)),
               Contains("fused dQ at head_dim 64 with two warpgroups splits dQ's rows"));
  // (The bulk dQ's 64-row steps are refused before.)
  CHECK_THAT(Why(kernelSpec(DType::F16, 64, 64),
                 BwdSm90Config::parse("bwd90ws.kv128x128s2.lean2.bulk.fused")),
             Contains("the bulk dQ reduction is a form of .lean2. with a query step of 64"));
  CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128), BwdSm90Config::fused(64, 64, 2)),
             Contains("with fused dQ would hold 224 accumulator floats"));
  // Atomic dQ and warp specialisation are fused-mode options.
  for (bool Atomic : {false, true}) {
    BwdSm90Config Opt = C;
    (Atomic ? Opt.AtomicDq : Opt.WarpSpecialized) = true;
    CHECK_THAT(Why(kernelSpec(DType::F16, 64, 64), Opt),
               Contains("atomic dQ and warp specialisation need the fused dQ mode"));
  }
  // Ping-pong: warp-specialised, two warpgroups of 64 keys, 64-row steps;
  // 214 KiB of shared memory at d128 with one final rowscale.
  CHECK(Why(kernelSpec(DType::BF16, 128, 128), BwdSm90Config::parse("bwd90ws.kv64x128s2.pp.fused"))
            .empty());
  CHECK(Why(kernelSpec(DType::F16, 128, 128), BwdSm90Config::parse("bwd90ws.kv64x128s2.dqw.atomic"))
            .empty());
  CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128), BwdSm90Config::parse("bwd90ws.kv64x128s3.pp.fused")),
             Contains("bytes of shared memory"));
  for (const char *Bad : {"bwd90.kv64x128s2.pp.fused", "bwd90ws2.kv64x128s2.pp.fused",
                          "bwd90ws.kv64x64s2.pp.fused", "bwd90ws.kv128x128s2.pp.fused",
                          "bwd90.kv64x128s2.dqw.fused", "bwd90ws.kv64x64s3.dqw.fused"})
    CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128), BwdSm90Config::parse(Bad)),
               Contains("ping-pong and the dQ writer are bwd90ws. modes with a key block "
                        "of 128 and a query step of 64"));
  // The lean step: a warp-specialised fused-dQ mode of the lockstep step,
  // at any of its tilings.
  for (const char *Ok : {"bwd90ws.kv64x128s2.lean.fused", "bwd90ws.kv64x128s3.lean2.fused",
                         "bwd90ws.kv64x128s2.lean.atomic"})
    CHECK(Why(kernelSpec(DType::F16, 128, 128), BwdSm90Config::parse(Ok)).empty());
  CHECK(Why(kernelSpec(DType::BF16, 64, 64), BwdSm90Config::parse("bwd90ws.kv64x64s2.lean2.fused"))
            .empty());
  for (const char *Bad : {"bwd90.kv64x128s2.lean.fused", "bwd90ws2.kv64x128s2.lean.fused"})
    CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128), BwdSm90Config::parse(Bad)),
               Contains("the lean step is a bwd90ws. mode"));
  // The bulk dQ: the turn warp of .lean2.fused, 64-row steps.
  // (Two stages and the slots fit in 227 KiB, three do not.)
  for (const char *Ok : {"bwd90ws.kv64x128s2.lean2.bulk.fused", "bwd90ws.kv64x128s2.lean2.bulk.atomic"})
    CHECK(Why(kernelSpec(DType::F16, 128, 128), BwdSm90Config::parse(Ok)).empty());
  CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128),
                 BwdSm90Config::parse("bwd90ws.kv64x128s3.lean2.bulk.fused")),
             Contains("bytes of shared memory"));
  CHECK_THAT(Why(kernelSpec(DType::F16, 64, 64), BwdSm90Config::parse("bwd90ws.kv128x64s2.lean2.bulk.fused")),
             Contains("the bulk dQ reduction is a form of .lean2. with a query step of 64"));
  CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128),
                 BwdSm90Config::parse("bwd90ws.kv64x128s2.lean2.bulk.fused.varlen")),
             Contains(".varlen is not a form of the bulk dQ"));
  BwdSm90Config BulkLean3 = BwdSm90Config::parse("bwd90ws.kv64x128s2.lean3.fused");
  BulkLean3.BulkDq = true;
  CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128), BulkLean3),
             Contains("the bulk dQ reduction is a form of .lean2."));
  BwdSm90Config LeanSplit = BwdSm90Config::parse("bwd90ws.kv64x64s2.split.fused");
  LeanSplit.Lean = 1;
  CHECK_THAT(Why(kernelSpec(DType::F16, 256, 256), LeanSplit),
             Contains("the lean step is a bwd90ws. mode"));
  BwdSm90Config TwoPass = BwdSm90Config::fused(64, 128, 2);
  TwoPass.TwoPass = true;
  CHECK_THAT(Why(kernelSpec(DType::F16, 128, 128), TwoPass),
             Contains("the two-pass form is a warp-specialised option"));
  // The generator says the same as a UserError.
  CompiledDefinition Def = compile(examples::mha());
  CHECK_THROWS_AS(codegen::generateBackwardSm90(Def, kernelSpec(DType::F16, 128, 256), C),
                  UserError);
}

TEST_CASE("bwd_sm90: the selector picks it on sm_90a where it runs the head "
          "dims, bwd_sm80 elsewhere",
          "[bwd90][skeleton]") {
  using namespace attn::runtime;
  CompiledDefinition Def = compile(examples::mha());
  auto Choice = [&](int D, int DV, GpuArch A) {
    KernelTarget T = KernelTarget::of(Def, Direction::Backward, DType::BF16, D, DV, A);
    return chooseWithoutShape(T, KernelPolicy());
  };
  CHECK(Choice(128, 128, GpuArch::Sm90a).str() ==
        "bwd_sm90 bwd90ws.kv64x128s2.lean2.bulk2.fused (default)");
  CHECK(Choice(64, 64, GpuArch::Sm90a).Skel->name() == "bwd_sm90");
  CHECK(Choice(128, 128, GpuArch::Sm80).Skel->name() == "bwd_sm80");
  CHECK(Choice(64, 64, GpuArch::Sm86).Skel->name() == "bwd_sm80");
  CHECK(Choice(128, 256, GpuArch::Sm90a).Skel->name() == "bwd_sm80");
  CHECK(Choice(64, 128, GpuArch::Sm90a).Skel->name() == "bwd_sm80");
  // 256/256 and 192/128: bwd_sm90's column split; bwd_sm80 runs neither.
  CHECK(Choice(256, 256, GpuArch::Sm90a).str() ==
        "bwd_sm90 bwd90ws.kv64x64s2.split.tw.fused (default)");
  CHECK(Choice(192, 128, GpuArch::Sm90a).str() ==
        "bwd_sm90 bwd90ws.kv64x64s2.split.ro.fused (default)");
  CHECK_THROWS_WITH(Choice(256, 256, GpuArch::Sm80),
                    Contains("bwd_sm90: bwd_sm90 needs arch sm_90a") &&
                        Contains("bwd_sm80: head_dim 256 is not supported by bwd_sm80"));
  // A bwd_sm80 configuration still names bwd_sm80 on sm_90a.
  KernelTarget T =
      KernelTarget::of(Def, Direction::Backward, DType::F16, 128, 128, GpuArch::Sm90a);
  CHECK(chooseWithoutShape(T, KernelPolicy::parse(T, "", "kv64x128w8.fused.s2")).str() ==
        "bwd_sm80 kv64x128w8.fused.s2 (named)");
  CHECK(chooseWithoutShape(T, KernelPolicy::parse(T, "", "bwd90.kv64x64s3.q128x64w8"))
            .str() == "bwd_sm90 bwd90.kv64x64s3.q128x64w8 (named)");
  CHECK(chooseWithoutShape(T, KernelPolicy::parse(T, "", "bwd90.kv64x128s3.fused")).str() ==
        "bwd_sm90 bwd90.kv64x128s3.fused (named)");
  // A named configuration that runs head dims the skeleton's default does
  // not: the column split at 128/256 (bwd_sm80 is the default there).
  KernelTarget T256 = T;
  T256.HeadDimV = 256;
  CHECK(chooseWithoutShape(T256, KernelPolicy()).Skel->name() == "bwd_sm80");
  CHECK(chooseWithoutShape(T256, KernelPolicy::parse(T256, "", "bwd90ws.kv64x64s2.split.fused"))
            .str() == "bwd_sm90 bwd90ws.kv64x64s2.split.fused (named)");
  CHECK_THROWS_WITH(
      chooseWithoutShape(T256, KernelPolicy::parse(T256, "", "bwd90ws.kv64x128s2.fused")),
      Contains("skeleton bwd_sm90 cannot run backward f16 d128/256 sm_90a"));
  // No backward skeleton at 192/192: each one's reason.
  KernelTarget T192 = T;
  T192.HeadDim = 192;
  T192.HeadDimV = 192;
  CHECK_THROWS_WITH(chooseWithoutShape(T192, KernelPolicy()),
                    Contains("no skeleton runs backward f16 d192/192 sm_90a") &&
                        Contains("bwd_sm90: head_dim 192") &&
                        Contains("bwd_sm80: head_dim 192"));
}

TEST_CASE("bwd_sm90: both dQ modes compile for sm_90a in their tilings",
          "[nvrtc][bwd90][mha]") {
  CompiledDefinition Def = compile(examples::mha());
  struct {
    const char *Config;
    DType T;
    int D;
    bool Fused;
  } Cases[] = {{"bwd90.kv64x128s3.fused", DType::F16, 128, true},
               {"bwd90.kv64x64s3.fused", DType::BF16, 64, true},
               {"bwd90.kv128x64s2.fused", DType::F16, 64, true},
               {"bwd90.kv64x128s2.q128x64w8", DType::BF16, 128, false}};
  for (const auto &C : Cases) {
    codegen::KernelSource Src = codegen::generateBackwardSm90(
        Def, kernelSpec(C.T, C.D, C.D), BwdSm90Config::parse(C.Config));
    INFO("kernel " << Src.Key);
    CHECK(has(Src.Key, C.Config));
    bool HasDq = std::find(Src.Entries.begin(), Src.Entries.end(), "attnc_bwd_dq") !=
                 Src.Entries.end();
    CHECK(HasDq == !C.Fused);
    std::string Ptx = compileToPtx(Src);
    for (const std::string &E : Src.Entries)
      CHECK(has(Ptx, (".entry " + E + "(").c_str()));
    // dS·K: both operands MN-major, the sums' turns and adds.
    CHECK(has(Ptx, "p, 1, 1, 1, 1;") == C.Fused);
    CHECK(has(Ptx, "red.relaxed.gpu.global.add") == C.Fused);
    CHECK(has(Ptx, "ld.acquire.gpu") == C.Fused);
  }
  // The default d128 tiling to a CUBIN without wgmma serialisation.
  codegen::KernelSource Src = codegen::generateBackwardSm90(
      Def, kernelSpec(DType::BF16, 128, 128), BwdSm90Config::fused(64, 128, 2));
  runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
  INFO("kernel " << Src.Key << "\n" << Bin.Log);
  CHECK(!has(Bin.Log, "serialized"));
}

TEST_CASE("bwd_sm90: the atomic and warp-specialised modes compile for sm_90a",
          "[nvrtc][bwd90][mha]") {
  struct {
    const dsl::DefinitionBase &Def;
    const char *Config;
    DType T;
    int D;
  } Cases[] = {{examples::mha(), "bwd90.kv64x128s2.atomic", DType::F16, 128},
               {examples::mha(), "bwd90ws.kv64x128s2.fused", DType::F16, 128},
               {examples::mha(), "bwd90ws.kv64x128s3.atomic", DType::BF16, 128},
               {examples::mha(), "bwd90ws.kv64x64s2.fused", DType::BF16, 64},
               {examples::alibiLearnable(), "bwd90ws.kv64x128s2.fused", DType::F16, 128},
               {examples::mhaDocument(), "bwd90ws.kv64x128s2.fused", DType::BF16, 128},
               {examples::softcapLearnable(), "bwd90ws2.kv64x128s2.fused", DType::F16, 128}};
  for (const auto &C : Cases) {
    CompiledDefinition Def = compile(C.Def);
    BwdSm90Config Cfg = BwdSm90Config::parse(C.Config);
    codegen::KernelSource Src = codegen::generateBackwardSm90(Def, kernelSpec(C.T, C.D, C.D), Cfg);
    INFO("kernel " << Src.Key);
    CHECK(has(Src.Key, C.Config));
    std::string Ptx = compileToPtx(Src);
    CHECK(has(Ptx, "red.relaxed.gpu.global.add"));
    // Atomic: no turns to wait for.
    CHECK(has(Ptx, "ld.acquire.gpu") == !Cfg.AtomicDq);
    // Warp-specialised: TMA into an mbarrier ring, the rows' cp.async
    // arrivals, registers moved to the two warpgroups of keys.
    for (const char *Marker : {"cp.async.bulk.tensor.4d", "mbarrier.try_wait.parity",
                               "mbarrier.arrive.expect_tx",
                               "cp.async.mbarrier.arrive.noinc"})
      CHECK(has(Ptx, Marker) == Cfg.WarpSpecialized);
    CHECK(has(Ptx, "setmaxnreg.inc") == (Cfg.WarpSpecialized && Cfg.KvBlockN == 128));
    CHECK(has(Src.Source, "Sm90BwdMaps maps") == Cfg.WarpSpecialized);
    // Two passes: P after Sᵀ's group alone, dS after dPᵀ's with dV's
    // still running.
    CHECK(has(Ptx, "wgmma.wait_group.sync.aligned 1;") == Cfg.TwoPass);
    runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
    INFO(Bin.Log);
    CHECK(!has(Bin.Log, "serialized"));
  }
}

TEST_CASE("bwd_sm90: mha compiles for sm_90a", "[nvrtc][bwd90][mha]") {
  compileExample(examples::mha(), DType::F16, 128);
}
TEST_CASE("bwd_sm90: sigmoid_attn compiles for sm_90a", "[nvrtc][bwd90][sigmoid_attn]") {
  compileExample(examples::sigmoidAttn(), DType::BF16, 64);
}
TEST_CASE("bwd_sm90: relu_attn compiles for sm_90a", "[nvrtc][bwd90][relu_attn]") {
  compileExample(examples::reluAttn(), DType::F16, 64);
}
TEST_CASE("bwd_sm90: retention compiles for sm_90a", "[nvrtc][bwd90][retention]") {
  compileExample(examples::retention(), DType::BF16, 128);
}
TEST_CASE("bwd_sm90: retention_combine compiles for sm_90a", "[nvrtc][bwd90][retention]") {
  compileExample(examples::retentionCombine(), DType::F16, 64);
}
TEST_CASE("bwd_sm90: alibi_learnable compiles for sm_90a",
          "[nvrtc][bwd90][alibi_learnable]") {
  compileExample(examples::alibiLearnable(), DType::F16, 128);
}
TEST_CASE("bwd_sm90: softcap_learnable compiles for sm_90a",
          "[nvrtc][bwd90][softcap_learnable]") {
  compileExample(examples::softcapLearnable(), DType::BF16, 128);
}
TEST_CASE("bwd_sm90: the mask examples compile for sm_90a",
          "[nvrtc][bwd90][masks]") {
  compileExample(examples::mhaPrefixLm(), DType::F16, 128);
  compileExample(examples::mhaSlidingWindow(), DType::BF16, 64);
  compileExample(examples::mhaDocument(), DType::F16, 64);
  compileExample(examples::mhaDocumentIds(), DType::BF16, 128);
  compileExample(examples::mhaChunked(), DType::F16, 128);
}

TEST_CASE("bwd_sm90: every registered transformer example has a case above",
          "[bwd90]") {
  // A new example fails here until it gets its own compile case.
  dsl::Registry R;
  examples::registerExamples(R);
  std::set<std::string> Transformers;
  for (const dsl::DefinitionBase *D : R.all())
    if (D->kind() == ir::DefinitionKind::Transformer)
      Transformers.insert(D->name);
  CHECK(Transformers ==
        std::set<std::string>{"mha", "sigmoid_attn", "relu_attn", "retention",
                              "retention_combine", "alibi_learnable", "softcap_learnable",
                              "mha_document_ids", "mha_prefix_lm",
                              "mha_sliding_window", "mha_document",
                              "mha_chunked"});
}
