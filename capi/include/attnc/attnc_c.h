/* attnc's C interface: a stable ABI over the C++ compiler and runtime. */
#ifndef ATTNC_C_H
#define ATTNC_C_H

/*
 * Every function returns an attnc_status. On anything but ATTNC_OK the
 * calling thread's last error message (attnc_last_error) says what is wrong
 * and where, as the C++ exception's message did; nothing was launched then.
 * Handles are opaque and owned by the caller, who releases each with its
 * _release function (releasing NULL does nothing). No C++ exception ever
 * crosses this interface.
 *
 * ATTNC_C_ABI_VERSION changes whenever a declaration here changes
 * incompatibly; attnc_abi_version() says what the loaded library speaks.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNC_C_ABI_VERSION 1

#if defined(__GNUC__)
#define ATTNC_C_API __attribute__((visibility("default")))
#else
#define ATTNC_C_API
#endif

typedef enum attnc_status {
  ATTNC_OK = 0,
  ATTNC_USER_ERROR = 1,        /* a definition or an input is wrong */
  ATTNC_INVALID_ARGUMENT = 2,  /* a call's argument is wrong (a UserError) */
  ATTNC_NOT_SUPPORTED_YET = 3, /* a planned feature */
  ATTNC_COMPILE_ERROR = 4,     /* NVRTC rejected generated code, or a kernel
                                  no bundle has needs NVRTC and it cannot
                                  be loaded */
  ATTNC_DRIVER_ERROR = 5,      /* the CUDA driver failed (or is missing) */
  ATTNC_INTERNAL_ERROR = 6     /* a bug in attnc */
} attnc_status;

/* The ABI version of the loaded library (ATTNC_C_ABI_VERSION it was built
 * with). */
ATTNC_C_API int attnc_abi_version(void);

/* The message of the calling thread's last failed call ("" if none). Valid
 * until the thread's next attnc call. */
ATTNC_C_API const char *attnc_last_error(void);

/* A definition: a registered example, or one made by the other entry
 * points (Python tracing, IR JSON, plugins). */
typedef struct attnc_definition attnc_definition;

/* The shipped example named name (as `attnc list` prints them); a
 * UserError listing the known names if there is none. */
ATTNC_C_API attnc_status attnc_definition_from_example(const char *name,
                                                       attnc_definition **out);

/* The names of the shipped examples, separated by '\n', into buf of size
 * size (NUL-terminated). *needed receives the size the text needs with its
 * NUL; a buf too small (or NULL) is filled with nothing but still OK. */
ATTNC_C_API attnc_status attnc_example_names(char *buf, size_t size,
                                             size_t *needed);

/* The definition's name (valid while def lives). */
ATTNC_C_API const char *attnc_definition_name(const attnc_definition *def);

ATTNC_C_API void attnc_definition_release(attnc_definition *def);

/* ---------------------------------------------------------------------
 * Running a definition: attention objects, tensors, custom inputs.
 * ------------------------------------------------------------------- */

/* Element types of tensors (I32 only for int32 custom inputs and
 * cu_seqlens; F32 for finals, custom inputs and their gradients). */
typedef enum attnc_dtype {
  ATTNC_DTYPE_F16 = 0,
  ATTNC_DTYPE_BF16 = 1,
  ATTNC_DTYPE_F32 = 2,
  ATTNC_DTYPE_I32 = 3
} attnc_dtype;

/* Memory order of q, k, v and out: [B,S,H,D], [B,H,S,D], or packed
 * variable-length sequences [T,H,D] (the _varlen calls). */
typedef enum attnc_layout {
  ATTNC_LAYOUT_BSHD = 0,
  ATTNC_LAYOUT_BHSD = 1,
  ATTNC_LAYOUT_THD = 2
} attnc_layout;

