/* attnc's C interface, DSL half: definitions traced through callbacks, IR
 * JSON files and plugins, and what a definition prints and generates. */
#ifndef ATTNC_C_DSL_H
#define ATTNC_C_DSL_H

/*
 * A definition made here is traced by the same C++ tracer as the shipped
 * examples: the callbacks it holds are called with symbol handles whenever
 * the definition is compiled (by the entry points below, or by the runtime
 * when an attention object is made), so they must stay valid while the
 * definition lives. A callback that fails reports its message with
 * attnc_trace_result_fail and returns nonzero; the call that traced it then
 * fails with ATTNC_USER_ERROR and that message.
 *
 * Symbols are 16-byte values, copied freely. A symbol kept past its trace
 * stays harmless: every operation on it fails with the C++ "kept symbol"
 * error.
 */

#include "attnc/attnc_c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- text ---------------------------------------------------------------- */

/* Text made by attnc (IR, JSON, CUDA source, a report). */
typedef struct attnc_text attnc_text;
ATTNC_C_API const char *attnc_text_data(const attnc_text *text);
ATTNC_C_API size_t attnc_text_size(const attnc_text *text);
ATTNC_C_API void attnc_text_release(attnc_text *text);

/* ---- symbols ------------------------------------------------------------- */

typedef struct attnc_symbol {
  uint64_t opaque[2];
} attnc_symbol;

typedef enum attnc_unary_op {
  ATTNC_EXP = 0,
  ATTNC_EXP2 = 1,
  ATTNC_LOG = 2,
  ATTNC_LOG2 = 3,
  ATTNC_ABS = 4,
  ATTNC_TANH = 5,
  ATTNC_SIGMOID = 6,
  ATTNC_RELU = 7,
  ATTNC_SQRT = 8,
  ATTNC_RSQRT = 9,
  ATTNC_TO_FLOAT = 10,
  ATTNC_NEG = 11,
  ATTNC_NOT = 12
} attnc_unary_op;

typedef enum attnc_binary_op {
  ATTNC_ADD = 0,
  ATTNC_SUB = 1,
  ATTNC_MUL = 2,
  ATTNC_DIV = 3,
  ATTNC_LT = 4,
  ATTNC_LE = 5,
  ATTNC_GT = 6,
  ATTNC_GE = 7,
  ATTNC_EQ = 8,
  ATTNC_NE = 9,
  ATTNC_AND = 10,
  ATTNC_OR = 11,
  ATTNC_MAX = 12,
  ATTNC_MIN = 13,
  ATTNC_FLOORDIV = 14, /* floor division, Python's // (floordiv in C++) */
  ATTNC_MOD = 15       /* the remainder with the divisor's sign (mod) */
} attnc_binary_op;

ATTNC_C_API attnc_status attnc_symbol_unary(attnc_unary_op op,
                                            const attnc_symbol *x,
                                            attnc_symbol *out);
ATTNC_C_API attnc_status attnc_symbol_binary(attnc_binary_op op,
                                             const attnc_symbol *a,
                                             const attnc_symbol *b,
                                             attnc_symbol *out);
/* op with a number as the C++ operators lift one: integral (an int) stays
 * i32 where it fits, else f32; number_first puts it on the left (1 - x). */
ATTNC_C_API attnc_status attnc_symbol_binary_number(attnc_binary_op op,
                                                    const attnc_symbol *x,
                                                    double value, int integral,
                                                    int number_first,
                                                    attnc_symbol *out);
/* cond ? then : else; a NULL symbol stands for its number (an f32
 * constant, as C++'s select(cond, 1.0, x)). */
ATTNC_C_API attnc_status attnc_symbol_select(const attnc_symbol *cond,
                                             const attnc_symbol *then_symbol,
                                             double then_value,
                                             const attnc_symbol *else_symbol,
                                             double else_value,
                                             attnc_symbol *out);
/* "max", "sum" or "abssum" over the keys. */
ATTNC_C_API attnc_status attnc_symbol_get_reduce(const attnc_symbol *x,
                                                 const char *op,
                                                 attnc_symbol *out);
/* A constant in x's graph (x.constant(v), or constantInt when integral). */
ATTNC_C_API attnc_status attnc_symbol_constant(const attnc_symbol *x,
                                               double value, int integral,
                                               attnc_symbol *out);
/* The symbol's expression, short ("(score * rsqrt(D))"), for display. */
ATTNC_C_API attnc_status attnc_symbol_text(const attnc_symbol *x,
                                           attnc_text **out);

/* A rowscale's initial value as Var("-inf") / Var(0.0) reads it. */
ATTNC_C_API attnc_status attnc_var_from_text(const char *text, double *out);
ATTNC_C_API attnc_status attnc_var_from_number(double value, double *out);

