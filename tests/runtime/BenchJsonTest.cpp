// Bench JSON lines (tools/bench/BenchJson.h): the keys tools/bench/plot.py
// reads, and GB/s only on the rows of the memory-bound benches.
#include "BenchJson.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace attn::bench;

TEST_CASE("bench rows: one JSON line with plot.py's keys", "[bench]") {
  BenchRow R{"fwd", "attnc", "mha", "bf16", "causal", "fwd_sm90 \"x\"",
             4, 32, 4096, 128, 128, 1.23456, 612.345};
  std::string Line = benchRowJson(R, "NVIDIA H100", "2026-11-27");
  REQUIRE(Line.back() == '\n');
  CHECK(Line.find('\n') == Line.size() - 1);
  nlohmann::json J = nlohmann::json::parse(Line);
  CHECK(J["bench"] == "fwd");
  CHECK(J["config"] == "fwd_sm90 \"x\"");
  CHECK(J["S"] == 4096);
  CHECK(J["DV"] == 128);
  CHECK(J["ms"] == Approx(1.2346));
  CHECK(J["tflops"] == Approx(612.35));
  CHECK(J["card"] == "NVIDIA H100");
  CHECK(J["date"] == "2026-11-27");
  CHECK_FALSE(J.contains("gbps"));
}

TEST_CASE("bench rows: the memory-bound benches add gbps", "[bench]") {
  BenchRow R{"decode", "attnc", "mha", "f16", "paged16", "decode_sm80",
             8, 32, 8192, 128, 128, 0.05, 0};
  R.Gbps = 2901.26;
  nlohmann::json J = nlohmann::json::parse(benchRowJson(R, "H200", "d"));
  CHECK(J["gbps"] == Approx(2901.3));
  CHECK(J["tflops"] == 0);
}