/* Kernel targets; ATTNC_ARCH_CURRENT asks the driver for device 0's. */
typedef enum attnc_arch {
  ATTNC_ARCH_CURRENT = 0,
  ATTNC_ARCH_SM80 = 80,
  ATTNC_ARCH_SM86 = 86,
  ATTNC_ARCH_SM89 = 89,
  ATTNC_ARCH_SM90A = 90
} attnc_arch;

/* What is fixed when an attention object is made (the C++
 * attn::runtime::Signature). Strings may be NULL or "" for "let attnc
 * choose"; dtype is F16 or BF16. */
typedef struct attnc_signature {
  int32_t dtype;           /* attnc_dtype: F16 or BF16 */
  int32_t head_dim;        /* D of q and k */
  int32_t head_dim_v;      /* DV of v and out */
  int32_t layout;          /* attnc_layout */
  int32_t arch;            /* attnc_arch */
  int32_t needs_backward;  /* nonzero: choose the backward now */
  const char *skeleton;    /* forward skeleton ("fwd_sm90", "fwd_sm80") */
  const char *config;      /* forward configuration ("m128n64w4s2") */
  const char *backward_config; /* "bwd90.kv64x128s2.q128x64w8", ... */
  const char *tune_file;   /* a tune JSON file (docs/tuning.md) */
  int32_t tune;            /* nonzero with tune_file: tune missing shapes */
  const char *backend;     /* "generated", "reference" or NULL */
} attnc_signature;

/* A non-owning view of a device tensor. strides are in elements; NULL
 * strides mean contiguous (row-major). ndim is 0 to ATTNC_MAX_NDIM. */
#define ATTNC_MAX_NDIM 8
typedef struct attnc_tensor {
  void *data;
  int32_t dtype; /* attnc_dtype */
  int32_t ndim;
  const int64_t *shape;
  const int64_t *strides;
} attnc_tensor;

/* How a custom input's value is given. */
typedef enum attnc_input_kind {
  ATTNC_INPUT_F32 = 0,   /* a float32 scalar input: value.f32 */
  ATTNC_INPUT_I32 = 1,   /* an int32 scalar input: value.i32 */
  ATTNC_INPUT_TENSOR = 2 /* any other input: tensor */
} attnc_input_kind;

/* A custom input's value, by the name the definition declares. A scalar is
 * a kernel argument: a new value never recompiles. */
typedef struct attnc_input {
  const char *name;
  int32_t kind; /* attnc_input_kind */
  float f32;
  int32_t i32;
  attnc_tensor tensor;
} attnc_input;

/* A tensor by name: where a backward writes the gradient of the custom
 * input of that name (float32, [] or [1] for a scalar, [H] per head). */
typedef struct attnc_named_tensor {
  const char *name;
  attnc_tensor tensor;
} attnc_named_tensor;

/* A packed variable-length batch (layout THD): int32 cu_seqlens of B+1
 * entries on the device and the longest sequences (attn::runtime::
 * VarlenBatch says what they must hold). */
typedef struct attnc_varlen {
  attnc_tensor cu_seqlens_q;
  attnc_tensor cu_seqlens_kv;
  int64_t max_seqlen_q;
  int64_t max_seqlen_kv;
} attnc_varlen;

/* Shape classes of custom inputs (as the definition declares them). */
typedef enum attnc_input_shape {
  ATTNC_SHAPE_SCALAR = 0,
  ATTNC_SHAPE_PER_HEAD = 1,        /* [H] */
  ATTNC_SHAPE_PER_ROW = 2,         /* [B,H,Sq] */
  ATTNC_SHAPE_PER_KEY = 3,         /* [B,H,Skv] */
  ATTNC_SHAPE_FULL = 4,            /* [B,H,Sq,Skv] */
  ATTNC_SHAPE_PER_QUERY_TOKEN = 5, /* [B,Sq] */
  ATTNC_SHAPE_PER_KEY_TOKEN = 6    /* [B,Skv] */
} attnc_input_shape;

