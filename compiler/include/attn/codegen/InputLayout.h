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

/// For an int32 scalar input spelled \p Spelled (its field, "in.in_0_chunk")
/// as \p Divisor: the spelling of the floordiv multiplier the host wrote in
/// the slot's high 4 bytes ("(unsigned)in.in_0_chunk_pad_", inputSlots; 0
/// for a divisor of 0), which int_div.cuh's floordiv_by and
/// mask_interval.cuh's mb_floordiv_by take; empty for any other divisor.
std::string scalarDivisorMultiplier(const ir::Node *Divisor, llvm::StringRef Spelled);

/// Every field of Inputs is one 8-byte slot, in declaration order:
///  * scalar: slot 0 = the value (fp32 or int32) in its low 4 bytes, and
///    an int32's floordiv multiplier (int_div.cuh) in the high 4;
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

/// Whether \p G has a per-row, per-key or per-token input: one a packed
/// call's kernels rebase per sequence (Inputs::of_sequence).
bool hasSequenceInputs(const ir::Graph &G);

/// The `struct Inputs { ... };` text, fields named by inputField() (each
/// with a comment giving the user's name), with a `load_<field>(b, h, q, k)`
/// accessor per tensor input that clamps indices into range,
/// `kSequenceInputs` (hasSequenceInputs) and, where it is true,
/// `of_sequence(q0, kv0, seq_q, seq_kv, shift)`: a copy whose per-row,
/// per-key and per-token inputs start at a packed call's sequence, clamped
/// to its lengths, query-side ones read at q_idx − shift (the row's token:
/// a packed call's q_idx is row + Skv − Sq). Their fifth slot,
/// `<field>_row_shift`, holds that shift (0 in a dense call); a full
/// input's is its key count (`_cols`), unused otherwise. Each input indexed
/// by the key (readsKeys) also gets `load_<field>_in_keys`, the same read
/// without the key's clamp, and the struct `keys_cover(n)`: whether every
/// such input holds keys [0, n), under which the two accessors agree for
/// any key in [0, n). Each input indexed by the query alone (readsRows)
/// likewise gets `load_<field>_in_rows` (at an offset from `rows_at(b, h,
/// q0)`'s first query) and the struct `rows_cover(q0, n)`: whether every
/// such input holds queries [q0, q0 + n) (the row shift subtracted).
std::string inputsStruct(const ir::Graph &G);

/// Whether an input of shape \p S is indexed by the key (per_key,
/// per_key_token, full).
bool readsKeys(ir::InputShape S);

/// Whether an input of shape \p S is indexed by the query alone (per_row,
/// per_query_token).
bool readsRows(ir::InputShape S);

} // namespace attn::codegen

#endif
