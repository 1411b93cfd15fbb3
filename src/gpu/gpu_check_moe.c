/*
 * gpu_check_moe.c — one decode token's down projection, combine and next
 * norm both ways over host data (gpu_check_moe.h): the two launches as
 * gpu_experts_routed and gpu_moe_experts enqueue them, then
 * gk_moe_down_combine, each on its own copy of x and its own outputs, in
 * one gpu_check_run (gpu_internal.h: the buffers carved from one zeroed
 * allocation, so the counter starts at zero).
 */
#include "gpu_check_moe.h"

#include "gpu_internal.h"

#include "../quant.h"

#include <stdlib.h>
#include <string.h>

/* One way's device outputs, in buffer order. */
enum { MW_X, MW_XN, MW_XQ, MW_XMETA, MW_N };
enum { MC_DOWN, MC_H, MC_ROUTES, MC_NGAIN, MC_CTR, MC_Y, MC_SPLIT, MC_ONE = MC_SPLIT + MW_N, MC_N = MC_ONE + MW_N };

typedef struct moe_check_ctx {
    const gpu_moe_check *c;
    size_t rb_down;
} moe_check_ctx;

static gk_norm_out norm_of(const gpu_check_buf *w, const gpu_check_buf *gain, float eps)
{
    return (gk_norm_out){.gain = gain->dev, .eps = eps, .y = w[MW_XN].dev, .q = w[MW_XQ].dev, .meta = w[MW_XMETA].dev};
}

static gk_mat down_of(const moe_check_ctx *m, const gpu_check_buf *b)
{
    const gpu_moe_check *c = m->c;
    return (gk_mat){.data = b[MC_DOWN].dev, .type = c->down_type, .n_rows = c->n_embd, .n_cols = c->ff,
                    .row_bytes = m->rb_down, .mat_bytes = m->rb_down * (size_t)c->n_embd};
}

static int launch_both(const void *ctx, const gpu_check_buf *b)
{
    const moe_check_ctx *m = ctx;
    const gpu_moe_check *c = m->c;
    const gk_mat down = down_of(m, b);
    const gk_act ha = {.f = b[MC_H].dev, .n = c->ff};
    const gk_rows by_route = {.routes = b[MC_ROUTES].dev, .n_routes = c->n_used, .act_by_token = false};
    const gk_out yo = {.y = b[MC_Y].dev, .y_stride = c->n_embd};
    int e = gk_matvec_staged(0, &down, &ha, &by_route, &yo);
    const gk_norm_out next_s = norm_of(b + MC_SPLIT, &b[MC_NGAIN], c->eps);
    if (e == 0)
        e = gk_moe_combine(0, b[MC_ROUTES].dev, NULL, b[MC_Y].dev, 1, c->n_used, c->n_embd, b[MC_SPLIT + MW_X].dev,
                           c->next_gain != NULL ? &next_s : NULL);
    const gk_moe_dc dc = {.down = down, .n_used = c->n_used, .routes = b[MC_ROUTES].dev, .h = b[MC_H].dev,
                          .x = b[MC_ONE + MW_X].dev, .counter = b[MC_CTR].dev};
    const gk_norm_out next_o = norm_of(b + MC_ONE, &b[MC_NGAIN], c->eps);
    if (e == 0)
        e = gk_moe_down_combine(0, &dc, c->next_gain != NULL ? &next_o : NULL);
    return e;
}

/* One way's buffers: x in and out, the norm's outputs out. */
static void way_bufs(gpu_check_buf *w, const gpu_moe_check *c, const float *x, gpu_moe_result *r, int32_t *meta)
{
    const size_t embd = (size_t)c->n_embd;
    w[MW_X] = (gpu_check_buf){.in = x, .out = r->x, .bytes = sizeof(float) * embd};
    w[MW_XN] = (gpu_check_buf){.out = r->xn, .bytes = sizeof(float) * embd};
    w[MW_XQ] = (gpu_check_buf){.out = r->xq, .bytes = embd};
    w[MW_XMETA] = (gpu_check_buf){.out = meta, .bytes = sizeof(int32_t) * 4 * (embd / 32)};
}

static void way_scales(const gpu_moe_check *c, const int32_t *meta, gpu_moe_result *r)
{
    for (int64_t i = 0; i < c->n_embd / 32; i++)
        memcpy(&r->xd[i], &meta[4 * i], sizeof(float));
}

hydra_status gpu_check_moe_down_combine(const gpu_moe_check *c, const void *down, const float *h, const float *x,
                                        gpu_moe_result *split, gpu_moe_result *one)
{
    moe_check_ctx m = {.c = c};
    uint64_t rb = 0;
    if (c->n_used < 1 || c->n_used > GK_MOE_DC_MAX_USED || c->n_embd % 32 != 0 ||
        !quant_row_bytes(c->down_type, (uint64_t)c->ff, &rb))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_moe_down_combine: %d of %d experts, n_embd %lld, ff %lld",
                          c->n_used, c->n_expert, (long long)c->n_embd, (long long)c->ff);
    m.rb_down = (size_t)rb;
    const size_t n_meta = 4 * (size_t)(c->n_embd / 32);
    gk_route *routes = malloc(sizeof *routes * (size_t)c->n_used);
    int32_t *meta = malloc(sizeof(int32_t) * 2 * n_meta);
    if (routes == NULL || meta == NULL) {
        free(routes);
        free(meta);
        return hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_moe_down_combine: host scratch");
    }
    for (int k = 0; k < c->n_used; k++)
        routes[k] = (gk_route){.token = 0, .expert = c->experts[k], .weight = c->weights[k]};
    gpu_check_buf b[MC_N] = {
        [MC_DOWN] = {.in = down, .bytes = m.rb_down * (size_t)c->n_embd * (size_t)c->n_expert},
        [MC_H] = {.in = h, .bytes = sizeof(float) * (size_t)c->n_used * (size_t)c->ff},
        [MC_ROUTES] = {.in = routes, .bytes = sizeof *routes * (size_t)c->n_used},
        [MC_NGAIN] = {.in = c->next_gain, .bytes = sizeof(float) * (size_t)c->n_embd},
        [MC_CTR] = {.bytes = sizeof(unsigned int)},
        [MC_Y] = {.bytes = sizeof(float) * (size_t)c->n_used * (size_t)c->n_embd},
    };
    way_bufs(b + MC_SPLIT, c, x, split, meta);
    way_bufs(b + MC_ONE, c, x, one, meta + n_meta);
    const gk_moe_dc shape = {.down = down_of(&m, b), .n_used = c->n_used};
    hydra_status st = gk_moe_down_combine_fits(&shape)
                          ? gpu_check_run(b, MC_N, launch_both, &m, "MoE down + combine check")
                          : hydra_fail(HYDRA_ERR_UNSUPPORTED, "gk_moe_down_combine does not take these shapes");
    if (st == HYDRA_OK) {
        way_scales(c, meta, split);
        way_scales(c, meta + n_meta, one);
    }
    free(routes);
    free(meta);
    return st;
}
