// The attnc command line: list, show and check definitions.
#include "AttncMain.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Serialize.h"
#include "attn/reference/Checker.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

namespace attn {

namespace cl = llvm::cl;

namespace {

/// The options of every subcommand. They live in one object per call so
/// that attncMain can run more than once in a process (tests do).
struct Options {
  cl::SubCommand List{"list", "List the registered definitions"};
  cl::SubCommand Show{"show", "Print a definition's IR after each pass"};
  cl::SubCommand Check{
      "check", "Check definitions with the double-precision reference"};

  cl::opt<std::string> ShowName{cl::Positional, cl::desc("<definition>"),
                                cl::Required, cl::sub(Show)};
  cl::opt<std::string> After{
      "after",
      cl::desc("Print the IR only after this pass (trace, verify, "
               "row-reduce, simplify, dce)"),
      cl::value_desc("pass"), cl::sub(Show)};
  cl::opt<bool> Json{"json", cl::desc("Print the final IR as JSON"),
                     cl::sub(Show)};

  cl::list<std::string> CheckNames{cl::Positional, cl::desc("<definition>..."),
                                   cl::sub(Check)};
  cl::opt<bool> All{"all", cl::desc("Check every registered definition"),
                    cl::sub(Check)};
  cl::opt<unsigned long long> Seed{
      "seed", cl::desc("Seed of the random inputs"), cl::init(20261126),
      cl::sub(Check)};
};

int runList(const dsl::Registry &Registry, llvm::raw_ostream &OS) {
  size_t Width = 4;
  for (const dsl::DefinitionBase *D : Registry.all())
    Width = std::max(Width, D->name.size());
  for (const dsl::DefinitionBase *D : Registry.all())
    OS << fmt::format("{:<{}}  {:<9}  {}\n", D->name, Width,
                      ir::definitionKindName(D->kind()).str(),
                      D->description);
  return 0;
}

int runShow(const Options &O, const dsl::Registry &Registry,
            llvm::raw_ostream &OS) {
  const std::vector<std::string> &Passes = pipelinePasses();
  if (!O.After.empty() && !llvm::is_contained(Passes, O.After.getValue()))
    throw UserError("show: unknown pass '" + O.After +
                    "'; passes: trace, verify, row-reduce, simplify, dce");
  const dsl::DefinitionBase &Def = Registry.get(O.ShowName);
  CompiledDefinition C = compile(Def, [&](llvm::StringRef Pass,
                                          const ir::Graph &G) {
    if (O.Json)
      return;
    if (!O.After.empty() && Pass != O.After)
      return;
    OS << "// ----- IR after " << Pass << " -----\n";
    ir::printGraph(G, OS);
    OS << "\n";
  });
  if (O.Json)
    OS << ir::saveJSON(*C.Graph);
  return 0;
}

int runCheck(const Options &O, const dsl::Registry &Registry,
             llvm::raw_ostream &OS) {
  std::vector<const dsl::DefinitionBase *> Defs;
  if (O.All) {
    if (!O.CheckNames.empty())
      throw UserError("check: give definition names or --all, not both");
    Defs = Registry.all();
  } else {
    if (O.CheckNames.empty())
      throw UserError("check: name a definition or pass --all");
    for (const std::string &N : O.CheckNames)
      Defs.push_back(&Registry.get(N));
  }
  reference::CheckOptions Opts;
  Opts.Seed = O.Seed;
  unsigned Failed = 0;
  for (const dsl::DefinitionBase *D : Defs) {
    reference::CheckReport R = reference::check(compile(*D), Opts);
    reference::printReport(R, OS);
    OS << "\n";
    Failed += !R.passed();
  }
  OS << fmt::format("{} passed, {} failed\n", Defs.size() - Failed, Failed);
  return Failed ? 1 : 0;
}

} // namespace

int attncMain(int Argc, const char *const *Argv,
              const dsl::Registry &Registry) {
  cl::ResetCommandLineParser();
  Options O;
  std::string Errors;
  llvm::raw_string_ostream ErrStream(Errors);
  bool Ok = cl::ParseCommandLineOptions(
      Argc, Argv,
      "attnc: an attention compiler\n\n"
      "  attnc list                      the registered definitions\n"
      "  attnc show NAME [--after PASS]  IR after each pass (or one)\n"
      "  attnc check NAME... | --all     reference checks in double "
      "precision\n",
      &ErrStream);
  ErrStream.flush();
  if (!Ok) {
    llvm::StringRef First = llvm::StringRef(Errors).split('\n').first.trim();
    llvm::errs() << (First.empty() ? "attnc: bad command line" : First)
                 << "\n";
    return 2;
  }
  try {
    if (O.List)
      return runList(Registry, llvm::outs());
    if (O.Show)
      return runShow(O, Registry, llvm::outs());
    if (O.Check)
      return runCheck(O, Registry, llvm::outs());
    llvm::errs() << "attnc: no command given; try 'attnc --help'\n";
    return 2;
  } catch (const UserError &E) {
    llvm::outs().flush();
    llvm::errs() << "attnc: error: " << E.what() << "\n";
    return 1;
  } catch (const Error &E) {
    llvm::outs().flush();
    llvm::errs() << "attnc: " << E.what() << "\n";
    return 1;
  }
}

} // namespace attn
