/*
 * gpu_check.c — single launches over host data, for the op-level parity
 * tests (tests/test_cuda_ops.c): copy in, run one launcher, copy out.
 */
#include "gpu_internal.h"

#include "../quant.h"

#include <stdlib.h>
#include <string.h>

typedef struct check_bufs {
    uint8_t *w;
    float *x, *y;
    int8_t *q;
    int32_t *meta;
    uint16_t *h;
} check_bufs;

static hydra_status run_linear(const check_bufs *d, const gk_mat *w, int n_tok, bool matmul)
{
    const gk_act x = {.f = d->x, .q = d->q, .meta = d->meta, .n = w->n_cols, .h = d->h};
    const gk_out out = {.y = d->y, .y_stride = w->n_rows};
    /* quantised weights: the matvec reads the 8-bit activations (made in
     * the matmul case too, for the caller's check of the rule), the matmul
     * their f16 form */
    const bool q8 = w->type != QT_F32 && w->type != QT_F16 && w->type != QT_BF16;
    int e = q8 ? gk_quantize_rows(0, d->x, n_tok, w->n_cols, d->q, d->meta) : 0;
    if (e == 0 && q8 && matmul)
        e = gk_rows_to_f16(0, d->x, n_tok, w->n_cols, d->h);
    const gk_rows rows = {.n_tok = n_tok};
    if (e == 0)
        e = matmul ? gk_matmul(0, w, &x, n_tok, &out) : gk_matvec(0, w, NULL, &x, &rows, &out);
    if (e == 0)
        e = gpuDeviceSynchronize();
    return e == 0 ? HYDRA_OK : gpu_fail((gpuError_t)e, "checked launch");
}

hydra_status gpu_check_linear(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                              int n_tok, bool matmul, float *y, int8_t *xq, float *xd)
{
    if (!gpu_available(NULL))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "no CUDA device");
    uint64_t row_bytes = 0;
    if (!quant_row_bytes(type, (uint64_t)n_cols, &row_bytes) || (!matmul && n_tok > GK_MATVEC_MAX_TOK))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_linear: %lld columns of type %u, %d tokens",
                          (long long)n_cols, type, n_tok);
    const size_t w_bytes = (size_t)row_bytes * (size_t)n_rows, nx = (size_t)n_tok * (size_t)n_cols;
    check_bufs d;
    carve c = {0};
    CARVE(&c, d.w, w_bytes);
    CARVE(&c, d.x, sizeof(float) * nx);
    CARVE(&c, d.y, sizeof(float) * (size_t)n_tok * (size_t)n_rows);
    CARVE(&c, d.q, nx);
    CARVE(&c, d.meta, 16 * (nx / 32 + 1));
    CARVE(&c, d.h, 2 * nx);
    void *base = NULL;
    hydra_status st = carve_alloc(&c, GPU_MEM_SCRATCH, &base, "linear check");
    if (st != HYDRA_OK)
        return st;
    const gk_mat m = {.data = d.w, .type = type, .n_rows = n_rows, .n_cols = n_cols, .row_bytes = (size_t)row_bytes,
                      .mat_bytes = w_bytes};
    gpuError_t e = gpuMemcpy(d.w, w, w_bytes, gpuMemcpyHostToDevice);
    if (e == gpuSuccess)
        e = gpuMemcpy(d.x, x, sizeof(float) * nx, gpuMemcpyHostToDevice);
    st = e == gpuSuccess ? run_linear(&d, &m, n_tok, matmul) : gpu_fail(e, "copying check inputs");
    if (st == HYDRA_OK)
        e = gpuMemcpy(y, d.y, sizeof(float) * (size_t)n_tok * (size_t)n_rows, gpuMemcpyDeviceToHost);
    if (st == HYDRA_OK && e == gpuSuccess && xq != NULL)
        e = gpuMemcpy(xq, d.q, nx, gpuMemcpyDeviceToHost);
    int32_t *meta = xd != NULL ? malloc(16 * (nx / 32)) : NULL;
    if (st == HYDRA_OK && e == gpuSuccess && meta != NULL) {
        e = gpuMemcpy(meta, d.meta, 16 * (nx / 32), gpuMemcpyDeviceToHost);
        for (size_t i = 0; i < nx / 32; i++)
            memcpy(&xd[i], &meta[4 * i], sizeof(float));
    }
    free(meta);
    if (st == HYDRA_OK && e != gpuSuccess)
        st = gpu_fail(e, "copying check results");
    gpu_mem_free(GPU_MEM_SCRATCH, base, c.total);
    return st;
}

hydra_status gpu_check_dequant(uint32_t type, const void *rows, int64_t n_rows, int64_t n_cols, float *out)
{
    if (!gpu_available(NULL))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "no CUDA device");
    uint64_t row_bytes = 0;
    if (!quant_row_bytes(type, (uint64_t)n_cols, &row_bytes) || n_rows < 1 || n_rows > INT32_MAX)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_dequant: %lld rows of %lld columns of type %u",
                          (long long)n_rows, (long long)n_cols, type);
    const size_t w_bytes = (size_t)row_bytes * (size_t)n_rows, n_out = (size_t)n_rows * (size_t)n_cols;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_rows);
    uint8_t *d_rows = NULL;
    int32_t *d_ids = NULL;
    float *d_out = NULL;
    carve c = {0};
    CARVE(&c, d_rows, w_bytes);
    CARVE(&c, d_ids, sizeof(int32_t) * (size_t)n_rows);
    CARVE(&c, d_out, sizeof(float) * n_out);
    void *base = NULL;
    hydra_status st = ids != NULL ? carve_alloc(&c, GPU_MEM_SCRATCH, &base, "dequant check")
                                  : hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_dequant: %lld row ids", (long long)n_rows);
    if (st != HYDRA_OK) {
        free(ids);
        return st;
    }
    for (int64_t r = 0; r < n_rows; r++)
        ids[r] = (int32_t)r;
    const gk_mat m = {.data = d_rows, .type = type, .n_rows = n_rows, .n_cols = n_cols, .row_bytes = (size_t)row_bytes,
                      .mat_bytes = w_bytes};
    int e = gpuMemcpy(d_rows, rows, w_bytes, gpuMemcpyHostToDevice);
    if (e == 0)
        e = gpuMemcpy(d_ids, ids, sizeof(int32_t) * (size_t)n_rows, gpuMemcpyHostToDevice);
    if (e == 0)
        e = gk_embed(0, &m, d_ids, (int)n_rows, d_out);
    if (e == 0)
        e = gpuMemcpy(out, d_out, sizeof(float) * n_out, gpuMemcpyDeviceToHost);
    st = e == 0 ? HYDRA_OK : gpu_fail((gpuError_t)e, "dequant check");
    gpu_mem_free(GPU_MEM_SCRATCH, base, c.total);
    free(ids);
    return st;
}

bool gpu_host_decode_chunk(uint32_t type, const void *row, int c, float out[32])
{
    return gk_host_decode_chunk(type, row, c, out);
}

bool gpu_host_chunk_dot(uint32_t type, const void *row, int c, const int8_t a[32], float *out)
{
    return gk_host_chunk_dot(type, row, c, a, out);
}
