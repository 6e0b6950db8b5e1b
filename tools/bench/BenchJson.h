// Bench results as JSON lines: every timed row a bench (and `attnc bench`)
// prints is also appended to $ATTNC_BENCH_JSON when it is set, for
// tools/bench/plot.py.
#ifndef ATTN_TOOLS_BENCH_BENCHJSON_H
#define ATTN_TOOLS_BENCH_BENCHJSON_H

#include "attn/runtime/CudaDriver.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace attn::bench {

/// One timed result. The fields are plot.py's (tools/bench/results.py's
/// Python twin writes the same keys).
struct BenchRow {
  std::string Bench;   ///< "fwd", "bwd", ...
  std::string Impl;    ///< "attnc", or the peer's name
  std::string Variant; ///< "mha", "mha_full", ...
  std::string Dtype;   ///< "f16", "bf16"
  std::string Mask;    ///< "causal", "full", ...
  std::string Config;  ///< the kernel's configuration or key ("" for peers)
  int64_t B = 0, H = 0, S = 0, D = 0, DV = 0;
  double Ms = 0, Tflops = 0;
  /// The memory-bound benches' rate (decode, linear attention): GB/s of
  /// the bytes they must move; 0 when not measured (then not written).
  double Gbps = 0;
};

/// A JSON string literal of \p S (names and keys: no control characters
/// expected, but quotes and backslashes are escaped anyway).
inline std::string jsonString(const std::string &S) {
  std::string Out = "\"";
  for (char C : S) {
    if (C == '"' || C == '\\')
      Out += '\\';
    if (static_cast<unsigned char>(C) < 0x20)
      continue;
    Out += C;
  }
  return Out + "\"";
}

/// \p R as one JSON line (with its newline), measured on \p Card on
/// \p Date ("2026-11-27"). "gbps" is written only for a row that has it.
inline std::string benchRowJson(const BenchRow &R, const std::string &Card,
                                const std::string &Date) {
  std::string Rate = fmt::format("\"tflops\": {:.2f}", R.Tflops);
  if (R.Gbps > 0)
    Rate += fmt::format(", \"gbps\": {:.1f}", R.Gbps);
  return fmt::format(
      "{{\"bench\": {}, \"impl\": {}, \"variant\": {}, \"dtype\": {}, "
      "\"mask\": {}, \"config\": {}, \"B\": {}, \"H\": {}, \"S\": {}, "
      "\"D\": {}, \"DV\": {}, \"ms\": {:.4f}, {}, \"card\": {}, "
      "\"date\": {}}}\n",
      jsonString(R.Bench), jsonString(R.Impl), jsonString(R.Variant),
      jsonString(R.Dtype), jsonString(R.Mask), jsonString(R.Config), R.B, R.H,
      R.S, R.D, R.DV, R.Ms, Rate, jsonString(Card), jsonString(Date));
}

/// Appends \p R, with the device's name and today's date, to
/// $ATTNC_BENCH_JSON; nothing when the variable is unset.
inline void recordBenchRow(const BenchRow &R) {
  const char *Path = std::getenv("ATTNC_BENCH_JSON");
  if (!Path || !*Path)
    return;
  std::FILE *F = std::fopen(Path, "a");
  if (!F) {
    std::fprintf(stderr, "ATTNC_BENCH_JSON: cannot open %s\n", Path);
    return;
  }
  char Date[16];
  std::time_t Now = std::time(nullptr);
  std::strftime(Date, sizeof Date, "%Y-%m-%d", std::gmtime(&Now));
  std::fputs(benchRowJson(R, runtime::currentDevice().Name, Date).c_str(), F);
  std::fclose(F);
}

} // namespace attn::bench

#endif
