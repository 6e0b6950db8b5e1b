// The autotuner's device side (runtime-internal): the reference output on
// random inputs, then each candidate's checked run and its timing.
#ifndef ATTN_RUNTIME_LIB_TUNERUNNER_H
#define ATTN_RUNTIME_LIB_TUNERUNNER_H

#include "attn/runtime/Backend.h"
#include "attn/runtime/RandomProblem.h"
#include "attn/runtime/Tuner.h"

#include <memory>
#include <vector>

namespace attn::runtime {

/// Checks candidates against the reference backend and times them on
/// random inputs of one shape. Construction allocates the inputs and runs
/// the reference once.
class GpuCandidateRunner final : public CandidateRunner {
public:
  /// Candidates are configurations of \p Skel for target \p T.
  GpuCandidateRunner(const CompiledDefinition &Def, const Signature &Sig,
                     const KernelTarget &T, const Skeleton &Skel,
                     const TuneShape &S, const TuneOptions &Opts);
  ~GpuCandidateRunner() override;

  std::string check(const std::string &Config) override;
  double time(const std::string &Config) override;
  double referenceSeconds() const { return RefSeconds; }
  /// The shape candidates are checked on: the problem's, or its first
  /// queries and keys where the reference cannot hold all the keys.
  const TuneShape &checkShape() const { return CheckShape; }

private:
  void run(AttentionBackend &B, const Signature &Sig, const KernelChoice &K,
           const RandomProblem::Call &C, int Set);
  std::string compare(const std::vector<uint16_t> &Out,
                      const std::vector<float> &Finals) const;

  const CompiledDefinition &Def;
  Signature Base;
  KernelTarget Target;
  const Skeleton &Skel;
  KernelChoice Default;
  TuneOptions Opts;
  RandomProblem Problem;
  TuneShape CheckShape;
  RandomProblem::Call TimeCall, CheckCall;
  /// The reference's output (the whole buffer; the check shape's part of it
  /// is compared) and finals (of the check shape).
  std::vector<uint16_t> RefOut;
  std::vector<float> RefFinals;
  double RefSeconds = 0;
  /// The candidate last checked, kept for time().
  std::string CurrentConfig;
  std::unique_ptr<AttentionBackend> Current;
  Signature CurrentSig;
  KernelChoice CurrentChoice;
};

} // namespace attn::runtime

#endif
