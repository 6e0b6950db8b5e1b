// Which forward skeleton and tile configuration a call runs with: the one
// the signature names, a tuned one from a tune file, or the default.
#ifndef ATTN_RUNTIME_CONFIGSELECT_H
#define ATTN_RUNTIME_CONFIGSELECT_H

#include "attn/runtime/Backend.h"

#include <string>

namespace attn::runtime {

/// The forward skeleton of \p Sig on \p Arch, as tune keys name it:
/// "fwd_sm90" when Sig.Config names an sm90 configuration ("sm90",
/// "sm90.m128n128s3"), or is empty and fwd_sm90 supports the dtype and head
/// dims on \p Arch (sm_90a); else "fwd_sm80" (Config "sm80", an sm80
/// configuration, or an arch or head dims fwd_sm90 does not serve).
std::string chooseForwardSkeleton(const Signature &Sig,
                                  const std::string &Arch);

/// The configuration \p Skeleton runs without a tune entry, as text:
/// Sm90Config::defaultFor or FwdConfig::defaultFor.
std::string defaultForwardConfig(const std::string &Skeleton,
                                 const Signature &Sig, const std::string &Arch);

/// The configuration compiled when the generated backend is made, before a
/// call's shape is known: Sig.Config if it names one, else the skeleton's
/// default.
std::string initialForwardConfig(const Signature &Sig, const std::string &Arch);

/// The configuration for one call, as text (an FwdConfig or, for fwd_sm90,
/// an Sm90Config), in this order:
///  1. Sig.Config, if it names a configuration ("sm80" and "sm90" only
///     choose the skeleton);
///  2. with Sig.TuneFile, the file's entry whose key (device, arch, NVRTC
///     version, skeleton, variant, dtype, head dims, shape bucket) matches
///     the call; entries of other devices, toolchains, skeletons or
///     variants are never applied. The file is read once per process and
///     again when it changes; a missing file has no entries; a file that
///     is not a version-1 tune file is an InvalidArgument (docs/tuning.md
///     says why);
///  3. with Sig.Tune and no entry, the call's shape is tuned now on fresh
///     random inputs (which synchronises the device) and the result is
///     merged into Sig.TuneFile, or, without a file, remembered for the
///     rest of the process;
///  4. otherwise the skeleton's default.
std::string selectForwardConfig(const BackendProblem &P);

/// selectForwardConfig for a device named \p Device ("" when there is no
/// GPU: nothing in a tune file matches then, and Sig.Tune cannot tune).
/// The one above passes currentDevice().Name; tests pass their own.
std::string selectForwardConfig(const BackendProblem &P,
                                const std::string &Device);

} // namespace attn::runtime

#endif
