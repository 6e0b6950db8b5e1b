// Definitions built through the C interface: an AttentionDef or
// LinearAttentionDef whose functions call C callbacks with symbol handles,
// traced by the same tracer as the C++ examples.
#include "DslInternal.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"

#include <fmt/format.h>

#include <initializer_list>
#include <vector>

using namespace attn;
using namespace attn::capi;
using dsl::SymbolScalar;

namespace {

struct Callback {
  attnc_trace_fn Fn = nullptr;
  void *User = nullptr;
};

/// Calls \p C for \p Function with \p Args; the result, or the callback's
/// failure thrown as a UserError (prefixed with the function's name unless
/// the callback gave the whole message, as it does for an attnc error).
attnc_trace_result invoke(const Callback &C, const char *Function,
                          std::initializer_list<SymbolScalar> Args,
                          const dsl::CustomInputs *In,
                          const dsl::Rowscales *Rs,
                          const dsl::Rowscales *RsB = nullptr) {
  std::vector<attnc_symbol> A;
  for (const SymbolScalar &S : Args)
    A.push_back(toC(S));
  attnc_trace_call Call{Function,
                        A.data(),
                        A.size(),
                        reinterpret_cast<const attnc_inputs *>(In),
                        reinterpret_cast<const attnc_rowscales *>(Rs),
                        reinterpret_cast<const attnc_rowscales *>(RsB)};
  attnc_trace_result R;
  R.Function = Function;
  if (C.Fn(C.User, &Call, &R) != 0) {
    if (R.Failure.empty())
      throw UserError(std::string(Function) +
                      ": the callback failed without a message");
    throw UserError(R.Verbatim ? R.Failure
                               : std::string(Function) + ": " + R.Failure);
  }
  return R;
}

/// The function's value, which every function but backward must give.
SymbolScalar valueOf(const attnc_trace_result &R) {
  if (!R.Value)
    throw UserError(R.Function + ": the callback returned no value");
  return *R.Value;
}

/// An online function whose four functions are one callback's.
class CallbackOnlineFunc final : public dsl::OnlineFunc {
public:
  CallbackOnlineFunc(Decls Online, Decls Final, Callback C)
      : OnlineFunc(std::move(Online), std::move(Final)), C(C) {}

  dsl::OnlineFwdResult online_fwd(SymbolScalar scores,
                                  const dsl::Rowscales &rs, SymbolScalar b,
                                  SymbolScalar h,
                                  SymbolScalar q_idx) const override {
    attnc_trace_result R =
        invoke(C, "online_fwd", {scores, b, h, q_idx}, &inputs(), &rs);
    dsl::OnlineFwdResult Out{valueOf(R), R.Rowscales, 1.0};
    if (R.OScale)
      Out.o_scale = *R.OScale;
    else if (R.OScaleNumber)
      Out.o_scale = *R.OScaleNumber;
    return Out;
  }

  dsl::EpilogueResult online_fwd_epilogue(SymbolScalar o,
                                          const dsl::Rowscales &rs,
                                          SymbolScalar b, SymbolScalar h,
                                          SymbolScalar q_idx) const override {
    attnc_trace_result R =
        invoke(C, "online_fwd_epilogue", {o, b, h, q_idx}, &inputs(), &rs);
    return {valueOf(R), R.Rowscales};
  }

  SymbolScalar forward(SymbolScalar scores, const dsl::Rowscales &fr,
                       SymbolScalar b, SymbolScalar h, SymbolScalar q_idx,
                       SymbolScalar kv_idx) const override {
    return valueOf(invoke(C, "forward", {scores, b, h, q_idx, kv_idx},
                          &inputs(), &fr));
  }

  std::optional<SymbolScalar>
  backward(SymbolScalar dp, SymbolScalar scores, const dsl::Rowscales &fr,
           SymbolScalar doosum, SymbolScalar b, SymbolScalar h,
           SymbolScalar q_idx, SymbolScalar kv_idx) const override {
    return invoke(C, "backward", {dp, scores, doosum, b, h, q_idx, kv_idx},
                  &inputs(), &fr)
        .Value;
  }

