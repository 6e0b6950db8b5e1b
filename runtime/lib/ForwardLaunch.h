// The kernel arguments of a validated forward call, shared by the backends.
#ifndef ATTN_RUNTIME_FORWARDLAUNCH_H
#define ATTN_RUNTIME_FORWARDLAUNCH_H

#include "attn/runtime/Backend.h"

// The argument structs, shared with the device code so that the layouts
// agree by construction.
#include "../kernels/attention_args.cuh"

#include <cstdint>
#include <vector>

namespace attn::runtime {

struct ForwardLaunch {
  attnc::FwdArgs Args{};
  /// The generated Inputs struct as 8-byte slots (codegen/InputLayout.h).
  std::vector<uint64_t> InputSlots;
};

/// The generated Inputs struct as 8-byte slots (codegen/InputLayout.h) from
/// validated custom-input values; every kernel of a definition (forward,
/// reference, backward) takes its inputs this way.
std::vector<uint64_t> inputSlots(const ir::Graph &G, const CallShape &C,
                                 const InputMap &Inputs);

/// FwdArgs and input slots for a call; \p BlockM and \p BlockN give the
/// block counts (a kernel without tiles passes 1 and 1).
ForwardLaunch makeForwardLaunch(const ir::Graph &G, const CallShape &C,
                                const ForwardTensors &T, const InputMap &Inputs,
                                int BlockM, int BlockN);

} // namespace attn::runtime

#endif
