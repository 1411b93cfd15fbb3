/*
 * split.h — how a model is spread over several GPUs (issue 13,
 * docs/MULTIGPU.md), decided on the host before anything is allocated,
 * and the cache of split states the multi-GPU step keeps per step shape.
 *
 *   -sm none    one device (the main GPU) holds everything
 *   -sm layer   each device a contiguous range of layers; the embedding on
 *               the first, the output head on the last, which is the main
 *               GPU (the devices run in id order with the main GPU moved
 *               to the end); the hidden state crosses each boundary once
 *   -sm tensor  every device every layer, each a share of the KV heads (with
 *               their query heads), of the dense FFN columns and of the
 *               routed experts; one all-reduce per sublayer; embedding on
 *               every device, output head on the main GPU
 *
 * Shares follow the -ts ratios (none given: the devices' available bytes),
 * cut in whole units (layers, KV heads, FFN granules, experts); a tensor
 * split's KV heads and FFN columns in units whose output columns are whole
 * quant blocks, and a sublayer with fewer such units than devices is not
 * split (split_plan).  Nothing
 * here touches a GPU, so the partition is tested in CI (tests/test_split.c).
 */
#ifndef HYDRA_SPLIT_H
#define HYDRA_SPLIT_H

#include "hydra.h"

#include "weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { SPLIT_MAX_DEV = 16, SPLIT_CACHE_WAYS = 4 };

typedef enum split_mode { SPLIT_NONE = 0, SPLIT_LAYER = 1, SPLIT_TENSOR = 2 } split_mode;

/* The shapes and bytes a plan needs (split_model_of fills it from a
 * model's weights). */
typedef struct split_model {
    int n_layer;
    const uint64_t *layer_bytes; /* per layer: weights on the device plus its KV cache */
    uint64_t embed_bytes;        /* token embedding */
    uint64_t head_bytes;         /* output norm and projection */
    uint64_t scratch_bytes;      /* working buffers of one device */
    int n_head_kv;               /* tensor split units: KV heads (latent attention: query heads, each
                                  * its own slice of q, k_b, v_b; the latent is on every part), */
    int head_granule;            /* in granules whose attention output columns are whole quant blocks
                                  * (split_col_granule; 0 counts as 1), */
    int64_t n_ff, ff_granule;    /* dense FFN columns in granules (the down matrix's block), */
    int n_expert;                /* routed experts */
    uint64_t attn_bytes;         /* all layers: Q/K/V/output weights and KV cache (an unsplit */
    uint64_t ffn_bytes;          /* attention is on every part); dense and shared-expert FFN weights */
    uint64_t replicated_bytes;   /* all layers: what every part holds whole whatever the cut (latent
                                  * attention's q_a, kv_a_mqa, their norms and the latent cache) */
} split_model;

typedef struct split_request {
    split_mode mode;
    int n_dev;                   /* devices present (1..SPLIT_MAX_DEV) */
    const uint64_t *avail;       /* per device: free bytes, or the --vram-budget */
    const float *ratios;         /* -ts per device; NULL or all zero: proportional to avail */
    int main_gpu;
} split_request;

typedef struct split_part {
    int device;
    int layer0, layer1;          /* layers [layer0, layer1) */
    bool embed, head;            /* holds the token embedding / the output head */
    int head0, head1;            /* tensor: KV heads [head0, head1) (latent attention: query heads) */
    int64_t ff0, ff1;            /* tensor: dense FFN columns */
    int exp0, exp1;              /* tensor: routed experts */
    uint64_t need, avail;        /* bytes the part needs, bytes the device offers */
    double share;                /* tensor: the part's fraction of every cut (split_cut) */
} split_part;

/* Tensor split: a sublayer whose output projection has fewer whole quant
 * blocks of columns (in units of KV heads, or FFN columns) than there are
 * parts is not split: every part holds it whole, and only the main part's
 * output counts (split_view.c).  So no part's slice ever cuts a block. */
typedef struct split_plan {
    split_mode mode;
    int n_part;
    split_part part[SPLIT_MAX_DEV];
    bool heads_whole;            /* tensor: attention not split (every part KV heads 0..n-1) */
    bool ff_whole;               /* tensor: dense FFN not split */
} split_plan;

/* Cuts [0, total) into n shares proportional to weights, in whole units of
 * granule (the last share takes the remainder): begin[i] .. begin[i + 1]
 * is share i (begin has n + 1 entries).  A zero weight gets an empty
 * share; all-zero weights count as equal. */
