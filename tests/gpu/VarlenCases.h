// gpu_varlen_test's case and the parts of it in files of their own: the
// case matrix with its packed decode cases (--decode) and --compile-only
// (VarlenCases.cpp), and --bench (VarlenBench.cpp); the cases' run and
// check stay in gpu_varlen_test.cpp.
#ifndef ATTN_TESTS_GPU_VARLEN_CASES_H
#define ATTN_TESTS_GPU_VARLEN_CASES_H

#include "GpuSupport.h"

#include "attn/dsl/Problem.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace attn::gputest::varlen {

struct Case {
  std::string Def;
  DType Dt;
  int D;
  int H, Hkv;
  std::vector<int> Lq, Lkv;
  std::string Skeleton;
  bool Backward;
  /// A named backward configuration (Signature::BackwardConfig), else "".
  std::string BwdConfig = "";
  /// At most 16 queries a sequence: the forward runs on decode_sm80 (the
  /// short-query rule's choice, or named), split over the keys (--decode
  /// selects these cases).
  bool Decode = false;
};

/// The longest of \p L, at least 1: a packed call's max_seqlen (which
/// VarlenBatch wants positive, and by which the backward is chosen).
inline int longest(const std::vector<int> &L) {
  return L.empty() ? 1 : std::max(1, *std::max_element(L.begin(), L.end()));
}

/// Each sequence's first token: the prefix sums of \p L from 0.
inline std::vector<int> cumulative(const std::vector<int> &L) {
  std::vector<int> Cu(L.size() + 1, 0);
  std::partial_sum(L.begin(), L.end(), Cu.begin() + 1);
  return Cu;
}

/// A device copy of \p Bits.
inline std::unique_ptr<DeviceBuffer> upload(const void *Data, size_t Bytes) {
  auto B = std::make_unique<DeviceBuffer>(Bytes);
  B->upload(Data, Bytes);
  return B;
}

/// The case matrix (\p Quick: the f16 cases only), the packed decode
/// cases (Case::Decode, --decode) among them.
std::vector<Case> cases(bool Quick);

/// Compiles case \p C's kernels for sm_90a into the kernel cache, its
/// tensors packed (THD) or dense (BSHD).
void compileCase(const Case &C, Layout L);

/// --compile-only: the kernels of the cases (one definition's with
/// \p Filter, the decode cases' with \p DecodeOnly) for sm_90a.
int compileOnly(bool Quick, bool DecodeOnly, const char *Filter);

/// --bench [H [D ...]] (\p CompileOnly: its kernels compiled, no GPU).
int bench(int H, const std::vector<int> &Dims, bool CompileOnly);

/// --persistent: the persistent packed walk against the plain packed
/// kernel, bit for bit (VarlenPersistent.cpp); the failures' count
/// (\p CompileOnly: their kernels compiled for sm_90a, no GPU; 0).
int persistentCases(bool CompileOnly);

} // namespace attn::gputest::varlen

#endif // ATTN_TESTS_GPU_VARLEN_CASES_H
