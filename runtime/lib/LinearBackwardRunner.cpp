// LinearBackwardRunner: compile the linear_chunk backward kernels, lay out
// their workspace, fill LinearArgs and launch them in order.
#include "LinearBackwardRunner.h"

#include "EnvSwitch.h"
#include "ForwardLaunch.h"

#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/KernelCache.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>

namespace attn::runtime {

bool linearStatePairsAllowed() {
  return envSwitch("ATTNC_LINEAR_PAIRS", "every chunk's states written",
                   "state pairs where the kernels have them")
      .value_or(true);
}

std::vector<uint64_t> linearInputSlots(const ir::Graph &G,
                                       const InputMap &Inputs, int64_t H) {
  CallShape C;
  C.H = H;
  return inputSlots(G, C, Inputs);
}

attnc::LinearArgs linearForwardArgs(const LinearCallShape &C,
                                    const codegen::LinearKernelSpec &Spec,
                                    const TensorView &Q, const TensorView &K,
                                    const TensorView &V,
                                    const TensorView *Decay) {
  attnc::LinearArgs A{};
  A.q = Q.Data;
  A.k = K.Data;
  A.v = V.Data;
  A.decay = Decay ? static_cast<const float *>(Decay->Data) : nullptr;
  copyStrides(
      {{&A.q_sb, C.Q}, {&A.k_sb, C.K}, {&A.v_sb, C.V}, {&A.decay_sb, C.Decay}});
  A.batch = int(C.B);
  A.heads = int(C.H);
  A.heads_q = int(C.Hq);
  A.heads_k = int(C.Hk);
  A.seq = int(C.T);
  A.slices = codegen::linearSlices(Spec);
  A.chunks = int(codegen::linearChunks(Spec, C.T));
  return A;
}

void launchLinear(CUfunction F, unsigned GX, unsigned GY, unsigned GZ,
                  unsigned Threads, int Smem, CUstream S, void **Params,
                  const char *What) {
  CudaDriver &D = CudaDriver::get();
  D.check(D.cuLaunchKernel(F, GX, GY, GZ, Threads, 1, 1, unsigned(Smem), S,
                           Params, nullptr),
          What);
}

LinearBackwardRunner::LinearBackwardRunner(
    const CompiledDefinition &D, const codegen::LinearKernelSpec &S, bool V)
    : Def(D), Spec(S), Varlen(V), Smem(codegen::linearSharedBytes(S)) {
  Source = Varlen ? codegen::generateLinearBackwardVarlen(Def, Spec)
                  : codegen::generateLinearBackward(Def, Spec);
  Cached = KernelCache::global().getOrCompile(Source);
}

void LinearBackwardRunner::ensureLoaded() {
  if (Module.loaded())
    return;
  Module.load(Cached, Spec.Arch);
  States = Module.function("attnc_linear_bwd_states");
  Grads = Module.function("attnc_linear_bwd_chunk");
  GroupedGrads = Module.function("attnc_linear_bwd_chunk_grouped");
  Combine = Module.function("attnc_linear_bwd_combine");
  Decay = Module.function("attnc_linear_bwd_decay");
  InputReduce = Module.function("attnc_linear_bwd_input_reduce");
  PartialReduce = Module.function("attnc_linear_bwd_partial_reduce");
  std::string What = "linear config " + Spec.Config.str();
  Module.allowSharedBytes(States, Smem.States, What);
  Module.allowSharedBytes(Grads, Smem.Grads, What);
  Module.allowSharedBytes(GroupedGrads, Smem.GroupedGrads, What);
}

void LinearBackwardRunner::run(const LinearBackwardShape &R,
                               const LinearBackwardTensors &T,
                               const InputMap &Inputs,
                               const LinearInputGrads &InputGrads,
                               DeviceArena &Work, CUstream Stream,
                               const LinearPackedBatch &Packed) {
  const LinearCallShape &C = R.Fwd;
  if (Varlen != (Packed.CuSeqlens != nullptr))
    throw InternalError("linear backward: a packed batch needs the packed "
                        "kernels and only those");
  ensureLoaded();

  attnc::LinearArgs A = linearForwardArgs(C, Spec, T.Q, T.K, T.V, T.Decay);
  // A packed batch's sequences each take their chunks' slots, at most T /
  // chunk + sequences a head (linear_chunk_seq.cuh); the state passes run
  // one CTA row per sequence and head.
  int64_t StateRows = C.B * C.H;
  if (Varlen) {
    A.cu_seqlens = Packed.CuSeqlens;
    A.seqs = int(Packed.Seqs);
    A.chunks = int(C.T / Spec.Config.Chunk + Packed.Seqs);
    StateRows = Packed.Seqs * C.H;
  }
  A.init_state =
      T.InitialState ? static_cast<const float *>(T.InitialState->Data) : nullptr;
  A.dout = T.DOut.Data;
  A.dq = T.DQ.Data;
  A.dk = T.DK.Data;
  A.dv = T.DV.Data;
  copyStrides(
      {{&A.do_sb, R.DO}, {&A.dq_sb, R.DQ}, {&A.dk_sb, R.DK}, {&A.dv_sb, R.DV}});
  A.ddecay = T.DDecay ? static_cast<float *>(T.DDecay->Data) : nullptr;
  A.dfinal_state =
      T.DFinalState ? static_cast<const float *>(T.DFinalState->Data) : nullptr;
  A.dinit_state =
      T.DInitialState ? static_cast<float *>(T.DInitialState->Data) : nullptr;

  const ir::Graph &G = *Def.Graph;
  const int64_t NI = int64_t(G.decls().Inputs.size());
  const int64_t BH = C.B * C.H, BHT = BH * C.T, D = Spec.HeadDim;
  const int64_t Slices = A.slices, NC = A.chunks;
  const int64_t Groups = Spec.Config.BwdWarps / (Spec.Config.Chunk / 16);
  A.vin_parts = int(Slices * Groups);
  A.z_parts = int(Slices);
  // Where value heads share q or k heads, a chunk-gradient CTA takes a
  // sub-group of them (sharing one q and one k head) and sums their raw dq
  // and dk into a partial (ws_gq, ws_gk): the largest sub-group that still
  // leaves eight CTAs an SM.
  const bool Grouped = C.Hq < C.H || C.Hk < C.H;
  const int64_t Shared = std::gcd(C.H / C.Hq, C.H / C.Hk);
  A.group_heads = 1;
  if (Shared > 1) {
    const int64_t Want = 8 * int64_t(currentDevice().MultiProcessors);
    for (int64_t S = Shared; S >= 1; --S)
      if (Shared % S == 0 && (NC * C.B * C.H / S >= Want || S == 1)) {
        A.group_heads = int(S);
        break;
      }
  }
  // State pairs (linear_chunk_pairs.cuh) in the plain chunk gradients of
  // one value slice only: the grouped kernel and the slices' partials read
  // every chunk's states.
  A.pairs = Smem.GradsPairs && !Grouped && Slices == 1 &&
            linearStatePairsAllowed();
  const int64_t PartsQ = C.H / C.Hq / A.group_heads,
                PartsK = C.H / C.Hk / A.group_heads;

  // Workspace regions (see LinearArgs), each 256-byte aligned; an unused
  // one is empty and its pointer null.
  const int64_t ElemBytes = 2;
  const int64_t StateBytes = BH * NC * D * Spec.HeadDimV * ElemBytes;
  ArenaLayout W;
  const unsigned H = W.add(StateBytes), DH = W.add(StateBytes),
                 Z = W.add(A.z_parts * BH * NC * 4),
                 DQ = W.add(Slices > 1 ? Slices * BHT * D * 4 : 0),
                 DK = W.add(Slices > 1 ? Slices * BHT * D * 4 : 0),
                 Vin = W.add(A.vin_parts * NI * BHT * 4),
                 Dlam = W.add(BHT * 4), Cin = W.add(NI * BHT * 4),
                 GQ = W.add(Grouped ? C.B * C.Hq * PartsQ * C.T * D * 4 : 0),
                 GK = W.add(Grouped ? C.B * C.Hk * PartsK * C.T * D * 4 : 0);
  CUdeviceptr Base = Work.carve(W);
  A.ws_h = W.at(Base, H);
  A.ws_dh = W.at(Base, DH);
  A.ws_z = W.at<float>(Base, Z);
  A.ws_dq = W.at<float>(Base, DQ);
  A.ws_dk = W.at<float>(Base, DK);
  A.ws_vin = W.at<float>(Base, Vin);
  A.ws_dlam = W.at<float>(Base, Dlam);
  A.ws_cin = W.at<float>(Base, Cin);
  A.ws_gq = W.at<float>(Base, GQ);
  A.ws_gk = W.at<float>(Base, GK);

  std::vector<uint64_t> Slots = linearInputSlots(G, Inputs, C.H);
  void *Params[] = {&A, Slots.data()};
  launchLinear(States, unsigned(Slices), unsigned(StateRows),
               unsigned(2 * D / codegen::LinearStateRows),
               unsigned(codegen::LinearStateWarps * 32), Smem.States, Stream,
               Params, "launch attnc_linear_bwd_states");
  if (Slices > 1) {
    // One CTA per (chunk, head, slice), partial sums; then the per-token
    // step over the slices (and the sub-groups' heads).
    launchLinear(Grads, unsigned(NC), unsigned(BH), unsigned(Slices),
                 unsigned(Spec.Config.BwdWarps * 32), Smem.Grads, Stream,
                 Params, "launch attnc_linear_bwd_chunk");
    launchLinear(Combine, unsigned((C.T + 7) / 8),
                 unsigned(C.B * C.H / A.group_heads), 1, 256, 0, Stream,
                 Params, "launch attnc_linear_bwd_combine");
  } else {
    launchLinear(Grouped ? GroupedGrads : Grads, unsigned(NC),
                 unsigned(C.B * C.H / A.group_heads), 1,
                 unsigned(Spec.Config.BwdWarps * 32),
                 Grouped ? Smem.GroupedGrads : Smem.Grads, Stream, Params,
                 Grouped ? "launch attnc_linear_bwd_chunk_grouped"
                         : "launch attnc_linear_bwd_chunk");
  }
  for (int Which = 0; Grouped && Which < 2; ++Which) {
    attnc::LinearPartialReduceArgs PA{};
    PA.ws = Which == 0 ? A.ws_gq : A.ws_gk;
    PA.out = Which == 0 ? T.DQ.Data : T.DK.Data;
    const int64_t(&S)[3] = Which == 0 ? R.DQ : R.DK;
    PA.sb = S[0];
    PA.sh = S[1];
    PA.ss = S[2];
    PA.batch = int(C.B);
    PA.heads_out = int(Which == 0 ? C.Hq : C.Hk);
    PA.parts = int(Which == 0 ? PartsQ : PartsK);
    PA.seq = int(C.T);
    PA.dim = int(D);
    void *PP[] = {&PA};
    launchLinear(PartialReduce, unsigned((C.T * D + 511) / 512),
                 unsigned(C.B * PA.heads_out), 1, 256, 0, Stream, PP,
                 "launch attnc_linear_bwd_partial_reduce");
  }
  launchLinear(Decay, unsigned((NC + 3) / 4), unsigned(BH), 1, 128, 0, Stream,
               Params, "launch attnc_linear_bwd_decay");

  int64_t Index = 0;
  for (const ir::InputDecl &Decl : G.decls().Inputs) {
    auto It = InputGrads.find(Decl.Name);
    int64_t I = Index++;
    if (It == InputGrads.end())
      continue;
    attnc::LinearInputReduceArgs RA{};
    RA.cin = A.ws_cin + I * BHT;
    RA.out = static_cast<float *>(It->second.Data);
    RA.kind = Decl.Shape == ir::InputShape::PerRow    ? 0
              : Decl.Shape == ir::InputShape::PerHead ? 1
                                                      : 2;
    RA.batch = int(C.B);
    RA.heads = int(C.H);
    RA.seq = int(C.T);
    unsigned Grid = RA.kind == 0 ? unsigned(std::min<int64_t>(
                                       (BHT + 255) / 256, 65535))
                    : RA.kind == 1 ? unsigned(C.H)
                                   : 1u;
    void *RP[] = {&RA};
    launchLinear(InputReduce, Grid, 1, 1, 256, 0, Stream, RP,
                 "launch attnc_linear_bwd_input_reduce");
  }
}

} // namespace attn::runtime
