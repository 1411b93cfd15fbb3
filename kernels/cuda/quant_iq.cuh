/*
 * quant_iq.cuh — the lattice formats (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S) and the ternary ones (TQ1_0, TQ2_0) in quant.cuh's
 * scheme: traits and chunk decoders.  Included by quant.cuh (after its
 * helpers), not on its own.  Block layouts: kernels/cpu/iq_blocks.h.
 *
 * Every chunk decodes to exactly what the CPU decoders (quant_iq.c,
 * quant_tq.c) put in quant_bk for those 32 values:
 *
 *   format    s (computed in the CPU's order)   q (int8)
 *   IQ2_*     (d * 0.125) * (2l + 1)            grid * sign
 *   IQ3_XXS   (d * 0.25) * (2l + 1)             grid * sign
 *   IQ3_S     d * (2l + 1)                      grid * sign
 *   IQ1_*     (d * 0.125) * (2l + 1)            8 grid +- 1
 *   TQ*       d                                 t - 1
 *
 * and m = -0.0f, so gq_value's s q + m is the CPU's (d sc) q - 0 bit for
 * bit: adding -0 leaves every float unchanged, a -0 product included
 * (adding +0 would turn it into +0).  The integer dot products are then
 * exact, as for the K-quants.
 *
 * The grids are the CPU's generated tables (kernels/cpu/iq_grids.h), the
 * same header compiled twice: into device global memory for the kernels,
 * and into host memory for the host-side checks of these same decoders
 * (tests/test_cuda_quant.c).  Global rather than __constant__ memory:
 * lanes index the grids at random, and constant memory serialises a
 * warp's distinct addresses.
 */
#ifndef HYDRA_CUDA_QUANT_IQ_CUH
#define HYDRA_CUDA_QUANT_IQ_CUH

#include <stdint.h>

enum {
    GQ_IQ2_XXS = 16, GQ_IQ2_XS = 17, GQ_IQ3_XXS = 18, GQ_IQ1_S = 19, GQ_IQ3_S = 21, GQ_IQ2_S = 22,
    GQ_IQ1_M = 29, GQ_TQ1_0 = 34, GQ_TQ2_0 = 35,
};

namespace gq_grid_dev {
#define IQ_GRID_TABLE static const __device__
#include "../cpu/iq_grids.h"
#undef IQ_GRID_TABLE
} // namespace gq_grid_dev
#undef HYDRA_IQ_GRIDS_H
namespace gq_grid_host {
#include "../cpu/iq_grids.h"
#undef IQ_GRID_TABLE
} // namespace gq_grid_host

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define GQ_GRID(name) gq_grid_dev::name
#else
#define GQ_GRID(name) gq_grid_host::name
#endif

/* All nine have 256-value super-blocks; alignment is what the block size
 * allows for 4-byte loads (IQ1_M's 56 bytes keep 4). */
#define GQ_IQ_TRAITS(T, n_bytes, align, two)                                                                  \
    template <> struct gq_traits<T> {                                                                       \
        enum { block = 256, bytes = n_bytes, alignment = align, two_scales = two };                         \
    };
GQ_IQ_TRAITS(GQ_IQ2_XXS, 66, 2, 0)
GQ_IQ_TRAITS(GQ_IQ2_XS, 74, 2, 1)
GQ_IQ_TRAITS(GQ_IQ2_S, 82, 2, 1)
GQ_IQ_TRAITS(GQ_IQ3_XXS, 98, 2, 0)
GQ_IQ_TRAITS(GQ_IQ3_S, 110, 2, 0)
GQ_IQ_TRAITS(GQ_IQ1_S, 50, 2, 0)
GQ_IQ_TRAITS(GQ_IQ1_M, 56, 4, 1)
GQ_IQ_TRAITS(GQ_TQ1_0, 54, 2, 0)
GQ_IQ_TRAITS(GQ_TQ2_0, 66, 2, 0)
#undef GQ_IQ_TRAITS

#define GQ_FOR_EACH_IQ(X)                                                                                     \
    X(GQ_IQ2_XXS) X(GQ_IQ2_XS) X(GQ_IQ2_S) X(GQ_IQ3_XXS) X(GQ_IQ3_S) X(GQ_IQ1_S) X(GQ_IQ1_M) X(GQ_TQ1_0)         \
        X(GQ_TQ2_0)

/* ---- in-register helpers (4 values per int32, as gq_chunk) ------------- */

