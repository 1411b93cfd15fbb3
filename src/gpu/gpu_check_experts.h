/*
 * gpu_check_experts.h — the one-launch experts of a decode token
 * (gk_experts) run over host data next to the two launches it replaces
 * (gk_matvec with up, then gk_matvec_staged), for the parity test
 * tests/test_cuda_experts.c.  Without a device (or without CUDA=1) it
 * fails with HYDRA_ERR_UNSUPPORTED; where the device or the shapes do not
 * take the one launch, with HYDRA_ERR_UNSUPPORTED too.  Implemented in
 * gpu_check_experts.c, stub in gpu_off.c.
 */
#ifndef HYDRA_GPU_CHECK_EXPERTS_H
#define HYDRA_GPU_CHECK_EXPERTS_H

#include "gpu.h"

/* n_expert gate and up matrices (ff rows of n_embd, type gu) and down
 * matrices (n_down rows of ff, type down), expert after expert; one token
 * x (n_embd); route r goes through expert experts[r] (-1: skipped). */
typedef struct gpu_experts_check {
    uint32_t gu, down;
    int64_t ff, n_embd, n_down;
    int n_expert, n_routes;
    const int32_t *experts;
} gpu_experts_check;

/* The down rows (n_routes x n_down) of the two launches (y_ref), of the
 * one launch (y) and of a second one launch (y_again), each over rows
 * first filled with NaN, so a row a launch leaves alone stays NaN. */
typedef struct gpu_experts_out {
    float *y_ref, *y, *y_again;
} gpu_experts_out;

hydra_status gpu_check_experts(const gpu_experts_check *c, const void *gate, const void *up, const void *down,
                               const float *x, const gpu_experts_out *out);

#endif
