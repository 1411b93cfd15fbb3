/*
 * mla.c — multi-head latent attention (DeepSeek-V2, arXiv:2405.04434), the
 * attention hook of deepseek2, in its absorbed form:
 *
 *   q_h = q_b . rmsnorm(q_a . x)        (or attn_q . x): (nope | rope) per head
 *   c, k_r = kv_a_mqa . x               latent (kv_lora_rank) | RoPE key (n_rot)
 *   cache row = rmsnorm(c), rope(k_r)   per position: kv_lora_rank + n_rot
 *
 * The per-head key k_h(j) = (k_b[h] c_j | k_r(j)) and value
 * v_h(j) = v_b[h] c_j are never formed: since q_h . k_h(j) =
 * (k_b[h]^T q_nope_h) . c_j + q_rope_h . k_r(j), the query is mapped into
 * latent space once (k_b absorbed), attends over the cache rows as one MQA
 * head of kv_lora_rank + n_rot dimensions with the latent as value, and
 * v_b maps each head's latent output back:
 *
 *   o_h = v_b[h] . sum_j softmax_j(scale * (k_b[h]^T q_nope_h | rope(q_rope_h)) . row_j) c_j
 *
 * The same form serves prefill and decode (llama.cpp's MLA path also uses
 * it for both); only the cache row is stored, which is what makes long
 * contexts fit.  k_b and v_b are stacked per head ({nope, kv_lora, n_head}
 * and {kv_lora, head_dim_v, n_head}), so each head is one small product,
 * heads spread over the threads.
 */
#include "arch.h"

#include "../kernels/cpu/matmul.h"
#include "error.h"
#include "forward.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct mla_state {
    float *qa;          /* n_batch x q_lora_rank: the compressed query */
    act_set qa_act;
    float *latent;      /* n_batch x (kv_lora_rank + n_rot): the step's cache rows, in F32 */
    float *q_nope;      /* n_batch x n_head rows of nope: the query parts k_b reads */
    act_set q_nope_act;
    float *q_lat;       /* n_batch x n_head x (kv_lora_rank + n_rot): queries in latent space */
    float *att_lat;     /* n_batch x n_head x kv_lora_rank: attention output in latent space */
    act_set att_lat_act;
    float *scores;      /* n_threads x scores_per_thread */
    size_t scores_per_thread;
} mla_state;

static void mla_kv_row_elems(const arch_hparams *hp, size_t *k, size_t *v)
{
    *k = (size_t)hp->kv_lora_rank + hp->n_rot;
    *v = 0; /* the value is the latent: the start of the K row */
}

static fwd_attn_geom latent_geom(const arch_hparams *hp)
{
    return (fwd_attn_geom){
        .n_head = (int)hp->n_head,
        .n_head_kv = 1,
        .head_dim_k = (int)(hp->kv_lora_rank + hp->n_rot),
        .head_dim_v = (int)hp->kv_lora_rank,
        .v_in_k = true,
        .scale = hp->kq_scale,
    };
}

static void mla_free(void *state)
{
    mla_state *st = state;
    free(st->qa);
    free(st->latent);
    free(st->q_nope);
    free(st->q_lat);
    free(st->att_lat);
    free(st->scores);
    act_free(&st->qa_act);
    act_free(&st->q_nope_act);
    act_free(&st->att_lat_act);
    free(st);
}

static float *floats(size_t n, bool *ok)
{
    float *p = malloc(sizeof(float) * (n > 0 ? n : 1));
    *ok = *ok && p != NULL;
    return p;
}

static hydra_status mla_init(void **state, const model_weights *w, int64_t n_batch, int64_t n_ctx, int n_threads)
{
    const arch_hparams *hp = &w->hp;
    *state = NULL;
    mla_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "MLA state");
    const size_t nb = (size_t)n_batch, heads = nb * hp->n_head, row = (size_t)hp->kv_lora_rank + hp->n_rot;
    const int64_t nope = (int64_t)hp->head_dim_k - hp->n_rot;
    const fwd_attn_geom g = latent_geom(hp);
    bool ok = true;
    st->qa = floats(nb * hp->q_lora_rank, &ok);
    st->latent = floats(nb * row, &ok);
    st->q_nope = floats(heads * (size_t)nope, &ok);
    st->q_lat = floats(heads * row, &ok);
    st->att_lat = floats(heads * hp->kv_lora_rank, &ok);
    st->scores_per_thread = fwd_attend_scratch(&g, n_ctx);
    st->scores = floats((size_t)n_threads * st->scores_per_thread, &ok);
    hydra_status s = ok ? HYDRA_OK
                        : hydra_fail(HYDRA_ERR_NOMEM, "MLA buffers for a batch of %lld and a context of %lld",
                                     (long long)n_batch, (long long)n_ctx);
    if (s == HYDRA_OK && hp->q_lora_rank > 0)
        s = act_init(&st->qa_act, w, hp->q_lora_rank, n_batch);
    if (s == HYDRA_OK)
        s = act_init(&st->q_nope_act, w, nope, (int64_t)heads);
    if (s == HYDRA_OK)
        s = act_init(&st->att_lat_act, w, hp->kv_lora_rank, (int64_t)heads);
    if (s != HYDRA_OK) {
        mla_free(st);
        return s;
    }
    *state = st;
    return HYDRA_OK;
}

/* --- per-head products */

/* y[t][h] = M[h] . x[t][h] for every head h of n rows, where M is a stack
 * of per-head matrices (ne {in, out, n_head}) and x rows are the converted
 * rows of an act_set holding n x n_head rows.  Heads are spread over the
 * threads, each product single-threaded. */
