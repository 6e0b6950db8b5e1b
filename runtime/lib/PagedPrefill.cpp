// Paged prefill: the plan's arithmetic, the checks of a call, and the
// launch of fwd_sm80's paged kernel (attnc_fwd_paged) from a plan.
#include "PagedPrefill.h"

#include "ForwardLaunch.h"
#include "TmaMaps.h"
#include "ValidateCommon.h"

#include "../kernels/attention_args.cuh"

#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <cstdlib>

namespace attn::runtime {

namespace {

bool isPowerOfTwo(int64_t X) { return X > 0 && (X & (X - 1)) == 0; }

} // namespace

void checkCuSeqlensQ(const TensorView &T) {
  const char *Name = "cu_seqlens_q";
  checkNotNull(Name, T);
  checkElemType(Name, T, DType::I32);
  if (T.Shape.size() != 1)
    invalid(fmt::format("{}: expected rank 1 [batch + 1], got rank {}", Name,
                        T.Shape.size()));
  if (T.Strides.size() != 1 || T.Strides[0] != 1)
    invalid(fmt::format("{}: must be contiguous", Name));
  checkAligned(Name, T, 4);
  if (T.Shape[0] < 2)
    invalid(fmt::format("{}: expected batch + 1 entries with a batch of at "
                        "least 1, got {} entries",
                        Name, T.Shape[0]));
}

PrefillPlan makePrefillPlan(const PrefillBounds &B, int BlockM, int BlockN) {
  if (B.Batch < 1 || B.Batch > 65535)
    invalid(fmt::format("batch: expected 1 to 65535, got {}", B.Batch));
  if (B.HeadsKv < 1)
    invalid(fmt::format("heads_kv: expected at least 1, got {}", B.HeadsKv));
  if (B.Heads < 1 || B.Heads % B.HeadsKv != 0)
    invalid(fmt::format("heads: expected a positive multiple of heads_kv "
                        "({}), got {}",
                        B.HeadsKv, B.Heads));
  if (B.Batch * B.Heads > 65535)
    invalid(fmt::format("batch x heads is {}; at most 65535 are supported",
                        B.Batch * B.Heads));
  if (B.MaxSeqlenQ < 1 || B.MaxSeqlenQ > (int64_t(1) << 30))
    invalid(fmt::format("max_seqlen_q: expected 1 to 2^30, got {}",
                        B.MaxSeqlenQ));
  if (B.MaxSeqlenKv < 0 || B.MaxSeqlenKv > (int64_t(1) << 30))
    invalid(fmt::format("max_seqlen_kv: expected 0 to 2^30, got {}",
                        B.MaxSeqlenKv));
  if (!isPowerOfTwo(B.PageSize) || B.PageSize > (int64_t(1) << 20))
    invalid(fmt::format("page size: expected a power of two from 1 to 2^20, "
                        "got {}",
                        B.PageSize));
  PrefillPlan P;
  P.Bounds = B;
  P.BlockM = BlockM;
  P.BlockN = BlockN;
  P.QueryBlocks = int((B.MaxSeqlenQ + BlockM - 1) / BlockM);
  return P;
}

PrefillBounds prefillCallBounds(const Signature &Sig, const TensorView &Q,
                                const TensorView &CuSeqlensQ,
                                int64_t MaxSeqlenQ, const PagedKV &KV) {
  SeqTensor q = checkSeqTensor("q", Q, Sig.Dtype, Layout::THD, Sig.HeadDim);
  checkCuSeqlensQ(CuSeqlensQ);
  PagedCall C;
  int64_t Hkv = checkCaches(Sig, KV, C);
  if (MaxSeqlenQ < 1 || MaxSeqlenQ > q.S)
    invalid(fmt::format("max_seqlen_q: expected between 1 and q's tokens "
                        "({}), got {}",
                        q.S, MaxSeqlenQ));
  PrefillBounds B;
  B.Batch = CuSeqlensQ.Shape[0] - 1;
  B.Heads = q.H;
  B.HeadsKv = Hkv;
  B.MaxSeqlenQ = MaxSeqlenQ;
  B.MaxSeqlenKv = KV.MaxSeqlenKv;
  B.PageSize = C.K.PageSize;
  return B;
}

PrefillCall validatePrefillCall(const ir::Graph &G, const Signature &Sig,
                                const PrefillBounds &B, const TensorView &Q,
                                const TensorView &CuSeqlensQ,
                                const PagedKV &KV, const TensorView &Out,
                                const TensorView *Finals,
                                const InputMap &Inputs) {
  PackedPagedBounds P{B.Batch,    B.Heads,       B.HeadsKv,
                      B.PageSize, B.MaxSeqlenKv, B.MaxSeqlenQ};
  PrefillCall R;
  R.Paged = checkPackedPagedCall(G, Sig, P, Q, CuSeqlensQ, KV, Out, Finals,
                                 Inputs, PagedCallKind::Prefill);
  return R;
}

std::optional<codegen::PagedLoad>
prefillLoadFor(bool Use90, int64_t PageSize,
               std::optional<codegen::PagedLoad> Named) {
  // fwd_sm90's TMA loads are one box a page: boxes of at least 8 rows (the
  // 128-byte swizzle's period), so pages of 8 tokens and more; smaller
  // pages take its gather whatever is named.
  if (!Use90)
    return std::nullopt;
  if (PageSize < 8)
    return codegen::PagedLoad::Gather;
  return Named ? *Named : codegen::defaultPagedLoad(PageSize);
}

PagedPrefillRunner::PagedPrefillRunner(const CompiledDefinition &Def,
                                       const KernelTarget &T,
                                       const codegen::FwdConfig &C,
                                       bool AllowSm90)
    : Def(Def), Spec(T.kernelSpec()),
      Config90(codegen::Sm90Config::defaultFor(T.HeadDim, T.HeadDimV)) {
  Spec.Config = C;
  // Blocks of a power-of-two keys lie in one page or cover whole pages
  // (the defaults' 64 and 128 do).
  Use90 = AllowSm90 && codegen::sm90Unsupported(Spec, Config90).empty() &&
          (Config90.BlockN & (Config90.BlockN - 1)) == 0;
  // A measurement switch: every page size's fwd_sm90 kernel issues its
  // boxes as named (docs/runtime.md). Three values, not envSwitch's 0/1;
  // a bad one names the variable as envSwitch's do.
  if (const char *Env = std::getenv("ATTNC_PAGED_LOAD"); Env && *Env) {
    try {
      Load = codegen::parsePagedLoad(Env);
    } catch (const UserError &E) {
      throw UserError(std::string("ATTNC_PAGED_LOAD: ") + E.what());
    }
  }
}

PagedPrefillRunner::Kernel &PagedPrefillRunner::kernelFor(int64_t PageSize) {
  const std::optional<codegen::PagedLoad> L = prefillLoadFor(Use90, PageSize, Load);
  const bool Sm90 = L.has_value();
  std::unique_ptr<Kernel> &K = Sm90 ? K90[int(*L)] : K80;
  if (!K) {
    K = std::make_unique<Kernel>();
    K->Sm90 = Sm90;
    if (Sm90) {
      K->Source = codegen::generatePagedPrefillSm90(Def, Spec, Config90, *L);
      K->BlockM = Config90.BlockM;
      K->BlockN = Config90.BlockN;
      K->Threads = Config90.threads();
      K->SharedBytes = Config90.sharedBytes(Spec.HeadDim, Spec.HeadDimV);
    } else {
      K->Source = codegen::generatePagedPrefill(Def, Spec);
      K->BlockM = Spec.Config.BlockM;
      K->BlockN = Spec.Config.BlockN;
      K->Threads = Spec.Config.Warps * 32;
      K->SharedBytes = Spec.Config.sharedBytes(Spec.HeadDim, Spec.HeadDimV);
    }
    K->Cached = KernelCache::global().getOrCompile(K->Source);
  }
  return *K;
}

const codegen::KernelSource &PagedPrefillRunner::source(int64_t PageSize) {
  return kernelFor(PageSize).Source;
}

PrefillPlan PagedPrefillRunner::plan(const PrefillBounds &B) {
  makePrefillPlan(B, 1, 1); // a bad bound before any compile
  Kernel &K = kernelFor(B.PageSize);
  PrefillPlan P = makePrefillPlan(B, K.BlockM, K.BlockN);
  P.KernelKey = K.Source.Key;
  if (!K.Module.loaded()) {
    K.Module.load(K.Cached, Spec.Arch);
    K.Fwd = K.Module.function("attnc_fwd_paged");
    K.Module.allowSharedBytes(K.Fwd, K.SharedBytes, "kernel " + K.Source.Key);
  }
  return P;
}

const PagedPrefillRunner::Kernel *
PagedPrefillRunner::kernelOf(const PrefillPlan &P) const {
  for (const std::unique_ptr<Kernel> *K : {&K80, &K90[0], &K90[1], &K90[2]})
    if (*K && (*K)->Source.Key == P.KernelKey && (*K)->Module.loaded())
      return K->get();
  return nullptr;
}

void PagedPrefillRunner::checkPlan(const PrefillPlan &P) const {
  if (!kernelOf(P))
    throw InvalidArgument(fmt::format(
        "plan: made for kernel '{}', not by this Attention", P.KernelKey));
}

void PagedPrefillRunner::run(const PrefillPlan &P, const PrefillCall &R,
                             const TensorView &Q, const TensorView &Out,
                             const TensorView *Finals, const InputMap &Inputs,
                             CUstream Stream) {
  checkPlan(P);
  const Kernel &K = *kernelOf(P);
  const PagedCall &C = R.Paged;
  const CallShape &S = C.Shape;
  attnc::PagedFwdArgs A{};
  attnc::FwdArgs &f = A.f;
  f.q = Q.Data;
  f.k = C.KData;
  f.v = C.VData;
  f.o = Out.Data;
  f.finals = Finals ? static_cast<float *>(Finals->Data) : nullptr;
  copyStrides({{&f.q_sb, S.Q}, {&f.o_sb, S.O}});
  f.k_sb = C.K.PageStride;
  f.k_sh = C.K.HeadStride;
  f.k_ss = C.K.SlotStride;
  f.v_sb = C.V.PageStride;
  f.v_sh = C.V.HeadStride;
  f.v_ss = C.V.SlotStride;
  f.batch = int(S.B);
  f.heads = int(S.H);
  f.heads_kv = int(S.Hkv);
  f.seq_q = int(P.Bounds.MaxSeqlenQ);
  f.seq_kv = int(P.Bounds.MaxSeqlenKv);
  f.cu_seqlens_q = S.CuQ;
  f.total_q = int(S.TotalQ);
  setPageArgs(A, C, P.Bounds.PageSize);
  std::vector<uint64_t> Slots = inputSlots(*Def.Graph, S, Inputs);
  attnc::Sm90Maps Maps{};
  if (K.Sm90)
    if (std::string Why = makeSm90PagedMaps(S, Q, C.K, C.KData, Spec.HeadDim,
                                            C.V, C.VData, Spec.HeadDimV,
                                            K.BlockM, K.BlockN, Maps);
        !Why.empty())
      throw InvalidArgument("paged prefill: " + Why);
  void *Params80[] = {&A, Slots.data()};
  void *Params90[] = {&A, Slots.data(), &Maps};
  CudaDriver &D = CudaDriver::get();
  D.check(D.cuLaunchKernel(K.Fwd, unsigned(P.QueryBlocks), unsigned(S.B * S.H),
                           1, unsigned(K.Threads), 1, 1,
                           unsigned(K.SharedBytes), Stream,
                           K.Sm90 ? Params90 : Params80, nullptr),
          "launch attnc_fwd_paged");
}

} // namespace attn::runtime
