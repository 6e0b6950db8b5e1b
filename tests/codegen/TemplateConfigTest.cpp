// The strict template renderer, KernelSpec::validate and FwdConfig parsing.
#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/Template.h"
#include "attn/codegen/Templates.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace attn;
using namespace attn::codegen;
using Catch::Matchers::Contains;

namespace {

/// The message of the \p E that \p Fn throws; a failed check if none.
template <class E, class F> std::string messageOf(F &&Fn) {
  try {
    Fn();
  } catch (const E &Err) {
    return Err.what();
  }
  FAIL_CHECK("nothing was thrown");
  return "";
}

std::string renderError(const std::string &Text,
                        const std::map<std::string, std::string> &Values) {
  return messageOf<InternalError>(
      [&] { render("unit.cu.in", Text, Values); });
}

KernelSpec spec(int D, int DV, GpuArch Arch,
                const std::string &Config = "m64n64w4s2") {
  KernelSpec S;
  S.HeadDim = D;
  S.HeadDimV = DV;
  S.Arch = Arch;
  S.Config = FwdConfig::parse(Config);
  return S;
}

FwdConfig config(int M, int N, int W, int S) {
  FwdConfig C;
  C.BlockM = M;
  C.BlockN = N;
  C.Warps = W;
  C.Stages = S;
  return C;
}

std::string specError(const KernelSpec &S) {
  return messageOf<UserError>([&] { S.validate(); });
}

} // namespace

TEST_CASE("render substitutes every slot, repeated slots included",
          "[codegen][template]") {
  CHECK(render("t", "a {{x}} b {{y_1}}{{x}}.", {{"x", "1"}, {"y_1", "two"}}) ==
        "a 1 b two1.");
  // Single braces and a lone "}}" are text, not slots.
  CHECK(render("t", "{x} }} {{k}}", {{"k", "v"}}) == "{x} }} v");
  CHECK(render("t", "no slots", {}) == "no slots");
  // Values are inserted verbatim, not rendered again.
  CHECK(render("t", "{{a}}", {{"a", "{{b}}"}}) == "{{b}}");
}

TEST_CASE("render: a slot without a value names the template and the slot",
          "[codegen][template]") {
  std::string M = renderError("{{x}} {{missing_key}}", {{"x", "1"}});
  CHECK_THAT(M, Contains("unit.cu.in"));
  CHECK_THAT(M, Contains("no value for slot 'missing_key'"));
}

TEST_CASE("render: a value without a slot is an error naming it",
          "[codegen][template]") {
  std::string M = renderError("{{x}}", {{"x", "1"}, {"stray_value", "2"}});
  CHECK_THAT(M, Contains("unit.cu.in"));
  CHECK_THAT(M, Contains("'stray_value' has no slot"));
}

TEST_CASE("render: an unclosed {{ is an error with its offset",
          "[codegen][template]") {
  std::string M = renderError("abc {{x}} {{x", {{"x", "1"}});
  CHECK_THAT(M, Contains("unclosed '{{' at offset 10"));
}

TEST_CASE("render: a slot of other characters is an error",
          "[codegen][template]") {
  for (const char *Text : {"{{a-b}}", "{{ x }}", "{{}}", "{{a.b}}"}) {
    INFO(Text);
    std::string M = renderError(Text, {{"x", "1"}});
    CHECK_THAT(M, Contains("bad slot '" + std::string(Text) + "'"));
  }
}

TEST_CASE("templateText: the forward template is embedded, others are not",
          "[codegen][template]") {
  CHECK_THAT(templateText("fwd_sm80.cu.in").str(), Contains("{{banner}}"));
  CHECK_THAT(messageOf<InternalError>([] { templateText("nope.cu.in"); }),
             Contains("nope.cu.in"));
}

TEST_CASE("KernelSpec: head dims other than 64/128/192/256 are rejected",
          "[codegen][spec]") {
  std::string M = specError(spec(96, 128, GpuArch::Sm80));
  CHECK_THAT(M, Contains("head_dim 96"));
  CHECK_THAT(M, Contains("64, 128, 192 or 256"));
  CHECK_THAT(specError(spec(128, 32, GpuArch::Sm80)), Contains("head_dim_v 32"));
  for (int D : {64, 128, 192, 256})
    CHECK_NOTHROW(spec(D, 64, GpuArch::Sm80).validate());
}

TEST_CASE("KernelSpec: exactly the pairs of ForwardHeadDimPairs are accepted",
          "[codegen][spec]") {
  std::set<std::pair<int, int>> Table(std::begin(ForwardHeadDimPairs),
                                      std::end(ForwardHeadDimPairs));
  CHECK(Table.size() == std::size(ForwardHeadDimPairs));
  for (int D : {32, 64, 96, 128, 160, 192, 256, 320})
    for (int DV : {32, 64, 96, 128, 160, 192, 256, 320}) {
      INFO("d" << D << "/" << DV);
      bool Listed = Table.count({D, DV}) != 0;
      CHECK(forwardHeadDimError("fwd_sm80", D, DV).empty() == Listed);
      CHECK(forwardHeadDimError("fwd_sm90", D, DV).empty() == Listed);
      if (Listed)
        CHECK_NOTHROW(spec(D, DV, GpuArch::Sm90a, "m64n32w4s2").validate());
    }
}

