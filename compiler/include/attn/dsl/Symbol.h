// SymbolScalar: the user's value handle in the DSL, and Var for initial values.
#ifndef ATTN_DSL_SYMBOL_H
#define ATTN_DSL_SYMBOL_H

#include "attn/ir/Types.h"

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace attn::ir {
class Graph;
class Node;
} // namespace attn::ir

namespace attn::dsl {

namespace detail {
/// The C++ numbers the DSL lifts to constants: integers become i32 (when
/// they fit), floating-point numbers f32; bool is not a number.
template <typename T>
constexpr bool IsNumber = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;
template <typename T>
using IfNumber = std::enable_if_t<IsNumber<T>>;
} // namespace detail

/// A symbolic scalar: a 16-byte handle to a node of the definition's graph.
/// It stands for a whole family of values (one per row, per element, ...);
/// combining values of different spaces broadcasts implicitly.
///
/// A symbol belongs to one trace. The handle holds its graph's serial
/// (ir::Graph::serial()), not the graph's address, so that a symbol kept
/// after its trace ended is recognised even when a later graph was
/// allocated at the same address (with the same node addresses, which is
/// what tracing the same functions again gives): a serial is never reused,
/// and graph() looks it up among the live graphs without touching the
/// destroyed one.
class SymbolScalar {
public:
  SymbolScalar() = default;
  /// A handle to node \p N of the live graph \p G.
  SymbolScalar(ir::Graph *G, const ir::Node *N);

  bool empty() const { return N == nullptr; }
  const ir::Node *node() const { return N; }
  /// The node's graph; nullptr for an empty symbol or one whose graph has
  /// been destroyed (a symbol kept from a trace that has ended).
  ir::Graph *graph() const;

  SymbolScalar exp() const;
  SymbolScalar exp2() const;
  SymbolScalar log() const;
  SymbolScalar log2() const;
  SymbolScalar abs() const;
  SymbolScalar tanh() const;
  SymbolScalar sigmoid() const;
  SymbolScalar relu() const;
  SymbolScalar sqrt() const;
  SymbolScalar rsqrt() const;
  /// The value as f32: the explicit conversion a comparison of an i32 value
  /// (an index, an int32 input) with an f32 one needs
  /// (`kv_idx.to_float() < inputs["P"]`). Of an f32 value, the value itself.
  SymbolScalar to_float() const;
  SymbolScalar max(const SymbolScalar &Other) const;
  SymbolScalar min(const SymbolScalar &Other) const;
  /// With a C++ number, lifted like the binary operators' (so `q_idx.max(0)`
  /// stays i32, `x.max(0.0)` is an f32 constant).
  template <typename T, typename = detail::IfNumber<T>>
  SymbolScalar max(T Other) const;
  template <typename T, typename = detail::IfNumber<T>>
  SymbolScalar min(T Other) const;

  /// Reduces a per-element value over the keys: "max", "sum" or "abssum".
  SymbolScalar get_reduce(std::string_view Op) const;
  SymbolScalar get_reduce(ir::ReduceOp Op) const;

  /// A constant in the same graph as this symbol. This is how a definition
  /// opts in to an infinite constant (`s.constant(-INFINITY)`); a C++ number
  /// that an operator lifts must be finite. NaN is never a constant: a
  /// UserError naming the function.
  SymbolScalar constant(double V) const;
  SymbolScalar constantInt(long long V) const;

  SymbolScalar &operator+=(const SymbolScalar &O);
  SymbolScalar &operator-=(const SymbolScalar &O);
  SymbolScalar &operator*=(const SymbolScalar &O);
  SymbolScalar &operator/=(const SymbolScalar &O);
  /// With a C++ number on the right, lifted as by the binary operators.
  template <typename T, typename = detail::IfNumber<T>>
  SymbolScalar &operator+=(T O);
  template <typename T, typename = detail::IfNumber<T>>
  SymbolScalar &operator-=(T O);
  template <typename T, typename = detail::IfNumber<T>>
  SymbolScalar &operator*=(T O);
  template <typename T, typename = detail::IfNumber<T>>
  SymbolScalar &operator/=(T O);

private:
  uint64_t GraphSerial = 0; ///< ir::Graph::serial() of the node's graph
  const ir::Node *N = nullptr;
};

static_assert(sizeof(SymbolScalar) == 16,
              "SymbolScalar is a 16-byte handle, cheap to pass by value");

/// An initial value of a rowscale: Var("-inf"), Var("inf"), Var(0.0), Var("1").
class Var {
public:
  /// A number or ±inf; NaN is a UserError (no rowscale can start at NaN).
  Var(double V);
  Var(int V) : Value(V) {}
  /// Reads "-inf", "inf" or a number; anything else is a UserError.
  Var(const char *Text);
  double value() const { return Value; }

private:
  double Value;
};

namespace detail {
SymbolScalar apply(ir::NodeKind K, const SymbolScalar &A, const SymbolScalar &B);
/// The constant for a C++ number \p V given to operation \p Op: a UserError
/// naming the function and the operation when \p V is NaN or infinite.
SymbolScalar literal(const SymbolScalar &Like, double V, bool Integral,
                     std::string_view Op);
/// The same, \p K's mnemonic naming the operation.
SymbolScalar literal(const SymbolScalar &Like, double V, bool Integral,
                     ir::NodeKind K);
template <typename T>
SymbolScalar lift(const SymbolScalar &Like, T V, ir::NodeKind K) {
  return literal(Like, static_cast<double>(V), std::is_integral_v<T>, K);
}
} // namespace detail

// Binary operators with a symbol on either side, or a C++ number on either
// side (integers stay i32, floating-point numbers are f32; detail::IsNumber).
#define ATTN_DSL_BINARY_OPERATOR(Op, Kind)                                     \
  inline SymbolScalar operator Op(const SymbolScalar &A,                       \
                                  const SymbolScalar &B) {                     \
    return detail::apply(ir::NodeKind::Kind, A, B);                            \
  }                                                                            \
  template <typename T, typename = std::enable_if_t<detail::IsNumber<T>>>      \
  SymbolScalar operator Op(const SymbolScalar &A, T B) {                       \
    return detail::apply(ir::NodeKind::Kind, A,                                \
                         detail::lift(A, B, ir::NodeKind::Kind));              \
  }                                                                            \
  template <typename T, typename = std::enable_if_t<detail::IsNumber<T>>>      \
  SymbolScalar operator Op(T A, const SymbolScalar &B) {                       \
    return detail::apply(ir::NodeKind::Kind,                                   \
                         detail::lift(B, A, ir::NodeKind::Kind), B);           \
  }
ATTN_DSL_BINARY_OPERATOR(+, Add)
ATTN_DSL_BINARY_OPERATOR(-, Sub)
ATTN_DSL_BINARY_OPERATOR(*, Mul)
ATTN_DSL_BINARY_OPERATOR(/, Div)
ATTN_DSL_BINARY_OPERATOR(<, Lt)
ATTN_DSL_BINARY_OPERATOR(<=, Le)
ATTN_DSL_BINARY_OPERATOR(>, Gt)
ATTN_DSL_BINARY_OPERATOR(>=, Ge)
ATTN_DSL_BINARY_OPERATOR(==, Eq)
ATTN_DSL_BINARY_OPERATOR(!=, Ne)
#undef ATTN_DSL_BINARY_OPERATOR

template <typename T, typename>
SymbolScalar SymbolScalar::max(T Other) const {
  return detail::apply(ir::NodeKind::Max, *this,
                       detail::lift(*this, Other, ir::NodeKind::Max));
}
template <typename T, typename>
SymbolScalar SymbolScalar::min(T Other) const {
  return detail::apply(ir::NodeKind::Min, *this,
                       detail::lift(*this, Other, ir::NodeKind::Min));
}

#define ATTN_DSL_COMPOUND_ASSIGNMENT(Op)                                       \
  template <typename T, typename>                                              \
  SymbolScalar &SymbolScalar::operator Op##=(T O) {                            \
    return *this = *this Op O;                                                 \
  }
