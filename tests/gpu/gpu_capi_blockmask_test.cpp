// GPU test of block masks through the C interface (attnc_c.h): a mask made
// by attnc_block_mask_make and passed to attnc_attention_forward_masked and
// _backward_masked gives the same bits as the calls that classify, and no
// classification is launched by them (attnc_block_classify_launches); a
// mask refreshed for new document ids gives the bits of a call that
// classifies those ids; a mask given as lists (the exact causal classes in
// blocks of 128) gives the bits of the classified causal call. Device
// memory comes from the test's own driver handle (the same primary
// context). Exits 77 (ctest: skipped) where there is no GPU.
#include "GpuSupport.h"
#include "TestDefinitions.h"

#include "attnc/attnc_c.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace attn;
using namespace attn::gputest;

namespace {

int Passed = 0, Failed = 0;

void report(const std::string &Name, bool Pass, const std::string &Line) {
  std::printf("%-46s %s  %s\n", Name.c_str(), Line.c_str(),
              Pass ? "pass" : "FAIL");
  std::fflush(stdout);
  (Pass ? Passed : Failed)++;
}

void ok(attnc_status S, const char *What) {
  if (S != ATTNC_OK)
    throw std::runtime_error(fmt::format("{}: {}", What, attnc_last_error()));
}

uint64_t launches() {
  uint64_t N = 0;
  ok(attnc_block_classify_launches(&N), "attnc_block_classify_launches");
  return N;
}

/// A [B, S, H, D] f16 (or [F, B, H, S] f32, [B, S] i32) device tensor.
struct Dev {
  std::vector<int64_t> Shape;
  std::unique_ptr<DeviceBuffer> Buf;
  attnc_tensor T{};
  Dev(std::vector<int64_t> S, int32_t Dtype) : Shape(std::move(S)) {
    size_t N = 1;
    for (int64_t X : Shape)
      N *= size_t(X);
    Buf = std::make_unique<DeviceBuffer>(N * (Dtype == ATTNC_DTYPE_F16 ? 2 : 4));
    T.data = Buf->get();
    T.dtype = Dtype;
    T.ndim = int32_t(Shape.size());
    T.shape = Shape.data();
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> Out(Buf->size());
    Buf->download(Out.data(), Out.size());
    return Out;
  }
};

void randomHalf(Dev &X, std::mt19937_64 &Rng) {
  std::normal_distribution<double> N(0.0, 1.0);
  std::vector<uint16_t> Bits(X.Buf->size() / 2);
  for (uint16_t &B : Bits)
    B = toBits(DType::F16, N(Rng));
  X.Buf->upload(Bits.data(), Bits.size() * 2);
}

struct Problem {
  int64_t B, H, S, D = 64;
  Dev Q, K, V, O, F, DO, DQ, DK, DV;
  Problem(int64_t B, int64_t H, int64_t S, std::mt19937_64 &Rng)
      : B(B), H(H), S(S), Q({B, S, H, 64}, ATTNC_DTYPE_F16),
        K({B, S, H, 64}, ATTNC_DTYPE_F16), V({B, S, H, 64}, ATTNC_DTYPE_F16),
        O({B, S, H, 64}, ATTNC_DTYPE_F16), F({1, B, H, S}, ATTNC_DTYPE_F32),
        DO({B, S, H, 64}, ATTNC_DTYPE_F16), DQ({B, S, H, 64}, ATTNC_DTYPE_F16),
        DK({B, S, H, 64}, ATTNC_DTYPE_F16), DV({B, S, H, 64}, ATTNC_DTYPE_F16) {
    for (Dev *X : {&Q, &K, &V, &DO})
      randomHalf(*X, Rng);
  }

