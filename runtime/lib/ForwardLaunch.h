// The kernel arguments of a validated forward call, shared by the backends.
#ifndef ATTN_RUNTIME_FORWARDLAUNCH_H
#define ATTN_RUNTIME_FORWARDLAUNCH_H

#include "attn/runtime/Backend.h"

// The argument structs, shared with the device code so that the layouts
// agree by construction.
#include "../kernels/attention_args.cuh"

#include <cstdint>
#include <initializer_list>
#include <utility>
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

/// Stride triples into a kernel's arguments: each pair's three strides
/// (batch, head, token) go to the three consecutive fields x_sb, x_sh, x_ss
/// whose first the pair points at.
void copyStrides(
    std::initializer_list<std::pair<long long *, const int64_t *>> Fields);

/// The fields that FwdArgs and DecodeArgs share: q, k, v, o, finals, their
/// strides and the call's sizes.
template <typename Args>
void fillCallArgs(Args &A, const CallShape &C, const ForwardTensors &T) {
  A.q = T.Q.Data;
  A.k = T.K.Data;
  A.v = T.V.Data;
  A.o = T.Out.Data;
  A.finals = T.Finals ? static_cast<float *>(T.Finals->Data) : nullptr;
  copyStrides({{&A.q_sb, C.Q}, {&A.k_sb, C.K}, {&A.v_sb, C.V}, {&A.o_sb, C.O}});
  A.batch = int(C.B);
  A.heads = int(C.H);
  A.heads_kv = int(C.Hkv);
  A.seq_q = int(C.Sq);
  A.seq_kv = int(C.Skv);
}

/// FwdArgs and input slots for a call; \p BlockM and \p BlockN give the
/// block counts (a kernel without tiles passes 1 and 1).
ForwardLaunch makeForwardLaunch(const ir::Graph &G, const CallShape &C,
                                const ForwardTensors &T, const InputMap &Inputs,
                                int BlockM, int BlockN);

} // namespace attn::runtime

#endif
