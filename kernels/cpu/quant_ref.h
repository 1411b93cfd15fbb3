/*
 * quant_ref.h — scalar reference implementations of every tensor format
 * hydra computes with.  They define what "correct" means for every faster
 * path:
 *   to_float    exact: bit-identical to ggml's dequantisation (same float
 *               operations in the same order), checked against
 *               ../shared/ref/dequant.
 *   from_float  a reference quantiser (no importance matrix).  For the
 *               activation formats (Q8_0, Q8_1, Q8_K) the rule is fixed so
 *               that SIMD quantisers can match it bit for bit:
 *                 amax = max |x| over the block, d = amax / 127,
 *                 q = round_half_even(x * (127 / amax)), 0 when amax == 0.
 *   vec_dot     weight row . activation row in the type's vec_dot_type.
 *               Inside a block the products are summed as integers (as
 *               SIMD kernels do, so their integer parts are bit-exact); the
 *               block's scales are multiplied in float (d_w * d_a, then
 *               times the integer sum) and the block terms are added in
 *               double, so the reference is at least as accurate as any
 *               float-accumulating fast path.
 *
 * Files: quant_float.c (F32, F16, BF16), quant_legacy.c (Q4_0..Q8_1),
 * quant_k.c (Q2_K..Q6_K, Q8_K), quant_nl.c (IQ4_NL, IQ4_XS, MXFP4).
 */
#ifndef HYDRA_QUANT_REF_H
#define HYDRA_QUANT_REF_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define QUANT_REF_CONVERT(fn)                                                 \
    void quant_ref_##fn##_to_float(const void *src, float *dst, int64_t n);   \
    void quant_ref_##fn##_from_float(const float *src, void *dst, int64_t n);
#define QUANT_REF_DOT(fn) void quant_ref_##fn##_vec_dot(int64_t n, float *out, const void *w, const void *a);

/* Weight types: conversions and the dot product against their activation. */
#define QUANT_REF_WEIGHT(fn) QUANT_REF_CONVERT(fn) QUANT_REF_DOT(fn)

QUANT_REF_WEIGHT(f32)     /* . F32 */
QUANT_REF_WEIGHT(f16)     /* . F16 */
QUANT_REF_WEIGHT(bf16)    /* . BF16 */
QUANT_REF_WEIGHT(q4_0)    /* . Q8_0 */
QUANT_REF_WEIGHT(q4_1)    /* . Q8_1 */
QUANT_REF_WEIGHT(q5_0)    /* . Q8_0 */
QUANT_REF_WEIGHT(q5_1)    /* . Q8_1 */
QUANT_REF_WEIGHT(q8_0)    /* . Q8_0 */
QUANT_REF_WEIGHT(q2_k)    /* . Q8_K */
QUANT_REF_WEIGHT(q3_k)    /* . Q8_K */
QUANT_REF_WEIGHT(q4_k)    /* . Q8_K */
QUANT_REF_WEIGHT(q5_k)    /* . Q8_K */
QUANT_REF_WEIGHT(q6_k)    /* . Q8_K */
QUANT_REF_WEIGHT(iq4_nl)  /* . Q8_0 */
QUANT_REF_WEIGHT(iq4_xs)  /* . Q8_K */
QUANT_REF_WEIGHT(mxfp4)   /* . Q8_0 */

/* Activation-only formats. */
QUANT_REF_CONVERT(q8_1)
QUANT_REF_CONVERT(q8_k)

/* Round half to even: what the SIMD float->int conversions do in the
 * default rounding mode, so vector quantisers can reproduce ours. */
static inline int quant_round(float x)
{
    return (int)nearbyintf(x);
}

static inline int quant_clamp(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- shared machinery of the reference implementations ---------------- */

/* A 32-value block decoded to integers: value i = q[i] * d - neg_m.  Types
 * without a min set neg_m = +0, which subtracting leaves every value
 * (including -0) unchanged, so one formula stays bit-exact for all. */
typedef struct quant_b32 {
    float d, neg_m;
    int8_t q[32];
} quant_b32;
typedef void (*quant_b32_decode_fn)(const void *block, quant_b32 *out);

void quant_b32_to_float(const void *src, size_t block_bytes, quant_b32_decode_fn decode, float *dst, int64_t n);
/* Against Q8_0 (types without a min) and Q8_1 (types with one: adds m * s). */
float quant_b32_dot_q8_0(const void *w, size_t block_bytes, quant_b32_decode_fn decode, const void *a, int64_t n);
float quant_b32_dot_q8_1(const void *w, size_t block_bytes, quant_b32_decode_fn decode, const void *a, int64_t n);

/* quant_ref_FN_to_float and quant_ref_FN_vec_dot of a type decoded by
 * decode_FN to the shared form (b32 or bk), against the activation act. */
#define QUANT_CONVERT_DOT(form, fn, block_t, act)                                      \
    void quant_ref_##fn##_to_float(const void *src, float *dst, int64_t n)             \
    {                                                                                  \
        quant_##form##_to_float(src, sizeof(block_t), decode_##fn, dst, n);            \
    }                                                                                  \
    void quant_ref_##fn##_vec_dot(int64_t n, float *out, const void *w, const void *a) \
    {                                                                                  \
        *out = quant_##form##_dot_##act(w, sizeof(block_t), decode_##fn, a, n);        \
    }

/* A 32-value block type against act (q8_0, or q8_1 for types with a min). */
#define B32_CONVERT_DOT(fn, block_t, act) QUANT_CONVERT_DOT(b32, fn, block_t, act)

/* A 256-value super-block decoded to integers: in sub-block j (sub values
 * each) value i = (d * sc[j]) * q[i] - dmin * m[j]; dmin = 0 and m = 0 for
 * types without mins. */
typedef struct quant_bk {
    float d, dmin;
    int sub;
    int8_t q[256];
    int8_t sc[16];
    uint8_t m[16];
} quant_bk;
typedef void (*quant_bk_decode_fn)(const void *block, quant_bk *out);

void quant_bk_to_float(const void *src, size_t block_bytes, quant_bk_decode_fn decode, float *dst, int64_t n);
float quant_bk_dot_q8_k(const void *w, size_t block_bytes, quant_bk_decode_fn decode, const void *a, int64_t n);

/* A super-block type against Q8_K. */
#define BK_CONVERT_DOT(fn, block_t) QUANT_CONVERT_DOT(bk, fn, block_t, q8_k)

/* Codes signed sub-block scales v[0..n) as d * c, c in -cneg..cneg-1, the
 * largest magnitude taking -cneg; returns d's f16 bits, *scale = its value. */
uint16_t quant_code_signed(const float *v, int n, int cneg, int *codes, float *scale);

#endif
