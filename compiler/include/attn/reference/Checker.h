// attnc check: the reference interpreter run against itself on random data.
#ifndef ATTN_REFERENCE_CHECKER_H
#define ATTN_REFERENCE_CHECKER_H

#include "attn/Pipeline.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attn::reference {

struct CheckRow {
  CheckRow(std::string Name, double MaxError, double Tolerance,
           bool Skipped = false, std::string Note = "")
      : Name(std::move(Name)), MaxError(MaxError), Tolerance(Tolerance),
        Skipped(Skipped), Note(std::move(Note)) {}
  std::string Name;    ///< "online (block 4) vs direct, s13x13"
  double MaxError = 0; ///< max |a-b| / (1 + |b|); NaN or a mismatch = inf
  double Tolerance = 0;
  bool Skipped = false;
  std::string Note; ///< why skipped, or extra detail
  bool passed() const { return Skipped || MaxError <= Tolerance; }
};

struct CheckReport {
  std::string Definition;
  std::vector<CheckRow> Rows;
  bool passed() const;
};

struct CheckOptions {
  uint64_t Seed = 20261126;
  /// Tolerance of the online-vs-direct and chunked-vs-recurrent checks.
  double AlgorithmTolerance = 1e-10;
  /// Tolerance of backward against central finite differences.
  double GradientTolerance = 1e-6;
};

/// For attention: for a definition with a mask, how much of each shape's
/// problem it masks (a row giving the fractions of masked elements and of
/// fully masked rows; it fails, "vacuous: every row is masked", when no row
/// keeps a key, since the checks then compare zeros with zeros); the
/// online algorithm over several key-block sizes against
/// the direct definition (o and final rowscales), on shapes with sequence
/// lengths that are not multiples of the block, GQA heads, and whole rows
/// masked; fully masked rows must give o = 0 and final rowscales = -inf;
/// the same at the head dims kernels use (64, 128, 192, 256), on one small
/// block, since the shapes above have head dims 3 to 6 and a definition may
/// read head_dim();
/// score_mod's symbolic derivatives (score_mod_grad, score_mod_input_grad)
/// against central differences of score_mod at random points; the backward
/// (written by the user or derived by the autodiff pass) against central
/// finite differences of sum(o ∘ dO) with respect to q, k, v and every
/// custom input that requires a gradient; and, for a written backward, the
/// derived one against it (skipped, with the reason, when it cannot be
/// derived). A definition whose backward cannot be derived and is not
/// written fails its backward row with the autodiff pass's message. A
/// definition with its own combine (OnlineFunc::combine) gets, per shape,
/// random splits of the keys (and one key a part) merged by it against the
/// unsplit online result.
/// For linear attention: the chunked algorithm with several chunk sizes
/// against the token recurrence, with and without an initial state (o and
/// the final state).
CheckReport check(const CompiledDefinition &Def, const CheckOptions &Opts = {});

/// The report as a table: check, max error, tolerance, result.
void printReport(const CheckReport &R, llvm::raw_ostream &OS);

} // namespace attn::reference

#endif
