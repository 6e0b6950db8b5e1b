// runtime::Attention without a CUDA driver: compiles, validates, then DriverError.
#include "CodegenTestDefs.h"
#include "TempDir.h"

#include "attn/codegen/Arch.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Backend.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/KernelCache.h"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

/// Points ATTNC_CACHE_DIR at a fresh temporary directory before the global
/// cache is first used, and returns that directory. It is removed with its
/// files at exit, after the global cache (constructed later, so destroyed
/// earlier).
const std::string &cacheDir() {
  static const attn::testing::TempDir Dir("attnc-attention-cache");
  static const bool Set = setenv("ATTNC_CACHE_DIR", Dir.Path.c_str(), 1) == 0;
  REQUIRE(Set);
  return Dir.Path;
}

Signature sm80(int D = 64) {
  Signature S;
  S.Dtype = DType::F16;
  S.HeadDim = S.HeadDimV = D;
  S.TensorLayout = Layout::BSHD;
  S.Arch = GpuArch::Sm80;
  return S;
}

void *fake(uintptr_t A) { return reinterpret_cast<void *>(A); }

TensorView seq(uintptr_t P, int64_t S, int64_t H) {
  return TensorView::contiguous(fake(P), DType::F16, {1, S, H, 64});
}

/// The message of the \p E that \p Fn throws; a failed check if none.
template <class E, class F> std::string messageOf(F &&Fn) {
  try {
    Fn();
  } catch (const E &Err) {
    return Err.what();
  }
  FAIL_CHECK("nothing (or another error) was thrown");
  return "";
}

bool driverAvailable() {
  if (!CudaDriver::get().available())
    return false;
  WARN("a CUDA driver is loaded here; the no-driver checks are skipped");
  return true;
}

} // namespace

TEST_CASE("Attention without a driver: compiles, validates, then DriverError",
          "[runtime][attention]") {
  const std::string &Dir = cacheDir();
  REQUIRE(KernelCache::global().stats().Directory == Dir);
  size_t Before = KernelCache::global().stats().Entries;

  Attention A(examples::mha(), sm80());
  // The config part is the runtime's default choice for d64 on sm_80.
  const std::string Prefix = "mha.fwd_sm80.f16.d64x64.sm_80.";
  CHECK_THAT(A.source().Key, StartsWith(Prefix));
  codegen::FwdConfig Config =
      codegen::FwdConfig::parse(A.source().Key.substr(Prefix.size()));
  CHECK_THAT(A.source().Source,
             Contains(fmt::format("attnc::f16, 64, 64,\n                 "
                                  "{}, {}, {}, {}>::run",
                                  Config.BlockM, Config.BlockN, Config.Warps,
                                  Config.Stages)));
  CHECK(A.source().Arch == GpuArch::Sm80);
  CHECK(A.cacheResult().Source == CacheSource::Compiled);
  REQUIRE(A.cacheResult().Cubin);
  CHECK(std::memcmp(A.cacheResult().Cubin->data(), "\x7f"
                                                   "ELF",
                    4) == 0);
  CHECK(KernelCache::global().stats().Entries == Before + 1);
  CHECK(A.finalNames() == std::vector<std::string>{"lse"});

  TensorView Q = seq(0x10000, 16, 2), K = seq(0x20000, 32, 2),
             V = seq(0x30000, 32, 2), O = seq(0x40000, 16, 2);
  TensorView F = TensorView::contiguous(fake(0x50000), DType::F32,
                                        {1, 1, 2, 16});
  // Validation comes first: a bad argument is InvalidArgument, not a
  // driver failure.
  TensorView NullQ = Q;
  NullQ.Data = nullptr;
  CHECK_THAT(messageOf<InvalidArgument>(
                 [&] { A.forward(NullQ, K, V, O, &F); }),
             Contains("q: null data pointer"));
  CHECK_THAT(messageOf<InvalidArgument>([&] { A.forward(Q, K, V, O, nullptr); }),
             Contains("finals: required"));
  CHECK_THAT(messageOf<InvalidArgument>(
                 [&] { A.forward(Q, K, V, O, &F, {{"bias", 1.0f}}); }),
             Contains("input 'bias': 'mha' declares no such input"));
  if (driverAvailable())
    return;
  CHECK_THAT(messageOf<DriverError>([&] { A.forward(Q, K, V, O, &F); }),
             Contains("no CUDA driver"));

  // The same signature again is served from memory.
  Attention B(examples::mha(), sm80());
  CHECK(B.cacheResult().Source == CacheSource::Memory);
}