  std::optional<dsl::CombineResult>
  combine(const dsl::Rowscales &a, const dsl::Rowscales &b) const override {
    attnc_trace_result R = invoke(C, "combine", {}, &inputs(), &a, &b);
    bool Given = !R.Rowscales.entries().empty() || R.OScale ||
                 R.OScaleNumber || R.OScaleB || R.OScaleBNumber;
    if (!Given)
      return std::nullopt;
    dsl::CombineResult Out{R.Rowscales, 1.0, 1.0};
    if (R.OScale)
      Out.o_scale_a = *R.OScale;
    else if (R.OScaleNumber)
      Out.o_scale_a = *R.OScaleNumber;
    if (R.OScaleB)
      Out.o_scale_b = *R.OScaleB;
    else if (R.OScaleBNumber)
      Out.o_scale_b = *R.OScaleBNumber;
    return Out;
  }

private:
  Callback C;
};

dsl::ScoreMod scoreMod(Callback C) {
  return [C](SymbolScalar S, const dsl::CustomInputs &In, SymbolScalar B,
             SymbolScalar H, SymbolScalar Q, SymbolScalar K) {
    return valueOf(invoke(C, "score_mod", {S, B, H, Q, K}, &In, nullptr));
  };
}

dsl::MaskMod maskMod(Callback C) {
  return [C](SymbolScalar B, SymbolScalar H, SymbolScalar Q, SymbolScalar K,
             const dsl::CustomInputs &In) {
    return valueOf(invoke(C, "mask_mod", {B, H, Q, K}, &In, nullptr));
  };
}

dsl::ElementMod elementMod(Callback C, const char *Function) {
  return [C, Function](SymbolScalar X, const dsl::CustomInputs &In,
                       SymbolScalar B, SymbolScalar H, SymbolScalar T) {
    return valueOf(invoke(C, Function, {X, B, H, T}, &In, nullptr));
  };
}

dsl::OnlineFunc::Decls decls(const char *const *Names, const double *Inits,
                             size_t N, const char *What) {
  dsl::OnlineFunc::Decls Out;
  for (size_t I = 0; I < N; ++I) {
    if (!Names || !Names[I] || !Inits)
      throw UserError(fmt::format("attnc_builder_set_online: {} {} has no "
                                  "name or initial value",
                                  What, I));
    Out.emplace_back(Names[I], dsl::Var(Inits[I]));
  }
  return Out;
}

} // namespace

/// A definition being built: the C++ definition the callbacks fill in.
struct attnc_definition_builder {
  std::shared_ptr<dsl::DefinitionBase> Def;
  dsl::AttentionDef *attention() const {
    return Def->kind() == ir::DefinitionKind::Transformer
               ? static_cast<dsl::AttentionDef *>(Def.get())
               : nullptr;
  }
  dsl::LinearAttentionDef *linear() const {
    return Def->kind() == ir::DefinitionKind::Linear
               ? static_cast<dsl::LinearAttentionDef *>(Def.get())
               : nullptr;
  }
};

attnc_status attnc_builder_new(const char *name, const char *kind,
                               attnc_definition_builder **out) {
  return guarded([&] {
    requireNonNull(name, "attnc_builder_new", "name");
    requireNonNull(kind, "attnc_builder_new", "kind");
    requireNonNull(out, "attnc_builder_new", "out");
    *out = nullptr;
    std::string K = kind;
    std::shared_ptr<dsl::DefinitionBase> D;
    if (K == "attention")
      D = std::make_shared<dsl::AttentionDef>(name);
    else if (K == "linear")
      D = std::make_shared<dsl::LinearAttentionDef>(name);
    else
      throw UserError("attnc_builder_new: kind '" + K +
                      "': expected attention or linear");
    *out = new attnc_definition_builder{std::move(D)};
  });
}

void attnc_builder_release(attnc_definition_builder *builder) {
  delete builder;
}

