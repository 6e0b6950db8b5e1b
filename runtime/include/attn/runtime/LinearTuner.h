// The autotuner for the linear_chunk skeletons: the search space over
// codegen::LinearConfig with its resource model, the tune key, tuning one
// shape (every candidate's forward and backward checked against the fp64
// token recurrence, then timed), and the configuration a call uses.
#ifndef ATTN_RUNTIME_LINEARTUNER_H
#define ATTN_RUNTIME_LINEARTUNER_H

#include "attn/codegen/LinearCodegen.h"
#include "attn/runtime/LinearAttention.h"
#include "attn/runtime/ResourceModel.h"
#include "attn/runtime/TuneFile.h"
#include "attn/runtime/Tuner.h"

#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace attn::runtime {

/// Every configuration the skeletons accept for head dims \p D / \p DV
/// (LinearConfig::structuralError empty): chunk 32, 64 or 128 × value
/// slice 64 or 128 × forward warps 4, 8, 16 × backward warps 4, 8, 16.
/// Shared memory is not judged here.
std::vector<codegen::LinearConfig> linearCandidates(int D, int DV);


/// The tune-file key of \p Def under \p Sig for a problem of \p S on the
/// device named \p Device: the linear skeleton the selector picks, the
/// bucket of (B, H, T, T); otherwise as attention's (TuneFile.h).
TuneKey makeLinearTuneKey(const CompiledDefinition &Def,
                          const LinearSignature &Sig, GpuArch Arch,
                          const LinearShape &S, const std::string &Device);

/// Tunes \p Def (dtype, head dims and layout of \p Sig, kernels for
/// \p Arch) on the current device at shape \p S. Each candidate's forward
/// and backward (which the configuration both selects) are checked on a
/// problem of the same length, batch 1 and up to 4 heads, against the
/// fp64 token recurrence (reference::linearRecurrent, linearBackward) with
/// the GPU tests' tolerance rule; then forward + backward is timed on \p S
/// with rotated random inputs. DriverError without a GPU; InternalError if
/// no candidate passes. Opts.AfterCheckedRun sees the checked output.
TuneResult tuneLinear(const CompiledDefinition &Def, const LinearSignature &Sig,
                      GpuArch Arch, const LinearShape &S,
                      const TuneOptions &Opts, llvm::raw_ostream *Progress);

/// How many times this process has run tuneLinear.
unsigned linearTuneRunCount();

} // namespace attn::runtime

#endif
