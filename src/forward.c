/*
 * forward.c — the generic decoder forward pass, driven by the architecture
 * descriptor and the tensors bound to it:
 *
 *   x = embed(tokens)
 *   for each layer:
 *       x += attention(rmsnorm(x))       Q/K/V (+ biases), QK-norm, RoPE
 *                                        (+ YaRN), K/V into the cache,
 *                                        causal GQA (sliding window, sinks),
 *                                        output projection (+ bias)
 *       x += ffn(rmsnorm(x))             MoE (router, top-k, experts,
 *                                        shared expert) or dense SwiGLU
 *   logits = output(rmsnorm(x))
 *
 * What an architecture has decides what runs: a bias, a QK-norm gain, a
 * sink or a shared expert is applied when the descriptor bound it, a window
 * when the layer has one; a descriptor's attention hook replaces the
 * generic GQA attention (MLA, model/mla.c) and reuses its cache reader
 * (fwd_attend).  Rows of the batch are independent except in attention,
 * where token t sees positions up to its own.
 */
#include "forward.h"

#include "../kernels/cpu/matmul.h"
#include "../kernels/cpu/ops.h"
#include "error.h"
#include "expert_rank.h"
#include "hybrid.h"
#include "quant.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* --- buffers */

/* A sliding layer's ring: the window, plus the rest of a step's positions,
 * which are written before the step's first row reads its window. */
static int64_t layer_slots(uint32_t window, int64_t n_ctx, int64_t n_batch)
{
    if (window == 0 || (int64_t)window + n_batch - 1 >= n_ctx)
        return n_ctx;
    return (int64_t)window + n_batch - 1;
}

static void *alloc_rows(int64_t n, size_t row_bytes, bool *ok)
{
    if (row_bytes == 0)
        return NULL;
    /* calloc: untouched pages of a long context cost no memory until used */
    void *p = (size_t)n > SIZE_MAX / row_bytes ? NULL : calloc((size_t)n, row_bytes);
    *ok = *ok && p != NULL;
    return p;
}

/* Elements of one cached K and V row: every KV head, or a hook's layout. */
static void kv_row_elems(const model_weights *w, size_t *k_elems, size_t *v_elems)
{
    const arch_hparams *hp = &w->hp;
    *k_elems = (size_t)hp->n_head_kv * hp->head_dim_k;
    *v_elems = (size_t)hp->n_head_kv * hp->head_dim_v;
    if (w->arch->attention != NULL)
        w->arch->attention->kv_row_elems(hp, k_elems, v_elems);
}

uint64_t kv_bytes_for(const model_weights *w, uint32_t type, int64_t n_ctx, int64_t n_batch)
{
    size_t k_elems, v_elems;
    kv_row_elems(w, &k_elems, &v_elems);
    const uint64_t row = (uint64_t)(k_elems + v_elems) * op_kv_elem_size(type);
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < w->hp.n_layer; l++)
        bytes += (uint64_t)layer_slots(w->layer[l].window, n_ctx, n_batch) * row;
    return bytes;
}

hydra_status kv_init(kv_cache *kv, const model_weights *w, uint32_t type, int64_t n_ctx, int64_t n_batch)
{
    memset(kv, 0, sizeof *kv);
    const arch_hparams *hp = &w->hp;
    const size_t es = op_kv_elem_size(type);
    if (es == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "KV cache type %u: only F16 and F32 are supported", type);
    size_t k_elems, v_elems;
    kv_row_elems(w, &k_elems, &v_elems);
    kv->type = type;
    kv->n_ctx = n_ctx;
    kv->k_row_bytes = k_elems * es;
    kv->v_row_bytes = v_elems * es;
    kv->layer = calloc(hp->n_layer, sizeof *kv->layer);
    if (kv->layer == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "KV cache of %u layers", hp->n_layer);
    kv->n_layer = hp->n_layer;
    bool ok = true;
    for (uint32_t l = 0; l < hp->n_layer && ok; l++) {
        kv_layer *layer = &kv->layer[l];
        layer->window = w->layer[l].window;
        layer->n_slots = layer_slots(layer->window, n_ctx, n_batch);
        layer->k = alloc_rows(layer->n_slots, kv->k_row_bytes, &ok);
        layer->v = alloc_rows(layer->n_slots, kv->v_row_bytes, &ok);
        kv->n_bytes += (uint64_t)layer->n_slots * (kv->k_row_bytes + kv->v_row_bytes);
    }
    if (!ok) {
        kv_free(kv);
        return hydra_fail(HYDRA_ERR_NOMEM, "KV cache of %lld positions x %u layers (%zu bytes per position)",
                          (long long)n_ctx, hp->n_layer, k_elems * es + v_elems * es);
    }
    return HYDRA_OK;
}

