/*
 * gpu_check_glu.h — the decode gate/up launch (gk_matvec with an up
 * matrix, routed) run once over host data, next to its unfused definition
 * (a gate launch, an up launch, then the SwiGLU activation launch), for
 * the parity test tests/test_cuda_glu.c.  Without a device (or without
 * CUDA=1) it fails with HYDRA_ERR_UNSUPPORTED.  Implemented in
 * gpu_check_glu.c, stub in gpu_off.c.
 */
#ifndef HYDRA_GPU_CHECK_GLU_H
#define HYDRA_GPU_CHECK_GLU_H

#include "gpu.h"

/* n_expert gate and up matrices (n_rows x n_cols of type each, expert
 * after expert); x: n_tok rows of n_cols; route r reads token tokens[r]
 * through expert experts[r] (-1: skipped, its row stays zero). */
typedef struct gpu_glu_pair_check {
    uint32_t type;
    int64_t n_rows, n_cols;
    int n_expert, n_tok, n_routes;
    const int32_t *tokens, *experts;
} gpu_glu_pair_check;

/* h_glu: the one-launch gate/up's n_routes rows of n_rows; h_ref: the
 * unfused launches' rows. */
hydra_status gpu_check_glu_pair(const gpu_glu_pair_check *c, const void *gate, const void *up, const float *x,
                                float *h_glu, float *h_ref);

#endif
