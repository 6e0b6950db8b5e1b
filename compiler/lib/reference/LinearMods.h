// The linear mods of one (batch, value head) in double precision with their
// derivatives, and the bookkeeping the linear gradients share: shapes,
// per-head work over threads, the chain rule into the raw inputs.
#ifndef ATTN_REFERENCE_LINEARMODS_H
#define ATTN_REFERENCE_LINEARMODS_H

#include "attn/reference/Linear.h"

#include <functional>
#include <vector>

namespace attn::reference::linear {

struct Dims {
  int64_t B, H, Hq, Hk, T, D, DV;
};

/// Checks the definition kind, the inputs, DO [B,H,T,DV] and the final
/// state's gradient [B,H,D,DV]; returns the sizes.
Dims checkBackwardInputs(const CompiledDefinition &Def, const LinearInputs &In,
                         const Tensor *DO, const Tensor *DFinal);

/// One mod over the rows of a (batch, head): values [T][dim], and with
/// derivatives ∂/∂element [T][dim] and ∂/∂input_i [input][T][dim].
struct ModRows {
  std::vector<std::vector<double>> Val, DX;
  std::vector<std::vector<std::vector<double>>> DIn;
};

/// q, k, v after their mods and g after decay_mod (as a one-column mod).
struct HeadMods {
  ModRows Q, K, V, G;
};

/// Evaluates the mods of (\p B, value head \p H): q from head H / (H/Hq),
/// k from H / (H/Hk), as the definition's functions read them. With
/// \p Derivs, also each mod's derivatives by forward-mode dual numbers.
HeadMods evalMods(const CompiledDefinition &Def, const LinearInputs &In,
                  const Dims &Dm, int64_t B, int64_t H, bool Derivs);

/// Gradients of one (batch, value head) w.r.t. the modded values: dq, dk
/// [T][D], dv [T][DV], dg [T], and of the initial state [D·DV].
struct HeadGrads {
  std::vector<std::vector<double>> DQ, DK, DV;
  std::vector<double> DG, DInit;
};

/// Runs \p PerHead(b, h) for every pair over \p Threads threads, then
/// \p Collect(b, h) for every pair in order (so sums into shared outputs
/// have a fixed order).
void forEachHead(const Dims &Dm, unsigned Threads,
                 const std::function<void(int64_t, int64_t)> &PerHead,
                 const std::function<void(int64_t, int64_t)> &Collect);

/// Zero gradients of the right shapes for \p In.
LinearGrads zeroGrads(const CompiledDefinition &Def, const LinearInputs &In,
                      const Dims &Dm);

/// Adds the chain rule of (b, h) into \p Out: the raw q/k/v gradients, the
/// decay's, the custom inputs', and the initial state's.
void chainRule(const CompiledDefinition &Def, const Dims &Dm, int64_t B,
               int64_t H, const HeadMods &M, const HeadGrads &HG,
               LinearGrads &Out);

} // namespace attn::reference::linear

#endif