/* ---- what a traced function is given -------------------------------------- */

/* A definition's custom inputs, bound to the function being traced. */
typedef struct attnc_inputs attnc_inputs;
/* The input called name (inputs["name"]); inputs NULL: read outside a
 * traced function. */
ATTNC_C_API attnc_status attnc_inputs_get(const attnc_inputs *inputs,
                                          const char *name, attnc_symbol *out);
/* The problem's head dimension D. */
ATTNC_C_API attnc_status attnc_inputs_head_dim(const attnc_inputs *inputs,
                                               attnc_symbol *out);

/* Named rowscales given to an online function. */
typedef struct attnc_rowscales attnc_rowscales;
ATTNC_C_API attnc_status attnc_rowscales_get(const attnc_rowscales *rowscales,
                                             const char *name,
                                             attnc_symbol *out);

/* One call of a traced function. args, in order:
 *   score_mod            score, b, h, q_idx, kv_idx
 *   mask_mod             b, h, q_idx, kv_idx
 *   online_fwd           scores, b, h, q_idx           (online rowscales)
 *   online_fwd_epilogue  o, b, h, q_idx                (online rowscales)
 *   forward              scores, b, h, q_idx, kv_idx   (final rowscales)
 *   backward             dp, scores, doosum, b, h, q_idx, kv_idx (final)
 *   combine              none (rowscales: state a's; rowscales_b: state b's)
 *   q_mod, k_mod, v_mod  x, b, h, t
 *   decay_mod            decay, b, h, t
 * rowscales is NULL where the function has none, rowscales_b but in
 * combine. A callback that sets nothing for combine gives none (the
 * definition has no combine); one that gives a combine sets its merged
 * rowscales and both o_scales. */
typedef struct attnc_trace_call {
  const char *function;
  const attnc_symbol *args;
  size_t num_args;
  const attnc_inputs *inputs;
  const attnc_rowscales *rowscales;
  const attnc_rowscales *rowscales_b;
} attnc_trace_call;

/* What a traced function returns, filled by its callback. */
typedef struct attnc_trace_result attnc_trace_result;
/* The function's value (score, mask, scores, o, p, dscores, a mod's value).
 * backward may leave it unset: no hand-written backward. */
ATTNC_C_API attnc_status attnc_trace_result_set(attnc_trace_result *result,
                                                const attnc_symbol *value);
/* online_fwd's o_scale, or combine's o_scale_a (1 when unset). */
ATTNC_C_API attnc_status
attnc_trace_result_set_o_scale(attnc_trace_result *result,
                               const attnc_symbol *value);
ATTNC_C_API attnc_status
attnc_trace_result_set_o_scale_number(attnc_trace_result *result,
                                      double value);
/* combine's o_scale_b (1 when unset). */
ATTNC_C_API attnc_status
attnc_trace_result_set_o_scale_b(attnc_trace_result *result,
                                 const attnc_symbol *value);
ATTNC_C_API attnc_status
attnc_trace_result_set_o_scale_b_number(attnc_trace_result *result,
                                        double value);
/* A returned rowscale (online_fwd, combine) or final rowscale (the
 * epilogue). */
ATTNC_C_API attnc_status
attnc_trace_result_set_rowscale(attnc_trace_result *result, const char *name,
                                const attnc_symbol *value);
/* The callback's failure: message is the error's whole text when verbatim,
 * else it is prefixed with the function's name. */
ATTNC_C_API void attnc_trace_result_fail(attnc_trace_result *result,
                                         const char *message, int verbatim);

/* Returns 0 with the result set, or nonzero after attnc_trace_result_fail. */
typedef int (*attnc_trace_fn)(void *user, const attnc_trace_call *call,
                              attnc_trace_result *result);

/* ---- definitions built through callbacks ---------------------------------- */

typedef struct attnc_definition_builder attnc_definition_builder;

/* kind: "attention" or "linear". */
ATTNC_C_API attnc_status attnc_builder_new(const char *name, const char *kind,
                                           attnc_definition_builder **out);
ATTNC_C_API void attnc_builder_release(attnc_definition_builder *builder);
ATTNC_C_API attnc_status
attnc_builder_set_description(attnc_definition_builder *builder,
                              const char *description);
/* A custom input: shape "scalar", "per_head", "per_row", "per_key", "full",
 * "per_query_token" or "per_key_token"; type "f32" or "i32" (NULL: f32);
 * the sample range [lo, hi] when has_range, else the type's default. */
ATTNC_C_API attnc_status
attnc_builder_declare_input(attnc_definition_builder *builder,
                            const char *name, const char *shape,
                            const char *type, int has_range, double lo,
                            double hi);
