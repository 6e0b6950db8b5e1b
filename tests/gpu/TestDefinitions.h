// The definitions the GPU tests and bench tools run: the registered
// examples, and a few masks made for them (a sliding window, rows and a
// whole query block without a key, softmax without a mask).
#ifndef ATTNC_TESTS_GPU_TESTDEFINITIONS_H
#define ATTNC_TESTS_GPU_TESTDEFINITIONS_H

#include "Examples.h"
#include "attn/dsl/Registry.h"

#include <string>

namespace attn::gputest {

/// A registered example by name, or one of mha_window (causal with a
/// 100-key sliding window), mha_emptyrows (rows 0-4 see no key),
/// mha_emptyblock (rows 0-99 see no key: whole query blocks) and mha_full
/// (mha without its mask). UserError (from the registry) for other names.
inline dsl::AttentionDef makeDefinition(const std::string &Name) {
  dsl::Registry R;
  examples::registerExamples(R);
  if (Name == "mha_window") { // causal with a 100-key sliding window
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                    dsl::SymbolScalar k) { return (q >= k) & (q - k < 100); };
    return D;
  }
  if (Name == "mha_emptyrows") { // the first rows see no key at all
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                    dsl::SymbolScalar k) { return k + 5 <= q; };
    return D;
  }
  if (Name == "mha_emptyblock") { // no key for rows 0-99: whole query blocks
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                    dsl::SymbolScalar k) { return k + 100 <= q; };
    return D;
  }
  if (Name == "mha_full") { // softmax without a mask
    dsl::AttentionDef D = examples::mha();
    D.name = Name;
    D.mask_mod = {};
    return D;
  }
  return static_cast<const dsl::AttentionDef &>(R.get(Name));
}

} // namespace attn::gputest

#endif
