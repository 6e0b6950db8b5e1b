// Which sm80 forward tile configuration a call runs with: the one the
// signature names, a tuned one from a tune file, or the default heuristic.
#ifndef ATTN_RUNTIME_CONFIGSELECT_H
#define ATTN_RUNTIME_CONFIGSELECT_H

#include "attn/runtime/Backend.h"

#include <string>

namespace attn::runtime {

/// The configuration compiled when the generated backend is made, before a
/// call's shape is known: Sig.Config if given, else FwdConfig::defaultFor.
codegen::FwdConfig initialForwardConfig(const Signature &Sig,
                                        const std::string &Arch);

/// The configuration for one call, in this order:
///  1. Sig.Config, if given;
///  2. with Sig.TuneFile, the file's entry whose key (device, arch, NVRTC
///     version, variant, dtype, head dims, shape bucket) matches the call;
///     entries of other devices, toolchains or variants are never applied.
///     The file is read once per process and again when it changes; a
///     missing file has no entries; a file that is not a version-1 tune
///     file is an InvalidArgument (docs/tuning.md says why);
///  3. with Sig.Tune and no entry, the call's shape is tuned now on fresh
///     random inputs (which synchronises the device) and the result is
///     merged into Sig.TuneFile, or, without a file, remembered for the
///     rest of the process;
///  4. otherwise FwdConfig::defaultFor.
codegen::FwdConfig selectForwardConfig(const BackendProblem &P);

/// selectForwardConfig for a device named \p Device ("" when there is no
/// GPU: nothing in a tune file matches then, and Sig.Tune cannot tune).
/// The one above passes currentDevice().Name; tests pass their own.
codegen::FwdConfig selectForwardConfig(const BackendProblem &P,
                                       const std::string &Device);

} // namespace attn::runtime

#endif
