// Validation of LinearAttention call arguments: q, k, v, out and their
// gradients as a group, decay, states and input gradients; the
// single-tensor checks are ValidateCommon's.
#include "LinearValidate.h"

#include "EnvSwitch.h"
#include "ValidateCommon.h"

#include "attn/Error.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Validate.h"

#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace attn::runtime {

namespace {

/// A float32 (or \p Elem) tensor of exactly \p Want, contiguous unless
/// \p AnyStrides.
void checkF32(const std::string &Name, const TensorView &T,
              const std::vector<int64_t> &Want, bool AnyStrides = false,
              DType Elem = DType::F32) {
  checkNotNull(Name, T);
  checkElemType(Name, T, Elem);
  checkShape(Name, T, Want);
  if (T.Strides.size() != T.Shape.size())
    invalid(fmt::format("{}: strides must have {} entries, got {}", Name,
                        T.Shape.size(), T.Strides.size()));
  checkAligned(Name, T, 4);
  if (AnyStrides) {
    checkNonNegativeStrides(Name, T);
    return;
  }
  int64_t Expect = 1;
  for (int I = int(Want.size()) - 1; I >= 0; --I) {
    if (Want[I] > 1 && T.Strides[I] != Expect)
      invalid(fmt::format("{}: must be contiguous (strides {} for shape {})",
                          Name, shapeText(T.Strides), shapeText(T.Shape)));
    Expect *= Want[I];
  }
}

/// q, k, v, decay, inputs, and the shared rules between them. \p Packed:
/// a packed batch's [T, heads, dim] tensors (batch 1), whatever the
/// signature's layout.
LinearCallShape checkCommon(const CompiledDefinition &Def,
                            const LinearSignature &Sig, const TensorView &Q,
                            const TensorView &K, const TensorView &V,
                            const TensorView *Decay, const InputMap &Inputs,
                            const TensorView *InitialState,
                            bool Packed = false) {
  const ir::Graph &G = *Def.Graph;
  if (Sig.TensorLayout == Layout::THD && !Packed)
    invalid("signature: layout thd is not a signature layout of linear "
            "attention (packed batches go to forwardVarlen); expected bshd "
            "or bhsd");
  const Layout L = Packed ? Layout::THD : Sig.TensorLayout;
  SeqTensor q = checkSeqTensor("q", Q, Sig.Dtype, L, Sig.HeadDim);
  SeqTensor k = checkSeqTensor("k", K, Sig.Dtype, L, Sig.HeadDim);
  SeqTensor v = checkSeqTensor("v", V, Sig.Dtype, L, Sig.HeadDimV);
  if (k.B != v.B || q.B != v.B)
    invalid(fmt::format("q, k: batch must equal v's ({}), got {} and {}", v.B,
                        q.B, k.B));
  if (q.S != v.S || k.S != v.S)
    invalid(fmt::format("q, k: seq must equal v's ({}), got {} and {}", v.S,
                        q.S, k.S));
  if (v.H % q.H != 0)
    invalid(fmt::format("q: heads ({}) must divide v's heads ({})", q.H, v.H));
  if (v.H % k.H != 0)
    invalid(fmt::format("k: heads ({}) must divide v's heads ({})", k.H, v.H));
  if (v.S > (1 << 30))
    invalid(
        fmt::format("v: seq {} is more than the 2^30 tokens supported", v.S));
  if (v.B * v.H > 65535)
    invalid(fmt::format("v: batch x heads is {}; at most 65535 are supported",
                        v.B * v.H));
  LinearCallShape C;
  C.B = v.B;
  C.H = v.H;
  C.Hq = q.H;
  C.Hk = k.H;
  C.T = v.S;
  storeStrides(C.Q, q);
  storeStrides(C.K, k);
  storeStrides(C.V, v);
  bool Reads = codegen::linearReadsDecay(Def);
  if (Reads && !Decay)
    invalid(fmt::format("decay: required, a float32 tensor [{}, {}, {}]; the "
                        "decay_mod of '{}' reads it",
                        C.B, C.H, C.T, G.name()));
  if (!Reads && Decay)
    invalid(fmt::format("decay: must be null; the decay_mod of '{}' does not "
                        "read the decay",
                        G.name()));
  if (Decay) {
    checkF32("decay", *Decay, {C.B, C.H, C.T}, true);
    for (int I = 0; I < 3; ++I)
      C.Decay[I] = Decay->Strides[I];
  }
  checkInputs(G, C.B, C.H, C.T, C.T, Inputs);
  if (InitialState)
    checkF32("initial_state", *InitialState,
             {C.B, C.H, Sig.HeadDim, Sig.HeadDimV});
  return C;
}

void checkLike(const char *Name, const SeqTensor &G, const char *Of,
               const LinearCallShape &C, int64_t Heads) {
  runtime::checkLike(Name, G, Of, C.B, C.T, Heads);
}

} // namespace

