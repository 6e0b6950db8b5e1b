// The compiler pipeline, one readable function from definition to analysed IR.
#ifndef ATTN_PIPELINE_H
#define ATTN_PIPELINE_H

#include "attn/analysis/RowReduce.h"
#include "attn/dsl/Definition.h"
#include "attn/ir/Graph.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attn {

/// A definition after the pipeline: the simplified graph and its analysis.
struct CompiledDefinition {
  std::unique_ptr<ir::Graph> Graph;
  analysis::RowReduceInfo Info;
};

/// Called after each pass with the pass's name and the graph it left.
using PassCallback = std::function<void(llvm::StringRef Pass,
                                        const ir::Graph &G)>;

/// The passes in order: trace, verify, row-reduce, autodiff, simplify, dce.
const std::vector<std::string> &pipelinePasses();

/// trace → verify → row-reduce analysis → autodiff (score_mod gradients,
/// see transforms/Autodiff.h) → simplify → DCE → verify → analysis
/// of the final graph. \p AfterPass (if set) sees the graph after each pass;
/// with ATTNC_DUMP_IR=after-all in the environment each graph is also
/// printed to stderr.
CompiledDefinition compile(const dsl::DefinitionBase &Def,
                           const PassCallback &AfterPass = {});

/// The same pipeline from a graph already traced (e.g. loaded from JSON).
CompiledDefinition compileGraph(std::unique_ptr<ir::Graph> G,
                                const PassCallback &AfterPass = {});

/// A copy of \p Def whose backward is the one the autodiff pass derives,
/// whether or not the user wrote one (to compare the two). When the
/// derivation fails the copy has no backward and
/// decls().BackwardUnavailable says why (transforms::requireBackward).
CompiledDefinition withDerivedBackward(const CompiledDefinition &Def);

} // namespace attn

#endif
