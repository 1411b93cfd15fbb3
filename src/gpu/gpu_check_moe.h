/*
 * gpu_check_moe.h — one decode token's MoE block run both ways over host
 * data, for its parity test (tests/test_cuda_moe_decode.c): the 4-launch
 * path (gk_router_topk with the FFN norm, the routed gate/up GLU matvec,
 * the staged down matvec, gk_moe_combine with the next layer's norm) and
 * gk_moe_decode, the whole block in one launch.  Without a device (or
 * without CUDA=1) it fails with HYDRA_ERR_UNSUPPORTED.  Implemented in
 * gpu_check_moe.c, the stub in gpu_off.c.
 */
#ifndef HYDRA_GPU_CHECK_MOE_H
#define HYDRA_GPU_CHECK_MOE_H

#include "gpu.h"

/* A layer: a float router (n_expert rows of n_embd), n_expert gate and up
 * matrices (ff rows of n_embd, gate_type) and down matrices (n_embd rows
 * of ff, down_type), stacked expert after expert. */
typedef struct gpu_moe_check {
    uint32_t router_type, gate_type, down_type;
    int n_expert, n_used;
    int64_t n_embd, ff;
    bool sigmoid, renorm;
    float scale, eps;
    bool next_norm; /* the combine also norms x for the next layer (next_gain) */
} gpu_moe_check;

/* One way's results: routes (n_used experts and weights, rank order),
 * the expert hidden rows h (n_used x ff), x after the block (n_embd),
 * and with next_norm the next layer's input xn (n_embd) and its 8-bit
 * form (xq bytes, xd the per-32 scales). */
typedef struct gpu_moe_result {
    int32_t *experts;
    float *weights, *h, *x, *xn, *xd;
    int8_t *xq;
} gpu_moe_result;

/* Fails with HYDRA_ERR_UNSUPPORTED where gk_moe_decode does not take the
 * layer (gk_moe_decode_fits). */
hydra_status gpu_check_moe_decode(const gpu_moe_check *c, const void *router, const void *gate, const void *up,
                                  const void *down, const float *ffn_gain, const float *next_gain, const float *x,
                                  gpu_moe_result *split, gpu_moe_result *one);

#endif
