// Attention: compile through the cache, validate, classify blocks, launch.
#include "attn/runtime/Attention.h"

#include "attn/codegen/InputLayout.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Validate.h"

// The kernel-argument structs, shared with the device code so that the
// layouts agree by construction.
#include "../kernels/attention_args.cuh"

#include <dlpack/dlpack.h>
#include <fmt/format.h>

#include <cstring>

namespace attn::runtime {

const char *elemTypeName(ElemType T) {
  switch (T) {
  case ElemType::F16:
    return "f16";
  case ElemType::BF16:
    return "bf16";
  case ElemType::F32:
    return "f32";
  }
  return "?";
}

TensorView TensorView::contiguous(void *Data, ElemType T,
                                  std::vector<int64_t> Shape) {
  TensorView V{Data, T, Shape, std::vector<int64_t>(Shape.size(), 1)};
  for (int I = int(Shape.size()) - 2; I >= 0; --I)
    V.Strides[I] = V.Strides[I + 1] * Shape[I + 1];
  return V;
}

TensorView TensorView::fromDLPack(const DLTensor &T) {
  if (T.device.device_type != kDLCUDA)
    throw InvalidArgument("DLPack tensor: expected a CUDA device tensor");
  TensorView V;
  if (T.dtype.lanes != 1)
    throw InvalidArgument("DLPack tensor: vector types are not supported");
  if (T.dtype.code == kDLFloat && T.dtype.bits == 16)
    V.Type = ElemType::F16;
  else if (T.dtype.code == kDLBfloat && T.dtype.bits == 16)
    V.Type = ElemType::BF16;
  else if (T.dtype.code == kDLFloat && T.dtype.bits == 32)
    V.Type = ElemType::F32;
  else
    throw InvalidArgument("DLPack tensor: expected float16, bfloat16 or "
                          "float32");
  V.Data = static_cast<char *>(T.data) + T.byte_offset;
  V.Shape.assign(T.shape, T.shape + T.ndim);
  if (T.strides)
    V.Strides.assign(T.strides, T.strides + T.ndim);
  else
    V = contiguous(V.Data, V.Type, V.Shape);
  return V;
}

struct Attention::Launch {
  attnc::FwdArgs Args{};
  attnc::MaskArgs Mask{};
  std::vector<uint64_t> InputSlots;
  unsigned Groups = 1;
};

Attention::Attention(const dsl::DefinitionBase &D, const Signature &S)
    : Def(compile(D)), Sig(S) {
  Spec.Dtype = S.Dtype;
  Spec.HeadDim = S.HeadDim;
  Spec.HeadDimV = S.HeadDimV;
  Spec.Arch = S.Arch.empty() ? currentDevice().arch() : S.Arch;
  Spec.Config = S.Config.empty()
                    ? codegen::FwdConfig::defaultFor(S.HeadDim, S.HeadDimV,
                                                      Spec.Arch)
                    : codegen::FwdConfig::parse(S.Config);
  Spec.validate();
  Source = codegen::generateForward(Def, Spec);
  Cached = KernelCache::global().getOrCompile(Source);
}

Attention::~Attention() {
  CudaDriver &D = CudaDriver::get();
  if (!D.available())
    return;
  if (MaskBuf)
    D.cuMemFree(MaskBuf);
  if (Module)
    D.cuModuleUnload(Module);
}

std::vector<std::string> Attention::finalNames() const {
  std::vector<std::string> Names;
  for (const ir::RowscaleDecl &R : Def.Graph->decls().FinalRowscales)
    Names.push_back(R.Name);
  return Names;
}

void Attention::ensureLoaded() {
  if (Module)
    return;
  CudaDriver &D = CudaDriver::get();
  D.require();
  const DeviceInfo &Dev = currentDevice();
  if (!archRunsOn(Spec.Arch, Dev.Major, Dev.Minor))
    throw InvalidArgument(fmt::format(
        "the kernel was built for {}, which does not run on the device ({}, "
        "{})",
        Spec.Arch, Dev.Name, Dev.arch()));
  D.check(D.cuModuleLoadData(&Module, Cached.Cubin->data()),
          "cuModuleLoadData");
  D.check(D.cuModuleGetFunction(&Fwd, Module, "attnc_fwd"),
          "cuModuleGetFunction(attnc_fwd)");
  D.check(D.cuModuleGetFunction(&Classify, Module, "attnc_block_classify"),
          "cuModuleGetFunction(attnc_block_classify)");
  D.check(D.cuModuleGetFunction(&Compact, Module, "attnc_block_compact"),
          "cuModuleGetFunction(attnc_block_compact)");
  int Smem = Spec.Config.sharedBytes(Spec.HeadDim, Spec.HeadDimV);
  if (Smem > Dev.SharedMemPerBlockOptin)
    throw InvalidArgument(fmt::format(
        "config {} needs {} bytes of shared memory; the device allows {}",
        Spec.Config.str(), Smem, Dev.SharedMemPerBlockOptin));
  D.check(D.cuFuncSetAttribute(
              Fwd, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, Smem),
          "cuFuncSetAttribute(max dynamic shared memory)");
}

void Attention::ensureMaskBuffers(size_t Groups, int MBlocks, int NBlocks) {
  size_t Cells = Groups * size_t(MBlocks) * size_t(NBlocks);
  size_t Bytes = Cells + 4 * Groups * size_t(MBlocks) + 4 * Cells + 64;
  if (Bytes <= MaskBufBytes)
    return;
  CudaDriver &D = CudaDriver::get();
  if (MaskBuf)
    D.check(D.cuMemFree(MaskBuf), "cuMemFree");
  D.check(D.cuMemAlloc(&MaskBuf, Bytes), "cuMemAlloc(block mask)");
  MaskBufBytes = Bytes;
}

bool archRunsOn(const std::string &Arch, int Major, int Minor) {
  if (Arch == "sm_90a")
    return Major == 9 && Minor == 0;
  if (Arch.size() != 5 || Arch.compare(0, 3, "sm_") != 0)
    return false;
  return Major == Arch[3] - '0' && Minor >= Arch[4] - '0';
}

static uint64_t bitsOf(const void *P) { return reinterpret_cast<uintptr_t>(P); }

Attention::Launch Attention::prepare(const TensorView &Q, const TensorView &K,
                                     const TensorView &V, const TensorView &Out,
                                     const TensorView *Finals,
                                     const InputMap &Inputs) const {
  const ir::Graph &G = *Def.Graph;
  CallShape C = validateCall(G, Sig, Q, K, V, Out, Finals, Inputs);
  Launch L;
  attnc::FwdArgs &A = L.Args;
  A.q = Q.Data;
  A.k = K.Data;
  A.v = V.Data;
  A.o = Out.Data;
  A.finals = Finals ? static_cast<float *>(Finals->Data) : nullptr;
  long long *Dst[4] = {&A.q_sb, &A.k_sb, &A.v_sb, &A.o_sb};
  const int64_t(*Src[4])[3] = {&C.Q, &C.K, &C.V, &C.O};
  for (int I = 0; I < 4; ++I)
    for (int J = 0; J < 3; ++J)
      Dst[I][J] = (*Src[I])[J];
  A.batch = int(C.B);
  A.heads = int(C.H);
  A.heads_kv = int(C.Hkv);
  A.seq_q = int(C.Sq);
  A.seq_kv = int(C.Skv);
  A.m_blocks = int((C.Sq + Spec.Config.BlockM - 1) / Spec.Config.BlockM);
  A.n_blocks = int((C.Skv + Spec.Config.BlockN - 1) / Spec.Config.BlockN);
  A.mask_per_head = codegen::maskPerHead(G) ? 1 : 0;
  // Grid y (and z for the classification) carry batch·heads and query
  // blocks; CUDA limits both to 65535.
  if (C.B * C.H > 65535)
    throw InvalidArgument(fmt::format(
        "q: batch x heads is {}; at most 65535 are supported", C.B * C.H));
  if (A.m_blocks > 65535)
    throw InvalidArgument(fmt::format(
        "q: seq {} gives {} query blocks of {}; at most 65535 are supported",
        C.Sq, A.m_blocks, Spec.Config.BlockM));
  L.Groups = A.mask_per_head ? unsigned(C.B * C.H) : 1;

  codegen::InputLayout Layout = codegen::inputLayout(G);
  L.InputSlots.assign(Layout.TotalSlots, 0);
  for (const codegen::InputSlots &S : Layout.Inputs) {
    const InputValue &Val = Inputs.at(S.Name);
    uint64_t *Slot = &L.InputSlots[S.First];
    if (S.Shape == ir::InputShape::Scalar) {
      float F = std::get<float>(Val);
      std::memcpy(Slot, &F, sizeof F);
      continue;
    }
    const TensorView &T = std::get<TensorView>(Val);
    Slot[0] = bitsOf(T.Data);
    switch (S.Shape) {
    case ir::InputShape::Scalar:
    case ir::InputShape::PerHead:
      Slot[4] = uint64_t(C.H);
      break;
    case ir::InputShape::PerRow:
    case ir::InputShape::PerKey:
      Slot[1] = uint64_t(T.Strides[0]);
      Slot[2] = uint64_t(T.Strides[1]);
      Slot[4] = uint64_t(T.Shape[2]);
      break;
    case ir::InputShape::Full:
      Slot[1] = uint64_t(T.Strides[0]);
      Slot[2] = uint64_t(T.Strides[1]);
      Slot[3] = uint64_t(T.Strides[2]);
      Slot[4] = uint64_t(T.Shape[2]);
      Slot[5] = uint64_t(T.Shape[3]);
      break;
    }
  }
  return L;
}

void Attention::forward(const TensorView &Q, const TensorView &K,
                        const TensorView &V, const TensorView &Out,
                        const TensorView *Finals, const InputMap &Inputs,
                        CUstream Stream) {
  Launch L = prepare(Q, K, V, Out, Finals, Inputs);
  ensureLoaded();
  CudaDriver &D = CudaDriver::get();
  attnc::FwdArgs &A = L.Args;
  if (Def.Graph->decls().HasMask) {
    ensureMaskBuffers(L.Groups, A.m_blocks, A.n_blocks);
    size_t Cells = size_t(L.Groups) * A.m_blocks * A.n_blocks;
    size_t Rows = size_t(L.Groups) * A.m_blocks;
    attnc::MaskArgs &M = L.Mask;
    M.classes = reinterpret_cast<unsigned char *>(MaskBuf);
    // int arrays after the bytes, 16-byte aligned
    CUdeviceptr Ints = (MaskBuf + Cells + 15) & ~CUdeviceptr(15);
    M.block_count = reinterpret_cast<int *>(Ints);
    M.block_list = reinterpret_cast<int *>(Ints + 4 * Rows);
    M.batch = A.batch;
    M.heads = A.heads;
    M.seq_q = A.seq_q;
    M.seq_kv = A.seq_kv;
    M.m_blocks = A.m_blocks;
    M.n_blocks = A.n_blocks;
    M.mask_per_head = A.mask_per_head;
    void *ClassifyParams[] = {&M, L.InputSlots.data()};
    D.check(D.cuLaunchKernel(Classify, A.n_blocks, A.m_blocks, L.Groups, 256,
                             1, 1, 0, Stream, ClassifyParams, nullptr),
            "launch attnc_block_classify");
    void *CompactParams[] = {&M};
    D.check(D.cuLaunchKernel(Compact, unsigned((Rows + 127) / 128), 1, 1, 128,
                             1, 1, 0, Stream, CompactParams, nullptr),
            "launch attnc_block_compact");
    A.block_count = M.block_count;
    A.block_list = M.block_list;
  }
  void *Params[] = {&A, L.InputSlots.data()};
  int Smem = Spec.Config.sharedBytes(Spec.HeadDim, Spec.HeadDimV);
  D.check(D.cuLaunchKernel(Fwd, A.m_blocks, unsigned(A.batch * A.heads), 1,
                           Spec.Config.Warps * 32, 1, 1, Smem, Stream, Params,
                           nullptr),
          "launch attnc_fwd");
}

} // namespace attn::runtime
