/*
 * arch.h — architecture descriptors.  An architecture is data: which GGUF
 * keys hold its hyperparameters, which tensors it needs and their shapes,
 * and the few choices where decoders differ (RoPE pairing, gating function,
 * top-k renormalisation, activation).  src/weights.c binds a file by its
 * descriptor and src/forward.c runs one generic forward pass from it.
 *
 * Adding an architecture is one file model/NAME.c defining an arch_desc and
 * one line in the registry (model/arch.c).  What the generic pass does not
 * cover goes into a hook (a function pointer in arch_desc, NULL for the
 * generic behaviour), so a descriptor stays a table plus a small function.
 *
 * Tensor names and shapes follow llama.cpp's convert_hf_to_gguf.py; shapes
 * are in ggml order (ne[0] is the row length, ne[2] the expert index).
 */
#ifndef HYDRA_ARCH_H
#define HYDRA_ARCH_H

#include "../kernels/cpu/ops.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Hyperparameters.  Read from "<arch>.<suffix>" keys (arch_key), then the
 * documented defaults fill what a file may omit (src/weights.c). */
typedef struct arch_hparams {
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head, n_head_kv;
    uint32_t head_dim_k, head_dim_v; /* per head; n_head * head_dim_k may differ from n_embd */
    uint32_t n_rot;                  /* dimensions RoPE rotates, from the start of a head */
    float rope_base;
    float norm_eps;
    uint32_t n_ff;                   /* dense FFN width */
    uint32_t n_expert, n_expert_used;
    uint32_t n_ff_exp;               /* one expert's FFN width */
    uint32_t n_ff_shexp;             /* the shared expert's width */
    uint32_t n_layer_dense_lead;     /* leading layers with a dense FFN */
    bool expert_weights_norm;        /* renormalise the top-k weights to sum 1 */
    float expert_weights_scale;      /* multiplies the expert weights; 1 = none */
} arch_hparams;

typedef enum arch_key_kind { KEY_U32, KEY_F32, KEY_BOOL } arch_key_kind;

typedef struct arch_key {
    const char *suffix; /* the key is "<general.architecture>.<suffix>" */
    size_t offset;      /* of the arch_hparams field it fills */
    arch_key_kind kind;
    bool required;
} arch_key;

#define ARCH_KEY(suffix, field, kind, required)                               \
    {suffix, offsetof(arch_hparams, field), kind, required}

/* Tensor roles.  Model-wide roles come first; the rest exist once per layer. */
typedef enum arch_role {
    W_TOKEN_EMBD,
    W_OUTPUT_NORM,
    W_OUTPUT,
    W_ATTN_NORM,
    W_ATTN_Q,
    W_ATTN_K,
    W_ATTN_V,
    W_ATTN_OUT,
    W_ATTN_Q_BIAS,
    W_ATTN_K_BIAS,
    W_ATTN_V_BIAS,
    W_ATTN_Q_NORM, /* per-head RMSNorm gain of Q (QK-norm) */
    W_ATTN_K_NORM,
    W_FFN_NORM,
    W_FFN_GATE, /* dense SwiGLU FFN */
    W_FFN_UP,
    W_FFN_DOWN,
    W_MOE_ROUTER, /* router: one logit per expert */
    W_MOE_GATE,   /* experts, stacked on ne[2] */
    W_MOE_UP,
    W_MOE_DOWN,
    W_SHEXP_ROUTER, /* shared expert's gate logit: sigmoid(.) scales its output */
    W_SHEXP_GATE,
    W_SHEXP_UP,
    W_SHEXP_DOWN,
    W_COUNT
} arch_role;

static inline bool arch_role_per_layer(arch_role role)
{
    return role >= W_ATTN_NORM;
}

/* Symbolic dimensions of tensor shapes, resolved from the hyperparameters. */
typedef enum arch_dim {
    D_1,
    D_EMBD,
    D_VOCAB,
    D_Q,        /* n_head * head_dim_k */
    D_KV_K,     /* n_head_kv * head_dim_k */
    D_KV_V,     /* n_head_kv * head_dim_v */
    D_ATTN_OUT, /* n_head * head_dim_v */
    D_HEAD_K,
    D_FF,
    D_EXPERT,
    D_FF_EXP,
    D_FF_SHEXP,
    D_COUNT
} arch_dim;

/* How the engine reads a tensor, which decides the types it accepts. */
typedef enum arch_tensor_kind {
    TK_MATRIX, /* rows dotted with activations: needs the type's vec_dot */
    TK_ROWS,   /* rows looked up and dequantised (embeddings): needs to_float */
    TK_VECTOR, /* gains and biases: F32 */
} arch_tensor_kind;

typedef struct arch_tensor_spec {
    const char *name; /* printf pattern; per-layer names take the layer index */
    arch_dim shape[3];
    arch_tensor_kind kind;
} arch_tensor_spec;

/* Name, shape and kind of every role (model/arch.c). */
extern const arch_tensor_spec arch_tensor_specs[W_COUNT];

/* Where a descriptor needs a tensor. */
typedef enum arch_need {
    NEED_ALWAYS,   /* every layer (or the model) */
    NEED_MOE,      /* layers with experts */
    NEED_DENSE,    /* layers with a dense FFN */
    NEED_OPTIONAL, /* bound when present */
} arch_need;

typedef struct arch_use {
    arch_role role;
    arch_need need;
    const char *name; /* NULL: the common name in arch_tensor_specs */
} arch_use;

typedef enum arch_gating {
    GATING_SOFTMAX, /* softmax over all experts, then top-k */
    GATING_SIGMOID, /* independent sigmoid per expert, then top-k */
} arch_gating;

typedef enum arch_norm { NORM_RMS } arch_norm;
typedef enum arch_act { ACT_SWIGLU } arch_act;

struct fwd_layer; /* src/forward.h */

typedef struct arch_desc {
    const char *name; /* general.architecture */
    const arch_key *keys; /* read after the common keys (model/arch.c) */
    size_t n_keys;
    const arch_use *tensors;
    size_t n_tensors;
    arch_norm norm;
    rope_style rope;
    arch_gating gating;
    bool expert_weights_norm; /* default when the file has no expert_weights_norm key */
    arch_act act;
    /* Hooks; NULL keeps the generic behaviour. */
    /* Replaces the generic GQA attention of every layer (e.g. deepseek2's
     * multi-head latent attention): see fwd_layer for what it reads and
     * writes. */
    void (*attention)(const struct fwd_layer *step);
    /* Elements of one position's K and V cache rows in a layer, when they are
     * not n_head_kv * head_dim (MLA caches the compressed latent instead). */
    void (*kv_row_elems)(const arch_hparams *hp, size_t *k, size_t *v);
} arch_desc;

/* Keys every architecture reads (each optional one has a default). */
extern const arch_key arch_common_keys[];
extern const size_t arch_n_common_keys;

/* The descriptor of general.architecture; NULL when hydra has none. */
const arch_desc *arch_find(const char *name);

/* The i-th registered descriptor, NULL past the last (for listing). */
const arch_desc *arch_at(size_t i);

extern const arch_desc arch_qwen3moe;
extern const arch_desc arch_llama;
extern const arch_desc arch_qwen2moe;

#endif