void kv_free(kv_cache *kv)
{
    for (uint32_t l = 0; l < kv->n_layer; l++) {
        free(kv->layer[l].k);
        free(kv->layer[l].v);
    }
    free(kv->layer);
    memset(kv, 0, sizeof *kv);
}

bool kv_can_resume(const kv_cache *kv, int64_t n_past)
{
    for (uint32_t l = 0; l < kv->n_layer; l++) {
        const kv_layer *layer = &kv->layer[l];
        /* position n_past reads [n_past - window + 1, n_past - 1]; the ring
         * holds [n_written - n_slots, n_written - 1] */
        const int64_t oldest_read = n_past - layer->window + 1 > 0 ? n_past - layer->window + 1 : 0;
        if (layer->n_slots < kv->n_ctx && n_past > 0 && oldest_read < kv->n_written - layer->n_slots)
            return false;
    }
    return true;
}

static fwd_attn_geom gqa_geom(const arch_hparams *hp, const layer_weights *lw, uint32_t kv_type);

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
    const arch_attention *hook = w->arch->attention;
    f->n_batch = n_batch;
    f->n_ctx = n_ctx;
    f->n_threads = n_threads;
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
    if (hook == NULL) {
        const fwd_attn_geom g = gqa_geom(hp, NULL, QT_F32);
        f->scores_per_thread = fwd_attend_scratch(&g, n_ctx);
        f->scores = alloc_floats((size_t)n_threads * f->scores_per_thread, &ok);
    }
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
    if (st == HYDRA_OK && hook != NULL) {
        f->attn_free = hook->free;
        st = hook->init(&f->attn_state, w, n_batch, n_ctx, n_threads);
    }
    if (st == HYDRA_OK)
        return HYDRA_OK;
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
    if (f->attn_state != NULL)
        f->attn_free(f->attn_state);
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

/* One projection of several that read the same rows. */
typedef struct projection {
    const wtensor *wt, *bias;
    float *y;
} projection;

/* y = W . x[t] (+ bias) for every projection and every row of x, all the
 * products in one parallel region (matmul_batch: no barrier between the
 * matrices). */
static void project_all(thread_pool *pool, const projection *p, int n, act_set *x)
{
    matmul_item items[n];
    for (int i = 0; i < n; i++) {
        const wtensor *wt = p[i].wt;
        size_t stride;
        const void *xq = act_for(x, pool, wt->type, &stride);
        items[i] = (matmul_item){wt->type, wt->data, wt->row_bytes, wt->ne[1], wt->ne[0], xq, stride, x->n_rows,
                                 p[i].y, (size_t)wt->ne[1]};
    }
    matmul_batch(pool, items, n);
    for (int i = 0; i < n; i++)
        if (p[i].bias != NULL && p[i].bias->data != NULL)
            for (int64_t t = 0; t < x->n_rows; t++)
                op_axpy(p[i].y + t * p[i].wt->ne[1], 1.0f, wt_f32(p[i].bias), p[i].wt->ne[1]);
}

void fwd_project(thread_pool *pool, const wtensor *wt, const wtensor *bias, act_set *x, float *y)
{
    const projection one = {wt, bias, y};
    project_all(pool, &one, 1, x);
}

static void add_rows(float *x, const float *d, int64_t n)
{
    op_axpy(x, 1.0f, d, n);
}

/* --- attention over the cache */

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

size_t fwd_attend_scratch(const fwd_attn_geom *g, int64_t n_ctx)
{
    const int per_item = min_int(g->n_head / g->n_head_kv, FWD_ATTN_HEADS_PER_ITEM);
    return op_attention_scratch(per_item, n_ctx, g->head_dim_k, g->head_dim_v);
}

/* One sequence's rows of an attention region: rows row0 .. row0 + n - 1
 * of the step's q and out, at positions pos0 .. in kv's layer. */
typedef struct attn_seq {
    fwd_attn_geom g; /* the cache's element size is the sequence's own */
    const kv_cache *kv;
    const kv_layer *layer;
    int64_t pos0, row0, n;
} attn_seq;

