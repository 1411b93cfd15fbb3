/*
 * gpu_mla.c — deepseek2's multi-head latent attention on the device, the
 * twin of model/mla.c (which says why the absorbed form is exact):
 *
 *   q        = q_b . rmsnorm(q_a . xn)  (or attn_q . xn)     per head nope | rope
 *   latent   = kv_a_mqa . xn                                  kv_lora | n_rot
 *   cache    = rmsnorm(latent's kv_lora) | rope(its n_rot)    (mla.cu)
 *   q_lat[h] = k_b[h] . q_nope[h] | rope(q_rope[h])           (k_b absorbed)
 *   att_lat  = attention of q_lat over the cache rows, one KV head, the
 *              latent as value (attn_ext.cu)
 *   att[h]   = v_b[h] . att_lat[h];  x += attn_output . att
 *
 * The per-head products k_b[h] and v_b[h] run as routed matvec launches:
 * row r of a launch is head r % n_head of token r / n_head, so the head
 * picks the matrix as an expert would.  The route table is constant and
 * uploaded once.
 */
#include "gpu_arch.h"

#include "../quant.h"

#include <math.h>
#include <stdlib.h>

/* A launch's routes are grid rows, at most 65535 of them. */
enum { MLA_ROUTES_PER_LAUNCH = 32768 };

typedef struct gpu_mla {
    void *base;
    size_t bytes;
    float *qa_raw;    /* n_batch x q_lora_rank: q_a . xn */
    gpu_act qa;       /* its RMSNorm, q_b's input */
    float *latent;    /* n_batch x (kv_lora + n_rot): kv_a_mqa . xn */
    gpu_act q_nope;   /* n_batch x n_head rows of nope: k_b's input */
    float *q_lat;     /* n_batch x n_head x (kv_lora + n_rot): queries in latent space */
    gpu_act att_lat;  /* n_batch x n_head rows of kv_lora: v_b's input */
    gk_route *heads;  /* n_batch x n_head: route r is head r % n_head, row r */
} gpu_mla;

hydra_status gpu_mla_check(const model_weights *w)
{
    const arch_hparams *hp = &w->hp;
    if (w->arch->attention == NULL)
        return HYDRA_OK;
    if (w->arch->attention != &arch_mla_attention)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: %s: its attention is not supported", w->arch->name);
    const uint32_t nope = hp->head_dim_k - hp->n_rot, row = hp->kv_lora_rank + hp->n_rot;
    /* 8-bit activations of the per-head products and of q_b's input need
     * rows of whole 32-value blocks */
    if (nope % 32 != 0 || hp->kv_lora_rank % 32 != 0 || hp->q_lora_rank % 32 != 0 || hp->n_rot % 2 != 0 ||
        row > GK_AX_MAX_DK)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: %s: MLA with %u nope dimensions, kv_lora_rank %u, "
                          "q_lora_rank %u (multiples of 32) and %u RoPE dimensions", w->arch->name, nope,
                          hp->kv_lora_rank, hp->q_lora_rank, hp->n_rot);
    return HYDRA_OK;
}

static hydra_status upload_heads(gpu_mla *m, int64_t n_routes, int n_head)
{
    gk_route *h = malloc(sizeof *h * (size_t)n_routes);
    if (h == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "MLA route table of %lld rows", (long long)n_routes);
    for (int64_t r = 0; r < n_routes; r++)
        h[r] = (gk_route){.token = (int32_t)r, .expert = (int32_t)(r % n_head), .weight = 1.0f};
    const gpuError_t e = gpuMemcpy(m->heads, h, sizeof *h * (size_t)n_routes, gpuMemcpyHostToDevice);
    free(h);
    return e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "uploading the MLA route table");
}

