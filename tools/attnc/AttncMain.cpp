// The attnc command line: list, show and check definitions.
#include "AttncMain.h"
#include "Commands.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/KernelCache.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Serialize.h"
#include "attn/reference/Checker.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "Standalone.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <exception>
#include <mutex>

namespace attn {

namespace cl = llvm::cl;

namespace {

/// The options of every subcommand, registered with LLVM's global parser for
/// one call of attncMain: each member unregisters itself when the object is
/// destroyed (options first, as members are destroyed in reverse order, then
/// the subcommands they name), so attncMain can run any number of times in
/// a process and leaves nothing of its own registered. Use the Call* types
/// for every member.
struct Options {
  CallSubCommand List{"list", "List the registered definitions"};
  CallSubCommand Show{"show", "Print a definition's IR after each pass"};
  CallSubCommand Check{
      "check", "Check definitions with the double-precision reference"};

  CallOpt<std::string> ShowName{cl::Positional, cl::desc("<definition>"),
                                cl::Required, cl::sub(Show)};
  CallOpt<std::string> After{
      "after",
      cl::desc("Print the IR only after this pass (trace, verify, "
               "row-reduce, autodiff, simplify, dce)"),
      cl::value_desc("pass"), cl::sub(Show)};
  CallOpt<bool> Json{"json", cl::desc("Print the final IR as JSON"),
                     cl::sub(Show)};

  CallSubCommand Emit{"emit", "Write the generated CUDA source of a kernel"};
  CallSubCommand Compile{"compile",
                         "Compile a kernel with NVRTC through the cache"};
  CallSubCommand Cache{"cache", "Kernel cache: stats | clear"};

  // Shared by emit and compile.
  CallOpt<std::string> KernelName{cl::Positional, cl::desc("<definition>"),
                                  cl::Required, cl::sub(Emit),
                                  cl::sub(Compile)};
  CallOpt<std::string> Dtype{"dtype", cl::desc("f16 or bf16"),
                             cl::init("f16"), cl::sub(Emit), cl::sub(Compile)};
  CallOpt<int> HeadDim{"head-dim", cl::desc("Head dimension D of q and k"),
                       cl::init(128), cl::sub(Emit), cl::sub(Compile)};
  CallOpt<int> HeadDimV{"head-dim-v",
                        cl::desc("Head dimension of v (default: --head-dim)"),
                        cl::init(0), cl::sub(Emit), cl::sub(Compile)};
  CallOpt<std::string> Arch{
      "arch",
      cl::desc("sm_80, sm_86, sm_89 or sm_90a (compile: default the GPU's, "
               "else sm_80)"),
      cl::init(""), cl::sub(Emit), cl::sub(Compile)};
  CallOpt<std::string> Config{"config",
                              cl::desc("Tile configuration: m128n64w4s2 "
                                       "(forward, fwd_sm80; sm80: its "
                                       "default), sm90 or "
                                       "sm90.m128n128s3 (forward, fwd_sm90; "
                                       "arch sm_90a), "
                                       "kv64x128w8.q128x64w8.s2 "
                                       "(--backward), c64v64w4b8 (linear) "
                                       "(default: fwd_sm80, chosen per head "
                                       "dim and arch)"),
                              cl::init(""), cl::sub(Emit), cl::sub(Compile)};
  CallOpt<std::string> BackendName{
      "backend",
      cl::desc("Which kernel: generated (the fast skeleton) or reference "
               "(one row of scores per CTA, the tests' oracle)"),
      cl::init("generated"), cl::sub(Emit), cl::sub(Compile)};
  CallOpt<bool> Backward{
      "backward",
      cl::desc("The backward's kernels instead of the forward (bwd_sm80 for "
               "attention definitions, with a backward --config such as "
               "kv64x128w8.q128x64w8.s2; the linear_chunk backward for "
               "linear ones)"),
      cl::sub(Emit), cl::sub(Compile)};
  CallOpt<std::string> Output{"o", cl::desc("Output file (- for stdout)"),
                              cl::value_desc("file"), cl::init("-"),
                              cl::sub(Emit)};
  CallOpt<bool> StandaloneOpt{
      "standalone",
      cl::desc("Inline the device library so that plain `nvcc -c` builds it"),
      cl::sub(Emit)};
  CallOpt<std::string> CacheAction{cl::Positional, cl::desc("stats|clear"),
                                   cl::Required, cl::sub(Cache)};

