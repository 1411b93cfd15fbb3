/*
 * gpu_check_aor.h — the attention output + router launch
 * (kernels/cuda/attn_out_router.cu) and the two launches it replaces, run
 * once over the same host data for its parity test
 * (tests/test_cuda_aor.c).  Without a device (or without CUDA=1) it fails
 * with HYDRA_ERR_UNSUPPORTED.  Implemented in gpu_check_aor.c, the stub in
 * gpu_off.c.
 */
#ifndef HYDRA_GPU_CHECK_AOR_H
#define HYDRA_GPU_CHECK_AOR_H

#include "gpu.h"

/* One token's layer shapes: wo (n_embd rows of n_att, type wo_type), an
 * F32 router of n_expert rows of n_embd, the gating, the FFN norm's eps. */
typedef struct gpu_aor_check {
    uint32_t wo_type;
    int64_t n_embd, n_att;
    int n_expert, n_used;
    bool sigmoid, renorm;
    float scale, eps;
} gpu_aor_check;

/* The inputs: wo's blocks, the attention output row att (n_att), x
 * (n_embd), the router (n_expert x n_embd floats), the norm's gain
 * (n_embd), and the biases (NULL: none). */
typedef struct gpu_aor_in {
    const void *wo;
    const float *att, *x, *router, *gain, *wo_bias, *router_bias;
} gpu_aor_in;

/* What a way leaves: x (n_embd), logits (n_expert), the normed row xn
 * (n_embd), its 8-bit form q (n_embd) and meta (4 words per 32 values),
 * the routes' experts and weights (n_used, rank order; expert -2: the
 * route named another token). */
typedef struct gpu_aor_out {
    float *x, *logits, *xn;
    int8_t *q;
    int32_t *meta;
    int32_t *experts;
    float *weights;
} gpu_aor_out;

/* ref: gk_quantize_rows of att, gk_matvec of wo accumulating into x, then
 * gk_router_topk with the norm; fused: the same quantize, then
 * gk_attn_out_router.  *fits: whether gk_attn_out_router_fits took the
 * shapes (fused is not written when it did not). */
hydra_status gpu_check_attn_out_router(const gpu_aor_check *c, const gpu_aor_in *in, const gpu_aor_out *ref,
                                       const gpu_aor_out *fused, bool *fits);

#endif
