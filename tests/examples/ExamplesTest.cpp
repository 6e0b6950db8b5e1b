// Every registered example compiles and passes reference::check.
#include "ExampleRegistry.h"
#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/reference/Checker.h"

#include <catch2/catch.hpp>

using namespace attn;

using attn::testsupport::exampleNames;
using attn::testsupport::registry;

TEST_CASE("the fifteen examples are registered with a description",
          "[examples]") {
  REQUIRE(exampleNames().size() == 15);
  for (const dsl::DefinitionBase *D : registry().all()) {
    INFO(D->name);
    CHECK_FALSE(D->description.empty());
  }
  CHECK(registry().get("mha").kind() == ir::DefinitionKind::Transformer);
  CHECK(registry().get("mamba2").kind() == ir::DefinitionKind::Linear);
}

TEST_CASE("each example compiles and passes the reference check",
          "[examples]") {
  std::string Name = GENERATE(from_range(exampleNames()));
  INFO(Name);
  const dsl::DefinitionBase &Def = registry().get(Name);
  CompiledDefinition C;
  REQUIRE_NOTHROW(C = compile(Def));
  REQUIRE(C.Graph);
  CHECK(C.Graph->name() == Name);
  CHECK(C.Graph->decls().Kind == Def.kind());
  reference::CheckReport R = reference::check(C);
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  reference::printReport(R, OS);
  INFO(OS.str());
  CHECK(R.passed());
  CHECK(OS.str().find("all checks passed") != std::string::npos);
}

TEST_CASE("the examples' analysis facts", "[examples]") {
  // What later stages rely on: softmax's backward needs doosum, the
  // identity online functions never rescale, mamba2 ignores the decay input.
  CHECK(compile(registry().get("mha")).Info.BackwardUsesDoosum);
  CHECK(compile(registry().get("retention")).Info.BackwardUsesDoosum);
  CHECK_FALSE(compile(registry().get("sigmoid_attn")).Info.BackwardUsesDoosum);
  CHECK(compile(registry().get("relu_attn")).Info.OScaleIsOne);
  CHECK_FALSE(compile(registry().get("mha")).Info.OScaleIsOne);
  CHECK_FALSE(compile(registry().get("mamba2")).Info.UsesDecayInput);
  CHECK(compile(registry().get("simple_gla")).Info.UsesDecayInput);
  CHECK_FALSE(compile(registry().get("retention_linear")).Info.UsesDecayInput);
}
