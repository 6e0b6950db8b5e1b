// Paged prefill inside the runtime: the validated form of a call, and the
// runner that owns the paged forward kernel (Attention's prefillPaged,
// planPrefill and runPrefill use it).
#ifndef ATTN_RUNTIME_PAGEDPREFILL_H
#define ATTN_RUNTIME_PAGEDPREFILL_H

#include "KernelModule.h"
#include "PagedDecode.h"

#include "attn/codegen/Codegen.h"
#include "attn/runtime/Paged.h"

#include <optional>

namespace attn::runtime {

/// A paged prefill call whose arguments passed validatePrefillCall.
struct PrefillCall {
  /// The paged description (pages, lengths, caches' geometry) as a paged
  /// decode call's; Shape holds B, H, Hkv, the plan's bounds (Sq, Skv),
  /// q's and out's strides, Packed with CuQ and TotalQ.
  PagedCall Paged;
};

/// The bounds a prefill call's tensors describe: cu_seqlens_q's batch,
/// q's heads, the caches' KV heads and page size, \p MaxSeqlenQ and
/// KV.MaxSeqlenKv. Checks q, cu_seqlens_q and the caches (InvalidArgument
/// naming them).
PrefillBounds prefillCallBounds(const Signature &Sig, const TensorView &Q,
                                const TensorView &CuSeqlensQ,
                                int64_t MaxSeqlenQ, const PagedKV &KV);

/// Checks every argument of a paged prefill call against the signature,
/// the definition \p G and the plan's bounds \p B (InvalidArgument naming
/// the argument and the expected value; NotSupportedYet for custom inputs
/// other than scalar and per-head ones). With KV.Host, also every page
/// index and length on the host.
PrefillCall validatePrefillCall(const ir::Graph &G, const Signature &Sig,
                                const PrefillBounds &B, const TensorView &Q,
                                const TensorView &CuSeqlensQ,
                                const PagedKV &KV, const TensorView &Out,
                                const TensorView *Finals,
                                const InputMap &Inputs);

/// How paged prefill's kernel for pages of \p PageSize loads K/V: none
/// where fwd_sm80's kernel runs them (fwd_sm90 does not serve the call,
/// \p Use90 false), else fwd_sm90's: its gather for pages of fewer than
/// 8 tokens (its TMA boxes need 8 rows, the 128-byte swizzle's period),
/// \p Named's PagedLoad if given, defaultPagedLoad's if not.
std::optional<codegen::PagedLoad>
prefillLoadFor(bool Use90, int64_t PageSize,
               std::optional<codegen::PagedLoad> Named);

/// The paged prefill kernels of one definition and signature: fwd_sm80's
/// attnc_fwd_paged (every arch, every page size) and, on sm_90a where
/// fwd_sm90 runs the head dims and the signature does not name fwd_sm80,
/// fwd_sm90's (every page size: loaded as defaultPagedLoad says for the
/// page size, or as ATTNC_PAGED_LOAD names; pages under 8 tokens always
/// by its gather).
/// Each is compiled on first need (source()) and loaded on the first plan.
class PagedPrefillRunner {
public:
  PagedPrefillRunner(const CompiledDefinition &Def, const KernelTarget &T,
                     const codegen::FwdConfig &C, bool AllowSm90);

  /// makePrefillPlan for the kernel \p B's page size takes; loads it.
  PrefillPlan plan(const PrefillBounds &B);
  /// InvalidArgument unless this runner made \p P (plan()).
  void checkPlan(const PrefillPlan &P) const;
  /// Launches \p P's kernel for a validated call: no host decision, no
  /// allocation, no synchronisation.
  void run(const PrefillPlan &P, const PrefillCall &C, const TensorView &Q,
           const TensorView &Out, const TensorView *Finals,
           const InputMap &Inputs, CUstream Stream);
  /// The kernel a plan for pages of \p PageSize runs, compiled (through
  /// the kernel cache; no device needed).
  const codegen::KernelSource &source(int64_t PageSize);

private:
  struct Kernel {
    codegen::KernelSource Source;
    CacheResult Cached;
    KernelModule Module;
    CUfunction Fwd = nullptr;
    int BlockM = 0, BlockN = 0, Threads = 0, SharedBytes = 0;
    bool Sm90 = false;
  };
  Kernel &kernelFor(int64_t PageSize);
  const Kernel *kernelOf(const PrefillPlan &P) const;

  const CompiledDefinition &Def;
  codegen::KernelSpec Spec;
  codegen::Sm90Config Config90;
  bool Use90 = false;
  /// ATTNC_PAGED_LOAD's PagedLoad; none: defaultPagedLoad's.
  std::optional<codegen::PagedLoad> Load;
  std::unique_ptr<Kernel> K80, K90[3]; // K90 by PagedLoad
  static_assert(int(codegen::PagedLoad::Thread) == 0 && int(codegen::PagedLoad::Warp) == 1 &&
                int(codegen::PagedLoad::Gather) == 2);
};

} // namespace attn::runtime

#endif
