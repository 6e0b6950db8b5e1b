// The autotuners' resource model: which tile configurations (attention's
// and linear attention's) cannot launch or would spill, decided from shared
// memory before compiling and from the CUBIN's register and stack-frame
// attributes after.
#ifndef ATTN_RUNTIME_RESOURCEMODEL_H
#define ATTN_RUNTIME_RESOURCEMODEL_H

#include "attn/codegen/Codegen.h"
#include "attn/codegen/LinearCodegen.h"

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <vector>

namespace attn::runtime {

struct DeviceInfo;

/// What a CUBIN records about one kernel entry (ptxas writes it into the
/// ELF's .nv.info section, so a CUBIN from the disk cache says as much as a
/// fresh compile).
struct KernelResources {
  /// Registers per thread (EIATTR_REGCOUNT).
  int Registers = 0;
  /// Per-thread stack frame in local memory (EIATTR_FRAME_SIZE). The
  /// skeletons keep no arrays in local memory, so a frame holds spilled
  /// registers: non-zero means the kernel spills.
  int StackFrameBytes = 0;
};

/// Reads the resources of \p Entry ("attnc_fwd") from an sm_XX CUBIN (a
/// 64-bit little-endian ELF). InternalError when \p Cubin is not such an
/// ELF, has no symbol \p Entry, or records no register count for it.
KernelResources readCubinResources(llvm::StringRef Cubin,
                                   llvm::StringRef Entry);

/// ptxas's report of one entry, as `--ptxas-options=-v` puts it in NVRTC's
/// log: "Used N registers", "F bytes stack frame, S bytes spill stores, L
/// bytes spill loads".
struct PtxasReport {
  int Registers = 0;
  int StackFrameBytes = 0;
  int SpillStoreBytes = 0;
  int SpillLoadBytes = 0;
};

/// The report for \p Entry in \p Log, or nothing if the log has none.
std::optional<PtxasReport> parsePtxasReport(llvm::StringRef Log,
                                            llvm::StringRef Entry);

/// What a CTA may use.
struct ResourceLimits {
  /// Dynamic shared memory per block (the opt-in maximum).
  int SharedBytesPerBlock = 0;
  int MaxThreadsPerBlock = 1024;
  /// The register file one block may take (64K 32-bit registers on every
  /// sm_8x and sm_90 part).
  int RegistersPerBlock = 65536;
  /// Stack frame a configuration may have and still be timed: 0 prunes
  /// every configuration that spills.
  int MaxStackFrameBytes = 0;

  /// The limits of \p Arch (codegen::archSharedLimit).
  static ResourceLimits forArch(GpuArch Arch);
  /// The limits of \p Arch on \p Dev: the smaller shared memory of the two.
  static ResourceLimits forDevice(GpuArch Arch,
                                  const DeviceInfo &Dev);
};

/// Why \p C cannot launch for head dims \p D / \p DV under \p L, judged
/// before compiling (shared memory, threads), or empty.
std::string pruneBeforeCompile(const codegen::FwdConfig &C, int D, int DV,
                               const ResourceLimits &L);

/// Why \p C should not be timed given its compiled resources \p R: the
/// block needs more registers than an SM has, or it spills more than
/// L.MaxStackFrameBytes. Empty when it may be timed.
std::string pruneAfterCompile(const codegen::FwdConfig &C,
                              const KernelResources &R,
                              const ResourceLimits &L);

/// Why a block of \p Threads threads with the compiled resources \p R
/// cannot launch (registers) or should not be timed (a stack frame over
/// L.MaxStackFrameBytes), or empty: the judgement after compiling that
/// every skeleton's entry shares.
std::string pruneOnResources(int Threads, const KernelResources &R,
                             const ResourceLimits &L);

/// The same two judgements for a fwd_sm90 configuration (dtype, head dims
/// and arch from \p Spec): before compiling, sm90Unsupported's rules, the
/// device's shared memory and threads; after, registers and spills.
std::string pruneBeforeCompile(const codegen::Sm90Config &C,
                               const codegen::KernelSpec &Spec,
                               const ResourceLimits &L);
std::string pruneAfterCompile(const codegen::Sm90Config &C,
                              const KernelResources &R,
                              const ResourceLimits &L);

// The linear_chunk skeletons (the forward scan and the backward's
// kernels), judged as one configuration.

/// Why \p Spec (its Config) cannot launch under \p L whatever the compiler
/// does: its structure, a kernel's threads, or a kernel's dynamic shared
/// memory (linearSharedBytes: the forward, the state passes, the chunk
/// gradients) over L.SharedBytesPerBlock. Empty when it may be compiled.
std::string linearPruneBeforeCompile(const codegen::LinearKernelSpec &Spec,
                                     const ResourceLimits &L);

/// The kernel entries of a linear source the resource model judges: the
/// forward scan, or the backward's state passes and chunk gradients (the
/// grouped chunk gradients have the same resources within a few registers;
/// the other backward kernels do not depend on the configuration).
std::vector<std::string> linearJudgedEntries(const codegen::KernelSource &S);

/// Why a compiled configuration must not be timed: a judged kernel needs
/// more registers than a block may have, or spills (stack frame) over
/// L.MaxStackFrameBytes. \p R holds the forward scan's resources, then
/// the state passes' and the chunk gradients' (linearJudgedEntries order).
std::string linearPruneAfterCompile(const codegen::LinearConfig &C,
                                    const std::vector<KernelResources> &R,
                                    const ResourceLimits &L);

} // namespace attn::runtime

#endif
