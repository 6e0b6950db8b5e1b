// The configuration and spec of a linear-attention kernel: plain values that
// the public runtime header (attn/runtime/LinearAttention.h) returns. Code
// generation for them is attn/codegen/LinearCodegen.h.
#ifndef ATTN_CODEGEN_LINEARCONFIG_H
#define ATTN_CODEGEN_LINEARCONFIG_H

#include "attn/GpuArch.h"
#include "attn/dsl/Problem.h"

#include <string>

namespace attn::codegen {

/// Tile configuration of the chunked kernels, written c{Chunk}v{SliceV}
/// w{Warps}b{BwdWarps} ("c64v64w4b8").
struct LinearConfig {
  /// Tokens per chunk: 32, 64 or 128.
  int Chunk = 64;
  /// Value columns per CTA: DV is split into DV / SliceV slices, each
  /// carried by its own CTA (64 or 128).
  int SliceV = 64;
  /// Warps of the forward CTA and of the backward's chunk-gradient CTA (4,
  /// 8 or 16).
  int Warps = 4;
  int BwdWarps = 8;

  std::string str() const;
  /// Parses what str() writes; UserError on anything else.
  static LinearConfig parse(const std::string &Text);
  /// The configuration used when none is given: chunks of 32 at D <= 128,
  /// of 64 at D = 256; slices of 128 value columns where DV is a multiple
  /// of 128 and they fit \p Arch's shared memory, else of 64; the fewest
  /// warps that keep every warp's share of the state at 32 rows or less
  /// (docs/linear.md).
  static LinearConfig defaultFor(int D, int DV, GpuArch Arch);
  /// Why the skeletons cannot be instantiated with this configuration for
  /// head dims \p D and \p DV, or empty. Shared memory is not checked here.
  std::string structuralError(int D, int DV) const;
  bool operator==(const LinearConfig &O) const {
    return Chunk == O.Chunk && SliceV == O.SliceV && Warps == O.Warps &&
           BwdWarps == O.BwdWarps;
  }
};

/// Everything that selects one linear kernel besides the definition.
struct LinearKernelSpec {
  DType Dtype = DType::F16;
  int HeadDim = 128;  ///< D of q and k: 64, 128 or 256
  int HeadDimV = 128; ///< DV of v: a multiple of Config.SliceV, 64 to 512
  GpuArch Arch = GpuArch::Sm80;
  LinearConfig Config;
  /// UserError naming the field when a value is unsupported (head dims,
  /// arch, the configuration's structure, shared memory on the arch).
  void validate() const;
};

} // namespace attn::codegen

#endif