/* A custom input's declaration. name is valid while the attention lives. */
typedef struct attnc_input_info {
  const char *name;
  int32_t shape;         /* attnc_input_shape */
  int32_t dtype;         /* ATTNC_DTYPE_F32 or ATTNC_DTYPE_I32 */
  int32_t requires_grad; /* the backward writes its gradient */
} attnc_input_info;

/* An attention variant compiled for a signature (attn::runtime::Attention).
 * One object may be called from several threads and streams. */
typedef struct attnc_attention attnc_attention;

/* Compiles def's kernel for sig (NVRTC; no GPU is needed with an explicit
 * arch). */
ATTNC_C_API attnc_status attnc_attention_create(const attnc_definition *def,
                                                const attnc_signature *sig,
                                                attnc_attention **out);
ATTNC_C_API void attnc_attention_release(attnc_attention *att);

/* The custom inputs the definition declares, in declaration order. */
ATTNC_C_API attnc_status attnc_attention_input_count(const attnc_attention *att,
                                                     size_t *count);
ATTNC_C_API attnc_status attnc_attention_input_info(const attnc_attention *att,
                                                    size_t index,
                                                    attnc_input_info *info);
/* The final rowscales (the finals tensor's first dimension, in order; the
 * softmax's is "lse"). Names are valid while the attention lives. */
ATTNC_C_API attnc_status attnc_attention_final_count(const attnc_attention *att,
                                                     size_t *count);
ATTNC_C_API attnc_status attnc_attention_final_name(const attnc_attention *att,
                                                    size_t index,
                                                    const char **name);
/* The arch the kernels are built for (an attnc_arch, never CURRENT). */
ATTNC_C_API attnc_status attnc_attention_arch(const attnc_attention *att,
                                              int32_t *arch);

/* out = attention(q, k, v) on stream (a CUstream; NULL: the default
 * stream). finals ([F,B,H,Sq] float32) may be NULL only for a variant with
 * no final rowscales. inputs: num_inputs custom-input values (NULL when 0).
 * Every argument is checked before anything is launched. */
ATTNC_C_API attnc_status attnc_attention_forward(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *finals,
    const attnc_input *inputs, size_t num_inputs, void *stream);

/* dq, dk, dv and the gradients of the inputs that require one (grads, by
 * name) of L = sum(out * dout). out may be NULL when the variant's backward
 * does not read it; finals as the forward wrote them. */
ATTNC_C_API attnc_status attnc_attention_backward(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *dout,
    const attnc_tensor *finals, const attnc_tensor *dq, const attnc_tensor *dk,
    const attnc_tensor *dv, const attnc_input *inputs, size_t num_inputs,
    const attnc_named_tensor *grads, size_t num_grads, void *stream);

/* The same for a packed variable-length batch (layout THD). */
ATTNC_C_API attnc_status attnc_attention_forward_varlen(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *finals,
    const attnc_varlen *batch, const attnc_input *inputs, size_t num_inputs,
    void *stream);
ATTNC_C_API attnc_status attnc_attention_backward_varlen(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *dout,
    const attnc_tensor *finals, const attnc_tensor *dq, const attnc_tensor *dk,
    const attnc_tensor *dv, const attnc_varlen *batch,
    const attnc_input *inputs, size_t num_inputs,
    const attnc_named_tensor *grads, size_t num_grads, void *stream);

/* ---------------------------------------------------------------------
 * Merging partial results (attn::runtime::Attention::mergeResults): the
 * results of the same queries over disjoint key sets (shards of a sequence
 * on several GPUs, a cached prefix and new tokens) combined into the
 * result over the union, by the rule derived from the definition's online
 * function.
 * ------------------------------------------------------------------- */

typedef enum attnc_merge_kind {
  ATTNC_MERGE_NONE = 0,       /* the results do not merge (reason says why) */
  ATTNC_MERGE_SUM = 1,        /* out and the finals add (sigmoid, ReLU) */
  ATTNC_MERGE_LOG_SUM_EXP = 2, /* weights e^(lse_i - lse) (softmax) */
  ATTNC_MERGE_COMBINE = 3      /* the definition's own combine (the finals
                                  are the state); merge_results runs it */
} attnc_merge_kind;

