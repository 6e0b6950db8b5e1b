// The DSL's building blocks (Library.h): online softmax, masks, score_mods.
#include "attn/dsl/Library.h"

#include "attn/Error.h"

#include <cmath>
#include <string>
#include <utility>

namespace attn::dsl {

namespace {
/// Rowscales m (running max) and r (running sum); final lse = log r + m.
/// The operations are traced in one fixed order, so that a definition built
/// on it prints the same IR whichever compiler builds it.
class OnlineSoftmax final : public OnlineFunc {
public:
  explicit OnlineSoftmax(bool WrittenBackward)
      : OnlineFunc({{"m", Var("-inf")}, {"r", Var(0.0)}},
                   {{"lse", Var(0.0)}}),
        WrittenBackward(WrittenBackward) {}

  OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                             SymbolScalar, SymbolScalar,
                             SymbolScalar) const override {
    SymbolScalar m = rs["m"], r = rs["r"];
    SymbolScalar m_new = m.max(scores.get_reduce("max"));
    SymbolScalar o_scale = (m - m_new).exp();
    r = r * o_scale;
    SymbolScalar p = (scores - m_new).exp();
    r = r + p.get_reduce("sum");
    return {p, {{"m", m_new}, {"r", r}}, o_scale};
  }

  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    SymbolScalar out = o / rs["r"];
    SymbolScalar lse = rs["r"].log() + rs["m"];
    return {out, {{"lse", lse}}};
  }

  SymbolScalar forward(SymbolScalar scores, const Rowscales &final_rowscales,
                       SymbolScalar, SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (scores - final_rowscales["lse"]).exp();
  }

  std::optional<SymbolScalar>
  backward(SymbolScalar dp, SymbolScalar p, const Rowscales &,
           SymbolScalar doosum, SymbolScalar, SymbolScalar, SymbolScalar,
           SymbolScalar) const override {
    if (!WrittenBackward)
      return std::nullopt;
    return (dp - doosum) * p;
  }

private:
  bool WrittenBackward;
};
} // namespace

std::shared_ptr<const OnlineFunc> onlineSoftmax(bool WrittenBackward) {
  return std::make_shared<OnlineSoftmax>(WrittenBackward);
}

namespace masks {

MaskMod causal() {
  return [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
            SymbolScalar kv_idx) { return q_idx >= kv_idx; };
}

MaskMod slidingWindow(long long Window) {
  if (Window < 1)
    throw UserError("masks::slidingWindow: window " + std::to_string(Window) +
                    " is not a number of keys; expected >= 1");
  return [Window](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                  SymbolScalar kv_idx) {
    SymbolScalar Keep = q_idx >= kv_idx;
    SymbolScalar InWindow = q_idx - kv_idx < Window;
    return Keep & InWindow;
  };
}

MaskMod prefixLm(const std::string &PrefixInput) {
  return [PrefixInput](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                       SymbolScalar kv_idx, const CustomInputs &in) {
    SymbolScalar Keep = q_idx >= kv_idx;
    SymbolScalar InPrefix = kv_idx < in[PrefixInput];
    return Keep | InPrefix;
  };
}

MaskMod document(const std::string &QueryIds, const std::string &KeyIds) {
  return [QueryIds, KeyIds](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                            SymbolScalar kv_idx, const CustomInputs &in) {
    SymbolScalar Keep = q_idx >= kv_idx;
    SymbolScalar QueryId = in[QueryIds];
    SymbolScalar SameDocument = QueryId == in[KeyIds];
    return Keep & SameDocument;
  };
}

MaskMod chunked(const std::string &ChunkInput) {
  return [ChunkInput](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                      SymbolScalar kv_idx, const CustomInputs &in) {
    SymbolScalar Keep = q_idx >= kv_idx;
    SymbolScalar QueryChunk = floordiv(q_idx, in[ChunkInput]);
    SymbolScalar KeyChunk = floordiv(kv_idx, in[ChunkInput]);
    return Keep & (QueryChunk == KeyChunk);
  };
}

namespace {
/// A & B (\p And) or A | B, each traced in that order.
MaskMod combine(MaskMod A, MaskMod B, bool And) {
  return [A = std::move(A), B = std::move(B), And](
             SymbolScalar b, SymbolScalar h, SymbolScalar q_idx,
             SymbolScalar kv_idx, const CustomInputs &in) {
    SymbolScalar First = A(b, h, q_idx, kv_idx, in);
    SymbolScalar Second = B(b, h, q_idx, kv_idx, in);
    return And ? First & Second : First | Second;
  };
}
} // namespace

MaskMod both(MaskMod A, MaskMod B) {
  return combine(std::move(A), std::move(B), /*And=*/true);
}

MaskMod either(MaskMod A, MaskMod B) {
  return combine(std::move(A), std::move(B), /*And=*/false);
}

} // namespace masks

namespace score_mods {

ScoreMod scaled() {
  return [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
            SymbolScalar, SymbolScalar, SymbolScalar) {
    return score * in.head_dim().rsqrt();
  };
}

ScoreMod softcap(double Cap) {
  if (!std::isfinite(Cap) || Cap <= 0.0)
    throw UserError("score_mods::softcap: cap " + std::to_string(Cap) +
                    " is not a positive finite number; expected > 0");
  return [Cap](SymbolScalar score, const CustomInputs &, SymbolScalar,
               SymbolScalar, SymbolScalar, SymbolScalar) {
    SymbolScalar Capped = (score / Cap).tanh();
    return Capped * Cap;
  };
}

ScoreMod alibi(const std::string &SlopesInput) {
  return [SlopesInput](SymbolScalar score, const CustomInputs &in,
                       SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                       SymbolScalar kv_idx) {
    SymbolScalar Distance = kv_idx - q_idx;
    SymbolScalar Bias = in[SlopesInput] * Distance;
    return score + Bias;
  };
}

ScoreMod then(ScoreMod First, ScoreMod Second) {
  return [First = std::move(First), Second = std::move(Second)](
             SymbolScalar score, const CustomInputs &in, SymbolScalar b,
             SymbolScalar h, SymbolScalar q_idx, SymbolScalar kv_idx) {
    SymbolScalar Inner = First(score, in, b, h, q_idx, kv_idx);
    return Second(Inner, in, b, h, q_idx, kv_idx);
  };
}

} // namespace score_mods

} // namespace attn::dsl
