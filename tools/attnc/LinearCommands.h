// What `attnc bench` and `attnc tune` share for linear-attention
// definitions: the signature and shape from their options, checked without
// a GPU.
#ifndef ATTN_TOOLS_ATTNC_LINEARCOMMANDS_H
#define ATTN_TOOLS_ATTNC_LINEARCOMMANDS_H

#include "Commands.h"

#include "attn/runtime/LinearAttention.h"

#include <string>

namespace attn {

struct LinearCommandArgs {
  runtime::LinearSignature Sig;
  runtime::LinearShape Shape;
};

/// The signature and shape of a linear definition's bench or tune run:
/// --shape B,H,T,D[,DV], --qk-heads (0: H), --dtype, --layout, --skeleton,
/// --config, --arch. UsageError for a --qk-heads that does not divide H, a
/// --skeleton without linear kernels or a malformed --config; UserError for
/// head dims or a configuration the
/// kernels do not support (judged for --arch, or sm_80's rules when none is
/// given: the GPU's arch is checked again once it is known).
LinearCommandArgs linearCommandArgs(const ShapeArg &S, int QkHeads,
                                    const std::string &Dtype,
                                    const std::string &Layout,
                                    const std::string &Skeleton,
                                    const std::string &Config,
                                    const std::string &Arch);

} // namespace attn

#endif
