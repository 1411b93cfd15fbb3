/*
 * gpu_check_moe.c — one decode token's MoE block both ways over host data
 * (gpu_check_moe.h): the 4-launch path as gpu_forward.c enqueues it, then
 * gk_moe_decode, each on its own copy of x and its own outputs, in one
 * gpu_check_run (gpu_internal.h: the buffers carved from one zeroed
 * allocation, so the counters start at zero).
 */
#include "gpu_check_moe.h"

#include "gpu_internal.h"

#include "../quant.h"

#include <stdlib.h>
#include <string.h>

/* One way's device outputs, in buffer order. */
enum { MW_X, MW_LOGITS, MW_ROUTES, MW_XN, MW_XQ, MW_XMETA, MW_H, MW_N };
enum { MC_ROUTER, MC_GATE, MC_UP, MC_DOWN, MC_FGAIN, MC_NGAIN, MC_CTR, MC_Y, MC_SPLIT, MC_ONE = MC_SPLIT + MW_N,
       MC_N = MC_ONE + MW_N };

typedef struct moe_check_ctx {
    const gpu_moe_check *c;
    size_t rb_router, rb_gate, rb_down;
} moe_check_ctx;

static gk_mat mat_of(const gpu_check_buf *b, uint32_t type, int64_t n_rows, int64_t n_cols, size_t rb)
{
    return (gk_mat){.data = b->dev, .type = type, .n_rows = n_rows, .n_cols = n_cols, .row_bytes = rb,
                    .mat_bytes = rb * (size_t)n_rows};
}

static gk_norm_out norm_of(const gpu_check_buf *w, const float *gain, float eps)
{
    return (gk_norm_out){.gain = gain, .eps = eps, .y = w[MW_XN].dev, .q = w[MW_XQ].dev, .meta = w[MW_XMETA].dev};
}

/* The 4-launch path, as gpu_forward.c's route() and gpu_moe_experts(). */
static int launch_split(const moe_check_ctx *m, const gpu_check_buf *b, const gk_mat *mats)
{
    const gpu_moe_check *c = m->c;
    const gpu_check_buf *w = b + MC_SPLIT;
    const gk_gating gating = {.n_expert = c->n_expert, .n_used = c->n_used, .sigmoid = c->sigmoid,
                              .renorm = c->renorm, .scale = c->scale};
    const gk_act x = {.f = w[MW_X].dev, .n = c->n_embd};
    const gk_out lo = {.y = w[MW_LOGITS].dev, .y_stride = c->n_expert};
    const gk_tail tail = {.counter = (unsigned int *)b[MC_CTR].dev + GK_CTR_TAIL, .gating = gating,
                          .routes = w[MW_ROUTES].dev};
    const gk_norm_out ffn = norm_of(w, b[MC_FGAIN].dev, c->eps);
    int e = gk_router_topk(0, &mats[0], &x, 1, &lo, &tail, &ffn);
    const gk_act xn = {.f = w[MW_XN].dev, .q = w[MW_XQ].dev, .meta = w[MW_XMETA].dev, .n = c->n_embd};
    const gk_rows by_token = {.routes = w[MW_ROUTES].dev, .n_routes = c->n_used, .act_by_token = true};
    const gk_out ho = {.y = w[MW_H].dev, .y_stride = c->ff};
    if (e == 0)
        e = gk_matvec(0, &mats[1], &mats[2], &xn, &by_token, &ho);
    const gk_act ha = {.f = w[MW_H].dev, .n = c->ff};
    const gk_rows by_route = {.routes = w[MW_ROUTES].dev, .n_routes = c->n_used, .act_by_token = false};
    const gk_out yo = {.y = b[MC_Y].dev, .y_stride = c->n_embd};
    if (e == 0)
        e = gk_matvec_staged(0, &mats[3], &ha, &by_route, &yo);
    const gk_norm_out next = norm_of(w, b[MC_NGAIN].dev, c->eps);
    if (e == 0)
        e = gk_moe_combine(0, w[MW_ROUTES].dev, NULL, b[MC_Y].dev, 1, c->n_used, c->n_embd, w[MW_X].dev,
                           c->next_norm ? &next : NULL);
    return e;
}

static void block_of(const moe_check_ctx *m, const gpu_check_buf *b, const gk_mat *mats, gk_moe_block *blk)
{
    const gpu_moe_check *c = m->c;
    const gpu_check_buf *w = b + MC_ONE;
    *blk = (gk_moe_block){.router = mats[0], .gate = mats[1], .up = mats[2], .down = mats[3],
                          .gating = {.n_expert = c->n_expert, .n_used = c->n_used, .sigmoid = c->sigmoid,
                                     .renorm = c->renorm, .scale = c->scale},
                          .ffn_gain = b[MC_FGAIN].dev, .eps = c->eps, .x = w[MW_X].dev, .logits = w[MW_LOGITS].dev,
                          .routes = w[MW_ROUTES].dev, .h = w[MW_H].dev,
                          .bar = (unsigned int *)b[MC_CTR].dev + GK_CTR_BAR_MOE};
}

static void mats_of(const moe_check_ctx *m, const gpu_check_buf *b, gk_mat *mats)
{
    const gpu_moe_check *c = m->c;
    mats[0] = mat_of(&b[MC_ROUTER], c->router_type, c->n_expert, c->n_embd, m->rb_router);
    mats[1] = mat_of(&b[MC_GATE], c->gate_type, c->ff, c->n_embd, m->rb_gate);
    mats[2] = mat_of(&b[MC_UP], c->gate_type, c->ff, c->n_embd, m->rb_gate);
    mats[3] = mat_of(&b[MC_DOWN], c->down_type, c->n_embd, c->ff, m->rb_down);
}

