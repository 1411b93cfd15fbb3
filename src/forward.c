/*
 * forward.c — the generic decoder forward pass, driven by the architecture
 * descriptor and the tensors bound to it:
 *
 *   x = embed(tokens)
 *   for each layer:
 *       x += attention(rmsnorm(x))       Q/K/V (+ biases), QK-norm, RoPE,
 *                                        K/V into the cache, causal GQA,
 *                                        output projection
 *       x += ffn(rmsnorm(x))             MoE (router, top-k, experts,
 *                                        shared expert) or dense SwiGLU
 *   logits = output(rmsnorm(x))
 *
 * What an architecture has decides what runs: a bias, a QK-norm gain or a
 * shared expert is applied when the descriptor bound it; a descriptor's
 * attention hook replaces the generic GQA attention (MLA).  Rows of the batch
 * are independent except in attention, where token t sees positions up to
 * its own.
 */
#include "forward.h"

#include "../kernels/cpu/matmul.h"
#include "../kernels/cpu/ops.h"
#include "error.h"
#include "quant.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* --- buffers */

hydra_status kv_init(kv_cache *kv, const model_weights *w, uint32_t type, int64_t n_ctx)
{
    memset(kv, 0, sizeof *kv);
    const arch_hparams *hp = &w->hp;
    const size_t es = op_kv_elem_size(type);
    if (es == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "KV cache type %u: only F16 and F32 are supported", type);
    size_t k_elems = (size_t)hp->n_head_kv * hp->head_dim_k, v_elems = (size_t)hp->n_head_kv * hp->head_dim_v;
    if (w->arch->kv_row_elems != NULL)
        w->arch->kv_row_elems(hp, &k_elems, &v_elems);
    kv->type = type;
    kv->n_ctx = n_ctx;
    kv->k_row_bytes = k_elems * es;
    kv->v_row_bytes = v_elems * es;
    const size_t positions = (size_t)hp->n_layer * (size_t)n_ctx;
    if (positions / hp->n_layer != (size_t)n_ctx || positions > SIZE_MAX / (kv->k_row_bytes + kv->v_row_bytes))
        return hydra_fail(HYDRA_ERR_NOMEM, "KV cache of %lld positions x %u layers overflows", (long long)n_ctx,
                          hp->n_layer);
    /* calloc: untouched pages of a long context cost no memory until used */
    kv->k = calloc(positions, kv->k_row_bytes);
    kv->v = calloc(positions, kv->v_row_bytes);
    if (kv->k == NULL || kv->v == NULL) {
        kv_free(kv);
        return hydra_fail(HYDRA_ERR_NOMEM, "KV cache of %lld positions x %u layers (%zu bytes per position)",
                          (long long)n_ctx, hp->n_layer, kv->k_row_bytes + kv->v_row_bytes);
    }
    return HYDRA_OK;
}

