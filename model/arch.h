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

#include "hydra.h"

#include "../kernels/cpu/ops.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Experts' gating function; the values are GGUF's expert_gating_func
 * (llama.cpp's llama_expert_gating_func_type). */
typedef enum arch_gating {
    GATING_SOFTMAX = 1,        /* softmax over all experts, top-k of the probabilities */
    GATING_SIGMOID = 2,        /* independent sigmoid per expert, then top-k */
    GATING_SOFTMAX_WEIGHT = 3, /* top-k of the logits, softmax over the k chosen (gpt-oss) */
} arch_gating;

/* rope.scaling.type, by its index in arch_rope_scaling_names. */
typedef enum arch_rope_scaling { ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_YARN } arch_rope_scaling;
extern const char *const arch_rope_scaling_names[]; /* NULL-terminated */

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
    uint32_t gating;                 /* arch_gating: expert_gating_func, else the descriptor's */
    uint32_t n_expert_group;         /* experts split into groups; top groups first (0 or 1: none) */
    uint32_t n_expert_group_used;
    uint32_t n_expert_shared;        /* shared experts (deepseek2: their FFN is n_ff_exp wide each) */
    uint32_t q_lora_rank, kv_lora_rank; /* MLA's compressed query and KV widths (deepseek2) */
    uint32_t n_swa;                  /* sliding window in positions (attention.sliding_window); 0: none */
    uint32_t n_nextn;                /* nextn_predict_layers: MTP blocks counted in block_count, after the
                                        main ones; the main pass does not run them (docs/SPECULATIVE.md) */
    /* rope.scaling.* */
    uint32_t rope_scaling;           /* arch_rope_scaling */
    float rope_scaling_factor;       /* context extension factor; 0 = none */
    uint32_t n_ctx_orig;             /* original_context_length, for YaRN; default n_ctx_train */
    float yarn_beta_fast, yarn_beta_slow; /* YaRN's ramp bounds; defaults 32 and 1 */
    float yarn_log_mul;              /* yarn_log_multiplier (deepseek2: 0.1 * mscale_all_dim) */
    /* Derived after reading (src/weights.c, then the descriptor's hparams hook). */
    rope_params rope;                /* n_rot, base, scaling, cos/sin factor */
    float kq_scale;                  /* multiplies q . k before the softmax; 1/sqrt(head_dim_k) */
} arch_hparams;

typedef enum arch_key_kind { KEY_U32, KEY_F32, KEY_BOOL, KEY_ENUM } arch_key_kind;

typedef struct arch_key {
    const char *suffix; /* the key is "<general.architecture>.<suffix>" */
    size_t offset;      /* of the arch_hparams field it fills */
    arch_key_kind kind;
    bool required;
    const char *const *names; /* KEY_ENUM: a string key; the field gets its index here */
} arch_key;

#define ARCH_KEY(suffix, field, kind, required)                               \
    {suffix, offsetof(arch_hparams, field), kind, required, NULL}
#define ARCH_KEY_ENUM(suffix, field, names)                                   \
    {suffix, offsetof(arch_hparams, field), KEY_ENUM, false, names}

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
    W_ATTN_OUT_BIAS,
    W_ATTN_SINKS,     /* one logit per head joining the softmax (gpt-oss) */
    W_ATTN_Q_A,       /* MLA (deepseek2): query compressed to q_lora_rank, */
    W_ATTN_Q_A_NORM,  /* RMSNorm gain of the compressed query, */
    W_ATTN_Q_B,       /* expanded to every head's (nope | rope) dimensions */
    W_ATTN_KV_A_MQA,  /* x -> compressed KV latent (kv_lora_rank) | shared RoPE key */
    W_ATTN_KV_A_NORM, /* RMSNorm gain of the latent */
    W_ATTN_K_B,       /* per head: latent -> key's nope part, as rows of nope values */
    W_ATTN_V_B,       /* per head: latent -> value */
    W_MOE_ROUTER_BIAS,
    W_MOE_PROBS_BIAS, /* added to the gating output to choose experts, not to weigh them */
    W_MOE_GATE_BIAS,  /* per expert */
    W_MOE_UP_BIAS,
    W_MOE_DOWN_BIAS,
    W_NEXTN_EH_PROJ,          /* MTP block: [enorm(embedding) | hnorm(hidden)] -> the block's input */
    W_NEXTN_ENORM,            /* RMSNorm gain of the next token's embedding */
    W_NEXTN_HNORM,            /* RMSNorm gain of the previous position's hidden state */
    W_NEXTN_SHARED_HEAD_NORM, /* the MTP head's norm (else output_norm) */
    W_NEXTN_SHARED_HEAD_HEAD, /* the MTP head (else output) */
    W_NEXTN_EMBED_TOKENS,     /* the MTP block's embedding (else token_embd) */
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
    D_HEADS,     /* n_head */
    D_Q_LORA,    /* q_lora_rank */
    D_KV_LORA,   /* kv_lora_rank */
    D_KV_A,      /* kv_lora_rank + n_rot: the MLA cache row */
    D_HEAD_NOPE, /* head_dim_k - n_rot */
    D_HEAD_V,    /* head_dim_v */
    D_EMBD_2,    /* 2 n_embd: an MTP block's concatenated input */
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
    NEED_Q_LORA,   /* every layer, when q_lora_rank > 0 */
    NEED_Q_FULL,   /* every layer, when q_lora_rank == 0 */
    NEED_NEXTN,    /* MTP blocks only (the last nextn_predict_layers blocks) */
    NEED_NEXTN_OPTIONAL, /* MTP blocks only, bound when present */
} arch_need;

