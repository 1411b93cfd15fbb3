/*
 * kernels_arch.h — the kernels of the architectures whose steps go beyond
 * plain GQA with softmax/sigmoid top-k (gpt-oss, deepseek2), as C
 * launchers like those of kernels.h:
 *
 *   attn_ext.cu  attention over the cache with attention sinks, sliding
 *                windows, any number of query heads per KV head, V read
 *                from the K rows (MLA's latent)
 *   mla.cu       MLA's per-token preparation: latent RMSNorm + RoPE into
 *                the cache, each query head split into its nope part and
 *                its roped part (in latent space)
 *   router.cu    expert selection with every gating of src/moe.c: softmax,
 *                sigmoid or softmax over the chosen, selection bias, expert
 *                groups, renormalisation, scale
 *   ffn_ext.cu   the FFN activation with per-expert biases (SwiGLU or
 *                gpt-oss's clamped variant), per-route output biases
 *
 * RoPE angles (YaRN included) come from rope.cuh, shared with ops.cu.
 */
#ifndef HYDRA_CUDA_KERNELS_ARCH_H
#define HYDRA_CUDA_KERNELS_ARCH_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- attn_ext.cu.  The geometry is gk_attn's (q, caches, heads, scale,
 * n_tok, tok0, max_kv, scratch, out; chunk is ignored): query head h reads
 * KV head h / (n_head / n_head_kv); for MLA n_head_kv = 1 and v = k with
 * v_row = k_row, so V is the first head_dim_v values of the K row.  Token
 * t sees positions [max(0, p - window + 1), p] for p = pos0 + tok0 + t
 * (window 0: [0, p]); sinks join each head's softmax denominator. */
enum { GK_AX_CHUNK = GK_ATTN_CHUNK, GK_AX_MAX_DK = 4096 };
typedef struct gk_attn_ext {
    const float *sinks; /* n_head logits; NULL: none */
    int window;         /* 0: every earlier position */
} gk_attn_ext;

/* Floats of scratch gk_attention_ext needs: per (token, head, chunk of
 * GK_AX_CHUNK positions) max, sum and head_dim_v partial values.  As the
 * chunks are GK_ATTN_CHUNK, the largest gk_attention uses, this is never
 * more than gk_attention_scratch for the same shape. */
size_t gk_attention_ext_scratch(int n_tok, int n_head, int head_dim_v, int max_kv);
int gk_attention_ext(gpuStream_t s, const gk_attn *a, const gk_attn_ext *x, const gk_step *step);

/* --- mla.cu.  For token t at position pos0 + t:
 *   cache row = (rmsnorm(latent[t][0 .. lora)) * kv_norm | rope(latent[t][lora ..)))
 *   per head h of q[t] (nope values, then n_rot):
 *     q_nope[t * n_head + h] = the nope values
 *     q_lat[(t * n_head + h) * (lora + n_rot) + lora ..] = rope(the n_rot values)
 * RoPE as gk_rope's fields say (pairing, angles, YaRN). */
typedef struct gk_mla {
    const float *latent; /* n_tok rows of kv_lora + n_rot */
    const float *kv_norm;
    const float *q;      /* n_tok rows of n_head heads of nope + n_rot */
    float *q_nope, *q_lat;
    void *k_cache;       /* this layer's: rows of kv_lora + n_rot */
    bool kv_f16;
    int n_head, nope, n_rot, kv_lora, n_tok;
    float eps;
    bool neox;
    float theta_scale, freq_scale, attn_factor, ext_factor, corr_low, corr_high;
} gk_mla;
int gk_mla_prepare(gpuStream_t s, const gk_mla *m, const gk_step *step);

/* --- router.cu.  routes[t * n_used + k] from logits rows of n_expert, as
 * moe_select (src/moe.c): func 1 softmax, 2 sigmoid, 3 top-k of the logits
 * then softmax over the chosen (arch_gating's values); experts chosen by
 * the gating output plus sel_bias (NULL: none), only among the n_group_used
 * best of n_group groups (by the sum of their two best scores) when
 * n_group > 1; ties to the lower id; weights renormalised (sum clamped
 * below at 2^-14) when renorm, then scaled.  n_expert <= GK_SEL_MAX_EXPERTS,
 * n_used <= GK_SEL_MAX_USED, n_expert % n_group == 0. */
enum { GK_SEL_MAX_EXPERTS = 4096, GK_SEL_MAX_USED = 256 };
typedef struct gk_select {
    int n_expert, n_used;
    int func;
    bool renorm;
    float scale;
    const float *sel_bias;
    int n_group, n_group_used;
} gk_select;
int gk_route_select(gpuStream_t s, const gk_select *g, const float *logits, int n_tok, gk_route *routes);

/* --- ffn_ext.cu.  Row r of a launch belongs to route order[r] (order NULL:
 * route r); biases are rows of n_expert, row e for expert e. */
typedef struct gk_glu {
    const float *gate, *up;          /* n_rows rows of ff */
    float *h;                        /* out, may equal gate or up */
    int64_t n_rows, ff;
    const float *gate_bias, *up_bias; /* NULL: none (then routes may be NULL) */
    const gk_route *routes;
    const int32_t *order;
    bool oai;                        /* clamped SwiGLU: alpha, limit */
    float alpha, limit;
} gk_glu;
/* h = act(gate + gate_bias[e], up + up_bias[e]). */
int gk_glu_act(gpuStream_t s, const gk_glu *a);
/* y[r][i] += bias[e_r][i] for n_rows rows of width. */
int gk_route_bias(gpuStream_t s, float *y, int64_t n_rows, int64_t width, const float *bias, const gk_route *routes,
                  const int32_t *order);

#ifdef __cplusplus
}
#endif
#endif
