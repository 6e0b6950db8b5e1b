// The C interface's symbols: each operation is the C++ DSL's own, so the
// graph, the constants and the error messages are those of a C++ trace.
#include "DslInternal.h"

#include "attn/Error.h"
#include "attn/dsl/Definition.h"
#include "attn/ir/Printer.h"

#include <cmath>

using namespace attn;
using namespace attn::capi;
using dsl::SymbolScalar;

namespace {

ir::NodeKind binaryKind(attnc_binary_op Op) {
  switch (Op) {
  case ATTNC_ADD:
    return ir::NodeKind::Add;
  case ATTNC_SUB:
    return ir::NodeKind::Sub;
  case ATTNC_MUL:
    return ir::NodeKind::Mul;
  case ATTNC_DIV:
    return ir::NodeKind::Div;
  case ATTNC_LT:
    return ir::NodeKind::Lt;
  case ATTNC_LE:
    return ir::NodeKind::Le;
  case ATTNC_GT:
    return ir::NodeKind::Gt;
  case ATTNC_GE:
    return ir::NodeKind::Ge;
  case ATTNC_EQ:
    return ir::NodeKind::Eq;
  case ATTNC_NE:
    return ir::NodeKind::Ne;
  case ATTNC_AND:
    return ir::NodeKind::And;
  case ATTNC_OR:
    return ir::NodeKind::Or;
  case ATTNC_MAX:
    return ir::NodeKind::Max;
  case ATTNC_MIN:
    return ir::NodeKind::Min;
  case ATTNC_FLOORDIV:
    return ir::NodeKind::FloorDiv;
  case ATTNC_MOD:
    return ir::NodeKind::Mod;
  }
  throw UserError("attnc_symbol_binary: unknown operation " +
                  std::to_string(int(Op)));
}

SymbolScalar unary(attnc_unary_op Op, const SymbolScalar &X) {
  switch (Op) {
  case ATTNC_EXP:
    return X.exp();
  case ATTNC_EXP2:
    return X.exp2();
  case ATTNC_LOG:
    return X.log();
  case ATTNC_LOG2:
    return X.log2();
  case ATTNC_ABS:
    return X.abs();
  case ATTNC_TANH:
    return X.tanh();
  case ATTNC_SIGMOID:
    return X.sigmoid();
  case ATTNC_RELU:
    return X.relu();
  case ATTNC_SQRT:
    return X.sqrt();
  case ATTNC_RSQRT:
    return X.rsqrt();
  case ATTNC_TO_FLOAT:
    return X.to_float();
  case ATTNC_NEG:
    return -X;
  case ATTNC_NOT:
    return !X;
  }
  throw UserError("attnc_symbol_unary: unknown operation " +
                  std::to_string(int(Op)));
}

/// The C++ operator for \p K on two symbols (and/or and max/min included).
SymbolScalar binary(ir::NodeKind K, const SymbolScalar &A,
                    const SymbolScalar &B) {
  if (K == ir::NodeKind::And)
    return A & B;
  if (K == ir::NodeKind::Or)
    return A | B;
  return dsl::detail::apply(K, A, B);
}

} // namespace

const char *attnc_text_data(const attnc_text *text) {
  return text ? text->Text.c_str() : "";
}
size_t attnc_text_size(const attnc_text *text) {
  return text ? text->Text.size() : 0;
}
void attnc_text_release(attnc_text *text) { delete text; }

attnc_status attnc_symbol_unary(attnc_unary_op op, const attnc_symbol *x,
                                attnc_symbol *out) {
  return guarded([&] {
    requireNonNull(out, "attnc_symbol_unary", "out");
    *out = toC(unary(op, fromC(x, "attnc_symbol_unary", "x")));
  });
}

attnc_status attnc_symbol_binary(attnc_binary_op op, const attnc_symbol *a,
                                 const attnc_symbol *b, attnc_symbol *out) {
  return guarded([&] {
    requireNonNull(out, "attnc_symbol_binary", "out");
    ir::NodeKind K = binaryKind(op);
    *out = toC(binary(K, fromC(a, "attnc_symbol_binary", "a"),
                      fromC(b, "attnc_symbol_binary", "b")));
  });
}

attnc_status attnc_symbol_binary_number(attnc_binary_op op,
                                        const attnc_symbol *x, double value,
                                        int integral, int number_first,
                                        attnc_symbol *out) {
  return guarded([&] {
    requireNonNull(out, "attnc_symbol_binary_number", "out");
    ir::NodeKind K = binaryKind(op);
    if (K == ir::NodeKind::And || K == ir::NodeKind::Or)
      throw UserError(std::string("'") + ir::mnemonic(K).str() +
                      "' takes two booleans, not a number");
    SymbolScalar X = fromC(x, "attnc_symbol_binary_number", "x");
    // The lifting of the C++ operator templates (detail::lift): the number
    // becomes a constant of X's graph, or an error naming the operation.
    SymbolScalar N =
        dsl::detail::literal(X, value, integral != 0, ir::mnemonic(K));
    *out = toC(number_first ? binary(K, N, X) : binary(K, X, N));
  });
}

