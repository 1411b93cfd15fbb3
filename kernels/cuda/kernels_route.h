/*
 * kernels_route.h — one decode token's expert selection split between the
 * router launch and the experts' gate/up launch (matvec.cu), in place of
 * gk_router_topk's router + top-k in one cluster launch:
 *
 *   gk_router_logits     the float router's logits of the RMSNorm of one
 *                        raw row, a block per expert, no top-k
 *   gk_experts_glu_topk  the routed experts' gate/up GLU whose blocks
 *                        each select their route from those logits
 *
 * docs/PERFORMANCE.md, "CUDA decode, session 8: the router".
 */
#ifndef HYDRA_CUDA_KERNELS_ROUTE_H
#define HYDRA_CUDA_KERNELS_ROUTE_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (one row of w->n_rows logits; not accumulate) = w . rmsnorm(x->f)
 * (+ out->bias): x->f is one raw row of x->n values (x->n % 32 == 0, <=
 * GK_ROUTER_NORM_MAX, = w->n_cols), w an F32/F16/BF16 router.  The norm
 * (norm's gain and eps, gk_rmsnorm's formulas) is also written to norm's y,
 * q, meta for the launches after it. */
int gk_router_logits(gpuStream_t s, const gk_mat *w, const gk_act *x, const gk_out *out, const gk_norm_out *norm);

/* One token's routed gate/up GLU (out row k = silu(gate_e . x) * (up_e .
 * x) for the expert e of rank k; x's 8-bit form) where the launch first
 * selects the token's gating->n_used experts from its logits (n_expert
 * floats) as gk_moe_topk does, and writes them to routes (token 0, rank
 * order) for the launches after it.  gate and up: one quantised type and
 * shape; n_used <= GK_TAIL_MAX_USED, n_used <= n_expert <=
 * GK_TAIL_MAX_EXPERTS. */
int gk_experts_glu_topk(gpuStream_t s, const gk_mat *gate, const gk_mat *up, const gk_act *x, const float *logits,
                        const gk_gating *gating, gk_route *routes, const gk_out *out);

#ifdef __cplusplus
}
#endif

#endif
