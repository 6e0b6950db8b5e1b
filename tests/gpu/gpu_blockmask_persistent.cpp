// GPU test of fwd_sm90's persistent forward under block masks: its bits
// against the plain kernel's over many tiles a CTA, and its choice from a
// block mask's own visit counts (part of gpu_blockmask_test).
#include "BlockMaskCases.h"

#include "ListVisits.h"

#include "Examples.h"

#include <fmt/format.h>

#include <cstdio>

namespace attn::gputest::blockmask {

/// fwd_sm90's persistent kernel (sm90.m128n128s3p at d64) against the plain
/// one of the same blocks, bit for bit (a tile's arithmetic is the same),
/// over more tiles than the device has SMs, so that each CTA walks several
/// tiles (the ring's and Q's mbarrier phases carried across them), with the
/// call's own classification and with a block mask (the fp64 reference
/// checks of the persistent kernel are gpu_forward_test's, run with
/// ATTNC_FWD_PERSISTENT=1). Skipped where fwd_sm90 does not run.
/// A definition of the persistent cases: a test definition, or
/// mha_empty256, whose rows 0-255 see no key (two whole query blocks of
/// 128 with no key block to visit: tiles the persistent kernel hands over
/// without a Q).
dsl::AttentionDef persistentDefinition(const std::string &Name) {
  if (Name != "mha_empty256")
    return makeDefinition(Name);
  dsl::AttentionDef D = examples::mha();
  D.name = Name;
  D.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                  dsl::SymbolScalar k) { return k + 256 <= q; };
  return D;
}

void runPersistent(const Case &C, uint64_t Seed) {
  if (runtime::currentDevice().Major != 9) {
    std::printf("persistent %s: skipped (not sm_90)\n", C.Def.c_str());
    return;
  }
  dsl::AttentionDef Def = persistentDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.Backend = "generated";
  Sig.Config = "sm90.m128n128s3";
  runtime::Signature SigP = Sig;
  SigP.Config = "sm90.m128n128s3p";
  runtime::Attention Plain(Def, Sig), Persist(Def, SigP);
  Problem P = makeProblem(C, *Plain.definition().Graph, Seed);
  const int64_t Tiles = int64_t((C.S + 127) / 128) * C.B * C.H;
  std::string Name = fmt::format("persistent {} b{} h{}/{} s{} ({} tiles, {} SMs)", C.Def,
                                 C.B, C.H, C.Hkv, C.S, Tiles,
                                 runtime::currentDevice().MultiProcessors);
  auto Want = forwardOnly(Plain, P, nullptr);
  auto Got = forwardOnly(Persist, P, nullptr);
  runtime::MaskShape S;
  S.Batch = C.B;
  S.Heads = C.H;
  S.HeadsKv = C.Hkv;
  S.SeqQ = S.SeqKv = C.S;
  runtime::BlockMask BM = Persist.makeBlockMask(S, P.Inputs, nullptr, false);
  auto GotBM = forwardOnly(Persist, P, &BM);
  // A third call: the counters the calls before left must be back at 0.
  auto Again = forwardOnly(Persist, P, &BM);
  report(Name,
         Got == Want && GotBM == Want && Again == Want &&
             Tiles > runtime::currentDevice().MultiProcessors,
         fmt::format("same bits: classified {}, block mask {}, again {}", Got == Want,
                     GotBM == Want, Again == Want));
}

/// The persistent choice from a block mask's own counts: a document mask
/// reads tensors, so the host's analysis cannot count its visits, and a
/// call without a block mask (16 key blocks a row) takes the plain kernel;
/// once a block mask's counts are back (after a synchronise), the default
/// forward given it takes the persistent one where their mean allows, with
/// the plain kernel's bits. A mask made again forgets the mean until its
/// new counts are back, and then has theirs.
void runPersistentChoice(const Case &C, uint64_t Seed) {
  if (runtime::currentDevice().Major != 9) {
    std::printf("persistent choice %s: skipped (not sm_90)\n", C.Def.c_str());
    return;
  }
  dsl::AttentionDef Def = makeDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.Backend = "generated";
  runtime::Signature SigPlain = Sig;
  SigPlain.Config = "sm90.m128n128s3";
  runtime::Attention A(Def, Sig), Plain(Def, SigPlain);
  Problem P = makeProblem(C, *A.definition().Graph, Seed);
  runtime::MaskShape S;
  S.Batch = C.B;
  S.Heads = C.H;
  S.HeadsKv = C.Hkv;
  S.SeqQ = S.SeqKv = C.S;
  auto &Drv = runtime::CudaDriver::get();
  // The mean of the lists on the device, read back here.
  auto DeviceMean = [&](const runtime::BlockMask &BM) {
    const runtime::BlockMaskData &D = BM.data();
    std::vector<int32_t> Count(size_t(D.Groups) * ((C.S + D.FwdBlockM - 1) / D.FwdBlockM));
    Drv.check(Drv.cuMemcpyDtoH(Count.data(), CUdeviceptr(D.FwdCount), Count.size() * 4),
              "block counts");
    double Sum = 0;
    for (int32_t N : Count)
      Sum += N;
    return Sum / double(Count.size());
  };
  runtime::BlockMask BM = A.makeBlockMask(S, P.Inputs, nullptr, false);
  Drv.check(Drv.cuCtxSynchronize(), "block mask");
  const std::optional<double> Mean = BM.data().FwdVisits.mean();
  const double Want = DeviceMean(BM);
  const int64_t Tiles = int64_t((C.S + 127) / 128) * C.B * C.H;
  const bool Expect = runtime::persistentHeuristic(
      Tiles, Want, (C.S + 127) / 128, runtime::currentDevice().MultiProcessors,
      runtime::PersistentMaxListMeanVisits);
  const auto Ref = forwardOnly(Plain, P, nullptr);
  uint64_t Before = runtime::persistentForwardLaunches();
  const auto GotBM = forwardOnly(A, P, &BM);
  const uint64_t WithMask = runtime::persistentForwardLaunches() - Before;
  Before = runtime::persistentForwardLaunches();
  const auto Got = forwardOnly(A, P, nullptr);
  const uint64_t Without = runtime::persistentForwardLaunches() - Before;
  // Made again for other ids: unknown until its counts are back.
  setInputs(P, *A.definition().Graph, 1);
  A.refreshBlockMask(BM, P.Inputs);
  Drv.check(Drv.cuCtxSynchronize(), "block mask again");
  const std::optional<double> Again = BM.data().FwdVisits.mean();
  const double WantAgain = DeviceMean(BM);
  report(fmt::format("persistent choice {} b{} h{} s{}", C.Def, C.B, C.H, C.S),
         Mean && *Mean == Want && Expect && WithMask == 1 && Without == 0 &&
             GotBM == Ref && Got == Ref && Again && *Again == WantAgain,
         fmt::format("mean {:.3f} (lists {:.3f}, again {:.3f}/{:.3f}), persistent launches "
                     "{} with the mask, {} without, same bits {} {}",
                     Mean.value_or(-1), Want, Again.value_or(-1), WantAgain, WithMask,
                     Without, GotBM == Ref, Got == Ref));
}

} // namespace attn::gputest::blockmask
