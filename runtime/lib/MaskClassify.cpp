// The host side of the block classification.
#include "MaskClassify.h"

#include "attn/Error.h"
#include "attn/codegen/InputLayout.h"

#include <algorithm>
#include <atomic>

namespace attn::runtime {

int64_t maskGroups(const analysis::MaskAnalysis &A, int64_t B, int64_t H) {
  switch (A.Grouping) {
  case analysis::MaskGrouping::Shared:
    return 1;
  case analysis::MaskGrouping::PerBatch:
    return B;
  case analysis::MaskGrouping::PerBatchHead:
    return B * H;
  }
  return B * H;
}

size_t maskBoundsFloats(const analysis::MaskAnalysis &A, int64_t Groups,
                        int MBlocks, int NBlocks) {
  if (!A.Analysed)
    return 0;
  return A.Bounded.size() * size_t(Groups) *
         size_t(std::max(MBlocks, NBlocks)) * 2;
}

namespace {
std::atomic<uint64_t> Launches{0};
} // namespace

uint64_t classifyLaunches() { return Launches.load(); }

namespace {
std::atomic<uint64_t> ListBuilds{0};
} // namespace

uint64_t backwardListBuilds() { return ListBuilds.load(); }

void countBackwardListBuild() { ++ListBuilds; }

int listWarpsPerCta(int64_t Lines, int SMs) {
  for (int W : {4, 2})
    if ((Lines + W - 1) / W >= SMs)
      return W;
  return 1;
}

bool launchClassify(CudaDriver &D, CUfunction Classify,
                    const analysis::MaskAnalysis &A, attnc::MaskArgs M,
                    int64_t Groups, void *Slots, CUstream Stream,
                    const char *What, bool Lists) {
  ++Launches;
  M.bound_lines = std::max(M.m_blocks, M.n_blocks);
  void *Params[] = {&M, Slots};
  if (!A.Analysed) {
    M.phase = 0;
    D.check(D.cuLaunchKernel(Classify, unsigned(M.n_blocks),
                             unsigned(M.m_blocks), unsigned(Groups), 256, 1, 1,
                             0, Stream, Params, nullptr),
            What);
    return false;
  }
  if (!A.Bounded.empty()) {
    M.phase = 0; // each warp bounds one input over one row or key block
    D.check(D.cuLaunchKernel(Classify, unsigned((M.bound_lines + 3) / 4),
                             unsigned(A.Bounded.size()), unsigned(Groups), 128,
                             1, 1, 0, Stream, Params, nullptr),
            What);
  }
  if (Lists) {
    M.phase = 2; // one warp per query block, 32 key blocks at a time
    D.check(D.cuLaunchKernel(Classify, unsigned((M.m_blocks + 3) / 4), 1,
                             unsigned(Groups), 128, 1, 1, 0, Stream, Params,
                             nullptr),
            What);
    return true;
  }
  M.phase = 1; // one thread per block
  int64_t Cells = int64_t(M.m_blocks) * M.n_blocks;
  D.check(D.cuLaunchKernel(Classify, unsigned((Cells + 255) / 256), 1,
                           unsigned(Groups), 256, 1, 1, 0, Stream, Params,
                           nullptr),
          What);
  return false;
}

MaskReuseKey maskReuseKey(const ir::Graph &G, const analysis::MaskAnalysis &A,
                          int64_t B, int64_t H, int64_t Sq, int64_t Skv,
                          int BlockM, int BlockN, CUstream Stream,
                          const std::vector<uint64_t> &Slots) {
  MaskReuseKey K{B, H, Sq, Skv, BlockM, BlockN, Stream, {}};
  codegen::InputLayout L = codegen::inputLayout(G);
  for (const std::string &Name : A.ScalarInputs) {
    auto It = std::find_if(
        L.Inputs.begin(), L.Inputs.end(),
        [&](const codegen::InputSlots &S) { return S.Name == Name; });
    if (It == L.Inputs.end() || It->First >= Slots.size())
      throw InternalError("mask reuse: no slot for input '" + Name + "'");
    K.Scalars.push_back(Slots[It->First]);
  }
  return K;
}

} // namespace attn::runtime