LinearCallShape validateLinearForward(
    const CompiledDefinition &Def, const LinearSignature &Sig,
    const TensorView &Q, const TensorView &K, const TensorView &V,
    const TensorView &Out, const TensorView *Decay, const InputMap &Inputs,
    const TensorView *InitialState, const TensorView *FinalState) {
  LinearCallShape C =
      checkCommon(Def, Sig, Q, K, V, Decay, Inputs, InitialState);
  SeqTensor o =
      checkSeqTensor("out", Out, Sig.Dtype, Sig.TensorLayout, Sig.HeadDimV);
  checkLike("out", o, "v", C, C.H);
  storeStrides(C.O, o);
  if (FinalState)
    checkF32("final_state", *FinalState, {C.B, C.H, Sig.HeadDim, Sig.HeadDimV});
  return C;
}

namespace {

/// A packed batch's offsets: an int32 [batch + 1] vector on the device (its
/// values are not read here); returns the number of sequences.
int64_t checkCuSeqlens(const TensorView &Cu, int64_t Heads) {
  checkNotNull("cu_seqlens", Cu);
  checkElemType("cu_seqlens", Cu, DType::I32);
  if (Cu.Shape.size() != 1 || Cu.Shape[0] < 2)
    invalid(fmt::format("cu_seqlens: expected [batch + 1] with batch >= 1, "
                        "got shape {}",
                        shapeText(Cu.Shape)));
  checkF32("cu_seqlens", Cu, Cu.Shape, false, DType::I32);
  const int64_t Seqs = Cu.Shape[0] - 1;
  if (Seqs * Heads > 65535)
    invalid(fmt::format("cu_seqlens: sequences x heads is {}; at most 65535 "
                        "are supported",
                        Seqs * Heads));
  return Seqs;
}

/// The backward's checks, of a padded call or (\p Packed) of a packed one
/// (tensors [T, heads, dim], decay and per-token gradients [1, H, T]) whose
/// states are [\p Seqs, H, D, DV] (the initial state checked here).
LinearBackwardShape checkBackward(const CompiledDefinition &Def,
                                  const LinearSignature &Sig,
                                  const LinearBackwardTensors &T,
                                  const InputMap &Inputs,
                                  const LinearInputGrads &Grads, bool Packed,
                                  const TensorView *CuSeqlens) {
  const ir::Graph &G = *Def.Graph;
  LinearBackwardShape R;
  LinearCallShape &C = R.Fwd;
  C = checkCommon(Def, Sig, T.Q, T.K, T.V, T.Decay, Inputs,
                  Packed ? nullptr : T.InitialState, Packed);
  const Layout L = Packed ? Layout::THD : Sig.TensorLayout;
  int64_t Seqs = C.B;
  if (Packed) {
    Seqs = checkCuSeqlens(*CuSeqlens, C.H);
    if (T.InitialState)
      checkF32("initial_state", *T.InitialState,
               {Seqs, C.H, Sig.HeadDim, Sig.HeadDimV});
  }
  SeqTensor d = checkSeqTensor("dout", T.DOut, Sig.Dtype, L, Sig.HeadDimV);
  checkLike("dout", d, "v", C, C.H);
  storeStrides(R.DO, d);
  SeqTensor dq = checkSeqTensor("dq", T.DQ, Sig.Dtype, L, Sig.HeadDim);
  checkLike("dq", dq, "q", C, C.Hq);
  storeStrides(R.DQ, dq);
  SeqTensor dk = checkSeqTensor("dk", T.DK, Sig.Dtype, L, Sig.HeadDim);
  checkLike("dk", dk, "k", C, C.Hk);
  storeStrides(R.DK, dk);
  SeqTensor dv = checkSeqTensor("dv", T.DV, Sig.Dtype, L, Sig.HeadDimV);
  checkLike("dv", dv, "v", C, C.H);
  storeStrides(R.DV, dv);
  std::vector<int64_t> State = {Seqs, C.H, Sig.HeadDim, Sig.HeadDimV};
  if (T.DFinalState)
    checkF32("dfinal_state", *T.DFinalState, State);
  if (T.DInitialState)
    checkF32("dinitial_state", *T.DInitialState, State);
  if (T.DDecay) {
    if (!T.Decay)
      invalid(fmt::format("ddecay: must be null; '{}' takes no decay input",
                          G.name()));
    checkF32("ddecay", *T.DDecay, {C.B, C.H, C.T});
  }
  for (const auto &[Name, View] : Grads) {
    const ir::InputDecl *D = G.decls().findInput(Name);
    std::string What = "input gradient '" + Name + "'";
    if (!D)
      invalid(What + ": '" + G.name() + "' declares no such input");
    std::vector<int64_t> Want;
    switch (D->Shape) {
    case ir::InputShape::Scalar:
      Want =
          View.Shape.empty() ? std::vector<int64_t>{} : std::vector<int64_t>{1};
      break;
    case ir::InputShape::PerHead:
      Want = {C.H};
      break;
    case ir::InputShape::PerRow:
      Want = {C.B, C.H, C.T};
      break;
    case ir::InputShape::PerKey:
    case ir::InputShape::Full:
    case ir::InputShape::PerQueryToken:
    case ir::InputShape::PerKeyToken:
      invalid(fmt::format("{}: gradients of {} inputs are not computed by "
                          "the linear kernels",
                          What, ir::inputShapeName(D->Shape).str()));
    }
    checkF32(What + " (" + ir::inputShapeName(D->Shape).str() + ")", View,
             Want);
  }
  return R;
}

} // namespace

