// The code templates (compiler/templates/*.cu.in), embedded at build time.
#ifndef ATTN_CODEGEN_TEMPLATES_H
#define ATTN_CODEGEN_TEMPLATES_H

#include "llvm/ADT/StringRef.h"

namespace attn::codegen {

/// The text of template \p Name ("fwd_sm80.cu.in"); InternalError if none.
llvm::StringRef templateText(llvm::StringRef Name);

} // namespace attn::codegen

#endif