TEST_CASE("Attention without a driver: custom inputs are validated first",
          "[runtime][attention]") {
  REQUIRE(KernelCache::global().stats().Directory == cacheDir());
  Attention A(test::tensorInputs(), sm80());
  TensorView Q = seq(0x10000, 16, 2), K = seq(0x20000, 32, 2),
             V = seq(0x30000, 32, 2), O = seq(0x40000, 16, 2);
  TensorView F = TensorView::contiguous(fake(0x50000), DType::F32,
                                        {1, 1, 2, 16});
  auto Tensor = [](uintptr_t P, std::vector<int64_t> Shape) {
    return TensorView::contiguous(fake(P), DType::F32, std::move(Shape));
  };
  InputMap In = {{"temp", 0.5f},
                 {"slopes", Tensor(0x60000, {2})},
                 {"row_bias", Tensor(0x61000, {1, 2, 16})},
                 {"key_bias", Tensor(0x62000, {1, 2, 32})},
                 {"bias", Tensor(0x63000, {1, 2, 16, 32})}};
  InputMap Bad = In;
  Bad["key_bias"] = Tensor(0x62000, {1, 2, 16});
  CHECK_THAT(messageOf<InvalidArgument>(
                 [&] { A.forward(Q, K, V, O, &F, Bad); }),
             Contains("input 'key_bias' (per_key): expected shape [1, 2, 32]"));
  Bad = In;
  Bad.erase("temp");
  CHECK_THAT(messageOf<InvalidArgument>(
                 [&] { A.forward(Q, K, V, O, &F, Bad); }),
             Contains("input 'temp': declared by 'tensor_inputs'"));
  if (driverAvailable())
    return;
  // Valid inputs pass validation and the slot packing, then need a driver.
  CHECK_THAT(messageOf<DriverError>([&] { A.forward(Q, K, V, O, &F, In); }),
             Contains("no CUDA driver"));
}

TEST_CASE("Attention: an unsupported signature fails before compiling",
          "[runtime][attention]") {
  REQUIRE(KernelCache::global().stats().Directory == cacheDir());
  size_t Before = KernelCache::global().stats().Entries;
  Signature S = sm80(96);
  CHECK_THAT(messageOf<UserError>([&] { Attention A(examples::mha(), S); }),
             Contains("head_dim 96"));
  S = sm80();
  S.Config = "bogus";
  CHECK_THAT(messageOf<UserError>([&] { Attention A(examples::mha(), S); }),
             Contains("config 'bogus'"));
  CHECK_THAT(messageOf<UserError>(
                 [&] { Attention A(examples::mamba2(), sm80()); }),
             Contains("'mamba2' is linear attention; use LinearAttention"));
  // One dtype enum for signatures and tensor views: a signature's is f16 or
  // bf16.
  S = sm80();
  S.Dtype = DType::F32;
  CHECK_THAT(messageOf<UserError>([&] { Attention A(examples::mha(), S); }),
             Contains("signature: dtype f32 is not f16 or bf16"));
  CHECK(KernelCache::global().stats().Entries == Before);
}

TEST_CASE("Attention: grids past CUDA's limits are refused before any launch",
          "[runtime][attention]") {
  cacheDir();
  Attention A(examples::mha(), sm80());
  // 65536 heads: batch x heads exceeds the grid's y dimension.
  TensorView Q = seq(0x10000, 4, 65536), K = seq(0x20000, 4, 65536),
             V = seq(0x30000, 4, 65536), O = seq(0x40000, 4, 65536);
  TensorView F = TensorView::contiguous(fake(0x50000), DType::F32,
                                        {1, 1, 65536, 4});
  CHECK_THAT(messageOf<InvalidArgument>([&] { A.forward(Q, K, V, O, &F); }),
             Contains("batch x heads is 65536; at most 65535"));
  // A sequence with more than 65535 query blocks.
  int64_t S = int64_t(65536) * 128 + 1;
  TensorView LQ = seq(0x10000, S, 1), LK = seq(0x20000, 4, 1),
             LV = seq(0x30000, 4, 1), LO = seq(0x40000, S, 1);
  TensorView LF = TensorView::contiguous(fake(0x50000), DType::F32,
                                         {1, 1, 1, S});
  // The generated backend refuses it; automatic selection falls back to the
  // reference backend, which accepts it and fails only at the launch here.
  Signature Gen = sm80();
  Gen.Backend = "generated";
  Attention G(examples::mha(), Gen);
  CHECK_THAT(messageOf<InvalidArgument>(
                 [&] { G.forward(LQ, LK, LV, LO, &LF); }),
             Contains("backend generated: seq_q 8388609 gives 65537 query "
                      "blocks of 128; at most 65535 are supported"));
  CHECK_THAT(messageOf<DriverError>([&] { A.forward(LQ, LK, LV, LO, &LF); }),
             Contains("no CUDA driver"));
}

