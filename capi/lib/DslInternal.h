// What the C interface's DSL files share: symbols as C values, text
// handles, and a traced function's result.
#ifndef ATTNC_CAPI_DSLINTERNAL_H
#define ATTNC_CAPI_DSLINTERNAL_H

#include "CapiInternal.h"
#include "attnc/attnc_c_dsl.h"

#include "attn/dsl/Symbol.h"

#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

struct attnc_text {
  std::string Text;
};

/// What a callback returned for one traced function.
struct attnc_trace_result {
  std::string Function; ///< the function traced, for messages
  std::optional<attn::dsl::SymbolScalar> Value;
  std::optional<attn::dsl::SymbolScalar> OScale;
  std::optional<double> OScaleNumber;
  /// combine's o_scale_b (o_scale_a is OScale/OScaleNumber).
  std::optional<attn::dsl::SymbolScalar> OScaleB;
  std::optional<double> OScaleBNumber;
  attn::dsl::Rowscales Rowscales;
  std::string Failure;
  bool Verbatim = false;
};

namespace attn::capi {

static_assert(sizeof(attnc_symbol) == sizeof(dsl::SymbolScalar) &&
                  std::is_trivially_copyable_v<dsl::SymbolScalar>,
              "attnc_symbol carries a SymbolScalar's bytes");

inline attnc_symbol toC(const dsl::SymbolScalar &S) {
  attnc_symbol C;
  std::memcpy(&C, &S, sizeof C);
  return C;
}

/// The symbol \p C carries; a UserError naming \p Function and \p Argument
/// when it is NULL.
inline dsl::SymbolScalar fromC(const attnc_symbol *C, const char *Function,
                               const char *Argument) {
  requireNonNull(C, Function, Argument);
  dsl::SymbolScalar S;
  // Trivially copyable (asserted above), so its bytes may be copied in.
  std::memcpy(static_cast<void *>(&S), C, sizeof S);
  return S;
}

/// A handle for the IR graph \p Json (IrFile.cpp); \p Origin names the
/// first pass ir() prints: "trace" (a plugin traced it) or "load".
attnc_definition *graphDefinition(std::string Json, std::string Origin);

/// A text handle holding \p Text, stored into \p Out.
inline void setText(attnc_text **Out, std::string Text) {
  *Out = new attnc_text{std::move(Text)};
}

} // namespace attn::capi

#endif