attnc_status attnc_builder_set_description(attnc_definition_builder *builder,
                                           const char *description) {
  return guarded([&] {
    requireNonNull(builder, "attnc_builder_set_description", "builder");
    builder->Def->description = description ? description : "";
  });
}

attnc_status attnc_builder_declare_input(attnc_definition_builder *builder,
                                         const char *name, const char *shape,
                                         const char *type, int has_range,
                                         double lo, double hi) {
  return guarded([&] {
    requireNonNull(builder, "attnc_builder_declare_input", "builder");
    requireNonNull(name, "attnc_builder_declare_input", "name");
    requireNonNull(shape, "attnc_builder_declare_input", "shape");
    std::optional<ir::InputShape> S = ir::inputShapeFromName(shape);
    if (!S)
      throw UserError(fmt::format(
          "custom input '{}': unknown shape class '{}'; expected scalar, "
          "per_head, per_row, per_key, full, per_query_token or "
          "per_key_token",
          name, shape));
    std::optional<ir::InputType> T =
        ir::inputTypeFromName(type ? type : "f32");
    if (!T)
      throw UserError(fmt::format(
          "custom input '{}': unknown type '{}'; expected f32 or i32", name,
          type));
    dsl::CustomInputs &In = builder->Def->inputs;
    if (has_range)
      In.declare(name, *S, *T, lo, hi);
    else
      In.declare(name, *S, *T);
  });
}

attnc_status attnc_builder_requires_grad(attnc_definition_builder *builder) {
  return guarded([&] {
    requireNonNull(builder, "attnc_builder_requires_grad", "builder");
    builder->Def->inputs.requiresGrad();
  });
}

attnc_status attnc_builder_set_function(attnc_definition_builder *builder,
                                        const char *function,
                                        attnc_trace_fn fn, void *user) {
  return guarded([&] {
    requireNonNull(builder, "attnc_builder_set_function", "builder");
    requireNonNull(function, "attnc_builder_set_function", "function");
    std::string F = function;
    Callback C{fn, user};
    if (dsl::AttentionDef *A = builder->attention()) {
      if (F == "score_mod")
        A->score_mod = fn ? scoreMod(C) : dsl::ScoreMod();
      else if (F == "mask_mod")
        A->mask_mod = fn ? maskMod(C) : dsl::MaskMod();
      else
        throw UserError("attention definition '" + A->name +
                        "' has no function '" + F +
                        "'; it has score_mod and mask_mod (and an online "
                        "function)");
      return;
    }
    dsl::LinearAttentionDef *L = builder->linear();
    dsl::ElementMod *M = F == "q_mod"       ? &L->q_mod
                         : F == "k_mod"     ? &L->k_mod
                         : F == "v_mod"     ? &L->v_mod
                         : F == "decay_mod" ? &L->decay_mod
                                            : nullptr;
    if (!M)
      throw UserError("linear attention definition '" + L->name +
                      "' has no function '" + F +
                      "'; it has q_mod, k_mod, v_mod and decay_mod");
    // The name outlives the definition: one of the literals above.
    const char *Name = F == "q_mod"   ? "q_mod"
                       : F == "k_mod" ? "k_mod"
                       : F == "v_mod" ? "v_mod"
                                      : "decay_mod";
    *M = fn ? elementMod(C, Name) : dsl::ElementMod();
  });
}

attnc_status attnc_builder_set_online(
    attnc_definition_builder *builder, const char *const *online_names,
    const double *online_inits, size_t num_online,
    const char *const *final_names, const double *final_inits,
    size_t num_final, attnc_trace_fn fn, void *user) {
  return guarded([&] {
    requireNonNull(builder, "attnc_builder_set_online", "builder");
    requireNonNull(reinterpret_cast<const void *>(fn),
                   "attnc_builder_set_online", "fn");
    dsl::AttentionDef *A = builder->attention();
    if (!A)
      throw UserError("linear attention definition '" + builder->Def->name +
                      "' has no online function");
    A->online_func = std::make_shared<CallbackOnlineFunc>(
        decls(online_names, online_inits, num_online, "online rowscale"),
        decls(final_names, final_inits, num_final, "final rowscale"),
        Callback{fn, user});
  });
}

