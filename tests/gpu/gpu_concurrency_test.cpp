// GPU test of concurrent use: one Attention object called from several host
// threads at once, each on its own stream with its own problem (masked
// forward + backward, and a split-KV decode), repeatedly. Every result must
// equal, bit for bit, the same call made alone beforehand, must be finite
// (outputs are poisoned first), and the forward must match the fp64
// reference. Calls on different streams share no scratch (per-stream
// workspaces), so a workspace shared between streams shows up here as a
// mismatch. Then contexts: an object keeps to the context of its first
// call and refuses a call made in another.
//
// The outputs (o, lse, dq, dk, dv) are poisoned on the thread's own stream:
// the legacy stream's cuMemsetD8 is asynchronous and not ordered with a
// non-blocking stream, so a poison made there could land after the calls
// it should precede (it did, 1-2 rounds of 6 under other GPU load).
// A mismatch names the tensor, how many values differ, how many of those
// are the poison, and the largest difference.
//
// Stress runs (the environment):
//   ATTNC_CONC_ROUNDS=N     rounds each thread makes together (default 6)
//   ATTNC_CONC_THREADS=N    threads, 1 to 8 (default 4)
//   ATTNC_CONC_CALLS=fwd|bwd|both   what a round of the masked case calls
//                           (bwd: the backward alone, on the lone run's o
//                           and lse; default both)
//   ATTNC_CONC_LEGACY_POISON=1  poison with cuMemsetD8 on the legacy stream
//                           as this test once did (the race, to show it)
#include "DriverExtras.h"
#include "GpuSupport.h"
#include "TestDefinitions.h"

#include "attn/reference/Attention.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

using namespace attn;
using namespace attn::gputest;
using reference::Tensor;

namespace {

constexpr int D = 64;

/// $Name as an integer in [Lo, Hi], else \p Default.
int envInt(const char *Name, int Default, int Lo, int Hi) {
  const char *E = std::getenv(Name);
  if (!E || !*E)
    return Default;
  return std::clamp(std::atoi(E), Lo, Hi);
}

const int Threads = envInt("ATTNC_CONC_THREADS", 4, 1, 8);
const int Rounds = envInt("ATTNC_CONC_ROUNDS", 6, 1, 100000);
const bool LegacyPoison = envInt("ATTNC_CONC_LEGACY_POISON", 0, 0, 1) == 1;

/// What a round of a backward case calls.
enum class Calls { Both, ForwardOnly, BackwardOnly };
Calls roundCalls() {
  const char *E = std::getenv("ATTNC_CONC_CALLS");
  if (E && !std::strcmp(E, "fwd"))
    return Calls::ForwardOnly;
  if (E && !std::strcmp(E, "bwd"))
    return Calls::BackwardOnly;
  return Calls::Both;
}

/// One thread's problem: its tensors [B,S,H,D] (BSHD) on the host and the
/// device, and the results it must reproduce.
struct Work {
  int B = 1, H = 1, Hkv = 1, Sq = 1, Skv = 1;
  bool Backward = false;
  std::vector<uint16_t> Q, K, V, DO;
  reference::AttentionInputs Ref;
  std::unique_ptr<DeviceBuffer> DQ, DK, DV, DDO, O, F, GQ, GK, GV;
  std::vector<std::vector<uint16_t>> Expected;
};

std::vector<uint16_t> randomBits(std::mt19937_64 &Rng, int B, int H, int S,
                                 Tensor *Ref) {
  std::normal_distribution<double> N(0.0, 1.0);
  std::vector<uint16_t> Bits(size_t(B) * S * H * D);
  if (Ref)
    *Ref = Tensor({B, H, S, D});
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          uint16_t X = toBits(DType::F16, N(Rng));
          Bits[((size_t(b) * S + s) * H + h) * D + d] = X;
          if (Ref)
            Ref->at({b, h, s, d}) = fromBits(DType::F16, X);
        }
  return Bits;
}

