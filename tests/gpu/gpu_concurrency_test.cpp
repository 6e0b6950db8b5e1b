// GPU test of concurrent use: one Attention object called from several host
// threads at once, each on its own stream with its own problem (masked
// forward + backward, and a split-KV decode), repeatedly. Every result must
// equal, bit for bit, the same call made alone beforehand, must be finite
// (outputs are poisoned first), and the forward must match the fp64
// reference. Calls on different streams share no scratch (per-stream
// workspaces), so a workspace shared between streams shows up here as a
// mismatch. Then contexts: an object keeps to the context of its first
// call and refuses a call made in another.
#include "DriverExtras.h"
#include "GpuSupport.h"
#include "TestDefinitions.h"

#include "attn/reference/Attention.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

using namespace attn;
using namespace attn::gputest;
using reference::Tensor;

namespace {

constexpr int D = 64;
constexpr int Threads = 4;
constexpr int Rounds = 6;

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

/// Poisons \p W's outputs, enqueues its forward (and backward) on \p S,
/// waits for the stream, and returns o (dq, dk, dv).
std::vector<std::vector<uint16_t>> runOnce(runtime::Attention &A, Work &W,
                                           CUstream S) {
  auto View = [&](DeviceBuffer &Buf, int H, int Seq) {
    return runtime::TensorView::contiguous(Buf.get(), runtime::ElemType::F16,
                                           {W.B, Seq, H, D});
  };
  std::vector<DeviceBuffer *> Outs = {W.O.get()};
  if (W.Backward)
    Outs.insert(Outs.end(), {W.GQ.get(), W.GK.get(), W.GV.get()});
  for (DeviceBuffer *Buf : Outs)
    Buf->poison();
  runtime::TensorView Fin = runtime::TensorView::contiguous(
      W.F->get(), runtime::ElemType::F32, {1, W.B, W.H, W.Sq});
  runtime::TensorView O = View(*W.O, W.H, W.Sq);
  A.forward(View(*W.DQ, W.H, W.Sq), View(*W.DK, W.Hkv, W.Skv),
            View(*W.DV, W.Hkv, W.Skv), O, &Fin, {}, S);
  if (W.Backward)
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

/// Whether every value of \p Got is finite (the poison is NaN).
bool finite(const std::vector<std::vector<uint16_t>> &Got) {
  for (const std::vector<uint16_t> &T : Got)
    for (uint16_t X : T)
      if (!std::isfinite(fromBits(DType::F16, X)))
        return false;
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
  std::atomic<int> Ready{0};
  std::vector<int> Mismatches(Works.size(), 0);
  std::vector<std::string> Errors(Works.size());
  std::vector<std::thread> Pool;
  for (size_t T = 0; T < Works.size(); ++T)
    Pool.emplace_back([&, T] {
      try {
        // The thread's first CUDA call is attnc's: it must make the context
        // current itself (the test's own poisoning and copies then find it).
        Work &W = Works[T];
        auto View = [&](DeviceBuffer &Buf, int H, int Seq) {
          return runtime::TensorView::contiguous(
              Buf.get(), runtime::ElemType::F16, {W.B, Seq, H, D});
        };
        runtime::TensorView Fin = runtime::TensorView::contiguous(
            W.F->get(), runtime::ElemType::F32, {1, W.B, W.H, W.Sq});
        A.forward(View(*W.DQ, W.H, W.Sq), View(*W.DK, W.Hkv, W.Skv),
                  View(*W.DV, W.Hkv, W.Skv), View(*W.O, W.H, W.Sq), &Fin, {},
                  Streams[T]->get());
        ++Ready;
        while (Ready.load() < int(Works.size()))
          std::this_thread::yield();
        for (int R = 0; R < Rounds; ++R)
          if (runOnce(A, Works[T], Streams[T]->get()) != Works[T].Expected)
            ++Mismatches[T];
      } catch (const std::exception &E) {
        Errors[T] = E.what();
      }
    });
  for (std::thread &T : Pool)
    T.join();
  for (size_t T = 0; T < Works.size(); ++T)
    report(fmt::format("{} together, thread {}", Name, T),
           Errors[T].empty() && Mismatches[T] == 0,
           Errors[T].empty()
               ? fmt::format("{} of {} rounds differ", Mismatches[T], Rounds)
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
      return runtime::TensorView::contiguous(Buf.get(), runtime::ElemType::F16,
                                             {W.B, W.Sq, H, D});
    };
    runtime::TensorView Fin = runtime::TensorView::contiguous(
        W.F->get(), runtime::ElemType::F32, {1, W.B, W.H, W.Sq});
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

int main() {
  try {
    if (!announceDevice())
      return 77;
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
