// The host time of one Attention::forward call from C++ (the baseline the
// Python layers' overhead is measured against, in the same run): batches
// of calls short enough never to fill the launch queue, median per call.
// Then the same call through the C interface (attnc_attention_forward_call
// on a struct packed once, from C): what the C layer adds, apart from any
// Python FFI's cost.
#include "GpuSupport.h"
#include "attnc/attnc_c.h"

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
  auto MedianUs = [&](auto &&Call) {
    const int Calls = 200, Rounds = 25;
    std::vector<double> PerCall;
    for (int Round = 0; Round < Rounds + 3; ++Round) {
      Drv.check(Drv.cuCtxSynchronize(), "cuCtxSynchronize");
      auto T0 = std::chrono::steady_clock::now();
      for (int I = 0; I < Calls; ++I)
        Call();
      auto T1 = std::chrono::steady_clock::now();
      if (Round >= 3) // warm-up rounds (the first compiles)
        PerCall.push_back(
            std::chrono::duration<double, std::micro>(T1 - T0).count() /
            Calls);
    }
    Drv.check(Drv.cuCtxSynchronize(), "cuCtxSynchronize");
    std::sort(PerCall.begin(), PerCall.end());
    return PerCall[PerCall.size() / 2];
  };
  std::printf("cxx_forward_us %s %.2f\n", Name,
              MedianUs([&] { Att.forward(Qv, Kv, Vv, Ov, &Fv, Inputs); }));

  // The C interface's packed call on the same buffers (its own object).
  attnc_definition *Def = nullptr;
  attnc_attention *CAtt = nullptr;
  attnc_signature CSig = {};
  CSig.dtype = ATTNC_DTYPE_F16;
  CSig.head_dim = CSig.head_dim_v = int32_t(D);
  CSig.layout = ATTNC_LAYOUT_BHSD;
  if (attnc_definition_from_example(Name, &Def) != ATTNC_OK ||
      attnc_attention_create(Def, &CSig, &CAtt) != ATTNC_OK) {
    std::fprintf(stderr, "capi_call_overhead: %s\n", attnc_last_error());
    return 1;
  }
  const int64_t Shape[4] = {B, H, S, D}, FShape[4] = {1, B, H, S};
  auto CView = [&](void *Data, int32_t DT, const int64_t *Sh) {
    return attnc_tensor{Data, DT, 4, Sh, nullptr};
  };
  attnc_tensor Ct[5] = {CView(Q.get(), ATTNC_DTYPE_F16, Shape),
                        CView(K.get(), ATTNC_DTYPE_F16, Shape),
                        CView(V.get(), ATTNC_DTYPE_F16, Shape),
                        CView(O.get(), ATTNC_DTYPE_F16, Shape),
                        CView(F.get(), ATTNC_DTYPE_F32, FShape)};
  attnc_input In = {};
  In.name = "softmax_bias";
  In.kind = ATTNC_INPUT_F32;
  In.f32 = -1.0f;
  bool HasInput = !Inputs.empty();
  size_t Finals = 0;
  attnc_attention_final_count(CAtt, &Finals);
  attnc_forward_call CCall = {CAtt,
                              &Ct[0],
                              &Ct[1],
                              &Ct[2],
                              &Ct[3],
                              Finals ? &Ct[4] : nullptr,
                              HasInput ? &In : nullptr,
                              HasInput ? 1u : 0u,
                              nullptr,
                              nullptr};
  attnc_status First = attnc_attention_forward_call(&CCall);
  if (First != ATTNC_OK) {
    std::fprintf(stderr, "capi_call_overhead: %s\n", attnc_last_error());
    return 1;
  }
  std::printf("c_forward_call_us %s %.2f\n", Name,
              MedianUs([&] { attnc_attention_forward_call(&CCall); }));
  attnc_attention_release(CAtt);
  attnc_definition_release(Def);
  return 0;
}
