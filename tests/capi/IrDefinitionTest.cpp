// Definitions without a DefinitionBase (IR JSON files, plugins) make the
// same runtime objects as the definitions they came from.
#include "CapiInternal.h"
#include "attnc/attnc_c_dsl.h"

#include "TempDir.h"

#include "attn/ir/Serialize.h"

#include <catch2/catch.hpp>

#include <cstdlib>

using namespace attn;
using Catch::Matchers::Contains;

namespace {

void useTempCache() {
  static const attn::testing::TempDir Dir("attnc-capi-cache");
  static const bool Set = setenv("ATTNC_CACHE_DIR", Dir.Path.c_str(), 1) == 0;
  REQUIRE(Set);
}

/// The example \p Name and its final graph as an IR JSON definition.
struct Pair {
  attnc_definition *Example = nullptr, *Ir = nullptr;
  explicit Pair(const char *Name) {
    REQUIRE(attnc_definition_from_example(Name, &Example) == ATTNC_OK);
    std::string Json = ir::saveJSON(*capi::compileDefinition(*Example).Graph);
    REQUIRE(attnc_definition_from_ir_json(Json.c_str(), &Ir) == ATTNC_OK);
  }
  ~Pair() {
    attnc_definition_release(Example);
    attnc_definition_release(Ir);
  }
};

} // namespace

TEST_CASE("an IR JSON definition has a graph, a name and a kind") {
  Pair P("mamba2");
  CHECK(P.Ir->Def == nullptr);
  CHECK(std::string(attnc_definition_name(P.Ir)) == "mamba2");
  CHECK(capi::definitionKind(*P.Ir) == ir::DefinitionKind::Linear);
}

TEST_CASE("an IR JSON definition makes the example's attention kernel") {
  useTempCache();
  Pair P("relu_attn");
  runtime::Signature Sig;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.Arch = GpuArch::Sm80;
  auto A = capi::newAttention(*P.Example, Sig);
  auto B = capi::newAttention(*P.Ir, Sig);
  CHECK(B->source().Key == A->source().Key);
  CHECK(B->source().Source == A->source().Source);
  runtime::LinearSignature L;
  L.HeadDim = L.HeadDimV = 64;
  L.Arch = GpuArch::Sm80;
  CHECK_THROWS_WITH(capi::newLinearAttention(*P.Ir, L),
                    Contains("'relu_attn' is not linear attention"));
}

TEST_CASE("an IR JSON definition makes the example's linear kernel") {
  useTempCache();
  Pair P("simple_gla");
  runtime::LinearSignature L;
  L.HeadDim = L.HeadDimV = 64;
  L.Arch = GpuArch::Sm80;
  auto A = capi::newLinearAttention(*P.Example, L);
  auto B = capi::newLinearAttention(*P.Ir, L);
  CHECK(B->forwardSource().Source == A->forwardSource().Source);
  runtime::Signature Sig;
  Sig.Arch = GpuArch::Sm80;
  CHECK_THROWS_WITH(capi::newAttention(*P.Ir, Sig),
                    Contains("'simple_gla' is linear attention; use "
                             "LinearAttention"));
}