static int launch_both(const void *ctx, const gpu_check_buf *b)
{
    const moe_check_ctx *m = ctx;
    gk_mat mats[4];
    mats_of(m, b, mats);
    int e = launch_split(m, b, mats);
    gk_moe_block blk;
    block_of(m, b, mats, &blk);
    const gk_norm_out next = norm_of(b + MC_ONE, b[MC_NGAIN].dev, m->c->eps);
    if (e == 0)
        e = gk_moe_decode(0, &blk, m->c->next_norm ? &next : NULL);
    return e;
}

static bool row_bytes(uint32_t type, int64_t n, size_t *out)
{
    uint64_t rb = 0;
    if (!quant_row_bytes(type, (uint64_t)n, &rb))
        return false;
    *out = (size_t)rb;
    return true;
}

/* One way's buffers: x in and out, the rest out into host scratch. */
static void way_bufs(gpu_check_buf *w, const gpu_moe_check *c, const float *x, gpu_moe_result *r, gk_route *routes,
                     int32_t *meta)
{
    const size_t embd = (size_t)c->n_embd;
    w[MW_X] = (gpu_check_buf){.in = x, .out = r->x, .bytes = sizeof(float) * embd};
    w[MW_LOGITS] = (gpu_check_buf){.bytes = sizeof(float) * (size_t)c->n_expert};
    w[MW_ROUTES] = (gpu_check_buf){.out = routes, .bytes = sizeof *routes * (size_t)c->n_used};
    w[MW_XN] = (gpu_check_buf){.out = r->xn, .bytes = sizeof(float) * embd};
    w[MW_XQ] = (gpu_check_buf){.out = r->xq, .bytes = embd};
    w[MW_XMETA] = (gpu_check_buf){.out = meta, .bytes = sizeof(int32_t) * 4 * (embd / 32)};
    w[MW_H] = (gpu_check_buf){.out = r->h, .bytes = sizeof(float) * (size_t)c->n_used * (size_t)c->ff};
}

static void way_results(const gpu_moe_check *c, const gk_route *routes, const int32_t *meta, gpu_moe_result *r)
{
    for (int k = 0; k < c->n_used; k++) {
        r->experts[k] = routes[k].token == 0 ? routes[k].expert : -2; /* -2: a wrong token */
        r->weights[k] = routes[k].weight;
    }
    for (int64_t i = 0; i < c->n_embd / 32; i++)
        memcpy(&r->xd[i], &meta[4 * i], sizeof(float));
}

hydra_status gpu_check_moe_decode(const gpu_moe_check *c, const void *router, const void *gate, const void *up,
                                  const void *down, const float *ffn_gain, const float *next_gain, const float *x,
                                  gpu_moe_result *split, gpu_moe_result *one)
{
    moe_check_ctx m = {.c = c};
    if (c->n_used < 1 || c->n_used > GK_MOE_DECODE_MAX_USED || c->n_embd % 32 != 0 ||
        !row_bytes(c->router_type, c->n_embd, &m.rb_router) || !row_bytes(c->gate_type, c->n_embd, &m.rb_gate) ||
        !row_bytes(c->down_type, c->ff, &m.rb_down))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_moe_decode: %d of %d experts, n_embd %lld, ff %lld",
                          c->n_used, c->n_expert, (long long)c->n_embd, (long long)c->ff);
    gk_route *routes = malloc(sizeof *routes * 2 * (size_t)c->n_used);
    int32_t *meta = malloc(sizeof(int32_t) * 8 * (size_t)(c->n_embd / 32));
    if (routes == NULL || meta == NULL) {
        free(routes);
        free(meta);
        return hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_moe_decode: host scratch");
    }
    const size_t ne = (size_t)c->n_expert;
    gpu_check_buf b[MC_N] = {
        [MC_ROUTER] = {.in = router, .bytes = m.rb_router * ne},
        [MC_GATE] = {.in = gate, .bytes = m.rb_gate * (size_t)c->ff * ne},
        [MC_UP] = {.in = up, .bytes = m.rb_gate * (size_t)c->ff * ne},
        [MC_DOWN] = {.in = down, .bytes = m.rb_down * (size_t)c->n_embd * ne},
        [MC_FGAIN] = {.in = ffn_gain, .bytes = sizeof(float) * (size_t)c->n_embd},
        [MC_NGAIN] = {.in = next_gain, .bytes = sizeof(float) * (size_t)c->n_embd},
        [MC_CTR] = {.bytes = sizeof(unsigned int) * GK_COUNTERS},
        [MC_Y] = {.bytes = sizeof(float) * (size_t)c->n_used * (size_t)c->n_embd},
    };
    way_bufs(b + MC_SPLIT, c, x, split, routes, meta);
    way_bufs(b + MC_ONE, c, x, one, routes + c->n_used, meta + 4 * (c->n_embd / 32));
    gk_mat mats[4];
    mats_of(&m, b, mats); /* the shapes only: whether the one launch takes them */
    gk_moe_block blk;
    block_of(&m, b, mats, &blk);
    hydra_status st = gk_moe_decode_fits(&blk)
                          ? gpu_check_run(b, MC_N, launch_both, &m, "MoE block check")
                          : hydra_fail(HYDRA_ERR_UNSUPPORTED, "gk_moe_decode does not take this layer");
    if (st == HYDRA_OK) {
        way_results(c, routes, meta, split);
        way_results(c, routes + c->n_used, meta + 4 * (c->n_embd / 32), one);
    }
    free(routes);
    free(meta);
    return st;
}
