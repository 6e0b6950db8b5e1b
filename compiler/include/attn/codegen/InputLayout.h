// The generated Inputs struct (custom inputs as a kernel parameter) and its
// layout, which the host side fills slot by slot.
#ifndef ATTN_CODEGEN_INPUTLAYOUT_H
#define ATTN_CODEGEN_INPUTLAYOUT_H

#include "attn/ir/Graph.h"

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace attn::codegen {

/// The C++ identifier generated code uses for a user-named declaration.
/// A user's name never reaches C++ as it is: it may be a keyword ('float',
/// 'return'), a name the generated code uses itself ('q', 'k', 'b'), a
/// reserved one ('__x', '_X'), or, from a loaded IR file, not an identifier
/// at all. \p Prefix, the declaration's index, then the name's ASCII letters
/// and digits with one '_' for each run of anything else (none leading or
/// trailing): generatedName("in", 0, "bias") is "in_0_bias",
/// generatedName("rs", 1, "__m") is "rs_1_m". The index alone keeps two
/// names apart; the rest is for a reader. Never holds "__".
std::string generatedName(llvm::StringRef Prefix, unsigned Index,
                          llvm::StringRef UserName);
/// \p UserName in single quotes for a `//` comment of generated code, as
/// the user wrote it but for control characters (a line break would end
/// the comment), written \xNN.
std::string quotedName(llvm::StringRef UserName);
/// The Inputs field of the custom input \p Name ("in_<index>_<name>",
/// by its position in declaration order); InternalError if there is none.
std::string inputField(const ir::Graph &G, llvm::StringRef Name);
/// The RowState field of the online rowscale \p Name ("rs_<index>_<name>");
/// InternalError if there is none.
std::string rowscaleField(const ir::Graph &G, llvm::StringRef Name);

/// Every field of Inputs is one 8-byte slot, in declaration order:
///  * scalar: slot 0 = the value (fp32 or int32) in its low 4 bytes;
///  * tensor (per_head, per_row, per_key, full, per_query_token,
///    per_key_token; fp32 or int32 data): slot 0 = device pointer,
///    1 = batch stride, 2 = head stride (per-token: unused, 0),
///    3 = query-row stride (full only; else 0), 4 = rows (Sq or Skv),
///    5 = columns (Skv for full; else 0). Strides are in elements.
/// With no inputs there is one unused slot (a struct cannot be empty in C).
struct InputSlots {
  std::string Name;
  ir::InputShape Shape;
  unsigned First = 0;
  unsigned Count = 0;
  ir::InputType Elem = ir::InputType::F32;
};

struct InputLayout {
  std::vector<InputSlots> Inputs;
  unsigned TotalSlots = 1;
  unsigned bytes() const { return TotalSlots * 8; }
};

InputLayout inputLayout(const ir::Graph &G);

/// A custom input that requires a gradient (CustomInputs::requiresGrad).
/// The i-th of gradInputs() is written to d[i] by Variant::input_grads;
/// its gradient has the input's own shape class and is the sum, over the
/// unmasked elements (b, h, q_idx, kv_idx) that read it, of dS·d[i], with
/// dS the gradient of the modified score (Variant::backward's result).
struct GradInput {
  std::string Name;
  ir::InputShape Shape;
  unsigned InputIndex = 0; ///< its position among all inputs (inputLayout)
};

/// The custom inputs that require a gradient, in declaration order.
std::vector<GradInput> gradInputs(const ir::Graph &G);

/// The `struct Inputs { ... };` text, fields named by inputField() (each
/// with a comment giving the user's name), with a `load_<field>(b, h, q, k)`
/// accessor per tensor input that clamps indices into range.
std::string inputsStruct(const ir::Graph &G);

} // namespace attn::codegen

#endif
