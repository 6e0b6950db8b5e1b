// The host time of one Attention::forward call from C++ (the baseline the
// Python layers' overhead is measured against, in the same run): batches
// of calls short enough never to fill the launch queue, median per call.
#include "GpuSupport.h"

#include "Examples.h"
#include "attn/dsl/Registry.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

using namespace attn;

int main(int Argc, char **Argv) {
  if (!runtime::CudaDriver::get().available()) {
    std::fprintf(stderr, "capi_call_overhead: no CUDA driver\n");
    return 77;
  }
  const char *Name = Argc > 1 ? Argv[1] : "mha";
  const int64_t B = 1, H = 1, S = 128, D = 64;
  dsl::Registry R;
  examples::registerExamples(R);
  runtime::Signature Sig;
  Sig.HeadDim = Sig.HeadDimV = int(D);
  Sig.TensorLayout = Layout::BHSD;
  runtime::Attention Att(R.get(Name), Sig);
  size_t Elems = size_t(B * H * S * D);
  gputest::DeviceBuffer Q(Elems * 2), K(Elems * 2), V(Elems * 2),
      O(Elems * 2), F(size_t(B * H * S) * 4);
  std::vector<uint16_t> Host(Elems);
  for (size_t I = 0; I < Elems; ++I)
    Host[I] = gputest::toHalfBits(double((I * 7919) % 1000) / 1000.0 - 0.5);
  Q.upload(Host.data(), Elems * 2);
  K.upload(Host.data(), Elems * 2);
  V.upload(Host.data(), Elems * 2);
  auto View = [&](gputest::DeviceBuffer &Buf) {
    return runtime::TensorView::contiguous(Buf.get(), DType::F16,
                                           {B, H, S, D});
  };
  runtime::TensorView Qv = View(Q), Kv = View(K), Vv = View(V), Ov = View(O);
  runtime::TensorView Fv = runtime::TensorView::contiguous(
      F.get(), DType::F32, {1, B, H, S});
  runtime::InputMap Inputs;
  if (std::string(Name) == "sigmoid_attn")
    Inputs["softmax_bias"] = -1.0f;
  auto &Drv = runtime::CudaDriver::get();
  const int Calls = 200, Rounds = 25;
  std::vector<double> PerCall;
  for (int Round = 0; Round < Rounds + 3; ++Round) {
    Drv.check(Drv.cuCtxSynchronize(), "cuCtxSynchronize");
    auto T0 = std::chrono::steady_clock::now();
    for (int I = 0; I < Calls; ++I)
      Att.forward(Qv, Kv, Vv, Ov, &Fv, Inputs);
    auto T1 = std::chrono::steady_clock::now();
    if (Round >= 3) // warm-up rounds (the first compiles)
      PerCall.push_back(
          std::chrono::duration<double, std::micro>(T1 - T0).count() / Calls);
  }
  Drv.check(Drv.cuCtxSynchronize(), "cuCtxSynchronize");
  std::sort(PerCall.begin(), PerCall.end());
  std::printf("cxx_forward_us %s %.2f\n", Name, PerCall[PerCall.size() / 2]);
  return 0;
}