/// The (D, DV) pairs ticked in the table under "### Supported head-dim
/// pairs" in docs/codegen.md: a header row of DV values, then one row per D.
std::set<std::pair<int, int>> docsHeadDimPairs() {
  auto Buf = llvm::MemoryBuffer::getFile(ATTNC_TEST_DOCS_DIR "/codegen.md");
  REQUIRE(Buf);
  llvm::SmallVector<llvm::StringRef, 0> Lines;
  llvm::SplitString((*Buf)->getBuffer(), Lines, "\n");
  auto Cells = [](llvm::StringRef Line) {
    llvm::SmallVector<llvm::StringRef, 8> Parts;
    Line.trim().trim('|').split(Parts, '|');
    std::vector<std::string> Out;
    for (llvm::StringRef P : Parts)
      Out.push_back(P.trim().str());
    return Out;
  };
  size_t I = 0;
  while (I < Lines.size() && Lines[I].trim() != "### Supported head-dim pairs")
    ++I;
  REQUIRE(I < Lines.size());
  while (I < Lines.size() && !Lines[I].startswith("|"))
    ++I;
  REQUIRE(I + 1 < Lines.size());
  std::vector<std::string> Header = Cells(Lines[I]);
  std::vector<int> DVs;
  for (size_t C = 1; C < Header.size(); ++C) {
    int V = 0;
    REQUIRE_FALSE(llvm::StringRef(Header[C]).getAsInteger(10, V));
    DVs.push_back(V);
  }
  std::set<std::pair<int, int>> Pairs;
  for (I += 2; I < Lines.size() && Lines[I].startswith("|"); ++I) {
    std::vector<std::string> Row = Cells(Lines[I]);
    REQUIRE(Row.size() == DVs.size() + 1);
    int D = 0;
    REQUIRE_FALSE(llvm::StringRef(Row[0]).getAsInteger(10, D));
    for (size_t C = 1; C < Row.size(); ++C) {
      INFO("docs cell d" << D << "/" << DVs[C - 1] << ": '" << Row[C] << "'");
      REQUIRE((Row[C] == "✓" || Row[C].empty() || Row[C] == "—"));
      if (Row[C] == "✓")
        Pairs.insert({D, DVs[C - 1]});
    }
  }
  return Pairs;
}

TEST_CASE("docs/codegen.md lists exactly the supported head-dim pairs",
          "[codegen][spec][docs]") {
  std::set<std::pair<int, int>> Table(std::begin(ForwardHeadDimPairs),
                                      std::end(ForwardHeadDimPairs));
  CHECK(docsHeadDimPairs() == Table);
}

TEST_CASE("GpuArch: names round-trip, an unknown name is rejected",
          "[codegen][spec]") {
  std::string M = messageOf<UserError>([] { parseArch("sm_70"); });
  CHECK_THAT(M, Contains("arch 'sm_70'"));
  CHECK_THAT(M, Contains("sm_80, sm_86, sm_89 or sm_90a"));
  CHECK_THAT(messageOf<UserError>([] { parseArch("sm_90", "--arch"); }),
             Contains("--arch 'sm_90'"));
  CHECK_FALSE(archFromName(""));
  for (GpuArch A : AllGpuArchs) {
    CHECK(parseArch(archName(A)) == A);
    CHECK_NOTHROW(spec(128, 128, A).validate());
  }
  // Which devices run which CUBIN: the same major, the minor or newer, and
  // the 'a' target only on 9.0.
  CHECK(archRunsOn(GpuArch::Sm80, 8, 6));
  CHECK_FALSE(archRunsOn(GpuArch::Sm86, 8, 0));
  CHECK_FALSE(archRunsOn(GpuArch::Sm80, 9, 0));
  CHECK_FALSE(archRunsOn(GpuArch::Sm90a, 10, 0));
  CHECK(archForDevice(8, 7) == GpuArch::Sm86);
  CHECK(archForDevice(9, 0) == GpuArch::Sm90a);
  CHECK_FALSE(archForDevice(7, 5));
}

TEST_CASE("FwdConfig::parse rejects text that is not m<M>n<N>w<W>s<S>",
          "[codegen][config]") {
  for (const char *Text :
       {"m64n64w4", "x", "", "m64n64w4s2x", " m64n64w4s2", "m064n64w4s2",
        "M64N64W4S2"}) {
    INFO("'" << Text << "'");
    std::string M = messageOf<UserError>([&] { FwdConfig::parse(Text); });
    CHECK_THAT(M, Contains("config '" + std::string(Text) + "'"));
    CHECK_THAT(M, Contains("expected m<block M>n<block N>w<warps>s<stages>"));
  }
}

