// The score_mod variants that attnc_bench_bwd's fwdbwd mode times against
// FlexAttention and that no registered example gives (tests/gpu/
// TestDefinitions.h: mha_alibi, ALiBi with fixed per-head slopes, and
// mha_softcap30, a fixed soft cap of 30), without a GPU: their reference
// output against the formula written out here, `attnc check` (online vs
// direct, derived backward vs finite differences), and NVRTC compiles of
// the sm_90a forward and backward the bench runs (f16 and bf16, d128).
#include "NvrtcPtx.h"
#include "TestDefinitions.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/reference/Attention.h"
#include "attn/reference/Checker.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace attn;
using namespace attn::nvrtctest;

namespace {

constexpr int64_t B = 2, H = 2, S = 9, D = 4;

/// Random q, k, v; q scaled so that scores reach tens, where 30·tanh(s/30)
/// is far from s (a soft cap left out would pass on small scores).
reference::AttentionInputs randomInputs(std::mt19937_64 &Rng) {
  std::normal_distribution<double> N(0.0, 1.0);
  reference::AttentionInputs In;
  In.Q = reference::Tensor({B, H, S, D});
  In.K = reference::Tensor({B, H, S, D});
  In.V = reference::Tensor({B, H, S, D});
  for (double &X : In.Q.Data)
    X = 12.0 * N(Rng);
  for (double &X : In.K.Data)
    X = N(Rng);
  for (double &X : In.V.Data)
    X = N(Rng);
  return In;
}

/// Causal softmax attention with \p Mod applied to each scaled score s of
/// (h, i, j), written out in doubles.
template <typename ModT>
reference::Tensor causalSoftmax(const reference::AttentionInputs &In, ModT Mod) {
  reference::Tensor O({B, H, S, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> P(i + 1);
        double Max = -INFINITY, Sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double Dot = 0;
          for (int64_t d = 0; d < D; ++d)
            Dot += In.Q.at({b, h, i, d}) * In.K.at({b, h, j, d});
          P[j] = Mod(Dot / std::sqrt(double(D)), h, i, j);
          Max = std::max(Max, P[j]);
        }
        for (double &X : P)
          Sum += X = std::exp(X - Max);
        for (int64_t d = 0; d < D; ++d) {
          double Acc = 0;
          for (int64_t j = 0; j <= i; ++j)
            Acc += P[j] * In.V.at({b, h, j, d});
          O.at({b, h, i, d}) = Acc / Sum;
        }
      }
  return O;
}

double maxDiff(const reference::Tensor &A, const reference::Tensor &Bt) {
  REQUIRE(A.Shape == Bt.Shape);
  double M = 0;
  for (size_t I = 0; I < A.Data.size(); ++I)
    M = std::max(M, std::fabs(A.Data[I] - Bt.Data[I]));
  return M;
}

void checkPasses(const std::string &Name) {
  CompiledDefinition Def = compile(gputest::makeDefinition(Name));
  reference::CheckReport R = reference::check(Def);
  for (const reference::CheckRow &Row : R.Rows) {
    INFO(Name << ": " << Row.Name << " error " << Row.MaxError << " tolerance "
              << Row.Tolerance);
    CHECK_FALSE(Row.Skipped);
    CHECK(Row.MaxError <= Row.Tolerance);
  }
  CHECK(R.passed());
  CHECK(R.Rows.size() > 10);
}

/// The sm_90a forward and backward of \p Name at d128 (the bench's shapes)
/// to PTX with their Hopper instructions.
void compileSm90(const std::string &Name) {
  CompiledDefinition Def = compile(gputest::makeDefinition(Name));
  for (DType T : {DType::F16, DType::BF16}) {
    codegen::KernelSpec Spec = kernelSpec(T, 128, 128);
    codegen::KernelSource Fwd = codegen::generateForwardSm90(
        Def, Spec, codegen::Sm90Config::defaultFor(128, 128));
    std::string FwdPtx = compileToPtx(Fwd);
    INFO("kernel " << Fwd.Key);
    CHECK(has(FwdPtx, "wgmma.mma_async.sync.aligned.m64n"));
    codegen::KernelSource Bwd = codegen::generateBackwardSm90(
        Def, Spec, codegen::BwdSm90Config::defaultFor(128, 128));
    std::string BwdPtx = compileToPtx(Bwd);
    INFO("kernel " << Bwd.Key);
    CHECK(has(BwdPtx, ".entry attnc_bwd_dkdv"));
    CHECK(has(BwdPtx, "wgmma.mma_async.sync.aligned.m64n128k16"));
  }
}

} // namespace

TEST_CASE("train defs: mha_alibi is causal softmax plus slope[h]·(k - q)",
          "[traindefs]") {
  std::mt19937_64 Rng(11);
  reference::AttentionInputs In = randomInputs(Rng);
  reference::Tensor Slopes({H});
  Slopes.Data = {0.25, 0.0625};
  In.Inputs["slopes"] = Slopes;
  CompiledDefinition Def = compile(gputest::makeDefinition("mha_alibi"));
  CHECK(Def.Graph->decls().HasMask);
  CHECK_FALSE(Def.Graph->decls().Inputs.at(0).RequiresGrad);
  reference::Tensor Got = reference::attentionDirect(Def, In).O;
  reference::Tensor Want = causalSoftmax(
      In, [&](double Sc, int64_t h, int64_t i, int64_t j) {
        return Sc + Slopes.Data[h] * double(j - i);
      });
  CHECK(maxDiff(Got, Want) < 1e-12);
  // The slopes matter on these inputs: plain causal softmax is far off.
  reference::Tensor Plain =
      causalSoftmax(In, [](double Sc, int64_t, int64_t, int64_t) { return Sc; });
  CHECK(maxDiff(Got, Plain) > 1e-3);
}

TEST_CASE("train defs: mha_softcap30 is causal softmax of 30·tanh(s/30)",
          "[traindefs]") {
  std::mt19937_64 Rng(12);
  reference::AttentionInputs In = randomInputs(Rng);
  CompiledDefinition Def = compile(gputest::makeDefinition("mha_softcap30"));
  CHECK(Def.Graph->decls().HasMask);
  CHECK(Def.Graph->decls().Inputs.empty());
  reference::Tensor Got = reference::attentionDirect(Def, In).O;
  reference::Tensor Want =
      causalSoftmax(In, [](double Sc, int64_t, int64_t, int64_t) {
        return 30.0 * std::tanh(Sc / 30.0);
      });
  CHECK(maxDiff(Got, Want) < 1e-12);
  reference::Tensor Plain =
      causalSoftmax(In, [](double Sc, int64_t, int64_t, int64_t) { return Sc; });
  CHECK(maxDiff(Got, Plain) > 1e-3);
}

TEST_CASE("train defs: attnc check passes mha_alibi", "[traindefs][checker]") {
  checkPasses("mha_alibi");
}
TEST_CASE("train defs: attnc check passes mha_softcap30", "[traindefs][checker]") {
  checkPasses("mha_softcap30");
}
TEST_CASE("train defs: mha_alibi compiles for sm_90a", "[traindefs][nvrtc]") {
  compileSm90("mha_alibi");
}
TEST_CASE("train defs: mha_softcap30 compiles for sm_90a", "[traindefs][nvrtc]") {
  compileSm90("mha_softcap30");
}