Work makeWork(int B, int H, int Hkv, int Sq, int Skv, bool Backward,
              uint64_t Seed) {
  Work W;
  W.B = B;
  W.H = H;
  W.Hkv = Hkv;
  W.Sq = Sq;
  W.Skv = Skv;
  W.Backward = Backward;
  std::mt19937_64 Rng(Seed);
  W.Q = randomBits(Rng, B, H, Sq, &W.Ref.Q);
  W.K = randomBits(Rng, B, Hkv, Skv, &W.Ref.K);
  W.V = randomBits(Rng, B, Hkv, Skv, &W.Ref.V);
  W.DO = randomBits(Rng, B, H, Sq, nullptr);
  // upload() returns once the data is on the device, so the lone run on a
  // non-blocking stream reads these inputs and not what was there before.
  W.DQ = upload(W.Q);
  W.DK = upload(W.K);
  W.DV = upload(W.V);
  W.DDO = upload(W.DO);
  W.O = std::make_unique<DeviceBuffer>(W.Q.size() * 2);
  W.F = std::make_unique<DeviceBuffer>(size_t(B) * H * Sq * 4);
  W.GQ = std::make_unique<DeviceBuffer>(W.Q.size() * 2);
  W.GK = std::make_unique<DeviceBuffer>(W.K.size() * 2);
  W.GV = std::make_unique<DeviceBuffer>(W.V.size() * 2);
  return W;
}

/// The names of runOnce's results, in order: o, lse, then dq, dk, dv.
const char *const OutNames[] = {"o", "lse", "dq", "dk", "dv"};

/// Poisons the outputs of what \p C calls, enqueues \p W's forward and/or
/// backward on \p S, waits for the stream, and returns o and lse (and dq,
/// dk, dv) as 16-bit words. The backward alone reads o and lse as the last
/// forward left them.
std::vector<std::vector<uint16_t>> runOnce(runtime::Attention &A, Work &W,
                                           CUstream S, Calls C = Calls::Both) {
  auto View = [&](DeviceBuffer &Buf, int H, int Seq) {
    return runtime::TensorView::contiguous(Buf.get(), DType::F16,
                                           {W.B, Seq, H, D});
  };
  const bool Fwd = !W.Backward || C != Calls::BackwardOnly;
  const bool Bwd = W.Backward && C != Calls::ForwardOnly;
  std::vector<DeviceBuffer *> Outs = {W.O.get(), W.F.get()};
  if (W.Backward)
    Outs.insert(Outs.end(), {W.GQ.get(), W.GK.get(), W.GV.get()});
  for (size_t I = 0; I < Outs.size(); ++I) {
    if (I < 2 ? !Fwd : !Bwd)
      continue; // read, not written: the backward alone keeps o and lse
    if (LegacyPoison) {
      auto &Drv = runtime::CudaDriver::get();
      Drv.check(Drv.cuMemsetD8(CUdeviceptr(Outs[I]->get()), 0xff,
                               Outs[I]->size()),
                "cuMemsetD8 (legacy poison)");
    } else {
      Outs[I]->poisonOn(S);
    }
  }
  runtime::TensorView Fin = runtime::TensorView::contiguous(
      W.F->get(), DType::F32, {1, W.B, W.H, W.Sq});
  runtime::TensorView O = View(*W.O, W.H, W.Sq);
  if (Fwd)
    A.forward(View(*W.DQ, W.H, W.Sq), View(*W.DK, W.Hkv, W.Skv),
              View(*W.DV, W.Hkv, W.Skv), O, &Fin, {}, S);
  if (Bwd)
    A.backward(View(*W.DQ, W.H, W.Sq), View(*W.DK, W.Hkv, W.Skv),
               View(*W.DV, W.Hkv, W.Skv), &O, View(*W.DDO, W.H, W.Sq), &Fin,
               View(*W.GQ, W.H, W.Sq), View(*W.GK, W.Hkv, W.Skv),
               View(*W.GV, W.Hkv, W.Skv), {}, {}, S);
  auto &Drv = runtime::CudaDriver::get();
  Drv.check(Drv.cuStreamSynchronize(S), "the thread's calls");
  std::vector<std::vector<uint16_t>> Got;
  for (DeviceBuffer *Buf : Outs) {
    Got.emplace_back(Buf->size() / 2);
    Buf->download(Got.back().data(), Buf->size());
  }
  return Got;
}

