// Makes an attn::runtime::Attention for the consumer's definition on sm_80,
// which traces and compiles the definition (attnc::compiler), generates the
// forward kernel and compiles it with NVRTC without a GPU (attnc::runtime),
// and prints the kernel's key and its entry points. It includes public
// headers only, and is built with no LLVM include directory.
#include "attn/dsl/Definition.h"
#include "attn/runtime/Attention.h"

#include <cstdio>
#include <exception>

attn::dsl::AttentionDef softcapWindow();

int main() {
  try {
    attn::runtime::Signature Sig;
    Sig.Arch = attn::GpuArch::Sm80;
    attn::runtime::Attention Att(softcapWindow(), Sig);
    const attn::codegen::KernelSource &Src = Att.source();
    std::printf("kernel: %s\n", Src.Key.c_str());
    for (const std::string &Entry : Src.Entries)
      std::printf("entry: %s\n", Entry.c_str());
    return 0;
  } catch (const std::exception &E) {
    std::fprintf(stderr, "emit_mine: %s\n", E.what());
    return 1;
  }
}
