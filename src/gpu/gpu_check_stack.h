/*
 * gpu_check_stack.h — the stacked prefill launch (gk_matmul_multi,
 * kernels/cuda/mmq.cu) run once over host data for its parity test
 * (tests/test_cuda_stack.c): it copies its inputs to the device, launches
 * on the default stream, synchronises and copies the results back.
 * Without a device (or without CUDA=1) it fails with
 * HYDRA_ERR_UNSUPPORTED (stub in gpu_off.c).
 */
#ifndef HYDRA_GPU_CHECK_STACK_H
#define HYDRA_GPU_CHECK_STACK_H

#include "gpu.h"

enum { GPU_STACK_MAX = 3 };

/* One matrix of a stacked launch: n_rows rows of type, row_bytes apart,
 * from byte `offset` of the host buffer w (w_bytes long; a column half
 * starts inside its rows), reading activation columns x_col on. */
typedef struct gpu_stack_mat {
    uint32_t type;
    const void *w;
    size_t w_bytes, offset, row_bytes;
    int64_t n_rows, n_cols, x_col;
} gpu_stack_mat;

/* The n_mats (<= GPU_STACK_MAX) matrices over n_tok rows of x (x_n values
 * each) as one gk_matmul_multi launch (y_stack) and as one gk_matmul each
 * (y_each): matrix m's n_tok rows of n_rows outputs after those of the
 * matrices before it.  The two should hold the same bits. */
hydra_status gpu_check_matmul_stack(const gpu_stack_mat *m, int n_mats, const float *x, int64_t x_n, int n_tok,
                                    float *y_stack, float *y_each);

#endif
