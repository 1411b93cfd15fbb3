/*
 * vec_dot_avx512.c — the x86 kernels (vec_dot_x86.inc) with AVX-512 VNNI
 * (Ice Lake, Sapphire Rapids, Zen 4 and later): the EVEX vpdpbusd on
 * 256-bit registers (AVX512-VL) for each u8 x s8 four-product sum.  Results
 * equal the AVX2 set's (see vec_dot_x86.inc).  256-bit registers are
 * deliberate: the matrix-vector products are bound by memory, not by
 * width, and 512-bit instructions lower the clock on several Intel parts.
 */
#include "simd.h"
#include "x86_target.h"

#if defined(__x86_64__)
#include <immintrin.h>

X86_TARGET_BEGIN(X86_SET_AVX512)

#define X86(name) avx512_##name

static inline __attribute__((always_inline)) __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(acc, u, s);
}

#include "vec_dot_x86.inc"
#include "gemm_x86.inc"

X86_TARGET_END

const simd_kernels simd_avx512 = {
    .isa = "avx512",
    .runs_on = cpu_has_avx512_set,
    X86_KERNEL_TABLES,
    X86_GEMM_TABLE,
};

#endif