  /// o, finals, dq, dk, dv of a forward and backward (poisoned first) with
  /// \p M or without.
  std::vector<std::vector<uint8_t>> run(attnc_attention *A,
                                        const std::vector<attnc_input> &In,
                                        const attnc_block_mask *M) {
    for (Dev *X : {&O, &F, &DQ, &DK, &DV})
      X->Buf->poison();
    if (M)
      ok(attnc_attention_forward_masked(A, &Q.T, &K.T, &V.T, &O.T, &F.T,
                                        In.data(), In.size(), M, nullptr),
         "forward_masked");
    else
      ok(attnc_attention_forward(A, &Q.T, &K.T, &V.T, &O.T, &F.T, In.data(),
                                 In.size(), nullptr),
         "forward");
    if (M)
      ok(attnc_attention_backward_masked(A, &Q.T, &K.T, &V.T, &O.T, &DO.T,
                                         &F.T, &DQ.T, &DK.T, &DV.T, In.data(),
                                         In.size(), nullptr, 0, M, nullptr),
         "backward_masked");
    else
      ok(attnc_attention_backward(A, &Q.T, &K.T, &V.T, &O.T, &DO.T, &F.T,
                                  &DQ.T, &DK.T, &DV.T, In.data(), In.size(),
                                  nullptr, 0, nullptr),
         "backward");
    std::vector<std::vector<uint8_t>> Out;
    for (Dev *X : {&O, &F, &DQ, &DK, &DV})
      Out.push_back(X->bytes());
    return Out;
  }
};

struct AttDeleter {
  void operator()(attnc_attention *A) const { attnc_attention_release(A); }
};
struct MaskDeleter {
  void operator()(attnc_block_mask *M) const { attnc_block_mask_release(M); }
};
using AttPtr = std::unique_ptr<attnc_attention, AttDeleter>;
using MaskPtr = std::unique_ptr<attnc_block_mask, MaskDeleter>;

AttPtr attention(const char *Name) {
  attnc_definition *D = nullptr;
  ok(attnc_definition_from_example(Name, &D), "definition");
  attnc_signature S{};
  S.dtype = ATTNC_DTYPE_F16;
  S.head_dim = S.head_dim_v = 64;
  S.layout = ATTNC_LAYOUT_BSHD;
  S.arch = ATTNC_ARCH_CURRENT;
  S.needs_backward = 1;
  S.backend = "generated";
  attnc_attention *A = nullptr;
  attnc_status St = attnc_attention_create(D, &S, &A);
  attnc_definition_release(D);
  ok(St, "attnc_attention_create");
  return AttPtr(A);
}

/// Document ids as int32 [B, S] (documentId, moved by \p Shift).
void setIds(Dev &Ids, int64_t Shift) {
  std::vector<int32_t> X(size_t(Ids.Shape[0] * Ids.Shape[1]));
  for (int64_t b = 0; b < Ids.Shape[0]; ++b)
    for (int64_t s = 0; s < Ids.Shape[1]; ++s)
      X[size_t(b * Ids.Shape[1] + s)] = int32_t(documentId(b + Shift, s));
  Ids.Buf->upload(X.data(), X.size() * 4);
}

void documentCase() {
  std::mt19937_64 Rng(11);
  Problem P(2, 4, 700, Rng);
  AttPtr A1 = attention("mha_document_ids"), A2 = attention("mha_document_ids");
  Dev Ids({P.B, P.S}, ATTNC_DTYPE_I32);
  setIds(Ids, 0);
  std::vector<attnc_input> In(2);
  In[0].name = "doc_q";
  In[1].name = "doc_k";
  for (attnc_input &I : In) {
    I.kind = ATTNC_INPUT_TENSOR;
    I.tensor = Ids.T;
  }
  auto Classified = P.run(A1.get(), In, nullptr);
  attnc_mask_shape Shape{P.B, P.H, P.S, P.S, 0};
  attnc_block_mask *Raw = nullptr;
  ok(attnc_block_mask_make(A1.get(), &Shape, In.data(), In.size(), 1, nullptr,
                           &Raw),
     "attnc_block_mask_make");
  MaskPtr M(Raw);
  const uint64_t Before = launches();
  auto Got1 = P.run(A1.get(), In, M.get());
  auto Got2 = P.run(A2.get(), In, M.get()); // a second layer, the same mask
  const uint64_t Launched = launches() - Before;
  const bool Same = Got1 == Classified && Got2 == Classified;
  report("mha_document_ids b2 h4 s700 reused mask", Same && Launched == 0,
         fmt::format("same bits {} classifications {}", Same, Launched));

  // New ids: the refreshed mask follows them.
  setIds(Ids, 3);
  auto Classified3 = P.run(A1.get(), In, nullptr);
  ok(attnc_block_mask_refresh(A2.get(), M.get(), In.data(), In.size(),
                              nullptr),
     "attnc_block_mask_refresh");
  const uint64_t Before3 = launches();
  auto Got3 = P.run(A2.get(), In, M.get());
  const bool Same3 = Got3 == Classified3, Differs = Classified3 != Classified;
  report("mha_document_ids refreshed for new ids",
         Same3 && Differs && launches() == Before3,
         fmt::format("same bits {} (new ids change the result: {})", Same3,
                     Differs));
}

void listsCase() {
  std::mt19937_64 Rng(12);
  Problem P(1, 2, 333, Rng);
  AttPtr A = attention("mha");
  auto Classified = P.run(A.get(), {}, nullptr);
  // Causal in blocks of 128: the diagonal block partial, those below full.
  const int QB = 3, KB = 3;
  std::vector<int32_t> Num(QB), Idx(QB * KB, 0), FullNum(QB),
      FullIdx(QB * KB, 0);
  for (int m = 0; m < QB; ++m) {
    Num[m] = 1;
    Idx[m * KB] = m;
    FullNum[m] = m;
    for (int n = 0; n < m; ++n)
      FullIdx[m * KB + n] = n;
  }
  attnc_block_lists L{1,          1,           128,           128,
                      Num.data(), Num.size(), Idx.data(),    Idx.size(),
                      FullNum.data(), FullNum.size(), FullIdx.data(),
                      FullIdx.size()};
  attnc_mask_shape Shape{P.B, P.H, P.S, P.S, 0};
  attnc_block_mask *Raw = nullptr;
  ok(attnc_block_mask_from_lists(A.get(), &Shape, &L, 1, &Raw),
     "attnc_block_mask_from_lists");
  MaskPtr M(Raw);
  attnc_mask_shape Info{};
  int32_t Bwd = 0;
  ok(attnc_block_mask_info(M.get(), &Info, &Bwd), "attnc_block_mask_info");
  const uint64_t Before = launches();
  auto Got = P.run(A.get(), {}, M.get());
  const bool Same = Got == Classified;
  double MaxDiff = 0;
  for (size_t I = 0; I < Got[0].size(); I += 2) {
    uint16_t X, Y;
    std::memcpy(&X, &Got[0][I], 2);
    std::memcpy(&Y, &Classified[0][I], 2);
    MaxDiff = std::max(MaxDiff, std::fabs(fromBits(DType::F16, X) -
                                          fromBits(DType::F16, Y)));
  }
  report("mha b1 h2 s333 lists 128x128",
         Same && launches() == Before && Info.seq_q == 333 && Bwd == 1,
         fmt::format("same bits {} (o max diff {:.1e})", Same, MaxDiff));
}

} // namespace

int main() {
  auto &Drv = runtime::CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  std::printf("device: %s\n", runtime::currentDevice().Name.c_str());
  for (void (*Case)() : {documentCase, listsCase}) {
    try {
      Case();
    } catch (const std::exception &E) {
      std::printf("ERROR %s\n", E.what());
      ++Failed;
    }
  }
  std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}
