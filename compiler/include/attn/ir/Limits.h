// Size limits of a definition's IR, checked while it is built (traced, loaded
// or transformed), so that no pass, evaluator or printer meets a graph deep
// enough to exhaust the stack or large enough to exhaust memory.
#ifndef ATTN_IR_LIMITS_H
#define ATTN_IR_LIMITS_H

namespace attn::ir {

/// The most nodes one definition's graph may hold (every function, the
/// derived backward and dead nodes included). Real variants use a few
/// hundred; a graph past this is a runaway loop in a definition.
inline constexpr unsigned MaxGraphNodes = 1u << 16;

/// The longest chain of operations from a node down to a leaf (a constant
/// has depth 0, exp(x) of a parameter depth 1). Passes that follow operands
/// recursively (the algebra of the autodiff pass, code generation) use a few
/// hundred bytes of stack a level, so this keeps them well inside the 8 MiB
/// of a thread; the derived backward is a few times deeper than the forward.
inline constexpr unsigned MaxNodeDepth = 1024;

} // namespace attn::ir

#endif
