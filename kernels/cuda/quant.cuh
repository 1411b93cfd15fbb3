/*
 * quant.cuh — the weight formats as the GPU kernels read them.  Every
 * format is cut into chunks of 32 consecutive values of a row (a Q8_0
 * block, or one eighth of a K-quant super-block), and a chunk decodes to
 *
 *     32 small integers q (8 packed int32, value i in byte i % 4 of int i / 4)
 *     value_i = s[h] * q_i + m[h],  h = i / 16 (the two halves of 16)
 *
 * The layouts are the public GGUF ones (kernels/cpu/quant_blocks.h says
 * where each bit sits; the comments below give the chunk-local view).
 * Offsets that the formats store as "q - 8", "q - 32" and so on go into m
 * (m = -8 s, ...), so q stays unsigned where the bits are, and the integer
 * dot product against 8-bit activations stays exact: a chunk contributes
 *
 *     d_a * (s[0] * dot(q, a)_0 + s[1] * dot(q, a)_1 + m[0] * sum(a)_0 + m[1] * sum(a)_1)
 *
 * Decoders are __host__ __device__ so that host-side checks compare them
 * with the CPU reference decoders without a GPU (tests/test_cuda_quant.c).
 */
#ifndef HYDRA_CUDA_QUANT_CUH
#define HYDRA_CUDA_QUANT_CUH

#include "compat.h"

#include <stdint.h>

enum {
    GQ_F32 = 0, GQ_F16 = 1, GQ_Q4_0 = 2, GQ_Q4_1 = 3, GQ_Q5_0 = 6, GQ_Q5_1 = 7, GQ_Q8_0 = 8,
    GQ_Q2_K = 10, GQ_Q3_K = 11, GQ_Q4_K = 12, GQ_Q5_K = 13, GQ_Q6_K = 14,
    GQ_IQ4_NL = 20, GQ_IQ4_XS = 23, GQ_BF16 = 30, GQ_MXFP4 = 39,
};

typedef struct gq_chunk {
    int32_t q[8];
    float s[2], m[2];
} gq_chunk;

