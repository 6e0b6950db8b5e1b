// Name rules for rowscales, inputs and definitions (they become C++ names).
#ifndef ATTN_DSL_NAMES_H
#define ATTN_DSL_NAMES_H

#include <string_view>

namespace attn::dsl {

/// UserError unless \p Name is a C identifier: "\p What 'x y': not a valid
/// name; ...".
void checkIdentifier(std::string_view What, std::string_view Name);

} // namespace attn::dsl

#endif