/* The input declared last requires a gradient. */
ATTNC_C_API attnc_status
attnc_builder_requires_grad(attnc_definition_builder *builder);
/* score_mod or mask_mod (attention); q_mod, k_mod, v_mod or decay_mod
 * (linear). fn NULL leaves the function out. */
ATTNC_C_API attnc_status
attnc_builder_set_function(attnc_definition_builder *builder,
                           const char *function, attnc_trace_fn fn,
                           void *user);
/* The online function of an attention definition: its rowscales (names and
 * initial values, in order) and one callback for all four functions (the
 * call names which); backward may leave its result unset. */
ATTNC_C_API attnc_status attnc_builder_set_online(
    attnc_definition_builder *builder, const char *const *online_names,
    const double *online_inits, size_t num_online,
    const char *const *final_names, const double *final_inits,
    size_t num_final, attnc_trace_fn fn, void *user);
/* A linear definition's decay sample range (what `attnc check` draws). */
ATTNC_C_API attnc_status
attnc_builder_set_decay_sample_range(attnc_definition_builder *builder,
                                     double lo, double hi);
/* A definition of what the builder holds now (the builder stays usable);
 * traced and compiled once here, so that its mistakes are reported now. */
ATTNC_C_API attnc_status attnc_builder_build(
    const attnc_definition_builder *builder, attnc_definition **out);

/* ---- definitions from IR JSON and plugins ---------------------------------- */

/* A definition from IR JSON text (`attnc show --json`, or a traced graph),
 * loaded and compiled once here to report its mistakes. */
ATTNC_C_API attnc_status attnc_definition_from_ir_json(const char *text,
                                                       attnc_definition **out);

typedef struct attnc_definition_list attnc_definition_list;
/* The definitions of a plugin built with attnc_add_plugin (CMake): the
 * library is loaded, asked for its definitions' traced graphs, and unloaded;
 * the definitions are IR graphs from then on. */
ATTNC_C_API attnc_status attnc_plugin_load(const char *path,
                                           attnc_definition_list **out);
ATTNC_C_API size_t attnc_definition_list_size(const attnc_definition_list *l);
/* A new handle to the i-th definition. */
ATTNC_C_API attnc_status attnc_definition_list_get(
    const attnc_definition_list *list, size_t i, attnc_definition **out);
ATTNC_C_API void attnc_definition_list_release(attnc_definition_list *list);

/* ---- what a definition prints and generates -------------------------------- */

/* "attention" or "linear". */
ATTNC_C_API const char *attnc_definition_kind(const attnc_definition *def);

/* The IR after each pass and the mask analysis, as `attnc show` prints
 * them; after (NULL for all) names the one pass to print. */
ATTNC_C_API attnc_status attnc_definition_ir(const attnc_definition *def,
                                             const char *after,
                                             attnc_text **out);
/* The final graph as IR JSON (`attnc show --json`). */
ATTNC_C_API attnc_status attnc_definition_ir_json(const attnc_definition *def,
                                                  attnc_text **out);

/* The kernel options of `attnc emit` and `attnc compile`; NULL or 0 fields
 * take the CLI's defaults (f16, head dim 128, generated backend, ...). */
typedef struct attnc_kernel_options {
  const char *dtype;
  int head_dim;
  int head_dim_v;
  const char *arch;
  const char *skeleton;
  const char *config;
  const char *backend;
  int backward;
  int standalone; /* emit: inline the device library */
} attnc_kernel_options;

/* The kernel's CUDA source (`attnc emit`). */
ATTNC_C_API attnc_status attnc_definition_emit(const attnc_definition *def,
                                               const attnc_kernel_options *opt,
                                               attnc_text **out);
/* The kernel compiled by NVRTC through the kernel cache (`attnc compile`);
 * out is JSON: {"kernel", "key", "source", "compile_seconds",
 * "lookup_seconds", "cubin_bytes"}. Needs no GPU. */
ATTNC_C_API attnc_status
attnc_definition_compile(const attnc_definition *def,
                         const attnc_kernel_options *opt, attnc_text **out);
/* Reads the kernel bundle at path (`attnc bundle`, docs/runtime.md "Ahead of
 * time") and consults it, before the kernel cache and NVRTC, for every
 * kernel this process loads from now on; a USER_ERROR naming the file and
 * the fault for one that is not a good bundle. ATTNC_BUNDLE does the same
 * for bundles named in the environment. */
ATTNC_C_API attnc_status attnc_load_bundle(const char *path);
/* The double-precision reference check (`attnc check`): *passed says
 * whether it passed, out is its report. */
ATTNC_C_API attnc_status attnc_definition_check(const attnc_definition *def,
                                                uint64_t seed, int *passed,
                                                attnc_text **out);

#ifdef __cplusplus
}
#endif

#endif /* ATTNC_C_DSL_H */