/* Loads of 4 bytes from blocks that are only 1-, 2- or 4-byte aligned. */
template <int ALIGN> static inline __host__ __device__ int32_t gq_ld32(const uint8_t *p)
{
    if (ALIGN == 4)
        return *(const int32_t *)p;
    if (ALIGN == 2) {
        const uint16_t *h = (const uint16_t *)p;
        return (int32_t)((uint32_t)h[0] | (uint32_t)h[1] << 16);
    }
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static inline __host__ __device__ float gq_f16(const uint8_t *p)
{
    return gpu_half_bits_to_float((unsigned short)(p[0] | p[1] << 8));
}

/* Nibbles of 16 bytes in Q4_0 order: value i < 16 in the low nibble of byte
 * i, value i + 16 in its high nibble. */
template <int ALIGN> static inline __host__ __device__ void gq_nibbles16(const uint8_t *qs, int32_t q[8])
{
    for (int k = 0; k < 4; k++) {
        const int32_t v = gq_ld32<ALIGN>(qs + 4 * k);
        q[k] = v & 0x0F0F0F0F;
        q[k + 4] = (v >> 4) & 0x0F0F0F0F;
    }
}

/* A 16-entry codebook of signed bytes held in two 64-bit constants (entry
 * n in byte n % 8 of lo for n < 8, of hi otherwise): no table in memory. */
typedef struct gq_book {
    uint64_t lo, hi;
} gq_book;

static inline __host__ __device__ uint32_t gq_level(gq_book b, uint32_t n)
{
    return (uint32_t)((n < 8 ? b.lo : b.hi) >> (8 * (n & 7))) & 0xFF;
}

/* 8 nibbles of v (4 bytes) -> the codebook bytes of the 4 low nibbles (*lo)
 * and of the 4 high nibbles (*hi). */
static inline __host__ __device__ void gq_levels(int32_t v, gq_book book, int32_t *lo, int32_t *hi)
{
    uint32_t l = 0, h = 0;
    for (int b = 0; b < 4; b++) {
        const uint32_t byte = ((uint32_t)v >> (8 * b)) & 0xFF;
        l |= gq_level(book, byte & 0xF) << (8 * b);
        h |= gq_level(book, byte >> 4) << (8 * b);
    }
    *lo = (int32_t)l;
    *hi = (int32_t)h;
}

/* Public codebooks (as kernels/cpu/quant_nl.c): IQ4_NL's 16 levels
 * {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113},
 * and FP4 E2M1 values doubled {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, ..., -12}
 * (the E8M0 scale supplies the 1/2). */
static inline __host__ __device__ gq_book gq_iq4nl_book(void)
{
    const gq_book b = {0xF6EADDCFBFAD9881ull, 0x7159453526190D01ull};
    return b;
}

static inline __host__ __device__ gq_book gq_mxfp4_book(void)
{
    const gq_book b = {0x0C08060403020100ull, 0xF4F8FAFCFDFEFF00ull};
    return b;
}

static inline __host__ __device__ void gq_single(gq_chunk *c, float s, float m)
{
    c->s[0] = c->s[1] = s;
    c->m[0] = c->m[1] = m;
}

/* Format traits: values per block, bytes per block, and the load width the
 * block's alignment allows (blocks are packed, so a 34-byte Q8_0 block is
 * only 2-byte aligned).  TWO_SCALES: the halves of a chunk have their own
 * scales (the 16-value sub-blocks of Q2_K, Q3_K, Q6_K). */
template <int T> struct gq_traits;

#define GQ_TRAITS(T, bs, ts, align, two)                                                                    \
    template <> struct gq_traits<T> {                                                                       \
        enum { block = bs, bytes = ts, alignment = align, two_scales = two };                               \
    };
GQ_TRAITS(GQ_Q4_0, 32, 18, 2, 0)
GQ_TRAITS(GQ_Q4_1, 32, 20, 4, 0)
GQ_TRAITS(GQ_Q5_0, 32, 22, 2, 0)
GQ_TRAITS(GQ_Q5_1, 32, 24, 4, 0)
GQ_TRAITS(GQ_Q8_0, 32, 34, 2, 0)
GQ_TRAITS(GQ_Q2_K, 256, 84, 4, 1)
GQ_TRAITS(GQ_Q3_K, 256, 110, 2, 1)
GQ_TRAITS(GQ_Q4_K, 256, 144, 4, 0)
GQ_TRAITS(GQ_Q5_K, 256, 176, 4, 0)
GQ_TRAITS(GQ_Q6_K, 256, 210, 2, 1)
GQ_TRAITS(GQ_IQ4_NL, 32, 18, 2, 0)
GQ_TRAITS(GQ_IQ4_XS, 256, 136, 4, 0)
GQ_TRAITS(GQ_MXFP4, 32, 17, 1, 0)
#undef GQ_TRAITS

/* Decodes chunk c (values 32c .. 32c + 31) of a row. */
template <int T> static inline __host__ __device__ void gq_decode(const uint8_t *row, int c, gq_chunk *out);

/* Q4_0: d, 16 bytes of nibbles; value = d (q - 8). */
template <> inline __host__ __device__ void gq_decode<GQ_Q4_0>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)c * 18;
    const float d = gq_f16(b);
    gq_nibbles16<2>(b + 2, o->q);
    gq_single(o, d, -8.0f * d);
}

/* Q4_1: d, m, nibbles; value = d q + m. */
template <> inline __host__ __device__ void gq_decode<GQ_Q4_1>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)c * 20;
    gq_nibbles16<4>(b + 4, o->q);
    gq_single(o, gq_f16(b), gq_f16(b + 2));
}

/* Fifth bits: bit i of the little-endian u32 qh is bit 4 of value i.  For
 * the 4 values of packed int k (values 4k..4k+3), spread bits 4k..4k+3 to
 * bit 4 of each byte. */
