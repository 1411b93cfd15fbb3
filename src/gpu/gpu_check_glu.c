/*
 * gpu_check_glu.c — the decode gate/up launch against its unfused
 * definition over the same device data (gpu_check_glu.h): x quantised
 * once, then gk_matvec(gate, up) into one buffer, and gk_matvec(gate),
 * gk_matvec(up), gk_glu_act into another.
 */
#include "gpu_check_glu.h"

#include "gpu_internal.h"

#include "../../kernels/cuda/kernels_arch.h"

#include "../quant.h"

#include <stdlib.h>

enum { GP_GATE, GP_UP, GP_X, GP_Q, GP_META, GP_ROUTES, GP_G, GP_U, GP_GLU, GP_REF, GP_N };

typedef struct glu_pair_ctx {
    const gpu_glu_pair_check *c;
    size_t row_bytes;
} glu_pair_ctx;

static int launch_glu_pair(const void *ctx, const gpu_check_buf *b)
{
    const glu_pair_ctx *g = ctx;
    const gpu_glu_pair_check *c = g->c;
    const size_t mat = g->row_bytes * (size_t)c->n_rows;
    const gk_mat gate = {.data = b[GP_GATE].dev, .type = c->type, .n_rows = c->n_rows, .n_cols = c->n_cols,
                         .row_bytes = g->row_bytes, .mat_bytes = mat};
    gk_mat up = gate;
    up.data = b[GP_UP].dev;
    const gk_act x = {.f = b[GP_X].dev, .q = b[GP_Q].dev, .meta = b[GP_META].dev, .n = c->n_cols};
    const gk_rows rows = {.routes = b[GP_ROUTES].dev, .n_routes = c->n_routes, .act_by_token = true};
    const gk_out glu = {.y = b[GP_GLU].dev, .y_stride = c->n_rows}, og = {.y = b[GP_G].dev, .y_stride = c->n_rows},
                 ou = {.y = b[GP_U].dev, .y_stride = c->n_rows};
    const gk_glu act = {.gate = b[GP_G].dev, .up = b[GP_U].dev, .h = b[GP_REF].dev, .n_rows = c->n_routes,
                        .ff = c->n_rows};
    int e = gk_quantize_rows(0, b[GP_X].dev, c->n_tok, c->n_cols, b[GP_Q].dev, b[GP_META].dev);
    if (e == 0)
        e = gk_matvec(0, &gate, &up, &x, &rows, &glu);
    if (e == 0)
        e = gk_matvec(0, &gate, NULL, &x, &rows, &og);
    if (e == 0)
        e = gk_matvec(0, &up, NULL, &x, &rows, &ou);
    return e == 0 ? gk_glu_act(0, &act) : e;
}

hydra_status gpu_check_glu_pair(const gpu_glu_pair_check *c, const void *gate, const void *up, const float *x,
                                float *h_glu, float *h_ref)
{
    uint64_t rb = 0;
    if (!quant_row_bytes(c->type, (uint64_t)c->n_cols, &rb) || c->n_rows < 1 || c->n_tok < 1 || c->n_routes < 1 ||
        c->n_cols % 32 != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_glu_pair: %lld x %lld of type %u, %d routes",
                          (long long)c->n_rows, (long long)c->n_cols, c->type, c->n_routes);
    gk_route *routes = malloc(sizeof *routes * (size_t)c->n_routes);
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_glu_pair: %d routes", c->n_routes);
    for (int r = 0; r < c->n_routes; r++)
        routes[r] = (gk_route){.token = c->tokens[r], .expert = c->experts[r], .weight = 1.0f};
    const glu_pair_ctx g = {.c = c, .row_bytes = (size_t)rb};
    const size_t mats = (size_t)rb * (size_t)(c->n_rows * c->n_expert), nx = (size_t)(c->n_tok * c->n_cols);
    const size_t nh = sizeof(float) * (size_t)(c->n_routes * c->n_rows);
    gpu_check_buf b[GP_N] = {
        [GP_GATE] = {.in = gate, .bytes = mats},
        [GP_UP] = {.in = up, .bytes = mats},
        [GP_X] = {.in = x, .bytes = sizeof(float) * nx},
        [GP_Q] = {.bytes = nx},
        [GP_META] = {.bytes = 16 * (nx / 32)},
        [GP_ROUTES] = {.in = routes, .bytes = sizeof *routes * (size_t)c->n_routes},
        [GP_G] = {.bytes = nh},
        [GP_U] = {.bytes = nh},
        [GP_GLU] = {.out = h_glu, .bytes = nh},
        [GP_REF] = {.out = h_ref, .bytes = nh},
    };
    const hydra_status st = gpu_check_run(b, GP_N, launch_glu_pair, &g, "gate/up check");
    free(routes);
    return st;
}