/// Where \p Got differs from \p Want: per tensor, how many values differ,
/// how many of them still hold the poison, and the largest difference of
/// the others ("" when equal).
std::string differences(const std::vector<std::vector<uint16_t>> &Got,
                        const std::vector<std::vector<uint16_t>> &Want) {
  std::string Text;
  for (size_t T = 0; T < Got.size() && T < Want.size(); ++T) {
    const bool F32 = T == 1; // lse
    const size_t Step = F32 ? 2 : 1;
    size_t Differ = 0, Poison = 0, N = Got[T].size() / Step;
    double Max = 0;
    for (size_t I = 0; I < N; ++I) {
      double G, Wv;
      bool Poisoned;
      if (F32) {
        uint32_t GB, WB;
        std::memcpy(&GB, &Got[T][2 * I], 4);
        std::memcpy(&WB, &Want[T][2 * I], 4);
        if (GB == WB)
          continue;
        float GF, WF;
        std::memcpy(&GF, &GB, 4);
        std::memcpy(&WF, &WB, 4);
        G = GF;
        Wv = WF;
        Poisoned = GB == 0xffffffffu;
      } else {
        if (Got[T][I] == Want[T][I])
          continue;
        G = fromBits(DType::F16, Got[T][I]);
        Wv = fromBits(DType::F16, Want[T][I]);
        Poisoned = Got[T][I] == 0xffff;
      }
      ++Differ;
      if (Poisoned)
        ++Poison;
      else
        Max = std::max(Max, std::isfinite(G) ? std::fabs(G - Wv) : INFINITY);
    }
    if (Differ)
      Text += fmt::format("{}{} {}/{} differ ({} poison, max |d| {:.2e})",
                          Text.empty() ? "" : "; ", OutNames[T], Differ, N,
                          Poison, Max);
  }
  return Text;
}

/// Whether every value of \p Got is finite (the poison is NaN).
bool finite(const std::vector<std::vector<uint16_t>> &Got) {
  for (size_t T = 0; T < Got.size(); ++T) {
    if (T == 1) { // lse, fp32
      for (size_t I = 0; I + 1 < Got[T].size(); I += 2) {
        float F;
        std::memcpy(&F, &Got[T][I], 4);
        if (!std::isfinite(F))
          return false;
      }
      continue;
    }
    for (uint16_t X : Got[T])
      if (!std::isfinite(fromBits(DType::F16, X)))
        return false;
  }
  return true;
}

/// o of \p W against the fp64 reference, by the GPU tests' rule: error at
/// most twice a plain fp16 computation's, plus 1e-3.
bool forwardMatchesReference(const CompiledDefinition &Def, const Work &W,
                             const std::vector<uint16_t> &O,
                             std::string &Line) {
  reference::AttentionInputs In = W.Ref;
  reference::AttentionOutputs Exact = reference::attentionOnline(Def, In, 0);
  In.RoundProbs = [](double X) { return roundTo(DType::F16, X); };
  reference::AttentionOutputs Plain = reference::attentionOnline(Def, In, 0);
  double Err = 0, PlainErr = 0;
  for (int b = 0; b < W.B; ++b)
    for (int s = 0; s < W.Sq; ++s)
      for (int h = 0; h < W.H; ++h)
        for (int d = 0; d < D; ++d) {
          double Want = Exact.O.at({b, h, s, d});
          double Got =
              fromBits(DType::F16, O[((size_t(b) * W.Sq + s) * W.H + h) * D + d]);
          Err = std::max(Err, std::isfinite(Got) ? std::fabs(Got - Want)
                                                 : INFINITY);
          PlainErr = std::max(
              PlainErr,
              std::fabs(roundTo(DType::F16, Plain.O.at({b, h, s, d})) - Want));
        }
  double Tol = 2 * PlainErr + 1e-3;
  Line += fmt::format(" o {:.1e}/{:.1e}", Err, Tol);
  return Err <= Tol;
}

int Passed = 0, Failed = 0;

void report(const std::string &Name, bool Pass, const std::string &Line) {
  std::printf("%-58s %s  %s\n", Name.c_str(), Line.c_str(),
              Pass ? "pass" : "FAIL");
  std::fflush(stdout);
  (Pass ? Passed : Failed)++;
}

