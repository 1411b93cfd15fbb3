/*
 * gpu_check_ops.c — the per-row kernels run once over host data for the
 * op parity tests (gpu_check_ops.h).  Every check lists its device
 * buffers (what is copied in, what comes back), and gpu_check_run does the
 * rest: one scratch allocation, zeroed, inputs copied, one launch on the
 * default stream, synchronise, outputs copied back, freed.
 */
#include "gpu_check_ops.h"

#include "gpu_arch.h"

#include "../quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

hydra_status gpu_check_run(gpu_check_buf *b, int n, gpu_check_launch launch, const void *ctx, const char *what)
{
    if (!gpu_available(NULL))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "no CUDA device");
    carve c = {0};
    for (int i = 0; i < n; i++)
        carve_add(&c, &b[i].dev, b[i].bytes);
    void *base = NULL;
    hydra_status st = carve_alloc(&c, GPU_MEM_SCRATCH, &base, what);
    if (st != HYDRA_OK)
        return st;
    int e = gpuMemset(base, 0, c.total);
    for (int i = 0; i < n && e == 0; i++)
        if (b[i].in != NULL && b[i].bytes > 0)
            e = gpuMemcpy(b[i].dev, b[i].in, b[i].bytes, gpuMemcpyHostToDevice);
    if (e == 0)
        e = launch(ctx, b);
    if (e == 0)
        e = gpuDeviceSynchronize();
    for (int i = 0; i < n && e == 0; i++)
        if (b[i].out != NULL && b[i].bytes > 0)
            e = gpuMemcpy(b[i].out, b[i].dev, b[i].bytes, gpuMemcpyDeviceToHost);
    gpu_mem_free(GPU_MEM_SCRATCH, base, c.total);
    return e == 0 ? HYDRA_OK : gpu_fail((gpuError_t)e, what);
}

/* A buffer's device address, NULL when it has no host side (an optional
 * input left out). */
static void *dev_or_null(const gpu_check_buf *b, const void *host)
{
    return host != NULL ? b->dev : NULL;
}

static size_t fsz(int64_t n)
{
    return sizeof(float) * (size_t)n;
}

/* --- RMSNorm */

typedef struct norm_ctx {
    const float *gain;
    float eps;
    int n_rows;
    int64_t n;
    bool q8;
} norm_ctx;

enum { NB_X, NB_GAIN, NB_Y, NB_Q, NB_META, NB_COUNT };

static int launch_norm(const void *ctx, const gpu_check_buf *b)
{
    const norm_ctx *c = ctx;
    return gk_rmsnorm(0, b[NB_X].dev, dev_or_null(&b[NB_GAIN], c->gain), c->eps, c->n_rows, c->n, b[NB_Y].dev,
                      c->q8 ? b[NB_Q].dev : NULL, c->q8 ? b[NB_META].dev : NULL);
}

hydra_status gpu_check_rmsnorm(const float *x, const float *gain, float eps, int n_rows, int64_t n, bool q8, float *y,
                               int8_t *q, float *d)
{
    const int64_t total = (int64_t)n_rows * n, blocks = total / 32 + 1;
    int32_t *meta = malloc(16 * (size_t)blocks);
    if (meta == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "rmsnorm check");
    gpu_check_buf b[NB_COUNT] = {
        [NB_X] = {.in = x, .bytes = fsz(total)},
        [NB_GAIN] = {.in = gain, .bytes = gain != NULL ? fsz(n) : 0},
        [NB_Y] = {.out = y, .bytes = fsz(total)},
        [NB_Q] = {.out = q, .bytes = (size_t)total},
        [NB_META] = {.out = meta, .bytes = 16 * (size_t)blocks},
    };
    const norm_ctx c = {.gain = gain, .eps = eps, .n_rows = n_rows, .n = n, .q8 = q8};
    const hydra_status st = gpu_check_run(b, NB_COUNT, launch_norm, &c, "rmsnorm check");
    for (int64_t i = 0; st == HYDRA_OK && d != NULL && i < total / 32; i++)
        memcpy(&d[i], &meta[4 * i], sizeof(float));
    free(meta);
    return st;
}

/* --- QK-norm + RoPE */

enum { RB_Q, RB_K, RB_V, RB_QN, RB_KN, RB_KC, RB_VC, RB_STEP, RB_COUNT };

