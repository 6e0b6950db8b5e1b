//===- EnvSwitch.h - 0/1 measurement switches read from the environment --===//
#ifndef ATTN_RUNTIME_ENVSWITCH_H
#define ATTN_RUNTIME_ENVSWITCH_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace attn::runtime {

/// The value of a 0/1 switch in environment variable \p Name: nullopt when
/// it is unset or empty, false for "0", true for "1". Any other value is a
/// UserError that names the variable and the value and says what 0 (\p Off)
/// and 1 (\p On) mean, so a typo never silently picks a path.
std::optional<bool> envSwitch(const char *Name, llvm::StringRef Off,
                              llvm::StringRef On);

} // namespace attn::runtime

#endif
