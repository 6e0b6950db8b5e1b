// The backward launcher: the bwd_sm80 kernels of one definition and kernel
// spec, compiled through the kernel cache, run on validated device tensors.
#ifndef ATTN_RUNTIME_BACKWARDRUNNER_H
#define ATTN_RUNTIME_BACKWARDRUNNER_H

#include "DeviceArena.h"
#include "KernelModule.h"

#include "attn/codegen/Codegen.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/Validate.h"

#include <cuda.h>

#include <memory>


namespace attn::runtime {

/// Gradients dq, dk, dv (and of custom inputs that require them) of
/// L = Σ out ∘ dout, from q, k, v, dout, the forward's final rowscales and,
/// for a backward that reads doosum, its output. Deterministic: the same
/// inputs give the same bits on every run (docs/runtime.md, "Backward").
class BackwardRunner {
public:
  /// Generates the backward of \p Def for target \p T with the selector's
  /// \p Choice (a bwd_sm80 configuration: InternalError otherwise) and
  /// compiles it through KernelCache::global(). \p Def must outlive
  /// the runner. UserError / NotSupportedYet from the
  /// code generator.
  BackwardRunner(const CompiledDefinition &Def, const KernelTarget &T,
                 const KernelChoice &Choice);
  ~BackwardRunner();
  BackwardRunner(const BackwardRunner &) = delete;
  BackwardRunner &operator=(const BackwardRunner &) = delete;

  /// Checks the grid limits of a call validateBackwardCall accepted as
  /// \p Shape (InvalidArgument and nothing launched on a bad one), loads
  /// the module on the first call, and launches on \p Stream without
  /// synchronising.
  /// Workspaces (doosum, block lists, input-gradient partials; in the fused
  /// dQ mode dQ's fp32 partial sums and semaphores) belong to the runner
  /// and are reused: do not run one runner concurrently. A packed
  /// variable-length call (Shape.Fwd.Packed) runs the two-kernel mode: in
  /// the fused dQ mode, a second runner of the two-kernel configuration
  /// with the same dK/dV tiles, made on the first such call (the fused
  /// mode's per-query-block order assumes the dense grid).
  void run(const BackwardTensors &T, const BackwardCallShape &Shape,
           const InputMap &Inputs = {},
           const InputGradMap &Grads = {}, CUstream Stream = nullptr);

  const codegen::KernelSource &source() const { return Source; }
  const CacheResult &cacheResult() const { return Cached; }
  const codegen::BwdConfig &config() const { return Config; }

private:
  void ensureLoaded();

  const CompiledDefinition &Def;
  KernelChoice Choice;
  KernelTarget Target;
  std::unique_ptr<BackwardRunner> Unfused;
  codegen::KernelSpec Spec;
  codegen::BwdConfig Config;
  codegen::KernelSource Source;
  CacheResult Cached;
  KernelModule Module;
  CUfunction Pre = nullptr, DkDv = nullptr, Dq = nullptr, DqInit = nullptr,
             DqConvert = nullptr, Grads = nullptr, Classify = nullptr,
             Rows = nullptr, Cols = nullptr;
  DeviceArena Work{"backward workspace"};
};

} // namespace attn::runtime

#endif
