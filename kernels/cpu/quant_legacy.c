/*
 * quant_legacy.c — the 32-value block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
 * and the activation format Q8_1 (layouts: quant_blocks.h).  Each weight
 * type is a decoder to quant_b32 (integers plus scale and min); conversion
 * and dot products are written once, over that form, and IQ4_NL and MXFP4
 * (quant_nl.c) reuse them.
 */
#include "quant_ref.h"

#include "fp16.h"
#include "quant_blocks.h"

#include <string.h>

/* ---- the shared block machinery --------------------------------------- */

/* ggml writes value = q * d (+ m); q * d - neg_m is the same float, see
 * quant_b32. */
void quant_b32_to_float(const void *src, size_t block_bytes, quant_b32_decode_fn decode, float *dst, int64_t n)
{
    const uint8_t *p = src;
    quant_b32 u;
    for (int64_t i = 0; i < n / QK_LEGACY; i++, dst += QK_LEGACY) {
        decode(p + (size_t)i * block_bytes, &u);
        for (int j = 0; j < QK_LEGACY; j++)
            dst[j] = (float)u.q[j] * u.d - u.neg_m;
    }
}

static int b32_sumi(const quant_b32 *u, const int8_t *qa)
{
    int sumi = 0;
    for (int j = 0; j < QK_LEGACY; j++)
        sumi += u->q[j] * qa[j];
    return sumi;
}

float quant_b32_dot_q8_0(const void *w, size_t block_bytes, quant_b32_decode_fn decode, const void *a, int64_t n)
{
    const uint8_t *p = w;
    const block_q8_0 *act = a;
    double sum = 0.0;
    quant_b32 u;
    for (int64_t i = 0; i < n / QK_LEGACY; i++) {
        decode(p + (size_t)i * block_bytes, &u);
        float d = u.d * fp16_to_fp32(act[i].d);
        sum += (double)(d * (float)b32_sumi(&u, act[i].qs));
    }
    return (float)sum;
}

/* sum_j (q_j d + m) * a_j = d d_a sum_j q_j qa_j + m * s, s = d_a sum_j qa_j. */
float quant_b32_dot_q8_1(const void *w, size_t block_bytes, quant_b32_decode_fn decode, const void *a, int64_t n)
{
    const uint8_t *p = w;
    const block_q8_1 *act = a;
    double sum = 0.0;
    quant_b32 u;
    for (int64_t i = 0; i < n / QK_LEGACY; i++) {
        decode(p + (size_t)i * block_bytes, &u);
        float d = u.d * fp16_to_fp32(act[i].d);
        sum += (double)(d * (float)b32_sumi(&u, act[i].qs) - u.neg_m * fp16_to_fp32(act[i].s));
    }
    return (float)sum;
}

/* ---- quantiser helpers ------------------------------------------------- */

/* The value of largest magnitude (the first on ties), with its sign. */
static float signed_absmax(const float *x, int n)
{
    float best = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > fabsf(best))
            best = x[j];
    return best;
}

static void min_max(const float *x, int n, float *lo, float *hi)
{
    *lo = x[0];
    *hi = x[0];
    for (int j = 1; j < n; j++) {
        *lo = fminf(*lo, x[j]);
        *hi = fmaxf(*hi, x[j]);
    }
}

/* v as f16 bits; *seen = the value the decoder will see. */
static uint16_t f16_round(float v, float *seen)
{
    uint16_t h = fp32_to_fp16(v);
    *seen = fp16_to_fp32(h);
    return h;
}

/* Q4_0 and Q5_0 (value = d * (q - bias), q in [0, 2 * bias)): the largest
 * magnitude maps to -bias, the level the positive side lacks;
 * q[j] = clamp(round(x[j] / d) + bias), 0 where d == 0 yields bias.
 * Returns d as f16. */
static uint16_t quantise_symmetric(const float *x, int bias, int *q)
{
    float d;
    uint16_t h = f16_round(signed_absmax(x, QK_LEGACY) / (float)-bias, &d);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK_LEGACY; j++)
        q[j] = quant_clamp(quant_round(x[j] * id) + bias, 0, 2 * bias - 1);
    return h;
}

/* Q4_1 and Q5_1 (value = d * q + m, q in 0..nmax): the block's range spread
 * over the levels, q[j] = clamp(round((x[j] - m) / d)).  Returns d and *m
 * as f16. */
static uint16_t quantise_affine(const float *x, int nmax, uint16_t *m_bits, int *q)
{
    float lo, hi, d, m;
    min_max(x, QK_LEGACY, &lo, &hi);
    uint16_t h = f16_round((hi - lo) / (float)nmax, &d);
    *m_bits = f16_round(lo, &m);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK_LEGACY; j++)
        q[j] = quant_clamp(quant_round((x[j] - m) * id), 0, nmax);
    return h;
}

/* Low nibbles hold values 0..15, high nibbles 16..31. */
static void pack_nibbles(const int *q, uint8_t *qs)
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
}

/* Bit j of qh is bit 4 of value j. */
static void pack_fifth_bits(const int *q, uint8_t *qh)
{
    uint32_t bits = 0;
    for (int j = 0; j < QK_LEGACY; j++)
        bits |= (uint32_t)((q[j] >> 4) & 1) << j;
    memcpy(qh, &bits, 4);
}

static uint32_t fifth_bits(const uint8_t *qh)
{
    uint32_t bits;
    memcpy(&bits, qh, 4);
    return bits;
}

