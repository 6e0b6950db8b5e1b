// The attnc command line: parse, dispatch to one Command, report errors.
#include "AttncMain.h"
#include "Commands.h"

#include "attn/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <mutex>

namespace attn {

namespace cl = llvm::cl;

namespace {

/// Every subcommand, in the order --help lists them. Each registers its
/// options when made and unregisters them when destroyed, so attncMain can
/// run any number of times in a process and leaves nothing registered.
std::vector<std::unique_ptr<Command>> makeCommands() {
  std::vector<std::unique_ptr<Command>> Commands;
  Commands.push_back(makeListCommand());
  Commands.push_back(makeShowCommand());
  Commands.push_back(makeCheckCommand());
  Commands.push_back(makeEmitCommand());
  Commands.push_back(makeCompileCommand());
  Commands.push_back(makeCacheCommand());
  Commands.push_back(makeTuneCommand());
  Commands.push_back(makeBenchCommand());
  return Commands;
}

/// The overview --help prints: one line per command, its usage and its
/// description.
std::string overview(const std::vector<std::unique_ptr<Command>> &Commands) {
  size_t Width = 0;
  for (const std::unique_ptr<Command> &C : Commands)
    Width = std::max(Width, C->usage().size());
  std::string Text = "attnc: an attention compiler\n\n";
  for (const std::unique_ptr<Command> &C : Commands)
    Text += fmt::format("  attnc {:<{}}  {}\n", C->usage().str(), Width,
                        C->description().str());
  return Text;
}

} // namespace

int attncMain(int Argc, const char *const *Argv,
              const dsl::Registry &Registry) {
  // The first call drops what libraries registered at static
  // initialisation, so that only attnc's options are offered; every call
  // then starts from the default values. The commands unregister their
  // options when they go out of scope.
  static std::once_flag DropStaticOptions;
  std::call_once(DropStaticOptions, cl::ResetCommandLineParser);
  cl::ResetAllOptionOccurrences();
  cl::SetVersionPrinter(
      [](llvm::raw_ostream &OS) { OS << "attnc " << ATTNC_VERSION << "\n"; });
  std::vector<std::unique_ptr<Command>> Commands = makeCommands();
  std::string Overview = overview(Commands);
  std::string Errors;
  llvm::raw_string_ostream ErrStream(Errors);
  bool Ok = cl::ParseCommandLineOptions(Argc, Argv, Overview, &ErrStream);
  ErrStream.flush();
  if (!Ok) {
    llvm::StringRef First = llvm::StringRef(Errors).split('\n').first.trim();
    llvm::errs() << (First.empty() ? "attnc: bad command line" : First)
                 << "\n";
    return 2;
  }
  try {
    for (std::unique_ptr<Command> &C : Commands)
      if (C->given())
        return C->run(Registry, llvm::outs());
    llvm::errs() << "attnc: no command given; try 'attnc --help'\n";
    return 2;
  } catch (const UsageError &E) {
    llvm::outs().flush();
    llvm::errs() << "attnc: error: " << E.what() << "\n";
    return 2;
  } catch (const UserError &E) {
    llvm::outs().flush();
    llvm::errs() << "attnc: error: " << E.what() << "\n";
    return 1;
  } catch (const Error &E) {
    llvm::outs().flush();
    llvm::errs() << "attnc: " << E.what() << "\n";
    return 1;
  } catch (const std::exception &E) {
    // Not one of attnc's errors (std::bad_alloc, or a user's function that
    // threw): report it as an internal error rather than terminate.
    llvm::outs().flush();
    llvm::errs() << "attnc: internal error: " << E.what() << "\n";
    return 1;
  }
}

} // namespace attn
