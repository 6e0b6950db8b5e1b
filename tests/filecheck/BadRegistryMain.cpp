// A program on attnc_main, as docs/dsl.md shows one, whose definitions are
// wrong in the way BAD_REGISTRY names: "duplicate" (mha registered twice) or
// "input-twice" (a custom input declared twice).
#include "AttncMain.h"
#include "Examples.h"

#include "attn/dsl/Definition.h"

#include <cstdlib>
#include <string>

static void registerBadDefinitions(attn::dsl::Registry &R) {
  const char *Fault = std::getenv("BAD_REGISTRY");
  std::string Kind = Fault ? Fault : "";
  attn::examples::registerExamples(R);
  if (Kind == "duplicate")
    R.add(attn::examples::mha());
  if (Kind == "input-twice") {
    attn::dsl::AttentionDef Def = attn::examples::mha();
    Def.name = "twice";
    Def.inputs.declare("bias", attn::dsl::InputShape::Scalar, 0, 1);
    Def.inputs.declare("bias", attn::dsl::InputShape::Scalar, 0, 1);
    R.add(Def);
  }
}

int main(int Argc, char **Argv) {
  return attn::attncMain(Argc, Argv, registerBadDefinitions);
}
