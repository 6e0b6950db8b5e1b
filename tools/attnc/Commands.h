// What subcommands of attnc share: options that leave LLVM's global parser
// when destroyed, the usage error (exit status 2), and the Command interface
// every subcommand implements.
#ifndef ATTN_TOOLS_ATTNC_COMMANDS_H
#define ATTN_TOOLS_ATTNC_COMMANDS_H

#include "attn/Error.h"
#include "attn/dsl/Problem.h"
#include "attn/dsl/Registry.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>

namespace attn {

/// A llvm::cl::SubCommand that leaves LLVM's global command-line parser when
/// it is destroyed. (A plain one stays registered, and the parser's next
/// reset or parse walks the freed object.)
class CallSubCommand : public llvm::cl::SubCommand {
public:
  using llvm::cl::SubCommand::SubCommand;
  CallSubCommand(const CallSubCommand &) = delete;
  CallSubCommand &operator=(const CallSubCommand &) = delete;
  ~CallSubCommand() { unregisterSubCommand(); }
};

/// A cl::opt or cl::list that leaves the global parser when it is destroyed.
template <typename OptionT> class CallOption : public OptionT {
public:
  using OptionT::OptionT;
  ~CallOption() { this->removeArgument(); }
};
template <typename T> using CallOpt = CallOption<llvm::cl::opt<T>>;
template <typename T> using CallList = CallOption<llvm::cl::list<T>>;

/// The options that name a problem, shared by `tune` and `bench`: the
/// definition, --shape, --qk-heads, --dtype, --layout and --arch, registered
/// on \p Sub.
struct ProblemOptions {
  explicit ProblemOptions(llvm::cl::SubCommand &Sub);
  CallOpt<std::string> Name;
  CallOpt<std::string> Shape;
  CallOpt<int> QkHeads;
  CallOpt<std::string> Dtype;
  CallOpt<std::string> LayoutOpt;
  CallOpt<std::string> Arch;
};

/// attnc's exit statuses, the same for every command (docs/cli.md, "Exit
/// status and errors").
enum ExitStatus : int {
  ExitOk = 0,
  /// A definition error, a failed check, or a failure while running (no
  /// GPU, NVRTC, a file that cannot be read or written, ...).
  ExitFailure = 1,
  /// Bad usage: the command line itself is wrong.
  ExitUsage = 2,
};

/// A command line that parses but is wrong: a malformed, unknown or empty
/// option value (an unknown pass, action or backend, a malformed --shape or
/// --config), a missing or conflicting option. Exit status 2.
class UsageError : public UserError {
public:
  using UserError::UserError;
};

/// Runs \p Parse (which parses an option's value with a library function
/// that throws UserError for a malformed one) and rethrows its UserError as
/// a UsageError with the same message.
template <typename Fn> auto parseOptionValue(Fn Parse) -> decltype(Parse()) {
  try {
    return Parse();
  } catch (const UsageError &) {
    throw;
  } catch (const UserError &E) {
    throw UsageError(E.what());
  }
}

/// UsageError when \p Opt was given an empty value (`--arch=`), which would
/// otherwise quietly mean its default; \p Expected says what it takes.
void rejectEmptyValue(const llvm::cl::opt<std::string> &Opt,
                      llvm::StringRef Expected);

/// One subcommand (verb) of attnc. Making it registers its subcommand and,
/// in a subclass, its options (so make it before parsing); destroying it
/// unregisters them: a subclass's option members go first, then the base's
/// subcommand they name.
class Command {
public:
  /// \p Name, \p Usage and \p Description must outlive the command (string
  /// literals): llvm::cl keeps references.
  Command(llvm::StringRef Name, llvm::StringRef Usage,
          llvm::StringRef Description);
  virtual ~Command();
  Command(const Command &) = delete;
  Command &operator=(const Command &) = delete;

  llvm::StringRef name() const { return Sub.getName(); }
  /// Its synopsis without the program name: "show NAME [--after PASS]".
  llvm::StringRef usage() const { return Usage; }
  /// One line, also the subcommand's description in --help.
  llvm::StringRef description() const { return Sub.getDescription(); }
  /// True when the command line named this subcommand.
  bool given() const { return bool(Sub); }
  /// Runs it; the result is attnc's exit status. Errors are thrown
  /// (UsageError: 2; other attn errors: 1).
  virtual int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) = 0;

protected:
  CallSubCommand Sub;

private:
  llvm::StringRef Usage;
};

/// --shape B,H,S,D[,DV]: batch, heads, sequence length (queries and keys),
/// head dim of q/k and of v (DV defaults to D).
struct ShapeArg {
  int64_t Batch = 0, Heads = 0, Seq = 0;
  int HeadDim = 0, HeadDimV = 0;
};
/// UsageError naming the option and the expected form.
ShapeArg parseShapeArg(const std::string &Text);
DType parseDtypeArg(const std::string &Text);
Layout parseLayoutArg(const std::string &Text);

/// The commands, one file (or small group) each: list, show and check
/// (DefinitionCommands.cpp), emit and compile (KernelCommands.cpp), cache
/// (CacheCommand.cpp), tune (TuneCommand.cpp), bench (BenchCommand.cpp),
/// bundle (BundleCommand.cpp).
std::unique_ptr<Command> makeListCommand();
std::unique_ptr<Command> makeShowCommand();
std::unique_ptr<Command> makeCheckCommand();
std::unique_ptr<Command> makeEmitCommand();
std::unique_ptr<Command> makeCompileCommand();
std::unique_ptr<Command> makeCacheCommand();
std::unique_ptr<Command> makeTuneCommand();
std::unique_ptr<Command> makeBenchCommand();
std::unique_ptr<Command> makeBundleCommand();

} // namespace attn

#endif
