// The argument checks Attention (Validate.cpp) and LinearAttention
// (LinearValidate.cpp) share: one message text for each rule, so the two
// report the same mistake in the same words. Beside these, Validate.h
// declares the shared sequence-tensor and custom-input checks
// (checkSeqTensor, checkInputs, shapeText), defined in ValidateCommon.cpp.
#ifndef ATTN_RUNTIME_VALIDATECOMMON_H
#define ATTN_RUNTIME_VALIDATECOMMON_H

#include "attn/runtime/Validate.h"

#include <functional>
#include <string>
#include <vector>

namespace attn::runtime {

/// Throws InvalidArgument(\p Msg).
[[noreturn]] void invalid(const std::string &Msg);

/// The element type of a q/k/v tensor of \p T.
DType elemOf(DType T);

/// "<Name>: null data pointer" unless \p T has data.
void checkNotNull(const std::string &Name, const TensorView &T);
/// "<Name>: expected dtype <Want>, got <type>" unless \p T is of \p Want.
void checkElemType(const std::string &Name, const TensorView &T,
                   DType Want);
/// "<Name>: data pointer must be <Bytes>-byte aligned" unless it is.
void checkAligned(const std::string &Name, const TensorView &T, int Bytes);
/// "<Name>: expected shape <Want>, got <shape>" unless \p T's shape is
/// \p Want.
void checkShape(const std::string &Name, const TensorView &T,
                const std::vector<int64_t> &Want);
/// "<Name>: strides must be non-negative" unless they are.
void checkNonNegativeStrides(const std::string &Name, const TensorView &T);

/// A tensor that must have the batch, seq and heads of another (a gradient
/// like the tensor it is the gradient of, an output like an input):
/// "<Name>: expected batch B, seq S and heads H (as <Of>), got ...".
void checkLike(const char *Name, const SeqTensor &G, const char *Of,
               int64_t B, int64_t S, int64_t H);

/// The finals of a validated call: [F, B, H, Sq] float32 (a packed call:
/// [F, H, Tq]), contiguous, required where \p G has final rowscales.
void checkFinals(const ir::Graph &G, const CallShape &C,
                 const TensorView *Finals);

/// The shape a custom input must have and, where not empty, its axes'
/// names for the message ("[heads, q tokens] in a packed call").
struct InputWant {
  std::vector<int64_t> Shape;
  std::string Axes;
};
/// Every input \p G declares supplied, of its element type and of the shape
/// \p Want gives for its declaration (InvalidArgument naming it), and no
/// other supplied: checkInputs with a rule of the caller's.
void checkInputsAs(const ir::Graph &G, const InputMap &Inputs,
                   const std::function<InputWant(const ir::InputDecl &)> &Want);

/// Copies \p S's element strides (batch, head, seq) into \p Dst.
void storeStrides(int64_t (&Dst)[3], const SeqTensor &S);

} // namespace attn::runtime

#endif
