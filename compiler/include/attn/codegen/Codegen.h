// Code generation: an analysed transformer-style definition to CUDA text
// that instantiates a hand-written skeleton.
#ifndef ATTN_CODEGEN_CODEGEN_H
#define ATTN_CODEGEN_CODEGEN_H

#include "attn/Pipeline.h"
#include "attn/codegen/KernelSource.h"
#include "attn/dsl/Problem.h"

#include <string>
#include <vector>

namespace attn::codegen {

/// Tile configuration of the sm80 forward skeleton.
struct FwdConfig {
  int BlockM = 64;
  int BlockN = 64;
  int Warps = 4;
  int Stages = 2;
  /// "m64n64w4s2"
  std::string str() const;
  /// Parses what str() writes; UserError on anything else.
  static FwdConfig parse(const std::string &Text);
  /// Dynamic shared memory the skeleton needs for head dims \p D, \p DV.
  int sharedBytes(int D, int DV) const;
  /// The configuration used when none is given (see docs/performance.md for
  /// the measurements behind it): 128x64 tiles over 4 warps (two m16 tiles
  /// per warp, so each K/V tile read from shared memory feeds twice the
  /// math, and 96 KiB of shared memory at d128, so two CTAs share an SM) for
  /// head dims up to 128 where shared memory allows; 128x32 over 4 warps
  /// for head dim 64; 64x32 over 4 warps for head dims above 128 (the O
  /// accumulator alone is then 128 registers a thread).
  static FwdConfig defaultFor(int D, int DV, const std::string &Arch);
  /// The autotuner's search space for this skeleton: BlockM {64,128,256} x
  /// BlockN {32,64,128} x Warps {4,8} x Stages {2,3}, keeping only what
  /// structuralError() accepts. Shared memory is not checked: it depends on
  /// the head dims and the device, and is the resource model's job
  /// (runtime/ResourceModel.h).
  static std::vector<FwdConfig> enumerate();
  /// Why the skeleton cannot be instantiated with these warps, block sizes
  /// and stages (KernelSpec::validate's message), or empty. Shared memory is
  /// not checked here.
  std::string structuralError() const;
  bool operator==(const FwdConfig &O) const {
    return BlockM == O.BlockM && BlockN == O.BlockN && Warps == O.Warps &&
           Stages == O.Stages;
  }
  bool operator!=(const FwdConfig &O) const { return !(*this == O); }
};

/// Dynamic shared memory a CTA may use on \p Arch (sm_80: 163 KiB, sm_90a:
/// 227 KiB, sm_86/sm_89: 99 KiB), the opt-in limit of that architecture.
int archSharedLimit(const std::string &Arch);

/// Everything that selects one kernel besides the definition.
struct KernelSpec {
  DType Dtype = DType::F16;
  int HeadDim = 128;
  int HeadDimV = 128;
  std::string Arch = "sm_80"; ///< sm_80, sm_86, sm_89 or sm_90a
  FwdConfig Config;           ///< see FwdConfig::defaultFor
  /// UserError naming the field when a value is unsupported.
  void validate() const;
};

/// The sm80 forward kernel for \p Def: a banner (key, attnc version, the IR),
/// the Inputs struct for custom inputs, the Variant struct (score_mod, mask,
/// online_fwd, epilogue, forward, backward) and the extern "C" entry points
/// attnc_fwd, attnc_block_classify and attnc_block_compact.
KernelSource generateForward(const CompiledDefinition &Def,
                             const KernelSpec &Spec);

/// The reference forward (skeleton ref_fwd): one CTA per (query row,
/// batch·head) holding the row's scores in shared memory, following the
/// direct definition in fp32 without tensor cores. Obviously correct and
/// slow; the tests' and the autotuner's oracle. Entry: attnc_ref_fwd.
/// Spec.Config is not used.
KernelSource generateReference(const CompiledDefinition &Def,
                               const KernelSpec &Spec);

/// Threads of a reference CTA, the keys it can hold (so the longest key
/// sequence it serves) and its dynamic shared memory for head dim \p D.
constexpr int ReferenceThreads = 256;
constexpr int ReferenceMaxKeys = 16384;
int referenceSharedBytes(int D);

/// The `{{key}}` name of the forward kernel, without the hash part.
std::string forwardKey(const CompiledDefinition &Def, const KernelSpec &Spec);

/// True when the mask reads b, h or a custom input, so that blocks must be
/// classified per batch·head rather than once for all.
bool maskPerHead(const ir::Graph &G);

/// attnc's version string.
const char *attncVersion();

} // namespace attn::codegen

#endif
