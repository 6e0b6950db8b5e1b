// The C interface's run-time arguments turned into the runtime's views,
// each checked first with a message naming the function and the argument.
#ifndef ATTNC_CAPI_RUNTIMEARGS_H
#define ATTNC_CAPI_RUNTIMEARGS_H

#include "CapiInternal.h"

#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <optional>

namespace attn::capi {

/// The calling function's name, for messages ("attnc_attention_forward").
struct ArgContext {
  const char *Function;
};

/// \p T as a view; UserError naming \p Argument when it is NULL, its ndim is
/// out of range, its shape is NULL or its dtype is not an attnc_dtype.
runtime::TensorView tensorArg(const ArgContext &C, const char *Argument,
                              const attnc_tensor *T);
/// The same for an optional argument: nothing for NULL.
std::optional<runtime::TensorView>
optionalTensorArg(const ArgContext &C, const char *Argument,
                  const attnc_tensor *T);

/// The custom-input values: each named, of a known kind, no name twice.
runtime::InputMap inputsArg(const ArgContext &C, const attnc_input *Inputs,
                            size_t Count);
/// The input gradients by name (no name twice).
runtime::InputGradMap gradsArg(const ArgContext &C,
                               const attnc_named_tensor *Grads, size_t Count);
/// A varlen batch (both cu_seqlens tensors checked as tensors).
runtime::VarlenBatch varlenArg(const ArgContext &C, const attnc_varlen *B);

/// \p M's block mask; InvalidArgument naming 'mask' when it is NULL.
const runtime::BlockMask &blockMaskArg(const ArgContext &C,
                                       const attnc_block_mask *M);

/// The signature: enums in range, strings NULL or text.
runtime::Signature signatureArg(const ArgContext &C,
                                const attnc_signature *S);

/// The same for a linear-attention signature.
runtime::LinearSignature linearSignatureArg(const ArgContext &C,
                                            const attnc_linear_signature *S);

/// The pointer of an optional view, for the runtime's optional arguments.
inline const runtime::TensorView *
ptr(const std::optional<runtime::TensorView> &V) {
  return V ? &*V : nullptr;
}

/// \p D as an attnc_input_info (its name stays \p D's).
void inputInfo(const ir::InputDecl &D, attnc_input_info &Info);
/// Declaration \p Index of \p Decls into \p Info, for the *_input_info
/// calls: \p Info non-NULL and \p Index in range, each checked by name.
void inputInfoAt(const ArgContext &C, const std::vector<ir::InputDecl> &Decls,
                 size_t Index, attnc_input_info *Info);
attnc_input_shape shapeCode(ir::InputShape S);
/// InvalidArgument naming 'index' unless \p Index < \p Count.
void requireIndex(const ArgContext &C, size_t Index, size_t Count);

/// attnc_arch of a GpuArch.
int32_t archCode(GpuArch A);

// ---- the attention and linear-attention handles ------------------------

/// The runtime object of handle \p H (attnc_attention,
/// attnc_linear_attention); InvalidArgument naming 'att' when it is NULL.
template <typename Handle> auto &handleArg(const ArgContext &C, Handle *H) {
  if (!H)
    throw InvalidArgument(
        fmt::format("{}: argument 'att' is NULL", C.Function));
  return *H->Att;
}

/// The custom inputs a handle's definition declares.
template <typename Runtime>
const std::vector<ir::InputDecl> &declaredInputs(const Runtime &A) {
  return A.definition().Graph->decls().Inputs;
}

/// A create function's body: `out` checked and cleared, `def` checked,
/// then \p Make(C) builds the handle (a unique_ptr) that *\p Out takes.
template <typename Handle, typename MakeFn>
attnc_status createHandle(const char *Function, const attnc_definition *Def,
                          Handle **Out, MakeFn &&Make) {
  return guarded([&] {
    ArgContext C{Function};
    requireNonNull(Out, C.Function, "out");
    *Out = nullptr;
    requireNonNull(Def, C.Function, "def");
    std::unique_ptr<Handle> Made = Make(C);
    *Out = Made.release();
  });
}

/// An *_input_count function's body: *\p Count = the declared inputs.
template <typename Handle>
attnc_status handleInputCount(const char *Function, const Handle *H,
                              size_t *Count) {
  return guarded([&] {
    ArgContext C{Function};
    const auto &A = handleArg(C, H);
    requireNonNull(Count, C.Function, "count");
    *Count = declaredInputs(A).size();
  });
}

/// An *_input_info function's body.
template <typename Handle>
attnc_status handleInputInfo(const char *Function, const Handle *H,
                             size_t Index, attnc_input_info *Info) {
  return guarded([&] {
    ArgContext C{Function};
    inputInfoAt(C, declaredInputs(handleArg(C, H)), Index, Info);
  });
}

} // namespace attn::capi

#endif