static int launch_rope(const void *ctx, const gpu_check_buf *b)
{
    const gpu_rope_check *c = ctx;
    const rope_params *p = &c->rope;
    const gk_rope r = {.q = b[RB_Q].dev, .k = b[RB_K].dev, .v = b[RB_V].dev,
                       .q_norm = dev_or_null(&b[RB_QN], c->q_norm), .k_norm = dev_or_null(&b[RB_KN], c->k_norm),
                       .eps = c->eps, .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim_k = c->head_dim,
                       .head_dim_v = c->head_dim, .n_rot = p->n_rot, .neox = c->neox,
                       .theta_scale = powf(p->base, -2.0f / (float)p->n_rot), .freq_scale = p->freq_scale,
                       .attn_factor = p->attn_factor, .ext_factor = p->ext_factor, .corr_low = p->corr_low,
                       .corr_high = p->corr_high, .k_cache = b[RB_KC].dev, .v_cache = b[RB_VC].dev,
                       .kv_f16 = false, .n_tok = c->n_tok};
    return gk_rope_store(0, &r, b[RB_STEP].dev);
}

hydra_status gpu_check_rope(const gpu_rope_check *c, float *q, float *k)
{
    const int64_t nq = (int64_t)c->n_tok * c->n_head * c->head_dim, nk = (int64_t)c->n_tok * c->n_head_kv * c->head_dim;
    const int64_t cache = (int64_t)(c->pos0 + c->n_tok) * c->n_head_kv * c->head_dim;
    const gk_step step = {.pos0 = c->pos0, .n_tok = c->n_tok};
    gpu_check_buf b[RB_COUNT] = {
        [RB_Q] = {.in = q, .out = q, .bytes = fsz(nq)},
        [RB_K] = {.in = k, .out = k, .bytes = fsz(nk)},
        [RB_V] = {.bytes = fsz(nk)},
        [RB_QN] = {.in = c->q_norm, .bytes = c->q_norm != NULL ? fsz(c->head_dim) : 0},
        [RB_KN] = {.in = c->k_norm, .bytes = c->k_norm != NULL ? fsz(c->head_dim) : 0},
        [RB_KC] = {.bytes = fsz(cache)},
        [RB_VC] = {.bytes = fsz(cache)},
        [RB_STEP] = {.in = &step, .bytes = sizeof step},
    };
    return gpu_check_run(b, RB_COUNT, launch_rope, c, "rope check");
}

/* --- attention */

enum { AB_Q, AB_K, AB_V, AB_SINKS, AB_STEP, AB_SCRATCH, AB_OUT, AB_COUNT };

static bool attn_ext(const gpu_attn_check *c)
{
    return c->ext || c->sinks != NULL || c->window > 0 || c->v_in_k;
}

static int launch_attn(const void *ctx, const gpu_check_buf *b)
{
    const gpu_attn_check *c = ctx;
    const int64_t k_row = (int64_t)c->n_head_kv * c->head_dim_k;
    const gk_attn a = {.q = b[AB_Q].dev, .k = b[AB_K].dev, .v = c->v_in_k ? b[AB_K].dev : b[AB_V].dev,
                       .kv_f16 = c->tiles, .k_row = k_row,
                       .v_row = c->v_in_k ? k_row : (int64_t)c->n_head_kv * c->head_dim_v, .n_head = c->n_head,
                       .n_head_kv = c->n_head_kv, .head_dim_k = c->head_dim_k, .head_dim_v = c->head_dim_v,
                       .scale = c->scale, .n_tok = c->n_tok, .tok0 = 0, .max_kv = c->n_ctx,
                       .scratch = b[AB_SCRATCH].dev, .out = b[AB_OUT].dev};
    if (c->tiles)
        return gk_attention_tiles(0, &a, b[AB_STEP].dev);
    if (!attn_ext(c))
        return gk_attention(0, &a, b[AB_STEP].dev);
    const gk_attn_ext x = {.sinks = dev_or_null(&b[AB_SINKS], c->sinks), .window = c->window};
    return gk_attention_ext(0, &a, &x, b[AB_STEP].dev);
}