static inline __host__ __device__ int32_t gq_fifth_bits(uint32_t qh, int first)
{
    const uint32_t b = (qh >> first) & 0xF;
    return (int32_t)(((b & 1) << 4) | ((b & 2) << 11) | ((b & 4) << 18) | ((b & 8) << 25));
}

/* Q5_0: d, qh (4 bytes), nibbles; value = d (q - 16). */
template <> inline __host__ __device__ void gq_decode<GQ_Q5_0>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)c * 22;
    const float d = gq_f16(b);
    const uint32_t qh = (uint32_t)gq_ld32<2>(b + 2);
    gq_nibbles16<2>(b + 6, o->q);
    for (int k = 0; k < 8; k++)
        o->q[k] |= gq_fifth_bits(qh, 4 * k);
    gq_single(o, d, -16.0f * d);
}

/* Q5_1: d, m, qh, nibbles; value = d q + m. */
template <> inline __host__ __device__ void gq_decode<GQ_Q5_1>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)c * 24;
    const uint32_t qh = (uint32_t)gq_ld32<4>(b + 4);
    gq_nibbles16<4>(b + 8, o->q);
    for (int k = 0; k < 8; k++)
        o->q[k] |= gq_fifth_bits(qh, 4 * k);
    gq_single(o, gq_f16(b), gq_f16(b + 2));
}

/* Q8_0: d, 32 signed bytes; value = d q. */
template <> inline __host__ __device__ void gq_decode<GQ_Q8_0>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)c * 34;
    for (int k = 0; k < 8; k++)
        o->q[k] = gq_ld32<2>(b + 2 + 4 * k);
    gq_single(o, gq_f16(b), 0.0f);
}

/* IQ4_NL: d, nibbles indexing the codebook; value = d level. */
template <> inline __host__ __device__ void gq_decode<GQ_IQ4_NL>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)c * 18;
    for (int k = 0; k < 4; k++)
        gq_levels(gq_ld32<2>(b + 2 + 4 * k), gq_iq4nl_book(), &o->q[k], &o->q[k + 4]);
    gq_single(o, gq_f16(b), 0.0f);
}

/* MXFP4: E8M0 exponent e, nibbles indexing doubled E2M1 values;
 * value = level * 2^(e - 128). */
static inline __host__ __device__ float gq_e8m0_half(uint8_t e)
{
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

template <> inline __host__ __device__ void gq_decode<GQ_MXFP4>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)c * 17;
    for (int k = 0; k < 4; k++)
        gq_levels(gq_ld32<1>(b + 1 + 4 * k), gq_mxfp4_book(), &o->q[k], &o->q[k + 4]);
    gq_single(o, gq_e8m0_half(b[0]), 0.0f);
}

/* The K-quants: chunk c is sub-chunk j = c % 8 of super-block c / 8. */

/* Q2_K {scales[16], qs[64], d, dmin}: value e of chunk j sits in byte
 * 32 (j / 4) + e of qs at bits 2 (j % 4); sub-block 2j + h has scale
 * scales[2j+h] & 15 and min scales[2j+h] >> 4; value = d sc q - dmin m. */
template <> inline __host__ __device__ void gq_decode<GQ_Q2_K>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 84;
    const int j = c % 8;
    const float d = gq_f16(b + 80), dmin = gq_f16(b + 82);
    const int shift = 2 * (j % 4);
    for (int k = 0; k < 8; k++)
        o->q[k] = (gq_ld32<4>(b + 16 + 32 * (j / 4) + 4 * k) >> shift) & 0x03030303;
    for (int h = 0; h < 2; h++) {
        const uint8_t sm = b[2 * j + h];
        o->s[h] = d * (float)(sm & 0xF);
        o->m[h] = -(dmin * (float)(sm >> 4));
    }
}

