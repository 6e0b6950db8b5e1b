// Pieces of the generated Variant struct: expressions, row functions.
#ifndef ATTN_CODEGEN_VARIANTEMITTER_H
#define ATTN_CODEGEN_VARIANTEMITTER_H

#include "attn/codegen/CodeWriter.h"
#include "attn/ir/Graph.h"

#include "llvm/ADT/DenseSet.h"

#include <functional>
#include <optional>
#include <string>

namespace attn::codegen {

/// How a parameter is spelled where the generated code reads it
/// ("f.at(r, c)", "st.m", "q_idx", "in.load_bias(b, h, q_idx, f.col(c))").
using ParamSpeller = std::function<std::string(const ir::ParamNode &)>;

/// A float literal that round-trips through fp32 ("0.5f", "-inf" as bits).
std::string floatLiteral(double V);

/// Emits IR nodes as `const T vN = ...;` (row level) or `const T eN = ...;`
/// (inside a loop over a row's elements), naming nodes by their ids.
class ExprEmitter {
public:
  ExprEmitter(CodeWriter &W, ParamSpeller Spell)
      : W(W), Spell(std::move(Spell)) {}
  /// How \p N is referred to: a literal, a parameter's spelling, or its name.
  std::string operand(const ir::Node *N, bool InLoop) const;
  /// The C++ expression computing \p N from its operands.
  std::string expr(const ir::Node *N, bool InLoop) const;
  /// Writes the definition of \p N.
  void define(const ir::Node *N, bool InLoop);
  /// Records which nodes the code for \p Roots refers to. A node whose only
  /// users fold it away (the x - y inside exp(x - y), emitted as one
  /// exp_diff(x, y)) is not needed and is never defined, so the generated
  /// code has no unused variables.
  void markNeeded(llvm::ArrayRef<const ir::Node *> Roots);
  bool needed(const ir::Node *N) const { return Needed.count(N); }
  /// exp(Scores − y) is spelled exp2(fma(Scores, ScaleLog2e, −y·log2 e)):
  /// Scores holds raw scores and score_mod's factor is folded into the FMA
  /// (see foldableScoreScale).
  void foldScoreScale(const ir::Node *Scores, std::string ScaleLog2e) {
    FoldedScores = Scores;
    FoldedScaleLog2e = std::move(ScaleLog2e);
  }
  /// For a function whose result is a value, not a mask's boolean (where a
  /// last-bit difference could flip a comparison against the reference):
  /// an element divided by a value of the row, head or a constant is
  /// spelled x * (1.0f / y): the reciprocal is an expression of the row
  /// alone, which the compiler computes once for the elements of a row that
  /// one (unrolled, inlined) loop evaluates, instead of one IEEE division
  /// (with a slow-path branch) per element. The result is within an ulp of
  /// the quotient unless 1/y overflows (a denormal y). tanh is spelled
  /// attnc::tanh_fast (through exp2, within about 2e-7 absolutely; five
  /// instructions where tanhf takes sixteen).
  void spellValueArithmetic() { ValueArithmetic = true; }
  /// Every non-leaf node reachable from \p Roots, as straight-line code.
  void emitScalarBody(llvm::ArrayRef<const ir::Node *> Roots);
  /// The element-level nodes \p Roots need that \p Done does not hold.
  void emitElementCone(llvm::ArrayRef<const ir::Node *> Roots,
                       llvm::DenseSet<const ir::Node *> &Done);

private:
  CodeWriter &W;
  ParamSpeller Spell;
  llvm::DenseSet<const ir::Node *> Needed;
  const ir::Node *FoldedScores = nullptr;
  std::string FoldedScaleLog2e;
  bool ValueArithmetic = false;
};

/// The body of `online_fwd(in, st, f, r, b, h, o_scale)` for one row r.
/// With \p FoldedScale (the spelling of score_mod's factor c, see
/// foldableScoreScale) the fragment holds raw scores: the body computes the
/// same row state and probabilities from them, c folded into the exp2 FMA.
void emitOnlineFwd(CodeWriter &W, const ir::Graph &G, const ParamSpeller &Spell,
                   const std::string &FoldedScale = "");

/// score_mod's factor c when the forward may skip score_mod and fold c into
/// online_fwd's exp2 argument, else null. Proven on the IR: score_mod is
/// score · c with c a compile-time constant, positive and normal at
/// \p HeadDim; online_fwd reads the scores only as reduce.max(scores) and
/// exp(scores − y) with y per row, and returns no raw score.
const ir::Node *foldableScoreScale(const ir::Graph &G, int HeadDim);
/// score_mod's factor c when the backward's P may be recomputed from the raw
/// score with c folded into exp2's FMA (`forward_folded`): score_mod is
/// score · c as for foldableScoreScale, and `forward` reads the scores only
/// as exp(scores − y) with y not per element.
const ir::Node *foldableForwardScale(const ir::Graph &G, int HeadDim);
/// score_mod as an affine function of the score, for the backward's P:
/// score_mod = score · c + Σ ±t_i, c a positive compile-time constant (null:
/// 1) and no t_i reading the score, and `forward` is exactly exp(scores − y)
/// with y not per element. Then P = exp2(score·(c·log2 e) + Σ ±t_i·log2 e −
/// y·log2 e), and log2 e joins a factor of a term that is the same over
/// the tile (emitAffineForwardFolded).
struct AffineScoreMod {
  const ir::Node *Factor = nullptr; ///< c, or null for 1
  struct Term {
    const ir::Node *Value;
    bool Negated;
  };
  std::vector<Term> Terms; ///< at least one
  const ir::Node *Y;       ///< forward's exp(scores − y)
};
std::optional<AffineScoreMod> affineScoreMod(const ir::Graph &G, int HeadDim);
/// The body of `forward_folded(in, score, finals, b, h, q_idx, kv_idx)` for
/// an affine score_mod: the terms and y accumulated into exp2's argument in
/// log2 units, a term u·v with u the same over the tile as one FMA by
/// u·log2 e, a term select(c, u, 0) as u·log2 e computed first and added
/// where c holds (a predicated add), any other term as one FMA by log2 e;
/// then one FMA adds score·(c·log2 e).
void emitAffineForwardFolded(CodeWriter &W, const AffineScoreMod &A,
                             const ParamSpeller &Spell);
/// The body of `epilogue(in, st, of, r, b, h, q_idx, finals)` for one row r.
void emitEpilogue(CodeWriter &W, const ir::Graph &G, const ParamSpeller &Spell);
/// The body of `add_input_grads(in, score, ds, valid, b, h, q_idx, kv_idx,
/// gacc)`: gacc[i] += ds · ∂score_mod/∂input_i for the i-th input that
/// requires a gradient (the results of score_mod_input_grad), ds being 0
/// where valid is false. Writes nothing when there is none.
void emitInputGrads(CodeWriter &W, const ir::Graph &G,
                    const ParamSpeller &Spell);

} // namespace attn::codegen

#endif
