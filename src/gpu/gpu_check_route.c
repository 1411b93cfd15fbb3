/*
 * gpu_check_route.c — the split expert selection run once over host data
 * for its parity test (gpu_check_route.h): the two launches of the decode
 * path, then, in the same run, gk_moe_topk + gk_matvec over the same
 * logits and gk_router_topk over the same row, which the test compares.
 */
#include "gpu_check_route.h"

#include "gpu_internal.h"

#include "../../kernels/cuda/kernels_route.h"
#include "../quant.h"

#include <stdlib.h>

enum {
    RS_W, RS_X, RS_GAIN, RS_GATE, RS_UP, RS_LOGITS, RS_XN, RS_XQ, RS_XMETA, RS_ROUTES, RS_H, RS_ROUTES_TOPK,
    RS_H_TOPK, RS_LOGITS_FUSED, RS_ROUTES_FUSED, RS_COUNTER, RS_XN_FUSED, RS_XQ_FUSED, RS_XMETA_FUSED, RS_N
};

typedef struct split_ctx {
    const gpu_router_check *c;
    gk_mat w, gate, up;
    int64_t ff;
} split_ctx;

static gk_norm_out norm_into(const split_ctx *s, const gpu_check_buf *b, int xn)
{
    return (gk_norm_out){.gain = b[RS_GAIN].dev, .eps = s->c->eps, .y = b[xn].dev, .q = b[xn + 1].dev,
                         .meta = b[xn + 2].dev};
}

static int launch_split(const void *ctx, const gpu_check_buf *b)
{
    const split_ctx *s = ctx;
    const gpu_router_check *c = s->c;
    gk_mat w = s->w, gate = s->gate, up = s->up;
    w.data = b[RS_W].dev, gate.data = b[RS_GATE].dev, up.data = b[RS_UP].dev;
    const gk_gating gating = {.n_expert = c->n_expert, .n_used = c->n_used, .sigmoid = c->sigmoid,
                              .renorm = c->renorm, .scale = c->scale};
    const gk_act raw = {.f = b[RS_X].dev, .n = c->n_cols};
    const gk_act xa = {.f = b[RS_XN].dev, .q = b[RS_XQ].dev, .meta = b[RS_XMETA].dev, .n = c->n_cols};
    const gk_norm_out norm = norm_into(s, b, RS_XN), norm_fused = norm_into(s, b, RS_XN_FUSED);
    const gk_out logits = {.y = b[RS_LOGITS].dev, .y_stride = c->n_expert};
    const gk_out h = {.y = b[RS_H].dev, .y_stride = s->ff}, h_topk = {.y = b[RS_H_TOPK].dev, .y_stride = s->ff};
    const gk_rows by_token = {.routes = b[RS_ROUTES_TOPK].dev, .n_routes = c->n_used, .act_by_token = true};
    const gk_out logits_fused = {.y = b[RS_LOGITS_FUSED].dev, .y_stride = c->n_expert};
    const gk_tail tail = {.counter = b[RS_COUNTER].dev, .gating = gating, .routes = b[RS_ROUTES_FUSED].dev};
    int e = gk_router_logits(0, &w, &raw, &logits, &norm);
    if (e == 0)
        e = gk_experts_glu_topk(0, &gate, &up, &xa, b[RS_LOGITS].dev, &gating, b[RS_ROUTES].dev, &h);
    if (e == 0)
        e = gk_moe_topk(0, &gating, b[RS_LOGITS].dev, 1, b[RS_ROUTES_TOPK].dev);
    if (e == 0)
        e = gk_matvec(0, &gate, &up, &xa, &by_token, &h_topk);
    return e == 0 ? gk_router_topk(0, &w, &raw, 1, &logits_fused, &tail, &norm_fused) : e;
}