typedef struct attn_job {
    const attn_seq *seqs;
    int n_seqs;
    const op_kernels *kern;
    const float *q;
    float *out;
    float *scratch;
    size_t scratch_per_thread;
    int64_t n_rows;
    int per_item, n_chunks; /* query heads of a KV head split into n_chunks items of up to per_item */
    _Atomic int64_t next;
} attn_job;

/* The positions the query at pos sees: the last `window` (0: all) up to
 * itself, as llama.cpp masks them (a key at p0 is hidden when
 * pos - p0 >= window).  Sets the first one's cache row. */
static int64_t visible(const kv_layer *layer, int64_t pos, int64_t *first_slot)
{
    int64_t n_kv = pos + 1;
    if (layer->window > 0 && n_kv > layer->window)
        n_kv = layer->window;
    *first_slot = (pos - n_kv + 1) % layer->n_slots;
    return n_kv;
}

/* Work items are (row, KV head, chunk of its query heads) over the rows of
 * every sequence, claimed one at a time: later rows see more positions, so
 * a static split would leave threads idle, and one region serves all the
 * sequences of a step.  Each item serves its query heads together, so a
 * cache row is read once for all of them. */
static void attn_task(void *ctx, int thread_idx, int n_threads)
{
    (void)n_threads;
    attn_job *job = ctx;
    const int64_t per_row = (int64_t)job->seqs[0].g.n_head_kv * job->n_chunks;
    float *scratch = job->scratch + (size_t)thread_idx * job->scratch_per_thread;
    int s = 0; /* claims only increase, so the sequence only moves on */
    for (int64_t i; (i = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) < job->n_rows * per_row;) {
        const int64_t t = i / per_row;
        while (t >= job->seqs[s].row0 + job->seqs[s].n)
            s++;
        const attn_seq *sq = &job->seqs[s];
        const fwd_attn_geom *g = &sq->g;
        const kv_cache *kv = sq->kv;
        const kv_layer *layer = sq->layer;
        const int group = g->n_head / g->n_head_kv;
        const int kvh = (int)(i % per_row) / job->n_chunks, chunk = (int)(i % per_row) % job->n_chunks;
        const int h0 = kvh * group + chunk * job->per_item;
        const int n_q = min_int(job->per_item, group - chunk * job->per_item);
        const uint8_t *v_base = g->v_in_k ? layer->k : layer->v;
        attn_args a = {
            .head_dim_k = g->head_dim_k,
            .head_dim_v = g->head_dim_v,
            .scale = g->scale,
            .kv_type = kv->type,
            .k = layer->k + (size_t)kvh * g->k_head_bytes,
            .k_stride = kv->k_row_bytes,
            .v = v_base + (size_t)kvh * g->v_head_bytes,
            .v_stride = g->v_in_k ? kv->k_row_bytes : kv->v_row_bytes,
            .n_slots = layer->n_slots,
            .sinks = g->sinks ? g->sinks + h0 : NULL,
        };
        a.n_kv = visible(layer, sq->pos0 + (t - sq->row0), &a.first);
        const size_t head0 = (size_t)t * g->n_head + (size_t)h0;
        op_attention_group(job->kern, job->q + head0 * g->head_dim_k, n_q, &a, scratch,
                           job->out + head0 * g->head_dim_v);
    }
}

/* Attention of the sequences' rows (every sequence of one head layout) in
 * one parallel region. */
static void attend_seqs(thread_pool *pool, const op_kernels *kern, const attn_seq *seqs, int n_seqs, const float *q,
                        float *out, float *scratch, size_t scratch_per_thread)
{
    const int group = seqs[0].g.n_head / seqs[0].g.n_head_kv;
    const int per_item = min_int(group, FWD_ATTN_HEADS_PER_ITEM);
    attn_job job = {.seqs = seqs, .n_seqs = n_seqs, .kern = kern, .q = q, .out = out, .scratch = scratch,
                    .scratch_per_thread = scratch_per_thread, .n_rows = seqs[n_seqs - 1].row0 + seqs[n_seqs - 1].n,
                    .per_item = per_item, .n_chunks = (group + per_item - 1) / per_item};
    atomic_init(&job.next, 0);
    pool_run(pool, attn_task, &job);
}

void fwd_attend(const fwd_layer *c, const fwd_attn_geom *g, const float *q, float *out, float *scratch,
                size_t scratch_per_thread)
{
    const attn_seq one = {.g = *g, .kv = c->kv, .layer = &c->kv->layer[c->layer], .pos0 = c->pos0, .n = c->n};
    attend_seqs(c->pool, c->f->kern, &one, 1, q, out, scratch, scratch_per_thread);
}

