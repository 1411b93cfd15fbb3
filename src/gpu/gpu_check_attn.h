/*
 * gpu_check_attn.h — the one-launch attention layer (attn_layer.cu) and
 * the three launches it replaces, run once over the same host data for
 * its parity test (tests/test_cuda_attn_layer.c).  Implemented in
 * gpu_check_attn.c; without a device (or without CUDA=1, gpu_off.c) it
 * fails with HYDRA_ERR_UNSUPPORTED.
 */
#ifndef HYDRA_GPU_CHECK_ATTN_H
#define HYDRA_GPU_CHECK_ATTN_H

#include "gpu.h"

/* One decode token of one layer: xn (n_embd, normed) through Q (n_head
 * heads of head_dim), K, V (n_head_kv heads; Q and K of type_q, V of
 * type_v), QK-norm (gains NULL: none), RoPE (n_rot, NEOX or normal) at
 * pos0, the cache store, attention over positions 0..pos0 (cache of
 * n_ctx rows, the launch's context bucket), then x += wo . out (wo of
 * type_o).  cache_init: n_ctx K rows then n_ctx V rows as the cache holds
 * them (F16 bits or floats), or NULL: zeros. */
typedef struct gpu_attn_layer_check {
    int n_embd, n_head, n_head_kv, head_dim, n_rot, pos0, n_ctx;
    uint32_t type_q, type_v, type_o;
    bool neox, kv_f16;
    float eps, theta_base;
    const float *q_norm, *k_norm;
    const void *cache_init;
    bool qkv; /* the one launch computes Q/K/V too (else gk_matvec before it, as the check's reference) */
} gpu_attn_layer_check;

/* Both ways from the same inputs (w: Q, K, V, output weights as rows of
 * their types; x_init: the residual row): the three launches
 * (gk_matvec per matrix, gk_attention_rope, gk_matvec adding into x) give
 * x_ref and att_ref (the attention output, n_head * head_dim), the one
 * launch (gk_attn_layer_run, with qkv: from xn; without: after the same
 * Q/K/V launches) x_fused and att_fused; *same_cache: whether
 * they left the same cache bits. */
hydra_status gpu_check_attn_layer(const gpu_attn_layer_check *c, const void *const w[4], const float *xn,
                                  const float *x_init, float *x_ref, float *x_fused, float *att_ref,
                                  float *att_fused, bool *same_cache);

#endif