void kv_free(kv_cache *kv)
{
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

static float *alloc_floats(size_t n, bool *ok)
{
    float *p = malloc(sizeof(float) * (n > 0 ? n : 1));
    *ok = *ok && p != NULL;
    return p;
}

hydra_status fwd_init(fwd_scratch *f, const model_weights *w, int64_t n_batch, int64_t n_ctx, int n_threads)
{
    memset(f, 0, sizeof *f);
    const arch_hparams *hp = &w->hp;
    const size_t nb = (size_t)n_batch;
    f->n_batch = n_batch;
    f->n_ctx = n_ctx;
    bool ok = true;
    f->x = alloc_floats(nb * hp->n_embd, &ok);
    f->xn = alloc_floats(nb * hp->n_embd, &ok);
    f->q = alloc_floats(nb * hp->n_head * hp->head_dim_k, &ok);
    f->k = alloc_floats(nb * hp->n_head_kv * hp->head_dim_k, &ok);
    f->v = alloc_floats(nb * hp->n_head_kv * hp->head_dim_v, &ok);
    f->att = alloc_floats(nb * hp->n_head * hp->head_dim_v, &ok);
    f->sub = alloc_floats(nb * hp->n_embd, &ok);
    f->rope = alloc_floats(nb * hp->n_rot, &ok);
    f->kern = op_kernels_best();
    f->scores_per_thread = op_attention_scratch((int)(hp->n_head / hp->n_head_kv), n_ctx, (int)hp->head_dim_k,
                                                (int)hp->head_dim_v);
    f->scores = alloc_floats((size_t)n_threads * f->scores_per_thread, &ok);
    f->router = alloc_floats(nb * hp->n_expert, &ok);
    f->shexp_gate = alloc_floats(nb, &ok);
    f->routes = malloc(sizeof(moe_route) * (nb * hp->n_expert_used + 1));
    ok = ok && f->routes != NULL;
    hydra_status st = ok ? HYDRA_OK
                         : hydra_fail(HYDRA_ERR_NOMEM, "forward buffers for a batch of %lld and a context of %lld",
                                      (long long)n_batch, (long long)n_ctx);
    if (st == HYDRA_OK)
        st = act_init(&f->xn_act, w, hp->n_embd, n_batch);
    if (st == HYDRA_OK)
        st = act_init(&f->att_act, w, (int64_t)hp->n_head * hp->head_dim_v, n_batch);
    if (st == HYDRA_OK)
        st = moe_scratch_init(&f->moe, w, n_batch);
    if (st != HYDRA_OK)
        fwd_free(f);
    return st;
}

void fwd_free(fwd_scratch *f)
{
    free(f->x);
    free(f->xn);
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->att);
    free(f->sub);
    free(f->rope);
    free(f->scores);
    free(f->router);
    free(f->shexp_gate);
    free(f->routes);
    act_free(&f->xn_act);
    act_free(&f->att_act);
    moe_scratch_free(&f->moe);
    memset(f, 0, sizeof *f);
}

/* --- building blocks */

static void embed(const model_weights *w, const int32_t *tokens, int64_t n, float *x)
{
    const wtensor *e = &w->global[W_TOKEN_EMBD];
    const quant_to_float_fn to_float = quant_traits_of(e->type)->to_float;
    for (int64_t t = 0; t < n; t++)
        to_float(e->data + (size_t)tokens[t] * e->row_bytes, x + t * e->ne[0], e->ne[0]);
}

static void rmsnorm_rows(const float *x, const wtensor *gain, float eps, int64_t n_rows, int64_t n, float *y)
{
    for (int64_t t = 0; t < n_rows; t++)
        op_rmsnorm(y + t * n, x + t * n, wt_f32(gain), n, eps);
}

/* y[t] = W . x[t] (+ bias) for every row of x. */
static void project(thread_pool *pool, const wtensor *wt, const wtensor *bias, act_set *x, float *y)
{
    size_t stride;
    const void *xq = act_for(x, pool, wt->type, &stride);
    matmul(pool, wt->type, wt->data, wt->row_bytes, wt->ne[1], wt->ne[0], xq, stride, x->n_rows, y,
           (size_t)wt->ne[1]);
    if (bias != NULL && bias->data != NULL)
        for (int64_t t = 0; t < x->n_rows; t++)
            op_axpy(y + t * wt->ne[1], 1.0f, wt_f32(bias), wt->ne[1]);
}

static void add_rows(float *x, const float *d, int64_t n)
{
    op_axpy(x, 1.0f, d, n);
}

/* --- attention */

/* Per head of one row: QK-norm (when the layer has it), then RoPE. */
static void prepare_heads(float *row, int n_heads, int head_dim, const wtensor *norm, float eps, const float *cs,
                          int n_rot, rope_style style)
{
    for (int h = 0; h < n_heads; h++) {
        float *head = row + (size_t)h * head_dim;
        if (norm->data != NULL)
            op_rmsnorm(head, head, wt_f32(norm), head_dim, eps);
        op_rope(head, cs, n_rot, style);
    }
}