/* --- the generic attention */

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

/* Heads as the generic attention caches them: a row holds every KV head's
 * key (value) after the other's. */
static fwd_attn_geom gqa_geom(const arch_hparams *hp, const layer_weights *lw, uint32_t kv_type)
{
    const size_t es = op_kv_elem_size(kv_type);
    return (fwd_attn_geom){
        .n_head = (int)hp->n_head,
        .n_head_kv = (int)hp->n_head_kv,
        .head_dim_k = (int)hp->head_dim_k,
        .head_dim_v = (int)hp->head_dim_v,
        .k_head_bytes = hp->head_dim_k * es,
        .v_head_bytes = hp->head_dim_v * es,
        .scale = hp->kq_scale,
        .sinks = lw ? wt_f32(&lw->w[W_ATTN_SINKS]) : NULL,
    };
}

/* GQA: Q/K/V projections (+ biases) of every row together, then per
 * sequence QK-norm, RoPE, K/V into its cache and attention (windowed, with
 * sinks, where the layer has them), then the output projection (+ bias) of
 * every row together. */
static void attention_gqa(const model_weights *w, int l, thread_pool *pool, fwd_scratch *f, const fwd_seq *seqs,
                          int n_seqs, int64_t n_rows)
{
    const arch_hparams *hp = &w->hp;
    const layer_weights *lw = &w->layer[l];
    const int64_t dq = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t dk = (int64_t)hp->n_head_kv * hp->head_dim_k, dv = (int64_t)hp->n_head_kv * hp->head_dim_v;
    act_bind(&f->xn_act, f->xn, n_rows);
    const projection qkv[] = {{&lw->w[W_ATTN_Q], &lw->w[W_ATTN_Q_BIAS], f->q},
                              {&lw->w[W_ATTN_K], &lw->w[W_ATTN_K_BIAS], f->k},
                              {&lw->w[W_ATTN_V], &lw->w[W_ATTN_V_BIAS], f->v}};
    project_all(pool, qkv, 3, &f->xn_act);

    attn_seq att[n_seqs];
    int64_t row0 = 0;
    for (int i = 0; i < n_seqs; row0 += seqs[i].n, i++) {
        const fwd_seq *sq = &seqs[i];
        kv_cache *kv = sq->kv;
        const kv_layer *layer = &kv->layer[l];
        for (int64_t r = row0; r < row0 + sq->n; r++) {
            const float *cs = f->rope + r * hp->n_rot;
            const int64_t pos = sq->pos0 + (r - row0);
            prepare_heads(f->q + r * dq, (int)hp->n_head, (int)hp->head_dim_k, &lw->w[W_ATTN_Q_NORM], hp->norm_eps,
                          cs, (int)hp->n_rot, w->arch->rope);
            prepare_heads(f->k + r * dk, (int)hp->n_head_kv, (int)hp->head_dim_k, &lw->w[W_ATTN_K_NORM],
                          hp->norm_eps, cs, (int)hp->n_rot, w->arch->rope);
            op_kv_store(f->kern, kv_k_row(kv, layer, pos), kv->type, f->k + r * dk, (int)dk);
            op_kv_store(f->kern, kv_v_row(kv, layer, pos), kv->type, f->v + r * dv, (int)dv);
        }
        att[i] = (attn_seq){.g = gqa_geom(hp, lw, kv->type), .kv = kv, .layer = layer, .pos0 = sq->pos0,
                            .row0 = row0, .n = sq->n};
    }
    /* every sequence's K/V rows are in its cache: one region attends them all */
    attend_seqs(pool, f->kern, att, n_seqs, f->q, f->att, f->scores, f->scores_per_thread);

    act_bind(&f->att_act, f->att, n_rows);
    fwd_project(pool, &lw->w[W_ATTN_OUT], &lw->w[W_ATTN_OUT_BIAS], &f->att_act, f->sub);
}

/* A descriptor's attention hook sees one sequence at a time: its rows of
 * xn, rope and sub, as if they were the whole step. */