  CallList<std::string> CheckNames{cl::Positional, cl::desc("<definition>..."),
                                   cl::sub(Check)};
  CallOpt<bool> All{"all", cl::desc("Check every registered definition"),
                    cl::sub(Check)};
  CallOpt<unsigned long long> Seed{
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
    throw UsageError("show: unknown pass '" + O.After +
                     "'; passes: " + llvm::join(Passes, ", "));
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

/// The kernel spec from the emit/compile options.
codegen::KernelSpec kernelSpec(const Options &O, bool ForCompile) {
  codegen::KernelSpec Spec;
  std::optional<DType> T = dtypeFromName(O.Dtype);
  if (!T)
    throw UserError("--dtype '" + O.Dtype + "': expected f16 or bf16");
  Spec.Dtype = *T;
  Spec.HeadDim = O.HeadDim;
  Spec.HeadDimV = O.HeadDimV ? O.HeadDimV.getValue() : O.HeadDim.getValue();
  Spec.Arch = O.Arch;
  // fwd_sm90 exists for sm_90a only: asking for it picks that arch.
  bool Sm90 = !O.Backward && codegen::Sm90Config::names(O.Config);
  if (Spec.Arch.empty() && Sm90)
    Spec.Arch = "sm_90a";
  if (Spec.Arch.empty()) {
    Spec.Arch = "sm_80";
    if (ForCompile && runtime::CudaDriver::get().available())
      Spec.Arch = runtime::currentDevice().arch();
  }
  // A backward's --config is a BwdConfig (kernelFor), an fwd_sm90 one an
  // Sm90Config (sm90Kernel); the fwd_sm80 tiles then keep their default,
  // which neither looks at.
  Spec.Config = O.Config.empty() || O.Config == "sm80" || O.Backward || Sm90
                    ? codegen::FwdConfig::defaultFor(Spec.HeadDim,
                                                      Spec.HeadDimV, Spec.Arch)
                    : codegen::FwdConfig::parse(O.Config);
  if (!O.Backward && !Sm90)
    Spec.validate();
  return Spec;
}

/// The fwd_sm90 kernel that --config sm90 or sm90.mXnYsS asks for: the
/// generated backend only; UserError where fwd_sm90 cannot serve the
/// dtype, head dims, arch or configuration.
codegen::KernelSource sm90Kernel(const Options &O, const CompiledDefinition &C,
                                 const codegen::KernelSpec &Spec) {
  if (O.BackendName != "generated")
    throw UsageError("--config " + O.Config + ": fwd_sm90 is the generated "
                     "backend's; the " + O.BackendName +
                     " backend takes no configuration");
  codegen::Sm90Config Config =
      O.Config == "sm90"
          ? codegen::Sm90Config::defaultFor(Spec.HeadDim, Spec.HeadDimV)
          : codegen::Sm90Config::parse(O.Config);
  return codegen::generateForwardSm90(C, Spec, Config);
}

/// The kernel --backend names for \p C.
codegen::KernelSource generateKernel(const Options &O,
                                     const CompiledDefinition &C,
                                     const codegen::KernelSpec &Spec) {
  if (O.BackendName == "generated")
    return codegen::generateForward(C, Spec);
  if (O.BackendName == "reference")
    return codegen::generateReference(C, Spec);
  throw UsageError("--backend '" + O.BackendName +
                   "': expected generated or reference");
}

/// The linear_chunk kernel (forward, or with --backward the backward's) of a
/// linear definition, with
/// the same options; --config is a LinearConfig ("c64v64w4b8").
codegen::KernelSource linearKernel(const Options &O,
                                   const dsl::DefinitionBase &Def,
                                   bool ForCompile) {
  codegen::LinearKernelSpec Spec;
  std::optional<DType> T = dtypeFromName(O.Dtype);
  if (!T)
    throw UserError("--dtype '" + O.Dtype + "': expected f16 or bf16");
  Spec.Dtype = *T;
  Spec.HeadDim = O.HeadDim;
  Spec.HeadDimV = O.HeadDimV ? O.HeadDimV.getValue() : O.HeadDim.getValue();
  Spec.Arch = O.Arch;
  if (Spec.Arch.empty()) {
    Spec.Arch = "sm_80";
    if (ForCompile && runtime::CudaDriver::get().available())
      Spec.Arch = runtime::currentDevice().arch();
  }
  Spec.Config = O.Config.empty()
                    ? codegen::LinearConfig::defaultFor(
                          Spec.HeadDim, Spec.HeadDimV, Spec.Arch)
                    : codegen::LinearConfig::parse(O.Config);
  if (O.BackendName != "generated")
    throw UsageError("--backend '" + O.BackendName + "': '" + Def.name +
                     "' is linear attention, which has the generated kernels "
                     "only");
  Spec.validate();
  CompiledDefinition C = compile(Def);
  return O.Backward ? codegen::generateLinearBackward(C, Spec)
                    : codegen::generateLinearForward(C, Spec);
}

/// The kernel emit and compile work on: a linear definition's linear_chunk
/// kernel, else the --backend kernel of an attention definition (its
/// bwd_sm80 kernels with --backward).
codegen::KernelSource kernelFor(const Options &O, const dsl::Registry &Registry,
                                bool ForCompile) {
  const dsl::DefinitionBase *D = Registry.find(O.KernelName);
  if (D && D->kind() == ir::DefinitionKind::Linear)
    return linearKernel(O, *D, ForCompile);
  codegen::KernelSpec Spec = kernelSpec(O, ForCompile);
  if (O.Backward && O.BackendName != "generated")
    throw UsageError("--backward: the " + O.BackendName +
                     " backend has no backward kernel; the backward is "
                     "generated (bwd_sm80)");
  CompiledDefinition C = compile(Registry.get(O.KernelName));
  if (O.Backward)
    return O.Config.empty()
               ? codegen::generateBackward(C, Spec)
               : codegen::generateBackward(C, Spec,
                                           codegen::BwdConfig::parse(O.Config));
  if (codegen::Sm90Config::names(O.Config))
    return sm90Kernel(O, C, Spec);
  return generateKernel(O, C, Spec);
}

int runEmit(const Options &O, const dsl::Registry &Registry,
            llvm::raw_ostream &OS) {
  codegen::KernelSource Src = kernelFor(O, Registry, false);
  std::string Text =
      O.StandaloneOpt ? inlineDeviceLibrary(Src.Source) : Src.Source;
  if (O.Output == "-") {
    OS << Text;
    return 0;
  }
  std::error_code EC;
  llvm::raw_fd_ostream File(O.Output, EC, llvm::sys::fs::OF_Text);
  if (EC)
    throw UserError("emit: cannot write '" + O.Output + "': " + EC.message());
  File << Text;
  return 0;
}

int runCompile(const Options &O, const dsl::Registry &Registry,
               llvm::raw_ostream &OS) {
  codegen::KernelSource Src = kernelFor(O, Registry, true);
  runtime::CacheResult R = runtime::KernelCache::global().getOrCompile(Src);
  OS << fmt::format("key:      {}\n", R.FullKey);
  OS << fmt::format("source:   {} (cache {})\n",
                    runtime::cacheSourceName(R.Source),
                    R.Source == runtime::CacheSource::Compiled ? "miss" : "hit");
  if (R.Source == runtime::CacheSource::Compiled)
    OS << fmt::format("compile:  {:.3f} s (NVRTC)\n", R.CompileSeconds);
  OS << fmt::format("lookup:   {:.3f} ms\n", R.LookupSeconds * 1e3);
  OS << fmt::format("cubin:    {} bytes\n", R.Cubin->size());
  return 0;
}

int runCache(const Options &O, llvm::raw_ostream &OS) {
  runtime::KernelCache &Cache = runtime::KernelCache::global();
  if (O.CacheAction == "stats") {
    runtime::CacheStats S = Cache.stats();
    OS << fmt::format("directory: {}\nentries:   {}\nbytes:     {}\n",
                      S.Directory, S.Entries, S.Bytes);
    return 0;
  }
  if (O.CacheAction == "clear") {
    OS << fmt::format("removed {} entries from {}\n", Cache.clear(),
                      Cache.stats().Directory);
    return 0;
  }
  throw UserError("cache: unknown action '" + O.CacheAction +
                  "'; expected stats or clear");
}

int runCheck(const Options &O, const dsl::Registry &Registry,
             llvm::raw_ostream &OS) {
  std::vector<const dsl::DefinitionBase *> Defs;
  if (O.All) {
    if (!O.CheckNames.empty())
      throw UsageError(
          "check: give definition names or --all, not both");
    Defs = Registry.all();
  } else {
    if (O.CheckNames.empty())
      throw UsageError("check: name a definition or pass --all");
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
  // The first call drops what libraries registered at static
  // initialisation, so that only attnc's options are offered; every call
  // then starts from the default values. Options unregisters its own
  // members when it goes out of scope.
  static std::once_flag DropStaticOptions;
  std::call_once(DropStaticOptions, cl::ResetCommandLineParser);
  cl::ResetAllOptionOccurrences();
  cl::SetVersionPrinter(
      [](llvm::raw_ostream &OS) { OS << "attnc " << ATTNC_VERSION << "\n"; });
  Options O;
  // Subcommands in their own files register their options here too.
  std::unique_ptr<Command> Extra[] = {makeTuneCommand(), makeBenchCommand()};
  std::string Errors;
  llvm::raw_string_ostream ErrStream(Errors);
  bool Ok = cl::ParseCommandLineOptions(
      Argc, Argv,
      "attnc: an attention compiler\n\n"
      "  attnc list                      the registered definitions\n"
      "  attnc show NAME [--after PASS]  IR after each pass (or one)\n"
      "  attnc check NAME... | --all     reference checks in double "
      "precision\n"
      "  attnc emit NAME [-o F.cu]       generated CUDA source "
      "(--standalone: nvcc-ready)\n"
      "  attnc compile NAME              NVRTC through the kernel cache\n"
      "  attnc cache stats|clear         the on-disk kernel cache\n"
      "  attnc tune NAME --shape B,H,S,D -o F.json   tune on this GPU\n"
      "  attnc bench NAME --shape B,H,S,D            time on this GPU\n",
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
    if (O.Emit)
      return runEmit(O, Registry, llvm::outs());
    if (O.Compile)
      return runCompile(O, Registry, llvm::outs());
    if (O.Cache)
      return runCache(O, llvm::outs());
    for (std::unique_ptr<Command> &C : Extra)
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
