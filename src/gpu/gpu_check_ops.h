/*
 * gpu_check_ops.h — single launches of the per-row kernels over host data,
 * for the op parity tests (tests/test_cuda_ops.c): each copies its inputs
 * to the device, runs one launcher on the default stream, synchronises and
 * copies the result back.  Without a device (or without CUDA=1) each fails
 * with HYDRA_ERR_UNSUPPORTED.  Implemented in gpu_check_ops.c, stubs in
 * gpu_off.c.
 */
#ifndef HYDRA_GPU_CHECK_OPS_H
#define HYDRA_GPU_CHECK_OPS_H

#include "gpu.h"

/* gk_rmsnorm over n_rows rows of n; with q8 (n % 32 == 0) also the 8-bit
 * form, whose scales go to d (n_rows * n / 32 floats, may be NULL). */
hydra_status gpu_check_rmsnorm(const float *x, const float *gain, float eps, int n_rows, int64_t n, bool q8, float *y,
                               int8_t *q, float *d);

/* gk_rope_store: per-head QK-norm (gains NULL: none) then RoPE of n_tok
 * tokens at positions pos0 .., q (n_tok x n_head heads) and k (n_tok x
 * n_head_kv heads) rotated in place; rope.n_rot dimensions of head_dim. */
typedef struct gpu_rope_check {
    int n_head, n_head_kv, head_dim, n_tok, pos0;
    bool neox;
    rope_params rope;
    const float *q_norm, *k_norm;
    float eps;
} gpu_rope_check;
hydra_status gpu_check_rope(const gpu_rope_check *c, float *q, float *k);

/* Attention of n_tok queries (rows of n_head heads of head_dim_k) at
 * positions pos0 .. over an F32 cache of n_ctx rows (k_rows: n_head_kv
 * heads of head_dim_k; v_rows: n_head_kv heads of head_dim_v, or NULL with
 * v_in_k: V is the first head_dim_v values of each K row, MLA's layout).
 * ext (or sinks, window, v_in_k) takes gk_attention_ext, tiles
 * gk_attention_tiles over an F16 cache (k_rows, v_rows then hold f16
 * bits), else gk_attention.  out: n_tok rows of n_head heads of
 * head_dim_v. */
typedef struct gpu_attn_check {
    int n_head, n_head_kv, head_dim_k, head_dim_v;
    bool v_in_k, ext, tiles;
    float scale;
    const float *sinks; /* n_head; NULL: none */
    int window;
    int n_tok, pos0, n_ctx;
} gpu_attn_check;
hydra_status gpu_check_attention(const gpu_attn_check *c, const float *q, const float *k_rows, const float *v_rows,
                                 float *out);

/* Expert selection of n_tok rows of logits: gk_route_select, or with
 * plain_kernel gk_moe_topk (func 1 or 2, no sel_bias, no groups).  experts
 * and weights: n_tok * n_used, token-major, rank order. */
typedef struct gpu_select_check {
    int n_expert, n_used, func; /* arch_gating */
    bool renorm;
    float scale;
    const float *sel_bias;
    int n_group, n_group_used;
    bool plain_kernel;
} gpu_select_check;
hydra_status gpu_check_select(const gpu_select_check *c, const float *logits, int n_tok, int32_t *experts,
                              float *weights);

/* gk_glu_act over n_rows rows of ff: h = act(gate + gate_bias[e], up +
 * up_bias[e]) with e = experts[r] (biases n_expert rows of ff, NULL: none),
 * act the clamped SwiGLU (oai, alpha, limit) or SwiGLU. */
typedef struct gpu_glu_check {
    int64_t n_rows, ff;
    const float *gate_bias, *up_bias;
    const int32_t *experts;
    int n_expert;
    bool oai;
    float alpha, limit;
} gpu_glu_check;
hydra_status gpu_check_glu(const gpu_glu_check *c, const float *gate, const float *up, float *h);

/* gk_moe_combine: x[t] += sum_k weights[t * n_used + k] * y[t * n_used + k]
 * (rows of n), in place. */
hydra_status gpu_check_combine(const float *weights, const float *y, int n_tok, int n_used, int64_t n, float *x);

/* gk_add_rows: x[t] += (gate ? sigmoid(gate[t]) : 1) * y[t], in place. */
hydra_status gpu_check_add_rows(const float *y, const float *gate, int n_tok, int64_t n, float *x);

/* gk_mla_prepare for n_tok tokens at positions pos0 ..: latent rows of
 * kv_lora + n_rot and queries (n_head heads of nope + n_rot) in; out: the
 * F32 cache (cache_rows: pos0 + n_tok rows of kv_lora + n_rot, the step's
 * written), q_nope (n_tok * n_head rows of nope) and q_lat (n_tok * n_head
 * rows of kv_lora + n_rot, only the n_rot tail written, the rest 0). */
typedef struct gpu_mla_prep_check {
    int n_head, nope, n_rot, kv_lora, n_tok, pos0;
    float eps;
    bool neox;
    rope_params rope;
} gpu_mla_prep_check;
hydra_status gpu_check_mla_prepare(const gpu_mla_prep_check *c, const float *latent, const float *kv_norm,
                                   const float *q, float *cache_rows, float *q_nope, float *q_lat);

/* gk_route_bias: y[r] += bias[e] (bias: n_expert rows of width) for n_rows
 * rows, e = experts[order ? order[r] : r] (n_routes of them; -1: no bias). */
hydra_status gpu_check_route_bias(const float *bias, int n_expert, const int32_t *experts, int n_routes,
                                  const int32_t *order, int64_t n_rows, int64_t width, float *y);

#endif
