// What every skeleton entry shares: access to its own alternative of
// SkeletonConfig, printing, parsing through the configuration's parse(),
// and the resource model's common judgements.
#ifndef ATTN_RUNTIME_LIB_SKELETONS_TYPEDSKELETON_H
#define ATTN_RUNTIME_LIB_SKELETONS_TYPEDSKELETON_H

#include "attn/Error.h"
#include "attn/runtime/Skeleton.h"

namespace attn::runtime::skeletons {

/// A skeleton whose configuration type is \p ConfigT (one alternative of
/// SkeletonConfig, with str() and a static parse() that throws UserError).
template <typename ConfigT> class TypedSkeleton : public Skeleton {
public:
  using Skeleton::Skeleton;

  SkeletonConfig parse(llvm::StringRef Text) const override {
    return ConfigT::parse(Text.str());
  }
  std::string print(const SkeletonConfig &C) const override {
    return get(C).str();
  }

protected:
  /// \p C as this skeleton's configuration; InternalError for another's.
  const ConfigT &get(const SkeletonConfig &C) const {
    if (const ConfigT *Typed = std::get_if<ConfigT>(&C))
      return *Typed;
    throw InternalError("skeleton " + name().str() +
                        " was given another skeleton's configuration");
  }
  /// The UserError message of \p F, or empty when it does not throw.
  template <typename Fn> static std::string messageOf(Fn &&F) {
    try {
      F();
    } catch (const UserError &E) {
      return E.what();
    }
    return "";
  }
};

} // namespace attn::runtime::skeletons

#endif
