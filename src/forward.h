/*
 * forward.h — the one forward pass: tokens at consecutive positions in,
 * K/V appended to the cache, logits out.  Working buffers are sized once
 * (fwd_init) from the model's shapes, the batch limit and the context; a
 * step allocates nothing.
 */
#ifndef HYDRA_FORWARD_H
#define HYDRA_FORWARD_H

#include "../kernels/cpu/ops.h"
#include "act.h"
#include "moe.h"
#include "threads.h"
#include "weights.h"

#include <stddef.h>
#include <stdint.h>

/* One layer's cache rows, in the cache's type.  A layer that attends to
 * every earlier position holds n_ctx rows, row p for position p.  A
 * sliding-window layer holds the window plus one step's positions as a
 * ring: position p in row p % n_slots, overwritten n_slots positions
 * later.  A row holds all KV heads (or an attention hook's own layout,
 * e.g. MLA's latent). */
typedef struct kv_layer {
    uint8_t *k, *v; /* v is NULL when the V row is 0 elements (MLA reads V from K) */
    int64_t n_slots;
    uint32_t window; /* 0: every earlier position */
} kv_layer;

typedef struct kv_cache {
    uint32_t type;
    int64_t n_ctx;
    size_t k_row_bytes, v_row_bytes;
    int64_t n_written; /* 1 + the highest position written since the last clear */
    uint32_t n_layer;
    kv_layer *layer;
    uint64_t n_bytes; /* of every layer's rows */
} kv_cache;

/* A cache for n_ctx positions, sliding layers sized for steps of up to
 * n_batch positions. */
hydra_status kv_init(kv_cache *kv, const model_weights *w, uint32_t type, int64_t n_ctx, int64_t n_batch);
void kv_free(kv_cache *kv);

/* The bytes kv_init would allocate (kv->n_bytes), without allocating: the
 * placement of hybrid decode counts them before anything is allocated.
 * 0 for a type kv_init rejects. */
uint64_t kv_bytes_for(const model_weights *w, uint32_t type, int64_t n_ctx, int64_t n_batch);

/* Whether evaluation can continue at position n_past (<= n_written):
 * every layer still holds the positions it would read.  False when a
 * sliding layer's ring has overwritten them since. */
bool kv_can_resume(const kv_cache *kv, int64_t n_past);

/* The row of position pos in a layer's K (V) cache. */
static inline uint8_t *kv_k_row(const kv_cache *kv, const kv_layer *l, int64_t pos)
{
    return l->k + (size_t)(pos % l->n_slots) * kv->k_row_bytes;
}

static inline uint8_t *kv_v_row(const kv_cache *kv, const kv_layer *l, int64_t pos)
{
    return l->v + (size_t)(pos % l->n_slots) * kv->v_row_bytes;
}

typedef struct fwd_scratch {
    int64_t n_batch, n_ctx;
    int n_threads;
    float *x;          /* residual stream: n_batch x n_embd */
    float *xn;         /* normed rows read by the projections */
    float *q, *k, *v;  /* projections of the batch */
    float *att;        /* attention output, n_head * head_dim_v per row */
    float *sub;        /* a sublayer's output before the residual add */
    float *rope;       /* cos/sin per row: n_batch x n_rot */
    const op_kernels *kern; /* attention's row primitives for this CPU */
    float *scores;     /* generic attention's scratch: n_threads x scores_per_thread */
    size_t scores_per_thread;
    void *attn_state;  /* an attention hook's working memory (arch_attention.init) */
    void (*attn_free)(void *state);
    float *router;     /* n_batch x n_expert router logits */
    float *shexp_gate; /* n_batch */
    moe_route *routes; /* n_batch x n_expert_used */
    act_set xn_act;    /* xn as the Q/K/V, FFN and output matrices read it */
    act_set att_act;   /* att as the output projection reads it */
    moe_scratch moe;
    struct hybrid_state *hybrid; /* the session's split (CPU split mode: MoE layers go through it); NULL: none */
    struct expert_rank *profile; /* expert lookups (and a trace) recorded after moe_select; NULL: none */
} fwd_scratch;

