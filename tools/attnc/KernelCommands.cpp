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
      Config("config",
             cl::desc("Tile configuration: m128n64w4s2 (forward, fwd_sm80; "
                      "sm80: its default), sm90 or sm90.m128n128s3 (forward, "
                      "fwd_sm90; arch sm_90a), kv64x128w8.q128x64w8.s2 "
                      "(--backward), c64v64w4b8 (linear) (default: "
                      "fwd_sm80, chosen per head dim and arch)"),
             cl::init(""), cl::sub(Sub)),
      Backend("backend",
              cl::desc("Which kernel: generated (the fast skeleton) or "
                       "reference (one row of scores per CTA, the tests' "
                       "oracle)"),
              cl::init("generated"), cl::sub(Sub)),
      Backward("backward",
               cl::desc("The backward's kernels instead of the forward "
                        "(bwd_sm80 for attention definitions, with a "
                        "backward --config such as kv64x128w8.q128x64w8.s2; "
                        "the linear_chunk backward for linear ones)"),
               cl::sub(Sub)) {}

KernelRequest KernelOptions::request(bool ForCompile) const {
  rejectEmptyValue(Arch, "sm_80, sm_86, sm_89 or sm_90a");
  rejectEmptyValue(Config, "a tile configuration such as m128n64w4s2");
  KernelRequest R;
  R.Name = Name;
  R.Dtype = Dtype;
  R.HeadDim = HeadDim;
  R.HeadDimV = HeadDimV;
  R.Arch = Arch;
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
  codegen::KernelSource Src =
      chooseKernel(Kernel.request(/*ForCompile=*/false), Registry);
  std::string Text =
      Standalone ? inlineDeviceLibrary(Src.Source) : Src.Source;
  if (Output == "-") {
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
  codegen::KernelSource Src =
      chooseKernel(Kernel.request(/*ForCompile=*/true), Registry);
  runtime::CacheResult R = runtime::KernelCache::global().getOrCompile(Src);
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
