// The 0/1 measurement switches (EnvSwitch.h): unset or empty means "not
// forced", 0 and 1 force, anything else is a UserError naming the variable,
// its value and both meanings; ATTNC_DECODE_PDL and ATTNC_DECODE_LAST_CTA
// through the decode merge's launch rules. No GPU.
#include "EnvSwitch.h"
#include "LinearBackwardRunner.h"
#include "PagedDecode.h"

#include "attn/Error.h"

#include <catch2/catch.hpp>

#include <cstdlib>

using namespace attn;

TEST_CASE("envSwitch: unset, empty, 0, 1 and a bad value", "[runtime]") {
  const char *Name = "ATTNC_TEST_SWITCH";
  auto Read = [&] { return runtime::envSwitch(Name, "off path", "on path"); };
  REQUIRE(unsetenv(Name) == 0);
  CHECK_FALSE(Read().has_value());
  REQUIRE(setenv(Name, "", 1) == 0);
  CHECK_FALSE(Read().has_value());
  REQUIRE(setenv(Name, "0", 1) == 0);
  REQUIRE(Read().has_value());
  CHECK_FALSE(*Read());
  REQUIRE(setenv(Name, "1", 1) == 0);
  REQUIRE(Read().has_value());
  CHECK(*Read());
  for (const char *Bad : {"yes", "2", "01", " 1", "true"}) {
    REQUIRE(setenv(Name, Bad, 1) == 0);
    CHECK_THROWS_AS(Read(), UserError);
    CHECK_THROWS_WITH(Read(), "ATTNC_TEST_SWITCH='" + std::string(Bad) +
                                  "': expected 0 (off path) or 1 (on path)");
  }
  REQUIRE(unsetenv(Name) == 0);
}

TEST_CASE("ATTNC_DECODE_PDL: a bad value is refused, unset means the "
          "dependent launch on sm_90a only",
          "[runtime][decode]") {
  // The rule is read once a process (the launch path does no lookups), so
  // the bad value comes first: a throwing read leaves it unread.
  REQUIRE(setenv("ATTNC_DECODE_PDL", "on", 1) == 0);
  CHECK_THROWS_AS(runtime::decodeMergeDependent(GpuArch::Sm90a), UserError);
  CHECK_THROWS_WITH(runtime::decodeMergeDependent(GpuArch::Sm90a),
                    Catch::Contains("ATTNC_DECODE_PDL='on': expected 0 (the "
                                    "merge launched after the split kernel)"));
  REQUIRE(unsetenv("ATTNC_DECODE_PDL") == 0);
  CHECK(runtime::decodeMergeDependent(GpuArch::Sm90a));
  CHECK_FALSE(runtime::decodeMergeDependent(GpuArch::Sm80));
}

TEST_CASE("ATTNC_DECODE_LAST_CTA: a bad value is refused, unset means the "
          "merge kernel",
          "[runtime][decode]") {
  // Read once a process, like ATTNC_DECODE_PDL: the bad value first.
  REQUIRE(setenv("ATTNC_DECODE_LAST_CTA", "yes", 1) == 0);
  CHECK_THROWS_AS(runtime::decodeMergeInSplits(), UserError);
  CHECK_THROWS_WITH(runtime::decodeMergeInSplits(),
                    Catch::Contains("ATTNC_DECODE_LAST_CTA='yes': expected 0 (the "
                                    "splits merged by the merge kernel)"));
  REQUIRE(unsetenv("ATTNC_DECODE_LAST_CTA") == 0);
  CHECK_FALSE(runtime::decodeMergeInSplits());
}

TEST_CASE("ATTNC_LINEAR_PAIRS: state pairs unless 0; another value refused",
          "[runtime][linear]") {
  REQUIRE(unsetenv("ATTNC_LINEAR_PAIRS") == 0);
  CHECK(runtime::linearStatePairsAllowed());
  REQUIRE(setenv("ATTNC_LINEAR_PAIRS", "0", 1) == 0);
  CHECK_FALSE(runtime::linearStatePairsAllowed());
  REQUIRE(setenv("ATTNC_LINEAR_PAIRS", "1", 1) == 0);
  CHECK(runtime::linearStatePairsAllowed());
  REQUIRE(setenv("ATTNC_LINEAR_PAIRS", "off", 1) == 0);
  CHECK_THROWS_AS(runtime::linearStatePairsAllowed(), UserError);
  CHECK_THROWS_WITH(runtime::linearStatePairsAllowed(),
                    "ATTNC_LINEAR_PAIRS='off': expected 0 (every chunk's states "
                    "written) or 1 (state pairs where the kernels have them)");
  REQUIRE(unsetenv("ATTNC_LINEAR_PAIRS") == 0);
}
