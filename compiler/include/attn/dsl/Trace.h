// Tracing: call the user's functions on symbolic placeholders to build the IR.
#ifndef ATTN_DSL_TRACE_H
#define ATTN_DSL_TRACE_H

#include "attn/dsl/Definition.h"
#include "attn/ir/Graph.h"

#include <memory>

namespace attn::dsl {

/// Traces \p Def into a fresh graph: one function per DSL function
/// (score_mod, mask_mod, online_fwd, online_fwd_epilogue, forward, backward;
/// or q_mod, k_mod, v_mod, decay_mod), with the declarations. Checks what
/// tracing can see (names, result kinds, which inputs a function may read)
/// and throws a UserError naming the function and symbol otherwise.
std::unique_ptr<ir::Graph> trace(const DefinitionBase &Def);

} // namespace attn::dsl

#endif