TEST_CASE("Attention: backends by name, automatic selection and its reasons",
          "[runtime][attention][backend]") {
  cacheDir();
  CHECK(BackendRegistry::global().names() ==
        std::vector<std::string>{"generated", "reference"});
  Signature Bad = sm80();
  Bad.Backend = "fastest";
  CHECK_THAT(messageOf<UserError>([&] { Attention A(examples::mha(), Bad); }),
             Contains("unknown backend 'fastest'; registered: generated, "
                      "reference"));
  CHECK_THROWS_WITH(BackendRegistry::global().add("reference",
                                                  makeReferenceBackend),
                    Contains("'reference' is already registered"));

  Signature Ref = sm80();
  Ref.Backend = "reference";
  Attention R(examples::mha(), Ref);
  CHECK(R.source().Entries == std::vector<std::string>{"attnc_ref_fwd"});
  CHECK_THAT(R.source().Key, StartsWith("mha.ref_fwd.f16.d64x64.sm_80"));
  // More keys than one CTA's shared memory holds: the reference refuses,
  // naming the limit; automatic selection then uses the generated backend.
  int64_t S = codegen::ReferenceMaxKeys + 1;
  TensorView Q = seq(0x10000, 8, 2), K = seq(0x20000, S, 2),
             V = seq(0x30000, S, 2), O = seq(0x40000, 8, 2);
  TensorView F = TensorView::contiguous(fake(0x50000), DType::F32,
                                        {1, 1, 2, 8});
  CHECK_THAT(messageOf<InvalidArgument>([&] { R.forward(Q, K, V, O, &F); }),
             Contains("backend reference: seq_kv 16385 is more than the "
                      "16384 keys"));
  Attention A(examples::mha(), sm80());
  CHECK(A.source().Entries.front() == "attnc_fwd");
  CHECK_THAT(messageOf<DriverError>([&] { A.forward(Q, K, V, O, &F); }),
             Contains("no CUDA driver"));
  CHECK(A.lastBackend().empty()); // nothing ran
  // When every backend refuses, the error gives each one's reason: the
  // forward skeleton's for 17 queries, decode's for 16 (the short-query
  // rule's kernel, with its own grid).
  for (int64_t Sq : {17, 16}) {
    TensorView WQ = seq(0x10000, Sq, 65536), WK = seq(0x20000, S, 65536),
               WV = seq(0x30000, S, 65536), WO = seq(0x40000, Sq, 65536);
    TensorView WF = TensorView::contiguous(fake(0x50000), DType::F32,
                                           {1, 1, 65536, Sq});
    CHECK_THAT(messageOf<InvalidArgument>(
                   [&] { A.forward(WQ, WK, WV, WO, &WF); }),
               Contains(Sq == 17
                            ? "no backend can run this call (generated: batch "
                              "x heads is 65536; at most 65535 are supported; "
                              "reference: seq_kv 16385 is more than"
                            : "no backend can run this call (generated: "
                              "decode_sm80: KV heads x row blocks is 65536; at "
                              "most 65535 are supported; reference: seq_kv "
                              "16385 is more than"));
  }
}

TEST_CASE("archRunsOn: which CUBINs a device can load", "[runtime][attention]") {
  CHECK(archRunsOn(GpuArch::Sm80, 8, 0));
  CHECK(archRunsOn(GpuArch::Sm80, 8, 6));
  CHECK(archRunsOn(GpuArch::Sm86, 8, 9));
  CHECK_FALSE(archRunsOn(GpuArch::Sm86, 8, 0));
  CHECK_FALSE(archRunsOn(GpuArch::Sm80, 9, 0)); // a new major needs its own CUBIN
  CHECK(archRunsOn(GpuArch::Sm90a, 9, 0));
  CHECK_FALSE(archRunsOn(GpuArch::Sm90a, 8, 9));
  CHECK_FALSE(archRunsOn(GpuArch::Sm90a, 10, 0));
}