typedef struct attn_job {
    const arch_hparams *hp;
    const kv_cache *kv;
    const op_kernels *kern;
    const uint8_t *k_layer, *v_layer;
    const float *q;
    float *att;
    float *scratch;
    size_t scratch_per_thread;
    int64_t pos0, n;
    _Atomic int64_t next;
} attn_job;

/* Work items are (row, KV head) pairs, claimed one at a time: later rows
 * see more positions, so a static split would leave threads idle.  Each
 * item serves the query heads of its KV head together, so a cache row is
 * read once for all of them. */
static void attn_task(void *ctx, int thread_idx, int n_threads)
{
    (void)n_threads;
    attn_job *job = ctx;
    const arch_hparams *hp = job->hp;
    const int group = (int)(hp->n_head / hp->n_head_kv);
    const size_t es = op_kv_elem_size(job->kv->type);
    float *scratch = job->scratch + (size_t)thread_idx * job->scratch_per_thread;
    const int64_t items = job->n * hp->n_head_kv;
    for (int64_t i; (i = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) < items;) {
        const int64_t t = i / hp->n_head_kv;
        const int g = (int)(i % hp->n_head_kv);
        const attn_args a = {
            .head_dim_k = (int)hp->head_dim_k,
            .head_dim_v = (int)hp->head_dim_v,
            .scale = 1.0f / sqrtf((float)hp->head_dim_k),
            .kv_type = job->kv->type,
            .k = job->k_layer + (size_t)g * hp->head_dim_k * es,
            .k_stride = job->kv->k_row_bytes,
            .v = job->v_layer + (size_t)g * hp->head_dim_v * es,
            .v_stride = job->kv->v_row_bytes,
            .n_kv = job->pos0 + t + 1,
        };
        const size_t head0 = (size_t)t * hp->n_head + (size_t)g * group;
        op_attention_group(job->kern, job->q + head0 * hp->head_dim_k, group, &a, scratch,
                           job->att + head0 * hp->head_dim_v);
    }
}

/* The generic attention: GQA over the layer's cache rows. */
static void attention_gqa(const fwd_layer *c)
{
    const model_weights *w = c->w;
    const int l = c->layer;
    thread_pool *pool = c->pool;
    kv_cache *kv = c->kv;
    fwd_scratch *f = c->f;
    const int64_t pos0 = c->pos0, n = c->n;
    const arch_hparams *hp = &w->hp;
    const layer_weights *lw = &w->layer[l];
    const int64_t dq = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t dk = (int64_t)hp->n_head_kv * hp->head_dim_k, dv = (int64_t)hp->n_head_kv * hp->head_dim_v;
    act_bind(&f->xn_act, f->xn, n);
    project(pool, &lw->w[W_ATTN_Q], &lw->w[W_ATTN_Q_BIAS], &f->xn_act, f->q);
    project(pool, &lw->w[W_ATTN_K], &lw->w[W_ATTN_K_BIAS], &f->xn_act, f->k);
    project(pool, &lw->w[W_ATTN_V], &lw->w[W_ATTN_V_BIAS], &f->xn_act, f->v);

    uint8_t *k_layer = kv->k + (size_t)l * (size_t)kv->n_ctx * kv->k_row_bytes;
    uint8_t *v_layer = kv->v + (size_t)l * (size_t)kv->n_ctx * kv->v_row_bytes;
    for (int64_t t = 0; t < n; t++) {
        const float *cs = f->rope + t * hp->n_rot;
        prepare_heads(f->q + t * dq, (int)hp->n_head, (int)hp->head_dim_k, &lw->w[W_ATTN_Q_NORM], hp->norm_eps, cs,
                      (int)hp->n_rot, w->arch->rope);
        prepare_heads(f->k + t * dk, (int)hp->n_head_kv, (int)hp->head_dim_k, &lw->w[W_ATTN_K_NORM], hp->norm_eps,
                      cs, (int)hp->n_rot, w->arch->rope);
        op_kv_store(f->kern, k_layer + (size_t)(pos0 + t) * kv->k_row_bytes, kv->type, f->k + t * dk, (int)dk);
        op_kv_store(f->kern, v_layer + (size_t)(pos0 + t) * kv->v_row_bytes, kv->type, f->v + t * dv, (int)dv);
    }

    attn_job job = {.hp = hp, .kv = kv, .kern = f->kern, .k_layer = k_layer, .v_layer = v_layer, .q = f->q,
                    .att = f->att, .scratch = f->scores, .scratch_per_thread = f->scores_per_thread, .pos0 = pos0,
                    .n = n};
    atomic_init(&job.next, 0);
    pool_run(pool, attn_task, &job);

    act_bind(&f->att_act, f->att, n);
    project(pool, &lw->w[W_ATTN_OUT], NULL, &f->att_act, f->sub);
}