hydra_status gpu_mla_init(gpu_session *g)
{
    const arch_hparams *hp = &g->w->hp;
    if (g->w->arch->attention == NULL)
        return HYDRA_OK;
    gpu_mla *m = calloc(1, sizeof *m);
    if (m == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "MLA state");
    g->mla = m;
    const int64_t nb = g->o.n_batch, heads = nb * hp->n_head, rank = hp->q_lora_rank;
    const int64_t lora = hp->kv_lora_rank, row = lora + hp->n_rot, nope = (int64_t)hp->head_dim_k - hp->n_rot;
    carve c = {0};
    CARVE(&c, m->qa_raw, sizeof(float) * (size_t)(nb * rank));
    carve_act(&c, &m->qa, nb, rank);
    CARVE(&c, m->latent, sizeof(float) * (size_t)(nb * row));
    carve_act(&c, &m->q_nope, heads, nope);
    CARVE(&c, m->q_lat, sizeof(float) * (size_t)(heads * row));
    carve_act(&c, &m->att_lat, heads, lora);
    CARVE(&c, m->heads, sizeof(gk_route) * (size_t)heads);
    m->bytes = c.total;
    hydra_status st = carve_alloc(&c, GPU_MEM_SCRATCH, &m->base, "MLA buffers");
    if (st != HYDRA_OK) {
        m->bytes = 0;
        return st;
    }
    return upload_heads(m, heads, (int)hp->n_head);
}

void gpu_mla_free(gpu_session *g)
{
    if (g->mla == NULL)
        return;
    gpu_mem_free(GPU_MEM_SCRATCH, g->mla->base, g->mla->bytes);
    free(g->mla);
    g->mla = NULL;
}

/* Queries of the n normed rows into g->q: n_head heads of nope + n_rot. */
static hydra_status queries(gpu_session *g, int l, int n)
{
    const arch_hparams *hp = &g->w->hp;
    const gpu_weights *gw = &g->gw;
    gpu_mla *m = g->mla;
    const int64_t dq = (int64_t)hp->n_head * hp->head_dim_k, rank = hp->q_lora_rank;
    if (rank == 0)
        return gpu_linear(g, gw_at(gw, l, W_ATTN_Q), &g->xn, 0, n, g->q, dq, NULL, false, OP_QKV);
    TRY_ST(gpu_linear(g, gw_at(gw, l, W_ATTN_Q_A), &g->xn, 0, n, m->qa_raw, rank, NULL, false, OP_QKV));
    const bool q8 = n <= GK_MATVEC_MAX_TOK; /* decode: the norm writes the 8-bit form q_b reads */
    gpu_act_bind(&m->qa, rank, n);
    TRY(gk_rmsnorm(g->stream, m->qa_raw, gw_vec(gw_at(gw, l, W_ATTN_Q_A_NORM)), hp->norm_eps, n, rank, m->qa.f,
                   q8 ? m->qa.q : NULL, q8 ? m->qa.meta : NULL),
        "MLA query norm");
    m->qa.q_ready = q8;
    gpu_prof_mark(g, OP_NORM);
    return gpu_linear(g, gw_at(gw, l, W_ATTN_Q_B), &m->qa, 0, n, g->q, dq, NULL, false, OP_QKV);
}

/* y[r] = w[r % n_head] . x[r] for every row r of x (rows of heads), y rows
 * y_stride floats apart. */
static hydra_status per_head(gpu_session *g, const gk_mat *w, gpu_act *x, float *y, int64_t y_stride)
{
    if (w->type != QT_F32 && w->type != QT_F16 && w->type != QT_BF16)
        TRY_ST(gpu_act_quantize(g, x));
    for (int r0 = 0; r0 < x->n_rows; r0 += MLA_ROUTES_PER_LAUNCH) {
        const int nr = x->n_rows - r0 < MLA_ROUTES_PER_LAUNCH ? x->n_rows - r0 : MLA_ROUTES_PER_LAUNCH;
        const gk_act xa = {.f = x->f + (int64_t)r0 * x->n, .q = x->q + (int64_t)r0 * x->n,
                           .meta = x->meta + (int64_t)r0 * (x->n / 32) * 4, .n = x->n};
        const gk_rows rows = {.routes = g->mla->heads + r0, .n_routes = nr, .act_by_token = false};
        const gk_out out = {.y = y + (int64_t)r0 * y_stride, .y_stride = y_stride};
        TRY(gk_matvec(g->stream, w, NULL, &xa, &rows, &out), "MLA per-head product");
    }
    return HYDRA_OK;
}

/* Attention of the step's latent-space queries over the layer's cache, in
 * token groups whose partials fit the scratch. */
