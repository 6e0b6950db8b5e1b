// Device tensors for timing linear attention on random data: sets of q, k,
// v and dout to rotate between calls, the decay, the custom inputs, the
// outputs and gradients (used by `attnc bench`, attnc_bench_linear and the
// linear autotuner), and the CUDA-event median they are timed with.
#ifndef ATTN_RUNTIME_LINEARPROBLEM_H
#define ATTN_RUNTIME_LINEARPROBLEM_H

#include "attn/reference/Tensor.h"
#include "attn/runtime/LinearAttention.h"
#include "attn/runtime/RandomProblem.h"

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace attn::runtime {

/// "b8 h80/1 t2048": for messages and progress lines.
std::string linearShapeText(const LinearShape &S);

/// InvalidArgument naming the field unless every size is at least 1 and
/// HeadsQK divides Heads.
void checkLinearShape(const LinearShape &S);

/// Random tensors of one problem for \p Def under \p Sig (dtype, head dims,
/// layout): q, k, v, dout normal(0, 1) rounded to the dtype (never
/// zeros); the decay uniform in [-0.1, 0] (a slow decay, so that the state
/// carries far); custom inputs uniform over their sample ranges. Outputs and
/// gradients are allocated once. Needs a GPU (DriverError otherwise).
class LinearProblem {
public:
  LinearProblem(const CompiledDefinition &Def, const LinearSignature &Sig,
                const LinearShape &Shape, int Sets, uint64_t Seed);
  ~LinearProblem();

  /// One forward of \p Lin on set \p Set into out().
  void forward(LinearAttention &Lin, int Set, CUstream Stream = nullptr);
  /// One backward of \p Lin on set \p Set into dq(), dk(), dv() (and the
  /// decay gradient when the definition reads the decay).
  void backward(LinearAttention &Lin, int Set, CUstream Stream = nullptr);

  /// The same tokens as a packed batch of sequences of \p Lengths (adding
  /// up to Batch·Seq; InvalidArgument otherwise): q, k, v, dout, out and
  /// the gradients read as [Batch·Seq, heads, dim], the decay and per-row
  /// inputs as [1, H, Batch·Seq]. Uploads the offsets for the packed calls.
  void setPacked(const std::vector<int64_t> &Lengths);
  int64_t packedSequences() const { return PackedSeqs; }
  /// forwardVarlen / backwardVarlen of \p Lin on set \p Set (after
  /// setPacked; no states).
  void forwardPacked(LinearAttention &Lin, int Set, CUstream Stream = nullptr);
  void backwardPacked(LinearAttention &Lin, int Set,
                      CUstream Stream = nullptr);

  /// One decodeStep of \p Lin: the shape's Seq tokens (1 to 16) of each of
  /// its Batch sequences as the new tokens of set \p Set, the states
  /// \p State (float32 [Batch, Heads, D, DV], contiguous) updated in place.
  void decodeStep(LinearAttention &Lin, int Set, const TensorView &State,
                  CUstream Stream = nullptr);
  /// The state bytes one decode step reads (and writes): Batch·Heads·D·DV·4.
  double decodeStateBytes() const;

  int sets() const { return int(Q.size()); }
  const LinearShape &shape() const { return Shape; }
  bool readsDecay() const { return ReadsDecay; }

  /// The minimal traffic of one call: each input read once, each output
  /// written once (q, k, v and o for the forward; q, k, v, dout, dq, dk, dv
  /// for the backward; the decay and custom inputs are not counted).
  double forwardBytes() const;
  double backwardBytes() const;

  /// Views in the signature's layout ([B,T,H,D] for BSHD, [B,H,T,D] for
  /// BHSD).
  TensorView q(int Set) const;
  TensorView k(int Set) const;
  TensorView v(int Set) const;
  TensorView dout(int Set) const;
  TensorView out() const;
  TensorView dq() const;
  TensorView dk() const;
  TensorView dv() const;
  /// The decay gradient [B,H,T] fp32 (written when readsDecay()).
  TensorView ddecay() const;
  const InputMap &inputs() const { return Inputs; }

  /// Host copies, for a reference: the decay [B,H,T] and the custom inputs
  /// exactly as uploaded (fp32 values held as double).
  const reference::Tensor &decayValues() const { return DecayHost; }
  const reference::InputValues &inputValues() const { return InputHost; }

private:
  TensorView view(const DeviceAlloc &Buf, int64_t Heads, int64_t Dim) const;
  TensorView packedView(const DeviceAlloc &Buf, int64_t Heads,
                        int64_t Dim) const;
  /// A [1, H, Batch·Seq] fp32 view of \p Buf.
  TensorView packedRows(const DeviceAlloc &Buf) const;

  LinearSignature Sig;
  LinearShape Shape;
  bool ReadsDecay = false;
  DType Elem;
  std::vector<std::unique_ptr<DeviceAlloc>> Q, K, V, DO;
  std::unique_ptr<DeviceAlloc> Out, DQ, DK, DV, Decay, DDecay;
  std::vector<std::unique_ptr<DeviceAlloc>> InputBuffers;
  InputMap Inputs, PackedInputs;
  std::unique_ptr<DeviceAlloc> CuSeqlens;
  int64_t PackedSeqs = 0;
  reference::Tensor DecayHost;
  reference::InputValues InputHost;
};

} // namespace attn::runtime

#endif