typedef struct heads_job {
    const wtensor *m;
    const uint8_t *x;
    size_t x_stride; /* bytes between two converted rows */
    int n_head;
    int64_t n;
    float *y;
    size_t y_head, y_row; /* floats between heads, between rows */
    _Atomic int next;
} heads_job;

static void heads_task(void *ctx, int thread_idx, int n_threads)
{
    (void)thread_idx;
    (void)n_threads;
    heads_job *job = ctx;
    const wtensor *m = job->m;
    for (int h; (h = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) < job->n_head;)
        matmul(NULL, m->type, m->data + (size_t)h * m->mat_bytes, m->row_bytes, m->ne[1], m->ne[0],
               job->x + (size_t)h * job->x_stride, job->x_stride * (size_t)job->n_head, job->n,
               job->y + (size_t)h * job->y_head, job->y_row);
}

static void per_head(thread_pool *pool, const wtensor *m, act_set *x, int n_head, float *y, size_t y_head,
                     size_t y_row)
{
    size_t stride;
    const uint8_t *xq = act_for(x, pool, m->type, &stride);
    heads_job job = {.m = m, .x = xq, .x_stride = stride, .n_head = n_head, .n = x->n_rows / n_head, .y = y,
                     .y_head = y_head, .y_row = y_row};
    atomic_init(&job.next, 0);
    pool_run(pool, heads_task, &job);
}

/* --- the step */

/* Full queries (n x n_head x head_dim_k) into f->q. */
static void queries(const fwd_layer *c, mla_state *st)
{
    const arch_hparams *hp = &c->w->hp;
    const layer_weights *lw = &c->w->layer[c->layer];
    fwd_scratch *f = c->f;
    if (hp->q_lora_rank == 0) {
        fwd_project(c->pool, &lw->w[W_ATTN_Q], NULL, &f->xn_act, f->q);
        return;
    }
    fwd_project(c->pool, &lw->w[W_ATTN_Q_A], NULL, &f->xn_act, st->qa);
    for (int64_t t = 0; t < c->n; t++)
        op_rmsnorm(st->qa + t * hp->q_lora_rank, st->qa + t * hp->q_lora_rank, wt_f32(&lw->w[W_ATTN_Q_A_NORM]),
                   hp->q_lora_rank, hp->norm_eps);
    act_bind(&st->qa_act, st->qa, c->n);
    fwd_project(c->pool, &lw->w[W_ATTN_Q_B], NULL, &st->qa_act, f->q);
}

/* The step's cache rows (normed latent | roped key) into the cache; each
 * head's RoPE query part into q_lat, its nope part into q_nope. */
static void latent_rows(const fwd_layer *c, mla_state *st)
{
    const arch_hparams *hp = &c->w->hp;
    const layer_weights *lw = &c->w->layer[c->layer];
    fwd_scratch *f = c->f;
    kv_cache *kv = c->kv;
    const int rot = (int)hp->n_rot, lora = (int)hp->kv_lora_rank, row = lora + rot;
    const int dk = (int)hp->head_dim_k, nope = dk - rot, n_head = (int)hp->n_head;
    fwd_project(c->pool, &lw->w[W_ATTN_KV_A_MQA], NULL, &f->xn_act, st->latent);
    for (int64_t t = 0; t < c->n; t++) {
        const float *cs = f->rope + t * rot;
        float *lat = st->latent + t * row;
        op_rmsnorm(lat, lat, wt_f32(&lw->w[W_ATTN_KV_A_NORM]), lora, hp->norm_eps);
        op_rope(lat + lora, cs, rot, c->w->arch->rope);
        op_kv_store(f->kern, kv_k_row(kv, &kv->layer[c->layer], c->pos0 + t), kv->type, lat, row);
        for (int h = 0; h < n_head; h++) {
            float *q = f->q + (t * n_head + h) * dk;
            op_rope(q + nope, cs, rot, c->w->arch->rope);
            memcpy(st->q_nope + (t * n_head + h) * nope, q, sizeof(float) * (size_t)nope);
            memcpy(st->q_lat + (t * n_head + h) * row + lora, q + nope, sizeof(float) * (size_t)rot);
        }
    }
}

static void mla_run(const fwd_layer *c)
{
    const arch_hparams *hp = &c->w->hp;
    const layer_weights *lw = &c->w->layer[c->layer];
    fwd_scratch *f = c->f;
    mla_state *st = f->attn_state;
    const int n_head = (int)hp->n_head, lora = (int)hp->kv_lora_rank, row = lora + (int)hp->n_rot;
    act_bind(&f->xn_act, f->xn, c->n);
    queries(c, st);
    latent_rows(c, st);
    /* k_b absorbed: q_lat[t][h][0 .. lora) = k_b[h] . q_nope[t][h] */
    act_bind(&st->q_nope_act, st->q_nope, c->n * n_head);
    per_head(c->pool, &lw->w[W_ATTN_K_B], &st->q_nope_act, n_head, st->q_lat, (size_t)row, (size_t)n_head * row);
    const fwd_attn_geom g = latent_geom(hp);
    fwd_attend(c, &g, st->q_lat, st->att_lat, st->scores, st->scores_per_thread);
    /* v_b: att[t][h] = v_b[h] . att_lat[t][h] */
    act_bind(&st->att_lat_act, st->att_lat, c->n * n_head);
    per_head(c->pool, &lw->w[W_ATTN_V_B], &st->att_lat_act, n_head, f->att, hp->head_dim_v,
             (size_t)n_head * hp->head_dim_v);
    act_bind(&f->att_act, f->att, c->n);
    fwd_project(c->pool, &lw->w[W_ATTN_OUT], NULL, &f->att_act, f->sub);
}

const arch_attention arch_mla_attention = {
    .kv_row_elems = mla_kv_row_elems,
    .init = mla_init,
    .free = mla_free,
    .run = mla_run,
};
