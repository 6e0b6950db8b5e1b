// The attnc command line as a library: a user's own definitions get the same
// CLI by linking attnc_main and calling attncMain with their registry.
#ifndef ATTN_TOOLS_ATTNC_MAIN_H
#define ATTN_TOOLS_ATTNC_MAIN_H

#include "attn/dsl/Registry.h"

#include <functional>

namespace attn {

/// Runs the attnc CLI over the definitions in \p Registry; returns the exit
/// status (docs/cli.md: 0 success; 1 a definition error, a failed check or
/// a failure while running; 2 bad usage). Errors, output errors on stdout
/// included, are reported on stderr as `attnc: error: ...`. It may be called
/// any number of times in one process: its options leave llvm::cl's global
/// parser when it returns. (--help and --version print and exit the
/// process, as llvm::cl does.)
int attncMain(int Argc, const char *const *Argv,
              const dsl::Registry &Registry);

/// The same over the registry that \p Register fills: a program's main
/// passes the function that adds its definitions, and a mistake found while
/// registering (a duplicate or malformed name, an input declared twice, ...)
/// is reported like any other definition error (exit status 1) instead of
/// escaping main.
int attncMain(int Argc, const char *const *Argv,
              const std::function<void(dsl::Registry &)> &Register);

} // namespace attn

#endif
