/*
 * gpu_check_fused.c — the fused decode kernels run once over host data
 * for their parity tests (gpu_check_fused.h).  Each check lists its device
 * buffers; gpu_check_run (gpu_internal.h) carves them from one zeroed allocation (so a tail's
 * counter starts at zero), copies the inputs, launches, synchronises and
 * copies the outputs back.
 */
#include "gpu_check_fused.h"

#include "gpu_internal.h"

#include "../quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool row_bytes_of(uint32_t type, int64_t n_cols, size_t *out)
{
    uint64_t rb = 0;
    if (!quant_row_bytes(type, (uint64_t)n_cols, &rb))
        return false;
    *out = (size_t)rb;
    return true;
}

/* --- router + top-k tail */

enum { RT_W, RT_X, RT_LOGITS, RT_ROUTES, RT_COUNTER, RT_GAIN, RT_XN, RT_XQ, RT_XMETA, RT_N };

static int launch_router(const void *ctx, const gpu_check_buf *b)
{
    const gpu_router_check *c = ctx;
    size_t rb = 0;
    row_bytes_of(c->type, c->n_cols, &rb);
    const gk_mat w = {.data = b[RT_W].dev, .type = c->type, .n_rows = c->n_expert, .n_cols = c->n_cols,
                      .row_bytes = rb, .mat_bytes = rb * (size_t)c->n_expert};
    const gk_act x = {.f = b[RT_X].dev, .n = c->n_cols};
    const gk_out out = {.y = b[RT_LOGITS].dev, .y_stride = c->n_expert};
    const gk_tail tail = {.counter = b[RT_COUNTER].dev,
                          .gating = {.n_expert = c->n_expert, .n_used = c->n_used, .sigmoid = c->sigmoid,
                                     .renorm = c->renorm, .scale = c->scale},
                          .routes = b[RT_ROUTES].dev};
    const gk_norm_out norm = {.gain = b[RT_GAIN].dev, .eps = c->eps, .y = b[RT_XN].dev, .q = b[RT_XQ].dev,
                              .meta = b[RT_XMETA].dev};
    return gk_router_topk(0, &w, &x, c->n_tok, &out, &tail, c->norm_gain != NULL ? &norm : NULL);
}

hydra_status gpu_check_router_topk(const gpu_router_check *c, const void *w, const float *x, float *logits,
                                   int32_t *experts, float *weights)
{
    size_t rb = 0;
    const int n_routes = c->n_tok * c->n_used;
    if (!row_bytes_of(c->type, c->n_cols, &rb) || c->n_tok < 1 || c->n_tok > GK_MATVEC_MAX_TOK || n_routes < 1)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_router_topk: %d experts of %lld columns, %d tokens",
                          c->n_expert, (long long)c->n_cols, c->n_tok);
    gk_route *routes = malloc(sizeof *routes * (size_t)n_routes);
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_router_topk: %d routes", n_routes);
    gpu_check_buf b[RT_N] = {
        [RT_W] = {.in = w, .bytes = rb * (size_t)c->n_expert},
        [RT_X] = {.in = x, .bytes = sizeof(float) * (size_t)(c->n_tok * c->n_cols)},
        [RT_LOGITS] = {.out = logits, .bytes = sizeof(float) * (size_t)(c->n_tok * c->n_expert)},
        [RT_ROUTES] = {.out = routes, .bytes = sizeof *routes * (size_t)n_routes},
        [RT_COUNTER] = {.bytes = sizeof(unsigned int)},
        [RT_GAIN] = {.in = c->norm_gain, .bytes = sizeof(float) * (size_t)c->n_cols},
        [RT_XN] = {.bytes = sizeof(float) * (size_t)c->n_cols},
        [RT_XQ] = {.bytes = (size_t)c->n_cols},
        [RT_XMETA] = {.bytes = 16 * (size_t)(c->n_cols / 32 + 1)},
    };
    const hydra_status st = gpu_check_run(b, RT_N, launch_router, c, "router + top-k check");
    for (int r = 0; st == HYDRA_OK && r < n_routes; r++) {
        experts[r] = routes[r].token == r / c->n_used ? routes[r].expert : -2; /* -2: wrong token */
        weights[r] = routes[r].weight;
    }
    free(routes);
    return st;
}

