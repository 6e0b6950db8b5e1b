// attnc: the command-line tool over the shipped example definitions.
#include "AttncMain.h"
#include "Examples.h"

int main(int Argc, char **Argv) {
  attn::dsl::Registry Registry;
  attn::examples::registerExamples(Registry);
  return attn::attncMain(Argc, Argv, Registry);
}
