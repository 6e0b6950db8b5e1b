// When block lists may be reused without a BlockMask (MaskClassify.h): the
// key of a call (shapes, tile, stream, the scalar inputs the mask reads)
// tells every difference apart, a mask that reads a tensor has none, and
// ListReuse, the rule the backward keeps per stream, reuses lists only for
// the key they were built for and never those built into a capture. Also
// the list kernels' CTA size (listWarpsPerCta). No GPU.
#include "MaskClassify.h"

#include "Examples.h"
#include "attn/Pipeline.h"
#include "attn/analysis/MaskBounds.h"
#include "attn/codegen/InputLayout.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

using namespace attn;
using runtime::ListReuse;
using runtime::MaskReuseKey;

namespace {

/// The input slots of \p G with the scalar \p Name (if any) holding the
/// int32 \p Value, the others filled with a pattern.
std::vector<uint64_t> slots(const ir::Graph &G, const std::string &Name, int32_t Value) {
  codegen::InputLayout L = codegen::inputLayout(G);
  std::vector<uint64_t> S(L.TotalSlots);
  for (size_t I = 0; I < S.size(); ++I)
    S[I] = 0x1000 + I;
  for (const codegen::InputSlots &In : L.Inputs)
    if (In.Name == Name) {
      S[In.First] = 0;
      std::memcpy(&S[In.First], &Value, sizeof Value);
    }
  return S;
}

CUstream stream(uintptr_t X) { return reinterpret_cast<CUstream>(X); }

} // namespace

TEST_CASE("maskReuseKey: every input of the lists is in the key", "[runtime][maskreuse]") {
  CompiledDefinition D = compile(examples::mhaPrefixLm());
  const ir::Graph &G = *D.Graph;
  analysis::MaskAnalysis A = analysis::analyzeMask(G);
  REQUIRE(runtime::mayReuse(A));
  REQUIRE(A.ScalarInputs == std::vector<std::string>{"prefix_len"});
  auto Key = [&](int64_t B, int64_t H, int64_t Sq, int64_t Skv, int BM, int BN,
                 uintptr_t S, int32_t P) {
    return runtime::maskReuseKey(G, A, B, H, Sq, Skv, BM, BN, stream(S),
                                 slots(G, "prefix_len", P));
  };
  const MaskReuseKey K = Key(2, 8, 1000, 1200, 64, 128, 0, 256);
  CHECK(K == Key(2, 8, 1000, 1200, 64, 128, 0, 256));
  CHECK(K != Key(3, 8, 1000, 1200, 64, 128, 0, 256));
  CHECK(K != Key(2, 4, 1000, 1200, 64, 128, 0, 256));
  CHECK(K != Key(2, 8, 1001, 1200, 64, 128, 0, 256));
  CHECK(K != Key(2, 8, 1000, 1000, 64, 128, 0, 256));
  CHECK(K != Key(2, 8, 1000, 1200, 128, 128, 0, 256));
  CHECK(K != Key(2, 8, 1000, 1200, 64, 64, 0, 256));
  CHECK(K != Key(2, 8, 1000, 1200, 64, 128, 0x10, 256));
  CHECK(K != Key(2, 8, 1000, 1200, 64, 128, 0, 257));
  // Slots of what the mask does not read are not in the key.
  std::vector<uint64_t> Other = slots(G, "prefix_len", 256);
  codegen::InputLayout L = codegen::inputLayout(G);
  for (const codegen::InputSlots &In : L.Inputs)
    if (In.Name != "prefix_len")
      for (unsigned I = 0; I < In.Count; ++I)
        Other[In.First + I] ^= 0xff;
  CHECK(K == runtime::maskReuseKey(G, A, 2, 8, 1000, 1200, 64, 128, stream(0), Other));
}

TEST_CASE("maskReuseKey: masks with and without inputs", "[runtime][maskreuse]") {
  CompiledDefinition W = compile(examples::mhaSlidingWindow());
  analysis::MaskAnalysis AW = analysis::analyzeMask(*W.Graph);
  CHECK(runtime::mayReuse(AW));
  CompiledDefinition C = compile(examples::mhaChunked());
  analysis::MaskAnalysis AC = analysis::analyzeMask(*C.Graph);
  CHECK(runtime::mayReuse(AC));
  const MaskReuseKey K1 = runtime::maskReuseKey(*C.Graph, AC, 1, 2, 64, 64, 64, 128,
                                                stream(0), slots(*C.Graph, "chunk", 16));
  CHECK(K1 != runtime::maskReuseKey(*C.Graph, AC, 1, 2, 64, 64, 64, 128, stream(0),
                                    slots(*C.Graph, "chunk", 32)));
  // Document ids are device data: never reused.
  CompiledDefinition Doc = compile(examples::mhaDocumentIds());
  CHECK_FALSE(runtime::mayReuse(analysis::analyzeMask(*Doc.Graph)));
}

TEST_CASE("ListReuse: lists are reused only for the key they were built for",
          "[runtime][maskreuse]") {
  MaskReuseKey K{2, 8, 1000, 1000, 64, 128, nullptr, {256}};
  MaskReuseKey P = K;
  P.Scalars = {257};
  MaskReuseKey S = K;
  S.Stream = stream(0x10);
  ListReuse R;
  CHECK_FALSE(R.reusable(K)); // nothing built yet
  CHECK_FALSE(R.reusable(std::nullopt));
  R.building();
  R.built(K, /*Captured=*/false);
  CHECK(R.reusable(K));
  CHECK_FALSE(R.reusable(P));            // another prefix length
  CHECK_FALSE(R.reusable(S));            // another stream
  CHECK_FALSE(R.reusable(std::nullopt)); // a mask that reads tensors
  // A build for another key replaces the lists.
  R.building();
  CHECK_FALSE(R.reusable(K));
  R.built(P, false);
  CHECK(R.reusable(P));
  CHECK_FALSE(R.reusable(K));
  // A build without a key (tensor inputs) leaves nothing to reuse.
  R.building();
  R.built(std::nullopt, false);
  CHECK_FALSE(R.reusable(P));
  // Lists launched into a capture exist only once the graph runs.
  R.building();
  R.built(K, /*Captured=*/true);
  CHECK_FALSE(R.reusable(K));
  R.building();
  R.built(K, false);
  CHECK(R.reusable(K));
}

TEST_CASE("listWarpsPerCta: the list kernels' grid covers the SMs",
          "[runtime][maskreuse]") {
  CHECK(runtime::listWarpsPerCta(0, 132) == 1);
  CHECK(runtime::listWarpsPerCta(128, 132) == 1); // S = 16k, 128 key blocks
  CHECK(runtime::listWarpsPerCta(256, 132) == 1);
  CHECK(runtime::listWarpsPerCta(264, 132) == 2);
  CHECK(runtime::listWarpsPerCta(524, 132) == 2);
  CHECK(runtime::listWarpsPerCta(525, 132) == 4);
  CHECK(runtime::listWarpsPerCta(100000, 132) == 4);
  for (int64_t Lines : {1, 77, 300, 5000}) {
    const int W = runtime::listWarpsPerCta(Lines, 132);
    CHECK((W == 1 || (Lines + W - 1) / W >= 132));
  }
}
