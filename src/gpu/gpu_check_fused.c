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

enum { RT_W, RT_X, RT_LOGITS, RT_ROUTES, RT_COUNTER, RT_N };

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
    return gk_router_topk(0, &w, &x, c->n_tok, &out, &tail);
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
    };
    const hydra_status st = gpu_check_run(b, RT_N, launch_router, c, "router + top-k check");
    for (int r = 0; st == HYDRA_OK && r < n_routes; r++) {
        experts[r] = routes[r].token == r / c->n_used ? routes[r].expert : -2; /* -2: wrong token */
        weights[r] = routes[r].weight;
    }
    free(routes);
    return st;
}