/* One layer's step, as the attention hook of a descriptor receives it: the
 * normed rows are in f->xn (n rows), the rows' RoPE cos/sin in f->rope, the
 * sublayer's output goes to f->sub, positions pos0 .. pos0 + n - 1 are
 * written to kv's layer. */
typedef struct fwd_layer {
    const model_weights *w;
    int layer;
    thread_pool *pool;
    kv_cache *kv;
    fwd_scratch *f;
    int64_t pos0, n;
} fwd_layer;

/* How attention reads a layer's cache rows: query head h uses KV head
 * h / (n_head / n_head_kv), whose K (V) starts g * k_head_bytes
 * (v_head_bytes) into the row. */
typedef struct fwd_attn_geom {
    int n_head, n_head_kv;
    int head_dim_k, head_dim_v;
    size_t k_head_bytes, v_head_bytes;
    bool v_in_k;         /* V is the start of the K row (MLA's latent); the layer has no V rows */
    float scale;         /* of q . k */
    const float *sinks;  /* one logit per query head; NULL: none */
} fwd_attn_geom;

/* Query heads served by one work item at most, so that a KV head shared by
 * many (MLA: every head) still spreads over the threads. */
enum { FWD_ATTN_HEADS_PER_ITEM = 8 };

/* Floats of scratch per thread fwd_attend needs for this geometry. */
size_t fwd_attend_scratch(const fwd_attn_geom *g, int64_t n_ctx);

/* Causal (and windowed, in a sliding layer) attention of c's n rows over
 * the layer's cache, whose rows for the step's positions are already
 * written: q holds n x n_head heads of head_dim_k, out receives n x n_head
 * heads of head_dim_v.  scratch: n_threads x scratch_per_thread floats. */
void fwd_attend(const fwd_layer *c, const fwd_attn_geom *g, const float *q, float *out, float *scratch,
                size_t scratch_per_thread);

/* y[t] = W . x[t] (+ bias) for every row of x. */
void fwd_project(thread_pool *pool, const wtensor *wt, const wtensor *bias, act_set *x, float *y);

hydra_status fwd_init(fwd_scratch *f, const model_weights *w, int64_t n_batch, int64_t n_ctx, int n_threads);
void fwd_free(fwd_scratch *f);

/* Evaluates n (1..n_batch) tokens at positions pos0 .. pos0 + n - 1
 * (pos0 + n <= kv->n_ctx; token ids < n_vocab: the caller checked).  With
 * all_rows, logits receives n rows of n_vocab; otherwise the last row only.
 * Afterwards f->x holds the n rows' final hidden states (the residual
 * stream before output_norm): the MTP drafter reads them (src/mtp.c). */
void forward(const model_weights *w, thread_pool *pool, kv_cache *kv, fwd_scratch *f, int64_t pos0,
             const int32_t *tokens, int64_t n, bool all_rows, float *logits);

/* One sequence's share of a multi-sequence step: n tokens at positions
 * pos0 .. pos0 + n - 1 of its own cache (whose n_ctx is at most f's). */
typedef struct fwd_seq {
    kv_cache *kv;
    const int32_t *tokens;
    int64_t pos0, n;
    bool all_rows; /* logits of every row of this sequence (a verify pass), not its last only */
} fwd_seq;

/* forward() for several sequences at once (continuous batching): their
 * rows, sequence after sequence (at most n_batch in all), go through every
 * weight matrix together, so each matrix is read once for all of them;
 * attention runs per sequence over its own cache.  A row's result depends
 * only on its sequence (the kernels give a row the same bits whatever the
 * other rows), so each sequence gets the logits it would get alone.  With
 * all_rows, logits receives every row; otherwise row i is the last row of
 * sequence i (every row of a sequence whose all_rows is set, in order). */
void forward_seqs(const model_weights *w, thread_pool *pool, fwd_scratch *f, const fwd_seq *seqs, int n_seqs,
                  bool all_rows, float *logits);

#endif