void split_shares(int64_t total, int64_t granule, const double *weights, int n, int64_t *begin);

/* As split_shares, but every share gets at least one granule when total
 * holds n of them: a tensor split's part without a KV head or an FFN
 * column would have nothing to run in that sublayer. */
void split_shares_min1(int64_t total, int64_t granule, const double *weights, int n, int64_t *begin);

/* Tensor split: part's range [*b0, *b1) of total units cut in granules
 * by the parts' shares (split_shares_min1); the plan's heads, FFN columns
 * and experts are these cuts, and so is any other width cut the same way
 * (a shared expert's FFN, split_view.c). */
void split_cut(const split_plan *plan, int part, int64_t total, int64_t granule, int64_t *b0, int64_t *b1);

/* A width cut in whole quant blocks (KV heads, FFN columns): split_cut in
 * granules when total holds at least one granule per part; else false,
 * and [0, total) for every part (the sublayer is not split). */
bool split_cut_blocks(const split_plan *plan, int part, int64_t total, int64_t granule, int64_t *b0,
                      int64_t *b1);

/* The smallest count of units (a KV head's attention output columns:
 * unit = query heads per KV head x head_dim_v; an FFN column: unit = 1)
 * whose columns are whole blocks of role's matrix in every layer; 1 where
 * no layer has the matrix. */
int64_t split_col_granule(const model_weights *w, int role, int64_t unit);

/* Plans the request.  HYDRA_ERR_INVALID_ARG for a bad mode, device count,
 * main GPU or ratio; HYDRA_ERR_RANGE, naming the device and every part's
 * bytes, when a part does not fit its device. */
hydra_status split_plan_make(split_plan *plan, const split_model *m, const split_request *r);

/* The plan as text, one line per part, into buf (always terminated). */
size_t split_plan_describe(const split_plan *plan, char *buf, size_t cap);

/* The model's shapes for a plan: layer bytes (routed experts left out when
 * skip_experts: the hybrid slab takes them from what is left), KV cache of
 * n_ctx positions, scratch estimate.  *layer_bytes is allocated (free it). */
hydra_status split_model_of(split_model *m, uint64_t **layer_bytes, const model_weights *w, int64_t n_ctx,
                            int64_t n_batch, uint32_t kv_type, bool skip_experts);

/* "3,1" into ratios (at most max); the count, or -1 on a malformed list. */
int split_parse_ratios(const char *text, float *ratios, int max);

/* --- a tensor split's part as a model of its own (split_view.c): hp with
 * the part's KV heads (and their query heads) and FFN widths; Q/K/V rows,
 * attention output columns, FFN gate/up rows and down columns of the
 * part; routed expert stacks of [exp0, exp1) (ne[2] the part's count);
 * the attention output bias and the output head on the main part only.
 * Latent attention (deepseek2): the part's query heads (q / q_b rows,
 * their k_b and v_b matrices, output columns), the latent projections
 * whole (n_head_kv stays 1; each part caches the latent).
 * all_experts (the hybrid slab, split_slab): the routed stacks and their
 * biases stay whole, since the part's hybrid session reads any expert's
 * weights from the mapping (its slab's experts, or, on the main part,
 * the CPU pass's) and skips the experts computed elsewhere.
 * Row slices point into w's mapping; column slices are host copies the
 * view owns, whole quant blocks in the model's type; an unsplit sublayer
 * (split_plan's heads_whole, or an FFN too narrow to cut in blocks) is
 * whole on every part, its output projection zero blocks off the main
 * part.  w must outlive the view. */
typedef struct split_view {
    model_weights w;
    layer_weights *layer;
    int exp0, exp1;
    void **buf;                  /* the copies */
    int n_buf, cap_buf;
} split_view;

hydra_status split_view_make(split_view *v, const model_weights *w, const split_plan *plan, int part,
                             bool all_experts);
void split_view_free(split_view *v); /* safe on a zeroed or freed view */

/* --- -sm tensor with the hybrid slab (split_slab.c): each part's slab holds
 * hot experts among the routed experts it owns ([exp0, exp1) of its plan
 * part), sized by what its device has left once its own share of the
 * model is placed (avail - need of a plan made with the routed experts
 * left out, split_model_of's skip_experts).  An expert that no part's slab
 * holds is computed by the CPU miss pass once, on the main part only, so
 * every (layer, expert) is computed by exactly one of: its owner's slab,
 * the main part's CPU pass.  Slots per MoE layer as placement.h plans
 * without a profile: the same count in every layer (the most the part's
 * slab budget allows), the remainder one more slot per layer from the
 * first on, never more than the part owns; each part's slots go to its
 * hottest owned experts by order. */