LinearBackwardShape validateLinearBackward(const CompiledDefinition &Def,
                                           const LinearSignature &Sig,
                                           const LinearBackwardTensors &T,
                                           const InputMap &Inputs,
                                           const LinearInputGrads &Grads) {
  return checkBackward(Def, Sig, T, Inputs, Grads, false, nullptr);
}

LinearVarlenBackwardShape
validateLinearVarlenBackward(const CompiledDefinition &Def,
                             const LinearSignature &Sig,
                             const LinearVarlenBackwardTensors &T,
                             const InputMap &Inputs,
                             const LinearInputGrads &Grads) {
  LinearVarlenBackwardShape R;
  R.Bwd = checkBackward(Def, Sig, T.asBackward(), Inputs, Grads, true,
                        &T.CuSeqlens);
  R.Seqs = T.CuSeqlens.Shape[0] - 1;
  return R;
}

LinearDecodeShape validateLinearDecode(const CompiledDefinition &Def,
                                       const LinearSignature &Sig,
                                       const LinearDecodeTensors &T,
                                       const InputMap &Inputs) {
  LinearDecodeShape R;
  LinearCallShape &C = R.Call;
  C = checkCommon(Def, Sig, T.Q, T.K, T.V, T.Decay, Inputs, nullptr);
  if (C.T > LinearDecodeMaxTokens)
    invalid(fmt::format("v: {} new tokens per sequence; the decode step takes "
                        "1 to {} (use forward() for a prompt)",
                        C.T, LinearDecodeMaxTokens));
  SeqTensor o =
      checkSeqTensor("out", T.Out, Sig.Dtype, Sig.TensorLayout, Sig.HeadDimV);
  checkLike("out", o, "v", C, C.H);
  storeStrides(C.O, o);

  const TensorView &In = T.StateIn;
  checkNotNull("state_in", In);
  if (In.Shape.size() != 4)
    invalid(fmt::format("state_in: expected rank 4 [pool, heads, head_dim, "
                        "head_dim_v], got rank {}",
                        In.Shape.size()));
  R.Pool = In.Shape[0];
  if (R.Pool < 1 || R.Pool > (1 << 30))
    invalid(fmt::format("state_in: pool size {} must be between 1 and 2^30",
                        R.Pool));
  std::vector<int64_t> State = {R.Pool, C.H, Sig.HeadDim, Sig.HeadDimV};
  checkF32("state_in", In, State);
  checkAligned("state_in", In, 16);
  checkF32("state_out", T.StateOut, State);
  checkAligned("state_out", T.StateOut, 16);
  if (T.StateOut.Data != In.Data) {
    // Another buffer must not overlap: the kernel writes each slice of S
    // after reading only its own.
    auto Addr = [](const TensorView &V) {
      return reinterpret_cast<uintptr_t>(V.Data);
    };
    uintptr_t Bytes = uintptr_t(R.Pool * C.H * Sig.HeadDim * Sig.HeadDimV) * 4;
    if (Addr(T.StateOut) < Addr(In) + Bytes && Addr(In) < Addr(T.StateOut) + Bytes)
      invalid("state_out: overlaps state_in without being the same tensor; "
              "pass the same tensor to update in place");
  }
  if (T.StateIndex)
    checkF32("state_index", *T.StateIndex, {C.B}, false, DType::I32);
  else if (R.Pool != C.B)
    invalid(fmt::format("state_in: without state_index the pool holds one "
                        "state per sequence: expected {} entries, got {}",
                        C.B, R.Pool));
  if (T.Positions)
    checkF32("positions", *T.Positions, {C.B}, false, DType::I32);
  return R;
}

