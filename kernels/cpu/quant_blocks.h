/*
 * quant_blocks.h — byte layouts of the quantised blocks, as GGUF stores them
 * (the public ggml layouts), plus the small decoders every implementation of
 * a format shares: packed sub-block scales, the non-linear codebooks, the
 * E8M0 exponent.  Scalar references and SIMD kernels both build on these.
 *
 * Weight blocks are packed (alignment 1): GGUF only aligns a tensor's start
 * to general.alignment, which may be 1, so a block may sit at any address.
 * Read their f16 fields by value (b->d), never through a pointer to them.
 * Q8_K exists only as an activation buffer hydra allocates, so it keeps its
 * natural 4-byte alignment (292 bytes = 73 * 4 keeps every block aligned).
 */
#ifndef HYDRA_QUANT_BLOCKS_H
#define HYDRA_QUANT_BLOCKS_H

#include <stdint.h>

/* GGUF is little-endian and the structs below are read in place. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "hydra reads GGUF blocks in place: little-endian only");

enum {
    QK_LEGACY = 32, /* values per block of Q4_0..Q8_1, IQ4_NL, MXFP4 */
    QK_K = 256,     /* values per super-block of the K-quants and IQ4_XS */
};

#define QUANT_PACKED __attribute__((packed))

/* value = d * (nibble - 8); low nibbles hold values 0..15, high 16..31. */
typedef struct QUANT_PACKED block_q4_0 {
    uint16_t d;
    uint8_t qs[16];
} block_q4_0;

/* value = d * nibble + m. */
typedef struct QUANT_PACKED block_q4_1 {
    uint16_t d, m;
    uint8_t qs[16];
} block_q4_1;

/* 5-bit q = nibble | bit j of qh (little-endian u32) << 4; value = d * (q - 16). */
typedef struct QUANT_PACKED block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_0;

/* value = d * q + m, q as in Q5_0. */
typedef struct QUANT_PACKED block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_1;

/* value = d * q. */
typedef struct QUANT_PACKED block_q8_0 {
    uint16_t d;
    int8_t qs[32];
} block_q8_0;

/* Activation format for Q4_1/Q5_1: value = d * q; s = d * sum(q) (f16),
 * which the weights' min term multiplies. */
typedef struct QUANT_PACKED block_q8_1 {
    uint16_t d, s;
    int8_t qs[32];
} block_q8_1;

/* 16 sub-blocks of 16: scales[j] = scale (low 4 bits) | min (high 4 bits);
 * value = d * scale * q - dmin * min, q 2 bits. */
typedef struct QUANT_PACKED block_q2_K {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
} block_q2_K;

/* 16 sub-blocks of 16, 6-bit scales biased by 32; q = 2 low bits from qs,
 * minus 4 where the hmask bit is clear; value = d * (scale - 32) * q. */
typedef struct QUANT_PACKED block_q3_K {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
} block_q3_K;

/* 8 sub-blocks of 32, 6-bit scales and mins packed in 12 bytes;
 * value = d * scale * nibble - dmin * min. */
typedef struct QUANT_PACKED block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} block_q4_K;

/* As Q4_K with a fifth bit per value in qh. */
typedef struct QUANT_PACKED block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} block_q5_K;

/* 16 sub-blocks of 16, int8 scales; q = 4 bits from ql | 2 bits from qh << 4,
 * value = d * scale * (q - 32). */
typedef struct QUANT_PACKED block_q6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} block_q6_K;

/* Activation format for the K-quants and IQ4_XS: value = d * q, and bsums[j]
 * = sum of qs[16j .. 16j+15], which the weights' min terms multiply. */
typedef struct block_q8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
} block_q8_K;

/* value = d * quant_iq4nl_values[nibble], nibbles ordered as in Q4_0. */
typedef struct QUANT_PACKED block_iq4_nl {
    uint16_t d;
    uint8_t qs[16];
} block_iq4_nl;

/* 8 sub-blocks of 32 with 6-bit scales (low 4 bits in scales_l, high 2 in
 * scales_h) biased by 32; each sub-block is laid out as an IQ4_NL block. */
typedef struct QUANT_PACKED block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
} block_iq4_xs;

/* OCP MX FP4: shared exponent e (E8M0), 32 E2M1 values as nibbles ordered as
 * in Q4_0.  value = quant_mxfp4_values[nibble] * e8m0_half(e). */
typedef struct QUANT_PACKED block_mxfp4 {
    uint8_t e;
    uint8_t qs[16];
} block_mxfp4;

_Static_assert(sizeof(block_q4_0) == 18, "Q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "Q4_1 layout");
_Static_assert(sizeof(block_q5_0) == 22, "Q5_0 layout");
_Static_assert(sizeof(block_q5_1) == 24, "Q5_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 layout");
_Static_assert(sizeof(block_q8_1) == 36, "Q8_1 layout");
_Static_assert(sizeof(block_q2_K) == 84, "Q2_K layout");
_Static_assert(sizeof(block_q3_K) == 110, "Q3_K layout");
_Static_assert(sizeof(block_q4_K) == 144, "Q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "Q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "Q6_K layout");
_Static_assert(sizeof(block_q8_K) == 292, "Q8_K layout");
_Static_assert(sizeof(block_iq4_nl) == 18, "IQ4_NL layout");
_Static_assert(sizeof(block_iq4_xs) == 136, "IQ4_XS layout");
_Static_assert(sizeof(block_mxfp4) == 17, "MXFP4 layout");

/* The IQ4_NL/IQ4_XS codebook: 16 non-uniform levels, ascending. */
extern const int8_t quant_iq4nl_values[16];
/* FP4 E2M1 values times 2 (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives),
 * so that they are integers; e8m0_half() supplies the matching 1/2. */
extern const int8_t quant_mxfp4_values[16];

/* 2^(e - 128) as a float: the E8M0 scale 2^(e - 127) times the 1/2 that
 * quant_mxfp4_values carries.  e = 0 and 1 give float subnormals. */
static inline float e8m0_half(uint8_t e)
{
    union { uint32_t u; float f; } v;
    v.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/* Q4_K/Q5_K sub-block j (0..7): 6-bit scale and min.  Bytes 0..3 hold scales
 * 0..3, bytes 4..7 mins 0..3 (low 6 bits each); sub-blocks 4..7 keep their
 * low 4 bits in bytes 8..11 (scale low nibble, min high nibble) and their
 * high 2 bits in the top bits of bytes 0..7. */
static inline void q4k_scale_min(const uint8_t *scales, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

/* Q3_K sub-block j (0..15): signed scale in -32..31.  Low 4 bits: byte j's
 * low nibble for j < 8, byte j-8's high nibble otherwise; high 2 bits: byte
 * 8 + j%4, bits 2*(j/4). */
static inline int q3k_scale(const uint8_t *scales, int j)
{
    int lo = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
    int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* IQ4_XS sub-block j (0..7): signed scale in -32..31. */
static inline int iq4xs_scale(const block_iq4_xs *b, int j)
{
    int lo = (b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
    int hi = (b->scales_h >> (2 * j)) & 3;
    return (lo | hi << 4) - 32;
}

#endif
