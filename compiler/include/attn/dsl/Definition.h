// What a user writes: custom inputs, an online function, an attention or a
// linear-attention definition.
#ifndef ATTN_DSL_DEFINITION_H
#define ATTN_DSL_DEFINITION_H

#include "attn/dsl/Symbol.h"
#include "attn/ir/Types.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attn::dsl {

using ir::InputShape;
using ir::InputType;

/// The seeds' CustomIO: inputs beyond q, k, v, declared by name and shape
/// class, read inside the mods and online functions with `inputs["name"]`.
class CustomInputs {
public:
  /// Declares an input. \p SampleLo/\p SampleHi bound the values `attnc check`
  /// draws for it (mamba2's A must be negative, say).
  CustomInputs &declare(const std::string &Name, InputShape Shape,
                        double SampleLo = -1.0, double SampleHi = 1.0);
  /// Declares an input with element type \p Type: an int32 one
  /// (`in.declare("doc_q", InputShape::PerQueryToken, InputType::I32)`)
  /// reads as an i32 value, compared with other integers exactly (document
  /// ids, lengths). `attnc check` draws an int32 input's values from the
  /// whole numbers of [SampleLo, SampleHi] (default [0, 3]: a small set, so
  /// that equal ids occur).
  CustomInputs &declare(const std::string &Name, InputShape Shape,
                        InputType Type);
  CustomInputs &declare(const std::string &Name, InputShape Shape,
                        InputType Type, double SampleLo, double SampleHi);
  /// Marks the input declared last as learnable: the backward then also
  /// returns its gradient d_<name> (through score_mod; an input that
  /// requires a gradient may not be read by mask_mod or the online
  /// function). `in.declare("slopes", InputShape::PerHead).requiresGrad();`
  /// An int32 input has no gradient: a UserError.
  CustomInputs &requiresGrad();
  const std::vector<ir::InputDecl> &decls() const { return Decls; }

  /// The input \p Name as a symbol; only valid while a function is traced.
  SymbolScalar operator[](std::string_view Name) const;
  /// The problem's head dimension D (a compile-time constant), e.g. for a
  /// 1/sqrt(D) scale: `score * inputs.head_dim().rsqrt()`.
  SymbolScalar head_dim() const;

  /// Used by the tracer: binds the inputs to \p G for function \p Function,
  /// which accepts inputs whose space is one of \p Allowed.
  void bind(ir::Graph *G, std::string Function,
            std::vector<InputShape> Allowed) const;
  void unbind() const;

private:
  std::vector<ir::InputDecl> Decls;
  mutable ir::Graph *Bound = nullptr;
  mutable std::string BoundFunction;
  mutable std::vector<InputShape> BoundAllowed;
};

/// Named rowscales (name → symbol), as the seeds' dicts. Reading an unknown
/// name is a UserError that lists the declared ones.
class Rowscales {
public:
  Rowscales() = default;
  /// What a function returns: `{{"m", m_new}, {"r", r_new}}`. A name given
  /// twice keeps its last value and is remembered in repeated(); the tracer
  /// rejects it when the rowscales are returned ("online_fwd: rowscale 'r'
  /// is returned twice"), where the function is known.
  Rowscales(std::initializer_list<std::pair<std::string, SymbolScalar>> Init);

  SymbolScalar operator[](std::string_view Name) const;
  void set(const std::string &Name, SymbolScalar Value);
  bool contains(std::string_view Name) const;
  const std::vector<std::pair<std::string, SymbolScalar>> &entries() const {
    return Entries;
  }
  /// What reads say in errors: "online_fwd: rowscale" etc.
  void setOwner(std::string Function, std::string What);
  /// The names the initializer list gave more than once, in order.
  const std::vector<std::string> &repeated() const { return Repeated; }

private:
  std::vector<std::pair<std::string, SymbolScalar>> Entries;
  std::vector<std::string> Repeated;
  std::string Function, What = "rowscale";
};