attnc_status attnc_symbol_select(const attnc_symbol *cond,
                                 const attnc_symbol *then_symbol,
                                 double then_value,
                                 const attnc_symbol *else_symbol,
                                 double else_value, attnc_symbol *out) {
  return guarded([&] {
    requireNonNull(out, "attnc_symbol_select", "out");
    SymbolScalar C = fromC(cond, "attnc_symbol_select", "cond");
    SymbolScalar R;
    if (then_symbol && else_symbol)
      R = dsl::select(C, fromC(then_symbol, "", ""),
                      fromC(else_symbol, "", ""));
    else if (then_symbol)
      R = dsl::select(C, fromC(then_symbol, "", ""), else_value);
    else if (else_symbol)
      R = dsl::select(C, then_value, fromC(else_symbol, "", ""));
    else
      R = dsl::select(C, then_value, else_value);
    *out = toC(R);
  });
}

attnc_status attnc_symbol_get_reduce(const attnc_symbol *x, const char *op,
                                     attnc_symbol *out) {
  return guarded([&] {
    requireNonNull(op, "attnc_symbol_get_reduce", "op");
    requireNonNull(out, "attnc_symbol_get_reduce", "out");
    *out = toC(fromC(x, "attnc_symbol_get_reduce", "x").get_reduce(op));
  });
}

attnc_status attnc_symbol_constant(const attnc_symbol *x, double value,
                                   int integral, attnc_symbol *out) {
  return guarded([&] {
    requireNonNull(out, "attnc_symbol_constant", "out");
    SymbolScalar X = fromC(x, "attnc_symbol_constant", "x");
    if (integral && std::trunc(value) != value)
      throw UserError("constant: " + std::to_string(value) +
                      " is not a whole number");
    *out = toC(integral ? X.constantInt(static_cast<long long>(value))
                        : X.constant(value));
  });
}

attnc_status attnc_symbol_text(const attnc_symbol *x, attnc_text **out) {
  return guarded([&] {
    requireNonNull(out, "attnc_symbol_text", "out");
    SymbolScalar X = fromC(x, "attnc_symbol_text", "x");
    // A symbol whose trace has ended has no node to print any more.
    if (X.empty())
      setText(out, "<empty symbol>");
    else if (!X.graph())
      setText(out, "<symbol of a trace that has ended>");
    else
      setText(out, ir::shortExpr(X.node()));
  });
}

attnc_status attnc_var_from_text(const char *text, double *out) {
  return guarded([&] {
    requireNonNull(text, "attnc_var_from_text", "text");
    requireNonNull(out, "attnc_var_from_text", "out");
    *out = dsl::Var(text).value();
  });
}

attnc_status attnc_var_from_number(double value, double *out) {
  return guarded([&] {
    requireNonNull(out, "attnc_var_from_number", "out");
    *out = dsl::Var(value).value();
  });
}

attnc_status attnc_inputs_get(const attnc_inputs *inputs, const char *name,
                              attnc_symbol *out) {
  return guarded([&] {
    requireNonNull(name, "attnc_inputs_get", "name");
    requireNonNull(out, "attnc_inputs_get", "out");
    // No inputs: the caller's handle outlived its function's trace; an
    // unbound CustomInputs says the same.
    if (!inputs)
      throw UserError("custom input '" + std::string(name) +
                      "' read outside a traced function");
    const auto *In = reinterpret_cast<const dsl::CustomInputs *>(inputs);
    *out = toC((*In)[name]);
  });
}

attnc_status attnc_inputs_head_dim(const attnc_inputs *inputs,
                                   attnc_symbol *out) {
  return guarded([&] {
    requireNonNull(out, "attnc_inputs_head_dim", "out");
    if (!inputs)
      throw UserError("head_dim() read outside a traced function");
    *out = toC(reinterpret_cast<const dsl::CustomInputs *>(inputs)
                   ->head_dim());
  });
}

attnc_status attnc_rowscales_get(const attnc_rowscales *rowscales,
                                 const char *name, attnc_symbol *out) {
  return guarded([&] {
    requireNonNull(name, "attnc_rowscales_get", "name");
    requireNonNull(out, "attnc_rowscales_get", "out");
    if (!rowscales)
      throw UserError("rowscale '" + std::string(name) +
                      "' read outside a traced function");
    *out = toC(
        (*reinterpret_cast<const dsl::Rowscales *>(rowscales))[name]);
  });
}
