// The paged decode runner: attnc_decode_paged and the merge of its splits
// launched from a plan, and the append of new tokens into pages.
#include "PagedDecode.h"

#include "EnvSwitch.h"
#include "ForwardLaunch.h"

#include "attn/codegen/InputLayout.h"

#include "../kernels/decode_args.cuh"
#include "../kernels/merge_results_args.cuh"

#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

namespace attn::runtime {

namespace {
/// A cache's page, head and slot strides into a kernel's three fields.
void packStrides(const PageGeometry &G, long long &Page, long long &Head,
                 long long &Slot) {
  Page = G.PageStride;
  Head = G.HeadStride;
  Slot = G.SlotStride;
}
/// inputSlots for a paged decode call. Query-side inputs are the call's
/// (packed: [H, Tq] and [Tq], rebased per sequence on the device); key-side
/// ones are [B, H, K] and [B, K] in dense and packed calls alike (a
/// sequence's keys live in pages, not in packed tokens), so a packed call
/// keeps their batch and head strides.
std::vector<uint64_t> pagedInputSlots(const ir::Graph &G, const CallShape &S,
                                      const InputMap &Inputs) {
  std::vector<uint64_t> Slots = inputSlots(G, S, Inputs);
  if (!S.Packed)
    return Slots;
  for (const codegen::InputSlots &L : codegen::inputLayout(G).Inputs) {
    if (L.Shape != ir::InputShape::PerKey &&
        L.Shape != ir::InputShape::PerKeyToken)
      continue;
    const TensorView &V = std::get<TensorView>(Inputs.at(L.Name));
    uint64_t *Slot = &Slots[L.First];
    Slot[1] = uint64_t(V.Strides[0]);
    Slot[2] = L.Shape == ir::InputShape::PerKey ? uint64_t(V.Strides[1]) : 0;
    Slot[4] = uint64_t(V.Shape.back());
  }
  return Slots;
}

} // namespace

PagedDecodeRunner::PagedDecodeRunner(const CompiledDefinition &Def,
                                     const KernelTarget &T,
                                     std::optional<codegen::DecodeConfig> Named)
    : Def(Def), Target(T), Named(std::move(Named)),
      MergeKind(analysis::analyzeMerge(*Def.Graph).Kind) {
  // The configuration's errors (UserError) at construction, as before the
  // kernels were per mode; generating is text, compiling waits for a plan.
  (void)sourceFor(1);
}

PagedDecodeRunner::~PagedDecodeRunner() = default;

codegen::DecodeConfig pagedDecodeConfig(const std::optional<codegen::DecodeConfig> &Named,
                                        const KernelTarget &T, int64_t PageSize) {
  if (Named)
    return *Named;
  return codegen::DecodeConfig::defaultFor(T.HeadDim, T.HeadDimV, T.Arch, PageSize);
}

codegen::DecodeConfig PagedDecodeRunner::configFor(int64_t PageSize) const {
  return pagedDecodeConfig(Named, Target, PageSize);
}

codegen::KernelSource PagedDecodeRunner::sourceFor(int64_t PageSize) const {
  const codegen::DecodeConfig C = configFor(PageSize);
  const int Mode = attnc::decode_paged_kernel_mode(
      pageShift(PageSize), C.BlockN, Target.HeadDim, Target.HeadDimV, C.Warps * 32);
  return codegen::generatePagedDecode(Def, Target.kernelSpec(), C, Mode);
}

std::vector<codegen::KernelSource> PagedDecodeRunner::sources() const {
  // Modes grow with the page size and stop at the block's rows (at most
  // 1024), and the default configuration changes once with it: shifts to
  // 10 meet every kernel.
  std::vector<codegen::KernelSource> Out;
  std::set<std::string> Keys;
  for (int Shift = 0; Shift <= 10; ++Shift) {
    codegen::KernelSource S = sourceFor(int64_t(1) << Shift);
    if (Keys.insert(S.Key).second)
      Out.push_back(std::move(S));
  }
  return Out;
}

PagedDecodeRunner::Instance &PagedDecodeRunner::instance(int64_t PageSize) {
  if (auto It = ByPageSize.find(PageSize); It != ByPageSize.end())
    return *It->second;
  codegen::KernelSource Source = sourceFor(PageSize);
  std::unique_ptr<Instance> &I = Instances[Source.Key];
  if (I)
    return *ByPageSize.emplace(PageSize, I.get()).first->second;
  auto New = std::make_unique<Instance>();
  New->Config = configFor(PageSize);
  New->Source = std::move(Source);
  New->Cached = KernelCache::global().getOrCompile(New->Source);
  New->Module.load(New->Cached, Target.Arch);
  New->Decode = New->Module.function("attnc_decode_paged");
  if (New->Source.Entries.size() > 1)
    New->Merge = New->Module.function("attnc_decode_merge");
  New->Module.allowSharedBytes(
      New->Decode, New->Config.sharedBytes(Target.HeadDim, Target.HeadDimV),
      "config " + New->Config.str());
  I = std::move(New);
  ByPageSize.emplace(PageSize, I.get());
  return *I;
}

DecodePlan PagedDecodeRunner::plan(const DecodeBounds &B) {
  const Instance &I = instance(B.PageSize);
  DecodePlan P = makeDecodePlan(B, Target.HeadDimV, I.Config.BlockM, I.Config.BlockN,
                                currentDevice().MultiProcessors, MergeKind);
  P.KernelKey = I.Source.Key;
  return P;
}

const PagedDecodeRunner::Instance &
PagedDecodeRunner::planned(const DecodePlan &P) const {
  auto It = ByPageSize.find(P.Bounds.PageSize);
  if (It == ByPageSize.end() || It->second->Source.Key != P.KernelKey)
    throw InvalidArgument(fmt::format(
        "plan: made for kernel '{}', not by this Attention (no plan of its "
        "own for page size {})",
        P.KernelKey, P.Bounds.PageSize));
  return *It->second;
}

void PagedDecodeRunner::checkPlan(const DecodePlan &P) const { planned(P); }

void PagedDecodeRunner::run(const DecodePlan &P, const PagedCall &C,
                            const TensorView &Q, const TensorView &Out,
                            const TensorView *Finals, void *Workspace,
                            const InputMap &Inputs, CUstream Stream,
                            unsigned *Counters) {
  const Instance &I = planned(P);
  CUfunction Decode = I.Decode, Merge = I.Merge;
  CudaDriver &D = CudaDriver::get();
  attnc::PagedDecodeArgs A{};
  attnc::DecodeArgs &d = A.d;
  d.q = Q.Data;
  d.k = C.KData;
  d.v = C.VData;
  d.o = Out.Data;
  d.finals = Finals ? static_cast<float *>(Finals->Data) : nullptr;
  const CallShape &S = C.Shape;
  d.q_sb = S.Q[0];
  d.q_sh = S.Q[1];
  d.q_ss = S.Q[2];
  d.o_sb = S.O[0];
  d.o_sh = S.O[1];
  d.o_ss = S.O[2];
  packStrides(C.K, d.k_sb, d.k_sh, d.k_ss);
  packStrides(C.V, d.v_sb, d.v_sh, d.v_ss);
  d.batch = int(S.B);
  d.heads = int(S.H);
  d.heads_kv = int(S.Hkv);
  d.seq_q = int(S.Sq);
  d.seq_kv = int(P.Bounds.MaxSeqlenKv);
  d.group = int(S.H / S.Hkv);
  d.rows = d.group * d.seq_q;
  if (S.Packed) {
    // Sq is the plan's bound on a sequence's queries; each CTA reads its
    // own count from cu_seqlens_q (q's batch strides are 0).
    d.cu_q = S.CuQ;
    d.total_q = int(S.TotalQ);
  }
  d.row_blocks = P.RowBlocks;
  d.splits = P.Splits;
  d.blocks_per_split = P.BlocksPerSplit;
  if (P.Splits > 1) {
    size_t Rows = size_t(P.Splits) * S.B * S.H * S.Sq;
    d.part_o = static_cast<float *>(Workspace);
    d.part_st = d.part_o + Rows * size_t(Target.HeadDimV);
    d.counters = Counters;
  }
  setPageArgs(A, C, P.Bounds.PageSize);
  A.strides32 = pagedStrides32(C.K, C.V, P.Bounds.PageSize, I.Config.BlockN) &&
                !pagedDecodeGather();
  std::vector<uint64_t> Slots = pagedInputSlots(*Def.Graph, S, Inputs);
  void *Params[] = {&A, Slots.data()};
  const bool Dependent =
      P.Splits > 1 && !Counters && decodeMergeDependent(Target.Arch);
  D.check(D.cuLaunchKernel(Decode, unsigned(P.Splits),
                           unsigned(d.heads_kv * d.row_blocks),
                           unsigned(d.batch), unsigned(I.Config.Warps * 32), 1,
                           1,
                           unsigned(I.Config.sharedBytes(Target.HeadDim,
                                                       Target.HeadDimV)),
                           Stream, Params, nullptr),
          "launch attnc_decode_paged");
  if (P.Splits == 1 || Counters)
    return;
  if (!Merge)
    throw InternalError("paged decode split without a merge kernel");
  // The merge kernel takes the split kernel's arguments (each sequence's
  // length from its pages, for the epilogue's q_idx).
  launchDecodeMerge(Merge, Dependent, unsigned(S.B * S.H * S.Sq),
                    Target.HeadDimV, Stream, Params);
}

bool pagedStrides32(const PageGeometry &K, const PageGeometry &V,
                    int64_t PageSize, int BlockN) {
  // A group's rows span at most max(page size, block) slots from the
  // thread's pointer; a page pointer is the page index (32 bits) times the
  // page stride. The kernel's products are unsigned.
  const int64_t Rows = std::max<int64_t>(PageSize, BlockN);
  auto Fits = [&](const PageGeometry &G) {
    return G.PageStride >= 0 && G.SlotStride >= 0 &&
           G.PageStride <= INT32_MAX / 2 && G.SlotStride <= INT32_MAX / 2 / Rows;
  };
  return Fits(K) && Fits(V);
}

bool pagedDecodeGather() {
  static const bool On =
      envSwitch("ATTNC_PAGED_DECODE_GATHER",
                "paged decode copies by row steps where the strides allow",
                "every paged decode copy computes its own 64-bit page offset")
          .value_or(false);
  return On;
}

bool decodeMergeInSplits() {
  // Read once, like ATTNC_DECODE_PDL. Off by default: on an H200
  // (2026-11-28, 32/8 heads, D128) the last CTA's merge made every split
  // call slower than the merge kernel launched as the split kernel's
  // dependent (batch 1: 2k keys 18.2 us against 15.2, 8k 29.0 against
  // 23.8, 32k 53.3 against 46.9; batch 4, 8k 45.8 against 43.9): one CTA
  // of a row block walks every split's part at the call's tail, where the
  // merge kernel spreads the rows over many CTAs.
  static const bool On =
      envSwitch("ATTNC_DECODE_LAST_CTA", "the splits merged by the merge kernel",
                "the last split CTA of each row block merges its rows")
          .value_or(false);
  return On;
}

bool decodeMergeDependent(GpuArch Arch) {
  // Read once: the launch path does no environment lookups. A bad value
  // throws here, before the split kernel's launch, on every call.
  static const bool On =
      envSwitch("ATTNC_DECODE_PDL",
                "the merge launched after the split kernel",
                "the merge as its programmatic dependent launch on sm_90a")
          .value_or(true);
  return Arch == GpuArch::Sm90a && On;
}

void launchDecodeMerge(CUfunction Merge, bool Dependent, unsigned Rows,
                       int HeadDimV, CUstream Stream, void **Params) {
  // On sm_90a the merge is the split kernel's programmatic dependent:
  // launched while the splits run, it waits on the device for their parts
  // (decode_wait_for_parts), so its launch latency hides behind them. A
  // stream capture records the dependency as a programmatic graph edge.
  CUlaunchConfig Cfg{};
  Cfg.gridDimX = Rows;
  Cfg.gridDimY = Cfg.gridDimZ = 1;
  Cfg.blockDimX = unsigned(attnc::decode_merge_threads(HeadDimV));
  Cfg.blockDimY = Cfg.blockDimZ = 1;
  Cfg.sharedMemBytes = 0;
  Cfg.hStream = Stream;
  CUlaunchAttribute Attr{};
  Attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  Attr.value.programmaticStreamSerializationAllowed = 1;
  if (Dependent) {
    Cfg.attrs = &Attr;
    Cfg.numAttrs = 1;
  }
  CudaDriver &D = CudaDriver::get();
  D.check(D.cuLaunchKernelEx(&Cfg, Merge, Params, nullptr),
          "launch attnc_decode_merge");
}

void PagedDecodeRunner::runEager(const DecodeBounds &B, const PagedCall &C,
                                 const TensorView &Q, const TensorView &Out,
                                 const TensorView *Finals,
                                 const InputMap &Inputs, CUstream Stream) {
  // Planning is arithmetic once the module is loaded: every call plans.
  const DecodePlan P = plan(B);
  DeviceArena &W = Workspace.get(Stream);
  W.ensure(P.WorkspaceBytes);
  unsigned *Count = nullptr;
  if (P.Splits > 1 && decodeMergeInSplits())
    Count = Counters.get(Stream).get(
        size_t(C.Shape.B) * C.Shape.Hkv * P.RowBlocks, Stream);
  run(P, C, Q, Out, Finals, reinterpret_cast<void *>(W.base()), Inputs,
      Stream, Count);
}

namespace {

/// A helper kernel module (the append, the public merge, a definition's
/// combine merge) of one arch, compiled and loaded once per process.
struct HelperModule {
  CacheResult Cached;
  KernelModule Module;
  std::map<std::string, CUfunction> Functions;
};

/// The module of \p Src, loaded once per source, arch and context (a
/// module runs only in the context it was loaded in; two definitions of
/// one name have one key but their own combine code).
HelperModule &helperModule(const codegen::KernelSource &Src) {
  static std::mutex M;
  static std::map<std::tuple<std::string, std::string, GpuArch, CUcontext>,
                  std::unique_ptr<HelperModule>>
      Modules;
  CUcontext Ctx = currentDevice().Context;
  std::lock_guard<std::mutex> Lock(M);
  std::unique_ptr<HelperModule> &Mod =
      Modules[{Src.Key, Src.Source, Src.Arch, Ctx}];
  if (Mod)
    return *Mod;
  auto New = std::make_unique<HelperModule>();
  New->Cached = KernelCache::global().getOrCompile(Src);
  New->Module.load(New->Cached, Src.Arch);
  for (const std::string &E : Src.Entries)
    New->Functions[E] = New->Module.function(E.c_str());
  Mod = std::move(New);
  return *Mod;
}

/// A helper module's source: \p Text's entries, each a one-line wrapper of
/// a device function of the device library.
codegen::KernelSource helperSource(const std::string &Name, GpuArch Arch,
                                   std::string Text,
                                   std::vector<std::string> Entries) {
  codegen::KernelSource Src;
  Src.Arch = Arch;
  Src.Key = fmt::format("{}.{}", Name, archName(Arch).str());
  Src.Entries = std::move(Entries);
  Src.Source = std::move(Text);
  return Src;
}

} // namespace

codegen::KernelSource pagedAppendSource(GpuArch Arch) {
  return helperSource(
      "paged_append", Arch,
      "// attnc: new K/V tokens into pages by a slot mapping.\n"
      "#include \"attnc/paged_append.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__(32)\n"
      "attnc_paged_append_i32(const attnc::PagedAppendArgs a) {\n"
      "  attnc::paged_append<int>(a);\n"
      "}\n"
      "extern \"C\" __global__ void __launch_bounds__(32)\n"
      "attnc_paged_append_i64(const attnc::PagedAppendArgs a) {\n"
      "  attnc::paged_append<long long>(a);\n"
      "}\n",
      {"attnc_paged_append_i32", "attnc_paged_append_i64"});
}

codegen::KernelSource mergeResultsSource(GpuArch Arch) {
  return helperSource(
      "merge_results", Arch,
      "// attnc: partial results merged by the derived rule.\n"
      "#include \"attnc/merge_results.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__(128)\n"
      "attnc_merge_results_f16(const attnc::MergeResultsArgs a) {\n"
      "  attnc::merge_results<attnc::f16>(a);\n"
      "}\n"
      "extern \"C\" __global__ void __launch_bounds__(128)\n"
      "attnc_merge_results_bf16(const attnc::MergeResultsArgs a) {\n"
      "  attnc::merge_results<attnc::bf16>(a);\n"
      "}\n"
      "extern \"C\" __global__ void __launch_bounds__(128)\n"
      "attnc_merge_results_f16_v8(const attnc::MergeResultsArgs a) {\n"
      "  attnc::merge_results_vec<attnc::f16, 8>(a);\n"
      "}\n"
      "extern \"C\" __global__ void __launch_bounds__(128)\n"
      "attnc_merge_results_bf16_v8(const attnc::MergeResultsArgs a) {\n"
      "  attnc::merge_results_vec<attnc::bf16, 8>(a);\n"
      "}\n",
      {"attnc_merge_results_f16", "attnc_merge_results_bf16",
       "attnc_merge_results_f16_v8", "attnc_merge_results_bf16_v8"});
}

/// Whether \p C's merge can move 8 columns a thread (16-byte accesses):
/// HeadDimV a multiple of 8 and at most 1024 (a row's threads fit a CTA of
/// 128), every part's and the output's address 16-byte aligned and their
/// strides multiples of 8 elements.
bool mergeResultsVec8(const MergeCall &C) {
  const attnc::MergeResultsArgs &A = C.Args;
  if (C.Combine || C.HeadDimV % 8 != 0 || C.HeadDimV > 8 * 128)
    return false;
  auto Aligned = [](const void *P, const long long (&S)[3]) {
    return reinterpret_cast<uintptr_t>(P) % 16 == 0 && S[0] % 8 == 0 &&
           S[1] % 8 == 0 && S[2] % 8 == 0;
  };
  for (int P = 0; P < A.parts; ++P)
    if (!Aligned(A.o[P], A.o_s[P]))
      return false;
  return Aligned(A.out, A.out_s);
}

void launchPagedAppend(GpuArch Arch, const AppendCall &C, const TensorView &K,
                       const TensorView &V, const PagedKV &KV,
                       const TensorView &SlotMapping, CUstream Stream) {
  if (C.Tokens == 0)
    return;
  HelperModule &M = helperModule(pagedAppendSource(Arch));
  attnc::PagedAppendArgs A{};
  A.k = K.Data;
  A.v = V.Data;
  A.k_cache = KV.KCache.Data;
  A.v_cache = KV.VCache.Data;
  A.slots = SlotMapping.Data;
  A.k_st = C.K[0];
  A.k_sh = C.K[1];
  A.v_st = C.V[0];
  A.v_sh = C.V[1];
  packStrides(C.KC, A.kc_ps, A.kc_sh, A.kc_ss);
  packStrides(C.VC, A.vc_ps, A.vc_sh, A.vc_ss);
  A.num_slots = C.KC.NumPages * C.KC.PageSize;
  A.tokens = int(C.Tokens);
  A.d_chunks = int(K.Shape[2] / 8);
  A.dv_chunks = int(V.Shape[2] / 8);
  A.page_shift = pageShift(C.KC.PageSize);
  unsigned Threads = unsigned(std::max(A.d_chunks, A.dv_chunks));
  CudaDriver &D = CudaDriver::get();
  void *Params[] = {&A};
  D.check(D.cuLaunchKernel(M.Functions.at(C.Slots64 ? "attnc_paged_append_i64"
                                           : "attnc_paged_append_i32"), unsigned(C.Tokens),
                           unsigned(K.Shape[1]), 1, Threads, 1, 1, 0, Stream,
                           Params, nullptr),
          "launch attnc_paged_append");
}

void launchMergeResults(GpuArch Arch, const MergeCall &C,
                        const codegen::KernelSource *CombineSrc,
                        CUstream Stream) {
  if (C.Combine && !CombineSrc)
    throw InternalError("a combine merge without its kernel's source");
  CUfunction F =
      C.Combine
          ? helperModule(*CombineSrc).Functions.at("attnc_merge_results_combine")
          : helperModule(mergeResultsSource(Arch))
                .Functions.at(C.Bf16 ? "attnc_merge_results_bf16"
                                     : "attnc_merge_results_f16");
  attnc::MergeResultsArgs A = C.Args;
  void *Params[] = {&A};
  CudaDriver &D = CudaDriver::get();
  if (mergeResultsVec8(C)) {
    // A row's HeadDimV / 8 threads, as many rows as fill 128 threads.
    const unsigned Cols = unsigned(C.HeadDimV / 8);
    const unsigned Rows = std::max(1u, 128u / Cols);
    CUfunction V = helperModule(mergeResultsSource(Arch))
                       .Functions.at(C.Bf16 ? "attnc_merge_results_bf16_v8"
                                            : "attnc_merge_results_f16_v8");
    D.check(D.cuLaunchKernel(V, unsigned((C.Rows + Rows - 1) / Rows), 1, 1,
                             Cols, Rows, 1, 0, Stream, Params, nullptr),
            "launch attnc_merge_results");
    return;
  }
  D.check(D.cuLaunchKernel(F, unsigned(C.Rows), 1, 1,
                           unsigned(C.HeadDimV / 2), 1, 1, 0, Stream, Params,
                           nullptr),
          C.Combine ? "launch attnc_merge_results_combine"
                    : "launch attnc_merge_results");
}

} // namespace attn::runtime