TEST_CASE("Attention::backward without a driver: validates, compiles, then "
          "DriverError",
          "[runtime][attention][backward]") {
  cacheDir();
  Attention A(examples::mha(), sm80());
  TensorView Q = seq(0x10000, 16, 2), K = seq(0x20000, 24, 2),
             V = seq(0x30000, 24, 2), O = seq(0x40000, 16, 2),
             DO = seq(0x50000, 16, 2), DQ = seq(0x60000, 16, 2),
             DK = seq(0x70000, 24, 2), DV = seq(0x80000, 24, 2);
  TensorView F =
      TensorView::contiguous(fake(0x90000), DType::F32, {1, 1, 2, 16});
  // A bad argument is reported before anything is generated or compiled.
  TensorView BadDK = seq(0x70000, 23, 2);
  CHECK_THAT(messageOf<InvalidArgument>([&] {
               A.backward(Q, K, V, &O, DO, &F, DQ, BadDK, DV);
             }),
             Contains("dk: expected batch 1, seq 24 and heads 2 (as k), got "
                      "1, 23 and 2"));
  // mha's backward reads doosum, so it needs the forward's output.
  CHECK_THAT(messageOf<InvalidArgument>([&] {
               A.backward(Q, K, V, nullptr, DO, &F, DQ, DK, DV);
             }),
             Contains("out: required, the forward's output; the backward of "
                      "'mha' reads rowsum(dout * out)"));
  // A valid call compiles the bwd_sm80 kernels, then needs the driver.
  CHECK_THAT(messageOf<DriverError>([&] {
               A.backward(Q, K, V, &O, DO, &F, DQ, DK, DV);
             }),
             Contains("no CUDA driver"));
}

TEST_CASE("Attention: a forward-only head dim is made; the backward's refusal "
          "comes when a backward is asked for",
          "[runtime][attention][backward]") {
  cacheDir();
  // bwd_sm80 runs head dims 64 and 128 only; the forward runs 256.
  Signature S = sm80(256);
  Attention A(examples::mha(), S);
  CHECK(A.forwardChoice().Skel->name() == "fwd_sm80");
  CHECK_THAT(messageOf<UserError>([&] { A.backwardChoice(); }),
             Contains("head_dim 256 is not supported by bwd_sm80"));
  // A backward configuration named says the backward will be needed: its
  // refusal comes when the Attention is made.
  S.BackwardConfig = "kv64x128w8.fused.s2";
  CHECK_THAT(messageOf<UserError>([&] { Attention B(examples::mha(), S); }),
             Contains("head_dim 256 is not supported by bwd_sm80"));
  S = sm80();
  S.BackwardConfig = "bogus";
  CHECK_THAT(messageOf<UserError>([&] { Attention B(examples::mha(), S); }),
             Contains("config 'bogus' is not a configuration of any skeleton "
                      "with attention backward kernels") &&
                 Contains("for bwd_sm90") && Contains("for bwd_sm80"));
}

