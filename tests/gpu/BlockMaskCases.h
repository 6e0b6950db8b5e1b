// Shared pieces of the block-mask GPU tests (gpu_blockmask_test.cpp and
// gpu_blockmask_persistent.cpp): the cases' host masks and lists, one
// problem's tensors, a forward+backward run and its fp64 reference check.
#ifndef ATTNC_TESTS_GPU_BLOCKMASKCASES_H
#define ATTNC_TESTS_GPU_BLOCKMASKCASES_H

#include "GpuSupport.h"
#include "TestDefinitions.h"

#include "BlockMaskData.h"

#include "attn/reference/Attention.h"

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace attn::gputest::blockmask {

using reference::Tensor;

struct Case {
  std::string Def;
  int B, H, Hkv, S;
};

/// Whether \p C's mask keeps (q, k) of batch \p b (ids shifted by \p Shift,
/// as tokenInput).
bool kept(const Case &C, int b, int q, int k, int Shift);

/// The lists of \p C's mask per batch, in blocks of BQ x BK.
runtime::BlockLists listsOf(const Case &C, int BQ, int BK, int Shift);

/// One problem's tensors on the host and the device, [B,S,H,D] (BSHD).
struct Problem {
  Case C;
  DType Dt = DType::F16;
  int D = 64;
  std::vector<uint16_t> Q, K, V, DO;
  reference::AttentionInputs In;
  Tensor DORef;
  std::unique_ptr<DeviceBuffer> DQ, DK, DV, DDO, O, F, GQ, GK, GV;
  std::vector<std::unique_ptr<DeviceBuffer>> Keep;
  runtime::InputMap Inputs;
};

/// Sets \p P's tensor inputs from tokenInput (ids shifted by \p Shift) and
/// its scalars to the middle of their sample ranges.
void setInputs(Problem &P, const ir::Graph &G, int Shift);
Problem makeProblem(const Case &C, const ir::Graph &G, uint64_t Seed);

/// o, dq, dk, dv of one forward and backward of \p A (with \p BM if given).
std::vector<std::vector<uint16_t>> run(runtime::Attention &A, Problem &P,
                                       const runtime::BlockMask *BM,
                                       const runtime::InputMap *Inputs = nullptr);

/// o and the finals of one forward of \p A over \p P (with \p BM if given).
std::vector<std::vector<uint16_t>> forwardOnly(runtime::Attention &A, Problem &P,
                                               const runtime::BlockMask *BM);

/// \p Got (o, dq, dk, dv) against the fp64 reference of \p P's inputs.
bool checkReference(const runtime::Attention &A, const Problem &P,
                    const std::vector<std::vector<uint16_t>> &Got,
                    std::string &Line);

/// Sets the scalar input \p Name of \p P to \p X (device call and reference).
void setScalar(Problem &P, const std::string &Name, int32_t X);

/// The counts of passed and failed checks, printed by main.
extern int Passed, Failed;
void report(const std::string &Name, bool Pass, const std::string &Line);

/// Runs \p F, which must throw a UserError whose message holds \p Want.
void refused(const std::string &Name, const std::string &Want,
             const std::function<void()> &F);

/// The persistent cases (gpu_blockmask_persistent.cpp).
dsl::AttentionDef persistentDefinition(const std::string &Name);
void runPersistent(const Case &C, uint64_t Seed);
void runPersistentChoice(const Case &C, uint64_t Seed);

} // namespace attn::gputest::blockmask

#endif // ATTNC_TESTS_GPU_BLOCKMASKCASES_H
