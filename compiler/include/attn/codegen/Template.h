// A strict {{key}} template renderer: a missing or unused key is an error.
#ifndef ATTN_CODEGEN_TEMPLATE_H
#define ATTN_CODEGEN_TEMPLATE_H

#include "llvm/ADT/StringRef.h"

#include <map>
#include <string>

namespace attn::codegen {

/// Replaces every `{{key}}` of \p Text (keys: letters, digits, '_') by
/// \p Values[key]. Throws InternalError naming \p TemplateName and the key
/// when a slot has no value, when a value is never used, or when a `{{` is
/// not closed; templates are part of attnc, so these are attnc's bugs.
std::string render(llvm::StringRef TemplateName, llvm::StringRef Text,
                   const std::map<std::string, std::string> &Values);

} // namespace attn::codegen

#endif