/* How att's results merge (an attnc_merge_kind) and, for ATTNC_MERGE_NONE,
 * why not (reason may be NULL; the string lives as long as att). */
ATTNC_C_API attnc_status attnc_attention_merge_kind(attnc_attention *att,
                                                    int32_t *kind,
                                                    const char **reason);

/* out (and finals) = the merge of num_parts (2 to 8) partial results:
 * part_outs[i] like a forward's out, part_finals[i] its finals ([F,B,H,Sq]
 * float32; part_finals may be NULL only for a variant with no finals). A
 * part whose finals are -inf (no key) adds nothing. A UserError saying why
 * for a variant whose results do not merge. */
ATTNC_C_API attnc_status attnc_attention_merge_results(
    attnc_attention *att, const attnc_tensor *part_outs,
    const attnc_tensor *part_finals, size_t num_parts, const attnc_tensor *out,
    const attnc_tensor *finals, void *stream);

/* ---------------------------------------------------------------------
 * Block masks (attn::runtime::BlockMask): the block classification of an
 * attention's mask_mod, made once and passed to any number of forward and
 * backward calls of its shape (e.g. by every layer of a model); a call
 * given one launches no classification. Dense layouts only (BSHD, BHSD).
 * A block mask must outlive the calls that use it (they read it on their
 * streams); a call on another stream than the one it was made on must be
 * ordered after its making.
 * ------------------------------------------------------------------- */

typedef struct attnc_block_mask attnc_block_mask;

/* The problem a block mask is made for. heads_kv (0: heads) only picks the
 * forward's tuned configuration where a tune file has one per shape. */
typedef struct attnc_mask_shape {
  int64_t batch, heads, seq_q, seq_kv, heads_kv;
} attnc_mask_shape;

/* A block mask given as lists (FlexAttention's layout; attn::runtime::
 * BlockLists says what each holds): host int32 arrays and their lengths in
 * elements. batch and heads are the call's or 1 (shared lists); QB =
 * ceil(seq_q / block_q), KB = ceil(seq_kv / block_kv).
 *   kv_num_blocks       [batch][heads][QB]       partial blocks per row
 *   kv_indices          [batch][heads][QB][KB]   their key blocks
 *   full_kv_num_blocks  like kv_num_blocks, or NULL with length 0
 *   full_kv_indices     like kv_indices, or NULL with length 0 */
typedef struct attnc_block_lists {
  int64_t batch, heads;
  int32_t block_q, block_kv;
  const int32_t *kv_num_blocks;
  size_t kv_num_blocks_len;
  const int32_t *kv_indices;
  size_t kv_indices_len;
  const int32_t *full_kv_num_blocks;
  size_t full_kv_num_blocks_len;
  const int32_t *full_kv_indices;
  size_t full_kv_indices_len;
} attnc_block_lists;

/* Classifies att's mask for calls of shape with inputs (the forward's
 * lists and, with for_backward nonzero, the backward's) on stream. A
 * UserError for a definition without a mask_mod, a THD layout or another
 * backend than "generated"; InvalidArgument naming a bad shape field or
 * input. */
ATTNC_C_API attnc_status attnc_block_mask_make(
    attnc_attention *att, const attnc_mask_shape *shape,
    const attnc_input *inputs, size_t num_inputs, int32_t for_backward,
    void *stream, attnc_block_mask **out);

/* Classifies mask again with new inputs (new document ids each step), into
 * its own memory: mask must be one attnc_block_mask_make made for att's
 * mask. */
ATTNC_C_API attnc_status attnc_block_mask_refresh(attnc_attention *att,
                                                  attnc_block_mask *mask,
                                                  const attnc_input *inputs,
                                                  size_t num_inputs,
                                                  void *stream);

/* A block mask from the caller's lists, each field checked (the message
 * names it and the expected value), re-tiled on the host and copied to the
 * device synchronously. */