/* --- staged matvec */

enum { SM_W, SM_X, SM_Y, SM_N };

typedef struct staged_ctx {
    uint32_t type;
    int64_t n_rows, n_cols;
    size_t row_bytes;
} staged_ctx;

static int launch_staged(const void *ctx, const gpu_check_buf *b)
{
    const staged_ctx *c = ctx;
    const gk_mat w = {.data = b[SM_W].dev, .type = c->type, .n_rows = c->n_rows, .n_cols = c->n_cols,
                      .row_bytes = c->row_bytes, .mat_bytes = c->row_bytes * (size_t)c->n_rows};
    const gk_act x = {.f = b[SM_X].dev, .n = c->n_cols};
    const gk_rows rows = {.n_tok = 1};
    const gk_out out = {.y = b[SM_Y].dev, .y_stride = c->n_rows};
    return gk_matvec_staged(0, &w, &x, &rows, &out);
}

hydra_status gpu_check_matvec_staged(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                     float *y)
{
    staged_ctx c = {.type = type, .n_rows = n_rows, .n_cols = n_cols};
    if (!row_bytes_of(type, n_cols, &c.row_bytes) || n_rows < 1 || n_cols % 32 != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_matvec_staged: %lld x %lld of type %u",
                          (long long)n_rows, (long long)n_cols, type);
    gpu_check_buf b[SM_N] = {
        [SM_W] = {.in = w, .bytes = c.row_bytes * (size_t)n_rows},
        [SM_X] = {.in = x, .bytes = sizeof(float) * (size_t)n_cols},
        [SM_Y] = {.out = y, .bytes = sizeof(float) * (size_t)n_rows},
    };
    return gpu_check_run(b, SM_N, launch_staged, &c, "staged matvec check");
}

/* --- rope + attention in the attention's launches */

enum {
    RA_Q_REF, RA_Q_FUSED, RA_K_REF, RA_K_FUSED, RA_V, RA_QN, RA_KN, RA_STEP, RA_SCRATCH_REF, RA_SCRATCH_FUSED,
    RA_OUT_REF, RA_OUT_FUSED, RA_OUT_Q, RA_OUT_META, RA_KC_REF, RA_VC_REF, RA_KC_FUSED, RA_VC_FUSED, RA_N
};

