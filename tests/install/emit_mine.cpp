// Traces the consumer's definition and prints its IR (attnc::compiler),
// then makes an attn::runtime::Attention for it on sm_80, which generates
// the forward kernel and compiles it with NVRTC without a GPU
// (attnc::runtime), and prints the kernel the selector chose.
#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/ir/Printer.h"
#include "attn/runtime/Attention.h"

#include <cstdio>
#include <exception>

attn::dsl::AttentionDef softcapWindow();

int main() {
  try {
    attn::CompiledDefinition C = attn::compile(softcapWindow());
    std::printf("%s", attn::ir::toText(*C.Graph).c_str());
    attn::runtime::Signature Sig;
    Sig.Arch = attn::GpuArch::Sm80;
    attn::runtime::Attention Att(softcapWindow(), Sig);
    std::printf("kernel: %s\n", Att.forwardChoice().str().c_str());
    return 0;
  } catch (const std::exception &E) {
    std::fprintf(stderr, "emit_mine: %s\n", E.what());
    return 1;
  }
}