ATTNC_C_API attnc_status attnc_block_mask_from_lists(
    attnc_attention *att, const attnc_mask_shape *shape,
    const attnc_block_lists *lists, int32_t for_backward,
    attnc_block_mask **out);

/* The shape a block mask was made for and whether it holds the backward's
 * lists (for_backward may be NULL). */
ATTNC_C_API attnc_status attnc_block_mask_info(const attnc_block_mask *mask,
                                               attnc_mask_shape *shape,
                                               int32_t *for_backward);

ATTNC_C_API void attnc_block_mask_release(attnc_block_mask *mask);

/* attnc_attention_forward and attnc_attention_backward with a block mask
 * (non-NULL; made for att's mask and the call's shape, and for the
 * backward made with for_backward): its lists decide which blocks are
 * visited, whatever the inputs hold now. */
ATTNC_C_API attnc_status attnc_attention_forward_masked(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *finals,
    const attnc_input *inputs, size_t num_inputs,
    const attnc_block_mask *mask, void *stream);
ATTNC_C_API attnc_status attnc_attention_backward_masked(
    attnc_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *dout,
    const attnc_tensor *finals, const attnc_tensor *dq, const attnc_tensor *dk,
    const attnc_tensor *dv, const attnc_input *inputs, size_t num_inputs,
    const attnc_named_tensor *grads, size_t num_grads,
    const attnc_block_mask *mask, void *stream);

/* How many block classifications this process has launched (a diagnostic:
 * a test's proof that calls given a block mask launch none). */
ATTNC_C_API attnc_status attnc_block_classify_launches(uint64_t *count);

/* ---------------------------------------------------------------------
 * Linear attention (attn::runtime::LinearAttention).
 * ------------------------------------------------------------------- */

/* What is fixed when a linear-attention object is made. */
typedef struct attnc_linear_signature {
  int32_t dtype;      /* attnc_dtype: F16 or BF16 */
  int32_t head_dim;   /* D of q and k: 64, 128 or 256 */
  int32_t head_dim_v; /* DV of v: a multiple of 64 up to 512 */
  int32_t layout;     /* ATTNC_LAYOUT_BSHD or ATTNC_LAYOUT_BHSD */
  int32_t arch;       /* attnc_arch */
  int32_t tune;       /* nonzero: tune shapes tune_file lacks */
  const char *skeleton;  /* NULL: the table's linear skeleton */
  const char *config;    /* "c64v64w4b8"; NULL: tuned or default */
  const char *tune_file; /* a tune JSON file */
} attnc_linear_signature;

typedef struct attnc_linear_attention attnc_linear_attention;

/* Compiles def (a linear-attention definition) for sig. */
ATTNC_C_API attnc_status attnc_linear_attention_create(
    const attnc_definition *def, const attnc_linear_signature *sig,
    attnc_linear_attention **out);
ATTNC_C_API void attnc_linear_attention_release(attnc_linear_attention *att);

/* The custom inputs, as attnc_attention_input_count/_info. */
ATTNC_C_API attnc_status attnc_linear_attention_input_count(
    const attnc_linear_attention *att, size_t *count);
ATTNC_C_API attnc_status attnc_linear_attention_input_info(
    const attnc_linear_attention *att, size_t index, attnc_input_info *info);
/* Whether decay_mod reads the decay input (a decay tensor must be given
 * exactly then). */
ATTNC_C_API attnc_status attnc_linear_attention_uses_decay(
    const attnc_linear_attention *att, int32_t *uses);

/* out = linear attention of q, k, v (q [B,T,Hq,D], k [B,T,Hk,D], v and out
 * [B,T,H,DV] for BSHD); decay [B,H,T] float32 or NULL; initial_state and
 * final_state ([B,H,D,DV] float32) may be NULL. */
