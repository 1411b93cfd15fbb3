/*
 * gpu_check_route.h — one decode token's expert selection split between
 * the router launch (gk_router_logits) and the experts' gate/up launch
 * (gk_experts_glu_topk), run once over host data for its parity test
 * (tests/test_cuda_fused.c).  Without a device (or without CUDA=1) it
 * fails with HYDRA_ERR_UNSUPPORTED.  Implemented in gpu_check_route.c, stub
 * in gpu_off.c.
 */
#ifndef HYDRA_GPU_CHECK_ROUTE_H
#define HYDRA_GPU_CHECK_ROUTE_H

#include "gpu_check_fused.h"

/* What one run gives, each a host array of the size named: n_used routes
 * as experts (-2 where a route names another token than 0) and weights,
 * n_used rows of ff hidden values. */
typedef struct gpu_route_split_out {
    float *logits;                       /* n_expert: gk_router_logits */
    float *xn;                           /* n_cols: the norm it wrote */
    int32_t *experts;                    /* the gate/up launch's routes ... */
    float *weights;
    float *h;                            /* ... and its output */
    int32_t *experts_topk;               /* gk_moe_topk of the same logits ... */
    float *weights_topk;
    float *h_topk;                       /* ... and gk_matvec's GLU over those routes */
    int32_t *experts_fused;              /* gk_router_topk (the router + top-k launch) of x */
    float *weights_fused;
} gpu_route_split_out;

/* c: the router (one token, norm_gain required) as gpu_check_router_topk
 * takes it; gate and up: n_expert matrices each of ff rows of c->n_cols
 * values of the quantised expert_type, one after the other. */
hydra_status gpu_check_route_split(const gpu_router_check *c, uint32_t expert_type, int64_t ff, const void *w,
                                   const float *x, const void *gate, const void *up, const gpu_route_split_out *o);

#endif
