// Kernel arguments from validated tensors and custom inputs.
#include "ForwardLaunch.h"

#include "attn/analysis/MaskBounds.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/InputLayout.h"
#include "../kernels/int_div.cuh"

#include <cstring>

namespace attn::runtime {

static uint64_t bitsOf(const void *P) { return reinterpret_cast<uintptr_t>(P); }

std::vector<uint64_t> inputSlots(const ir::Graph &G, const CallShape &C,
                                 const InputMap &Inputs) {
  codegen::InputLayout Layout = codegen::inputLayout(G);
  std::vector<uint64_t> Slots(Layout.TotalSlots, 0);
  for (const codegen::InputSlots &S : Layout.Inputs) {
    const InputValue &Val = Inputs.at(S.Name);
    uint64_t *Slot = &Slots[S.First];
    if (S.Shape == ir::InputShape::Scalar) {
      // The low 4 bytes hold the value, as the generated field's type reads
      // it (validation matched the variant to the declared type); an int's
      // high 4 its floordiv multiplier (int_div.cuh), which the generated
      // code reads where the int divides.
      if (const int32_t *I = std::get_if<int32_t>(&Val)) {
        const uint64_t Multiplier = attnc::int_div_multiplier(*I);
        *Slot = uint64_t(uint32_t(*I)) | (Multiplier << 32);
      } else {
        float F = std::get<float>(Val);
        std::memcpy(Slot, &F, sizeof F);
      }
      continue;
    }
    const TensorView &V = std::get<TensorView>(Val);
    Slot[0] = bitsOf(V.Data);
    if (C.Packed && S.Shape != ir::InputShape::PerHead) {
      // A packed call's [H, tokens] and [tokens] inputs (validated: no full
      // input): no batch stride (b is the sequence; the kernels rebase the
      // pointers per sequence, Inputs::of_sequence), the token count as the
      // bound, the row shift 0 until then.
      const bool HeadAxis = V.Shape.size() == 2; // per_row, per_key
      Slot[1] = 0;
      Slot[2] = HeadAxis ? uint64_t(V.Strides[0]) : 0;
      Slot[4] = uint64_t(V.Shape.back());
      continue;
    }
    switch (S.Shape) {
    case ir::InputShape::Scalar:
    case ir::InputShape::PerHead:
      Slot[4] = uint64_t(C.H);
      break;
    case ir::InputShape::PerRow:
    case ir::InputShape::PerKey:
      Slot[1] = uint64_t(V.Strides[0]);
      Slot[2] = uint64_t(V.Strides[1]);
      Slot[4] = uint64_t(V.Shape[2]);
      break;
    case ir::InputShape::Full:
      Slot[1] = uint64_t(V.Strides[0]);
      Slot[2] = uint64_t(V.Strides[1]);
      Slot[3] = uint64_t(V.Strides[2]);
      Slot[4] = uint64_t(V.Shape[2]);
      Slot[5] = uint64_t(V.Shape[3]);
      break;
    case ir::InputShape::PerQueryToken: // [B, S]: no head stride
    case ir::InputShape::PerKeyToken:
      Slot[1] = uint64_t(V.Strides[0]);
      Slot[4] = uint64_t(V.Shape[1]);
      break;
    }
  }
  return Slots;
}

void copyStrides(
    std::initializer_list<std::pair<long long *, const int64_t *>> Fields) {
  for (const auto &[Dst, Src] : Fields)
    for (int J = 0; J < 3; ++J)
      Dst[J] = Src[J];
}

ForwardLaunch makeForwardLaunch(const ir::Graph &G, const CallShape &C,
                                const ForwardTensors &T, const InputMap &Inputs,
                                int BlockM, int BlockN) {
  ForwardLaunch L;
  attnc::FwdArgs &A = L.Args;
  fillCallArgs(A, C, T);
  A.m_blocks = int((C.Sq + BlockM - 1) / BlockM);
  A.n_blocks = int((C.Skv + BlockN - 1) / BlockN);
  A.mask_grouping = int(analysis::analyzeMask(G).Grouping);
  if (C.Packed) {
    A.cu_seqlens_q = C.CuQ;
    A.cu_seqlens_kv = C.CuKv;
    A.total_q = int(C.TotalQ);
  }

  L.InputSlots = inputSlots(G, C, Inputs);
  return L;
}

} // namespace attn::runtime
