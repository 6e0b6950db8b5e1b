// Which kernel `attnc emit` and `attnc compile` generate for their options:
// the runtime's selector, asked as the runtime asks it.
#ifndef ATTN_TOOLS_ATTNC_KERNELCHOICE_H
#define ATTN_TOOLS_ATTNC_KERNELCHOICE_H

#include "attn/Pipeline.h"
#include "attn/codegen/KernelSource.h"
#include "attn/dsl/Registry.h"
#include "attn/runtime/Selector.h"

#include "llvm/ADT/STLExtras.h"

#include <string>

namespace attn {

/// The kernel options of emit and compile as given on the command line
/// (empty strings and 0 for options left out).
struct KernelRequest {
  std::string Name;      ///< the definition
  std::string Dtype;     ///< --dtype
  int HeadDim = 128;     ///< --head-dim
  int HeadDimV = 0;      ///< --head-dim-v (0: HeadDim)
  std::string Arch;      ///< --arch
  std::string Skeleton;  ///< --skeleton
  std::string Config;    ///< --config
  std::string Backend;   ///< --backend
  bool Backward = false; ///< --backward
  /// compile rather than emit: without --arch, the GPU's arch (sm_80 when
  /// there is none); emit never looks at the GPU.
  bool ForCompile = false;
};

/// KernelPolicy::parse for --skeleton and --config: a name that is no
/// skeleton's or configuration's for \p T is a usage error (UsageError
/// "--skeleton: ..." or "--config: ...").
runtime::KernelPolicy policyFromOptions(const runtime::KernelTarget &T,
                                        const std::string &Skeleton,
                                        const std::string &Config);

/// The help of --skeleton and --config, written from the skeleton table
/// (its names, and each skeleton's configuration form).
const std::string &skeletonOptionHelp();
const std::string &configOptionHelp();

/// A kernel and what chose it, for the user to read.
struct ChosenKernel {
  codegen::KernelSource Source;
  /// "mha forward f16 d128/128 sm_90a: fwd_sm90 sm90.m128n128s3 (default)"
  std::string Description;
};

/// The kernel \p Req asks for. For the generated backend, the skeleton and
/// configuration the runtime would run for the definition, direction,
/// dtype, head dims and arch (KernelPolicy, chooseWithoutShape), --skeleton
/// and --config overriding; without --arch, emit's sm_80 or compile's GPU
/// arch, unless the skeleton named runs only on another arch (fwd_sm90:
/// sm_90a). The reference backend's ref_fwd takes neither. UsageError and
/// UserError for options and definitions that do not fit.
ChosenKernel kernelForOptions(const KernelRequest &Req,
                              const dsl::Registry &Registry);

/// The same for a definition outside a registry (the C interface's: traced
/// through callbacks, or an IR graph), given by its kind and name and
/// compiled by \p Compile once the options are checked; Req.Name unused.
ChosenKernel
kernelForDefinition(const KernelRequest &Req, ir::DefinitionKind Kind,
                    const std::string &Name,
                    llvm::function_ref<CompiledDefinition()> Compile);

} // namespace attn

#endif
