// Device tensors for timing a definition on random data: several sets of
// q, k, v to rotate between calls, the output, finals and custom inputs
// (used by the autotuner and `attnc bench`).
#ifndef ATTN_RUNTIME_RANDOMPROBLEM_H
#define ATTN_RUNTIME_RANDOMPROBLEM_H

#include "attn/runtime/Attention.h"
#include "attn/runtime/Paged.h"
#include "attn/runtime/Validate.h"

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace attn::runtime {


/// One device allocation (cuMemAlloc), freed with the object.
class DeviceAlloc {
public:
  explicit DeviceAlloc(size_t Bytes);
  ~DeviceAlloc();
  DeviceAlloc(const DeviceAlloc &) = delete;
  DeviceAlloc &operator=(const DeviceAlloc &) = delete;
  void *get() const { return reinterpret_cast<void *>(Ptr); }
  CUdeviceptr ptr() const { return Ptr; }
  size_t size() const { return Bytes; }
  /// Fills every byte with \p Byte (0xff: NaN in every float format).
  void poison(unsigned char Byte = 0xff);

private:
  CUdeviceptr Ptr = 0;
  size_t Bytes;
};

/// Contiguous [B, S, Hkv, D] keys and values seen as an NHD cache of pages
/// of PageSize tokens, for timing paged decode on the same bytes as a
/// contiguous call: the block table is a random permutation of every page
/// (sequence b's page p is memory page Table[b·pages + p], seeded by the
/// page size), so every page is read once a call in no sequential order,
/// and every sequence holds all S keys. The table and lengths live on the
/// device. \p PageSize must divide \p SeqKv.
class ShuffledPages {
public:
  ShuffledPages(int64_t Batch, int64_t SeqKv, int64_t PageSize);
  /// The cache over \p K and \p V (each [B, S, Hkv, D], contiguous).
  PagedKV view(const TensorView &K, const TensorView &V) const;

private:
  int64_t Batch, SeqKv, PageSize, Pages;
  DeviceAlloc Table, Lens;
};

/// Random tensors of one problem for \p Def under \p Sig (dtype, head dims,
/// layout): q, k, v normal(0, 1) rounded to the dtype, never zeros; tensor
/// custom inputs uniform over their sample range; scalar inputs the middle
/// of it. Needs a GPU (DriverError otherwise).
class RandomProblem {
public:
  RandomProblem(const CompiledDefinition &Def, const Signature &Sig,
                const TuneShape &Shape, int Sets, uint64_t Seed);

  /// The arguments of a call on the first \p Sub.SeqQ queries and
  /// \p Sub.SeqKv keys of the buffers (Sub's batch and heads must be the
  /// problem's): views with the full tensors' strides, a contiguous finals
  /// buffer of Sub's own size, and the validated call shape.
  struct Call {
    std::vector<TensorView> Q, K, V; ///< one per set
    TensorView Out;
    TensorView FinalsView;
    bool HasFinals = false;
    std::unique_ptr<DeviceAlloc> FinalsBuffer;
    InputMap Inputs;
    CallShape Shape;
    const TensorView *finals() const { return HasFinals ? &FinalsView : nullptr; }
  };
  Call call(const TuneShape &Sub) const;
  Call call() const { return call(Shape); }

  const TuneShape &shape() const { return Shape; }
  int sets() const { return int(Q.size()); }
  /// The output buffer (every Call writes into it).
  DeviceAlloc &out() const { return *Out; }

private:
  const CompiledDefinition &Def;
  Signature Sig;
  TuneShape Shape;
  DType Elem;
  std::vector<std::unique_ptr<DeviceAlloc>> Q, K, V;
  std::unique_ptr<DeviceAlloc> Out;
  std::vector<std::unique_ptr<DeviceAlloc>> InputBuffers;
};

} // namespace attn::runtime

#endif
