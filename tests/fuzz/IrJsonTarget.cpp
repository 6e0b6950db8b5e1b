// Fuzz target: IR JSON → loadJSON (+ round trip) → pipeline → forward codegen.
#include "FuzzTargets.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/ir/Serialize.h"

#include <string>

namespace attn::fuzz {

Outcome fuzzIrJson(const uint8_t *Data, size_t Size) {
  std::string Text(reinterpret_cast<const char *>(Data), Size);
  return classify([&] {
    std::unique_ptr<ir::Graph> G = ir::loadJSON(Text);
    // Serialize.h promises that load(save(g)) saves exactly as g.
    std::string Saved = ir::saveJSON(*G);
    std::string Again = ir::saveJSON(*ir::loadJSON(Saved));
    if (Again != Saved)
      throw OracleFailure("ir_json: load(save(g)) does not save as g");
    bool Transformer = G->decls().Kind == ir::DefinitionKind::Transformer;
    CompiledDefinition Def = compileGraph(std::move(G));
    if (Transformer)
      (void)codegen::generateForward(Def, codegen::KernelSpec());
  });
}

} // namespace attn::fuzz
