// The definition-dependent part shared by every skeleton template: banner,
// Inputs struct and Variant struct.
#ifndef ATTN_CODEGEN_VARIANTSOURCE_H
#define ATTN_CODEGEN_VARIANTSOURCE_H

#include "attn/codegen/Codegen.h"

#include <map>
#include <string>

namespace attn::codegen {

/// Template values every skeleton's `.cu.in` uses: `banner` (key, attnc
/// version, the IR as a comment), `inputs_struct`, `variant_members` (the
/// body of `struct Variant`: constants, RowState, init, score_mod, mask,
/// online_fwd, epilogue, forward, backward), `dtype`, `head_dim` and
/// `head_dim_v`. A skeleton adds its own tile parameters.
std::map<std::string, std::string>
variantTemplateValues(const CompiledDefinition &Def, const KernelSpec &Spec,
                      const std::string &Key);

} // namespace attn::codegen

#endif
