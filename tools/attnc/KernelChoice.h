// Which kernel `attnc emit` and `attnc compile` generate for their options:
// the one place that chooses a skeleton and configuration for them.
#ifndef ATTN_TOOLS_ATTNC_KERNELCHOICE_H
#define ATTN_TOOLS_ATTNC_KERNELCHOICE_H

#include "attn/codegen/KernelSource.h"
#include "attn/dsl/Registry.h"

#include <string>

namespace attn {

/// The kernel options of emit and compile as given on the command line
/// (empty strings and 0 for options left out).
struct KernelRequest {
  std::string Name;     ///< the definition
  std::string Dtype;    ///< --dtype
  int HeadDim = 128;    ///< --head-dim
  int HeadDimV = 0;     ///< --head-dim-v (0: HeadDim)
  std::string Arch;     ///< --arch
  std::string Config;   ///< --config
  std::string Backend;  ///< --backend
  bool Backward = false; ///< --backward
  /// compile rather than emit: without --arch, the GPU's arch (sm_80 when
  /// there is none); emit never looks at the GPU.
  bool ForCompile = false;
};

/// The kernel \p Req asks for: a linear definition's linear_chunk kernels;
/// else, for an attention definition, the bwd_sm80 kernels with --backward,
/// fwd_sm90 for an sm90 --config, and otherwise the --backend's forward
/// (fwd_sm80 or ref_fwd). UsageError and UserError for options and
/// definitions that do not fit.
codegen::KernelSource chooseKernel(const KernelRequest &Req,
                                   const dsl::Registry &Registry);

} // namespace attn

#endif
