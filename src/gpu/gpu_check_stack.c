/*
 * gpu_check_stack.c — gk_matmul_multi against gk_matmul over host data
 * (gpu_check_stack.h); gpu_check_run carves, copies, launches and copies
 * back.
 */
#include "gpu_check_stack.h"

#include "gpu_internal.h"

enum { SK_W, SK_X = SK_W + GPU_STACK_MAX, SK_H, SK_YS, SK_YE, SK_N };

typedef struct stack_ctx {
    const gpu_stack_mat *m;
    int n_mats, n_tok;
    int64_t x_n;
} stack_ctx;

static int launch_stack(const void *ctx, const gpu_check_buf *b)
{
    const stack_ctx *c = ctx;
    gk_mat w[GPU_STACK_MAX];
    const gk_mat *wp[GPU_STACK_MAX];
    gk_out stack[GPU_STACK_MAX], each[GPU_STACK_MAX];
    int64_t x_col[GPU_STACK_MAX], off = 0;
    for (int i = 0; i < c->n_mats; i++) {
        const gpu_stack_mat *m = &c->m[i];
        w[i] = (gk_mat){.data = (const uint8_t *)b[SK_W + i].dev + m->offset, .type = m->type, .n_rows = m->n_rows,
                        .n_cols = m->n_cols, .row_bytes = m->row_bytes, .mat_bytes = m->row_bytes * (size_t)m->n_rows};
        wp[i] = &w[i];
        stack[i] = (gk_out){.y = (float *)b[SK_YS].dev + off, .y_stride = m->n_rows};
        each[i] = (gk_out){.y = (float *)b[SK_YE].dev + off, .y_stride = m->n_rows};
        x_col[i] = m->x_col;
        off += m->n_rows * c->n_tok;
    }
    const gk_act x = {.f = b[SK_X].dev, .n = c->x_n, .h = b[SK_H].dev};
    int e = gk_rows_to_f16(0, x.f, c->n_tok, c->x_n, b[SK_H].dev);
    if (e == 0)
        e = gk_matmul_multi(0, wp, stack, c->n_mats, &x, x_col, c->n_tok);
    for (int i = 0; i < c->n_mats && e == 0; i++) {
        const gk_act xi = {.f = x.f + x_col[i], .n = c->x_n, .h = x.h + x_col[i]};
        e = gk_matmul(0, &w[i], &xi, c->n_tok, &each[i]);
    }
    return e;
}

hydra_status gpu_check_matmul_stack(const gpu_stack_mat *m, int n_mats, const float *x, int64_t x_n, int n_tok,
                                    float *y_stack, float *y_each)
{
    if (n_mats < 1 || n_mats > GPU_STACK_MAX || n_tok < 1 || x_n % 4 != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_matmul_stack: %d matrices, %d tokens of %lld", n_mats,
                          n_tok, (long long)x_n);
    const gk_mat *wp[GPU_STACK_MAX];
    gk_mat w[GPU_STACK_MAX];
    size_t y_floats = 0;
    gpu_check_buf b[SK_N] = {{0}};
    for (int i = 0; i < n_mats; i++) {
        if (m[i].x_col + m[i].n_cols > x_n || m[i].offset + m[i].row_bytes * (size_t)(m[i].n_rows - 1) > m[i].w_bytes)
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_matmul_stack: matrix %d outside its buffers", i);
        w[i] = (gk_mat){.type = m[i].type, .n_rows = m[i].n_rows, .n_cols = m[i].n_cols, .row_bytes = m[i].row_bytes};
        wp[i] = &w[i];
        b[SK_W + i] = (gpu_check_buf){.in = m[i].w, .bytes = m[i].w_bytes};
        y_floats += (size_t)(m[i].n_rows * n_tok);
    }
    if (!gk_matmul_stacks(wp, n_mats))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "gpu_check_matmul_stack: the stacked launch does not take these");
    for (int i = n_mats; i < GPU_STACK_MAX; i++)
        b[SK_W + i] = (gpu_check_buf){.bytes = 16};
    b[SK_X] = (gpu_check_buf){.in = x, .bytes = sizeof(float) * (size_t)(x_n * n_tok)};
    b[SK_H] = (gpu_check_buf){.bytes = 2 * (size_t)(x_n * n_tok)};
    b[SK_YS] = (gpu_check_buf){.out = y_stack, .bytes = sizeof(float) * y_floats};
    b[SK_YE] = (gpu_check_buf){.out = y_each, .bytes = sizeof(float) * y_floats};
    const stack_ctx c = {.m = m, .n_mats = n_mats, .n_tok = n_tok, .x_n = x_n};
    return gpu_check_run(b, SK_N, launch_stack, &c, "stacked matmul check");
}
