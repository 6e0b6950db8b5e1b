//===- EnvSwitch.cpp - 0/1 measurement switches read from the environment ===//
#include "EnvSwitch.h"

#include "attn/Error.h"

#include <cstdlib>
#include <string>

namespace attn::runtime {

std::optional<bool> envSwitch(const char *Name, llvm::StringRef Off,
                              llvm::StringRef On) {
  const char *Env = std::getenv(Name);
  if (!Env || !*Env)
    return std::nullopt;
  const llvm::StringRef V = Env;
  if (V == "0" || V == "1")
    return V == "1";
  throw UserError(std::string(Name) + "='" + V.str() + "': expected 0 (" +
                  Off.str() + ") or 1 (" + On.str() + ")");
}

} // namespace attn::runtime