ATTNC_C_API attnc_status attnc_linear_attention_forward(
    attnc_linear_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *decay,
    const attnc_input *inputs, size_t num_inputs,
    const attnc_tensor *initial_state, const attnc_tensor *final_state,
    void *stream);

/* dq, dk, dv (and, where given, ddecay [B,H,T] and dinitial_state
 * [B,H,D,DV], float32) and the input gradients named in grads.
 * decay, initial_state, dfinal_state, ddecay and dinitial_state may be
 * NULL. */
ATTNC_C_API attnc_status attnc_linear_attention_backward(
    attnc_linear_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *decay, const attnc_tensor *dout,
    const attnc_tensor *initial_state, const attnc_tensor *dfinal_state,
    const attnc_tensor *dq, const attnc_tensor *dk, const attnc_tensor *dv,
    const attnc_tensor *ddecay, const attnc_tensor *dinitial_state,
    const attnc_input *inputs, size_t num_inputs,
    const attnc_named_tensor *grads, size_t num_grads, void *stream);

/* The forward of a packed (variable-length) batch of B sequences laid end
 * to end: q [T,Hq,D], k [T,Hk,D], v and out [T,H,DV] (T the tokens of all
 * sequences; the signature's layout does not apply), cu_seqlens int32
 * [B+1] on the device (0 = cu[0] <= ... <= cu[B] = T; not read on the
 * host), decay [1,H,T] float32 or NULL, per-token custom inputs [1,H,T];
 * initial_state and final_state ([B,H,D,DV] float32, one per sequence)
 * may be NULL. Chunks never cross a sequence's end. */
ATTNC_C_API attnc_status attnc_linear_attention_forward_varlen(
    attnc_linear_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *out, const attnc_tensor *decay,
    const attnc_tensor *cu_seqlens, const attnc_input *inputs,
    size_t num_inputs, const attnc_tensor *initial_state,
    const attnc_tensor *final_state, void *stream);

/* The gradients of attnc_linear_attention_forward_varlen: dq, dk, dv like
 * q, k, v; where given, ddecay [1,H,T] and dinitial_state [B,H,D,DV]
 * (float32), and the input gradients named in grads (per-token ones
 * [1,H,T]). Each sequence's gradients are those of that sequence run
 * alone. decay, initial_state, dfinal_state, ddecay and dinitial_state may
 * be NULL. */
ATTNC_C_API attnc_status attnc_linear_attention_backward_varlen(
    attnc_linear_attention *att, const attnc_tensor *q, const attnc_tensor *k,
    const attnc_tensor *v, const attnc_tensor *decay, const attnc_tensor *dout,
    const attnc_tensor *cu_seqlens, const attnc_tensor *initial_state,
    const attnc_tensor *dfinal_state, const attnc_tensor *dq,
    const attnc_tensor *dk, const attnc_tensor *dv, const attnc_tensor *ddecay,
    const attnc_tensor *dinitial_state, const attnc_input *inputs,
    size_t num_inputs, const attnc_named_tensor *grads, size_t num_grads,
    void *stream);

/* ---- Calls packed once (for callers whose every FFI argument costs) ----
 *
 * attnc_attention_forward(_masked)'s arguments in one struct: a caller
 * packs it once per call shape and then writes only the data pointers and
 * the stream before each call, which then crosses the FFI with one
 * pointer (the Python package's eager path). Every argument is checked as
 * attnc_attention_forward checks it. */
typedef struct attnc_forward_call {
  attnc_attention *att;
  const attnc_tensor *q, *k, *v, *out;
  const attnc_tensor *finals; /* NULL: none */
  const attnc_input *inputs;
  size_t num_inputs;
  const attnc_block_mask *mask; /* NULL: the call classifies (unmasked) */
  void *stream;
} attnc_forward_call;

ATTNC_C_API attnc_status
attnc_attention_forward_call(const attnc_forward_call *call);

