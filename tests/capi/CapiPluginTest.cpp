// attnc_plugin_load's refusals through the C interface: each names the
// file, and the symbol that is missing or unresolved; a library whose
// symbols the loader cannot resolve is refused when it is loaded, not run
// (the process survives it).
#include "attnc/attnc_c_dsl.h"

#include "CapiTestSupport.h"

#include <catch2/catch.hpp>

using namespace capitest;
using Catch::Matchers::Contains;

TEST_CASE("plugin load: a library without the entry point", "[capi]") {
  attnc_definition_list *L = nullptr;
  CHECK(attnc_plugin_load(ATTNC_TEST_NOT_A_PLUGIN, &L) == ATTNC_USER_ERROR);
  CHECK(L == nullptr);
  CHECK_THAT(lastError(),
             Contains(std::string("plugin '") + ATTNC_TEST_NOT_A_PLUGIN +
                      "': it has no attnc_plugin_graphs_v1 function"));
}

TEST_CASE("plugin load: a file that cannot be loaded", "[capi]") {
  attnc_definition_list *L = nullptr;
  CHECK(attnc_plugin_load("/nonexistent/plugin.so", &L) == ATTNC_USER_ERROR);
  CHECK_THAT(lastError(), Contains("plugin '/nonexistent/plugin.so': cannot "
                                   "load it: /nonexistent/plugin.so"));
  CHECK(attnc_plugin_load(nullptr, &L) != ATTNC_OK);
  CHECK_THAT(lastError(), Contains("path"));
}

TEST_CASE("plugin load: an unresolved symbol is refused at load time",
          "[capi]") {
  // Loaded lazily, this plugin would load and then kill the process at
  // its entry point's first call ("symbol lookup error").
  attnc_definition_list *L = nullptr;
  CHECK(attnc_plugin_load(ATTNC_TEST_PLUGIN_UNRESOLVED, &L) ==
        ATTNC_USER_ERROR);
  CHECK(L == nullptr);
  CHECK_THAT(lastError(), Contains(std::string("plugin '") +
                                   ATTNC_TEST_PLUGIN_UNRESOLVED +
                                   "': cannot load it: "));
  CHECK_THAT(lastError(),
             Contains("undefined symbol: attnc_test_function_nobody_defines"));
}
