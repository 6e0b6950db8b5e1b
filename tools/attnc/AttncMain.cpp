// The attnc command line: parse, dispatch to one Command, report errors.
#include "AttncMain.h"
#include "Commands.h"

#include "attn/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
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
  Commands.push_back(makeBundleCommand());
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

/// Runs \p Body, reporting what it throws on stderr as the exit status
/// that kind of error has (docs/cli.md, "Exit status and errors").
template <typename Fn> int reportingErrors(Fn Body) {
  auto Report = [](llvm::StringRef Prefix, const char *What, int Status) {
    llvm::outs().flush();
    llvm::errs() << Prefix << What << "\n";
    return Status;
  };
  try {
    return Body();
  } catch (const UsageError &E) {
    return Report("attnc: error: ", E.what(), ExitUsage);
  } catch (const UserError &E) {
    return Report("attnc: error: ", E.what(), ExitFailure);
  } catch (const Error &E) {
    return Report("attnc: ", E.what(), ExitFailure);
  } catch (const std::exception &E) {
    // Not one of attnc's errors (std::bad_alloc, or a user's function that
    // threw): report it as an internal error rather than terminate.
    return Report("attnc: internal error: ", E.what(), ExitFailure);
  }
}

/// \p Status, or ExitFailure with a message when stdout could not be
/// written (closed, a full disk, /dev/full). The stream's error is cleared:
/// left set, llvm::outs() would abort the process when destroyed at exit.
int checkStdout(int Status) {
  llvm::raw_fd_ostream &Out = llvm::outs();
  Out.flush();
  if (!Out.has_error())
    return Status;
  std::error_code EC = Out.error();
  Out.clear_error();
  llvm::errs() << "attnc: error: cannot write to stdout: " << EC.message()
               << "\n";
  return Status == ExitOk ? int(ExitFailure) : Status;
}

/// --help and --version print and exit the process inside llvm::cl, past
/// checkStdout: this exit handler reports their failed output the same way.
/// llvm::outs() is made first, so the handler runs before its destructor
/// (which would abort over the error).
void checkStdoutAtExit() {
  llvm::outs();
  std::atexit([] {
    if (checkStdout(ExitOk) != ExitOk)
      std::_Exit(ExitFailure);
  });
}

} // namespace

int attncMain(int Argc, const char *const *Argv,
              const std::function<void(dsl::Registry &)> &Register) {
  dsl::Registry Registry;
  int Status = reportingErrors([&] {
    Register(Registry);
    return int(ExitOk);
  });
  if (Status != ExitOk)
    return checkStdout(Status);
  return attncMain(Argc, Argv, Registry);
}

int attncMain(int Argc, const char *const *Argv,
              const dsl::Registry &Registry) {
  // The first call drops what libraries registered at static
  // initialisation, so that only attnc's options are offered; every call
  // then starts from the default values. The commands unregister their
  // options when they go out of scope.
  static std::once_flag DropStaticOptions;
  std::call_once(DropStaticOptions, [] {
    cl::ResetCommandLineParser();
    checkStdoutAtExit();
  });
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
    return ExitUsage;
  }
  int Status = reportingErrors([&] {
    for (std::unique_ptr<Command> &C : Commands)
      if (C->given())
        return C->run(Registry, llvm::outs());
    llvm::errs() << "attnc: no command given; try 'attnc --help'\n";
    return int(ExitUsage);
  });
  return checkStdout(Status);
}

} // namespace attn
