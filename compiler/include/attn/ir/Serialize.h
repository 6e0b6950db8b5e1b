// JSON save/load of a graph; load(save(g)) prints and saves exactly as g.
#ifndef ATTN_IR_SERIALIZE_H
#define ATTN_IR_SERIALIZE_H

#include "attn/ir/Graph.h"

#include <memory>
#include <string>

namespace attn::ir {

/// The format's version; load rejects any other.
constexpr int IRFormatVersion = 1;

/// Writes the declarations, the live nodes (in creation order, each with its
/// type and space) and the functions as JSON text. Non-finite constants are
/// written as the strings "inf", "-inf", "nan" and "-nan" (a NaN keeps its
/// sign bit); finite ones as JSON numbers with round-trip precision.
std::string saveJSON(const Graph &G);

/// Reads what saveJSON wrote, strictly (docs/ir-semantics.md lists the
/// schema): every field typed and range-checked without narrowing, no
/// unknown field, and every function the definition kind needs present with
/// its results. Nodes are rebuilt through the graph's builders and their
/// recorded type and space are checked against the recomputed ones. A
/// malformed or foreign document is a UserError naming the JSON pointer of
/// the problem ("IR JSON: /nodes/4/op: unknown op 'foo'").
std::unique_ptr<Graph> loadJSON(const std::string &Text);

} // namespace attn::ir

#endif