hydra_status gpu_check_attention(const gpu_attn_check *c, const float *q, const float *k_rows, const float *v_rows,
                                 float *out)
{
    if (c->n_tok < 1 || c->pos0 < 0 || c->pos0 + c->n_tok > c->n_ctx || (!c->v_in_k && v_rows == NULL))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "attention check: %d tokens at %d over %d rows", c->n_tok, c->pos0,
                          c->n_ctx);
    const size_t plain = gk_attention_scratch(c->n_tok, c->n_head, c->n_head_kv, c->head_dim_v, c->n_ctx);
    const size_t ext = gk_attention_ext_scratch(c->n_tok, c->n_head, c->head_dim_v, c->n_ctx);
    const gk_step step = {.pos0 = c->pos0, .n_tok = c->n_tok};
    const size_t kv_div = c->tiles ? 2 : 1; /* f16 cache rows: half the bytes */
    gpu_check_buf b[AB_COUNT] = {
        [AB_Q] = {.in = q, .bytes = fsz((int64_t)c->n_tok * c->n_head * c->head_dim_k)},
        [AB_K] = {.in = k_rows, .bytes = fsz((int64_t)c->n_ctx * c->n_head_kv * c->head_dim_k) / kv_div},
        [AB_V] = {.in = v_rows,
                  .bytes = c->v_in_k ? 0 : fsz((int64_t)c->n_ctx * c->n_head_kv * c->head_dim_v) / kv_div},
        [AB_SINKS] = {.in = c->sinks, .bytes = c->sinks != NULL ? fsz(c->n_head) : 0},
        [AB_STEP] = {.in = &step, .bytes = sizeof step},
        [AB_SCRATCH] = {.bytes = sizeof(float) * (plain > ext ? plain : ext)},
        [AB_OUT] = {.out = out, .bytes = fsz((int64_t)c->n_tok * c->n_head * c->head_dim_v)},
    };
    return gpu_check_run(b, AB_COUNT, launch_attn, c, "attention check");
}

/* --- expert selection */

enum { SB_LOGITS, SB_BIAS, SB_ROUTES, SB_COUNT };

typedef struct select_ctx {
    const gpu_select_check *c;
    int n_tok;
} select_ctx;

static int launch_select(const void *ctx, const gpu_check_buf *b)
{
    const select_ctx *s = ctx;
    const gpu_select_check *c = s->c;
    if (c->plain_kernel) {
        const gk_gating g = {.n_expert = c->n_expert, .n_used = c->n_used, .sigmoid = c->func == GATING_SIGMOID,
                             .renorm = c->renorm, .scale = c->scale};
        return gk_moe_topk(0, &g, b[SB_LOGITS].dev, s->n_tok, b[SB_ROUTES].dev);
    }
    const gk_select g = {.n_expert = c->n_expert, .n_used = c->n_used, .func = c->func, .renorm = c->renorm,
                         .scale = c->scale, .sel_bias = dev_or_null(&b[SB_BIAS], c->sel_bias),
                         .n_group = c->n_group, .n_group_used = c->n_group_used};
    return gk_route_select(0, &g, b[SB_LOGITS].dev, s->n_tok, b[SB_ROUTES].dev);
}

hydra_status gpu_check_select(const gpu_select_check *c, const float *logits, int n_tok, int32_t *experts,
                              float *weights)
{
    const size_t n_routes = (size_t)n_tok * (size_t)c->n_used;
    gk_route *routes = malloc(sizeof *routes * (n_routes + 1));
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "selection check");
    gpu_check_buf b[SB_COUNT] = {
        [SB_LOGITS] = {.in = logits, .bytes = fsz((int64_t)n_tok * c->n_expert)},
        [SB_BIAS] = {.in = c->sel_bias, .bytes = c->sel_bias != NULL ? fsz(c->n_expert) : 0},
        [SB_ROUTES] = {.out = routes, .bytes = sizeof *routes * n_routes},
    };
    const select_ctx ctx = {.c = c, .n_tok = n_tok};
    const hydra_status st = gpu_check_run(b, SB_COUNT, launch_select, &ctx, "selection check");
    for (size_t i = 0; st == HYDRA_OK && i < n_routes; i++) {
        experts[i] = routes[i].expert;
        weights[i] = routes[i].weight;
    }
    free(routes);
    return st;
}

/* --- FFN activation */

enum { GB_GATE, GB_UP, GB_H, GB_GBIAS, GB_UBIAS, GB_ROUTES, GB_COUNT };

