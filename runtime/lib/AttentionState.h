// The members of an Attention whose types are private to the runtime (the
// compiled definition, the selector's targets and choices), so that
// attn/runtime/Attention.h stays a public header.
#ifndef ATTN_RUNTIME_LIB_ATTENTIONSTATE_H
#define ATTN_RUNTIME_LIB_ATTENTIONSTATE_H

#include "attn/Pipeline.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Selector.h"

#include <optional>

namespace attn::runtime {

struct Attention::State {
  /// Compiles nothing: \p D is the compiled definition (UserError if it is
  /// linear); the forward's selector and the backward's target and policy
  /// are made for \p S on \p Arch.
  State(CompiledDefinition D, const Signature &S, GpuArch Arch);

  CompiledDefinition Def;
  KernelSelector Fwd;
  std::optional<KernelChoice> DecodeRule;
  KernelTarget BwdTarget;
  KernelPolicy BwdPolicy;
  std::optional<KernelSelector> Bwd;
};

} // namespace attn::runtime

#endif
