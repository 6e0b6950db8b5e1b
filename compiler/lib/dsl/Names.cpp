// Name rules for user-chosen names.
#include "attn/dsl/Names.h"

#include "attn/Error.h"

#include "llvm/ADT/StringExtras.h"

namespace attn::dsl {

void checkIdentifier(std::string_view WhatText, std::string_view NameText) {
  llvm::StringRef What = WhatText, Name = NameText;
  bool Ok = !Name.empty() && (llvm::isAlpha(Name[0]) || Name[0] == '_');
  for (char C : Name)
    Ok = Ok && (llvm::isAlnum(C) || C == '_');
  if (!Ok)
    throw UserError(What.str() + " '" + Name.str() +
                    "': not a valid name; use letters, digits and '_', "
                    "starting with a letter or '_'");
}

} // namespace attn::dsl
