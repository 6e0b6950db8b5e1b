// The shipped examples as one registry for the tests, and their names.
#ifndef ATTN_TESTS_COMMON_EXAMPLEREGISTRY_H
#define ATTN_TESTS_COMMON_EXAMPLEREGISTRY_H

#include "Examples.h"
#include "attn/dsl/Registry.h"

#include <string>
#include <vector>

namespace attn::testsupport {

/// Built once; it outlives the values Catch2 generators hand out.
inline const dsl::Registry &registry() {
  static const dsl::Registry R = [] {
    dsl::Registry Reg;
    examples::registerExamples(Reg);
    return Reg;
  }();
  return R;
}

/// The registered names, in registration order.
inline std::vector<std::string> exampleNames() {
  std::vector<std::string> Names;
  for (const dsl::DefinitionBase *D : registry().all())
    Names.push_back(D->name);
  return Names;
}

} // namespace attn::testsupport

#endif
