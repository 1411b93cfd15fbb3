/*
 * vec_dot_avx2.c — the x86 kernels (vec_dot_x86.inc) for AVX2 + FMA + F16C
 * (Haswell, Zen and later), with u8 x s8 dot products from vpmaddubsw +
 * vpmaddwd.  The instruction set is chosen by the pragma below, not by
 * build flags, so the rest of the binary stays baseline x86-64 and every
 * build rule (tests, sanitizers, fuzzing) compiles this file unchanged;
 * dispatch.c calls it only when cpu_features reports all three.
 */
#include "simd.h"
#include "x86_target.h"

#if defined(__x86_64__)
#include <immintrin.h>

X86_TARGET_BEGIN(X86_SET_AVX2)

#define X86(name) avx2_##name

/* The pairs of products stay inside int16 by the callers' ranges
 * (vec_dot_x86.inc), so the saturating vpmaddubsw is exact here. */
static inline __attribute__((always_inline)) __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

#include "vec_dot_x86.inc"
#include "gemm_x86.inc"

X86_TARGET_END

const simd_kernels simd_avx2 = {
    .isa = "avx2",
    .runs_on = cpu_has_avx2_set,
    X86_KERNEL_TABLES,
    X86_GEMM_TABLE,
};

#endif
