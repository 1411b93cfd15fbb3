/*
 * synth_arch.h — what a synthetic model of each architecture contains, as
 * data: its metadata keys, its per-block tensors (name, shape, role), and
 * the shape rules llama.cpp's loader relies on.  synth.c turns a
 * description plus synth_params into a file.
 */
#ifndef HYDRA_SYNTH_ARCH_H
#define HYDRA_SYNTH_ARCH_H

#include "synth.h"

/* A number derived from the parameters: a key's value or a tensor dim. */
typedef enum synth_qty {
    SQ_NONE, /* an unused dimension (1) */
    SQ_ONE,
    SQ_EMBD, SQ_VOCAB, SQ_LAYERS, SQ_CTX,
    SQ_FF, SQ_FF_EXP, SQ_FF_SHEXP, SQ_FF_SHARED,
    SQ_HEADS, SQ_KV_HEADS, SQ_HEAD_DIM, SQ_Q_DIM, SQ_KV_DIM,
    SQ_EXPERTS, SQ_EXPERTS_USED, SQ_SHARED, SQ_DENSE_LEAD, SQ_GROUPS, SQ_GROUPS_USED,
    SQ_Q_LORA, SQ_KV_LORA, SQ_ROPE, SQ_KV_A, SQ_QK_MLA, SQ_QB,
    SQ_BLOCKS, SQ_NEXTN, SQ_EMBD_2, /* main + MTP blocks, MTP blocks, 2 x n_embd */
    SQ_COUNT
} synth_qty;

/* Its value (n_vocab must already be resolved) and a name for messages. */
uint64_t synth_qty_value(const synth_params *p, synth_qty q);
const char *synth_qty_name(synth_qty q);

/* SK_U32_NONZERO: a u32 written only when its value is not 0 (a key that
 * converters write only for models that have the feature). */
typedef enum synth_key_kind { SK_U32, SK_F32, SK_BOOL, SK_STR, SK_U32_NONZERO } synth_key_kind;

typedef struct synth_key {
    const char *suffix; /* the key is "<arch>.<suffix>" */
    synth_key_kind kind;
    synth_qty qty;      /* SK_U32 from the parameters; SQ_NONE: a constant */
    double num;         /* SK_F32, SK_BOOL (nonzero = true), constant SK_U32 */
    const char *s;      /* SK_STR */
} synth_key;

/* How a tensor is stored and initialised: weight matrices take the
 * requested type; norms, routers and biases stay F32, as in llama.cpp's
 * converter output.  SR_HEAD_NORM: a norm in front of an output head
 * (output_norm, nextn.shared_head_norm), drawn as SR_NORM unless
 * synth_params.zero_head_norms writes it as zeros. */
typedef enum synth_role { SR_WEIGHT, SR_ROUTER, SR_NORM, SR_HEAD_NORM, SR_BIAS } synth_role;

/* Which blocks hold a tensor: all, the leading dense ones, the MoE ones,
 * or the MTP blocks after the main ones (which are MoE blocks). */
typedef enum synth_blocks { SB_ALL, SB_DENSE, SB_MOE, SB_NEXTN } synth_blocks;

typedef struct synth_tensor {
    const char *name;   /* "attn_q.weight": stored as "blk.N.attn_q.weight" */
    synth_qty ne[3];    /* ggml order */
    synth_role role;
    synth_blocks blocks;
} synth_tensor;

enum synth_rule {
    SA_HEADS_SPAN_EMBD = 1 << 0, /* no key_length key: llama.cpp takes head_dim = n_embd / n_head */
    SA_FF_IS_EXPERT = 1 << 1,    /* feed_forward_length holds the expert size; n_ff must be 0 */
    SA_MLA = 1 << 2,             /* one latent KV head, expert groups, leading dense blocks */
    SA_NEXTN = 1 << 3,           /* may carry MTP blocks (synth_params.n_nextn) */
};

typedef struct synth_arch {
    const char *name;
    const char *tokenizer;  /* synth_vocab family */
    const char *preset;     /* the preset --arch alone starts from */
    const synth_key *keys;
    size_t n_keys;
    const synth_tensor *tensors;
    size_t n_tensors;
    unsigned rules;
} synth_arch;

const synth_arch *synth_arch_find(const char *name);

#endif
