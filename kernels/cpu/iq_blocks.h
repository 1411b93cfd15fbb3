/*
 * iq_blocks.h — byte layouts of the lattice (IQ1..IQ3) and ternary (TQ)
 * super-blocks, as GGUF stores them (the public ggml layouts), and the
 * decoders of their packed fields that every implementation shares.  The
 * grids the indices point into are in iq_grids.h.  All are 256 values per
 * super-block, packed like quant_blocks.h's (alignment 1).
 *
 * Sub-block scales are small odd integers: the formats store l and mean
 * 2l + 1 times a power-of-two fraction of d, so every value is
 *   d * fraction * (2l + 1) * grid coordinate * sign      (IQ2, IQ3)
 *   d * (2l + 1) * (grid coordinate + delta), delta = +-1/8 (IQ1)
 *   d * (trit - 1)                                          (TQ)
 * which lets the dot products sum integers per sub-block (quant_iq.c).
 */
#ifndef HYDRA_IQ_BLOCKS_H
#define HYDRA_IQ_BLOCKS_H

#include "quant_blocks.h"

#include <stdint.h>
#include <string.h>

/* 8 sub-blocks of 32 (qs is ggml's u16[32], kept as bytes); sub-block j
 * uses 8 bytes of qs, read as two little-endian u32: the first holds 4 grid indices (8 bits each, one per 8
 * values, into iq2xxs_grid), the second 4 sign indices (7 bits each, into
 * iq_ksigns) in bits 0..27 and the scale l in bits 28..31.
 * value = d * (0.5 + l) / 4 * grid * sign. */
typedef struct QUANT_PACKED block_iq2_xxs {
    uint16_t d;
    uint8_t qs[64];
} block_iq2_xxs;

/* Per 8 values one little-endian u16 of qs: grid index (9 bits, into iq2xs_grid) | sign
 * index << 9.  scales[j]: sub-block j's two 16-value halves (low nibble
 * first).  value = d * (0.5 + l) / 4 * grid * sign. */
typedef struct QUANT_PACKED block_iq2_xs {
    uint16_t d;
    uint8_t qs[64];
    uint8_t scales[8];
} block_iq2_xs;

/* qs[0..31]: low 8 bits of the grid index (10 bits, into iq2s_grid) of each
 * 8 values; qs[32..63]: their 8 sign bits, unconstrained; qh[j]: the high 2
 * bits of sub-block j's four indices (bits 2k, 2k+1 for group k); scales as
 * IQ2_XS.  value = d * (0.5 + l) / 4 * grid * sign. */
typedef struct QUANT_PACKED block_iq2_s {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t scales[8];
} block_iq2_s;

/* qs[0..63]: grid index (into iq3xxs_grid) of each 4 values; qs[64..95]:
 * sub-block j's u32 of 4 sign indices (7 bits each, per 8 values) and scale l
 * in bits 28..31.  value = d * (0.5 + l) / 2 * grid * sign. */
typedef struct QUANT_PACKED block_iq3_xxs {
    uint16_t d;
    uint8_t qs[96];
} block_iq3_xxs;

/* qs: low 8 bits of the grid index (9 bits, into iq3s_grid) of each 4 values;
 * qh[j]: bit k = the ninth bit of sub-block j's index k; signs: one bit per
 * value, unconstrained; scales[j/2]: sub-block j's l (low nibble for even j).
 * value = d * (1 + 2l) * grid * sign. */
typedef struct QUANT_PACKED block_iq3_s {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t signs[32];
    uint8_t scales[4];
} block_iq3_s;

/* qs: low 8 bits of the grid index (11 bits, into iq1s_grid) of each 8
 * values; qh[j] for sub-block j: bits 3k..3k+2 the high bits of index k,
 * bits 12..14 the scale l, bit 15 the delta's sign (set = -1/8).
 * value = d * (2l + 1) * (grid + delta). */
typedef struct QUANT_PACKED block_iq1_s {
    uint16_t d;
    uint8_t qs[32];
    uint16_t qh[8];
} block_iq1_s;

/* qs as IQ1_S; qh[2j + h] for sub-block j, groups 2h and 2h + 1: low nibble
 * = high 3 bits of the first's index | delta sign << 3, high nibble the
 * second's.  scales, read as four little-endian u16 s[k]: 3-bit scales l of
 * 16-value halves - s[k] bits 0..11 hold halves 4k..4k+3 - and the top
 * nibbles of s[0..3] are d's f16 bits 0..3, 4..7, 8..11, 12..15.
 * value = d * (2l + 1) * (grid + delta). */
typedef struct QUANT_PACKED block_iq1_m {
    uint8_t qs[32];
    uint8_t qh[16];
    uint8_t scales[8];
} block_iq1_m;

/* Trits t in 0..2, value = d * (t - 1).  qs[0..31] hold 5 trits each (values
 * 32n + m of byte m, n = 0..4), qs[32..47] 5 each (values 160 + 16n + m),
 * qh[0..3] 4 each (values 240 + 4n + m); a byte holding trits t_0..t_4 (t_4
 * = 0 in qh) is ceil(256 * sum t_n 3^(4-n) / 243), so that trit n is
 * ((byte * 3^n mod 256) * 3) >> 8. */
typedef struct QUANT_PACKED block_tq1_0 {
    uint8_t qs[48];
    uint8_t qh[4];
    uint16_t d;
} block_tq1_0;

/* 2-bit t, value = d * (t - 1); laid out as Q2_K's quants: value e in byte
 * 32 (e / 128) + e % 32 at bits 2 ((e % 128) / 32). */
typedef struct QUANT_PACKED block_tq2_0 {
    uint8_t qs[64];
    uint16_t d;
} block_tq2_0;

_Static_assert(sizeof(block_iq2_xxs) == 66, "IQ2_XXS layout");
_Static_assert(sizeof(block_iq2_xs) == 74, "IQ2_XS layout");
_Static_assert(sizeof(block_iq2_s) == 82, "IQ2_S layout");
_Static_assert(sizeof(block_iq3_xxs) == 98, "IQ3_XXS layout");
_Static_assert(sizeof(block_iq3_s) == 110, "IQ3_S layout");
_Static_assert(sizeof(block_iq1_s) == 50, "IQ1_S layout");
_Static_assert(sizeof(block_iq1_m) == 56, "IQ1_M layout");
_Static_assert(sizeof(block_tq1_0) == 54, "TQ1_0 layout");
_Static_assert(sizeof(block_tq2_0) == 66, "TQ2_0 layout");

/* IQ1_S/IQ1_M delta magnitude, 1/8: stored as grid * 8 +- 1 in integer
 * form, with the scale taking the 1/8. */
#define IQ1_DELTA 0.125f

static inline uint32_t iq_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint16_t iq_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* IQ1_M's f16 d, gathered from the top nibbles of its four scale words. */
static inline uint16_t iq1m_d_bits(const block_iq1_m *b)
{
    uint16_t h = 0;
    for (int k = 0; k < 4; k++)
        h = (uint16_t)(h | (iq_u16(b->scales + 2 * k) >> 12) << (4 * k));
    return h;
}

/* IQ1_M's scale l (0..7) of 16-value half h (0..15). */
static inline int iq1m_scale(const block_iq1_m *b, int h)
{
    return (iq_u16(b->scales + 2 * (h / 4)) >> (3 * (h % 4))) & 7;
}

/* TQ1_0: trit n (0..4) of a packed byte. */
static inline int tq1_trit(uint8_t byte, int n)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t q = (uint8_t)(byte * pow3[n]);
    return (q * 3) >> 8;
}

#endif
