/*
 * gpu_check_moe.h — one decode token's experts down projection, combine
 * and next-layer norm run both ways over host data, for their parity test
 * (tests/test_cuda_moe_decode.c): gk_matvec_staged then gk_moe_combine
 * (the two-launch path) and gk_moe_down_combine (one launch).  Without a
 * device (or without CUDA=1) it fails with HYDRA_ERR_UNSUPPORTED.
 * Implemented in gpu_check_moe.c, the stub in gpu_off.c.
 */
#ifndef HYDRA_GPU_CHECK_MOE_H
#define HYDRA_GPU_CHECK_MOE_H

#include "gpu.h"

/* n_expert down matrices (n_embd rows of ff, down_type), stacked expert
 * after expert; the token's n_used routes (experts, weights: rank order)
 * and their hidden rows h (n_used x ff). */
typedef struct gpu_moe_check {
    uint32_t down_type;
    int n_expert, n_used;
    int64_t n_embd, ff;
    const int32_t *experts;
    const float *weights;
    float eps;
    const float *next_gain; /* NULL: no next norm */
} gpu_moe_check;

/* One way's results: x after the block (n_embd), and with next_gain the
 * next layer's input xn (n_embd) and its 8-bit form (xq bytes, xd the
 * per-32 scales). */
typedef struct gpu_moe_result {
    float *x, *xn, *xd;
    int8_t *xq;
} gpu_moe_result;

/* Fails with HYDRA_ERR_UNSUPPORTED where gk_moe_down_combine does not
 * take the shapes (gk_moe_down_combine_fits). */
hydra_status gpu_check_moe_down_combine(const gpu_moe_check *c, const void *down, const float *h, const float *x,
                                        gpu_moe_result *split, gpu_moe_result *one);

#endif
