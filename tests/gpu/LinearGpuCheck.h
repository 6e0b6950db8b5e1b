// Helpers of the linear GPU tests (decode step, packed forward and
// backward): 16-bit tensors in a layout and back, uploads, the tolerance
// check of gpu_linear_test (twice a plain low-precision implementation's
// error plus a small atol relative to the tensor's size), and the packed
// tests' main loop.
#ifndef ATTN_TESTS_GPU_LINEARGPUCHECK_H
#define ATTN_TESTS_GPU_LINEARGPUCHECK_H

#include "GpuSupport.h"

#include "Examples.h"
#include "attn/Error.h"
#include "attn/reference/Tensor.h"
#include "attn/runtime/LinearAttention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace attn::gputest {

using reference::Tensor;
using runtime::TensorView;

inline dsl::LinearAttentionDef definition(const std::string &Name) {
  if (Name == "mamba2")
    return examples::mamba2();
  if (Name == "simple_gla")
    return examples::simpleGla();
  return examples::retentionLinear();
}

/// One case of the packed (varlen) linear GPU tests, forward and backward:
/// a definition, dtype, head dims and head counts (H value heads, Hq and Hk
/// query and key heads).
struct LinearVarlenCase {
  std::string Def;
  DType Dt;
  int D, DV, H, Hq, Hk;
  std::string name() const {
    return fmt::format("{} {} d{}/{} h{}/{}/{}", Def, std::string(dtypeName(Dt)), D, DV,
                       H, Hq, Hk);
  }
};

/// Every linear example over head dims and GQA shapes, f16 and bf16 (bf16
/// only under the sanitizer, whose runs are slow).
inline std::vector<LinearVarlenCase> linearVarlenCases(bool Sanitize) {
  struct Ex {
    const char *Name;
    int D, DV, H, Hq, Hk;
  } Exs[] = {{"mamba2", 128, 64, 4, 1, 1},
             {"simple_gla", 64, 128, 4, 4, 2},
             {"simple_gla", 128, 128, 4, 4, 4},
             {"retention_linear", 256, 128, 2, 2, 2},
             // No shared q/k heads at one value slice: the backward's state
             // pairs (linear_chunk_pairs.cuh) at slices of 64 and of 128.
             {"mamba2", 128, 64, 4, 4, 4},
             {"retention_linear", 128, 128, 4, 4, 4}};
  std::vector<LinearVarlenCase> Out;
  for (const Ex &E : Exs)
    for (DType Dt : {DType::F16, DType::BF16})
      if (!Sanitize || Dt == DType::BF16)
        Out.push_back({E.Name, Dt, E.D, E.DV, E.H, E.Hq, E.Hk});
  return Out;
}

inline size_t offsetOf(Layout L, int H, int S, int D, int b, int h, int s, int d) {
  return L == Layout::BSHD ? ((size_t(b) * S + s) * H + h) * D + d
                           : ((size_t(b) * H + h) * S + s) * D + d;
}

/// \p X [B,H,S,D] rounded to the dtype: the device bits in layout \p L;
/// \p X itself takes the rounded values.
inline std::vector<uint16_t> toBits16(Tensor &X, DType Dt, Layout L) {
  int B = int(X.dim(0)), H = int(X.dim(1)), S = int(X.dim(2)), D = int(X.dim(3));
  std::vector<uint16_t> Bits(X.Data.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d) {
          uint16_t V = toBits(Dt, X.at({b, h, s, d}));
          Bits[offsetOf(L, H, S, D, b, h, s, d)] = V;
          X.at({b, h, s, d}) = fromBits(Dt, V);
        }
  return Bits;
}

inline Tensor fromBits16(const std::vector<uint16_t> &Bits, DType Dt, Layout L,
                  std::vector<int64_t> Shape) {
  Tensor Out(Shape);
  int B = int(Shape[0]), H = int(Shape[1]), S = int(Shape[2]), D = int(Shape[3]);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d)
          Out.at({b, h, s, d}) = fromBits(Dt, Bits[offsetOf(L, H, S, D, b, h, s, d)]);
  return Out;
}

inline std::vector<int64_t> viewShape(Layout L, int B, int H, int S, int D) {
  return L == Layout::BSHD ? std::vector<int64_t>{B, S, H, D}
                           : std::vector<int64_t>{B, H, S, D};
}

inline std::unique_ptr<DeviceBuffer> upload(const std::vector<float> &F) {
  auto Buf = std::make_unique<DeviceBuffer>(std::max<size_t>(4, F.size() * 4));
  if (!F.empty())
    Buf->upload(F.data(), F.size() * 4);
  return Buf;
}
inline std::vector<float> floats(const Tensor &T) {
  return std::vector<float>(T.Data.begin(), T.Data.end());
}
inline std::vector<float> download(const DeviceBuffer &B, size_t N) {
  std::vector<float> F(N);
  B.download(F.data(), N * 4);
  return F;
}

/// A tolerance check: max |got − exact| against 2·max |plain − exact| +
/// atol·scale.
struct Check {
  std::string Name;
  double Err = 0, Tol = 0;
  bool Pass = true;
};

/// A case's line: each check as " name err/tol" (" name" for a yes/no
/// one), "!" or "-FAILED" after a failing one, then "pass" or "FAIL", the
/// case's name padded to \p Width; true when every check passed.
inline bool printChecks(const std::string &Case, int Width,
                        const std::vector<Check> &Checks) {
  bool Pass = true;
  std::string Line;
  for (const Check &X : Checks) {
    Pass = Pass && X.Pass;
    Line += X.Tol > 0 ? fmt::format(" {} {:.1e}/{:.1e}{}", X.Name, X.Err,
                                    X.Tol, X.Pass ? "" : "!")
                      : fmt::format(" {}{}", X.Name, X.Pass ? "" : "-FAILED");
  }
  std::printf("%-*s%s  %s\n", Width, Case.c_str(), Line.c_str(),
              Pass ? "pass" : "FAIL");
  return Pass;
}