/* ---- Paged KV caches (attn/runtime/Paged.h) ----
 *
 * A KV cache in pages: k_cache and v_cache [num_pages, page_size, Hkv, D]
 * (NHD) or [num_pages, Hkv, page_size, D] (HND), any strides with the head
 * dim contiguous, the page size a power of two; sequence b's pages given
 * by a block table (block_table int32 [B, max_pages], seq_lens int32 [B])
 * or in CSR form (indptr int32 [B+1], indices int32 [nnz], last_page_len
 * int32 [B], 1 to page_size). Give the tensors of one form and leave the
 * other's data NULL. The index tensors are device data, never read on the
 * host: a malformed sequence's rows come out NaN. max_seqlen_kv bounds
 * every sequence's keys. */
typedef enum attnc_page_layout {
  ATTNC_PAGE_NHD = 0,
  ATTNC_PAGE_HND = 1
} attnc_page_layout;

typedef struct attnc_paged_kv {
  attnc_tensor k_cache, v_cache;
  int32_t layout; /* attnc_page_layout */
  attnc_tensor block_table, seq_lens;
  attnc_tensor indptr, indices, last_page_len;
  int64_t max_seqlen_kv;
} attnc_paged_kv;

/* Writes new tokens k [T,Hkv,D] and v [T,Hkv,DV] into kv's caches: token i
 * to slot slot_mapping[i] (int32 or int64 [T]; page slot / page_size,
 * position slot % page_size; a negative slot is skipped). Only kv's caches
 * and layout are used. */
ATTNC_C_API attnc_status attnc_attention_append_paged(
    attnc_attention *att, const attnc_tensor *k, const attnc_tensor *v,
    const attnc_paged_kv *kv, const attnc_tensor *slot_mapping, void *stream);

/* Decode over kv: q and out [B,Sq,H,D] (bshd) or [B,H,Sq,D] (bhsd), 1 to
 * 16 queries a sequence aligned to the end of its keys, finals
 * [F,B,H,Sq] or NULL. Plans the call itself (a workspace of its own). */
ATTNC_C_API attnc_status attnc_attention_decode_paged(
    attnc_attention *att, const attnc_tensor *q, const attnc_paged_kv *kv,
    const attnc_tensor *out, const attnc_tensor *finals,
    const attnc_input *inputs, size_t num_inputs, void *stream);

/* What a decode plan is made for: fixed batch, heads and queries a
 * sequence, a bound on any sequence's keys, the page size, a cap on the
 * split over the keys (0: the heuristic's). */
typedef struct attnc_decode_bounds {
  int64_t batch, heads, heads_kv, queries_per_seq, max_seqlen_kv, page_size;
  int32_t max_splits;
} attnc_decode_bounds;

typedef struct attnc_decode_plan attnc_decode_plan;

/* A plan for decode calls within bounds on the current device (compiles and
 * loads the kernels, decides the split); *workspace_bytes is the device
 * memory (16-byte aligned) each attnc_attention_run_decode needs. */
ATTNC_C_API attnc_status attnc_attention_plan_decode(
    attnc_attention *att, const attnc_decode_bounds *bounds,
    attnc_decode_plan **out, size_t *workspace_bytes);
ATTNC_C_API void attnc_decode_plan_release(attnc_decode_plan *plan);

/* One decode call of plan (arguments as attnc_attention_decode_paged's):
 * checks shapes on the host, then launches with no decision, allocation or
 * synchronisation (capturable in a CUDA graph). */
ATTNC_C_API attnc_status attnc_attention_run_decode(
    attnc_attention *att, const attnc_decode_plan *plan,
    const attnc_tensor *q, const attnc_paged_kv *kv, const attnc_tensor *out,
    const attnc_tensor *finals, void *workspace, size_t workspace_bytes,
    const attnc_input *inputs, size_t num_inputs, void *stream);

