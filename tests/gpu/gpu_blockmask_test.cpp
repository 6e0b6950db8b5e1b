// GPU test of reusable block masks (Attention::makeBlockMask,
// blockMaskFromLists): one mask passed to the forward and backward calls of
// two Attention objects (two layers) launches no classification, and their
// results match the fp64 reference and, bit for bit, the calls that
// classify; a mask made again for new document ids follows them; a mask
// given as lists in FlexAttention's layout (other block sizes than the
// kernels') gives the same results; mismatched masks are refused. On
// sm_90, fwd_sm90's persistent kernel gives the plain one's bits over many
// tiles a CTA, taking them from its counters call after call (tiles
// without a key block among them), and is chosen for a document mask from
// a block mask's own visit counts. Without a block mask, the forward and
// the backward build their block lists once per kept key for a mask that
// reads no tensor (alternating keys build once each; a key beyond the
// bound evicts the least recently used).
#include "BlockMaskCases.h"

#include "BackwardRunner.h"
#include "MaskClassify.h"

#include "attn/Error.h"
#include "attn/codegen/Arch.h"

#include <fmt/format.h>

#include <cstdio>
#include <functional>

using namespace attn;
using namespace attn::gputest;
using namespace attn::gputest::blockmask;

namespace {

void runCase(const Case &C, uint64_t Seed) {
  dsl::AttentionDef Def = makeDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.NeedsBackward = true;
  Sig.Backend = "generated";
  // Two layers: two Attention objects of the same definition.
  runtime::Attention A1(Def, Sig), A2(Def, Sig);
  Problem P = makeProblem(C, *A1.definition().Graph, Seed);
  std::string Name = fmt::format("{} b{} h{}/{} s{}", C.Def, C.B, C.H, C.Hkv, C.S);

  auto Classified = run(A1, P, nullptr);
  runtime::MaskShape S;
  S.Batch = C.B;
  S.Heads = C.H;
  S.HeadsKv = C.Hkv;
  S.SeqQ = S.SeqKv = C.S;
  runtime::BlockMask BM = A1.makeBlockMask(S, P.Inputs, nullptr, true);
  const uint64_t Before = runtime::classifyLaunches();
  auto Got1 = run(A1, P, &BM);
  auto Got2 = run(A2, P, &BM);
  const uint64_t Launched = runtime::classifyLaunches() - Before;
  std::string Line;
  bool Pass = checkReference(A1, P, Got2, Line);
  const bool Same = Got1 == Classified && Got2 == Classified;
  report(Name + " reused", Pass && Same && Launched == 0,
         Line + fmt::format(" same bits {} classifications {} [{}]", Same,
                            Launched, BM.describe()));

  // New document ids: a mask made again for them (the old one would be
  // stale: a BlockMask is what it was made from).
  setInputs(P, *A1.definition().Graph, 3);
  runtime::BlockMask BM3 = A2.makeBlockMask(S, P.Inputs, nullptr, true);
  Line.clear();
  Pass = checkReference(A2, P, run(A2, P, &BM3), Line);
  report(Name + " new inputs, new mask", Pass, Line);

  // Given lists, in blocks the kernels do not use (one list per batch).
  const runtime::BlockLists L = listsOf(C, 96, 80, 3);
  runtime::BlockMask Given = A2.blockMaskFromLists(S, L, true);
  const uint64_t Before2 = runtime::classifyLaunches();
  auto GotL = run(A1, P, &Given);
  Line.clear();
  Pass = checkReference(A1, P, GotL, Line);
  report(Name + " given lists 96x80",
         Pass && runtime::classifyLaunches() == Before2,
         Line + " [" + Given.describe() + "]");

  // Refusals.
  runtime::MaskShape Other = S; // the inputs fit: token inputs have no heads
  Other.Heads = 2 * C.H;
  runtime::BlockMask Wrong = A1.makeBlockMask(Other, P.Inputs, nullptr, false);
  refused(Name + " other shape", "block mask: made for [batch",
          [&] { run(A1, P, &Wrong); });
  runtime::BlockMask FwdOnly = A1.makeBlockMask(S, P.Inputs, nullptr, false);
  refused(Name + " forward-only mask in backward",
          "made without the backward's lists", [&] { run(A1, P, &FwdOnly); });
  runtime::Attention Causal(makeDefinition("mha"), Sig);
  const runtime::InputMap None;
  refused(Name + " mask of another definition", "block mask: made for the mask",
          [&] { run(Causal, P, &BM, &None); });
}

/// The block lists without a block mask (ListReuse, kept per stream for up
/// to MaxKeys keys by the forward and the backward): a mask that reads no
/// tensor builds them on the first call and not again while the shapes and
/// scalar inputs repeat; a new prefix length or batch builds them again (a
/// stale list would fail the reference for the prefix, and the count for
/// the batch, whose lists are the same); going back to the first key and
/// alternating between the two builds nothing more (no classification
/// launched, forward or backward) and gives the first calls' bits. A
/// prefix length per kept slot and one more evicts the first key, which
/// then builds again. A mask that reads tensors (document ids) builds them
/// on every call.
void runBackwardReuse(const Case &C, uint64_t Seed) {
  dsl::AttentionDef Def = makeDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.NeedsBackward = true;
  Sig.Backend = "generated";
  runtime::Attention A(Def, Sig);
  const ir::Graph &G = *A.definition().Graph;
  const bool Reusable = !analysis::analyzeMask(G).ReadsTensorInput;
  const bool Prefix = C.Def == "mha_prefix_lm";
  Problem P = makeProblem(C, G, Seed);
  std::string Name = fmt::format("backward lists {} b{} h{}/{} s{}", C.Def, C.B, C.H,
                                 C.Hkv, C.S);
  // Backward list builds and classification launches (forward and
  // backward) of F.
  struct Count {
    uint64_t Builds, Launches;
  };
  auto Builds = [&](const std::function<void()> &F) {
    const uint64_t Before = runtime::backwardListBuilds();
    const uint64_t Launched = runtime::classifyLaunches();
    F();
    return Count{runtime::backwardListBuilds() - Before,
                 runtime::classifyLaunches() - Launched};
  };
  std::vector<std::vector<uint16_t>> First, Again, Other, Back, OtherAgain;
  const Count B1 = Builds([&] { First = run(A, P, nullptr); });
  const Count B2 = Builds([&] { Again = run(A, P, nullptr); });
  std::string Line;
  bool Pass = checkReference(A, P, Again, Line);
  report(Name + " repeated call",
         Pass && Again == First && B1.Builds == 1 &&
             B2.Builds == (Reusable ? 0u : 1u) && (B2.Launches == 0) == Reusable,
         Line + fmt::format(" same bits {} builds {} then {}, classifications "
                            "{} then {}",
                            Again == First, B1.Builds, B2.Builds, B1.Launches,
                            B2.Launches));
  // Another key: a new prefix length, or one more batch.
  Case C2 = C;
  C2.B = C.B + 1;
  Problem P2 = Prefix ? Problem() : makeProblem(C2, G, Seed + 100);
  if (Prefix)
    setScalar(P, "prefix_len", 200);
  Problem &Q = Prefix ? P : P2;
  const Count B3 = Builds([&] { Other = run(A, Q, nullptr); });
  Line.clear();
  Pass = checkReference(A, Q, Other, Line);
  report(Name + (Prefix ? " prefix 64 -> 200" : " batch + 1"),
         Pass && B3.Builds == 1 && B3.Launches > 0,
         Line + fmt::format(" builds {}", B3.Builds));
  // Back and forth: A, B, A, B builds twice in all, not four times.
  if (Prefix)
    setScalar(P, "prefix_len", 64);
  const Count B4 = Builds([&] { Back = run(A, P, nullptr); });
  if (Prefix)
    setScalar(P, "prefix_len", 200);
  const Count B5 = Builds([&] { OtherAgain = run(A, Q, nullptr); });
  Line.clear();
  Pass = checkReference(A, Q, OtherAgain, Line);
  const uint64_t Want = Reusable ? 0 : 1;
  report(Name + " alternating keys",
         Pass && Back == First && OtherAgain == Other && B4.Builds == Want &&
             B5.Builds == Want && (B4.Launches + B5.Launches == 0) == Reusable,
         Line + fmt::format(" same bits {} {} builds {} {} classifications {} {}",
                            Back == First, OtherAgain == Other, B4.Builds,
                            B5.Builds, B4.Launches, B5.Launches));
  if (!Prefix)
    return;
  // A prefix length for every other kept slot, then one more: the first
  // key (64, least recently used) is evicted and builds again, right.
  uint64_t Filled = 0;
  for (unsigned I = 0; I + 1 < runtime::ListReuse::MaxKeys; ++I) {
    setScalar(P, "prefix_len", 300 + 50 * int(I));
    Filled += Builds([&] { run(A, P, nullptr); }).Builds;
  }
  setScalar(P, "prefix_len", 64);
  const Count B6 = Builds([&] { Back = run(A, P, nullptr); });
  Line.clear();
  Pass = checkReference(A, P, Back, Line);
  report(Name + " evicted key builds again",
         Pass && Back == First && Filled == runtime::ListReuse::MaxKeys - 1 &&
             B6.Builds == 1 && B6.Launches > 0,
         Line + fmt::format(" fills {} builds {} classifications {}", Filled,
                            B6.Builds, B6.Launches));
}

} // namespace