/* The inverse of pack_nibbles and pack_fifth_bits (qh = 0 for the 4-bit
 * formats), less bias. */
static void unpack_ints(const uint8_t *qs, uint32_t qh, int bias, int8_t *q)
{
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0xF) | ((qh >> j) & 1) << 4) - bias);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - bias);
    }
}

/* ---- Q4_0: value = d * (q - 8) ------------------------------------------ */

static void decode_q4_0(const void *blk, quant_b32 *u)
{
    const block_q4_0 *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->neg_m = 0.0f;
    unpack_ints(b->qs, 0, 8, u->q);
}

B32_CONVERT_DOT(q4_0, block_q4_0, q8_0)

void quant_ref_q4_0_from_float(const float *src, void *dst, int64_t n)
{
    block_q4_0 *b = dst;
    int q[QK_LEGACY];
    for (int64_t i = 0; i < n / QK_LEGACY; i++, src += QK_LEGACY) {
        b[i].d = quantise_symmetric(src, 8, q);
        pack_nibbles(q, b[i].qs);
    }
}

/* ---- Q4_1: value = d * q + m -------------------------------------------- */

static void decode_q4_1(const void *blk, quant_b32 *u)
{
    const block_q4_1 *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->neg_m = -fp16_to_fp32(b->m);
    unpack_ints(b->qs, 0, 0, u->q);
}

B32_CONVERT_DOT(q4_1, block_q4_1, q8_1)

void quant_ref_q4_1_from_float(const float *src, void *dst, int64_t n)
{
    block_q4_1 *b = dst;
    int q[QK_LEGACY];
    for (int64_t i = 0; i < n / QK_LEGACY; i++, src += QK_LEGACY) {
        uint16_t m;
        b[i].d = quantise_affine(src, 15, &m, q);
        b[i].m = m;
        pack_nibbles(q, b[i].qs);
    }
}

/* ---- Q5_0: value = d * (q - 16) ----------------------------------------- */

static void decode_q5_0(const void *blk, quant_b32 *u)
{
    const block_q5_0 *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->neg_m = 0.0f;
    unpack_ints(b->qs, fifth_bits(b->qh), 16, u->q);
}

B32_CONVERT_DOT(q5_0, block_q5_0, q8_0)

void quant_ref_q5_0_from_float(const float *src, void *dst, int64_t n)
{
    block_q5_0 *b = dst;
    int q[QK_LEGACY];
    for (int64_t i = 0; i < n / QK_LEGACY; i++, src += QK_LEGACY) {
        b[i].d = quantise_symmetric(src, 16, q);
        pack_nibbles(q, b[i].qs);
        pack_fifth_bits(q, b[i].qh);
    }
}

/* ---- Q5_1: value = d * q + m -------------------------------------------- */

static void decode_q5_1(const void *blk, quant_b32 *u)
{
    const block_q5_1 *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->neg_m = -fp16_to_fp32(b->m);
    unpack_ints(b->qs, fifth_bits(b->qh), 0, u->q);
}

B32_CONVERT_DOT(q5_1, block_q5_1, q8_1)

void quant_ref_q5_1_from_float(const float *src, void *dst, int64_t n)
{
    block_q5_1 *b = dst;
    int q[QK_LEGACY];
    for (int64_t i = 0; i < n / QK_LEGACY; i++, src += QK_LEGACY) {
        uint16_t m;
        b[i].d = quantise_affine(src, 31, &m, q);
        b[i].m = m;
        pack_nibbles(q, b[i].qs);
        pack_fifth_bits(q, b[i].qh);
    }
}

/* ---- Q8_0 (weights and activations) and Q8_1 (activations) ------------- */

static void decode_q8_0(const void *blk, quant_b32 *u)
{
    const block_q8_0 *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->neg_m = 0.0f;
    memcpy(u->q, b->qs, QK_LEGACY);
}

B32_CONVERT_DOT(q8_0, block_q8_0, q8_0)

/* The activation rule of quant_ref.h; returns d (before f16 rounding). */
static float quantise_q8(const float *x, int8_t *q)
{
    float amax = 0.0f;
    for (int j = 0; j < QK_LEGACY; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < QK_LEGACY; j++)
        q[j] = (int8_t)quant_clamp(quant_round(x[j] * id), -127, 127);
    return amax / 127.0f;
}

void quant_ref_q8_0_from_float(const float *src, void *dst, int64_t n)
{
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK_LEGACY; i++, src += QK_LEGACY)
        b[i].d = fp32_to_fp16(quantise_q8(src, b[i].qs));
}

static void decode_q8_1(const void *blk, quant_b32 *u)
{
    const block_q8_1 *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->neg_m = 0.0f;
    memcpy(u->q, b->qs, QK_LEGACY);
}

void quant_ref_q8_1_to_float(const void *src, float *dst, int64_t n)
{
    quant_b32_to_float(src, sizeof(block_q8_1), decode_q8_1, dst, n);
}

/* s is computed from the stored (f16) d, so its only error is its own f16
 * rounding. */
void quant_ref_q8_1_from_float(const float *src, void *dst, int64_t n)
{
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK_LEGACY; i++, src += QK_LEGACY) {
        float d;
        b[i].d = f16_round(quantise_q8(src, b[i].qs), &d);
        int sum = 0;
        for (int j = 0; j < QK_LEGACY; j++)
            sum += b[i].qs[j];
        b[i].s = fp32_to_fp16(d * (float)sum);
    }
}