/// \p Threads threads, each with its own stream and problem \p Works[t],
/// run \p Rounds rounds of their calls on one object \p A at once.
void runConcurrently(const std::string &Name, runtime::Attention &A,
                     std::vector<Work> &Works) {
  // Alone first: the results each thread must reproduce.
  std::vector<std::unique_ptr<Stream>> Streams;
  for (Work &W : Works) {
    Streams.push_back(std::make_unique<Stream>());
    W.Expected = runOnce(A, W, Streams.back()->get());
  }
  for (size_t T = 0; T < Works.size(); ++T) {
    std::string Line;
    bool Pass = finite(Works[T].Expected) &&
                forwardMatchesReference(A.definition(), Works[T],
                                        Works[T].Expected[0], Line);
    const Work &W = Works[T];
    report(fmt::format("{} alone, thread {} (b{} h{}/{} sq{} skv{})", Name, T,
                       W.B, W.H, W.Hkv, W.Sq, W.Skv),
           Pass, Line);
  }
  // Then together: every thread starts at once and calls Rounds times.
  const Calls C = roundCalls();
  std::atomic<int> Ready{0};
  std::vector<int> Mismatches(Works.size(), 0);
  std::vector<std::string> Errors(Works.size()), FirstDiffs(Works.size());
  std::vector<std::thread> Pool;
  for (size_t T = 0; T < Works.size(); ++T)
    Pool.emplace_back([&, T] {
      try {
        // The thread's first CUDA call is attnc's: it must make the context
        // current itself (the test's own poisoning and copies then find it).
        Work &W = Works[T];
        auto View = [&](DeviceBuffer &Buf, int H, int Seq) {
          return runtime::TensorView::contiguous(
              Buf.get(), DType::F16, {W.B, Seq, H, D});
        };
        runtime::TensorView Fin = runtime::TensorView::contiguous(
            W.F->get(), DType::F32, {1, W.B, W.H, W.Sq});
        A.forward(View(*W.DQ, W.H, W.Sq), View(*W.DK, W.Hkv, W.Skv),
                  View(*W.DV, W.Hkv, W.Skv), View(*W.O, W.H, W.Sq), &Fin, {},
                  Streams[T]->get());
        ++Ready;
        while (Ready.load() < int(Works.size()))
          std::this_thread::yield();
        for (int R = 0; R < Rounds; ++R) {
          std::vector<std::vector<uint16_t>> Got =
              runOnce(A, W, Streams[T]->get(), C);
          if (Got == W.Expected)
            continue;
          // The first three rounds that differ say where.
          if (++Mismatches[T] <= 3)
            FirstDiffs[T] += fmt::format("\n    round {}: {}", R,
                                         differences(Got, W.Expected));
        }
      } catch (const std::exception &E) {
        Errors[T] = E.what();
      }
    });
  for (std::thread &T : Pool)
    T.join();
  const char *CallText = C == Calls::ForwardOnly    ? " (forward only)"
                         : C == Calls::BackwardOnly ? " (backward only)"
                                                    : "";
  for (size_t T = 0; T < Works.size(); ++T)
    report(fmt::format("{} together{}, thread {}", Name,
                       Works[T].Backward ? CallText : "", T),
           Errors[T].empty() && Mismatches[T] == 0,
           Errors[T].empty()
               ? fmt::format("{} of {} rounds differ{}", Mismatches[T], Rounds,
                             FirstDiffs[T])
               : "error: " + Errors[T]);
}

