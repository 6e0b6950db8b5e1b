// Code generation for linear-attention definitions: the chunked skeletons
// (runtime/kernels/linear_chunk_*.cuh) instantiated with the generated mods
// and, for the backward, their derivatives from the autodiff rules.
#ifndef ATTN_CODEGEN_LINEARCODEGEN_H
#define ATTN_CODEGEN_LINEARCODEGEN_H

#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/codegen/KernelSource.h"
#include "attn/codegen/LinearConfig.h"
#include "attn/dsl/Problem.h"

#include <array>
#include <string>
#include <utility>

namespace attn::codegen {

/// Dynamic shared memory of the forward, the backward's state passes and
/// its chunk gradients. The forward stages the next chunk with cp.async,
/// and the chunk gradients hold H and dH in a tile each, where that still
/// lets two CTAs share an SM, or where not even the smaller layout would.
/// The state passes always stage. The grouped chunk gradients (shared q/k
/// heads) prefetch the next head into a second buffer (GroupedBuffers 2)
/// where two CTAs still share an SM. *MinBlocks: the CTAs per SM the chunk
/// gradients' registers are capped for (__launch_bounds__).
struct LinearSmem {
  int Fwd = 0, States = 0, Grads = 0, GroupedGrads = 0;
  bool FwdStaged = false, GradsTwoStates = false;
  int GroupedBuffers = 1, GradsMinBlocks = 1, GroupedMinBlocks = 1;
  /// The plain chunk gradients can recompute a chunk's H or dH from its
  /// neighbour's tiles (state pairs: linear_chunk_grads.cuh), which halves
  /// the states written and read; their shared memory then holds the
  /// neighbour's two tiles. Only where two CTAs still share an SM.
  bool GradsPairs = false;
  /// The packed forward's CTAs an SM its registers are capped for.
  int FwdMinBlocks = 1;

  /// Each kernel's bytes with the name the errors give it.
  std::array<std::pair<const char *, int>, 4> byKernel() const {
    return {{{"forward", Fwd},
             {"state passes", States},
             {"chunk gradients", Grads},
             {"grouped chunk gradients", GroupedGrads}}};
  }
};
LinearSmem linearSharedBytes(const LinearKernelSpec &Spec);

/// State rows per CTA of the backward's state passes (linear_chunk_states;
/// every head dim is a multiple) and its warps (16 rows each).
constexpr int LinearStateRows = 64;
constexpr int LinearStateWarps = 4;

/// Value slices (DV / SliceV) and chunks of \p Seq tokens.
inline int linearSlices(const LinearKernelSpec &S) {
  return S.HeadDimV / S.Config.SliceV;
}
inline long long linearChunks(const LinearKernelSpec &S, long long Seq) {
  return (Seq + S.Config.Chunk - 1) / S.Config.Chunk;
}

/// The forward: banner, Inputs, the Variant with q_mod, k_mod, v_mod and
/// decay_mod as device functions, and the entry attnc_linear_fwd.
/// UserError for a definition that is not linear attention.
KernelSource generateLinearForward(const CompiledDefinition &Def,
                                   const LinearKernelSpec &Spec);

/// The backward: the same Variant plus each mod's derivative with respect
/// to its element (or decay) and to every custom input, built with the
/// autodiff pass's rules (transforms::tangent); entries
/// attnc_linear_bwd_states, attnc_linear_bwd_chunk,
/// attnc_linear_bwd_chunk_grouped, attnc_linear_bwd_combine,
/// attnc_linear_bwd_decay, attnc_linear_bwd_input_reduce and
/// attnc_linear_bwd_partial_reduce.
KernelSource generateLinearBackward(const CompiledDefinition &Def,
                                    const LinearKernelSpec &Spec);

/// The forward of a packed batch (cu_seqlens): linear_fwd with the scan's
/// kVarlen and the decode step's six-argument mods (ti the packed token);
/// entry attnc_linear_fwd_varlen.
KernelSource generateLinearForwardVarlen(const CompiledDefinition &Def,
                                         const LinearKernelSpec &Spec);

/// The backward of a packed batch: linear_bwd's entries with the kernels'
/// kVarlen (chunk slots per sequence, linear_chunk_seq.cuh) and six-argument
/// mods and derivatives (ti the packed token).
KernelSource generateLinearBackwardVarlen(const CompiledDefinition &Def,
                                          const LinearKernelSpec &Spec);

/// The recurrent decode step (runtime/kernels/linear_decode.cuh): the same
/// mods with an extra argument ti, the token's index in the call, at which
/// per-token custom inputs are read (t is its position in the sequence);
/// entry attnc_linear_decode. Spec.Config is not used (nor in the key).
KernelSource generateLinearDecode(const CompiledDefinition &Def,
                                  const LinearKernelSpec &Spec);

/// NAME.linear_fwd.DTYPE.dDxDV.ARCH.CONFIG and the same with linear_bwd;
/// NAME.linear_dec.DTYPE.dDxDV.ARCH for the decode step and
/// NAME.linear_fwd_varlen.DTYPE.dDxDV.ARCH.CONFIG for the packed forward
/// (linear_bwd_varlen for its backward).
std::string linearForwardKey(const CompiledDefinition &Def,
                             const LinearKernelSpec &Spec);
std::string linearBackwardKey(const CompiledDefinition &Def,
                              const LinearKernelSpec &Spec);
std::string linearDecodeKey(const CompiledDefinition &Def,
                            const LinearKernelSpec &Spec);
std::string linearForwardVarlenKey(const CompiledDefinition &Def,
                                   const LinearKernelSpec &Spec);
std::string linearBackwardVarlenKey(const CompiledDefinition &Def,
                                    const LinearKernelSpec &Spec);

/// True when \p Def's decay_mod reads the decay input (else the runtime
/// takes no decay tensor).
bool linearReadsDecay(const CompiledDefinition &Def);

} // namespace attn::codegen

#endif