static gk_mat mat_of(uint32_t type, int64_t n_rows, int64_t n_cols, int n_mats, size_t *bytes)
{
    uint64_t rb = 0;
    quant_row_bytes(type, (uint64_t)n_cols, &rb);
    *bytes = (size_t)rb * (size_t)n_rows * (size_t)n_mats;
    return (gk_mat){.type = type, .n_rows = n_rows, .n_cols = n_cols, .row_bytes = (size_t)rb,
                    .mat_bytes = (size_t)rb * (size_t)n_rows};
}

/* experts / weights of n routes; -2 for a route of another token. */
static void routes_out(const gk_route *r, int n, int32_t *experts, float *weights)
{
    for (int k = 0; k < n; k++) {
        experts[k] = r[k].token == 0 ? r[k].expert : -2;
        weights[k] = r[k].weight;
    }
}

hydra_status gpu_check_route_split(const gpu_router_check *c, uint32_t expert_type, int64_t ff, const void *w,
                                   const float *x, const void *gate, const void *up, const gpu_route_split_out *o)
{
    uint64_t rb = 0;
    if (c->n_tok != 1 || c->norm_gain == NULL || c->n_used < 1 || c->n_used > c->n_expert || ff < 1 ||
        !quant_row_bytes(c->type, (uint64_t)c->n_cols, &rb) ||
        !quant_row_bytes(expert_type, (uint64_t)c->n_cols, &rb))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_route_split: %d of %d experts, %lld columns",
                          c->n_used, c->n_expert, (long long)c->n_cols);
    split_ctx s = {.c = c, .ff = ff};
    size_t w_bytes = 0, e_bytes = 0;
    s.w = mat_of(c->type, c->n_expert, c->n_cols, 1, &w_bytes);
    s.gate = s.up = mat_of(expert_type, ff, c->n_cols, c->n_expert, &e_bytes);
    gk_route *routes = malloc(3 * sizeof *routes * (size_t)c->n_used);
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_route_split: %d routes", c->n_used);
    const size_t fx = sizeof(float) * (size_t)c->n_cols, fh = sizeof(float) * (size_t)(ff * c->n_used);
    const size_t meta = 16 * (size_t)(c->n_cols / 32 + 1), rs = sizeof *routes * (size_t)c->n_used;
    gpu_check_buf b[RS_N] = {
        [RS_W] = {.in = w, .bytes = w_bytes},
        [RS_X] = {.in = x, .bytes = fx},
        [RS_GAIN] = {.in = c->norm_gain, .bytes = fx},
        [RS_GATE] = {.in = gate, .bytes = e_bytes},
        [RS_UP] = {.in = up, .bytes = e_bytes},
        [RS_LOGITS] = {.out = o->logits, .bytes = sizeof(float) * (size_t)c->n_expert},
        [RS_XN] = {.out = o->xn, .bytes = fx},
        [RS_XQ] = {.bytes = (size_t)c->n_cols},
        [RS_XMETA] = {.bytes = meta},
        [RS_ROUTES] = {.out = routes, .bytes = rs},
        [RS_H] = {.out = o->h, .bytes = fh},
        [RS_ROUTES_TOPK] = {.out = routes + c->n_used, .bytes = rs},
        [RS_H_TOPK] = {.out = o->h_topk, .bytes = fh},
        [RS_LOGITS_FUSED] = {.bytes = sizeof(float) * (size_t)c->n_expert},
        [RS_ROUTES_FUSED] = {.out = routes + 2 * c->n_used, .bytes = rs},
        [RS_COUNTER] = {.bytes = sizeof(unsigned int)},
        [RS_XN_FUSED] = {.bytes = fx},
        [RS_XQ_FUSED] = {.bytes = (size_t)c->n_cols},
        [RS_XMETA_FUSED] = {.bytes = meta},
    };
    const hydra_status st = gpu_check_run(b, RS_N, launch_split, &s, "split router + top-k check");
    if (st == HYDRA_OK) {
        routes_out(routes, c->n_used, o->experts, o->weights);
        routes_out(routes + c->n_used, c->n_used, o->experts_topk, o->weights_topk);
        routes_out(routes + 2 * c->n_used, c->n_used, o->experts_fused, o->weights_fused);
    }
    free(routes);
    return st;
}
