// The generated Inputs struct (custom inputs as a kernel parameter) and its
// layout, which the host side fills slot by slot.
#ifndef ATTN_CODEGEN_INPUTLAYOUT_H
#define ATTN_CODEGEN_INPUTLAYOUT_H

#include "attn/ir/Graph.h"

#include <string>
#include <vector>

namespace attn::codegen {

/// Every field of Inputs is one 8-byte slot, in declaration order:
///  * scalar: slot 0 = the fp32 value in its low 4 bytes;
///  * tensor (per_head, per_row, per_key, full; fp32 data):
///    slot 0 = device pointer, 1 = batch stride, 2 = head stride,
///    3 = query-row stride (full only; else 0), 4 = rows (Sq or Skv),
///    5 = columns (Skv for full; else 0). Strides are in elements.
/// With no inputs there is one unused slot (a struct cannot be empty in C).
struct InputSlots {
  std::string Name;
  ir::InputShape Shape;
  unsigned First = 0;
  unsigned Count = 0;
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

/// The `struct Inputs { ... };` text, with a `load_<name>(b, h, q, k)`
/// accessor per tensor input that clamps indices into range.
std::string inputsStruct(const ir::Graph &G);

} // namespace attn::codegen

#endif