static int launch_rope_attn(const void *ctx, const gpu_check_buf *b)
{
    const gpu_rope_attn_check *c = ctx;
    const int64_t row = (int64_t)c->n_head_kv * c->head_dim;
    gk_rope r = {.v = b[RA_V].dev, .q_norm = c->q_norm != NULL ? b[RA_QN].dev : NULL,
                 .k_norm = c->k_norm != NULL ? b[RA_KN].dev : NULL, .eps = c->eps, .n_head = c->n_head,
                 .n_head_kv = c->n_head_kv, .head_dim_k = c->head_dim, .head_dim_v = c->head_dim,
                 .n_rot = c->n_rot, .neox = c->neox, .theta_scale = powf(c->theta_base, -2.0f / (float)c->n_rot),
                 .freq_scale = 1.0f, .attn_factor = 1.0f, .kv_f16 = c->kv_f16, .n_tok = 1};
    gk_attn a = {.kv_f16 = c->kv_f16, .k_row = row, .v_row = row, .n_head = c->n_head, .n_head_kv = c->n_head_kv,
                 .head_dim_k = c->head_dim, .head_dim_v = c->head_dim, .scale = 1.0f / sqrtf((float)c->head_dim),
                 .n_tok = 1, .max_kv = c->n_ctx};
    r.q = b[RA_Q_REF].dev, r.k = b[RA_K_REF].dev, r.k_cache = b[RA_KC_REF].dev, r.v_cache = b[RA_VC_REF].dev;
    a.q = b[RA_Q_REF].dev, a.k = b[RA_KC_REF].dev, a.v = b[RA_VC_REF].dev;
    a.scratch = b[RA_SCRATCH_REF].dev, a.out = b[RA_OUT_REF].dev;
    int e = gk_rope_store(0, &r, b[RA_STEP].dev);
    if (e == 0)
        e = gk_attention(0, &a, b[RA_STEP].dev);
    r.q = b[RA_Q_FUSED].dev, r.k = b[RA_K_FUSED].dev, r.k_cache = b[RA_KC_FUSED].dev, r.v_cache = b[RA_VC_FUSED].dev;
    a.q = b[RA_Q_FUSED].dev, a.k = b[RA_KC_FUSED].dev, a.v = b[RA_VC_FUSED].dev;
    a.scratch = b[RA_SCRATCH_FUSED].dev, a.out = b[RA_OUT_FUSED].dev;
    a.out_q = b[RA_OUT_Q].dev, a.out_meta = b[RA_OUT_META].dev;
    return e == 0 ? gk_attention_rope(0, &a, &r, b[RA_STEP].dev) : e;
}

hydra_status gpu_check_rope_attention(const gpu_rope_attn_check *c, const float *q, const float *k, const float *v,
                                      float *out_ref, float *out_fused, int8_t *out_q, float *out_d,
                                      bool *same_cache)
{
    if (c->pos0 < 0 || c->pos0 >= c->n_ctx || c->head_dim % 32 != 0 || (c->kv_f16 && c->cache_init != NULL))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_rope_attention: position %d of %d, head size %d",
                          c->pos0, c->n_ctx, c->head_dim);
    const size_t nq = (size_t)c->n_head * (size_t)c->head_dim, nk = (size_t)c->n_head_kv * (size_t)c->head_dim;
    const size_t cache = (size_t)c->n_ctx * nk * (c->kv_f16 ? 2 : 4);
    const size_t scratch = sizeof(float) * gk_attention_scratch(1, c->n_head, c->n_head_kv, c->head_dim, c->n_ctx);
    const float *init_v = c->cache_init != NULL ? c->cache_init + (size_t)c->n_ctx * nk : NULL;
    uint8_t *caches = malloc(4 * cache);
    int32_t *meta = malloc(16 * (nq / 32));
    if (caches == NULL || meta == NULL) {
        free(caches);
        free(meta);
        return hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_rope_attention: %zu cache bytes", cache);
    }
    const gk_step step = {.pos0 = c->pos0, .n_tok = 1};
    gpu_check_buf b[RA_N] = {
        [RA_Q_REF] = {.in = q, .bytes = sizeof(float) * nq},
        [RA_Q_FUSED] = {.in = q, .bytes = sizeof(float) * nq},
        [RA_K_REF] = {.in = k, .bytes = sizeof(float) * nk},
        [RA_K_FUSED] = {.in = k, .bytes = sizeof(float) * nk},
        [RA_V] = {.in = v, .bytes = sizeof(float) * nk},
        [RA_QN] = {.in = c->q_norm, .bytes = sizeof(float) * (size_t)c->head_dim},
        [RA_KN] = {.in = c->k_norm, .bytes = sizeof(float) * (size_t)c->head_dim},
        [RA_STEP] = {.in = &step, .bytes = sizeof step},
        [RA_SCRATCH_REF] = {.bytes = scratch},
        [RA_SCRATCH_FUSED] = {.bytes = scratch},
        [RA_OUT_REF] = {.out = out_ref, .bytes = sizeof(float) * nq},
        [RA_OUT_FUSED] = {.out = out_fused, .bytes = sizeof(float) * nq},
        [RA_OUT_Q] = {.out = out_q, .bytes = nq},
        [RA_OUT_META] = {.out = meta, .bytes = 16 * (nq / 32)},
        [RA_KC_REF] = {.in = c->cache_init, .out = caches, .bytes = cache},
        [RA_VC_REF] = {.in = init_v, .out = caches + cache, .bytes = cache},
        [RA_KC_FUSED] = {.in = c->cache_init, .out = caches + 2 * cache, .bytes = cache},
        [RA_VC_FUSED] = {.in = init_v, .out = caches + 3 * cache, .bytes = cache},
    };
    const hydra_status st = gpu_check_run(b, RA_N, launch_rope_attn, c, "rope + attention check");
    if (st == HYDRA_OK) {
        *same_cache = memcmp(caches, caches + 2 * cache, 2 * cache) == 0;
        for (size_t i = 0; i < nq / 32; i++)
            memcpy(&out_d[i], &meta[4 * i], sizeof(float));
    }
    free(caches);
    free(meta);
    return st;
}

