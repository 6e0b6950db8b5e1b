// Attention: validate a call, pick a backend, run it; and tensor views.
#include "attn/runtime/Attention.h"
#include "attn/codegen/Arch.h"

#include "attn/Error.h"
#include "AttentionState.h"
#include "BackwardRunner.h"
#include "PagedDecode.h"
#include "PagedPrefill.h"

#include "attn/analysis/MaskBounds.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/DecodeCodegen.h"
#include "attn/runtime/KernelCache.h"

#include "attn/runtime/Backend.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Tuner.h"
#include "attn/runtime/Validate.h"

#include <dlpack/dlpack.h>
#include <fmt/format.h>


namespace attn::runtime {

TensorView TensorView::contiguous(void *Data, DType T,
                                  std::vector<int64_t> Shape) {
  TensorView V{Data, T, Shape, std::vector<int64_t>(Shape.size(), 1)};
  for (int I = int(Shape.size()) - 2; I >= 0; --I)
    V.Strides[I] = V.Strides[I + 1] * Shape[I + 1];
  return V;
}

TensorView TensorView::fromDLPackFields(void *Data, uint64_t ByteOffset,
                                         int DeviceType, uint8_t Code,
                                         uint8_t Bits, uint16_t Lanes,
                                         int Ndim, const int64_t *Shape,
                                         const int64_t *Strides) {
  if (DeviceType != kDLCUDA)
    throw InvalidArgument("DLPack tensor: expected a CUDA device tensor");
  TensorView V;
  if (Lanes != 1)
    throw InvalidArgument("DLPack tensor: vector types are not supported");
  if (Code == kDLFloat && Bits == 16)
    V.Type = DType::F16;
  else if (Code == kDLBfloat && Bits == 16)
    V.Type = DType::BF16;
  else if (Code == kDLFloat && Bits == 32)
    V.Type = DType::F32;
  else if (Code == kDLInt && Bits == 32)
    V.Type = DType::I32;
  else if (Code == kDLInt && Bits == 64)
    V.Type = DType::I64;
  else
    throw InvalidArgument("DLPack tensor: expected float16, bfloat16, "
                          "float32, int32 or int64");
  V.Data = static_cast<char *>(Data) + ByteOffset;
  V.Shape.assign(Shape, Shape + Ndim);
  if (Strides)
    V.Strides.assign(Strides, Strides + Ndim);
  else
    V = contiguous(V.Data, V.Type, V.Shape);
  return V;
}

TensorView TensorView::broadcastDim(size_t At, int64_t Size) const {
  if (At > Shape.size())
    throw InvalidArgument(fmt::format("broadcastDim: dimension {} is past the "
                                      "rank {} of the view",
                                      At, Shape.size()));
  if (Size < 0)
    throw InvalidArgument(
        fmt::format("broadcastDim: the size {} is negative", Size));
  TensorView V = *this;
  V.Shape.insert(V.Shape.begin() + At, Size);
  // A view without strides is contiguous; give it its strides first.
  if (V.Strides.size() != Shape.size())
    V.Strides = contiguous(Data, Type, Shape).Strides;
  V.Strides.insert(V.Strides.begin() + At, 0);
  return V;
}

GpuArch resolveArch(const std::optional<GpuArch> &A) {
  if (A)
    return *A;
  const DeviceInfo &Dev = currentDevice();
  if (std::optional<GpuArch> Found = archForDevice(Dev.Major, Dev.Minor))
    return *Found;
  throw UserError(fmt::format("device {} (compute capability {}.{}) is not "
                              "one attnc builds for; expected {}",
                              Dev.Name, Dev.Major, Dev.Minor,
                              archNamesText().str()));
}

KernelTarget kernelTarget(const CompiledDefinition &Def, const Signature &Sig,
                          GpuArch Arch, Direction D) {
  return KernelTarget::of(Def, D, Sig.Dtype, Sig.HeadDim, Sig.HeadDimV, Arch);
}

namespace {

/// The forward's policy: names parsed once. Skeleton and configurations
/// are the generated backend's; a signature that names them for another
/// backend would have them ignored, so it is refused.
KernelPolicy forwardPolicy(const KernelTarget &T, const Signature &Sig) {
  if (!Sig.Backend.empty() && Sig.Backend != "generated" &&
      (!Sig.Skeleton.empty() || !Sig.Config.empty() ||
       !Sig.BackwardConfig.empty()))
    throw UserError("signature: backend '" + Sig.Backend +
                    "' runs its own kernel; skeleton, config and "
                    "backward_config choose the generated backend's");
  return KernelPolicy::parse(T, Sig.Skeleton, Sig.Config, Sig.TuneFile,
                             Sig.Tune);
}

/// The decode_sm80 configuration \p P names, if any (paged decode runs it
/// at every page size).
std::optional<codegen::DecodeConfig> namedDecodeConfig(const KernelPolicy &P) {
  if (P.Config)
    if (const auto *D = std::get_if<codegen::DecodeConfig>(&*P.Config))
      return *D;
  return std::nullopt;
}

/// UserError for a linear-attention definition \p Name (whose kernels
/// LinearAttention runs).
void refuseLinear(ir::DefinitionKind K, const std::string &Name) {
  if (K == ir::DefinitionKind::Linear)
    throw UserError("'" + Name + "' is linear attention; use LinearAttention");
}

/// \p D compiled, refused first if it is linear attention.
CompiledDefinition compileAttention(const dsl::DefinitionBase &D) {
  refuseLinear(D.kind(), D.name);
  return compile(D);
}

/// \p D itself, refused if it is linear attention.
CompiledDefinition attentionOnly(CompiledDefinition D) {
  refuseLinear(D.Graph->decls().Kind, D.Graph->name());
  return D;
}

} // namespace

Attention::Attention(const dsl::DefinitionBase &D, const Signature &S)
    : Attention(compileAttention(D), S) {}

Attention::State::State(CompiledDefinition D, const Signature &S,
                        GpuArch Arch)
    : Def(attentionOnly(std::move(D))),
      Fwd(Def, kernelTarget(Def, S, Arch, Direction::Forward),
          forwardPolicy(kernelTarget(Def, S, Arch, Direction::Forward), S)),
      DecodeRule(decodeChoice(Fwd.target(), Fwd.policy(), /*Sq=*/1)),
      BwdTarget(kernelTarget(Def, S, Arch, Direction::Backward)),
      BwdPolicy(KernelPolicy::parse(BwdTarget, "", S.BackwardConfig)) {}

/// The arch of \p S, after the checks of its fields that come first.
static GpuArch signatureArch(const Signature &S) {
  checkAttentionDtype(S.Dtype, "signature");
  return resolveArch(S.Arch);
}

Attention::Attention(CompiledDefinition D, const Signature &S)
    : Sig(S), Arch(signatureArch(S)),
      St(std::make_unique<State>(std::move(D), S, Arch)), Def(St->Def),
      Fwd(St->Fwd), DecodeRule(St->DecodeRule), BwdTarget(St->BwdTarget),
      BwdPolicy(St->BwdPolicy), Bwd(St->Bwd) {
  // A backward configuration named is a promise to call backward(): its
  // mistakes are said now.
  if (BwdPolicy.Config) {
    backwardChoice();
  } else if (Sig.NeedsBackward) {
    // So is NeedsBackward, and the head dims are what it can fail on.
    try {
      backwardChoice();
    } catch (const UserError &E) {
      throw NotSupportedYet(fmt::format("the backward of '{}' ({}): {}",
                                        Def.Graph->name(), BwdTarget.str(),
                                        E.what()));
    }
  }
  BackendRegistry &R = BackendRegistry::global();
  if (!Sig.Backend.empty()) {
    R.factory(Sig.Backend); // UserError naming the registered ones
    Names = {Sig.Backend};
  } else {
    Names = R.names();
  }
  Backends.resize(Names.size());
  backendAt(0);
}

Attention::~Attention() = default;

void Attention::enterDevice() { enterBoundContext(Context, Ordinal, "Attention"); }

std::string Attention::lastBackend() const {
  auto Lock = lockCalls();
  return Last;
}

const CompiledDefinition &Attention::definition() const { return Def; }

const KernelChoice &Attention::forwardChoice() const { return Fwd.initial(); }

const KernelChoice &Attention::backwardChoice() const {
  auto Lock = lockCalls();
  if (!Bwd)
    Bwd.emplace(Def, BwdTarget, BwdPolicy);
  return Bwd->initial();
}

KernelChoice Attention::backwardChoiceFor(int64_t SeqLenQ) const {
  return denseBackwardChoice(backwardChoice(), Def.Graph->decls().HasMask, SeqLenQ);
}

KernelChoice Attention::forwardChoiceFor(const TuneShape &S) const {
  auto Lock = lockCalls();
  return Fwd.forShape(S, [&] {
    return tuneForward(Def, Sig, Arch, S, TuneOptions(), /*Progress=*/nullptr)
        .Entry;
  });
}

void Attention::backward(const TensorView &Q, const TensorView &K,
                         const TensorView &V, const TensorView *Out,
                         const TensorView &DOut, const TensorView *Finals,
                         const TensorView &DQ, const TensorView &DK,
                         const TensorView &DV, const InputMap &Inputs,
                         const InputGradMap &Grads, CUstream Stream,
                         const BlockMask *Blocks) {
  auto Lock = lockCalls();
  BackwardTensors T{Q, K, V, Out, DOut, Finals, DQ, DK, DV};
  // Validate before generating anything: a bad call costs no compile.
  BackwardCallShape Shape = validateBackwardCall(Def, Sig, T, Inputs, Grads);
  const BlockMaskData *Data = nullptr;
  if (Blocks) {
    Data = &checkBlockMask(*Blocks, Shape.Fwd);
    if (!Data->HasBwd)
      throw UserError("block mask: made without the backward's lists; make "
                      "it with ForBackward for backward calls");
  }
  enterDevice();
  backwardRunner().run(T, Shape, Inputs, Grads, Stream, Data);
}

BackwardRunner &Attention::backwardRunner() {
  if (!Backward)
    Backward =
        std::make_unique<BackwardRunner>(Def, BwdTarget, backwardChoice());
  return *Backward;
}

void Attention::backwardVarlen(const TensorView &Q, const TensorView &K,
                               const TensorView &V, const TensorView *Out,
                               const TensorView &DOut, const TensorView *Finals,
                               const TensorView &DQ, const TensorView &DK,
                               const TensorView &DV, const VarlenBatch &Batch,
                               const InputMap &Inputs,
                               const InputGradMap &Grads, CUstream Stream) {
  auto Lock = lockCalls();
  BackwardTensors T{Q, K, V, Out, DOut, Finals, DQ, DK, DV};
  BackwardCallShape Shape =
      validateVarlenBackwardCall(Def, Sig, T, Batch, Inputs, Grads);
  enterDevice();
  backwardRunner().run(T, Shape, Inputs, Grads, Stream);
}

AttentionBackend &Attention::backendAt(size_t I) {
  if (!Backends[I])
    Backends[I] = BackendRegistry::global().factory(Names[I])(
        BackendSetup{Def, Sig, Fwd.target(), Fwd.initial()});
  return *Backends[I];
}

const codegen::KernelSource &Attention::source() const {
  return Backends[0]->source();
}

const CacheResult &Attention::cacheResult() const {
  return Backends[0]->cacheResult();
}

std::vector<std::string> Attention::finalNames() const {
  std::vector<std::string> Names;
  for (const ir::RowscaleDecl &R : Def.Graph->decls().FinalRowscales)
    Names.push_back(R.Name);
  return Names;
}

AttentionBackend &Attention::choose(const BackendProblem &P) {
  std::string Reasons;
  for (size_t I = 0; I < Names.size(); ++I) {
    std::string Why;
    try {
      std::string Reason = backendAt(I).check(P);
      if (Reason.empty())
        return *Backends[I];
      Why = Reason;
    } catch (const UserError &E) {
      // A backend that cannot even be made for this signature (a later
      // one, made on first need) is one more reason, not the end.
      Why = E.what();
    }
    Reasons += fmt::format("{}{}: {}", Reasons.empty() ? "" : "; ", Names[I],
                           Why);
  }
  if (!Sig.Backend.empty())
    throw InvalidArgument("backend " + Reasons);
  throw InvalidArgument("no backend can run this call (" + Reasons + ")");
}

void Attention::forward(const TensorView &Q, const TensorView &K,
                        const TensorView &V, const TensorView &Out,
                        const TensorView *Finals, const InputMap &Inputs,
                        CUstream Stream, const BlockMask *Blocks) {
  auto Lock = lockCalls();
  CallShape Shape = validateCall(*Def.Graph, Sig, Q, K, V, Out, Finals, Inputs);
  run(Shape, ForwardTensors{Q, K, V, Out, Finals}, Inputs, Stream,
      Blocks ? &checkBlockMask(*Blocks, Shape) : nullptr);
}

void Attention::forwardVarlen(const TensorView &Q, const TensorView &K,
                              const TensorView &V, const TensorView &Out,
                              const TensorView *Finals,
                              const VarlenBatch &Batch, const InputMap &Inputs,
                              CUstream Stream) {
  auto Lock = lockCalls();
  CallShape Shape = validateVarlenCall(*Def.Graph, Sig, Q, K, V, Out, Finals,
                                       Batch, Inputs);
  run(Shape, ForwardTensors{Q, K, V, Out, Finals}, Inputs, Stream);
}

KernelChoice Attention::callChoiceFor(const TuneShape &S) const {
  if (DecodeRule && S.SeqQ <= codegen::DecodeMaxQueries)
    return *DecodeRule;
  return forwardChoiceFor(S);
}

KernelChoice Attention::choiceFor(const CallShape &Shape) const {
  // Packed calls too: Sq is their max_seqlen_q.
  return callChoiceFor({Shape.B, Shape.H, Shape.Hkv, Shape.Sq, Shape.Skv});
}

void Attention::run(const CallShape &Shape, const ForwardTensors &T,
                    const InputMap &Inputs, CUstream Stream,
                    const BlockMaskData *Blocks) {
  // The kernel is chosen once, here, before any backend is asked: the
  // short-query rule first (decode), then the tune file or the default.
  KernelChoice Choice = choiceFor(Shape);
  if (Choice.Skel->isDecode() && (Sig.Backend.empty() || Sig.Backend == "generated") &&
      Shape.Sq > codegen::DecodeMaxQueries)
    throw InvalidArgument(
        Shape.Packed
            ? fmt::format("max_seqlen_q: {} runs 0 to {} queries per sequence; "
                          "max_seqlen_q is {}",
                          Choice.Skel->name().str(), codegen::DecodeMaxQueries,
                          Shape.Sq)
            : fmt::format("q: {} runs 1 to {} queries per sequence; q has {}",
                          Choice.Skel->name().str(), codegen::DecodeMaxQueries,
                          Shape.Sq));
  BackendProblem P{Def, Sig, Fwd.target(), Shape, Choice};
  AttentionBackend &B = choose(P);
  enterDevice();
  B.forward(P, T, CallContext{Inputs, Stream, Blocks});
  Last = B.name();
}

PagedDecodeRunner &Attention::pagedRunner() {
  if (!Sig.Backend.empty() && Sig.Backend != "generated")
    throw InvalidArgument("signature: paged decode runs on the generated "
                          "backend; the signature names '" +
                          Sig.Backend + "'");
  if (!Paged)
    Paged = std::make_unique<PagedDecodeRunner>(Def, Fwd.target(),
                                                namedDecodeConfig(Fwd.policy()));
  return *Paged;
}

KernelChoice Attention::pagedDecodeChoice(int64_t PageSize) const {
  // The paged runner's rule (pagedDecodeConfig), named where it came from.
  const Skeleton *S = findSkeleton("decode_sm80");
  if (!S)
    throw InternalError("the skeleton table has no decode_sm80");
  const std::optional<codegen::DecodeConfig> Named = namedDecodeConfig(Fwd.policy());
  return {S, pagedDecodeConfig(Named, Fwd.target(), PageSize),
          Named ? ChoiceOrigin::Named : ChoiceOrigin::Default};
}

void Attention::decodePaged(const TensorView &Q, const PagedKV &KV,
                            const TensorView &Out, const TensorView *Finals,
                            const InputMap &Inputs, CUstream Stream) {
  auto Lock = lockCalls();
  DecodeBounds B = pagedCallBounds(Sig, Q, KV);
  PagedCall C = validatePagedCall(*Def.Graph, Sig, B, Q, KV, Out, Finals, Inputs);
  enterDevice();
  pagedRunner().runEager(B, C, Q, Out, Finals, Inputs, Stream);
  Last = "generated";
}

DecodePlan Attention::planDecode(const DecodeBounds &B) {
  auto Lock = lockCalls();
  makeDecodePlan(B, Sig.HeadDimV, 16, 64, 1, analysis::MergeKind::None);
  return pagedRunner().plan(B);
}

/// A plan's workspace as runDecode and runDecodeVarlen take it.
static void checkDecodeWorkspace(const DecodePlan &P, const void *Workspace,
                                 size_t WorkspaceBytes) {
  if (WorkspaceBytes < P.WorkspaceBytes)
    throw InvalidArgument(fmt::format("workspace: expected at least {} bytes "
                                      "(the plan's), got {}",
                                      P.WorkspaceBytes, WorkspaceBytes));
  if (P.WorkspaceBytes > 0 &&
      (!Workspace || reinterpret_cast<uintptr_t>(Workspace) % 16 != 0))
    throw InvalidArgument("workspace: expected a non-null device pointer, "
                          "16-byte aligned");
}

void Attention::runDecode(const DecodePlan &P, const TensorView &Q,
                          const PagedKV &KV, const TensorView &Out,
                          const TensorView *Finals, void *Workspace,
                          size_t WorkspaceBytes, const InputMap &Inputs,
                          CUstream Stream) {
  auto Lock = lockCalls();
  PagedCall C =
      validatePagedCall(*Def.Graph, Sig, P.Bounds, Q, KV, Out, Finals, Inputs);
  checkDecodeWorkspace(P, Workspace, WorkspaceBytes);
  pagedRunner().checkPlan(P); // a plan of another object launches nothing
  enterDevice();
  pagedRunner().run(P, C, Q, Out, Finals, Workspace, Inputs, Stream);
  Last = "generated";
}

void Attention::decodePagedVarlen(const TensorView &Q,
                                  const TensorView &CuSeqlensQ,
                                  int64_t MaxSeqlenQ, const PagedKV &KV,
                                  const TensorView &Out,
                                  const TensorView *Finals,
                                  const InputMap &Inputs, CUstream Stream) {
  auto Lock = lockCalls();
  DecodeBounds B = packedDecodeBounds(Sig, Q, CuSeqlensQ, MaxSeqlenQ, KV);
  PagedCall C = validatePackedDecodeCall(*Def.Graph, Sig, B, Q, CuSeqlensQ,
                                         KV, Out, Finals, Inputs);
  enterDevice();
  pagedRunner().runEager(B, C, Q, Out, Finals, Inputs, Stream);
  Last = "generated";
}

void Attention::runDecodeVarlen(const DecodePlan &P, const TensorView &Q,
                                const TensorView &CuSeqlensQ,
                                const PagedKV &KV, const TensorView &Out,
                                const TensorView *Finals, void *Workspace,
                                size_t WorkspaceBytes, const InputMap &Inputs,
                                CUstream Stream) {
  auto Lock = lockCalls();
  PagedCall C = validatePackedDecodeCall(*Def.Graph, Sig, P.Bounds, Q,
                                         CuSeqlensQ, KV, Out, Finals, Inputs);
  checkDecodeWorkspace(P, Workspace, WorkspaceBytes);
  pagedRunner().checkPlan(P); // a plan of another object launches nothing
  enterDevice();
  pagedRunner().run(P, C, Q, Out, Finals, Workspace, Inputs, Stream);
  Last = "generated";
}

PagedPrefillRunner &Attention::prefillRunner() {
  if (!Sig.Backend.empty() && Sig.Backend != "generated")
    throw InvalidArgument("signature: paged prefill runs on the generated "
                          "backend; the signature names '" +
                          Sig.Backend + "'");
  // fwd_sm90's paged kernel on sm_90a unless the signature names fwd_sm80.
  if (!Prefill)
    Prefill = std::make_unique<PagedPrefillRunner>(
        Def, Fwd.target(),
        codegen::FwdConfig::defaultFor(Sig.HeadDim, Sig.HeadDimV, Arch),
        Sig.Skeleton != "fwd_sm80");
  return *Prefill;
}

void Attention::prefillPaged(const TensorView &Q, const TensorView &CuSeqlensQ,
                             int64_t MaxSeqlenQ, const PagedKV &KV,
                             const TensorView &Out, const TensorView *Finals,
                             const InputMap &Inputs, CUstream Stream) {
  auto Lock = lockCalls();
  PrefillBounds B = prefillCallBounds(Sig, Q, CuSeqlensQ, MaxSeqlenQ, KV);
  makePrefillPlan(B, 1, 1); // the bounds' messages before any compile
  PrefillCall C = validatePrefillCall(*Def.Graph, Sig, B, Q, CuSeqlensQ, KV,
                                      Out, Finals, Inputs);
  prefillRunner().source(B.PageSize); // compiled before the device is needed
  enterDevice();
  // Planning is arithmetic once the kernel is loaded: every call plans.
  PrefillPlan P = prefillRunner().plan(B);
  prefillRunner().run(P, C, Q, Out, Finals, Inputs, Stream);
  Last = "generated";
}

PrefillPlan Attention::planPrefill(const PrefillBounds &B) {
  auto Lock = lockCalls();
  makePrefillPlan(B, 1, 1); // a bad bound is refused before any compile
  prefillRunner().source(B.PageSize);
  enterDevice();
  return prefillRunner().plan(B);
}

void Attention::runPrefill(const PrefillPlan &P, const TensorView &Q,
                           const TensorView &CuSeqlensQ, const PagedKV &KV,
                           const TensorView &Out, const TensorView *Finals,
                           const InputMap &Inputs, CUstream Stream) {
  auto Lock = lockCalls();
  PrefillCall C = validatePrefillCall(*Def.Graph, Sig, P.Bounds, Q, CuSeqlensQ,
                                      KV, Out, Finals, Inputs);
  prefillRunner().checkPlan(P); // a plan of another object launches nothing
  enterDevice();
  prefillRunner().run(P, C, Q, Out, Finals, Inputs, Stream);
  Last = "generated";
}

void Attention::appendPaged(const TensorView &K, const TensorView &V,
                            const PagedKV &KV, const TensorView &SlotMapping,
                            CUstream Stream) {
  auto Lock = lockCalls();
  AppendCall A = validateAppend(Sig, K, V, KV, SlotMapping);
  enterDevice();
  launchPagedAppend(Arch, A, K, V, KV, SlotMapping, Stream);
}

void Attention::mergeResults(const std::vector<PartialResult> &Parts,
                             const TensorView &Out, const TensorView *Finals,
                             CUstream Stream) {
  auto Lock = lockCalls();
  MergeCall C = validateMerge(*Def.Graph, Sig, Parts, Out, Finals);
  const codegen::KernelSource *Src = C.Combine ? &combineMergeSource() : nullptr;
  enterDevice();
  launchMergeResults(Arch, C, Src, Stream);
}

const codegen::KernelSource &Attention::combineMergeSource() {
  if (!CombineMerge)
    CombineMerge = std::make_unique<codegen::KernelSource>(
        codegen::generateMergeResults(Def, Fwd.target().kernelSpec()));
  return *CombineMerge;
}

} // namespace attn::runtime
