/*
 * gpu_check_experts.c — gk_experts against its two launches over the same
 * device data (gpu_check_experts.h): x quantised once, then the gate/up
 * launch into h and the staged down launch over it into y_ref, then the
 * one launch into y and again into y_again (its route barriers as the
 * first launch left them, as every later decode step finds them).
 */
#include "gpu_check_experts.h"

#include "gpu_internal.h"

#include "../../kernels/cuda/kernels_arch.h"

#include "../quant.h"

#include <math.h>
#include <stdlib.h>

enum { EX_GATE, EX_UP, EX_DOWN, EX_X, EX_Q, EX_META, EX_ROUTES, EX_H, EX_H1, EX_SYNC, EX_YREF, EX_Y, EX_Y2, EX_N };

typedef struct experts_ctx {
    const gpu_experts_check *c;
    size_t gu_bytes, down_bytes;
} experts_ctx;

static gk_mat ex_mat(const void *data, uint32_t type, int64_t n_rows, int64_t n_cols, size_t row_bytes)
{
    return (gk_mat){.data = data, .type = type, .n_rows = n_rows, .n_cols = n_cols, .row_bytes = row_bytes,
                    .mat_bytes = row_bytes * (size_t)n_rows};
}

static int launch_experts(const void *ctx, const gpu_check_buf *b)
{
    const experts_ctx *k = ctx;
    const gpu_experts_check *c = k->c;
    const gk_mat gate = ex_mat(b[EX_GATE].dev, c->gu, c->ff, c->n_embd, k->gu_bytes),
                 up = ex_mat(b[EX_UP].dev, c->gu, c->ff, c->n_embd, k->gu_bytes),
                 down = ex_mat(b[EX_DOWN].dev, c->down, c->n_down, c->ff, k->down_bytes);
    const gk_act x = {.f = b[EX_X].dev, .q = b[EX_Q].dev, .meta = b[EX_META].dev, .n = c->n_embd};
    const gk_rows by_token = {.routes = b[EX_ROUTES].dev, .n_routes = c->n_routes, .act_by_token = true};
    const gk_rows by_route = {.routes = b[EX_ROUTES].dev, .n_routes = c->n_routes};
    const gk_out oh = {.y = b[EX_H].dev, .y_stride = c->ff}, oy = {.y = b[EX_YREF].dev, .y_stride = c->n_down};
    const gk_act ha = {.f = b[EX_H].dev, .n = c->ff};
    gk_experts_job e = {.gate = gate, .up = up, .down = down, .x = x, .rows = by_token,
                        .out = {.y = b[EX_Y].dev, .y_stride = c->n_down}, .h = b[EX_H1].dev, .sync = b[EX_SYNC].dev};
    int err = gk_quantize_rows(0, b[EX_X].dev, 1, c->n_embd, b[EX_Q].dev, b[EX_META].dev);
    if (err == 0)
        err = gk_matvec(0, &gate, &up, &x, &by_token, &oh);
    if (err == 0)
        err = gk_matvec_staged(0, &down, &ha, &by_route, &oy);
    if (err == 0)
        err = gk_experts(0, &e);
    e.out.y = b[EX_Y2].dev;
    return err == 0 ? gk_experts(0, &e) : err;
}

/* Whether the current device takes the one launch for these shapes (the
 * question needs no data: matrices at an aligned placeholder address). */
static bool ex_taken(const gpu_experts_check *c, size_t gb, size_t db)
{
    const uint8_t *at = (const uint8_t *)(uintptr_t)256;
    const gk_mat gate = ex_mat(at, c->gu, c->ff, c->n_embd, gb), down = ex_mat(at, c->down, c->n_down, c->ff, db);
    return gpu_available(NULL) && gk_experts_fits(&gate, &gate, &down, c->n_routes);
}

hydra_status gpu_check_experts(const gpu_experts_check *c, const void *gate, const void *up, const void *down,
                               const float *x, const gpu_experts_out *out)
{
    uint64_t gb = 0, db = 0;
    if (!quant_row_bytes(c->gu, (uint64_t)c->n_embd, &gb) || !quant_row_bytes(c->down, (uint64_t)c->ff, &db) ||
        c->n_routes < 1 || c->n_expert < 1)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_experts: ff %lld, n_embd %lld, types %u/%u",
                          (long long)c->ff, (long long)c->n_embd, c->gu, c->down);
    if (!ex_taken(c, (size_t)gb, (size_t)db))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "the device does not take one launch for ff %lld, n_embd %lld",
                          (long long)c->ff, (long long)c->n_embd);
    const size_t ny = (size_t)c->n_routes * (size_t)c->n_down;
    gk_route *routes = malloc(sizeof *routes * (size_t)c->n_routes);
    float *nan_rows = malloc(sizeof(float) * ny);
    if (routes == NULL || nan_rows == NULL) {
        free(routes);
        free(nan_rows);
        return hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_experts: %d routes", c->n_routes);
    }
    for (int r = 0; r < c->n_routes; r++)
        routes[r] = (gk_route){.token = 0, .expert = c->experts[r], .weight = 1.0f};
    for (size_t i = 0; i < ny; i++)
        nan_rows[i] = NAN;
    const experts_ctx k = {.c = c, .gu_bytes = (size_t)gb, .down_bytes = (size_t)db};
    const size_t ne = (size_t)c->n_expert, nx = (size_t)c->n_embd;
    gpu_check_buf b[EX_N] = {
        [EX_GATE] = {.in = gate, .bytes = (size_t)gb * (size_t)c->ff * ne},
        [EX_UP] = {.in = up, .bytes = (size_t)gb * (size_t)c->ff * ne},
        [EX_DOWN] = {.in = down, .bytes = (size_t)db * (size_t)c->n_down * ne},
        [EX_X] = {.in = x, .bytes = sizeof(float) * nx},
        [EX_Q] = {.bytes = nx},
        [EX_META] = {.bytes = 16 * (nx / 32)},
        [EX_ROUTES] = {.in = routes, .bytes = sizeof *routes * (size_t)c->n_routes},
        [EX_H] = {.bytes = sizeof(float) * (size_t)c->n_routes * (size_t)c->ff},
        [EX_H1] = {.bytes = sizeof(float) * (size_t)c->n_routes * (size_t)c->ff},
        [EX_SYNC] = {.bytes = sizeof(unsigned int) * GK_EXPERTS_SYNC_WORDS},
        [EX_YREF] = {.in = nan_rows, .out = out->y_ref, .bytes = sizeof(float) * ny},
        [EX_Y] = {.in = nan_rows, .out = out->y, .bytes = sizeof(float) * ny},
        [EX_Y2] = {.in = nan_rows, .out = out->y_again, .bytes = sizeof(float) * ny},
    };
    const hydra_status st = gpu_check_run(b, EX_N, launch_experts, &k, "one-launch experts check");
    free(routes);
    free(nan_rows);
    return st;
}