ATTN_DSL_COMPOUND_ASSIGNMENT(+)
ATTN_DSL_COMPOUND_ASSIGNMENT(-)
ATTN_DSL_COMPOUND_ASSIGNMENT(*)
ATTN_DSL_COMPOUND_ASSIGNMENT(/)
#undef ATTN_DSL_COMPOUND_ASSIGNMENT

SymbolScalar operator-(const SymbolScalar &A);
/// Logical and/or/not on booleans (masks): `(q_idx >= kv_idx) & (q_idx - kv_idx < 128)`.
SymbolScalar operator&(const SymbolScalar &A, const SymbolScalar &B);
SymbolScalar operator|(const SymbolScalar &A, const SymbolScalar &B);
SymbolScalar operator!(const SymbolScalar &A);

/// `Cond ? Then : Else`, elementwise.
SymbolScalar select(const SymbolScalar &Cond, const SymbolScalar &Then,
                    const SymbolScalar &Else);
SymbolScalar select(const SymbolScalar &Cond, const SymbolScalar &Then,
                    double Else);
SymbolScalar select(const SymbolScalar &Cond, double Then,
                    const SymbolScalar &Else);
SymbolScalar select(const SymbolScalar &Cond, double Then, double Else);

// Free-function spellings of the methods, for formulas that read better so.
inline SymbolScalar exp(const SymbolScalar &X) { return X.exp(); }
inline SymbolScalar log(const SymbolScalar &X) { return X.log(); }
inline SymbolScalar max(const SymbolScalar &A, const SymbolScalar &B) {
  return A.max(B);
}
inline SymbolScalar min(const SymbolScalar &A, const SymbolScalar &B) {
  return A.min(B);
}

/// Floor division and modulo, Python's `//` and `%` (C++'s `/` and `%` on
/// ints truncate instead): floordiv(a, b) = floor(a / b) and mod(a, b) =
/// a - b·floordiv(a, b), which has the divisor's sign. i32 when both
/// operands are i32 (`floordiv(q_idx, C) == floordiv(kv_idx, C)` for a chunked
/// mask), else f32. A divisor of 0 gives floordiv 0 and mod a (a constant 0
/// divisor is a UserError, as for `/`). docs/ir-semantics.md has the rest.
#define ATTN_DSL_BINARY_FUNCTION(Fn, Kind)                                     \
  inline SymbolScalar Fn(const SymbolScalar &A, const SymbolScalar &B) {       \
    return detail::apply(ir::NodeKind::Kind, A, B);                            \
  }                                                                            \
  template <typename T, typename = std::enable_if_t<detail::IsNumber<T>>>      \
  SymbolScalar Fn(const SymbolScalar &A, T B) {                                \
    return detail::apply(ir::NodeKind::Kind, A,                                \
                         detail::lift(A, B, ir::NodeKind::Kind));              \
  }                                                                            \
  template <typename T, typename = std::enable_if_t<detail::IsNumber<T>>>      \
  SymbolScalar Fn(T A, const SymbolScalar &B) {                                \
    return detail::apply(ir::NodeKind::Kind,                                   \
                         detail::lift(B, A, ir::NodeKind::Kind), B);           \
  }
ATTN_DSL_BINARY_FUNCTION(floordiv, FloorDiv)
ATTN_DSL_BINARY_FUNCTION(mod, Mod)
#undef ATTN_DSL_BINARY_FUNCTION

} // namespace attn::dsl

#endif