/* 4 grid magnitudes g (bytes of 1..127) with the signs in bits 0..3 of s
 * (bit i negates byte i).  bits * 0xFF is 0xFF in the negated bytes, and
 * there (g ^ 0xFF) + 1 = -g; since g >= 1, ~g + 1 <= 0xFF, so no carry
 * crosses into the next byte (every grid level is >= 1: iq_grids.h). */
static inline __host__ __device__ int32_t gq_signed4(uint32_t g, uint32_t s)
{
    const uint32_t bits = ((s & 0xFu) * 0x00204081u) & 0x01010101u; /* bit i of s -> bit 8i */
    return (int32_t)((g ^ (bits * 0xFFu)) + bits);
}

/* 8 magnitudes (one 8-coordinate grid point) with a sign byte. */
static inline __host__ __device__ void gq_signed8(uint64_t g, uint32_t s, int32_t *q)
{
    q[0] = gq_signed4((uint32_t)g, s);
    q[1] = gq_signed4((uint32_t)(g >> 32), s >> 4);
}

/* The 8 sign bits of a 7-bit sign index (bit 7 keeps the count of negatives
 * even: iq_grids.h). */
static inline __host__ __device__ uint32_t gq_ksign(uint32_t idx7)
{
    return GQ_GRID(iq_ksigns)[idx7 & 127];
}

/* IQ1: 4 grid coordinates g (int8 -1, 0, 1) to 8 g + 1, or 8 g - 1 when
 * neg, without carries between bytes: 8 g is g << 3 with the 3 bits that
 * came from the byte below cleared, so 8 g + 1 is 8 g | 1; and
 * 8 g - 1 = ~(8 (-g)) (~y = -y - 1), where -g swaps 0x01 and 0xFF, i.e.
 * flips bits 1..7 of the bytes whose bit 0 is set. */
static inline __host__ __device__ int32_t gq_iq1_q4(uint32_t g, bool neg)
{
    const uint32_t plus = ((g << 3) & 0xF8F8F8F8u) | 0x01010101u;
    const uint32_t minus_g = g ^ ((g & 0x01010101u) * 0xFEu);
    const uint32_t minus = ~((minus_g << 3) & 0xF8F8F8F8u);
    return (int32_t)(neg ? minus : plus);
}

static inline __host__ __device__ void gq_iq1_q8(uint64_t g, bool neg, int32_t *q)
{
    q[0] = gq_iq1_q4((uint32_t)g, neg);
    q[1] = gq_iq1_q4((uint32_t)(g >> 32), neg);
}

/* Bytes t in 0..3 to t - 1: t + 0x7F stays below 0x100, and flipping its
 * top bit subtracts 128. */
static inline __host__ __device__ int32_t gq_minus1(uint32_t t)
{
    return (int32_t)((t + 0x7F7F7F7Fu) ^ 0x80808080u);
}

static inline __host__ __device__ uint32_t gq_ld16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

/* Scales of odd multiples: s = d_unit * (2l + 1), m = -0 (see the top). */
static inline __host__ __device__ void gq_odd_scale(gq_chunk *o, float d_unit, uint32_t l)
{
    gq_single(o, d_unit * (float)(2 * (int)l + 1), -0.0f);
}

static inline __host__ __device__ void gq_odd_scales2(gq_chunk *o, float d_unit, uint32_t l0, uint32_t l1)
{
    o->s[0] = d_unit * (float)(2 * (int)l0 + 1);
    o->s[1] = d_unit * (float)(2 * (int)l1 + 1);
    o->m[0] = o->m[1] = -0.0f;
}

/* ---- decoders: chunk c is sub-block j = c % 8 of super-block c / 8 ------ */

/* IQ2_XXS {d, qs[64]}: sub-block j is 8 bytes at qs + 8j, a u32 of 4 grid
 * indices (one per 8 values) and a u32 of 4 sign indices (7 bits each) with
 * the scale l in bits 28..31. */
template <> inline __host__ __device__ void gq_decode<GQ_IQ2_XXS>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 66, *sub = b + 2 + 8 * (c % 8);
    const uint32_t idx = (uint32_t)gq_ld32<2>(sub), aux = (uint32_t)gq_ld32<2>(sub + 4);
    for (int k = 0; k < 4; k++)
        gq_signed8(GQ_GRID(iq2xxs_grid)[(idx >> (8 * k)) & 0xFF], gq_ksign(aux >> (7 * k)), &o->q[2 * k]);
    gq_odd_scale(o, gq_f16(b) * 0.125f, aux >> 28);
}

/* IQ2_XS {d, qs[64], scales[8]}: a u16 per 8 values, grid index (9 bits)
 * | sign index << 9; scales[j] holds the two 16-value halves' l. */