static int launch_glu(const void *ctx, const gpu_check_buf *b)
{
    const gpu_glu_check *c = ctx;
    const gk_glu a = {.gate = b[GB_GATE].dev, .up = b[GB_UP].dev, .h = b[GB_H].dev, .n_rows = c->n_rows,
                      .ff = c->ff, .gate_bias = dev_or_null(&b[GB_GBIAS], c->gate_bias),
                      .up_bias = dev_or_null(&b[GB_UBIAS], c->up_bias),
                      .routes = dev_or_null(&b[GB_ROUTES], c->experts), .order = NULL, .oai = c->oai,
                      .alpha = c->alpha, .limit = c->limit};
    return gk_glu_act(0, &a);
}

hydra_status gpu_check_glu(const gpu_glu_check *c, const float *gate, const float *up, float *h)
{
    const int64_t total = c->n_rows * c->ff;
    gk_route *routes = malloc(sizeof *routes * (size_t)(c->n_rows + 1));
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "activation check");
    for (int64_t r = 0; c->experts != NULL && r < c->n_rows; r++)
        routes[r] = (gk_route){.token = (int32_t)r, .expert = c->experts[r], .weight = 1.0f};
    gpu_check_buf b[GB_COUNT] = {
        [GB_GATE] = {.in = gate, .bytes = fsz(total)},
        [GB_UP] = {.in = up, .bytes = fsz(total)},
        [GB_H] = {.out = h, .bytes = fsz(total)},
        [GB_GBIAS] = {.in = c->gate_bias, .bytes = c->gate_bias != NULL ? fsz((int64_t)c->n_expert * c->ff) : 0},
        [GB_UBIAS] = {.in = c->up_bias, .bytes = c->up_bias != NULL ? fsz((int64_t)c->n_expert * c->ff) : 0},
        [GB_ROUTES] = {.in = routes, .bytes = c->experts != NULL ? sizeof *routes * (size_t)c->n_rows : 0},
    };
    const hydra_status st = gpu_check_run(b, GB_COUNT, launch_glu, c, "activation check");
    free(routes);
    return st;
}

/* --- combine and residual adds */

enum { CB_ROUTES, CB_Y, CB_X, CB_GATE, CB_COUNT };

typedef struct rows_ctx {
    int n_tok, n_used;
    int64_t n;
    const float *gate; /* add_rows; NULL with combine too */
    bool combine;
} rows_ctx;

static int launch_rows(const void *ctx, const gpu_check_buf *b)
{
    const rows_ctx *c = ctx;
    if (c->combine)
        return gk_moe_combine(0, b[CB_ROUTES].dev, NULL, b[CB_Y].dev, c->n_tok, c->n_used, c->n, b[CB_X].dev, NULL);
    return gk_add_rows(0, b[CB_X].dev, b[CB_Y].dev, dev_or_null(&b[CB_GATE], c->gate), c->n_tok, c->n);
}

hydra_status gpu_check_combine(const float *weights, const float *y, int n_tok, int n_used, int64_t n, float *x)
{
    const int64_t n_routes = (int64_t)n_tok * n_used;
    gk_route *routes = malloc(sizeof *routes * (size_t)(n_routes + 1));
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "combine check");
    for (int64_t r = 0; r < n_routes; r++)
        routes[r] = (gk_route){.token = (int32_t)(r / n_used), .expert = 0, .weight = weights[r]};
    gpu_check_buf b[CB_COUNT] = {
        [CB_ROUTES] = {.in = routes, .bytes = sizeof *routes * (size_t)n_routes},
        [CB_Y] = {.in = y, .bytes = fsz(n_routes * n)},
        [CB_X] = {.in = x, .out = x, .bytes = fsz((int64_t)n_tok * n)},
    };
    const rows_ctx c = {.n_tok = n_tok, .n_used = n_used, .n = n, .combine = true};
    const hydra_status st = gpu_check_run(b, CB_COUNT, launch_rows, &c, "combine check");
    free(routes);
    return st;
}

hydra_status gpu_check_add_rows(const float *y, const float *gate, int n_tok, int64_t n, float *x)
{
    gpu_check_buf b[CB_COUNT] = {
        [CB_Y] = {.in = y, .bytes = fsz((int64_t)n_tok * n)},
        [CB_X] = {.in = x, .out = x, .bytes = fsz((int64_t)n_tok * n)},
        [CB_GATE] = {.in = gate, .bytes = gate != NULL ? fsz(n_tok) : 0},
    };
    const rows_ctx c = {.n_tok = n_tok, .n = n, .gate = gate};
    return gpu_check_run(b, CB_COUNT, launch_rows, &c, "residual add check");
}

