/*
 * vec_dot_avxvnni.c — the x86 kernels (vec_dot_x86.inc) with the
 * VEX-encoded AVX-VNNI vpdpbusd (Alder Lake, Sapphire Rapids, Zen 5): one
 * instruction for each u8 x s8 four-product sum instead of two.  Results
 * equal the AVX2 set's (see vec_dot_x86.inc).
 */
#include "simd.h"
#include "x86_target.h"

#if defined(__x86_64__)
#include <immintrin.h>

X86_TARGET_BEGIN(X86_SET_AVXVNNI)

#define X86(name) avxvnni_##name

static inline __attribute__((always_inline)) __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_dpbusd_avx_epi32(acc, u, s);
}

#include "vec_dot_x86.inc"
#include "gemm_x86.inc"

X86_TARGET_END

const simd_kernels simd_avxvnni = {
    .isa = "avxvnni",
    .runs_on = cpu_has_avxvnni_set,
    X86_KERNEL_TABLES,
    X86_GEMM_TABLE,
};

#endif