/// A second context on the device, as a program that makes its own would
/// have: an Attention first called in the primary context refuses a call
/// made there (before launching anything), and one made and called there
/// runs it, with the primary context's results bit for bit.
void otherContext(const runtime::Signature &Sig) {
  auto &Drv = runtime::CudaDriver::get();
  const DriverExtras &X = DriverExtras::get();
  runtime::Attention A(makeDefinition("mha_full"), Sig);
  Work W = makeWork(1, 4, 2, 200, 200, /*Backward=*/false, 31);
  std::vector<std::vector<uint16_t>> Want = runOnce(A, W, nullptr);

  CUdevice Dev = 0;
  Drv.check(Drv.cuCtxGetDevice(&Dev), "cuCtxGetDevice");
  CUcontext Other = nullptr;
  Drv.check(X.cuCtxCreate(&Other, nullptr, 0, Dev), "cuCtxCreate"); // current
  std::string Refusal;
  try {
    auto View = [&](DeviceBuffer &Buf, int H) {
      return runtime::TensorView::contiguous(Buf.get(), DType::F16,
                                             {W.B, W.Sq, H, D});
    };
    runtime::TensorView Fin = runtime::TensorView::contiguous(
        W.F->get(), DType::F32, {1, W.B, W.H, W.Sq});
    A.forward(View(*W.DQ, W.H), View(*W.DK, W.Hkv), View(*W.DV, W.Hkv),
              View(*W.O, W.H), &Fin, {}, nullptr);
  } catch (const InvalidArgument &E) {
    Refusal = E.what();
  }
  report("a call in another context than the first call's is refused",
         Refusal.find("another context of device") != std::string::npos,
         "\"" + Refusal + "\"");
  {
    runtime::Attention B(makeDefinition("mha_full"), Sig);
    Work W2 = makeWork(1, 4, 2, 200, 200, /*Backward=*/false, 31);
    std::vector<std::vector<uint16_t>> Got = runOnce(B, W2, nullptr);
    report("an Attention made and called in the other context runs there",
           Got == Want && finite(Got), Got == Want ? "same bits" : "differs");
  }
  CUcontext Popped = nullptr;
  Drv.check(X.cuCtxPopCurrent(&Popped), "cuCtxPopCurrent");
  Drv.check(X.cuCtxDestroy(Other), "cuCtxDestroy");
  // Back in the primary context, the first object runs again.
  report("the first Attention runs again in its own context",
         runOnce(A, W, nullptr) == Want, "");
}

runtime::Signature signature(bool Backward) {
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = D;
  Sig.NeedsBackward = Backward;
  Sig.Backend = "generated";
  return Sig;
}

} // namespace

/// --precompile ARCH: the kernels the cases use, compiled for \p Arch into
/// the kernel cache without a GPU, so that a device run reads them.
int precompile(GpuArch Arch) {
  runtime::PrecompileSet What;
  What.Backward = true;
  for (const char *Name : {"mha_window", "mha_full"}) {
    runtime::Signature Sig = signature(true);
    Sig.Arch = Arch;
    for (const runtime::PrecompiledKernel &K :
         runtime::precompileAttention(makeDefinition(Name), Sig, What, {Arch}))
      std::printf("%s: %s (%s)\n", Name, K.Source.Key.c_str(), K.From.c_str());
  }
  return 0;
}

int main(int Argc, char **Argv) {
  if (Argc == 3 && std::string(Argv[1]) == "--precompile")
    return precompile(parseArch(Argv[2]));
  if (Argc != 1) {
    std::fprintf(stderr, "usage: gpu_concurrency_test [--precompile ARCH]\n");
    return 2;
  }
  try {
    if (!announceDevice())
      return 77;
    std::printf("%d threads, %d rounds together%s\n", Threads, Rounds,
                LegacyPoison ? ", outputs poisoned on the legacy stream" : "");
    // A masked definition: the forward's block lists and the backward's
    // workspaces are the per-call scratch that streams must not share.
    // Lengths differ per thread so that workspaces differ in size too.
    {
      runtime::Attention A(makeDefinition("mha_window"), signature(true));
      std::vector<Work> Works;
      for (int T = 0; T < Threads; ++T)
        Works.push_back(makeWork(1 + T % 2, 4, 2, 256 + 96 * T, 256 + 96 * T,
                                 /*Backward=*/true, 1000 + T));
      runConcurrently("mha_window fwd+bwd", A, Works);
    }
    // One query a sequence over many keys: decode, split over the keys,
    // whose partial results are per-call scratch too.
    {
      runtime::Attention A(makeDefinition("mha_full"), signature(false));
      std::vector<Work> Works;
      for (int T = 0; T < Threads; ++T)
        Works.push_back(makeWork(1, 8, 2, 1, 3000 + 512 * T,
                                 /*Backward=*/false, 2000 + T));
      runConcurrently("mha decode (split keys)", A, Works);
    }
    otherContext(signature(false));
  } catch (const std::exception &E) {
    std::printf("error: %s\n", E.what());
    return 1;
  }
  std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}
