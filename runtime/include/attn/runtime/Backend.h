// Attention backends (the strategy pattern): each backend says whether it
// can serve a call and why not, and runs it; a registry names them.
#ifndef ATTN_RUNTIME_BACKEND_H
#define ATTN_RUNTIME_BACKEND_H

#include "attn/runtime/Attention.h"
#include "attn/runtime/BlockMask.h"
#include "attn/runtime/Validate.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attn::runtime {

/// One validated call as a backend sees it, with the kernel the selector
/// chose for it (the generated backend runs it; others may ignore it).
struct BackendProblem {
  const CompiledDefinition &Def;
  const Signature &Sig;
  const KernelTarget &Target;
  CallShape Shape;
  const KernelChoice &Choice;
};

/// What a backend is made from: the definition, the signature, the
/// forward's target (its arch resolved) and the choice known without a
/// shape (the generated backend compiles it when made).
struct BackendSetup {
  const CompiledDefinition &Def;
  const Signature &Sig;
  const KernelTarget &Target;
  const KernelChoice &Initial;
};

/// The tensors of a forward call (already validated).
struct ForwardTensors {
  const TensorView &Q, &K, &V, &Out;
  const TensorView *Finals;
};

/// Per-call runtime data: custom-input values and the stream. Scalars travel
/// as kernel arguments, so a new value never recompiles anything.
struct CallContext {
  const InputMap &Inputs;
  CUstream Stream = nullptr;
  /// A block mask checked against the call (Attention::forward): its
  /// lists replace the classification.
  const BlockMaskData *Blocks = nullptr;
};

class AttentionBackend {
public:
  virtual ~AttentionBackend();
  virtual const std::string &name() const = 0;
  /// Empty when this backend can serve \p P; otherwise the reason it cannot
  /// ("seq_kv 20000 is more than the 16384 keys ..."). Never compiles or
  /// tunes: P.Choice was made before any backend was asked.
  virtual std::string check(const BackendProblem &P) const = 0;
  /// Runs the forward; only called after check(P) returned empty.
  virtual void forward(const BackendProblem &P, const ForwardTensors &T,
                       const CallContext &C) = 0;
  /// Classifies the blocks of \p P's kernel with \p C's inputs, on its
  /// stream, into \p Out's forward lists (Attention::makeBlockMask). A
  /// backend without block lists: UserError.
  virtual void makeBlockLists(const BackendProblem &P, const CallContext &C,
                              BlockMaskData &Out);
  /// The kernel compiled when the backend was made (the generated backend
  /// may compile more, one per tile configuration, as calls need them).
  virtual const codegen::KernelSource &source() const = 0;
  virtual const CacheResult &cacheResult() const = 0;
};

/// Makes a backend. May compile eagerly; UserError for an unsupported
/// signature.
using BackendFactory =
    std::function<std::unique_ptr<AttentionBackend>(const BackendSetup &)>;

/// Backends by name, in the order automatic selection tries them.
class BackendRegistry {
public:
  /// The process-wide registry, holding "generated" then "reference".
  static BackendRegistry &global();

  /// Adds a backend tried after those already present. UserError if
  /// \p Name is empty or taken.
  void add(const std::string &Name, BackendFactory Make);
  /// Names in selection order.
  std::vector<std::string> names() const;
  /// The factory of \p Name; UserError listing the known names otherwise.
  const BackendFactory &factory(const std::string &Name) const;

private:
  std::vector<std::pair<std::string, BackendFactory>> Entries;
};

std::unique_ptr<AttentionBackend> makeGeneratedBackend(const BackendSetup &S);
std::unique_ptr<AttentionBackend> makeReferenceBackend(const BackendSetup &S);

} // namespace attn::runtime

#endif