template <> inline __host__ __device__ void gq_decode<GQ_IQ2_XS>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 74;
    const int j = c % 8;
    for (int h = 0; h < 2; h++) {
        const uint32_t two = (uint32_t)gq_ld32<2>(b + 2 + 8 * j + 4 * h); /* groups 2h, 2h + 1 */
        for (int k = 0; k < 2; k++) {
            const uint32_t v = (two >> (16 * k)) & 0xFFFF;
            gq_signed8(GQ_GRID(iq2xs_grid)[v & 511], gq_ksign(v >> 9), &o->q[4 * h + 2 * k]);
        }
    }
    const uint32_t sc = b[66 + j];
    gq_odd_scales2(o, gq_f16(b) * 0.125f, sc & 0xF, sc >> 4);
}

/* IQ2_S {d, qs[64], qh[8], scales[8]}: qs[4j + k] the low 8 bits of group
 * k's grid index (10 bits), qh[j] bits 2k..2k+1 its high bits, qs[32 + 4j + k]
 * its 8 sign bits; scales as IQ2_XS. */
template <> inline __host__ __device__ void gq_decode<GQ_IQ2_S>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 82;
    const int j = c % 8;
    const uint32_t lo = (uint32_t)gq_ld32<2>(b + 2 + 4 * j), signs = (uint32_t)gq_ld32<2>(b + 34 + 4 * j);
    const uint32_t qh = b[66 + j];
    for (int k = 0; k < 4; k++) {
        const uint32_t idx = ((lo >> (8 * k)) & 0xFF) | ((qh >> (2 * k)) & 3) << 8;
        gq_signed8(GQ_GRID(iq2s_grid)[idx], signs >> (8 * k), &o->q[2 * k]);
    }
    const uint32_t sc = b[74 + j];
    gq_odd_scales2(o, gq_f16(b) * 0.125f, sc & 0xF, sc >> 4);
}

/* IQ3_XXS {d, qs[96]}: qs[8j + k] the grid index of values 4k..4k+3 of
 * sub-block j; qs + 64 + 4j a u32 of 4 sign indices (one per 8 values)
 * and l in bits 28..31. */
template <> inline __host__ __device__ void gq_decode<GQ_IQ3_XXS>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 98;
    const int j = c % 8;
    const uint32_t aux = (uint32_t)gq_ld32<2>(b + 66 + 4 * j);
    for (int h = 0; h < 2; h++) {
        const uint32_t idx = (uint32_t)gq_ld32<2>(b + 2 + 8 * j + 4 * h); /* points 4h..4h+3 */
        for (int k = 0; k < 2; k++) {
            const uint32_t s = gq_ksign(aux >> (7 * (2 * h + k)));
            o->q[4 * h + 2 * k] = gq_signed4(GQ_GRID(iq3xxs_grid)[(idx >> (16 * k)) & 0xFF], s);
            o->q[4 * h + 2 * k + 1] = gq_signed4(GQ_GRID(iq3xxs_grid)[(idx >> (16 * k + 8)) & 0xFF], s >> 4);
        }
    }
    gq_odd_scale(o, gq_f16(b) * 0.25f, aux >> 28);
}

/* IQ3_S {d, qs[64], qh[8], signs[32], scales[4]}: point k of sub-block j
 * has index qs[8j + k] | bit k of qh[j] << 8, its 4 sign bits in nibble k
 * of the u32 at signs + 4j; l in nibble j % 2 of scales[j / 2]. */
template <> inline __host__ __device__ void gq_decode<GQ_IQ3_S>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 110;
    const int j = c % 8;
    const uint32_t qh = b[66 + j], signs = (uint32_t)gq_ld32<2>(b + 74 + 4 * j);
    for (int h = 0; h < 2; h++) {
        const uint32_t lo = (uint32_t)gq_ld32<2>(b + 2 + 8 * j + 4 * h);
        for (int k = 0; k < 4; k++) {
            const int p = 4 * h + k;
            const uint32_t idx = ((lo >> (8 * k)) & 0xFF) | ((qh >> p) & 1) << 8;
            o->q[p] = gq_signed4(GQ_GRID(iq3s_grid)[idx], signs >> (4 * p));
        }
    }
    gq_odd_scale(o, gq_f16(b), (b[106 + j / 2] >> (4 * (j % 2))) & 0xF);
}

/* IQ1_S {d, qs[32], qh[8] (u16)}: group k of sub-block j has index
 * qs[4j + k] | bits 3k..3k+2 of qh[j] << 8; qh[j] bits 12..14 are l, bit 15
 * the delta's sign. */