/// A symbol or a plain number (o_scale = 1 needs no symbol).
class SymbolOrNumber {
public:
  SymbolOrNumber(SymbolScalar S) : Sym(S) {}
  SymbolOrNumber(double V) : Number(V) {}
  SymbolOrNumber(int V) : Number(V) {}
  SymbolScalar toSymbol(const SymbolScalar &Like) const {
    return Sym.empty() && Number ? Like.constant(*Number) : Sym;
  }

private:
  SymbolScalar Sym;
  std::optional<double> Number;
};

struct OnlineFwdResult {
  SymbolScalar scores;
  Rowscales rowscales;
  SymbolOrNumber o_scale = 1.0;
};

struct EpilogueResult {
  SymbolScalar o;
  Rowscales final_rowscales;
};

/// What combine returns: the merged online rowscales and the two factors of
/// the merged accumulator, o = o_scale_a·o_a + o_scale_b·o_b.
struct CombineResult {
  Rowscales rowscales;
  SymbolOrNumber o_scale_a = 1.0;
  SymbolOrNumber o_scale_b = 1.0;
};

/// The row-online algorithm on scores (the seeds' OnlineFunc). Subclasses
/// declare their rowscales in the constructor and implement the functions;
/// `backward` may be left out.
class OnlineFunc {
public:
  using Decls = std::vector<std::pair<std::string, Var>>;
  OnlineFunc(Decls OnlineRowscales, Decls FinalRowscales);
  virtual ~OnlineFunc();

  /// One key block: returns the new scores (P for this block), the new
  /// online rowscales and o_scale, the factor the accumulator is scaled by.
  virtual OnlineFwdResult online_fwd(SymbolScalar scores,
                                     const Rowscales &online_rowscales,
                                     SymbolScalar b, SymbolScalar h,
                                     SymbolScalar q_idx) const = 0;
  /// After the last block: the final output and the final rowscales.
  virtual EpilogueResult online_fwd_epilogue(SymbolScalar o,
                                             const Rowscales &online_rowscales,
                                             SymbolScalar b, SymbolScalar h,
                                             SymbolScalar q_idx) const = 0;
  /// Recomputes P from scores and the final rowscales (for backward).
  virtual SymbolScalar forward(SymbolScalar scores,
                               const Rowscales &final_rowscales, SymbolScalar b,
                               SymbolScalar h, SymbolScalar q_idx,
                               SymbolScalar kv_idx) const = 0;
  /// dscores from dP, P (here `scores`, as in the seeds), the final rowscales
  /// and doosum = rowsum(dO∘O). Return std::nullopt to leave it out.
  virtual std::optional<SymbolScalar>
  backward(SymbolScalar dp, SymbolScalar scores,
           const Rowscales &final_rowscales, SymbolScalar doosum,
           SymbolScalar b, SymbolScalar h, SymbolScalar q_idx,
           SymbolScalar kv_idx) const;

  /// Merges two partial states of one query row, each the result of
  /// online_fwd over a disjoint set of keys (state a's keys, then b's):
  /// returns the merged rowscales and the factors of o = o_scale_a·o_a +
  /// o_scale_b·o_b. Per-row values of the two states' rowscales only (no
  /// scores, inputs or indices); each state has met at least one unmasked
  /// key (an empty part is skipped). Used to split a row's keys (decode's
  /// split-KV) where attnc cannot derive the merge itself; `attnc check`
  /// verifies it in fp64. Return std::nullopt (the default) for none.
  virtual std::optional<CombineResult> combine(const Rowscales &a,
                                               const Rowscales &b) const;

  const Decls &onlineRowscales() const { return Online; }
  const Decls &finalRowscales() const { return Final; }

  /// The definition's custom inputs, readable inside the functions.
  const CustomInputs &inputs() const;
  void bindInputs(const CustomInputs *In) const { Inputs = In; }

private:
  Decls Online, Final;
  mutable const CustomInputs *Inputs = nullptr;
};

/// score_mod(score, inputs, b, h, q_idx, kv_idx).
using ScoreMod = std::function<SymbolScalar(
    SymbolScalar, const CustomInputs &, SymbolScalar, SymbolScalar,
    SymbolScalar, SymbolScalar)>;

