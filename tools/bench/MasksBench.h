// Shared by attnc_bench_masks' two files: the masked mha definitions and
// the packed (varlen) rows, which live in attnc_bench_masks_varlen.cpp.
#ifndef ATTNC_TOOLS_BENCH_MASKSBENCH_H
#define ATTNC_TOOLS_BENCH_MASKSBENCH_H

#include "attn/dsl/Definition.h"
#include "attn/dsl/Problem.h"

#include <string>

namespace attn::masksbench {

/// The sliding window's keys and the chunk's tokens of the bench's masks.
constexpr int Window = 256;
constexpr int Chunk = 256;

/// mha (online softmax, 1/sqrt(D) scale) under the mask \p Name (document,
/// prefix_lm, causal, window256, chunked256); UserError for another name.
dsl::AttentionDef maskedMha(const std::string &Name);

/// The kernels benchOne's calls use on sm_90a, compiled into the cache
/// (\p FwdOnly: the forward's alone).
void compileOne(const std::string &Mask, DType T, int D, bool FwdOnly);

/// The lengths of the varlen rows, for peers_masks.py --varlen.
void printVarlenLengths(int MaxLen);

/// What is wrong with the varlen rows' environment settings, or "".
std::string varlenSettingsError();

/// Varlen rows: a packed batch against dense attention of the same total
/// tokens under \p Mask (none, causal, window256, chunked256).
void benchVarlen(const std::string &Mask, DType T, int H, int D, int MaxLen);

/// The kernels benchVarlen's calls use on sm_90a, compiled into the cache.
void compileVarlen(const std::string &Mask, DType T, int D);

} // namespace attn::masksbench

#endif
