// Which sm80 forward tile configuration a call runs with.
#ifndef ATTN_RUNTIME_CONFIGSELECT_H
#define ATTN_RUNTIME_CONFIGSELECT_H

#include "attn/runtime/Backend.h"

namespace attn::runtime {

/// The configuration compiled when the generated backend is made, before a
/// call's shape is known: Sig.Config if given, else FwdConfig::defaultFor.
codegen::FwdConfig initialForwardConfig(const Signature &Sig,
                                        const std::string &Arch);

/// The configuration for one call: Sig.Config if given; else the tune file's
/// entry for this device, variant, dtype, head dims and shape bucket (tuned
/// and written first when Sig.Tune); else FwdConfig::defaultFor.
codegen::FwdConfig selectForwardConfig(const BackendProblem &P);

} // namespace attn::runtime

#endif
