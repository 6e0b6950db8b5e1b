// The compiler pipeline.
#include "attn/Pipeline.h"

#include "attn/dsl/Trace.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Verifier.h"
#include "attn/transforms/Autodiff.h"
#include "attn/transforms/DCE.h"
#include "attn/transforms/Simplify.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdlib>

namespace attn {

const std::vector<std::string> &pipelinePasses() {
  static const std::vector<std::string> Passes = {"trace", "verify",
                                                  "row-reduce", "autodiff",
                                                  "simplify", "dce"};
  return Passes;
}

static void after(llvm::StringRef Pass, const ir::Graph &G,
                  const PassCallback &AfterPass) {
  if (AfterPass)
    AfterPass(Pass, G);
  const char *Dump = std::getenv("ATTNC_DUMP_IR");
  if (Dump && llvm::StringRef(Dump) == "after-all") {
    llvm::errs() << "// ----- IR after " << Pass << " -----\n";
    ir::printGraph(G, llvm::errs());
  }
}

CompiledDefinition compileGraph(std::unique_ptr<ir::Graph> G,
                                const PassCallback &AfterPass) {
  ir::verify(*G);
  after("verify", *G, AfterPass);
  analysis::analyzeRowReduce(*G);
  after("row-reduce", *G, AfterPass);
  transforms::autodiff(*G);
  after("autodiff", *G, AfterPass);
  transforms::simplify(*G);
  after("simplify", *G, AfterPass);
  G = transforms::eliminateDeadNodes(*G);
  ir::verify(*G);
  after("dce", *G, AfterPass);
  CompiledDefinition Out;
  Out.Info = analysis::analyzeRowReduce(*G);
  Out.Graph = std::move(G);
  return Out;
}

CompiledDefinition withDerivedBackward(const CompiledDefinition &Def) {
  std::unique_ptr<ir::Graph> G = transforms::eliminateDeadNodes(*Def.Graph);
  std::vector<ir::Function> &Fs = G->functions();
  Fs.erase(std::remove_if(Fs.begin(), Fs.end(),
                          [](const ir::Function &F) {
                            return F.Name == "backward";
                          }),
           Fs.end());
  ir::Declarations &D = G->decls();
  D.HasBackward = D.BackwardDerived = false;
  D.BackwardUnavailable.clear();
  return compileGraph(std::move(G));
}

CompiledDefinition compile(const dsl::DefinitionBase &Def,
                           const PassCallback &AfterPass) {
  std::unique_ptr<ir::Graph> G = dsl::trace(Def);
  after("trace", *G, AfterPass);
  return compileGraph(std::move(G), AfterPass);
}

} // namespace attn
