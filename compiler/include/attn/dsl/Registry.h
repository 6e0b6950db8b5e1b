// A registry of definitions by name, built explicitly (no static-init order).
#ifndef ATTN_DSL_REGISTRY_H
#define ATTN_DSL_REGISTRY_H

#include "attn/dsl/Definition.h"

#include <memory>
#include <string_view>
#include <vector>

namespace attn::dsl {

class Registry {
public:
  /// Adds a definition; a second one with the same name is a UserError.
  void add(std::shared_ptr<const DefinitionBase> Def);
  template <typename DefT> void add(DefT Def) {
    add(std::shared_ptr<const DefinitionBase>(
        std::make_shared<DefT>(std::move(Def))));
  }

  /// The definition named \p Name, or nullptr.
  const DefinitionBase *find(std::string_view Name) const;
  /// The definition named \p Name; a UserError listing the known names if
  /// there is none.
  const DefinitionBase &get(std::string_view Name) const;
  /// All definitions in registration order.
  std::vector<const DefinitionBase *> all() const;

private:
  std::vector<std::shared_ptr<const DefinitionBase>> Defs;
};

} // namespace attn::dsl

#endif
