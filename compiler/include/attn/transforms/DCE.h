// Dead-node elimination.
#ifndef ATTN_TRANSFORMS_DCE_H
#define ATTN_TRANSFORMS_DCE_H

#include "attn/ir/Graph.h"

#include <memory>

namespace attn::transforms {

/// A copy of \p G holding only the nodes some function result reaches (a
/// bump-allocated graph cannot free nodes, so DCE rebuilds it). Functions,
/// declarations and the name are kept.
std::unique_ptr<ir::Graph> eliminateDeadNodes(const ir::Graph &G);

} // namespace attn::transforms

#endif
