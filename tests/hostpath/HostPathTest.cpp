//===- HostPathTest.cpp - a call's driver work, counted on the null driver -===//
//
// What a call asks of the driver once its kernels are loaded: launches, and
// nothing that allocates, copies synchronously, loads a module or waits.
// The serving path promises it (Attention::runDecode: "no decision, device
// allocation or synchronisation", the CUDA-graph contract of
// docs/runtime.md), and every call's host time depends on it. The tests run
// on the null driver (null_cuda.c, loaded in place of libcuda.so.1 through
// LD_LIBRARY_PATH), which counts every entry point's calls and does
// nothing, so no GPU is needed; they print attnc's own host time a call,
// which is all a call costs on that driver.
#include "TestDefinitions.h"

#include "attn/runtime/Attention.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/LinearAttention.h"
#include "attn/runtime/Paged.h"
#include "attn/runtime/RandomProblem.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <string>

using namespace attn;
using runtime::TensorView;

namespace {

/// The null driver's counters, looked up in the libcuda.so.1 that
/// CudaDriver loaded. Fails the test where that is another driver.
class NullDriver {
public:
  NullDriver() {
    runtime::CudaDriver::get().require();
    void *Lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(Lib != nullptr);
    Calls = reinterpret_cast<CallsFn>(dlsym(Lib, "attnc_null_calls"));
    Reset = reinterpret_cast<ResetFn>(dlsym(Lib, "attnc_null_reset"));
    Report = reinterpret_cast<ReportFn>(dlsym(Lib, "attnc_null_report"));
    INFO("libcuda.so.1 is not the null driver (run with LD_LIBRARY_PATH at "
         "tests/hostpath's driver folder)");
    REQUIRE((Calls && Reset && Report));
  }

  /// \p N calls of \p Call after one untimed call (which may load kernels
  /// and size workspaces): checks that every call launches \p Launches
  /// kernels and uses no entry point outside \p Allowed, and returns the
  /// host microseconds a call.
  template <class Fn>
  double expectLaunchesOnly(Fn &&Call, int Launches,
                            std::initializer_list<const char *> Allowed = {}) {
    constexpr int N = 200;
    Call();
    Reset();
    runtime::WallTimer T;
    for (int I = 0; I < N; ++I)
      Call();
    const double Us = T.seconds() * 1e6 / N;
    char Buf[1024];
    Report(Buf, sizeof Buf);
    INFO("driver calls of " << N << " calls: " << Buf);
    const unsigned long long Launched =
        Calls("cuLaunchKernel") + Calls("cuLaunchKernelEx");
    CHECK(Launched == static_cast<unsigned long long>(Launches) * N);
    unsigned long long Others = Calls("") - Launched - Calls("cuCtxGetCurrent");
    for (const char *Name : Allowed)
      Others -= Calls(Name);
    CHECK(Others == 0);
    return Us;
  }

private:
  using CallsFn = unsigned long long (*)(const char *);
  using ResetFn = void (*)();
  using ReportFn = void (*)(char *, size_t);
  CallsFn Calls = nullptr;
  ResetFn Reset = nullptr;
  ReportFn Report = nullptr;
};

runtime::Signature f16Signature() {
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 128;
  Sig.TensorLayout = Layout::BSHD;
  return Sig;
}

/// q, k, v, out and finals of a call [B, Sq / Skv, H / Hkv, 128] in f16
/// (addresses of the null driver: never touched).
struct Buffers {
  int64_t B, Sq, Skv, H, Hkv;
  runtime::DeviceAlloc Q, K, V, Out, Finals;
  Buffers(int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t Hkv)
      : B(B), Sq(Sq), Skv(Skv), H(H), Hkv(Hkv), Q(bytes(Sq, H)), K(bytes(Skv, Hkv)),
        V(bytes(Skv, Hkv)), Out(bytes(Sq, H)), Finals(size_t(B * H * Sq) * 4) {}
  size_t bytes(int64_t S, int64_t Heads) const { return size_t(B * S * Heads) * 128 * 2; }
  TensorView q() const { return TensorView::contiguous(Q.get(), DType::F16, {B, Sq, H, 128}); }
  TensorView k() const { return TensorView::contiguous(K.get(), DType::F16, {B, Skv, Hkv, 128}); }
  TensorView v() const { return TensorView::contiguous(V.get(), DType::F16, {B, Skv, Hkv, 128}); }
  TensorView out() const { return TensorView::contiguous(Out.get(), DType::F16, {B, Sq, H, 128}); }
  TensorView finals() const {
    return TensorView::contiguous(Finals.get(), DType::F32, {1, B, H, Sq});
  }
};

} // namespace

TEST_CASE("a decode forward with a key split launches its two kernels and "
          "does nothing else on the driver") {
  NullDriver Null;
  runtime::Attention Att(gputest::makeDefinition("mha_full"), f16Signature());
  Buffers Bf(1, 1, 8192, 32, 8); // 8192 keys at batch 1: split, then merged
  TensorView F = Bf.finals();
  const double Us = Null.expectLaunchesOnly(
      [&] { Att.forward(Bf.q(), Bf.k(), Bf.v(), Bf.out(), &F); }, 2);
  std::printf("host path: decode forward B1 KV8192 %.2f us a call\n", Us);
}