/// The main of the packed linear GPU tests: announces the device (77 where
/// there is none), then runs \p RunCase(case, lengths, seed) on every case
/// of linearVarlenCases (--sanitize: fewer, shorter sequences) with seeds
/// \p Seed + 1, + 2, ..., printing a line per case (an exception is that
/// case's ERROR) and the totals. Returns the exit status: 1 when a case
/// failed. A last argument other than --sanitize runs only the cases whose
/// name contains it ("mamba2 f16"; each keeps its seed), so that one process
/// a case can run them in parallel.
template <typename RunCaseFn>
int runLinearVarlenCases(int Argc, char **Argv, uint64_t Seed,
                         RunCaseFn &&RunCase) {
  bool Sanitize = Argc > 1 && std::string(Argv[1]) == "--sanitize";
  const std::string Only =
      Argc > 1 + int(Sanitize) ? std::string(Argv[1 + int(Sanitize)]) : "";
  if (!announceDevice())
    return 77;
  const std::vector<int64_t> Lengths =
      Sanitize ? std::vector<int64_t>{0, 1, 70, 5}
               : std::vector<int64_t>{0, 1, 63, 64, 100, 333, 0, 31};
  int Passed = 0, Failed = 0;
  for (const LinearVarlenCase &C : linearVarlenCases(Sanitize)) {
    ++Seed;
    if (C.name().find(Only) == std::string::npos)
      continue;
    try {
      std::vector<Check> R = RunCase(C, Lengths, Seed);
      (printChecks(C.name(), 36, R) ? Passed : Failed)++;
    } catch (const std::exception &E) {
      std::printf("%-36s ERROR %s\n", C.name().c_str(), E.what());
      ++Failed;
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}

inline double atolOf(DType Dt) { return Dt == DType::F16 ? 1e-3 : 8e-3; }

inline Check compare(const std::string &Name, const std::vector<double> &Got,
              const std::vector<double> &Exact, const std::vector<double> &Plain,
              DType Dt) {
  Check R{Name};
  double Scale = 1, PlainErr = 0;
  for (size_t I = 0; I < Exact.size(); ++I) {
    Scale = std::max(Scale, std::fabs(Exact[I]));
    PlainErr = std::max(PlainErr, std::fabs(Plain[I] - Exact[I]));
    R.Err = std::max(R.Err, std::isnan(Got[I]) ? std::numeric_limits<double>::infinity()
                                               : std::fabs(Got[I] - Exact[I]));
  }
  R.Tol = 2 * PlainErr + atolOf(Dt) * Scale;
  R.Pass = R.Err <= R.Tol;
  return R;
}

/// Every element rounded by \p Round.
inline std::vector<double> rounded(const std::vector<double> &X, double (*Round)(DType, double),
                            DType Dt) {
  std::vector<double> Out(X.size());
  for (size_t I = 0; I < X.size(); ++I)
    Out[I] = Round(Dt, X[I]);
  return Out;
}
inline double roundF32(DType, double X) { return double(float(X)); }

inline DType elemOf(DType Dt) { return Dt == DType::F16 ? DType::F16 : DType::BF16; }

/// A linear example by name, for the linear benches' NAME; UserError for
/// another name.
inline dsl::LinearAttentionDef linearExample(const std::string &Name) {
  return Name == "mamba2"             ? examples::mamba2()
         : Name == "simple_gla"       ? examples::simpleGla()
         : Name == "retention_linear" ? examples::retentionLinear()
                                      : throw UserError("unknown linear "
                                                        "definition " +
                                                        Name);
}

/// The signature of a linear bench's run: the command's dtype, head dims
/// \p D and \p DV, the rest the defaults.
inline runtime::LinearSignature linearBenchSignature(const BenchCommand &Cmd,
                                                     int D, int DV) {
  runtime::LinearSignature Sig;
  Sig.Dtype = Cmd.Dtype;
  Sig.HeadDim = D;
  Sig.HeadDimV = DV;
  return Sig;
}

/// \p Bytes of device memory filled with copies of \p Block (the last one
/// cut short): random data that is cheap to make at any size.
inline std::unique_ptr<DeviceBuffer>
repeatedBuffer(size_t Bytes, const void *Block, size_t BlockBytes) {
  auto Buf = std::make_unique<DeviceBuffer>(Bytes);
  auto &D = runtime::CudaDriver::get();
  for (size_t Off = 0; Off < Bytes; Off += BlockBytes)
    D.check(D.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(Buf->get()) + Off,
                           Block, std::min(BlockBytes, Bytes - Off)),
            "cuMemcpyHtoD");
  return Buf;
}

/// The custom inputs of \p In on the device (kept in \p Keep).
inline runtime::InputMap uploadInputs(const ir::Graph &G, const reference::InputValues &In,
                               std::vector<std::unique_ptr<DeviceBuffer>> &Keep) {
  runtime::InputMap M;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    const Tensor &X = In.at(D.Name);
    if (D.Shape == ir::InputShape::Scalar)
      M[D.Name] = float(X.Data[0]);
    else
      M[D.Name] = uploadInput(false, X.Data, X.Shape, Keep);
  }
  return M;
}

} // namespace attn::gputest

#endif
