// attnc emit and compile: generate one kernel's CUDA source, and write it or
// compile it through the kernel cache. Which kernel is KernelChoice's part.
#include "Commands.h"
#include "KernelChoice.h"
#include "Standalone.h"

#include "attn/runtime/KernelCache.h"

#include "llvm/Support/FileSystem.h"

#include <fmt/format.h>

namespace attn {

namespace cl = llvm::cl;

namespace {

/// The kernel options emit and compile share, registered on \p Sub.
struct KernelOptions {
  explicit KernelOptions(cl::SubCommand &Sub);
  /// The options as a request for chooseKernel.
  KernelRequest request(bool ForCompile) const;

  CallOpt<std::string> Name;
  CallOpt<std::string> Dtype;
  CallOpt<int> HeadDim;
  CallOpt<int> HeadDimV;
  CallOpt<std::string> Arch;
  CallOpt<std::string> Skeleton;
  CallOpt<std::string> Config;
  CallOpt<std::string> Backend;
  CallOpt<bool> Backward;
};

KernelOptions::KernelOptions(cl::SubCommand &Sub)
    : Name(cl::Positional, cl::desc("<definition>"), cl::Required,
           cl::sub(Sub)),
      Dtype("dtype", cl::desc("f16 or bf16"), cl::init("f16"), cl::sub(Sub)),
      HeadDim("head-dim", cl::desc("Head dimension D of q and k"),
              cl::init(128), cl::sub(Sub)),
      HeadDimV("head-dim-v",
               cl::desc("Head dimension of v (default: --head-dim)"),
               cl::init(0), cl::sub(Sub)),
      Arch("arch",
           cl::desc("sm_80, sm_86, sm_89 or sm_90a (compile: default the "
                    "GPU's, else sm_80)"),
           cl::init(""), cl::sub(Sub)),
      Skeleton("skeleton",
               cl::desc(skeletonOptionHelp()),
               cl::init(""), cl::sub(Sub)),
      Config("config",
             cl::desc(configOptionHelp()),
             cl::init(""), cl::sub(Sub)),
      Backend("backend",
              cl::desc("Which kernel: generated (the fast skeleton) or "
                       "reference (one row of scores per CTA, the tests' "
                       "oracle)"),
              cl::init("generated"), cl::sub(Sub)),
      Backward("backward",
               cl::desc("The backward's kernels instead of the forward's"),
               cl::sub(Sub)) {}

KernelRequest KernelOptions::request(bool ForCompile) const {
  rejectEmptyValue(Arch, "sm_80, sm_86, sm_89 or sm_90a");
  rejectEmptyValue(Skeleton, "a skeleton's name");
  rejectEmptyValue(Config, "a tile configuration such as m128n64w4s2");
  KernelRequest R;
  R.Name = Name;
  R.Dtype = Dtype;
  R.HeadDim = HeadDim;
  R.HeadDimV = HeadDimV;
  R.Arch = Arch;
  R.Skeleton = Skeleton;
  R.Config = Config;
  R.Backend = Backend;
  R.Backward = Backward;
  R.ForCompile = ForCompile;
  return R;
}

class EmitCommand final : public Command {
public:
  EmitCommand()
      : Command("emit", "emit NAME [-o F.cu] [--standalone]",
                "Write the generated CUDA source of a kernel") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  KernelOptions Kernel{Sub};
  CallOpt<std::string> Output{"o", cl::desc("Output file (- for stdout)"),
                              cl::value_desc("file"), cl::init("-"),
                              cl::sub(Sub)};
  CallOpt<bool> Standalone{
      "standalone",
      cl::desc("Inline the device library so that plain `nvcc -c` builds it"),
      cl::sub(Sub)};
};

int EmitCommand::run(const dsl::Registry &Registry, llvm::raw_ostream &OS) {
  rejectEmptyValue(Output, "a file name, or - for stdout");
  ChosenKernel K =
      kernelForOptions(Kernel.request(/*ForCompile=*/false), Registry);
  std::string Text =
      Standalone ? inlineDeviceLibrary(K.Source.Source) : K.Source.Source;
  if (Output == "-") {
    // stdout is the source: the choice goes to stderr.
    llvm::errs() << "attnc: emit: " << K.Description << "\n";
    OS << Text;
    return 0;
  }
  std::error_code EC;
  llvm::raw_fd_ostream File(Output, EC, llvm::sys::fs::OF_Text);
  if (EC)
    throw UserError("emit: cannot write '" + Output + "': " + EC.message());
  File << Text;
  // A write error (a full disk, /dev/full) shows only here; cleared, so
  // that the stream's destructor does not abort the process over it.
  File.close();
  if (File.has_error()) {
    EC = File.error();
    File.clear_error();
    throw UserError("emit: cannot write '" + Output + "': " + EC.message());
  }
  OS << "wrote " << Output << ": " << K.Description << "\n";
  return 0;
}

class CompileCommand final : public Command {
public:
  CompileCommand()
      : Command("compile", "compile NAME",
                "Compile a kernel with NVRTC through the cache") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  KernelOptions Kernel{Sub};
};

int CompileCommand::run(const dsl::Registry &Registry,
                        llvm::raw_ostream &OS) {
  ChosenKernel K =
      kernelForOptions(Kernel.request(/*ForCompile=*/true), Registry);
  runtime::CacheResult R =
      runtime::KernelCache::global().getOrCompile(K.Source);
  OS << fmt::format("kernel:   {}\n", K.Description);
  OS << fmt::format("key:      {}\n", R.FullKey);
  OS << fmt::format("source:   {} (cache {})\n",
                    runtime::cacheSourceName(R.Source),
                    R.Source == runtime::CacheSource::Compiled ? "miss"
                                                               : "hit");
  if (R.Source == runtime::CacheSource::Compiled)
    OS << fmt::format("compile:  {:.3f} s (NVRTC)\n", R.CompileSeconds);
  OS << fmt::format("lookup:   {:.3f} ms\n", R.LookupSeconds * 1e3);
  OS << fmt::format("cubin:    {} bytes\n", R.Cubin->size());
  return 0;
}

} // namespace

std::unique_ptr<Command> makeEmitCommand() {
  return std::make_unique<EmitCommand>();
}
std::unique_ptr<Command> makeCompileCommand() {
  return std::make_unique<CompileCommand>();
}

} // namespace attn