/* --- Q, K, V of mixed types in one launch */

enum { MX_W0, MX_W1, MX_W2, MX_X, MX_Q, MX_META, MX_Y, MX_N };

typedef struct mixed_ctx {
    gk_mat m[3];
    int64_t n_cols;
} mixed_ctx;

static int launch_mixed(const void *ctx, const gpu_check_buf *b)
{
    const mixed_ctx *c = ctx;
    gk_mat m[3];
    gk_out out[3];
    const gk_mat *w[3];
    float *y = b[MX_Y].dev;
    for (int i = 0; i < 3; i++) {
        m[i] = c->m[i];
        m[i].data = b[MX_W0 + i].dev;
        w[i] = &m[i];
        out[i] = (gk_out){.y = y, .y_stride = m[i].n_rows};
        y += m[i].n_rows;
    }
    const gk_act x = {.f = b[MX_X].dev, .q = b[MX_Q].dev, .meta = b[MX_META].dev, .n = c->n_cols};
    const int e = gk_quantize_rows(0, x.f, 1, c->n_cols, b[MX_Q].dev, b[MX_META].dev);
    return e == 0 ? gk_matvec_multi(0, w, out, 3, &x, 1) : e;
}

hydra_status gpu_check_matvec_mixed(uint32_t type, uint32_t last, const void *const w[3], const int64_t n_rows[3],
                                    int64_t n_cols, const float *x, float *y)
{
    mixed_ctx c = {.n_cols = n_cols};
    gpu_check_buf b[MX_N] = {
        [MX_X] = {.in = x, .bytes = sizeof(float) * (size_t)n_cols},
        [MX_Q] = {.bytes = (size_t)n_cols},
        [MX_META] = {.bytes = 16 * (size_t)(n_cols / 32 + 1)},
    };
    int64_t total = 0;
    for (int i = 0; i < 3; i++) {
        const uint32_t t = i < 2 ? type : last;
        size_t rb = 0;
        if (!row_bytes_of(t, n_cols, &rb) || n_rows[i] < 1 || n_cols % 32 != 0)
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_matvec_mixed: %lld x %lld of type %u",
                              (long long)n_rows[i], (long long)n_cols, t);
        c.m[i] = (gk_mat){.type = t, .n_rows = n_rows[i], .n_cols = n_cols, .row_bytes = rb,
                          .mat_bytes = rb * (size_t)n_rows[i]};
        b[MX_W0 + i] = (gpu_check_buf){.in = w[i], .bytes = rb * (size_t)n_rows[i]};
        total += n_rows[i];
    }
    b[MX_Y] = (gpu_check_buf){.out = y, .bytes = sizeof(float) * (size_t)total};
    return gpu_check_run(b, MX_N, launch_mixed, &c, "mixed Q/K/V check");
}
