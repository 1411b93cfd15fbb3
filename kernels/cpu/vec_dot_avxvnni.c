/*
 * vec_dot_avxvnni.c — the x86 kernels (vec_dot_x86.inc) with the
 * VEX-encoded AVX-VNNI vpdpbusd (Alder Lake, Sapphire Rapids, Zen 5): one
 * instruction for each u8 x s8 four-product sum instead of two.  Results
 * equal the AVX2 set's (see vec_dot_x86.inc).
 */
#include "simd.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avxvnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avxvnni,avx2,fma,f16c")
#endif

#define X86(name) avxvnni_##name

static inline __attribute__((always_inline)) __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_dpbusd_avx_epi32(acc, u, s);
}

#include "vec_dot_x86.inc"
#include "gemm_x86.inc"

static bool avxvnni_runs_on(const cpu_features *f)
{
    return f->avx_vnni && f->avx2 && f->fma && f->f16c;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

const simd_kernels simd_avxvnni = {
    .isa = "avxvnni",
    .runs_on = avxvnni_runs_on,
    X86_KERNEL_TABLES,
    X86_GEMM_TABLE,
};

#endif