typedef struct arch_use {
    arch_role role;
    arch_need need;
    const char *name; /* NULL: the common name in arch_tensor_specs */
} arch_use;

typedef enum arch_norm { NORM_RMS } arch_norm;
/* The FFNs' activation: silu(gate) * up, or gpt-oss's clamped variant
 * (op_swiglu_oai with alpha 1.702, limit 7). */
typedef enum arch_act { ACT_SWIGLU, ACT_SWIGLU_OAI } arch_act;

struct fwd_layer;     /* src/forward.h */
struct model_weights; /* src/weights.h */

/* An attention that replaces the generic GQA of every layer (deepseek2's
 * multi-head latent attention), with the cache rows and working memory it
 * needs. */
typedef struct arch_attention {
    /* Elements of one position's K and V cache rows in a layer. */
    void (*kv_row_elems)(const arch_hparams *hp, size_t *k, size_t *v);
    /* Working memory for steps of up to n_batch rows over n_ctx positions;
     * *state goes to run (fwd_layer.attn_state) and free. */
    hydra_status (*init)(void **state, const struct model_weights *w, int64_t n_batch, int64_t n_ctx,
                         int n_threads);
    void (*free)(void *state);
    /* One layer's step: see fwd_layer for what it reads and writes. */
    void (*run)(const struct fwd_layer *step);
} arch_attention;

/* The keys of every routed-expert architecture's own table. */
#define ARCH_KEYS_MOE                                                         \
    ARCH_KEY("expert_count", n_expert, KEY_U32, true),                        \
        ARCH_KEY("expert_used_count", n_expert_used, KEY_U32, true),          \
        ARCH_KEY("expert_feed_forward_length", n_ff_exp, KEY_U32, true)

/* Tensor table rows shared by the descriptors: the model's ends and each
 * layer's attention norm; GQA's four projections; biases on Q, K and V
 * (qwen2moe, gpt-oss); the routed experts. */
#define ARCH_USES_ENDS                                                        \
    {W_TOKEN_EMBD, NEED_ALWAYS, NULL}, {W_OUTPUT_NORM, NEED_ALWAYS, NULL},    \
        {W_OUTPUT, NEED_OPTIONAL, NULL}, {W_ATTN_NORM, NEED_ALWAYS, NULL}
#define ARCH_USES_QKVO                                                        \
    {W_ATTN_Q, NEED_ALWAYS, NULL}, {W_ATTN_K, NEED_ALWAYS, NULL},             \
        {W_ATTN_V, NEED_ALWAYS, NULL}, {W_ATTN_OUT, NEED_ALWAYS, NULL}
#define ARCH_USES_QKV_BIAS                                                    \
    {W_ATTN_Q_BIAS, NEED_ALWAYS, NULL}, {W_ATTN_K_BIAS, NEED_ALWAYS, NULL},   \
        {W_ATTN_V_BIAS, NEED_ALWAYS, NULL}
#define ARCH_USES_MOE                                                         \
    {W_MOE_ROUTER, NEED_MOE, NULL}, {W_MOE_GATE, NEED_MOE, NULL},             \
        {W_MOE_UP, NEED_MOE, NULL}, {W_MOE_DOWN, NEED_MOE, NULL}

/* An arch_desc's .keys/.n_keys/.tensors/.n_tensors from its two arrays. */
#define ARCH_TABLES(keys_, tensors_)                                          \
    .keys = (keys_), .n_keys = sizeof(keys_) / sizeof((keys_)[0]), .tensors = (tensors_), \
    .n_tensors = sizeof(tensors_) / sizeof((tensors_)[0])

typedef struct arch_desc {
    const char *name; /* general.architecture */
    const arch_key *keys; /* read after the common keys (model/arch.c) */
    size_t n_keys;
    const arch_use *tensors;
    size_t n_tensors;
    arch_norm norm;
    rope_style rope;
    arch_gating gating;       /* default when the file has no expert_gating_func key */
    bool expert_weights_norm; /* default when the file has no expert_weights_norm key */
    arch_act act;
    /* With attention.sliding_window: layer l attends to the last n_swa
     * positions only when l % swa_pattern < swa_pattern - 1 (llama.cpp's
     * set_swa_pattern; 2: even layers slide).  0: no sliding layers. */
    uint32_t swa_pattern;
    /* Hooks; NULL keeps the generic behaviour. */
    /* After the keys and defaults: derive and check what the architecture
     * adds (m to look at its tensors, e.g. to refuse a layout). */
    hydra_status (*hparams)(const hydra_model *m, arch_hparams *hp);
    const arch_attention *attention; /* NULL: GQA over K/V cache rows */
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
extern const arch_desc arch_deepseek2;
extern const arch_desc arch_gptoss;

/* Multi-head latent attention (model/mla.c), deepseek2's. */
extern const arch_attention arch_mla_attention;

#endif