/// --precompile ARCH: the kernels the cases use, compiled for \p Arch into
/// the kernel cache without a GPU (the forwards and backwards of the
/// definitions, the persistent forwards and their plain twins), so that a
/// device run reads them instead of compiling one after another.
int precompile(GpuArch Arch) {
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.NeedsBackward = true;
  Sig.Backend = "generated";
  Sig.Arch = Arch;
  for (const char *Name : {"mha_document_ids", "mha_prefix_lm", "mha_window", "mha"}) {
    runtime::Attention A(makeDefinition(Name), Sig);
    runtime::BackwardRunner B(
        A.definition(),
        runtime::kernelTarget(A.definition(), Sig, Arch, runtime::Direction::Backward),
        A.backwardChoice());
    std::printf("compiled %s: %s | %s\n", Name, A.forwardChoice().str().c_str(),
                A.backwardChoice().str().c_str());
  }
  if (Arch != GpuArch::Sm90a)
    return 0;
  runtime::Signature Fwd = Sig;
  Fwd.NeedsBackward = false;
  for (const char *Name : {"mha_document_ids", "mha_prefix_lm", "mha_window", "mha_empty256"})
    for (const char *Cfg : {"sm90.m128n128s3", "sm90.m128n128s3p"}) {
      Fwd.Config = Cfg;
      runtime::Attention A(persistentDefinition(Name), Fwd);
      std::printf("compiled %s: %s\n", Name, A.forwardChoice().str().c_str());
    }
  return 0;
}