static void attention_hook(const model_weights *w, int l, thread_pool *pool, fwd_scratch *f, const fwd_seq *seqs,
                           int n_seqs)
{
    const int64_t embd = w->hp.n_embd, n_rot = w->hp.n_rot;
    float *const xn = f->xn, *const sub = f->sub, *const rope = f->rope;
    int64_t row0 = 0;
    for (int i = 0; i < n_seqs; row0 += seqs[i].n, i++) {
        f->xn = xn + row0 * embd;
        f->sub = sub + row0 * embd;
        f->rope = rope + row0 * n_rot;
        const fwd_layer c = {.w = w, .layer = l, .pool = pool, .kv = seqs[i].kv, .f = f, .pos0 = seqs[i].pos0,
                             .n = seqs[i].n};
        w->arch->attention->run(&c);
    }
    f->xn = xn;
    f->sub = sub;
    f->rope = rope;
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
    const moe_gating g = moe_gating_of(w, lw);
    moe_router(pool, lw, &f->xn_act, f->router);
    moe_select(&g, &f->moe, f->router, n, f->routes);
    if (f->profile != NULL)
        expert_rank_add(f->profile, c->layer, f->routes, n * g.n_used, g.n_used);
    if (f->hybrid != NULL && f->hybrid->mode == HYBRID_CPU_SPLIT)
        hybrid_moe_experts(f->hybrid, pool, &f->moe, (uint32_t)c->layer, lw, &f->xn_act, f->routes, n * g.n_used,
                           f->sub, w->hp.n_embd);
    else
        moe_experts(pool, &f->moe, lw, &f->xn_act, f->routes, n * g.n_used, f->sub, w->hp.n_embd);
    moe_shared(pool, &f->moe, lw, &f->xn_act, f->shexp_gate, f->sub, w->hp.n_embd);
}

/* --- the pass */

void forward_seqs(const model_weights *w, thread_pool *pool, fwd_scratch *f, const fwd_seq *seqs, int n_seqs,
                  bool all_rows, float *logits)
{
    const arch_hparams *hp = &w->hp;
    const int64_t embd = hp->n_embd;
    int64_t n_rows = 0;
    bool decode = true; /* every sequence one token: the split counts its lookups as decode */
    for (int i = 0; i < n_seqs; i++) {
        decode = decode && seqs[i].n == 1;
        embed(w, seqs[i].tokens, seqs[i].n, f->x + n_rows * embd);
        for (int64_t t = 0; t < seqs[i].n; t++)
            op_rope_cache_ext(f->rope + (n_rows + t) * hp->n_rot, seqs[i].pos0 + t, &hp->rope);
        n_rows += seqs[i].n;
    }
    if (f->hybrid != NULL)
        hybrid_begin_step(f->hybrid, n_rows, decode);

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *lw = &w->layer[l];
        rmsnorm_rows(f->x, &lw->w[W_ATTN_NORM], hp->norm_eps, n_rows, embd, f->xn);
        if (w->arch->attention != NULL)
            attention_hook(w, (int)l, pool, f, seqs, n_seqs);
        else
            attention_gqa(w, (int)l, pool, f, seqs, n_seqs, n_rows);
        add_rows(f->x, f->sub, n_rows * embd);

        const fwd_layer all = {.w = w, .layer = (int)l, .pool = pool, .f = f, .n = n_rows};
        rmsnorm_rows(f->x, &lw->w[W_FFN_NORM], hp->norm_eps, n_rows, embd, f->xn);
        feed_forward(&all);
        add_rows(f->x, f->sub, n_rows * embd);
    }

    for (int i = 0; i < n_seqs; i++)
        if (seqs[i].pos0 + seqs[i].n > seqs[i].kv->n_written)
            seqs[i].kv->n_written = seqs[i].pos0 + seqs[i].n;

    /* the rows whose logits are wanted, normed into xn's first rows */
    int64_t n_out = 0, row0 = 0;
    for (int i = 0; i < n_seqs; row0 += seqs[i].n, i++) {
        const int64_t first = all_rows || seqs[i].all_rows ? row0 : row0 + seqs[i].n - 1, n = row0 + seqs[i].n - first;
        rmsnorm_rows(f->x + first * embd, &w->global[W_OUTPUT_NORM], hp->norm_eps, n, embd, f->xn + n_out * embd);
        n_out += n;
    }
    act_bind(&f->xn_act, f->xn, n_out);
    fwd_project(pool, &w->global[W_OUTPUT], NULL, &f->xn_act, logits);
}

void forward(const model_weights *w, thread_pool *pool, kv_cache *kv, fwd_scratch *f, int64_t pos0,
             const int32_t *tokens, int64_t n, bool all_rows, float *logits)
{
    const fwd_seq one = {.kv = kv, .tokens = tokens, .pos0 = pos0, .n = n};
    forward_seqs(w, pool, f, &one, 1, all_rows, logits);
}
