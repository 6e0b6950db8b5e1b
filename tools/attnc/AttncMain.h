// The attnc command line as a library: a user's own definitions get the same
// CLI by linking attnc_main and calling attncMain with their registry.
#ifndef ATTN_TOOLS_ATTNC_MAIN_H
#define ATTN_TOOLS_ATTNC_MAIN_H

#include "attn/dsl/Registry.h"

namespace attn {

/// Runs the attnc CLI over the definitions in \p Registry; returns the exit
/// code (0 success, 1 a failed check, a user error or an internal error, 2
/// bad usage). It may be called any number of times in one process: its
/// options leave llvm::cl's global parser when it returns. (--help and
/// --version print and exit the process, as llvm::cl does.)
int attncMain(int Argc, const char *const *Argv,
              const dsl::Registry &Registry);

} // namespace attn

#endif
