// The skeleton table: one description per hand-written kernel skeleton
// (what it runs, its typed configuration, its resource model, its code
// generator and launch geometry). Everything that picks, tunes, reads or
// prints a skeleton asks this table; no other file names one.
#ifndef ATTN_RUNTIME_SKELETON_H
#define ATTN_RUNTIME_SKELETON_H

#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/DecodeCodegen.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/dsl/Problem.h"
#include "attn/ir/Graph.h"
#include "attn/runtime/ResourceModel.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace attn::runtime {

enum class Direction : uint8_t { Forward, Backward };
llvm::StringRef directionName(Direction D);

/// The configuration of one skeleton, typed: each skeleton's entry parses
/// and prints its own alternative.
using SkeletonConfig =
    std::variant<codegen::FwdConfig, codegen::Sm90Config, codegen::BwdConfig,
                 codegen::BwdSm90Config, codegen::LinearConfig,
                 codegen::DecodeConfig>;

/// What a kernel is made for, besides the definition and the
/// configuration: the definition's kind, the direction, dtype, head dims
/// and arch. Built in one place from a signature (Attention.h, its
/// kernelTarget functions) or from the CLI's options.
struct KernelTarget {
  ir::DefinitionKind Kind = ir::DefinitionKind::Transformer;
  Direction Dir = Direction::Forward;
  DType Dtype = DType::F16;
  int HeadDim = 128;
  int HeadDimV = 128;
  GpuArch Arch = GpuArch::Sm80;
  /// What the backward's shared memory depends on: the definition's final
  /// rowscales and whether its backward reads doosum (bwd_sm80 stages both).
  int NumFinals = 1;
  bool BackwardUsesDoosum = false;

  /// The target of \p Def's kernels in direction \p D: kind, finals and
  /// doosum from the definition, the rest from the arguments.
  static KernelTarget of(const CompiledDefinition &Def, Direction D,
                         DType Dtype, int HeadDim, int HeadDimV, GpuArch Arch);

  /// The attention skeletons' spec (its Config left at the default value;
  /// the skeleton entries set what their configuration says).
  codegen::KernelSpec kernelSpec() const;
  /// The linear skeleton's spec, Config likewise.
  codegen::LinearKernelSpec linearSpec() const;
  /// "mha forward f16 d128/128 sm_90a" without the name: "forward f16
  /// d128/128 sm_90a".
  std::string str() const;
};

/// The launch geometry of a configuration's main entry point.
struct LaunchShape {
  int BlockM = 0, BlockN = 0, Threads = 0, SharedBytes = 0;
};

/// One skeleton. Entries live in runtime/lib/skeletons/, one file each, and
/// are listed once in skeletonTable(). Adding a skeleton is one entry, its
/// .cuh files and its template (docs/architecture.md).
class Skeleton {
public:
  virtual ~Skeleton();
  Skeleton(const Skeleton &) = delete;
  Skeleton &operator=(const Skeleton &) = delete;

  /// The name tune keys, kernel keys, messages and --skeleton use.
  llvm::StringRef name() const { return Name; }
  ir::DefinitionKind kind() const { return Kind; }
  /// True when the skeleton has kernels for \p D.
  bool serves(Direction D) const {
    return D == Direction::Forward ? Forward : Backward;
  }
  /// The configuration's written form, for messages ("m<M>n<N>w<W>s<S>").
  virtual llvm::StringRef configForm() const = 0;

  /// Why no configuration of this skeleton can run \p T (kind, direction,
  /// dtype, head dims, arch), or empty. By default: why its default
  /// configuration cannot, which holds where the default is chosen to fit
  /// whatever the skeleton supports.
  virtual std::string unsupported(const KernelTarget &T) const {
    return configError(defaultFor(T), T);
  }
  /// The configuration \p Text names; UserError (the configuration's own
  /// message) when it is not written in this skeleton's form.
  virtual SkeletonConfig parse(llvm::StringRef Text) const = 0;
  /// parse(), or none where it throws.
  std::optional<SkeletonConfig> tryParse(llvm::StringRef Text) const;
  /// The written form of \p C (which must be this skeleton's alternative).
  virtual std::string print(const SkeletonConfig &C) const = 0;
  /// The configuration used without a tuned one (docs/codegen.md and
  /// docs/linear.md give the measurements behind each).
  virtual SkeletonConfig defaultFor(const KernelTarget &T) const = 0;
  /// The autotuner's search space for \p T, before the resource model.
  virtual std::vector<SkeletonConfig>
  enumerate(const KernelTarget &T) const = 0;
  /// Why \p C cannot be instantiated for \p T (its structure, head dims,
  /// shared memory on T.Arch), or empty.
  virtual std::string configError(const SkeletonConfig &C,
                                  const KernelTarget &T) const = 0;

  /// The resource model: why \p C cannot launch under \p L whatever the
  /// compiler does (structure, threads, shared memory), or empty.
  virtual std::string pruneBeforeCompile(const SkeletonConfig &C,
                                         const KernelTarget &T,
                                         const ResourceLimits &L) const = 0;
  /// The entries of \p Src whose compiled resources the model judges.
  virtual std::vector<std::string>
  judgedEntries(const codegen::KernelSource &Src) const = 0;
  /// Why a compiled configuration must not be timed given the resources of
  /// its judged entries (in judgedEntries order, over every direction the
  /// skeleton serves, forward first), or empty.
  virtual std::string
  pruneAfterCompile(const SkeletonConfig &C,
                    const std::vector<KernelResources> &R,
                    const ResourceLimits &L) const = 0;

  /// The generated kernel of \p C for \p T (T.Dir selects forward or
  /// backward). UserError / NotSupportedYet as the code generator says.
  virtual codegen::KernelSource generate(const CompiledDefinition &Def,
                                         const KernelTarget &T,
                                         const SkeletonConfig &C) const = 0;
  /// The main entry's block sizes, threads and dynamic shared memory.
  virtual LaunchShape launchShape(const SkeletonConfig &C,
                                  const KernelTarget &T) const = 0;
  /// True when the kernel reads q, k and v through TMA descriptors, which
  /// some strides cannot describe (the caller then falls back).
  virtual bool usesTensorMaps() const { return false; }
  /// True for a decode skeleton: a few queries per sequence (at most
  /// codegen::DecodeMaxQueries), launched by the decode runner with its
  /// split over the keys. The first-that-supports rule never picks one.
  virtual bool isDecode() const { return false; }

protected:
  Skeleton(llvm::StringRef Name, ir::DefinitionKind Kind, bool Forward,
           bool Backward)
      : Name(Name), Kind(Kind), Forward(Forward), Backward(Backward) {}

private:
  llvm::StringRef Name;
  ir::DefinitionKind Kind;
  bool Forward, Backward;
};

/// Every skeleton, in the selector's order of preference: for a kind and a
/// direction, the first that supports a target is the one it runs.
llvm::ArrayRef<const Skeleton *> skeletonTable();
/// The skeleton named \p Name, or nullptr.
const Skeleton *findSkeleton(llvm::StringRef Name);
/// The skeleton named \p Name; UserError naming \p What and the known
/// names otherwise.
const Skeleton &skeletonNamed(llvm::StringRef Name,
                              llvm::StringRef What = "skeleton");
/// The names of the skeletons with kernels for \p Kind and \p D, in table
/// order ("fwd_sm90, fwd_sm80"); every skeleton with no arguments.
std::string skeletonNames();
std::string skeletonNames(ir::DefinitionKind Kind, Direction D);


} // namespace attn::runtime

#endif
