// Lookup of the embedded code templates.
#include "attn/codegen/Templates.h"

#include "attn/Error.h"

#include "attnc_templates.h"

namespace attn::codegen {

llvm::StringRef templateText(llvm::StringRef Name) {
  for (const attn::embed::File &F : embedded::templates())
    if (F.Name == Name)
      return F.Contents;
  throw InternalError("no embedded template '" + Name.str() + "'");
}

} // namespace attn::codegen
