/*
 * ops.h — the element-wise and per-row operations of the forward pass:
 * RMSNorm, RoPE (both pairings, linear and YaRN scaling), softmax,
 * SiLU/SwiGLU (and gpt-oss's clamped variant), and attention of the query
 * heads of one KV head over a KV cache (GQA; sliding windows as rings of
 * cache rows, attention sinks).  Each is scalar C that
 * defines the result; attention's row primitives also have SIMD versions
 * (ops_avx2.c) that must match the scalar ones (tests/test_ops.c).
 */
#ifndef HYDRA_OPS_H
#define HYDRA_OPS_H

#include <stddef.h>
#include <stdint.h>

/* y = x / sqrt(mean(x^2) + eps) * w over n values (w NULL: no gain).
 * y may equal x. */
void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* How RoPE pairs the rotated dimensions of a head.
 * NORMAL (GPT-J, Llama/Mixtral in GGUF): (x[2i], x[2i+1]).
 * NEOX (Qwen2/3): (x[i], x[i + n_rot/2]). */
typedef enum rope_style { ROPE_NORMAL, ROPE_NEOX } rope_style;

/* cs[2i] = cos(theta_i), cs[2i+1] = sin(theta_i) for i < n_rot/2 with
 * theta_i = pos * base^(-2i/n_rot), computed as ggml does (a running product
 * of base^(-2/n_rot) in float) so positions agree with llama.cpp's to the ulp. */
void op_rope_cache(float *cs, int64_t pos, int n_rot, float base);

/* RoPE with context scaling.  Linear scaling divides every angle by the
 * factor (freq_scale = 1/factor).  YaRN (arXiv:2309.00071) mixes, per
 * dimension pair i, the scaled angle with the unscaled one by a ramp that
 * is 1 (unscaled) below corr_low and 0 (scaled) above corr_high, and
 * multiplies cos and sin by 1 + 0.1 ln(factor); ggml applies both when
 * ext_factor is non-zero, which llama.cpp sets for rope.scaling.type yarn. */
typedef struct rope_params {
    int n_rot;
    float base;
    float freq_scale;          /* 1 / rope.scaling.factor; 1 without scaling */
    float ext_factor;          /* 1 with YaRN, else 0 */
    float attn_factor;         /* multiplies cos and sin (before YaRN's own factor) */
    float corr_low, corr_high; /* YaRN's correction dimensions */
} rope_params;

/* Unscaled RoPE of n_rot dimensions. */
rope_params op_rope_plain(int n_rot, float base);

/* YaRN's correction dimensions as ggml_rope_yarn_corr_dims computes them:
 * the pair index whose wavelength fits beta times into n_ctx_orig, for
 * beta_fast (floored) and beta_slow (ceiled), clamped to [0, n_rot - 1]. */
void op_rope_yarn_corr(rope_params *p, uint32_t n_ctx_orig, float beta_fast, float beta_slow);

/* op_rope_cache with scaling: the same recurrence, each angle then scaled
 * and mixed as rope_params says. */
void op_rope_cache_ext(float *cs, int64_t pos, const rope_params *p);

/* Rotates the first n_rot dimensions of one head in place; the rest stay. */
void op_rope(float *x, const float *cs, int n_rot, rope_style style);

/* In place: x = exp(x - max) / sum over n values. */
void op_softmax(float *x, int64_t n);

static inline float op_silu(float x)
{
    return x / (1.0f + __builtin_expf(-x));
}

/* out[i] = silu(gate[i]) * up[i].  out may equal gate or up. */
void op_swiglu(float *out, const float *gate, const float *up, int64_t n);

/* gpt-oss's clamped SwiGLU (ggml's swiglu_oai): g = min(gate, limit),
 * u = clamp(up, -limit, limit), out = g * sigmoid(alpha g) * (u + 1).
 * gpt-oss uses alpha 1.702, limit 7.  out may equal gate or up. */
void op_swiglu_oai(float *out, const float *gate, const float *up, int64_t n, float alpha, float limit);

/* op_softmax with one extra logit that takes part in the maximum and the
 * denominator but has no output (an attention sink); -INFINITY: none. */
void op_softmax_sink(float *x, int64_t n, float sink);

/* y[i] += a * x[i] */
void op_axpy(float *y, float a, const float *x, int64_t n);

/* Row primitives attention is built from, one table per instruction set:
 * op_kernels_scalar defines the results, op_kernels_best() is the fastest
 * table this CPU runs (chosen by the caller once, at setup). */
typedef struct op_kernels {
    const char *isa;
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n); /* y += a x */
    void (*f16_to_f32)(const uint16_t *src, float *dst, int n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int n);
} op_kernels;

extern const op_kernels op_kernels_scalar;
#if defined(__x86_64__)
extern const op_kernels op_kernels_avx2; /* AVX2 + FMA + F16C */
#endif
const op_kernels *op_kernels_best(void);

/* The n_q query heads that share one KV head (GQA), each against n_kv cache
 * rows: out_h = softmax(scale * q_h . K^T) V.  K and V rows are stored in
 * kv_type (QT_F32 or QT_F16), stride bytes apart, already offset to the KV
 * head; each cache row is converted once and serves all n_q heads.
 *
 * The rows read are first, first + 1, ... (n_kv of them); with n_slots > 0
 * the cache is a ring of n_slots rows and the index wraps to 0 (a sliding
 * window's cache; n_kv <= n_slots, first < n_slots).  sinks (NULL: none)
 * holds one logit per query head that joins its softmax without a value
 * (gpt-oss's attention sinks). */
typedef struct attn_args {
    int head_dim_k, head_dim_v;
    float scale;
    uint32_t kv_type;
    const void *k;
    size_t k_stride;
    const void *v;
    size_t v_stride;
    int64_t n_kv;
    int64_t first, n_slots;
    const float *sinks;
} attn_args;

/* Floats of scratch op_attention_group needs. */
size_t op_attention_scratch(int n_q, int64_t n_kv, int head_dim_k, int head_dim_v);

/* q: n_q heads of head_dim_k floats, consecutive; out: n_q heads of
 * head_dim_v floats, consecutive. */
void op_attention_group(const op_kernels *kern, const float *q, int n_q, const attn_args *a, float *scratch,
                        float *out);

/* Bytes of one cache element of kv_type, 0 for a type the cache cannot hold. */
size_t op_kv_elem_size(uint32_t kv_type);

/* Stores n floats into a cache row of kv_type. */
void op_kv_store(const op_kernels *kern, void *dst, uint32_t kv_type, const float *src, int n);

#endif