template <> inline __host__ __device__ void gq_decode<GQ_IQ1_S>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 50;
    const int j = c % 8;
    const uint32_t lo = (uint32_t)gq_ld32<2>(b + 2 + 4 * j), qh = gq_ld16(b + 34 + 2 * j);
    for (int k = 0; k < 4; k++) {
        const uint32_t idx = ((lo >> (8 * k)) & 0xFF) | ((qh >> (3 * k)) & 7) << 8;
        gq_iq1_q8(GQ_GRID(iq1s_grid)[idx], (qh >> 15) != 0, &o->q[2 * k]);
    }
    gq_odd_scale(o, gq_f16(b) * 0.125f, (qh >> 12) & 7);
}

/* IQ1_M {qs[32], qh[16], scales[8]}: group k of sub-block j has index
 * qs[4j + k] | (nibble k of the u16 at qh + 2j) & 7 << 8, that nibble's
 * bit 3 the delta's sign; the scale words w0..w3 hold the 3-bit l of the
 * 16-value halves (half 2j + h: bits 3 (2 (j % 2) + h) of w[j / 2]) and
 * d's f16 bits in their top nibbles. */
template <> inline __host__ __device__ void gq_decode<GQ_IQ1_M>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 56;
    const int j = c % 8;
    const uint32_t lo = (uint32_t)gq_ld32<4>(b + 4 * j), qh = gq_ld16(b + 32 + 2 * j);
    for (int k = 0; k < 4; k++) {
        const uint32_t nib = (qh >> (4 * k)) & 0xF;
        const uint32_t idx = ((lo >> (8 * k)) & 0xFF) | (nib & 7) << 8;
        gq_iq1_q8(GQ_GRID(iq1s_grid)[idx], (nib >> 3) != 0, &o->q[2 * k]);
    }
    const uint32_t w01 = (uint32_t)gq_ld32<4>(b + 48), w23 = (uint32_t)gq_ld32<4>(b + 52);
    const uint32_t d_bits = ((w01 >> 12) & 0xF) | ((w01 >> 28) << 4) | ((w23 >> 12) & 0xF) << 8 | (w23 >> 28) << 12;
    const uint32_t w = ((j < 4 ? w01 : w23) >> (16 * ((j / 2) % 2))) & 0xFFFF; /* w[j / 2] */
    const int sh = 6 * (j % 2);
    gq_odd_scales2(o, gpu_half_bits_to_float((unsigned short)d_bits) * 0.125f, (w >> sh) & 7, (w >> (sh + 3)) & 7);
}

/* TQ1_0 {qs[48], qh[4], d}: trit n of a byte is ((byte 3^n mod 256) 3) >> 8;
 * value e's byte and n (iq_blocks.h): e < 160: byte e % 32, n = e / 32;
 * e < 240: byte 32 + (e - 160) % 16, n = (e - 160) / 16; else byte
 * 48 + (e - 240) % 4, n = (e - 240) / 4. */
static inline __host__ __device__ uint32_t gq_trit(const uint8_t *run, int e)
{
    int byte, n;
    if (e < 160)
        byte = e % 32, n = e / 32;
    else if (e < 240)
        byte = 32 + (e - 160) % 16, n = (e - 160) / 16;
    else
        byte = 48 + (e - 240) % 4, n = (e - 240) / 4;
    const uint32_t pow3 = (uint32_t)(0x511B090301ull >> (8 * n)) & 0xFF; /* 1, 3, 9, 27, 81 */
    return ((((uint32_t)run[byte] * pow3) & 0xFF) * 3) >> 8;
}

template <> inline __host__ __device__ void gq_decode<GQ_TQ1_0>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 54;
    const int e0 = 32 * (c % 8);
    for (int k = 0; k < 8; k++) {
        uint32_t t = 0;
        for (int i = 0; i < 4; i++)
            t |= gq_trit(b, e0 + 4 * k + i) << (8 * i);
        o->q[k] = gq_minus1(t);
    }
    gq_single(o, gq_f16(b + 52), -0.0f);
}

/* TQ2_0 {qs[64], d}: Q2_K's quant layout, value e of chunk j in byte
 * 32 (j / 4) + e at bits 2 (j % 4). */
template <> inline __host__ __device__ void gq_decode<GQ_TQ2_0>(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 66;
    const int j = c % 8, shift = 2 * (j % 4);
    for (int k = 0; k < 8; k++)
        o->q[k] = gq_minus1(((uint32_t)gq_ld32<2>(b + 32 * (j / 4) + 4 * k) >> shift) & 0x03030303u);
    gq_single(o, gq_f16(b + 64), -0.0f);
}

#endif