typedef enum split_slab_role {
    SPLIT_SLAB_HERE = 0,      /* in this part's slab: its GPU computes it */
    SPLIT_SLAB_CPU = 1,       /* in no slab: this part (the main one) runs it on the CPU */
    SPLIT_SLAB_ELSEWHERE = 2, /* another part's slab, or the main part's CPU pass: skipped here */
} split_slab_role;

typedef struct split_slab_input {
    const split_plan *plan;       /* a tensor split's plan */
    int n_layer, n_expert;
    const uint64_t *expert_bytes; /* per layer: one expert's slab bytes; 0: a dense layer */
    const int32_t *const *order;  /* per layer: every expert once, hottest first; NULL (or NULL rows): ascending */
    double fraction;              /* >= 0: each part takes this share of its own experts per MoE layer
                                   * (nearest, no budget: --hybrid's slab fraction); < 0: by budget */
} split_slab_input;

typedef struct split_slab {
    int n_part, n_layer, n_expert, main;
    uint64_t budget[SPLIT_MAX_DEV]; /* per part: slab bytes, avail - need */
    int exp0[SPLIT_MAX_DEV], exp1[SPLIT_MAX_DEV]; /* per part: the experts it owns, the plan's */
    int32_t *n_slots;               /* n_part x n_layer */
    int16_t *holder;                /* n_layer x n_expert: the part whose slab holds it; -1: none (CPU), -2: dense layer */
} split_slab;

/* Plans every part's slab.  HYDRA_ERR_INVALID_ARG for a plan that is not a
 * tensor split or an order that is not a permutation of a layer's experts;
 * HYDRA_ERR_NOMEM.  Free with split_slab_free. */
hydra_status split_slab_make(split_slab *s, const split_slab_input *in);
void split_slab_free(split_slab *s); /* zeroes; safe on a zeroed one */

/* What part does with expert e of layer l (dense layers: ELSEWHERE). */
split_slab_role split_slab_role_of(const split_slab *s, int part, int l, int e);

/* Part's slab now holds (held) or no longer holds expert e of layer l,
 * one of its own (an admission or an eviction of its hybrid session,
 * gpu_hybrid_table.c): the expert's computer becomes that part, or the
 * main part's CPU pass.  Dense layers and experts outside the part's
 * range are left as they are. */
void split_slab_hold(split_slab *s, int part, int l, int e, bool held);

/* Part's expert ids of layer l for hybrid_config.order: the experts of its
 * slab first, then the rest, each ascending; returns the slab's
 * count (part's hybrid_config.n_slots[l]).  ids holds n_expert. */
int32_t split_slab_order(const split_slab *s, int part, int l, int32_t *ids);

/* --- split states, cached by the step's structure.  A state says, for one
 * step shape, what each part moves: rows of the hidden state across a
 * layer boundary, elements of each all-reduce.  SPLIT_CACHE_WAYS states
 * are kept (prefill chunk, decode, verify alternate without rebuilds), the
 * least recently used replaced.  The generation counts memory changes: a
 * state, and a graph captured with it, belongs to the generation it was
 * built in, and one of an older generation is rebuilt, never replayed. */
typedef struct split_shape {
    int64_t n_tok, max_kv, all_rows;
} split_shape;

typedef struct split_state {
    uint64_t key, generation, last_use;
    split_shape shape;
    int64_t boundary_floats;     /* layer split: floats of x copied per boundary */
    int64_t reduce_floats;       /* tensor split: floats per all-reduce */
    int n_part;
} split_state;

typedef struct split_cache {
    split_state way[SPLIT_CACHE_WAYS];
    int n;
    uint64_t clock, generation;
    uint64_t hits, builds, evictions;
} split_cache;

/* The state of this shape under plan (built, possibly replacing the least
 * recently used, when absent or of an older generation). */
const split_state *split_cache_get(split_cache *c, const split_plan *plan, int64_t n_embd, const split_shape *sh);

/* Memory a captured graph may point into was freed or regrown: every
 * state and graph of earlier generations is stale. */
void split_cache_bump(split_cache *c);

#endif