int main(int Argc, char **Argv) {
  if (Argc == 3 && std::string(Argv[1]) == "--precompile")
    return precompile(parseArch(Argv[2]));
  if (Argc != 1) {
    std::fprintf(stderr, "usage: gpu_blockmask_test [--precompile ARCH]\n");
    return 2;
  }
  auto &Drv = runtime::CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  std::printf("device: %s\n", runtime::currentDevice().Name.c_str());
  const Case Cases[] = {{"mha_document_ids", 2, 4, 2, 700},
                        {"mha_prefix_lm", 1, 2, 2, 333},
                        {"mha_window", 2, 2, 1, 777}};
  uint64_t Seed = 5;
  // Each case with the next seed; a throw is a failure, printed with the
  // group's label, and the next case runs.
  auto RunAll = [&](const char *Label, const auto &Group,
                    void (*Run)(const Case &, uint64_t)) {
    for (const Case &C : Group) {
      try {
        Run(C, Seed++);
      } catch (const std::exception &E) {
        std::printf("%s%s ERROR %s\n", Label, C.Def.c_str(), E.what());
        ++Failed;
      }
    }
  };
  RunAll("", Cases, runCase);
  const Case Lists[] = {{"mha_prefix_lm", 1, 4, 2, 1000},
                        {"mha_window", 1, 2, 1, 1500},
                        {"mha_document_ids", 2, 2, 2, 600}};
  RunAll("backward lists ", Lists, runBackwardReuse);
  const Case Many[] = {{"mha_document_ids", 4, 32, 8, 600},
                       {"mha_prefix_lm", 2, 64, 64, 1000},
                       {"mha_window", 8, 16, 4, 512},
                       {"mha_empty256", 4, 32, 32, 700}};
  RunAll("persistent ", Many, runPersistent);
  const Case Choice[] = {{"mha_document_ids", 2, 32, 32, 2048}};
  RunAll("persistent choice ", Choice, runPersistentChoice);
  std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}

