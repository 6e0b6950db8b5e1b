// The C interface's merge of partial attention results (shards of the
// keys: a ring over GPUs, a prefix cache and new tokens), by the rule the
// analysis derives from the definition's online function.
#include "RuntimeArgs.h"

#include "attn/Error.h"
#include "attn/analysis/Merge.h"
#include "attn/runtime/Paged.h"

using namespace attn;
using namespace attn::capi;

namespace {

/// The result merge of \p A's definition (analysed once per handle: the
/// reason's C string lives in the handle).
const analysis::ResultMergeInfo &resultMerge(attnc_attention &A) {
  if (!A.Merge)
    A.Merge = analysis::analyzeResultMerge(*A.Att->definition().Graph);
  return *A.Merge;
}

} // namespace

attnc_status attnc_attention_merge_kind(attnc_attention *att, int32_t *kind,
                                        const char **reason) {
  return guarded([&] {
    ArgContext C{"attnc_attention_merge_kind"};
    handleArg(C, att);
    requireNonNull(kind, C.Function, "kind");
    const analysis::ResultMergeInfo &M = resultMerge(*att);
    switch (M.Kind) {
    case analysis::MergeKind::None:
      *kind = ATTNC_MERGE_NONE;
      break;
    case analysis::MergeKind::Sum:
      *kind = ATTNC_MERGE_SUM;
      break;
    case analysis::MergeKind::LogSumExp:
      *kind = ATTNC_MERGE_LOG_SUM_EXP;
      break;
    case analysis::MergeKind::Combine:
      *kind = ATTNC_MERGE_COMBINE;
      break;
    }
    if (reason)
      *reason = M.Reason.c_str();
  });
}

attnc_status attnc_attention_merge_results(
    attnc_attention *att, const attnc_tensor *part_outs,
    const attnc_tensor *part_finals, size_t num_parts, const attnc_tensor *out,
    const attnc_tensor *finals, void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_merge_results"};
    runtime::Attention &A = handleArg(C, att);
    requireNonNull(part_outs, C.Function, "part_outs");
    // The count is checked before the arrays are read: a wrong one must not
    // read past them.
    if (num_parts < 2 || num_parts > 8)
      throw InvalidArgument(fmt::format(
          "{}: argument 'num_parts': {}; expected 2 to 8 partial results",
          C.Function, num_parts));
    std::vector<runtime::TensorView> Outs, Finals;
    for (size_t I = 0; I < num_parts; ++I) {
      std::string Name = fmt::format("part_outs[{}]", I);
      Outs.push_back(tensorArg(C, Name.c_str(), &part_outs[I]));
    }
    if (part_finals)
      for (size_t I = 0; I < num_parts; ++I) {
        std::string Name = fmt::format("part_finals[{}]", I);
        Finals.push_back(tensorArg(C, Name.c_str(), &part_finals[I]));
      }
    runtime::TensorView O = tensorArg(C, "out", out);
    auto F = optionalTensorArg(C, "finals", finals);
    std::vector<runtime::PartialResult> Parts(num_parts);
    for (size_t I = 0; I < num_parts; ++I) {
      Parts[I].Out = Outs[I];
      Parts[I].Finals = part_finals ? &Finals[I] : nullptr;
    }
    A.mergeResults(Parts, O, ptr(F), static_cast<CUstream>(stream));
  });
}
