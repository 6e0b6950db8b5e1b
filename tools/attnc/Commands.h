// What subcommands of attnc share: options that leave LLVM's global parser
// when destroyed, the usage error (exit status 2), and the interface of the
// subcommands that live in their own files (tune, bench).
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

/// A command line that parses but asks for something impossible (an unknown
/// pass, a malformed --shape): bad usage, exit status 2.
class UsageError : public UserError {
public:
  using UserError::UserError;
};

/// A subcommand defined in its own file. It registers its options when
/// made (so make it before parsing) and unregisters them when destroyed.
class Command {
public:
  virtual ~Command();
  /// True when the command line named this subcommand.
  virtual bool given() const = 0;
  /// Runs it; the result is attnc's exit status. Errors are thrown as in
  /// the other subcommands (UsageError: 2; other attn errors: 1).
  virtual int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) = 0;
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

/// `attnc tune` (TuneCommand.cpp) and `attnc bench` (BenchCommand.cpp).
std::unique_ptr<Command> makeTuneCommand();
std::unique_ptr<Command> makeBenchCommand();

} // namespace attn

#endif