attnc_status
attnc_builder_set_decay_sample_range(attnc_definition_builder *builder,
                                     double lo, double hi) {
  return guarded([&] {
    requireNonNull(builder, "attnc_builder_set_decay_sample_range",
                   "builder");
    dsl::LinearAttentionDef *L = builder->linear();
    if (!L)
      throw UserError("attention definition '" + builder->Def->name +
                      "' has no decay; the decay sample range is linear "
                      "attention's");
    L->decay_sample_lo = lo;
    L->decay_sample_hi = hi;
  });
}

attnc_status attnc_builder_build(const attnc_definition_builder *builder,
                                 attnc_definition **out) {
  return guarded([&] {
    requireNonNull(builder, "attnc_builder_build", "builder");
    requireNonNull(out, "attnc_builder_build", "out");
    *out = nullptr;
    // A copy, so that later changes to the builder leave it alone.
    std::shared_ptr<const dsl::DefinitionBase> Def;
    if (const dsl::AttentionDef *A = builder->attention())
      Def = std::make_shared<const dsl::AttentionDef>(*A);
    else
      Def = std::make_shared<const dsl::LinearAttentionDef>(
          *builder->linear());
    (void)compile(*Def);
    attnc_definition D;
    D.Def = std::move(Def);
    *out = new attnc_definition(std::move(D));
  });
}

attnc_status attnc_trace_result_set(attnc_trace_result *result,
                                    const attnc_symbol *value) {
  return guarded([&] {
    requireNonNull(result, "attnc_trace_result_set", "result");
    result->Value = fromC(value, "attnc_trace_result_set", "value");
  });
}

attnc_status attnc_trace_result_set_o_scale(attnc_trace_result *result,
                                            const attnc_symbol *value) {
  return guarded([&] {
    requireNonNull(result, "attnc_trace_result_set_o_scale", "result");
    result->OScale = fromC(value, "attnc_trace_result_set_o_scale", "value");
    result->OScaleNumber.reset();
  });
}

attnc_status attnc_trace_result_set_o_scale_number(attnc_trace_result *result,
                                                   double value) {
  return guarded([&] {
    requireNonNull(result, "attnc_trace_result_set_o_scale_number",
                   "result");
    result->OScaleNumber = value;
    result->OScale.reset();
  });
}

attnc_status attnc_trace_result_set_o_scale_b(attnc_trace_result *result,
                                              const attnc_symbol *value) {
  return guarded([&] {
    requireNonNull(result, "attnc_trace_result_set_o_scale_b", "result");
    result->OScaleB =
        fromC(value, "attnc_trace_result_set_o_scale_b", "value");
    result->OScaleBNumber.reset();
  });
}

attnc_status
attnc_trace_result_set_o_scale_b_number(attnc_trace_result *result,
                                        double value) {
  return guarded([&] {
    requireNonNull(result, "attnc_trace_result_set_o_scale_b_number",
                   "result");
    result->OScaleBNumber = value;
    result->OScaleB.reset();
  });
}

attnc_status attnc_trace_result_set_rowscale(attnc_trace_result *result,
                                             const char *name,
                                             const attnc_symbol *value) {
  return guarded([&] {
    requireNonNull(result, "attnc_trace_result_set_rowscale", "result");
    requireNonNull(name, "attnc_trace_result_set_rowscale", "name");
    // The tracer's message for a name given twice (Rowscales::repeated()).
    if (result->Rowscales.contains(name))
      throw UserError(result->Function + ": " +
                      (result->Function == "online_fwd" ||
                               result->Function == "combine"
                           ? "rowscale"
                           : "final rowscale") +
                      " '" + name + "' is returned twice");
    result->Rowscales.set(
        name, fromC(value, "attnc_trace_result_set_rowscale", "value"));
  });
}

void attnc_trace_result_fail(attnc_trace_result *result, const char *message,
                             int verbatim) {
  if (!result)
    return;
  result->Failure = message && *message ? message : "failed";
  result->Verbatim = verbatim != 0;
}
