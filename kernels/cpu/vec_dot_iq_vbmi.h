/*
 * vec_dot_iq_vbmi.h — what the VBMI-tier IQ files (vec_dot_iq_vbmi.c,
 * vec_dot_iq1_vbmi.c) share: the sum of two super-blocks' 16 int32 lanes
 * in one reduction.  Include after <immintrin.h> and inside the file's
 * X86_TARGET_BEGIN(X86_SET_AVX512VBMI) region.
 */
#ifndef HYDRA_VEC_DOT_IQ_VBMI_H
#define HYDRA_VEC_DOT_IQ_VBMI_H

/* The totals of lanes s0 and s1 (each the exact integer total of one
 * super-block), as floats (the int32 -> float rounding of the other sets):
 * s0's in float 0 of the result, s1's in float 8.  Shuffling both at once
 * takes 9 vector ops for two super-blocks, against 8 for one alone. */
static inline __attribute__((always_inline)) __m512 vbmi_totals2(__m512i s0, __m512i s1)
{
    /* 128-bit lanes [s0 0 + 2, s0 1 + 3, s1 0 + 2, s1 1 + 3], then [s0, s0, s1, s1] */
    __m512i h = _mm512_add_epi32(_mm512_shuffle_i64x2(s0, s1, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_i64x2(s0, s1, _MM_SHUFFLE(3, 2, 3, 2)));
    h = _mm512_add_epi32(h, _mm512_shuffle_i64x2(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
    h = _mm512_add_epi32(h, _mm512_shuffle_epi32(h, (_MM_PERM_ENUM)0x4E));
    h = _mm512_add_epi32(h, _mm512_shuffle_epi32(h, (_MM_PERM_ENUM)0xB1));
    return _mm512_cvtepi32_ps(h);
}

#endif