/// mask_mod(b, h, q_idx, kv_idx), or with the inputs as a fifth argument
/// (document masks need per-row/per-key ids). True keeps the element.
class MaskMod {
public:
  using Fn = std::function<SymbolScalar(SymbolScalar, SymbolScalar,
                                        SymbolScalar, SymbolScalar,
                                        const CustomInputs &)>;
  MaskMod() = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<
                            std::decay_t<F>, MaskMod>>>
  MaskMod(F Callable) {
    if constexpr (std::is_invocable_v<F, SymbolScalar, SymbolScalar,
                                      SymbolScalar, SymbolScalar,
                                      const CustomInputs &>)
      Impl = Callable;
    else
      Impl = [Callable](SymbolScalar B, SymbolScalar H, SymbolScalar Q,
                        SymbolScalar K, const CustomInputs &) {
        return Callable(B, H, Q, K);
      };
  }
  explicit operator bool() const { return bool(Impl); }
  SymbolScalar operator()(SymbolScalar B, SymbolScalar H, SymbolScalar Q,
                          SymbolScalar K, const CustomInputs &In) const {
    return Impl(B, H, Q, K, In);
  }

private:
  Fn Impl;
};

/// An elementwise linear-attention mod: f(x, inputs) as in the seeds, or
/// f(x, inputs, b, h, t) with the batch, head and token indices.
class ElementMod {
public:
  using Fn = std::function<SymbolScalar(SymbolScalar, const CustomInputs &,
                                        SymbolScalar, SymbolScalar,
                                        SymbolScalar)>;
  ElementMod() = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<
                            std::decay_t<F>, ElementMod>>>
  ElementMod(F Callable) {
    if constexpr (std::is_invocable_v<F, SymbolScalar, const CustomInputs &,
                                      SymbolScalar, SymbolScalar,
                                      SymbolScalar>)
      Impl = Callable;
    else
      Impl = [Callable](SymbolScalar X, const CustomInputs &In, SymbolScalar,
                        SymbolScalar, SymbolScalar) { return Callable(X, In); };
  }
  explicit operator bool() const { return bool(Impl); }
  SymbolScalar operator()(SymbolScalar X, const CustomInputs &In,
                          SymbolScalar B, SymbolScalar H,
                          SymbolScalar T) const {
    return Impl(X, In, B, H, T);
  }

private:
  Fn Impl;
};

/// What every definition has: a name, a one-line description, the inputs.
struct DefinitionBase {
  explicit DefinitionBase(std::string Name, ir::DefinitionKind K)
      : name(std::move(Name)), Kind(K) {}
  virtual ~DefinitionBase();
  std::string name;
  std::string description;
  CustomInputs inputs;
  ir::DefinitionKind kind() const { return Kind; }

private:
  ir::DefinitionKind Kind;
};

/// Transformer-style attention: scores = q·kᵀ, masked, modified, then the
/// online function turns them into P, and o = P·v.
struct AttentionDef : DefinitionBase {
  explicit AttentionDef(std::string Name)
      : DefinitionBase(std::move(Name), ir::DefinitionKind::Transformer) {}
  ScoreMod score_mod; ///< identity when empty
  MaskMod mask_mod;   ///< no mask when empty
  std::shared_ptr<const OnlineFunc> online_func;
};

/// Linear attention, per head with per-token log-decay g = decay_mod(decay):
/// S_t = exp(g_t)·S_{t−1} + k_tᵀ v_t,  o_t = q_t S_t.
struct LinearAttentionDef : DefinitionBase {
  explicit LinearAttentionDef(std::string Name)
      : DefinitionBase(std::move(Name), ir::DefinitionKind::Linear) {}
  ElementMod q_mod, k_mod, v_mod; ///< identity when empty
  ElementMod decay_mod;           ///< identity when empty: decay is g
  /// The range `attnc check` draws the decay input from.
  double decay_sample_lo = -1.0, decay_sample_hi = 0.0;
};

} // namespace attn::dsl

#endif
