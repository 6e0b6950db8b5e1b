// What the C interface's tests share: handles released by RAII, fake
// device tensors, and whether a CUDA driver is present.
#ifndef ATTNC_TESTS_CAPI_SUPPORT_H
#define ATTNC_TESTS_CAPI_SUPPORT_H

#include "attnc/attnc_c.h"

#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace capitest {

struct DefDeleter {
  void operator()(attnc_definition *D) const { attnc_definition_release(D); }
};
struct AttDeleter {
  void operator()(attnc_attention *A) const { attnc_attention_release(A); }
};
using DefPtr = std::unique_ptr<attnc_definition, DefDeleter>;
using AttPtr = std::unique_ptr<attnc_attention, AttDeleter>;

inline DefPtr example(const char *Name) {
  attnc_definition *D = nullptr;
  if (attnc_definition_from_example(Name, &D) != ATTNC_OK)
    return nullptr;
  return DefPtr(D);
}

/// A signature for sm_80 (compiles with NVRTC, no GPU needed).
inline attnc_signature sm80Signature(int HeadDim = 64) {
  attnc_signature S{};
  S.dtype = ATTNC_DTYPE_F16;
  S.head_dim = HeadDim;
  S.head_dim_v = HeadDim;
  S.layout = ATTNC_LAYOUT_BSHD;
  S.arch = ATTNC_ARCH_SM80;
  return S;
}

/// An sm_80 attention of the example \p Name (head dim 64), made once per
/// test program and kept to its end.
inline attnc_attention *sm80Attention(const char *Name) {
  static std::map<std::string, AttPtr> Made;
  AttPtr &A = Made[Name];
  if (!A) {
    DefPtr D = example(Name);
    REQUIRE(D);
    attnc_signature S = sm80Signature();
    attnc_attention *Raw = nullptr;
    REQUIRE(attnc_attention_create(D.get(), &S, &Raw) == ATTNC_OK);
    A.reset(Raw);
  }
  return A.get();
}

/// A tensor over host-owned shape storage with a fake, aligned device
/// address (the calls here never reach a launch with it).
struct FakeTensor {
  std::vector<int64_t> Shape;
  attnc_tensor T{};
  FakeTensor(std::vector<int64_t> S, int32_t Dtype = ATTNC_DTYPE_F16)
      : Shape(std::move(S)) {
    T.data = reinterpret_cast<void *>(uintptr_t(1) << 20);
    T.dtype = Dtype;
    T.ndim = int32_t(Shape.size());
    T.shape = Shape.data();
    T.strides = nullptr;
  }
  FakeTensor(const FakeTensor &) = delete;
  const attnc_tensor *operator&() const { return &T; }
};

/// Whether this machine has a CUDA driver (a call that passes its checks
/// would launch on it: the tests that need the driver to be missing skip).
inline bool hasDriver() {
  void *H = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (H)
    dlclose(H);
  return H != nullptr;
}

inline std::string lastError() { return attnc_last_error(); }

} // namespace capitest

#endif
