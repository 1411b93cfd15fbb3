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

/* Keys and values of every layer for n_ctx positions, in kv_type (QT_F16 or
 * QT_F32).  Layer l's keys start at k + l * n_ctx * k_row_bytes; a
 * position's row holds all KV heads. */
typedef struct kv_cache {
    uint32_t type;
    int64_t n_ctx;
    size_t k_row_bytes, v_row_bytes;
    uint8_t *k, *v;
} kv_cache;

hydra_status kv_init(kv_cache *kv, const model_weights *w, uint32_t type, int64_t n_ctx);
void kv_free(kv_cache *kv);

typedef struct fwd_scratch {
    int64_t n_batch, n_ctx;
    float *x;          /* residual stream: n_batch x n_embd */
    float *xn;         /* normed rows read by the projections */
    float *q, *k, *v;  /* projections of the batch */
    float *att;        /* attention output, n_head * head_dim_v per row */
    float *sub;        /* a sublayer's output before the residual add */
    float *rope;       /* cos/sin per row: n_batch x n_rot */
    const op_kernels *kern; /* attention's row primitives for this CPU */
    float *scores;     /* attention scratch: n_threads x scores_per_thread */
    size_t scores_per_thread;
    float *router;     /* n_batch x n_expert router logits */
    float *shexp_gate; /* n_batch */
    moe_route *routes; /* n_batch x n_expert_used */
    act_set xn_act;    /* xn as the Q/K/V, FFN and output matrices read it */
    act_set att_act;   /* att as the output projection reads it */
    moe_scratch moe;
} fwd_scratch;

/* One layer's step, as the attention hook of a descriptor receives it: the
 * normed rows are in f->xn (n rows), the sublayer's output goes to f->sub,
 * positions pos0 .. pos0 + n - 1 are appended to kv. */
typedef struct fwd_layer {
    const model_weights *w;
    int layer;
    thread_pool *pool;
    kv_cache *kv;
    fwd_scratch *f;
    int64_t pos0, n;
} fwd_layer;

hydra_status fwd_init(fwd_scratch *f, const model_weights *w, int64_t n_batch, int64_t n_ctx, int n_threads);
void fwd_free(fwd_scratch *f);

/* Evaluates n (1..n_batch) tokens at positions pos0 .. pos0 + n - 1
 * (pos0 + n <= kv->n_ctx; token ids < n_vocab: the caller checked).  With
 * all_rows, logits receives n rows of n_vocab; otherwise the last row only. */
void forward(const model_weights *w, thread_pool *pool, kv_cache *kv, fwd_scratch *f, int64_t pos0,
             const int32_t *tokens, int64_t n, bool all_rows, float *logits);

#endif
