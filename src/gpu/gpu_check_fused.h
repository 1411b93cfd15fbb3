/*
 * gpu_check_fused.h — decode kernels that do in one launch what took
 * several, run once over host data for their parity tests
 * (tests/test_cuda_fused.c): each copies its inputs to the device, runs one
 * launcher on the default stream, synchronises and copies the results
 * back.  Without a device (or without CUDA=1) each fails with
 * HYDRA_ERR_UNSUPPORTED.  Implemented in gpu_check_fused.c, stubs in
 * gpu_off.c.
 */
#ifndef HYDRA_GPU_CHECK_FUSED_H
#define HYDRA_GPU_CHECK_FUSED_H

#include "gpu.h"

/* gk_router_topk: logits (n_tok rows of n_expert) of the float router w
 * (n_expert rows of n_cols, type F32/F16/BF16) over x, then each token's
 * n_used experts and weights (token-major, rank order) from the launch's
 * top-k tail. */
typedef struct gpu_router_check {
    uint32_t type;
    int n_expert, n_used;
    int64_t n_cols;
    int n_tok;
    bool sigmoid, renorm;
    float scale;
} gpu_router_check;
hydra_status gpu_check_router_topk(const gpu_router_check *c, const void *w, const float *x, float *logits,
                                   int32_t *experts, float *weights);

#endif
