// GPU test of packed (THD) decode through the C interface (attnc_c.h):
// attnc_attention_decode_paged_varlen, and a plan of
// attnc_attention_plan_decode_varlen run by attnc_attention_run_decode_varlen,
// each sequence with its own count of queries (0 to 16), against the fp64
// reference (the rows past the last sequence never written); softmax with a
// causal mask aligned to each sequence's end, sigmoid, ALiBi (a per-head
// input given as an attnc_input) and retention with its combine, with a
// split over the keys, pages of 1 and 16 (table and CSR, NHD and HND). A
// plan's kind is checked against the call: the packed plan given to
// attnc_attention_run_decode and a dense one to _run_decode_varlen are
// refused by name and launch nothing (out stays poisoned). Device memory
// comes from the test's own driver handle (the same primary context).
// ATTNC_CAPI_PACKED_COMPILE_ONLY=sm_90a compiles the cases' kernels into
// the kernel cache without a GPU. Exits 77 (ctest: skipped) without a GPU.
#include "PackedDecodeSupport.h"

#include "attn/codegen/Arch.h"
#include "attn/runtime/Bundle.h"
#include "attnc/attnc_c.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <stdexcept>

using namespace attn;
using namespace attn::gputest;
using runtime::PageLayout;
using runtime::TensorView;

