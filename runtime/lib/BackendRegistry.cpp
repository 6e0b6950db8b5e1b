// The backend registry: named factories in selection order.
#include "attn/runtime/Backend.h"

#include "attn/Error.h"

#include "llvm/ADT/StringExtras.h"

namespace attn::runtime {

AttentionBackend::~AttentionBackend() = default;

void AttentionBackend::makeBlockLists(const BackendProblem &, const CallContext &,
                                      BlockMaskData &) {
  throw UserError("block mask: backend '" + name() +
                  "' has no block lists; use the generated backend");
}

BackendRegistry &BackendRegistry::global() {
  static BackendRegistry *R = [] {
    auto *New = new BackendRegistry;
    New->add("generated", makeGeneratedBackend);
    New->add("reference", makeReferenceBackend);
    return New;
  }();
  return *R;
}

void BackendRegistry::add(const std::string &Name, BackendFactory Make) {
  if (Name.empty())
    throw UserError("BackendRegistry::add: a backend needs a name");
  for (const auto &E : Entries)
    if (E.first == Name)
      throw UserError("BackendRegistry::add: a backend named '" + Name +
                      "' is already registered");
  Entries.emplace_back(Name, std::move(Make));
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> N;
  for (const auto &E : Entries)
    N.push_back(E.first);
  return N;
}

const BackendFactory &BackendRegistry::factory(const std::string &Name) const {
  for (const auto &E : Entries)
    if (E.first == Name)
      return E.second;
  throw UserError("unknown backend '" + Name + "'; registered: " +
                  llvm::join(names(), ", "));
}

} // namespace attn::runtime
