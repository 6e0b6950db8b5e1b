// What the C interface's files share: the handle types and the guard that
// turns C++ exceptions into statuses.
#ifndef ATTNC_CAPI_INTERNAL_H
#define ATTNC_CAPI_INTERNAL_H

#include "attnc/attnc_c.h"

#include "attn/Pipeline.h"
#include "attn/analysis/Merge.h"
#include "attn/dsl/Definition.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/LinearAttention.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

/// A definition handle. Every C entry point that runs a definition makes
/// its runtime object through newAttention/newLinearAttention below, never
/// from Def directly, so a definition made another way (an IR file, a
/// plugin) has one place to say how it becomes a kernel.
struct attnc_definition {
  std::shared_ptr<const attn::dsl::DefinitionBase> Def;
  /// A definition with no DefinitionBase (an IR JSON file's, a plugin's):
  /// Def is null and GraphJson holds its graph, loaded anew for each
  /// compilation (the pipeline consumes the graph it is given).
  std::shared_ptr<const std::string> GraphJson;
  /// GraphJson's graph's name and kind, read when the handle was made.
  std::string GraphName;
  attn::ir::DefinitionKind GraphKind = attn::ir::DefinitionKind::Transformer;
  /// The first pass `attnc show` would print for GraphJson: "trace" for a
  /// graph a plugin traced, "load" for one read from a file.
  std::string GraphOrigin;
};

/// An attention handle: the runtime object and what the introspection
/// functions hand out (kept here so the C strings stay valid).
struct attnc_attention {
  std::unique_ptr<attn::runtime::Attention> Att;
  std::vector<std::string> Finals;
  /// The definition's result merge, analysed on the first merge query.
  std::optional<attn::analysis::ResultMergeInfo> Merge;
};

/// A block mask handle.
struct attnc_block_mask {
  attn::runtime::BlockMask Mask;
};

namespace attn::capi {

/// Records \p Message as the calling thread's last error.
void setLastError(std::string Message);

/// Runs \p Body, mapping every exception to a status (and the thread's last
/// error message). \p Body returns nothing; a throw is the only failure.
template <typename F> attnc_status guarded(F &&Body) noexcept;

/// The status and message for the exception in flight (called from a catch).
attnc_status statusOfCurrentException() noexcept;

template <typename F> attnc_status guarded(F &&Body) noexcept {
  try {
    Body();
    return ATTNC_OK;
  } catch (...) {
    return statusOfCurrentException();
  }
}

/// \p D through the pipeline (trace or load, then compileGraph); \p AfterPass
/// sees each pass's graph, the first one named as `attnc show` names it.
CompiledDefinition compileDefinition(const attnc_definition &D,
                                     const PassCallback &AfterPass = {});
/// \p D's name and kind, whichever way it was made.
const std::string &definitionName(const attnc_definition &D);
ir::DefinitionKind definitionKind(const attnc_definition &D);

/// The runtime object for \p D under \p Sig (a transformer definition).
std::unique_ptr<runtime::Attention>
newAttention(const attnc_definition &D, const runtime::Signature &Sig);
/// The runtime object for \p D (a linear-attention definition).
std::unique_ptr<runtime::LinearAttention>
newLinearAttention(const attnc_definition &D,
                   const runtime::LinearSignature &Sig);

/// A UserError naming \p Function and \p Argument when \p Ptr is null.
void requireNonNull(const void *Ptr, const char *Function,
                    const char *Argument);

} // namespace attn::capi

#endif