/* Q3_K {hmask[32], qs[64], scales[12], d}: low 2 bits as Q2_K, the third
 * bit in byte e of hmask at bit j (clear means "minus 4"); signed 6-bit
 * sub-block scales; value = d sc (q - 4) with q = low | high << 2. */
template <> inline __host__ __device__ void gq_decode<GQ_Q3_K>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 110;
    const int j = c % 8;
    const float d = gq_f16(b + 108);
    const int shift = 2 * (j % 4);
    for (int k = 0; k < 8; k++) {
        const int32_t low = (gq_ld32<2>(b + 32 + 32 * (j / 4) + 4 * k) >> shift) & 0x03030303;
        const int32_t high = ((gq_ld32<2>(b + 4 * k) >> j) & 0x01010101) << 2;
        o->q[k] = low | high;
    }
    const uint8_t *sc = b + 96;
    for (int h = 0; h < 2; h++) {
        const int s = 2 * j + h;
        const int lo = s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4;
        const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        o->s[h] = d * (float)((lo | hi << 4) - 32);
        o->m[h] = -4.0f * o->s[h];
    }
}

/* Q4_K/Q5_K 6-bit scale and min of sub-block j (as q4k_scale_min). */
static inline __host__ __device__ void gq_k4_scale_min(const uint8_t *sc, int j, int *s, int *m)
{
    if (j < 4) {
        *s = sc[j] & 63;
        *m = sc[j + 4] & 63;
    } else {
        *s = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
}

/* Q4_K {d, dmin, scales[12], qs[128]}: chunk j's nibbles are bytes
 * 32 (j / 2) .. +31 of qs, low nibbles for even j; value = d sc q - dmin m. */
template <> inline __host__ __device__ void gq_decode<GQ_Q4_K>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 144;
    const int j = c % 8;
    const int shift = 4 * (j % 2);
    for (int k = 0; k < 8; k++)
        o->q[k] = (gq_ld32<4>(b + 16 + 32 * (j / 2) + 4 * k) >> shift) & 0x0F0F0F0F;
    int s, m;
    gq_k4_scale_min(b + 4, j, &s, &m);
    gq_single(o, gq_f16(b) * (float)s, -(gq_f16(b + 2) * (float)m));
}

/* Q5_K {d, dmin, scales[12], qh[32], qs[128]}: as Q4_K, plus bit j of qh
 * byte e as bit 4. */
template <> inline __host__ __device__ void gq_decode<GQ_Q5_K>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 176;
    const int j = c % 8;
    const int shift = 4 * (j % 2);
    for (int k = 0; k < 8; k++) {
        const int32_t low = (gq_ld32<4>(b + 48 + 32 * (j / 2) + 4 * k) >> shift) & 0x0F0F0F0F;
        const int32_t high = ((gq_ld32<4>(b + 16 + 4 * k) >> j) & 0x01010101) << 4;
        o->q[k] = low | high;
    }
    int s, m;
    gq_k4_scale_min(b + 4, j, &s, &m);
    gq_single(o, gq_f16(b) * (float)s, -(gq_f16(b + 2) * (float)m));
}

/* Q6_K {ql[128], qh[64], scales[16] (int8), d}: for chunk j, quarter
 * k = j % 4 of half j / 4: low 4 bits from ql bytes 64 (j/4) + 32 (k & 1) + e
 * (high nibbles when k >= 2), high 2 bits from qh bytes 32 (j/4) + e at
 * bits 2k; value = d sc (q - 32). */
template <> inline __host__ __device__ void gq_decode<GQ_Q6_K>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 210;
    const int j = c % 8, k4 = j % 4;
    const uint8_t *ql = b + 64 * (j / 4) + 32 * (k4 & 1), *qh = b + 128 + 32 * (j / 4);
    const int lshift = 4 * (k4 >> 1), hshift = 2 * k4;
    for (int k = 0; k < 8; k++) {
        const int32_t low = (gq_ld32<2>(ql + 4 * k) >> lshift) & 0x0F0F0F0F;
        const int32_t high = ((gq_ld32<2>(qh + 4 * k) >> hshift) & 0x03030303) << 4;
        o->q[k] = low | high;
    }
    const float d = gq_f16(b + 208);
    for (int h = 0; h < 2; h++) {
        o->s[h] = d * (float)(int8_t)b[192 + 2 * j + h];
        o->m[h] = -32.0f * o->s[h];
    }
}