/* --- feed-forward */

static void feed_forward(const fwd_layer *c)
{
    const model_weights *w = c->w;
    thread_pool *pool = c->pool;
    fwd_scratch *f = c->f;
    const int64_t n = c->n;
    const layer_weights *lw = &w->layer[c->layer];
    act_bind(&f->xn_act, f->xn, n);
    memset(f->sub, 0, sizeof(float) * (size_t)n * w->hp.n_embd);
    if (!lw->moe) {
        ffn_swiglu(pool, &f->moe, &lw->w[W_FFN_GATE], &lw->w[W_FFN_UP], &lw->w[W_FFN_DOWN], &f->xn_act, NULL, f->sub,
                   w->hp.n_embd);
        return;
    }
    const moe_gating g = moe_gating_of(w);
    moe_router(pool, lw, &f->xn_act, f->router);
    moe_select(&g, &f->moe, f->router, n, f->routes);
    moe_experts(pool, &f->moe, lw, &f->xn_act, f->routes, n * g.n_used, f->sub, w->hp.n_embd);
    moe_shared(pool, &f->moe, lw, &f->xn_act, f->shexp_gate, f->sub, w->hp.n_embd);
}

/* --- the pass */

void forward(const model_weights *w, thread_pool *pool, kv_cache *kv, fwd_scratch *f, int64_t pos0,
             const int32_t *tokens, int64_t n, bool all_rows, float *logits)
{
    const arch_hparams *hp = &w->hp;
    const int64_t embd = hp->n_embd;
    embed(w, tokens, n, f->x);
    for (int64_t t = 0; t < n; t++)
        op_rope_cache(f->rope + t * hp->n_rot, pos0 + t, (int)hp->n_rot, hp->rope_base);

    void (*const attention)(const fwd_layer *) = w->arch->attention ? w->arch->attention : attention_gqa;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *lw = &w->layer[l];
        const fwd_layer step = {.w = w, .layer = (int)l, .pool = pool, .kv = kv, .f = f, .pos0 = pos0, .n = n};
        rmsnorm_rows(f->x, &lw->w[W_ATTN_NORM], hp->norm_eps, n, embd, f->xn);
        attention(&step);
        add_rows(f->x, f->sub, n * embd);

        rmsnorm_rows(f->x, &lw->w[W_FFN_NORM], hp->norm_eps, n, embd, f->xn);
        feed_forward(&step);
        add_rows(f->x, f->sub, n * embd);
    }

    const int64_t first = all_rows ? 0 : n - 1;
    rmsnorm_rows(f->x + first * embd, &w->global[W_OUTPUT_NORM], hp->norm_eps, n - first, embd, f->xn);
    act_bind(&f->xn_act, f->xn, n - first);
    project(pool, &w->global[W_OUTPUT], NULL, &f->xn_act, logits);
}
