// The stable text form of the IR: `%3 = exp %2 : f32 row`.
#ifndef ATTN_IR_PRINTER_H
#define ATTN_IR_PRINTER_H

#include "attn/ir/Graph.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace attn::ir {

/// Prints the declarations and every function of \p G. Values are numbered
/// per function in creation order; each line ends with `: type space`, so
/// per-row and per-element values are told apart at a glance.
void printGraph(const Graph &G, llvm::raw_ostream &OS);

/// Prints one function of \p G.
void printFunction(const Graph &G, const Function &F, llvm::raw_ostream &OS);

/// The graph's text form as a string.
std::string toText(const Graph &G);

/// A one-line expression for error messages, e.g. `m - max(m, reduce_max(s))`;
/// subexpressions deeper than \p Depth print as `…`.
std::string shortExpr(const Node *N, unsigned Depth = 4);

/// A number the way the printer writes it (shortest round-trip, inf, nan).
std::string formatNumber(double V);

} // namespace attn::ir

#endif
