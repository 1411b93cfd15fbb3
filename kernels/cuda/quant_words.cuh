/*
 * quant_words.cuh — gq_decode<T> for the decode kernels that read weight
 * rows straight from global memory (matvec.cu) or from a staged copy
 * (matvec_head.cu), with Q6_K read as whole aligned words.
 *
 * Q6_K super-blocks are 210 bytes, so blocks and rows are only 2-byte
 * aligned and quant.cuh's decoder reads a chunk's 32-byte runs of low and
 * high bits as 32 two-byte loads (plus 4 single bytes for the scales and
 * d).  Here each run is read as 9 aligned 4-byte words starting at or up
 * to 2 bytes before it and realigned by funnel shifts that also select the
 * chunk's nibble or bit pair: 18 word loads and 2 two-byte loads a chunk.
 * The runs start at block offsets that are multiples of 32, so both share
 * the block's skew (0 or 16 bits).  The words read stay inside the block
 * (the last run ends at byte 192 of 210; a skewed run starts 2 bytes
 * before it in the same aligned word) and the bits shifted in from the
 * next word land outside the masks, so q, s and m are gq_decode's.
 */
#ifndef HYDRA_CUDA_QUANT_WORDS_CUH
#define HYDRA_CUDA_QUANT_WORDS_CUH

#include "quant.cuh"

/* The aligned word at or below p, by pointer arithmetic: a round trip
 * through an integer hides from the compiler that p points to shared or
 * global memory, and the loads become generic ones. */
static inline __device__ const uint32_t *gq_word_below(const uint8_t *p)
{
    return (const uint32_t *)(p - ((uintptr_t)p & 3));
}

static inline __device__ void gq_decode_q6k_words(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 210;
    const int j = c % 8, k4 = j % 4;
    const unsigned skew = 8 * (unsigned)((uintptr_t)b & 3); /* 0 or 16 bits: blocks are 2-byte aligned */
    const uint32_t *ql = gq_word_below(b + 64 * (j / 4) + 32 * (k4 & 1)), *qh = gq_word_below(b + 128 + 32 * (j / 4));
    const unsigned lshift = skew + 4 * (k4 >> 1), hshift = skew + 2 * k4;
    uint32_t l[9], h[9];
#pragma unroll
    for (int k = 0; k < 9; k++) {
        l[k] = ql[k];
        h[k] = qh[k];
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const uint32_t low = __funnelshift_r(l[k], l[k + 1], lshift) & 0x0F0F0F0Fu;
        const uint32_t high = (__funnelshift_r(h[k], h[k + 1], hshift) & 0x03030303u) << 4;
        o->q[k] = (int32_t)(low | high);
    }
    const uint32_t sc = *(const uint16_t *)(b + 192 + 2 * j);
    const float d = gpu_half_bits_to_float(*(const unsigned short *)(b + 208));
#pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
        o->s[h2] = d * (float)(int8_t)(uint8_t)(sc >> (8 * h2));
        o->m[h2] = -32.0f * o->s[h2];
    }
}

/* Chunk c of a row, as gq_decode<T>. */
template <int T> static __device__ __forceinline__ void gq_decode_words(const uint8_t *row, int c, gq_chunk *o)
{
    if constexpr (T == GQ_Q6_K)
        gq_decode_q6k_words(row, c, o);
    else
        gq_decode<T>(row, c, o);
}

#endif
