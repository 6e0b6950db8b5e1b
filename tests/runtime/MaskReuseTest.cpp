// When block lists may be reused without a BlockMask (MaskClassify.h): the
// key of a call (shapes, tile, stream, the scalar inputs the mask reads)
// tells every difference apart, a mask that reads a tensor has none, and
// ListReuse, the rule the forward and the backward keep per stream, reuses
// lists only for a key they were built for (of up to MaxKeys kept, the least
// recently used evicted), never without a key and never those built into a
// capture. Also the list kernels' CTA size (listWarpsPerCta). No GPU.
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

namespace {

/// A stream's kept lists as the runtime uses them (KeptLists::get without
/// the device): a call of \p Key reuses a slot or builds into one, counted
/// in \p Builds. Returns the slot the call's lists are in.
unsigned call(ListReuse &R, const std::optional<MaskReuseKey> &Key, int &Builds,
              bool Captured = false) {
  if (int Found = R.find(Key); Found >= 0)
    return unsigned(Found);
  const unsigned At = R.building(Captured);
  ++Builds;
  R.built(At, Key, Captured);
  return At;
}

MaskReuseKey keyOf(int32_t Offset) {
  return MaskReuseKey{2, 8, 1000, 1000, 64, 128, nullptr, {uint64_t(Offset)}};
}

} // namespace

TEST_CASE("ListReuse: lists are reused only for the key they were built for",
          "[runtime][maskreuse]") {
  MaskReuseKey K{2, 8, 1000, 1000, 64, 128, nullptr, {256}};
  MaskReuseKey P = K;
  P.Scalars = {257};
  MaskReuseKey S = K;
  S.Stream = stream(0x10);
  ListReuse R;
  CHECK_FALSE(R.reusable(K)); // nothing built yet
  CHECK(R.find(K) == -1);
  CHECK(R.find(std::nullopt) == -1);
  unsigned At = R.building();
  R.built(At, K, /*Captured=*/false);
  CHECK(R.reusable(K));
  CHECK(R.find(K) == int(At));
  CHECK(R.find(P) == -1);             // another prefix length
  CHECK(R.find(S) == -1);             // another stream
  CHECK(R.find(std::nullopt) == -1);  // a mask that reads tensors
  CHECK_FALSE(R.reusable(std::nullopt));
  // A build overwriting a slot forgets its key until it is built again.
  ListReuse One;
  const unsigned First = One.building();
  One.built(First, K, false);
  CHECK(One.find(K) == int(First));
}

TEST_CASE("ListReuse: alternating keys build once each", "[runtime][maskreuse]") {
  ListReuse R;
  int Builds = 0;
  const MaskReuseKey A = keyOf(0), B = keyOf(4096);
  const unsigned SA = call(R, A, Builds), SB = call(R, B, Builds);
  CHECK(SA != SB); // each key has its own memory
  for (int I = 0; I < 5; ++I) {
    CHECK(call(R, A, Builds) == SA);
    CHECK(call(R, B, Builds) == SB);
  }
  CHECK(Builds == 2); // A, B, A, B, ...: two builds, not twelve
  CHECK(R.kept() == 2);
}

TEST_CASE("ListReuse: a key beyond the bound evicts the least recently used",
          "[runtime][maskreuse]") {
  ListReuse R;
  int Builds = 0;
  const unsigned N = ListReuse::MaxKeys;
  for (unsigned I = 0; I < N; ++I)
    call(R, keyOf(int32_t(I)), Builds);
  CHECK(Builds == int(N));
  CHECK(R.kept() == N);
  // Key 0 used again: key 1 is now the least recently used.
  const unsigned Slot0 = call(R, keyOf(0), Builds);
  CHECK(Builds == int(N));
  const unsigned SlotNew = call(R, keyOf(int32_t(N)), Builds); // evicts key 1
  CHECK(Builds == int(N) + 1);
  CHECK(SlotNew != Slot0);
  CHECK(R.kept() == N);
  CHECK(R.find(keyOf(1)) == -1);
  CHECK(R.find(keyOf(0)) == int(Slot0));
  call(R, keyOf(1), Builds); // rebuilt after its eviction
  CHECK(Builds == int(N) + 2);
  // Every key kept is found where it was built.
  for (unsigned I = 0; I <= N; ++I)
    if (I != 2) // evicted by key 1's rebuild
      CHECK(R.find(keyOf(int32_t(I))) >= 0);
  CHECK(R.find(keyOf(2)) == -1);
}

TEST_CASE("ListReuse: no key and captures are never remembered",
          "[runtime][maskreuse]") {
  ListReuse R;
  int Builds = 0;
  // A mask that reads tensors: every call builds, into the same memory.
  const unsigned S0 = call(R, std::nullopt, Builds);
  for (int I = 0; I < 3; ++I)
    CHECK(call(R, std::nullopt, Builds) == S0);
  CHECK(Builds == 4);
  CHECK(R.kept() == 0);
  // Lists launched into a capture exist only once the graph runs.
  const MaskReuseKey K = keyOf(7);
  call(R, K, Builds, /*Captured=*/true);
  CHECK(Builds == 5);
  CHECK_FALSE(R.reusable(K));
  call(R, K, Builds, /*Captured=*/true);
  CHECK(Builds == 6);
  call(R, K, Builds);
  call(R, K, Builds);
  CHECK(Builds == 7);
  // A build into a kept key's slot forgets that key: a captured build
  // overwrites the most recently used slot and leaves its key unfound.
  ListReuse Full;
  int FullBuilds = 0;
  for (unsigned I = 0; I < ListReuse::MaxKeys; ++I)
    call(Full, keyOf(int32_t(I)), FullBuilds);
  call(Full, keyOf(100), FullBuilds, /*Captured=*/true);
  CHECK(Full.kept() == ListReuse::MaxKeys - 1);
  CHECK(Full.find(keyOf(int32_t(ListReuse::MaxKeys - 1))) == -1);
  CHECK(Full.find(keyOf(0)) >= 0);
  CHECK(Full.find(keyOf(100)) == -1);
}

TEST_CASE("ListReuse: a build during a capture takes the slot the warm-up sized",
          "[runtime][maskreuse]") {
  // torch.cuda.graph's way: warm-up calls on one stream, then the capture
  // on another (another key). Nothing may be allocated during the capture,
  // so its build must land in the warm-up's slot, not in a fresh one.
  ListReuse R;
  int Builds = 0;
  const MaskReuseKey Warm = keyOf(0);
  MaskReuseKey Captured = Warm;
  Captured.Stream = stream(0x20);
  const unsigned SW = call(R, Warm, Builds);
  CHECK(call(R, Warm, Builds) == SW);
  CHECK(call(R, Captured, Builds, /*Captured=*/true) == SW);
  CHECK(Builds == 2);
  CHECK(R.find(Warm) == -1); // its lists were overwritten by the capture
  CHECK_FALSE(R.reusable(Captured));
  // With several keys kept, the capture takes the one used last.
  ListReuse Two;
  int TwoBuilds = 0;
  call(Two, keyOf(1), TwoBuilds);
  const unsigned S2 = call(Two, keyOf(2), TwoBuilds);
  const unsigned S1 = call(Two, keyOf(1), TwoBuilds); // now the last used
  CHECK(S1 != S2);
  CHECK(call(Two, Captured, TwoBuilds, /*Captured=*/true) == S1);
  CHECK(Two.find(keyOf(2)) == int(S2));
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