LinearVarlenShape validateLinearVarlen(const CompiledDefinition &Def,
                                       const LinearSignature &Sig,
                                       const LinearVarlenTensors &T,
                                       const InputMap &Inputs) {
  LinearVarlenShape R;
  LinearCallShape &C = R.Call;
  C = checkCommon(Def, Sig, T.Q, T.K, T.V, T.Decay, Inputs, nullptr,
                  /*Packed=*/true);
  SeqTensor o = checkSeqTensor("out", T.Out, Sig.Dtype, Layout::THD,
                               Sig.HeadDimV);
  checkLike("out", o, "v", C, C.H);
  storeStrides(C.O, o);
  R.Seqs = checkCuSeqlens(T.CuSeqlens, C.H);
  std::vector<int64_t> State = {R.Seqs, C.H, Sig.HeadDim, Sig.HeadDimV};
  if (T.InitialState)
    checkF32("initial_state", *T.InitialState, State);
  if (T.FinalState)
    checkF32("final_state", *T.FinalState, State);
  return R;
}

/// The packed forward's CTA rows beyond one a sequence: up to one more for
/// each sequence, so that the longest ones (which the device picks, their
/// lengths being device data) walk their chunks in two parts
/// (lin::seq_job), only where the unsplit grid (\p Ctas) is under one
/// wave of \p Slots CTAs. A split adds the second part's state-only walk
/// (about a third of the sequence's work), which pays only where SMs would
/// otherwise idle: at 2.6 waves (32 sequences of 64–8192 tokens, H32, an
/// H100) it made the packed forward 7–22% slower (docs/linear.md). None
/// above the 128 sequences the kernel ranks (lin::kLongestFirstMaxSeqs) or
/// past the grid's 65535 rows. ATTNC_LINEAR_SPLIT=0 or 1, a measurement
/// switch, turns it off or on whatever the waves.
int linearVarlenSplitRows(int64_t Seqs, int64_t Heads, int64_t Ctas, int64_t Slots) {
  const std::optional<bool> Forced =
      envSwitch("ATTNC_LINEAR_SPLIT", "no sequence split",
                "split the longest sequences whatever the waves");
  constexpr int64_t MaxRanked = 128;
  if (Seqs > MaxRanked || 2 * Seqs * Heads > 65535)
    return 0;
  if (Forced)
    return *Forced ? int(Seqs) : 0;
  return Ctas < Slots ? int(Seqs) : 0;
}

} // namespace attn::runtime