TEST_CASE("FwdConfig: str and parse round-trip", "[codegen][config]") {
  CHECK(FwdConfig().str() == "m64n64w4s2");
  for (const char *Text : {"m64n64w4s2", "m128n64w8s2", "m64n128w4s3",
                           "m128n32w8s2", "m256n16w8s4"}) {
    FwdConfig C = FwdConfig::parse(Text);
    CHECK(C.str() == Text);
    FwdConfig D = FwdConfig::parse(C.str());
    CHECK((D.BlockM == C.BlockM && D.BlockN == C.BlockN &&
           D.Warps == C.Warps && D.Stages == C.Stages));
  }
  FwdConfig C = FwdConfig::parse("m128n32w8s3");
  CHECK(C.BlockM == 128);
  CHECK(C.BlockN == 32);
  CHECK(C.Warps == 8);
  CHECK(C.Stages == 3);
}

TEST_CASE("KernelSpec: warps other than 4 or 8 are rejected",
          "[codegen][config]") {
  KernelSpec S = spec(128, 128, GpuArch::Sm80);
  S.Config = config(96, 64, 6, 2);
  CHECK_THAT(specError(S), Contains("config m96n64w6s2: warps must be 4 or 8"));
}

TEST_CASE("KernelSpec: block M must be a multiple of 16 x warps",
          "[codegen][config]") {
  KernelSpec S = spec(128, 128, GpuArch::Sm80, "m64n64w8s2");
  CHECK_THAT(specError(S), Contains("block M must be a multiple of 16 x warps "
                                    "(128)"));
  S.Config = config(80, 64, 4, 2);
  CHECK_THAT(specError(S), Contains("multiple of 16 x warps (64)"));
  S.Config = config(128, 64, 8, 2);
  CHECK_NOTHROW(S.validate());
}

// Block M must be at least one m16 tile per warp; 0 or less is refused.
TEST_CASE("KernelSpec: block M of 0 or less is rejected",
          "[codegen][config]") {
  for (const char *Text : {"m0n64w4s2", "m-64n64w4s2"}) {
    INFO(Text);
    KernelSpec S = spec(128, 128, GpuArch::Sm80, Text);
    CHECK_THAT(specError(S), Contains("block M"));
  }
}

TEST_CASE("KernelSpec: block N must be a multiple of 16 in [16, 256]",
          "[codegen][config]") {
  KernelSpec S = spec(64, 64, GpuArch::Sm80);
  for (int N : {8, 24, 0, 272}) {
    S.Config = config(64, N, 4, 2);
    INFO(S.Config.str());
    CHECK_THAT(specError(S), Contains("block N must be a multiple of 16"));
  }
}

TEST_CASE("KernelSpec: stages outside 2..4 are rejected", "[codegen][config]") {
  KernelSpec S = spec(64, 64, GpuArch::Sm80, "m64n64w4s5");
  CHECK_THAT(specError(S), Contains("stages must be 2, 3 or 4"));
  S.Config = config(64, 64, 4, 1);
  CHECK_THAT(specError(S), Contains("stages must be 2, 3 or 4"));
}

TEST_CASE("KernelSpec: a config needing more shared memory than the arch",
          "[codegen][config]") {
  std::string M = specError(spec(256, 256, GpuArch::Sm86, "m128n128w8s4"));
  CHECK_THAT(M, Contains("shared memory"));
  CHECK_THAT(M, Contains("589824 bytes"));
  CHECK_THAT(M, Contains("sm_86 has 101376"));
  // The default config at d256 fits sm_80 (160 KiB of 163) but not sm_86.
  CHECK_NOTHROW(spec(256, 256, GpuArch::Sm80).validate());
  CHECK_THAT(specError(spec(256, 256, GpuArch::Sm86)), Contains("shared memory"));
  CHECK_THAT(specError(spec(256, 256, GpuArch::Sm89)), Contains("shared memory"));
  // m64n128w4s3 at d128 (208 KiB) fits only Hopper's 227 KiB.
  CHECK_THAT(specError(spec(128, 128, GpuArch::Sm80, "m64n128w4s3")),
             Contains("sm_80 has 166912"));
  CHECK_NOTHROW(spec(128, 128, GpuArch::Sm90a, "m64n128w4s3").validate());
}

TEST_CASE("FwdConfig::sharedBytes: Q tile plus the K/V ring in 16-bit",
          "[codegen][config]") {
  // 2 bytes * (BlockM*D + Stages*BlockN*(D + DV))
  CHECK(FwdConfig().sharedBytes(128, 128) == 2 * (64 * 128 + 2 * 64 * 256));
  CHECK(FwdConfig().sharedBytes(128, 128) == 81920);
  CHECK(FwdConfig::parse("m128n32w8s3").sharedBytes(64, 128) == 53248);
  CHECK(FwdConfig::parse("m128n128w8s4").sharedBytes(256, 256) == 589824);
}
