// What `attnc show` prints, for the CLI and for the C interface's
// definitions (which need not be in a registry).
#ifndef ATTN_TOOLS_ATTNC_SHOW_H
#define ATTN_TOOLS_ATTNC_SHOW_H

#include "attn/Pipeline.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace attn {

/// UsageError unless \p After is empty or one of pipelinePasses().
void checkShowPass(llvm::StringRef After);

/// The IR after each pass (only after \p After when given) and, for a
/// transformer definition, the mask analysis; with \p Json only the final
/// graph as IR JSON. \p Compile runs the pipeline, calling its argument after
/// each pass.
void printShow(
    llvm::function_ref<CompiledDefinition(const PassCallback &)> Compile,
    llvm::StringRef After, bool Json, llvm::raw_ostream &OS);

} // namespace attn

#endif