namespace {

constexpr int D = PackedHeadDim;

void ok(attnc_status S, const char *What) {
  if (S != ATTNC_OK)
    throw std::runtime_error(fmt::format("{}: {}", What, attnc_last_error()));
}

int32_t dtypeCode(DType T) {
  switch (T) {
  case DType::F16:
    return ATTNC_DTYPE_F16;
  case DType::BF16:
    return ATTNC_DTYPE_BF16;
  case DType::F32:
    return ATTNC_DTYPE_F32;
  case DType::I32:
    return ATTNC_DTYPE_I32;
  case DType::I64:
    break;
  }
  throw std::runtime_error("no attnc_dtype for i64");
}

/// \p V as an attnc_tensor (its shape and strides stay \p V's: \p V must
/// outlive it); an empty view (no data) as a NULL-data tensor.
attnc_tensor cTensor(const TensorView &V) {
  attnc_tensor T{};
  if (!V.Data)
    return T;
  T.data = V.Data;
  T.dtype = dtypeCode(V.Type);
  T.ndim = int32_t(V.Shape.size());
  T.shape = V.Shape.data();
  T.strides = V.Strides.empty() ? nullptr : V.Strides.data();
  return T;
}

attnc_paged_kv cPaged(const runtime::PagedKV &KV) {
  attnc_paged_kv C{};
  C.k_cache = cTensor(KV.KCache);
  C.v_cache = cTensor(KV.VCache);
  C.layout = KV.Layout == PageLayout::NHD ? ATTNC_PAGE_NHD : ATTNC_PAGE_HND;
  C.block_table = cTensor(KV.BlockTable);
  C.seq_lens = cTensor(KV.SeqLens);
  C.indptr = cTensor(KV.Indptr);
  C.indices = cTensor(KV.Indices);
  C.last_page_len = cTensor(KV.LastPageLen);
  C.max_seqlen_kv = KV.MaxSeqlenKv;
  return C;
}

/// The custom inputs as attnc_inputs (names and tensors stay \p In's).
std::vector<attnc_input> cInputs(const runtime::InputMap &In) {
  std::vector<attnc_input> Out;
  for (const auto &[Name, Value] : In) {
    attnc_input I{};
    I.name = Name.c_str();
    if (const float *F = std::get_if<float>(&Value)) {
      I.kind = ATTNC_INPUT_F32;
      I.f32 = *F;
    } else if (const int32_t *X = std::get_if<int32_t>(&Value)) {
      I.kind = ATTNC_INPUT_I32;
      I.i32 = *X;
    } else {
      I.kind = ATTNC_INPUT_TENSOR;
      I.tensor = cTensor(std::get<TensorView>(Value));
    }
    Out.push_back(I);
  }
  return Out;
}

struct AttDeleter {
  void operator()(attnc_attention *A) const { attnc_attention_release(A); }
};
struct PlanDeleter {
  void operator()(attnc_decode_plan *P) const { attnc_decode_plan_release(P); }
};
using AttPtr = std::unique_ptr<attnc_attention, AttDeleter>;
using PlanPtr = std::unique_ptr<attnc_decode_plan, PlanDeleter>;

/// The C attention of example \p Name with paged decode's signature
/// (pagedSignature's: decode_sm80 named, the generated backend).
AttPtr attention(const std::string &Name, DType Dt, int32_t Arch = ATTNC_ARCH_CURRENT) {
  attnc_definition *Def = nullptr;
  ok(attnc_definition_from_example(Name.c_str(), &Def), "definition");
  attnc_signature S{};
  S.dtype = dtypeCode(Dt);
  S.head_dim = S.head_dim_v = D;
  S.layout = ATTNC_LAYOUT_BSHD;
  S.arch = Arch;
  S.skeleton = "decode_sm80";
  S.backend = "generated";
  attnc_attention *A = nullptr;
  attnc_status St = attnc_attention_create(Def, &S, &A);
  attnc_definition_release(Def);
  ok(St, "attnc_attention_create");
  return AttPtr(A);
}

struct Case {
  std::string Def;
  DType Dt;
  int H, Hkv, PageSize;
  PageLayout Layout;
  bool Csr;
  std::vector<int> Counts, Lens;
};

/// The per-call and the planned packed decode of \p C through the C
/// interface against the fp64 reference, and the plan kinds refused.
bool runCase(const Case &C, uint64_t Seed) {
  AttPtr Att = attention(C.Def, C.Dt);
  // The reference's definition (the same example) and final rowscales.
  runtime::Attention Ref(makeDefinition(C.Def), pagedSignature(C.Dt));
  std::mt19937_64 Rng(Seed);
  PagedPackedCall Call(Ref, Rng, C.Dt, C.H, C.Hkv, C.PageSize, C.Layout, C.Csr, C.Counts,
                       C.Lens);
  const Queries &X = Call.X;
  Outputs &Out = Call.Out;
  attnc_paged_kv CKV = cPaged(Call.KV);
  attnc_tensor CQ = cTensor(Call.QV), CCu = cTensor(Call.CuV);
  std::vector<attnc_input> CIn = cInputs(Call.Inputs);
  attnc_tensor CO = cTensor(Out.OV), CF = cTensor(Out.FV);
  const attnc_tensor *CFin = Out.NF ? &CF : nullptr;
  std::string Shape = fmt::format(
      "{} {} H{}/{} page{} {} {} counts {} keys {}", C.Def, std::string(dtypeName(C.Dt)), C.H,
      C.Hkv, C.PageSize, runtime::pageLayoutName(C.Layout), C.Csr ? "csr" : "table",
      fmt::join(C.Counts, ","), fmt::join(C.Lens, ","));
  std::vector<uint16_t> OBits;
  std::vector<float> FVals;

  ok(attnc_attention_decode_paged_varlen(Att.get(), &CQ, &CCu, X.MaxQ, &CKV, &CO, CFin,
                                         CIn.data(), CIn.size(), nullptr),
     "attnc_attention_decode_paged_varlen");
  std::string What = "C decode_paged_varlen " + Shape;
  bool Pass = Call.check(What.c_str(), Ref, C.Dt, C.H);

  attnc_decode_bounds Bd{Call.P.B, C.H, C.Hkv, X.MaxQ, maxOf(C.Lens), C.PageSize, 0};
  attnc_decode_plan *Raw = nullptr;
  size_t Bytes = 0;
  ok(attnc_attention_plan_decode_varlen(Att.get(), &Bd, &Raw, &Bytes),
     "attnc_attention_plan_decode_varlen");
  PlanPtr Plan(Raw);
  DeviceBuffer Work(std::max<size_t>(16, Bytes));
  Out.O.poison();
  Out.F.poison();
  ok(attnc_attention_run_decode_varlen(Att.get(), Plan.get(), &CQ, &CCu, &CKV, &CO, CFin,
                                       Work.get(), Bytes, CIn.data(), CIn.size(), nullptr),
     "attnc_attention_run_decode_varlen");
  What = fmt::format("C run_decode_varlen {} (workspace {} bytes)", Shape, Bytes);
  Pass = Call.check(What.c_str(), Ref, C.Dt, C.H) && Pass;

  // The packed plan refused by the dense run, a dense plan by the packed
  // run: InvalidArgument naming the plan's maker, and nothing written.
  Out.O.poison();
  Out.F.poison();
  attnc_status Dense = attnc_attention_run_decode(Att.get(), Plan.get(), &CQ, &CKV, &CO,
                                                  CFin, Work.get(), Bytes, CIn.data(),
                                                  CIn.size(), nullptr);
  std::string DenseMessage = Dense == ATTNC_OK ? "" : attnc_last_error();
  Raw = nullptr;
  ok(attnc_attention_plan_decode(Att.get(), &Bd, &Raw, &Bytes), "attnc_attention_plan_decode");
  PlanPtr DensePlan(Raw);
  attnc_status Packed = attnc_attention_run_decode_varlen(
      Att.get(), DensePlan.get(), &CQ, &CCu, &CKV, &CO, CFin, Work.get(), Work.size(),
      CIn.data(), CIn.size(), nullptr);
  std::string PackedMessage = Packed == ATTNC_OK ? "" : attnc_last_error();
  Out.download(OBits, FVals);
  const std::string WantDense =
      "attnc_attention_run_decode: argument 'plan': made by "
      "attnc_attention_plan_decode_varlen for packed calls; expected a plan of "
      "attnc_attention_plan_decode";
  const std::string WantPacked =
      "attnc_attention_run_decode_varlen: argument 'plan': made by "
      "attnc_attention_plan_decode for dense calls; expected a plan of "
      "attnc_attention_plan_decode_varlen";
  bool Refused = Dense == ATTNC_INVALID_ARGUMENT && DenseMessage == WantDense &&
                 Packed == ATTNC_INVALID_ARGUMENT && PackedMessage == WantPacked;
  bool Quiet = untouched("plan kinds", OBits, C.H, 0, X.Tq);
  std::printf("%-4s plan kinds refused, nothing written: %s\n",
              Refused && Quiet ? "ok" : "FAIL", Shape.c_str());
  if (!Refused)
    std::printf("     dense run: %d '%s'\n     packed run: %d '%s'\n", int(Dense),
                DenseMessage.c_str(), int(Packed), PackedMessage.c_str());
  return Pass && Refused && Quiet;
}

const DType F = DType::F16, BF = DType::BF16;
const PageLayout NHD = PageLayout::NHD, HND = PageLayout::HND;

std::vector<Case> cases() {
  return {
      {"mha", F, 8, 2, 16, NHD, false, {1, 4, 0, 16}, {3000, 4, 0, 900}},
      {"sigmoid_attn", BF, 16, 2, 1, HND, true, {3, 0, 2}, {2000, 5, 300}},
      {"alibi_learnable", F, 8, 8, 16, HND, true, {2, 1, 5}, {1000, 64, 2500}},
      {"retention_combine", F, 8, 1, 16, NHD, false, {2, 5}, {1500, 40}},
  };
}

/// ATTNC_CAPI_PACKED_COMPILE_ONLY=sm_90a: the cases' kernels (the C
/// attentions' and the reference's, paged decode and merge) into the
/// kernel cache, without a GPU.
int compileOnly(const char *ArchName) {
  std::optional<GpuArch> Arch = archFromName(ArchName);
  if (!Arch) {
    std::fprintf(stderr, "ATTNC_CAPI_PACKED_COMPILE_ONLY: unknown arch %s\n", ArchName);
    return 2;
  }
  runtime::PrecompileSet Dec;
  Dec.Decode = true;
  for (const Case &C : cases()) {
    runtime::Attention A(makeDefinition(C.Def), pagedSignature(C.Dt, Arch));
    A.precompile(Dec);
  }
  std::printf("compiled the kernels of %zu C packed decode cases\n", cases().size());
  return 0;
}

} // namespace

int main() {
  if (const char *Only = std::getenv("ATTNC_CAPI_PACKED_COMPILE_ONLY"))
    return compileOnly(Only);
  if (!announceDevice())
    return 77;
  CaseGuard Guard;
  uint64_t Seed = 200;
  for (const Case &C : cases())
    Guard.run(C.Def, [&] { return runCase(C, Seed++); });
  std::printf("%s\n", Guard.pass() ? "all C packed decode cases pass"
                                   : "some C packed decode cases FAIL");
  return Guard.pass() ? 0 : 1;
}
