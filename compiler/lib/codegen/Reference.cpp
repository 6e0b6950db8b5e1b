// The reference forward kernel: the generated Inputs and Variant structs
// rendered into the ref_fwd template.
#include "attn/codegen/Codegen.h"

#include "attn/Error.h"
#include "attn/codegen/Template.h"
#include "attn/codegen/Templates.h"
#include "attn/codegen/VariantSource.h"

#include <fmt/format.h>

namespace attn::codegen {

int referenceSharedBytes(int D) {
  // scores (fp32) and keep flags (bytes) per key, then the q row in fp32;
  // the layout of RefFwd::kSmemBytes in runtime/kernels/ref_fwd.cuh.
  return ReferenceMaxKeys * 5 + D * 4;
}

KernelSource generateReference(const CompiledDefinition &Def,
                               const KernelSpec &Spec) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Transformer)
    throw NotSupportedYet("code generation for linear attention ('" +
                          Def.Graph->name() + "')");
  Spec.validate();
  KernelSource Src;
  Src.Key = fmt::format("{}.ref_fwd.{}.d{}x{}.{}", Def.Graph->name(),
                        std::string(dtypeName(Spec.Dtype)), Spec.HeadDim,
                        Spec.HeadDimV, archName(Spec.Arch).str());
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_ref_fwd"};
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  Values["threads"] = std::to_string(ReferenceThreads);
  Values["max_keys"] = std::to_string(ReferenceMaxKeys);
  Src.Source = render("ref_fwd.cu.in", templateText("ref_fwd.cu.in"), Values);
  return Src;
}

} // namespace attn::codegen
