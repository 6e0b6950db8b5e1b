// attnc: the command-line tool over the shipped example definitions.
#include "AttncMain.h"
#include "Examples.h"

int main(int Argc, char **Argv) {
  // Registering inside attncMain reports a bad definition as an error
  // (exit status 1) rather than letting the exception escape main.
  return attn::attncMain(Argc, Argv, attn::examples::registerExamples);
}
