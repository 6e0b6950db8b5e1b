// The C interface's block masks: made from an attention's mask, refreshed,
// or given as lists, then passed to the _masked forward and backward calls.
#include "RuntimeArgs.h"

#include "MaskClassify.h"

#include "attn/Error.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <cstring>

using namespace attn;
using namespace attn::capi;

namespace {

[[noreturn]] void bad(const ArgContext &C, const std::string &Argument,
                      const std::string &What) {
  throw InvalidArgument(
      fmt::format("{}: argument '{}': {}", C.Function, Argument, What));
}

runtime::Attention &attentionArg(const ArgContext &C, attnc_attention *A) {
  if (!A)
    bad(C, "att", "is NULL");
  return *A->Att;
}

runtime::MaskShape shapeArg(const ArgContext &C, const attnc_mask_shape *S) {
  if (!S)
    bad(C, "shape", "is NULL");
  runtime::MaskShape M;
  M.Batch = S->batch;
  M.Heads = S->heads;
  M.SeqQ = S->seq_q;
  M.SeqKv = S->seq_kv;
  M.HeadsKv = S->heads_kv;
  return M;
}

/// One list of \p L: \p Len int32 values at \p Data, which may be NULL only
/// when \p Len is 0.
std::vector<int32_t> listArg(const ArgContext &C, const char *Field,
                             const int32_t *Data, size_t Len) {
  if (!Data && Len)
    bad(C, fmt::format("lists.{}", Field),
        fmt::format("is NULL with length {}", Len));
  return Data ? std::vector<int32_t>(Data, Data + Len)
              : std::vector<int32_t>();
}

runtime::BlockLists listsArg(const ArgContext &C,
                             const attnc_block_lists *L) {
  if (!L)
    bad(C, "lists", "is NULL");
  runtime::BlockLists Out;
  Out.Batch = L->batch;
  Out.Heads = L->heads;
  Out.BlockQ = L->block_q;
  Out.BlockKv = L->block_kv;
  Out.KvNumBlocks =
      listArg(C, "kv_num_blocks", L->kv_num_blocks, L->kv_num_blocks_len);
  Out.KvIndices = listArg(C, "kv_indices", L->kv_indices, L->kv_indices_len);
  Out.FullKvNumBlocks =
      listArg(C, "full_kv_num_blocks", L->full_kv_num_blocks,
              L->full_kv_num_blocks_len);
  Out.FullKvIndices = listArg(C, "full_kv_indices", L->full_kv_indices,
                              L->full_kv_indices_len);
  return Out;
}

/// Runs \p Body, adding to the runtime's InvalidArgument the function and
/// the C argument its message is about: 'shape' ("block mask shape: ..."),
/// 'lists' ("block lists: ...", with the C struct's field name beside the
/// C++ one) or 'inputs' (checkInputs' "input '<name>': ..."); others get
/// the function's name only.
template <typename F> auto namingArgument(const ArgContext &C, F &&Body) {
  try {
    return Body();
  } catch (const InvalidArgument &E) {
    std::string Msg = E.what();
    if (Msg.rfind("block mask shape:", 0) == 0)
      bad(C, "shape", Msg);
    if (Msg.rfind("input", 0) == 0)
      bad(C, "inputs", Msg);
    if (Msg.rfind("block lists:", 0) != 0)
      throw InvalidArgument(fmt::format("{}: {}", C.Function, Msg));
    static const std::pair<const char *, const char *> Fields[] = {
        {"FullKvNumBlocks", "full_kv_num_blocks"},
        {"FullKvIndices", "full_kv_indices"},
        {"KvNumBlocks", "kv_num_blocks"},
        {"KvIndices", "kv_indices"}};
    // Every field named, left to right (a Full name before its suffix).
    std::string Out;
    for (size_t I = 0; I < Msg.size();) {
      bool Named = false;
      for (const auto &[Cxx, CName] : Fields) {
        const size_t Len = std::strlen(Cxx);
        if (Msg.compare(I, Len, Cxx) == 0) {
          Out += fmt::format("{} ({})", Cxx, CName);
          I += Len;
          Named = true;
          break;
        }
      }
      if (!Named)
        Out += Msg[I++];
    }
    bad(C, "lists", Out);
  }
}

/// Hands \p M to the caller as a new handle in \p Out.
void handOut(runtime::BlockMask M, attnc_block_mask **Out) {
  auto Made = std::make_unique<attnc_block_mask>();
  Made->Mask = std::move(M);
  *Out = Made.release();
}

} // namespace

attnc_status attnc_block_mask_make(attnc_attention *att,
                                   const attnc_mask_shape *shape,
                                   const attnc_input *inputs,
                                   size_t num_inputs, int32_t for_backward,
                                   void *stream, attnc_block_mask **out) {
  return guarded([&] {
    ArgContext C{"attnc_block_mask_make"};
    requireNonNull(out, C.Function, "out");
    *out = nullptr;
    runtime::Attention &A = attentionArg(C, att);
    runtime::MaskShape S = shapeArg(C, shape);
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    handOut(namingArgument(C,
                           [&] {
                             return A.makeBlockMask(
                                 S, In, static_cast<CUstream>(stream),
                                 for_backward != 0);
                           }),
            out);
  });
}

attnc_status attnc_block_mask_refresh(attnc_attention *att,
                                      attnc_block_mask *mask,
                                      const attnc_input *inputs,
                                      size_t num_inputs, void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_block_mask_refresh"};
    runtime::Attention &A = attentionArg(C, att);
    if (!mask)
      bad(C, "mask", "is NULL");
    runtime::InputMap In = inputsArg(C, inputs, num_inputs);
    A.refreshBlockMask(mask->Mask, In, static_cast<CUstream>(stream));
  });
}

attnc_status attnc_block_mask_from_lists(attnc_attention *att,
                                         const attnc_mask_shape *shape,
                                         const attnc_block_lists *lists,
                                         int32_t for_backward,
                                         attnc_block_mask **out) {
  return guarded([&] {
    ArgContext C{"attnc_block_mask_from_lists"};
    requireNonNull(out, C.Function, "out");
    *out = nullptr;
    runtime::Attention &A = attentionArg(C, att);
    runtime::MaskShape S = shapeArg(C, shape);
    runtime::BlockLists L = listsArg(C, lists);
    handOut(namingArgument(
                C,
                [&] { return A.blockMaskFromLists(S, L, for_backward != 0); }),
            out);
  });
}

attnc_status attnc_block_mask_info(const attnc_block_mask *mask,
                                   attnc_mask_shape *shape,
                                   int32_t *for_backward) {
  return guarded([&] {
    ArgContext C{"attnc_block_mask_info"};
    if (!mask)
      bad(C, "mask", "is NULL");
    requireNonNull(shape, C.Function, "shape");
    const runtime::MaskShape &S = mask->Mask.shape();
    *shape = attnc_mask_shape{S.Batch, S.Heads, S.SeqQ, S.SeqKv, S.HeadsKv};
    if (for_backward)
      *for_backward = mask->Mask.forBackward() ? 1 : 0;
  });
}

void attnc_block_mask_release(attnc_block_mask *mask) { delete mask; }

attnc_status attnc_block_classify_launches(uint64_t *count) {
  return guarded([&] {
    requireNonNull(count, "attnc_block_classify_launches", "count");
    *count = runtime::classifyLaunches();
  });
}
