// Checks and conversions of the C interface's run-time arguments.
#include "RuntimeArgs.h"

#include "attn/Error.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <set>

namespace attn::capi {

namespace {

[[noreturn]] void bad(const ArgContext &C, llvm::StringRef Argument,
                      const std::string &What) {
  throw InvalidArgument(
      fmt::format("{}: argument '{}': {}", C.Function, Argument.str(), What));
}

std::optional<DType> elemType(int32_t Code) {
  switch (Code) {
  case ATTNC_DTYPE_F16:
    return DType::F16;
  case ATTNC_DTYPE_BF16:
    return DType::BF16;
  case ATTNC_DTYPE_F32:
    return DType::F32;
  case ATTNC_DTYPE_I32:
    return DType::I32;
  }
  return std::nullopt;
}

/// A C string that may be NULL: "" then.
std::string text(const char *S) { return S ? S : ""; }

} // namespace

runtime::TensorView tensorArg(const ArgContext &C, const char *Argument,
                              const attnc_tensor *T) {
  if (!T)
    bad(C, Argument, "is NULL");
  std::optional<DType> Type = elemType(T->dtype);
  if (!Type)
    bad(C, Argument,
        fmt::format("dtype {} is not an attnc_dtype (0 f16, 1 bf16, 2 f32, "
                    "3 i32)",
                    T->dtype));
  if (T->ndim < 0 || T->ndim > ATTNC_MAX_NDIM)
    bad(C, Argument,
        fmt::format("ndim {} is out of range (0 to {})", T->ndim,
                    ATTNC_MAX_NDIM));
  if (T->ndim > 0 && !T->shape)
    bad(C, Argument, fmt::format("shape is NULL with ndim {}", T->ndim));
  std::vector<int64_t> Shape(T->shape, T->shape + T->ndim);
  for (int32_t I = 0; I < T->ndim; ++I)
    if (Shape[I] < 0)
      bad(C, Argument,
          fmt::format("shape[{}] is negative ({})", I, Shape[I]));
  if (!T->strides)
    return runtime::TensorView::contiguous(T->data, *Type, std::move(Shape));
  runtime::TensorView V;
  V.Data = T->data;
  V.Type = *Type;
  V.Shape = std::move(Shape);
  V.Strides.assign(T->strides, T->strides + T->ndim);
  return V;
}

std::optional<runtime::TensorView>
optionalTensorArg(const ArgContext &C, const char *Argument,
                  const attnc_tensor *T) {
  if (!T)
    return std::nullopt;
  return tensorArg(C, Argument, T);
}

runtime::InputMap inputsArg(const ArgContext &C, const attnc_input *Inputs,
                            size_t Count) {
  runtime::InputMap Map;
  if (Count && !Inputs)
    bad(C, "inputs", fmt::format("is NULL with num_inputs {}", Count));
  for (size_t I = 0; I < Count; ++I) {
    const attnc_input &In = Inputs[I];
    std::string Arg = fmt::format("inputs[{}]", I);
    if (!In.name)
      bad(C, Arg, "name is NULL");
    Arg = fmt::format("inputs[{}] ('{}')", I, In.name);
    if (Map.count(In.name))
      bad(C, Arg, "the name is given twice");
    switch (In.kind) {
    case ATTNC_INPUT_F32:
      Map[In.name] = In.f32;
      continue;
    case ATTNC_INPUT_I32:
      Map[In.name] = In.i32;
      continue;
    case ATTNC_INPUT_TENSOR:
      Map[In.name] = tensorArg(C, (Arg + ".tensor").c_str(), &In.tensor);
      continue;
    }
    bad(C, Arg,
        fmt::format("kind {} is not an attnc_input_kind (0 f32, 1 i32, "
                    "2 tensor)",
                    In.kind));
  }
  return Map;
}

runtime::InputGradMap gradsArg(const ArgContext &C,
                               const attnc_named_tensor *Grads, size_t Count) {
  runtime::InputGradMap Map;
  if (Count && !Grads)
    bad(C, "grads", fmt::format("is NULL with num_grads {}", Count));
  for (size_t I = 0; I < Count; ++I) {
    std::string Arg = fmt::format("grads[{}]", I);
    if (!Grads[I].name)
      bad(C, Arg, "name is NULL");
    Arg = fmt::format("grads[{}] ('{}')", I, Grads[I].name);
    if (Map.count(Grads[I].name))
      bad(C, Arg, "the name is given twice");
    Map[Grads[I].name] =
        tensorArg(C, (Arg + ".tensor").c_str(), &Grads[I].tensor);
  }
  return Map;
}

runtime::VarlenBatch varlenArg(const ArgContext &C, const attnc_varlen *B) {
  if (!B)
    bad(C, "batch", "is NULL");
  runtime::VarlenBatch VB;
  VB.CuSeqlensQ = tensorArg(C, "batch.cu_seqlens_q", &B->cu_seqlens_q);
  VB.CuSeqlensKv = tensorArg(C, "batch.cu_seqlens_kv", &B->cu_seqlens_kv);
  VB.MaxSeqlenQ = B->max_seqlen_q;
  VB.MaxSeqlenKv = B->max_seqlen_kv;
  return VB;
}

namespace {

DType dtypeArg(const ArgContext &C, int32_t Code) {
  switch (Code) {
  case ATTNC_DTYPE_F16:
    return DType::F16;
  case ATTNC_DTYPE_BF16:
    return DType::BF16;
  default:
    bad(C, "sig.dtype",
        fmt::format("{} is not ATTNC_DTYPE_F16 (0) or ATTNC_DTYPE_BF16 (1)",
                    Code));
  }
}

Layout layoutArg(const ArgContext &C, int32_t Code) {
  switch (Code) {
  case ATTNC_LAYOUT_BSHD:
    return Layout::BSHD;
  case ATTNC_LAYOUT_BHSD:
    return Layout::BHSD;
  case ATTNC_LAYOUT_THD:
    return Layout::THD;
  default:
    bad(C, "sig.layout",
        fmt::format("{} is not an attnc_layout (0 bshd, 1 bhsd, 2 thd)",
                    Code));
  }
}

std::optional<GpuArch> archArg(const ArgContext &C, int32_t Code) {
  switch (Code) {
  case ATTNC_ARCH_CURRENT:
    return std::nullopt;
  case ATTNC_ARCH_SM80:
    return GpuArch::Sm80;
  case ATTNC_ARCH_SM86:
    return GpuArch::Sm86;
  case ATTNC_ARCH_SM89:
    return GpuArch::Sm89;
  case ATTNC_ARCH_SM90A:
    return GpuArch::Sm90a;
  default:
    bad(C, "sig.arch",
        fmt::format("{} is not an attnc_arch (0 current, 80, 86, 89, 90)",
                    Code));
  }
}

/// The runtime checks head dims against what the skeletons run; here only
/// what no signature could mean.
void headDimsArg(const ArgContext &C, int32_t D, int32_t DV) {
  if (D <= 0)
    bad(C, "sig.head_dim", fmt::format("{} is not positive", D));
  if (DV <= 0)
    bad(C, "sig.head_dim_v", fmt::format("{} is not positive", DV));
}

/// The fields both signatures share, from the C struct \p S (non-null).
template <typename CSig, typename Sig>
void commonSignatureFields(const ArgContext &C, const CSig &S, Sig &Out) {
  Out.Dtype = dtypeArg(C, S.dtype);
  Out.TensorLayout = layoutArg(C, S.layout);
  Out.Arch = archArg(C, S.arch);
  headDimsArg(C, S.head_dim, S.head_dim_v);
  Out.HeadDim = S.head_dim;
  Out.HeadDimV = S.head_dim_v;
  Out.Skeleton = text(S.skeleton);
  Out.Config = text(S.config);
  Out.TuneFile = text(S.tune_file);
  Out.Tune = S.tune != 0;
}

} // namespace

runtime::Signature signatureArg(const ArgContext &C,
                                const attnc_signature *S) {
  if (!S)
    bad(C, "sig", "is NULL");
  runtime::Signature Sig;
  commonSignatureFields(C, *S, Sig);
  Sig.NeedsBackward = S->needs_backward != 0;
  Sig.BackwardConfig = text(S->backward_config);
  Sig.Backend = text(S->backend);
  return Sig;
}

runtime::LinearSignature linearSignatureArg(const ArgContext &C,
                                            const attnc_linear_signature *S) {
  if (!S)
    bad(C, "sig", "is NULL");
  runtime::LinearSignature Sig;
  commonSignatureFields(C, *S, Sig);
  return Sig;
}

void inputInfoAt(const ArgContext &C, const std::vector<ir::InputDecl> &Decls,
                 size_t Index, attnc_input_info *Info) {
  requireNonNull(Info, C.Function, "info");
  requireIndex(C, Index, Decls.size());
  inputInfo(Decls[Index], *Info);
}

void inputInfo(const ir::InputDecl &D, attnc_input_info &Info) {
  Info.name = D.Name.c_str();
  Info.shape = shapeCode(D.Shape);
  Info.dtype = D.Elem == ir::InputType::I32 ? ATTNC_DTYPE_I32 : ATTNC_DTYPE_F32;
  Info.requires_grad = D.RequiresGrad ? 1 : 0;
}

attnc_input_shape shapeCode(ir::InputShape S) {
  switch (S) {
  case ir::InputShape::Scalar:
    return ATTNC_SHAPE_SCALAR;
  case ir::InputShape::PerHead:
    return ATTNC_SHAPE_PER_HEAD;
  case ir::InputShape::PerRow:
    return ATTNC_SHAPE_PER_ROW;
  case ir::InputShape::PerKey:
    return ATTNC_SHAPE_PER_KEY;
  case ir::InputShape::Full:
    return ATTNC_SHAPE_FULL;
  case ir::InputShape::PerQueryToken:
    return ATTNC_SHAPE_PER_QUERY_TOKEN;
  case ir::InputShape::PerKeyToken:
    return ATTNC_SHAPE_PER_KEY_TOKEN;
  }
  throw InternalError("shapeCode: an unknown InputShape");
}

const runtime::BlockMask &blockMaskArg(const ArgContext &C,
                                       const attnc_block_mask *M) {
  if (!M)
    bad(C, "mask", "is NULL");
  return M->Mask;
}

void requireIndex(const ArgContext &C, size_t Index, size_t Count) {
  if (Index >= Count)
    throw InvalidArgument(fmt::format(
        "{}: argument 'index': {} is out of range (the object has {})",
        C.Function, Index, Count));
}

int32_t archCode(GpuArch A) {
  switch (A) {
  case GpuArch::Sm80:
    return ATTNC_ARCH_SM80;
  case GpuArch::Sm86:
    return ATTNC_ARCH_SM86;
  case GpuArch::Sm89:
    return ATTNC_ARCH_SM89;
  case GpuArch::Sm90a:
    return ATTNC_ARCH_SM90A;
  }
  throw InternalError("archCode: an unknown GpuArch");
}

} // namespace attn::capi
