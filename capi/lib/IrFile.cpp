// Definitions that are IR graphs (an IR JSON file's, a plugin's), and the
// pipeline for every kind of C-interface definition.
#include "DslInternal.h"

#include "attn/Error.h"
#include "attn/ir/Serialize.h"

using namespace attn;
using namespace attn::capi;

namespace attn::capi {

CompiledDefinition compileDefinition(const attnc_definition &D,
                                     const PassCallback &AfterPass) {
  if (D.Def)
    return compile(*D.Def, AfterPass);
  if (!D.GraphJson)
    throw InternalError("a definition handle with neither a definition nor "
                        "a graph");
  std::unique_ptr<ir::Graph> G = ir::loadJSON(*D.GraphJson);
  if (AfterPass)
    AfterPass(D.GraphOrigin, *G);
  return compileGraph(std::move(G), AfterPass);
}

const std::string &definitionName(const attnc_definition &D) {
  return D.Def ? D.Def->name : D.GraphName;
}

ir::DefinitionKind definitionKind(const attnc_definition &D) {
  return D.Def ? D.Def->kind() : D.GraphKind;
}

/// A handle for the graph in \p Json (from \p Origin: "trace" or "load"),
/// loaded and compiled once so that its mistakes are reported now.
attnc_definition *graphDefinition(std::string Json, std::string Origin) {
  std::unique_ptr<ir::Graph> G = ir::loadJSON(Json);
  attnc_definition D;
  D.GraphName = G->name();
  D.GraphKind = G->decls().Kind;
  (void)compileGraph(std::move(G));
  D.GraphJson = std::make_shared<const std::string>(std::move(Json));
  D.GraphOrigin = std::move(Origin);
  return new attnc_definition(std::move(D));
}

} // namespace attn::capi

attnc_status attnc_definition_from_ir_json(const char *text,
                                           attnc_definition **out) {
  return guarded([&] {
    requireNonNull(text, "attnc_definition_from_ir_json", "text");
    requireNonNull(out, "attnc_definition_from_ir_json", "out");
    *out = nullptr;
    *out = graphDefinition(text, "load");
  });
}
