/*
 * gpu_check_head.c — gk_matvec_head (kernels/cuda/matvec_head.cu) run
 * once over host data for its parity test (gpu_check_fused.h): the row is
 * quantised by gk_quantize_rows, as the output head's input is, then the
 * launch; gpu_check_run carves, copies, launches and copies back.
 */
#include "gpu_check_fused.h"

#include "gpu_internal.h"

#include "../quant.h"

enum { HD_W, HD_X, HD_Q, HD_META, HD_Y, HD_N };

typedef struct head_ctx {
    gk_mat w;
} head_ctx;

static int launch_head(const void *ctx, const gpu_check_buf *b)
{
    const head_ctx *c = ctx;
    gk_mat w = c->w;
    w.data = b[HD_W].dev;
    const gk_act x = {.f = b[HD_X].dev, .q = b[HD_Q].dev, .meta = b[HD_META].dev, .n = w.n_cols};
    const gk_out out = {.y = b[HD_Y].dev, .y_stride = w.n_rows};
    const int e = gk_quantize_rows(0, x.f, 1, w.n_cols, b[HD_Q].dev, b[HD_META].dev);
    return e == 0 ? gk_matvec_head(0, &w, &x, &out) : e;
}

hydra_status gpu_check_matvec_head(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                   float *y)
{
    uint64_t rb = 0;
    if (!quant_row_bytes(type, (uint64_t)n_cols, &rb) || n_rows < 1 || n_cols % 32 != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_matvec_head: %lld x %lld of type %u", (long long)n_rows,
                          (long long)n_cols, type);
    const head_ctx c = {.w = {.type = type, .n_rows = n_rows, .n_cols = n_cols, .row_bytes = (size_t)rb,
                              .mat_bytes = (size_t)rb * (size_t)n_rows}};
    gpu_check_buf b[HD_N] = {
        [HD_W] = {.in = w, .bytes = (size_t)rb * (size_t)n_rows},
        [HD_X] = {.in = x, .bytes = sizeof(float) * (size_t)n_cols},
        [HD_Q] = {.bytes = (size_t)n_cols},
        [HD_META] = {.bytes = 16 * (size_t)(n_cols / 32 + 1)},
        [HD_Y] = {.out = y, .bytes = sizeof(float) * (size_t)n_rows},
    };
    return gpu_check_run(b, HD_N, launch_head, &c, "output head matvec check");
}