/* IQ4_XS {d, scales_h (u16), scales_l[4], qs[128]}: chunk j is an IQ4_NL
 * block at qs + 16 j with scale d (ls - 32), ls 6 bits. */
template <> inline __host__ __device__ void gq_decode<GQ_IQ4_XS>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 136;
    const int j = c % 8;
    for (int k = 0; k < 4; k++)
        gq_levels(gq_ld32<4>(b + 8 + 16 * j + 4 * k), gq_iq4nl_book(), &o->q[k], &o->q[k + 4]);
    const int sh = b[2] | b[3] << 8;
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0xF) | ((sh >> (2 * j)) & 3) << 4;
    gq_single(o, gq_f16(b) * (float)(ls - 32), 0.0f);
}

/* The chunk's 32 values as floats: s q + m, with (d sc) already in s. */
static inline __host__ __device__ float gq_value(const gq_chunk *c, int i)
{
    const int byte = (int)(int8_t)(c->q[i / 4] >> (8 * (i % 4)));
    const int h = i / 16;
    return c->s[h] * (float)byte + c->m[h];
}

/* Unsigned values (Q4_K nibbles...) are below 128, so reading the byte as
 * signed is right for every format. */

/* Integer dot of a decoded chunk with 32 activation bytes (8 packed int32)
 * whose half sums are sum0/sum1; the result before the activation scale. */
template <int T>
static inline __host__ __device__ float gq_chunk_dot(const gq_chunk *c, const int32_t *a, int sum0, int sum1)
{
    int d0 = 0, d1 = 0;
    for (int k = 0; k < 4; k++) {
        d0 = gpu_dp4a(c->q[k], a[k], d0);
        d1 = gpu_dp4a(c->q[k + 4], a[k + 4], d1);
    }
    if (gq_traits<T>::two_scales)
        return c->s[0] * (float)d0 + c->s[1] * (float)d1 + c->m[0] * (float)sum0 + c->m[1] * (float)sum1;
    return c->s[0] * (float)(d0 + d1) + c->m[0] * (float)(sum0 + sum1);
}

/* Chunk c of an 8-bit activation row (kernels.h's gk_act: 32 bytes a
 * chunk in q, an int4 a chunk in meta): its bytes as gq_chunk_dot's 8
 * words, and its meta {d as bits, sum of values 0..15, of 16..31, -}. */
typedef struct gq_act {
    int32_t a[8];
    int4 m;
} gq_act;

static inline __device__ gq_act gq_act_chunk(const int8_t *q, const int4 *meta, int c)
{
    const int4 *p = (const int4 *)(q + 32 * c);
    const int4 a0 = p[0], a1 = p[1];
    const gq_act x = {{a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w}, meta[c]};
    return x;
}

/* The lattice and ternary formats (IQ1..IQ3, TQ1_0, TQ2_0). */
#include "quant_iq.cuh"

/* Calls F<T>::run(args...) for a runtime type id; false for a type without
 * a GPU decoder. */
#define GQ_FOR_EACH_QUANT(X)                                                                                   \
    X(GQ_Q4_0) X(GQ_Q4_1) X(GQ_Q5_0) X(GQ_Q5_1) X(GQ_Q8_0) X(GQ_Q2_K) X(GQ_Q3_K) X(GQ_Q4_K) X(GQ_Q5_K)     \
        X(GQ_Q6_K) X(GQ_IQ4_NL) X(GQ_IQ4_XS) X(GQ_MXFP4) GQ_FOR_EACH_IQ(X)

#endif
