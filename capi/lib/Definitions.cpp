// The C interface's definitions: the shipped examples by name.
#include "CapiInternal.h"

#include "Examples.h"

#include "attn/dsl/Registry.h"

#include <cstring>

using namespace attn;
using namespace attn::capi;

namespace {

/// The examples' registry, built once (registration is explicit, no static
/// initialisation order to worry about; C++11 statics are thread-safe).
const dsl::Registry &exampleRegistry() {
  static const dsl::Registry R = [] {
    dsl::Registry Made;
    examples::registerExamples(Made);
    return Made;
  }();
  return R;
}

} // namespace

attnc_status attnc_definition_from_example(const char *name,
                                           attnc_definition **out) {
  return guarded([&] {
    requireNonNull(name, "attnc_definition_from_example", "name");
    requireNonNull(out, "attnc_definition_from_example", "out");
    *out = nullptr;
    const dsl::DefinitionBase &Def = exampleRegistry().get(name);
    // The registry keeps its definitions alive for the process; the handle
    // shares nothing it would have to free.
    auto Shared = std::shared_ptr<const dsl::DefinitionBase>(
        std::shared_ptr<const dsl::DefinitionBase>(), &Def);
    auto *D = new attnc_definition;
    D->Def = std::move(Shared);
    *out = D;
  });
}

attnc_status attnc_example_names(char *buf, size_t size, size_t *needed) {
  return guarded([&] {
    requireNonNull(needed, "attnc_example_names", "needed");
    std::string Text;
    for (const dsl::DefinitionBase *D : exampleRegistry().all()) {
      if (!Text.empty())
        Text += '\n';
      Text += D->name;
    }
    *needed = Text.size() + 1;
    if (buf && size >= *needed)
      std::memcpy(buf, Text.c_str(), *needed);
  });
}

const char *attnc_definition_name(const attnc_definition *def) {
  return def ? definitionName(*def).c_str() : "";
}

void attnc_definition_release(attnc_definition *def) { delete def; }

namespace attn::capi {

std::unique_ptr<runtime::Attention>
newAttention(const attnc_definition &D, const runtime::Signature &Sig) {
  if (!D.Def)
    return std::make_unique<runtime::Attention>(compileDefinition(D), Sig);
  return std::make_unique<runtime::Attention>(*D.Def, Sig);
}

std::unique_ptr<runtime::LinearAttention>
newLinearAttention(const attnc_definition &D,
                   const runtime::LinearSignature &Sig) {
  if (!D.Def)
    return std::make_unique<runtime::LinearAttention>(compileDefinition(D),
                                                      Sig);
  return std::make_unique<runtime::LinearAttention>(*D.Def, Sig);
}

} // namespace attn::capi
