/*
 * ops.h — the element-wise and per-row operations of the forward pass:
 * RMSNorm, RoPE (both pairings), softmax, SiLU/SwiGLU, and attention of one
 * query head over a KV cache (GQA: the caller picks the KV head).  Each is
 * scalar C that defines the result; faster paths must match it
 * (tests/test_ops.c holds the parity tests).
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

/* y[i] += a * x[i] */
void op_axpy(float *y, float a, const float *x, int64_t n);

/* One query head against the cache rows of its KV head, positions
 * [0, n_kv): out = softmax(scale * q.K^T) V.  K and V rows are stored in
 * kv_type (QT_F32 or QT_F16), stride bytes apart, already offset to the
 * KV head.  scores holds n_kv floats of scratch. */
typedef struct attn_head_args {
    int head_dim_k, head_dim_v;
    float scale;
    uint32_t kv_type;
    const void *k;
    size_t k_stride;
    const void *v;
    size_t v_stride;
    int64_t n_kv;
} attn_head_args;

void op_attention_head(const float *q, const attn_head_args *a, float *scores, float *out);

/* Bytes of one cache element of kv_type, 0 for a type the cache cannot hold. */
size_t op_kv_elem_size(uint32_t kv_type);

/* Stores n floats into a cache row of kv_type. */
void op_kv_store(void *dst, uint32_t kv_type, const float *src, int64_t n);

#endif
