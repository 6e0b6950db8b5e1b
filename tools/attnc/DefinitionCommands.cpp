// attnc list, show and check: the commands that look at definitions without
// generating a kernel.
#include "Commands.h"
#include "Progress.h"
#include "Show.h"

#include "attn/Pipeline.h"
#include "attn/analysis/MaskBounds.h"
#include "attn/analysis/Merge.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Serialize.h"
#include "attn/reference/Checker.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace attn {

namespace cl = llvm::cl;

namespace {

class ListCommand final : public Command {
public:
  ListCommand()
      : Command("list", "list", "List the registered definitions") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;
};

int ListCommand::run(const dsl::Registry &Registry, llvm::raw_ostream &OS) {
  size_t Width = 4;
  for (const dsl::DefinitionBase *D : Registry.all())
    Width = std::max(Width, D->name.size());
  for (const dsl::DefinitionBase *D : Registry.all())
    OS << fmt::format("{:<{}}  {:<9}  {}\n", D->name, Width,
                      ir::definitionKindName(D->kind()).str(),
                      D->description);
  return 0;
}

/// How the mask's blocks are classified: from block bounds (and which
/// inputs are bounded) or element by element (and why), and the grouping.
void printMaskAnalysis(const analysis::MaskAnalysis &A, llvm::raw_ostream &OS) {
  OS << "// ----- mask analysis -----\n";
  if (!A.Mask) {
    OS << "mask: none\n";
    return;
  }
  if (A.Analysed) {
    OS << "mask: analysed by block bounds";
    for (size_t I = 0; I < A.Bounded.size(); ++I)
      OS << (I ? ", " : "; bounded per block: ") << "'" << A.Bounded[I].Name
         << "' by " << (A.Bounded[I].ByKey ? "key" : "row");
    OS << "\n";
  } else {
    OS << "mask: element-evaluated: " << A.Reason << "\n";
  }
  OS << "grouping: " << analysis::maskGroupingName(A.Grouping) << "\n";
  OS << "reuse: "
     << (A.ReadsTensorInput ? "none (reads a tensor input: classified on "
                              "every call)"
                            : "across calls with equal shapes" +
                                  std::string(A.ScalarInputs.empty()
                                                  ? ""
                                                  : " and scalar values"))
     << "\n";
}

class ShowCommand final : public Command {
public:
  ShowCommand()
      : Command("show", "show NAME [--after PASS] [--json]",
                "Print a definition's IR after each pass") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  CallOpt<std::string> Name{cl::Positional, cl::desc("<definition>"),
                            cl::Required, cl::sub(Sub)};
  CallOpt<std::string> After{
      "after",
      cl::desc("Print the IR only after this pass (trace, verify, "
               "row-reduce, autodiff, simplify, dce)"),
      cl::value_desc("pass"), cl::sub(Sub)};
  CallOpt<bool> Json{"json", cl::desc("Print the final IR as JSON"),
                     cl::sub(Sub)};
};

int ShowCommand::run(const dsl::Registry &Registry, llvm::raw_ostream &OS) {
  checkShowPass(After);
  const dsl::DefinitionBase &Def = Registry.get(Name);
  printShow([&](const PassCallback &CB) { return compile(Def, CB); }, After,
            Json, OS);
  return 0;
}

class CheckCommand final : public Command {
public:
  CheckCommand()
      : Command("check", "check NAME... | --all",
                "Check definitions with the double-precision reference") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  CallList<std::string> Names{cl::Positional, cl::desc("<definition>..."),
                              cl::sub(Sub)};
  CallOpt<bool> All{"all", cl::desc("Check every registered definition"),
                    cl::sub(Sub)};
  CallOpt<unsigned long long> Seed{"seed",
                                   cl::desc("Seed of the random inputs"),
                                   cl::init(20261126), cl::sub(Sub)};
};

int CheckCommand::run(const dsl::Registry &Registry, llvm::raw_ostream &OS) {
  std::vector<const dsl::DefinitionBase *> Defs;
  if (All) {
    if (!Names.empty())
      throw UsageError("check: give definition names or --all, not both");
    Defs = Registry.all();
  } else {
    if (Names.empty())
      throw UsageError("check: name a definition or pass --all");
    for (const std::string &N : Names)
      Defs.push_back(&Registry.get(N));
  }
  reference::CheckOptions Opts;
  Opts.Seed = Seed;
  unsigned Failed = 0;
  // --all takes a while: a progress line on stderr per definition.
  std::optional<ProgressLine> Progress;
  if (All)
    Progress.emplace(llvm::errs(), "check", Defs.size());
  for (const dsl::DefinitionBase *D : Defs) {
    if (Progress) {
      OS.flush(); // the previous report before the next progress line
      Progress->step(D->name);
    }
    reference::CheckReport R = reference::check(compile(*D), Opts);
    reference::printReport(R, OS);
    OS << "\n";
    Failed += !R.passed();
  }
  OS << fmt::format("{} passed, {} failed\n", Defs.size() - Failed, Failed);
  if (Progress) {
    OS.flush();
    Progress->done(fmt::format("{} definitions, {} failed", Defs.size(),
                               Failed));
  }
  return Failed ? 1 : 0;
}

} // namespace

void checkShowPass(llvm::StringRef After) {
  const std::vector<std::string> &Passes = pipelinePasses();
  if (!After.empty() && !llvm::is_contained(Passes, After.str()))
    throw UsageError("show: unknown pass '" + After.str() +
                     "'; passes: " + llvm::join(Passes, ", "));
}

void printShow(
    llvm::function_ref<CompiledDefinition(const PassCallback &)> Compile,
    llvm::StringRef After, bool Json, llvm::raw_ostream &OS) {
  checkShowPass(After);
  CompiledDefinition C = Compile([&](llvm::StringRef Pass,
                                     const ir::Graph &G) {
    if (Json)
      return;
    if (!After.empty() && Pass != After)
      return;
    OS << "// ----- IR after " << Pass << " -----\n";
    ir::printGraph(G, OS);
    OS << "\n";
  });
  if (Json) {
    OS << ir::saveJSON(*C.Graph);
    return;
  }
  if (C.Graph->decls().Kind == ir::DefinitionKind::Transformer) {
    printMaskAnalysis(analysis::analyzeMask(*C.Graph), OS);
    // Whether split-KV decode may split a row's keys (docs/runtime.md).
    OS << "// ----- merge -----\n"
       << "merge: " << analysis::analyzeMerge(*C.Graph).str() << "\n";
  }
}

std::unique_ptr<Command> makeListCommand() {
  return std::make_unique<ListCommand>();
}
std::unique_ptr<Command> makeShowCommand() {
  return std::make_unique<ShowCommand>();
}
std::unique_ptr<Command> makeCheckCommand() {
  return std::make_unique<CheckCommand>();
}

} // namespace attn