/* Packed (THD) decode over kv: each sequence its own count of queries
 * (speculative decoding, mixed batches). q [Tq,H,D] and out [Tq,H,DV]
 * whatever the signature's layout; sequence b's queries are the tokens
 * [cu_seqlens_q[b], cu_seqlens_q[b+1]) (int32 [B+1] on the device), 0 to
 * max_seqlen_q of them (1 to 16); query i of a sequence of n queries and L
 * keys is at position L - n + i. finals [F,H,Tq] float32 or NULL. The
 * decode kernels and split of attnc_attention_decode_paged; plans the call
 * itself. (Contiguous packed K/V: attnc_attention_forward_varlen with
 * max_seqlen_q at most 16 runs the same kernels.) */
ATTNC_C_API attnc_status attnc_attention_decode_paged_varlen(
    attnc_attention *att, const attnc_tensor *q,
    const attnc_tensor *cu_seqlens_q, int64_t max_seqlen_q,
    const attnc_paged_kv *kv, const attnc_tensor *out,
    const attnc_tensor *finals, const attnc_input *inputs, size_t num_inputs,
    void *stream);

/* A plan for packed decode calls (attnc_attention_run_decode_varlen):
 * bounds as attnc_attention_plan_decode's, queries_per_seq the bound on
 * each sequence's count (1 to 16). A packed plan runs packed calls only,
 * a plan of attnc_attention_plan_decode dense ones only. */
ATTNC_C_API attnc_status attnc_attention_plan_decode_varlen(
    attnc_attention *att, const attnc_decode_bounds *bounds,
    attnc_decode_plan **out, size_t *workspace_bytes);

/* One packed decode call of plan (arguments as
 * attnc_attention_decode_paged_varlen's, its bound the plan's): checks
 * shapes on the host, then launches with no decision, allocation or
 * synchronisation; a captured graph replays with new counts in
 * cu_seqlens_q (0 to the plan's queries_per_seq, ending within q's
 * tokens), lengths, page tables and q. */
ATTNC_C_API attnc_status attnc_attention_run_decode_varlen(
    attnc_attention *att, const attnc_decode_plan *plan,
    const attnc_tensor *q, const attnc_tensor *cu_seqlens_q,
    const attnc_paged_kv *kv, const attnc_tensor *out,
    const attnc_tensor *finals, void *workspace, size_t workspace_bytes,
    const attnc_input *inputs, size_t num_inputs, void *stream);

/* Paged prefill: new query tokens q [Tq,H,D] (packed, cu_seqlens_q int32
 * [B+1] on the device, max_seqlen_q their longest run) over each
 * sequence's paged keys (appended first), out [Tq,H,DV], finals [F,H,Tq]
 * or NULL. Plans the call itself. */
ATTNC_C_API attnc_status attnc_attention_prefill_paged(
    attnc_attention *att, const attnc_tensor *q,
    const attnc_tensor *cu_seqlens_q, int64_t max_seqlen_q,
    const attnc_paged_kv *kv, const attnc_tensor *out,
    const attnc_tensor *finals, const attnc_input *inputs, size_t num_inputs,
    void *stream);

typedef struct attnc_prefill_bounds {
  int64_t batch, heads, heads_kv, max_seqlen_q, max_seqlen_kv, page_size;
} attnc_prefill_bounds;

typedef struct attnc_prefill_plan attnc_prefill_plan;

ATTNC_C_API attnc_status attnc_attention_plan_prefill(
    attnc_attention *att, const attnc_prefill_bounds *bounds,
    attnc_prefill_plan **out);
ATTNC_C_API void attnc_prefill_plan_release(attnc_prefill_plan *plan);

/* One paged prefill call of plan (no decision, allocation or
 * synchronisation: capturable). */
ATTNC_C_API attnc_status attnc_attention_run_prefill(
    attnc_attention *att, const attnc_prefill_plan *plan,
    const attnc_tensor *q, const attnc_tensor *cu_seqlens_q,
    const attnc_paged_kv *kv, const attnc_tensor *out,
    const attnc_tensor *finals, const attnc_input *inputs, size_t num_inputs,
    void *stream);

#ifdef __cplusplus
}
#endif

#endif /* ATTNC_C_H */
