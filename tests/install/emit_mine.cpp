// Traces the consumer's definition, prints its IR and compiles its forward
// kernel with NVRTC for sm_80 (no GPU needed): the libraries and headers of
// the installed package, used directly.
#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/ir/Printer.h"

#include <cstdio>
#include <exception>

attn::dsl::AttentionDef softcapWindow();

int main() {
  try {
    attn::CompiledDefinition C = attn::compile(softcapWindow());
    std::printf("%s", attn::ir::toText(*C.Graph).c_str());
    return 0;
  } catch (const std::exception &E) {
    std::fprintf(stderr, "emit_mine: %s\n", E.what());
    return 1;
  }
}