TEST_CASE("a planned paged decode launches its two kernels and does nothing "
          "else on the driver") {
  NullDriver Null;
  runtime::Attention Att(gputest::makeDefinition("mha_full"), f16Signature());
  Buffers Bf(1, 1, 8192, 32, 8);
  runtime::DecodePlan Plan = Att.planDecode(runtime::DecodeBounds{1, 32, 8, 1, 8192, 16});
  REQUIRE(Plan.Splits > 1);
  runtime::DeviceAlloc Work(std::max<size_t>(16, Plan.WorkspaceBytes));
  runtime::ShuffledPages Pages(1, 8192, 16);
  runtime::PagedKV Kv = Pages.view(Bf.k(), Bf.v());
  TensorView F = Bf.finals();
  const double Us = Null.expectLaunchesOnly(
      [&] {
        Att.runDecode(Plan, Bf.q(), Kv, Bf.out(), &F, Work.get(), Work.size());
      },
      2);
  std::printf("host path: paged decode B1 KV8192 (pages of 16) %.2f us a call\n", Us);
}

TEST_CASE("an unmasked prefill forward launches one kernel and does nothing "
          "else on the driver but encode its tensor maps") {
  NullDriver Null;
  runtime::Attention Att(gputest::makeDefinition("mha_full"), f16Signature());
  Buffers Bf(2, 1024, 1024, 8, 8);
  TensorView F = Bf.finals();
  // fwd_sm90 encodes its q, k and v TMA descriptors for each call's
  // pointers: arithmetic on the host, no device work.
  const double Us = Null.expectLaunchesOnly(
      [&] { Att.forward(Bf.q(), Bf.k(), Bf.v(), Bf.out(), &F); }, 1,
      {"cuTensorMapEncodeTiled"});
  std::printf("host path: forward B2 H8 S1024 %.2f us a call\n", Us);
}

TEST_CASE("a packed causal forward launches and does nothing else on the "
          "driver but encode its tensor maps") {
  NullDriver Null;
  runtime::Signature Sig = f16Signature();
  Sig.TensorLayout = Layout::THD;
  runtime::Attention Att(gputest::makeDefinition("mha"), Sig);
  const int64_t T = 4096, H = 8;
  runtime::DeviceAlloc Q(size_t(T * H) * 128 * 2), K(size_t(T * H) * 128 * 2),
      V(size_t(T * H) * 128 * 2), Out(size_t(T * H) * 128 * 2), Fin(size_t(T * H) * 4),
      Cu(5 * 4);
  auto View = [&](const runtime::DeviceAlloc &A) {
    return TensorView::contiguous(A.get(), DType::F16, {T, H, 128});
  };
  TensorView F = TensorView::contiguous(Fin.get(), DType::F32, {1, H, T});
  TensorView CuV = TensorView::contiguous(Cu.get(), DType::I32, {5});
  // Four sequences of at most 2048 tokens (the lengths live on the device
  // and are never read here).
  runtime::VarlenBatch Batch{CuV, CuV, 2048, 2048};
  const double Us = Null.expectLaunchesOnly(
      [&] { Att.forwardVarlen(View(Q), View(K), View(V), View(Out), &F, Batch); }, 1,
      {"cuTensorMapEncodeTiled"});
  std::printf("host path: packed causal forward 4 sequences %.2f us a call\n", Us);
}

TEST_CASE("an unmasked backward launches its four kernels and does nothing "
          "else on the driver but encode its tensor maps") {
  NullDriver Null;
  runtime::Attention Att(gputest::makeDefinition("mha_full"), f16Signature());
  Buffers Fw(2, 1024, 1024, 8, 8), Grad(2, 1024, 1024, 8, 8);
  runtime::DeviceAlloc DOut(Fw.bytes(1024, 8));
  TensorView F = Fw.finals(), O = Fw.out();
  TensorView Do = TensorView::contiguous(DOut.get(), DType::F16, {2, 1024, 8, 128});
  // doosum, dQ's sums and semaphores cleared, dK/dV with dQ's turns, dQ
  // converted; bwd_sm90 encodes its TMA descriptors for each call's
  // pointers. The workspace is the stream's, made by the first call.
  const double Us = Null.expectLaunchesOnly(
      [&] {
        Att.backward(Fw.q(), Fw.k(), Fw.v(), &O, Do, &F, Grad.q(), Grad.k(), Grad.v());
      },
      4, {"cuTensorMapEncodeTiled"});
  std::printf("host path: backward B2 H8 S1024 %.2f us a call\n", Us);
}

TEST_CASE("a linear decode step launches one kernel and does nothing else on "
          "the driver") {
  NullDriver Null;
  runtime::LinearSignature Sig;
  runtime::LinearAttention Lin(examples::simpleGla(), Sig);
  const int64_t B = 32, H = 32, D = 128;
  runtime::DeviceAlloc Q(size_t(B * H * D) * 2), K(size_t(B * H * D) * 2),
      V(size_t(B * H * D) * 2), Out(size_t(B * H * D) * 2), Decay(size_t(B * H) * 4),
      State(size_t(B * H * D * D) * 4);
  TensorView Qv = TensorView::contiguous(Q.get(), DType::F16, {B, 1, H, D});
  TensorView Kv = TensorView::contiguous(K.get(), DType::F16, {B, 1, H, D});
  TensorView Vv = TensorView::contiguous(V.get(), DType::F16, {B, 1, H, D});
  TensorView Ov = TensorView::contiguous(Out.get(), DType::F16, {B, 1, H, D});
  TensorView DecayV = TensorView::contiguous(Decay.get(), DType::F32, {B, H, 1});
  TensorView S = TensorView::contiguous(State.get(), DType::F32, {B, H, D, D});
  const double Us = Null.expectLaunchesOnly(
      [&] { Lin.decodeStep({Qv, Kv, Vv, Ov, &DecayV, S, S}); }, 1);
  std::printf("host path: simple_gla decode step B32 H32 %.2f us a call\n", Us);
}
