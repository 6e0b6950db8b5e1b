// The linear backward launcher: the linear_chunk backward kernels of one
// definition and configuration, compiled through the kernel cache, run on
// tensors that LinearAttention has validated.
#ifndef ATTN_RUNTIME_LINEARBACKWARDRUNNER_H
#define ATTN_RUNTIME_LINEARBACKWARDRUNNER_H

#include "DeviceArena.h"
#include "KernelModule.h"
#include "LinearValidate.h"

#include "attn/codegen/LinearCodegen.h"
#include "attn/runtime/LinearAttention.h"

// The argument structs, shared with the device code.
#include "../kernels/linear_chunk_args.cuh"

#include <cuda.h>

#include <vector>

namespace attn::runtime {

/// The offsets of a packed batch's call (LinearAttention::backwardVarlen).
struct LinearPackedBatch {
  const int *CuSeqlens = nullptr; ///< device, [Seqs + 1]
  int64_t Seqs = 0;
};

/// The gradients of a linear-attention call (LinearAttention::backward):
/// the chunk states recomputed, the chunk gradients (one CTA per chunk and
/// head, or per sub-group of heads sharing q and k heads, or per value
/// slice with a combine after), the grouped partials' reduction, the decay
/// gradient and the custom-input gradients' reduction.
class LinearBackwardRunner {
public:
  /// Generates the backward of \p Def for \p Spec (its Config included)
  /// and compiles it through KernelCache::global(); the module is loaded on
  /// the first run(). \p Def must outlive the runner. \p Varlen: the
  /// packed batch's kernels (run with a LinearPackedBatch).
  LinearBackwardRunner(const CompiledDefinition &Def,
                       const codegen::LinearKernelSpec &Spec,
                       bool Varlen = false);
  LinearBackwardRunner(const LinearBackwardRunner &) = delete;
  LinearBackwardRunner &operator=(const LinearBackwardRunner &) = delete;

  /// Launches the backward of the call \p R (validateLinearBackward's
  /// result for \p T, \p Inputs and \p Grads) on \p Stream without
  /// synchronising, its scratch carved from \p Work (grown as needed; the
  /// caller may share it between runners that never run concurrently).
  /// A packed batch's call (a Varlen runner) is \p R of batch 1 and
  /// \p Packed's sequences, whose states [Seqs,H,D,DV] T's states are.
  void run(const LinearBackwardShape &R, const LinearBackwardTensors &T,
           const InputMap &Inputs, const LinearInputGrads &Grads,
           DeviceArena &Work, CUstream Stream,
           const LinearPackedBatch &Packed = LinearPackedBatch());

  const codegen::LinearKernelSpec &spec() const { return Spec; }
  const codegen::KernelSource &source() const { return Source; }
  const CacheResult &cacheResult() const { return Cached; }

private:
  void ensureLoaded();

  const CompiledDefinition &Def;
  codegen::LinearKernelSpec Spec;
  bool Varlen;
  codegen::LinearSmem Smem;
  codegen::KernelSource Source;
  CacheResult Cached;
  KernelModule Module;
  CUfunction States = nullptr, Grads = nullptr, GroupedGrads = nullptr,
             Combine = nullptr, Decay = nullptr, InputReduce = nullptr,
             PartialReduce = nullptr;
};

// Shared by the forward (LinearAttention.cpp) and the backward launches.

/// The generated Inputs struct as slots, as every other kernel takes it
/// (ForwardLaunch.h); of the call's shape only the head count is read.
std::vector<uint64_t> linearInputSlots(const ir::Graph &G,
                                       const InputMap &Inputs, int64_t H);

/// The forward's part of LinearArgs: q, k, v, decay, their strides and the
/// call's sizes.
attnc::LinearArgs linearForwardArgs(const LinearCallShape &C,
                                    const codegen::LinearKernelSpec &Spec,
                                    const TensorView &Q, const TensorView &K,
                                    const TensorView &V,
                                    const TensorView *Decay);

/// cuLaunchKernel of \p F with (GX, GY, GZ) blocks of \p Threads threads
/// and \p Smem bytes of dynamic shared memory; DriverError naming \p What.
void launchLinear(CUfunction F, unsigned GX, unsigned GY, unsigned GZ,
                  unsigned Threads, int Smem, CUstream S, void **Params,
                  const char *What);

/// Whether the backward may use state pairs (linear_chunk_pairs.cuh) where
/// its kernels have them: unless ATTNC_LINEAR_PAIRS=0, a measurement switch
/// that writes every chunk's H and dH (as ATTNC_LINEAR_SPLIT); unset or 1
/// leaves them on, anything else is a UserError.
bool linearStatePairsAllowed();

} // namespace attn::runtime

#endif