/* --- MLA's cache rows and query split */

enum { MB_LAT, MB_NORM, MB_Q, MB_CACHE, MB_NOPE, MB_QLAT, MB_STEP, MB_COUNT };

static int launch_mla(const void *ctx, const gpu_check_buf *b)
{
    const gpu_mla_prep_check *c = ctx;
    const rope_params *p = &c->rope;
    const gk_mla m = {.latent = b[MB_LAT].dev, .kv_norm = b[MB_NORM].dev, .q = b[MB_Q].dev,
                      .q_nope = b[MB_NOPE].dev, .q_lat = b[MB_QLAT].dev, .k_cache = b[MB_CACHE].dev,
                      .kv_f16 = false, .n_head = c->n_head, .nope = c->nope, .n_rot = c->n_rot,
                      .kv_lora = c->kv_lora, .n_tok = c->n_tok, .eps = c->eps, .neox = c->neox,
                      .theta_scale = powf(p->base, -2.0f / (float)p->n_rot), .freq_scale = p->freq_scale,
                      .attn_factor = p->attn_factor, .ext_factor = p->ext_factor, .corr_low = p->corr_low,
                      .corr_high = p->corr_high};
    return gk_mla_prepare(0, &m, b[MB_STEP].dev);
}

hydra_status gpu_check_mla_prepare(const gpu_mla_prep_check *c, const float *latent, const float *kv_norm,
                                   const float *q, float *cache_rows, float *q_nope, float *q_lat)
{
    const int64_t row = (int64_t)c->kv_lora + c->n_rot, heads = (int64_t)c->n_tok * c->n_head;
    const gk_step step = {.pos0 = c->pos0, .n_tok = c->n_tok};
    gpu_check_buf b[MB_COUNT] = {
        [MB_LAT] = {.in = latent, .bytes = fsz(c->n_tok * row)},
        [MB_NORM] = {.in = kv_norm, .bytes = fsz(c->kv_lora)},
        [MB_Q] = {.in = q, .bytes = fsz(heads * (c->nope + c->n_rot))},
        [MB_CACHE] = {.out = cache_rows, .bytes = fsz((c->pos0 + c->n_tok) * row)},
        [MB_NOPE] = {.out = q_nope, .bytes = fsz(heads * c->nope)},
        [MB_QLAT] = {.out = q_lat, .bytes = fsz(heads * row)},
        [MB_STEP] = {.in = &step, .bytes = sizeof step},
    };
    return gpu_check_run(b, MB_COUNT, launch_mla, c, "MLA preparation check");
}

/* --- per-route output bias */

enum { BB_BIAS, BB_ROUTES, BB_ORDER, BB_Y, BB_COUNT };

typedef struct bias_ctx {
    int64_t n_rows, width;
    bool order;
} bias_ctx;

static int launch_bias(const void *ctx, const gpu_check_buf *b)
{
    const bias_ctx *c = ctx;
    return gk_route_bias(0, b[BB_Y].dev, c->n_rows, c->width, b[BB_BIAS].dev, b[BB_ROUTES].dev,
                         c->order ? b[BB_ORDER].dev : NULL);
}

hydra_status gpu_check_route_bias(const float *bias, int n_expert, const int32_t *experts, int n_routes,
                                  const int32_t *order, int64_t n_rows, int64_t width, float *y)
{
    gk_route *routes = malloc(sizeof *routes * (size_t)(n_routes + 1));
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "route bias check");
    for (int r = 0; r < n_routes; r++)
        routes[r] = (gk_route){.token = r, .expert = experts[r], .weight = 1.0f};
    gpu_check_buf b[BB_COUNT] = {
        [BB_BIAS] = {.in = bias, .bytes = fsz((int64_t)n_expert * width)},
        [BB_ROUTES] = {.in = routes, .bytes = sizeof *routes * (size_t)n_routes},
        [BB_ORDER] = {.in = order, .bytes = order != NULL ? sizeof(int32_t) * (size_t)n_rows : 0},
        [BB_Y] = {.in = y, .out = y, .bytes = fsz(n_rows * width)},
    };
    const bias_ctx c = {.n_rows = n_rows, .width = width, .order = order != NULL};
    const hydra_status st = gpu_check_run(b, BB_COUNT, launch_bias, &c, "route bias check");
    free(routes);
    return st;
}