static hydra_status attend(gpu_session *g, const step_shape *sh, const uint8_t *k_cache)
{
    const arch_hparams *hp = &g->w->hp;
    gpu_mla *m = g->mla;
    const int n = (int)sh->n_tok, n_head = (int)hp->n_head, lora = (int)hp->kv_lora_rank;
    const int row = lora + (int)hp->n_rot, max_kv = (int)sh->max_kv;
    const gk_attn all = {.q = m->q_lat, .k = k_cache, .v = k_cache, .kv_f16 = g->o.kv_type == QT_F16, .k_row = row,
                         .v_row = row, .n_head = n_head, .n_head_kv = 1, .head_dim_k = row, .head_dim_v = lora,
                         .scale = hp->kq_scale, .max_kv = max_kv, .scratch = g->attn_scratch, .out = m->att_lat.f};
    const gk_attn_ext plain = {.sinks = NULL, .window = 0};
    for (int t0 = 0, n_g; t0 < n; t0 += n_g) {
        n_g = n - t0;
        while (n_g > 1 && gk_attention_ext_scratch(n_g, n_head, lora, max_kv) > g->attn_scratch_floats)
            n_g = (n_g + 1) / 2;
        if (gk_attention_ext_scratch(n_g, n_head, lora, max_kv) > g->attn_scratch_floats)
            return hydra_fail(HYDRA_ERR_NOMEM, "CUDA MLA: one token's attention partials over %d positions exceed "
                              "the scratch of %zu floats", max_kv, g->attn_scratch_floats);
        gk_attn a = all;
        a.q += (int64_t)t0 * n_head * row;
        a.out += (int64_t)t0 * n_head * lora;
        a.n_tok = n_g;
        a.tok0 = t0;
        TRY(gk_attention_ext(g->stream, &a, &plain, g->d_step), "MLA attention");
    }
    gpu_prof_mark(g, OP_ATTN);
    return HYDRA_OK;
}

hydra_status gpu_mla_attention(gpu_session *g, int l, const step_shape *sh)
{
    const arch_hparams *hp = &g->w->hp;
    const gpu_weights *gw = &g->gw;
    gpu_mla *m = g->mla;
    const int n = (int)sh->n_tok, n_head = (int)hp->n_head, rot = (int)hp->n_rot, lora = (int)hp->kv_lora_rank;
    const int row = lora + rot, nope = (int)hp->head_dim_k - rot, dv = (int)hp->head_dim_v;
    TRY_ST(queries(g, l, n));
    TRY_ST(gpu_linear(g, gw_at(gw, l, W_ATTN_KV_A_MQA), &g->xn, 0, n, m->latent, row, NULL, false, OP_QKV));
    uint8_t *k_cache = g->k_cache + (size_t)(l - g->o.layer0) * (size_t)g->o.n_ctx * (size_t)g->k_row * g->kv_elem;
    const rope_params *rp = &hp->rope;
    const gk_mla prep = {.latent = m->latent, .kv_norm = gw_vec(gw_at(gw, l, W_ATTN_KV_A_NORM)), .q = g->q,
                         .q_nope = m->q_nope.f, .q_lat = m->q_lat, .k_cache = k_cache,
                         .kv_f16 = g->o.kv_type == QT_F16, .n_head = n_head, .nope = nope, .n_rot = rot,
                         .kv_lora = lora, .n_tok = n, .eps = hp->norm_eps, .neox = g->w->arch->rope == ROPE_NEOX,
                         .theta_scale = powf(rp->base, -2.0f / (float)rp->n_rot), .freq_scale = rp->freq_scale,
                         .attn_factor = rp->attn_factor, .ext_factor = rp->ext_factor, .corr_low = rp->corr_low,
                         .corr_high = rp->corr_high};
    TRY(gk_mla_prepare(g->stream, &prep, g->d_step), "MLA cache rows");
    gpu_prof_mark(g, OP_ROPE);
    gpu_act_bind(&m->q_nope, nope, n * n_head);
    TRY_ST(per_head(g, gw_at(gw, l, W_ATTN_K_B), &m->q_nope, m->q_lat, row)); /* k_b absorbed */
    TRY_ST(attend(g, sh, k_cache));
    gpu_act_bind(&m->att_lat, lora, n * n_head);
    TRY_ST(per_head(g, gw_at(gw, l, W_ATTN_V_B), &m->att_lat, g->att.f, dv));
    gpu_act_bind(&g->att, (int64_t)n_head * dv, n);
    return gpu_linear(g, gw_at(gw, l, W_ATTN_OUT), &g->att, 0, n, g->x, hp->n_embd, NULL, true, OP_ATTN_OUT);
}
