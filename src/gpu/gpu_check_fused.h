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
 * top-k tail.  With norm_gain (one token): over the RMSNorm of x (gain
 * norm_gain, eps), which the launch computes itself. */
typedef struct gpu_router_check {
    uint32_t type;
    int n_expert, n_used;
    int64_t n_cols;
    int n_tok;
    bool sigmoid, renorm;
    float scale;
    const float *norm_gain;
    float eps;
} gpu_router_check;
hydra_status gpu_check_router_topk(const gpu_router_check *c, const void *w, const float *x, float *logits,
                                   int32_t *experts, float *weights);

/* gk_matvec_staged of one activation row x (n_cols) through the quantised
 * matrix w (n_rows rows of type): y (n_rows), which should equal, bit for
 * bit, gk_quantize_rows then gk_matvec (gpu_check_linear). */
hydra_status gpu_check_matvec_staged(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                     float *y);

/* gk_matvec_head (the output projection's kernel) of one activation row x
 * (n_cols) through the quantised matrix w (n_rows rows of type): y
 * (n_rows), which should equal, bit for bit, gpu_check_linear (gpu_check_head.c). */
hydra_status gpu_check_matvec_head(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                   float *y);

/* The head with the output norm folded in: y = gk_matvec_head given the
 * raw row x and the norm (gain, eps), which should equal, bit for bit,
 * y_ref = gk_rmsnorm then gk_matvec, computed in the same run. */
hydra_status gpu_check_head_norm(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                 const float *gain, float eps, float *y, float *y_ref);

/* gk_embed_norm of n_tok tokens through table (n_rows rows of n_cols of
 * type) with the norm (gain, eps) into fused, and gk_embed then
 * gk_rmsnorm into ref, in the same run: x and y (n_tok * n_cols floats),
 * q (n_tok * n_cols bytes) and meta (4 words per 32 values). */
typedef struct gpu_embed_norm_out {
    float *x, *y;
    int8_t *q;
    int32_t *meta;
} gpu_embed_norm_out;
hydra_status gpu_check_embed_norm(uint32_t type, const void *table, int64_t n_rows, int64_t n_cols,
                                  const int32_t *tokens, int n_tok, const float *gain, float eps,
                                  const gpu_embed_norm_out *ref, const gpu_embed_norm_out *fused);

/* Three matrices (Q, K, V; the first two of one type, the last of type
 * last, as gk_matvec_mixed allows) over one activation row x (n_cols) in
 * one gk_matvec_multi launch: y (the three outputs one after the other),
 * which should equal, bit for bit, gpu_check_linear of each. */
hydra_status gpu_check_matvec_mixed(uint32_t type, uint32_t last, const void *const w[3], const int64_t n_rows[3],
                                    int64_t n_cols, const float *x, float *y);

/* One decode token's QK-norm, RoPE, cache store and attention both ways:
 * gk_rope_store then gk_attention (ref), and gk_attention_rope writing
 * the output's 8-bit form too (fused).  q: n_head heads, k: n_head_kv
 * heads, v: n_head_kv heads (head_dim each); the cache (F32 rows before
 * pos0 from cache_init: n_ctx rows of K then n_ctx rows of V, or zeros;
 * F16: zeros) gets the token's rows at pos0.  *same_cache: whether the two
 * ways left the same cache bits. */
typedef struct gpu_rope_attn_check {
    int n_head, n_head_kv, head_dim, n_rot, pos0, n_ctx;
    bool neox, kv_f16;
    float eps, theta_base;
    const float *q_norm, *k_norm; /* head_dim gains, NULL: none */
    const float *cache_init;      /* F32 only, may be NULL */
} gpu_rope_attn_check;
hydra_status gpu_check_rope_attention(const gpu_rope_attn_check *c, const float *q, const float *k, const float *v,
                                      float *out_ref, float *out_fused, int8_t *out_q, float *out_d,
                                      bool *same_cache);

#endif