TEST_CASE("Attention: with NeedsBackward, head dims no backward skeleton runs "
          "are refused when the Attention is made",
          "[runtime][attention][backward]") {
  cacheDir();
  // 192/128 (DeepSeek-V2-Lite): the forward runs it everywhere, the
  // backward only on sm_90a (bwd_sm90's column split). The refusal comes
  // before any kernel is compiled.
  Signature S = sm80(192);
  S.HeadDimV = 128;
  S.NeedsBackward = true;
  std::string Why = messageOf<NotSupportedYet>([&] { Attention A(examples::mha(), S); });
  CHECK_THAT(Why, Contains("not supported yet: the backward of 'mha' (backward "
                           "f16 d192/128 sm_80)") &&
                      Contains("bwd_sm90: bwd_sm90 needs arch sm_90a") &&
                      Contains("bwd_sm80: head_dim 192 is not supported by "
                               "bwd_sm80; expected 64 or 128"));
  S.Arch = GpuArch::Sm90a;
  {
    Attention A(examples::mha(), S);
    CHECK(A.backwardChoice().str() == "bwd_sm90 bwd90ws.kv64x64s2.split.ro.fused (default)");
  }
  // 192/192: no backward on sm_90a either.
  S.HeadDimV = 192;
  CHECK_THAT(messageOf<NotSupportedYet>([&] { Attention A(examples::mha(), S); }),
             Contains("(backward f16 d192/192 sm_90a)") &&
                 Contains("bwd_sm90: head_dim 192 is not supported by bwd_sm90") &&
                 Contains("bwd_sm80: head_dim 192 is not supported by bwd_sm80"));
  S = sm80(256);
  S.NeedsBackward = true;
  CHECK_THAT(messageOf<NotSupportedYet>([&] { Attention A(examples::mha(), S); }),
             Contains("head_dim 256 is not supported by bwd_sm80"));
  // A named configuration's mistakes stay user errors.
  S.BackwardConfig = "bogus";
  CHECK_THAT(messageOf<UserError>([&] { Attention A(examples::mha(), S); }),
             Contains("config 'bogus'"));
}

TEST_CASE("Attention: a skeleton or configuration named for the reference "
          "backend is refused, not ignored",
          "[runtime][attention]") {
  cacheDir();
  Signature S = sm80();
  S.Backend = "reference";
  S.Config = "m64n64w4s2";
  CHECK_THAT(messageOf<UserError>([&] { Attention A(examples::mha(), S); }),
             Contains("backend 'reference' runs its own kernel; skeleton, "
                      "config and backward_config choose the generated "
                      "backend's"));
  S.Config.clear();
  S.Skeleton = "fwd_sm80";
  CHECK_THAT(messageOf<UserError>([&] { Attention A(examples::mha(), S); }),
             Contains("backend 'reference' runs its own kernel"));
}

TEST_CASE("Attention: paged decode's configuration differs from contiguous decode's",
          "[runtime][attention][decode]") {
  cacheDir();
  // d = dv = 128: contiguous decode and pages of 16 keys or more over two
  // warps, smaller pages over four.
  Attention A(examples::mha(), sm80(128));
  TuneShape Decode;
  Decode.Heads = 8;
  Decode.HeadsKv = 2;
  Decode.SeqKv = 300;
  CHECK(A.callChoiceFor(Decode).str() == "decode_sm80 dec.m16n64w2s3 (default)");
  CHECK(A.pagedDecodeChoice(16).str() == "decode_sm80 dec.m16n64w2s3 (default)");
  CHECK(A.pagedDecodeChoice(1).str() == "decode_sm80 dec.m16n64w4s3 (default)");
  // A named configuration serves every page size.
  Signature S = sm80(128);
  S.Config = "dec.m32n64w2s2";
  Attention N(examples::mha(), S);
  for (int64_t Page : {1, 16})
    CHECK(N.pagedDecodeChoice(Page).str() == "decode_sm80 dec.m32n64w2s2 (named)");
}

TEST_CASE("Attention: decode_sm80 named runs at most 16 queries",
          "[runtime][attention][decode]") {
  cacheDir();
  Signature S = sm80();
  S.Skeleton = "decode_sm80";
  Attention A(examples::mha(), S);
  CHECK(A.forwardChoice().str() == "decode_sm80 dec.m16n64w4s3 (default)");
  CHECK_THAT(A.source().Key,
             StartsWith("mha.decode_sm80.f16.d64x64.sm_80.dec.m16n64w4s3"));
  auto Call = [&](int64_t Sq) {
    TensorView Q = seq(0x10000, Sq, 8), K = seq(0x20000, 300, 2),
               V = seq(0x30000, 300, 2), O = seq(0x40000, Sq, 8);
    TensorView F = TensorView::contiguous(fake(0x50000), DType::F32,
                                          {1, 1, 8, Sq});
    A.forward(Q, K, V, O, &F);
  };
  CHECK(messageOf<InvalidArgument>([&] { Call(17); }) ==
        "q: decode_sm80 runs 1 to 16 queries per sequence; q has 17");
  if (driverAvailable())
    return;
  // 16 queries pass the check and reach the launch.
  CHECK_THAT(messageOf<DriverError>([&] { Call(16); }),
             Contains("no CUDA driver"));
}
