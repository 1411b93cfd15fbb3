/*
 * vec_dot_avx512.c — the x86 kernels (vec_dot_x86.inc) with AVX-512 VNNI
 * (Ice Lake, Sapphire Rapids, Zen 4 and later): the EVEX vpdpbusd on
 * 256-bit registers (AVX512-VL) for each u8 x s8 four-product sum.  Results
 * equal the AVX2 set's (see vec_dot_x86.inc).  256-bit registers are
 * deliberate: the matrix-vector products are bound by memory, not by
 * width, and 512-bit instructions lower the clock on several Intel parts.
 */
#include "simd.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

#define X86(name) avx512_##name

static inline __attribute__((always_inline)) __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(acc, u, s);
}

#include "vec_dot_x86.inc"
#include "gemm_x86.inc"

static bool avx512_runs_on(const cpu_features *f)
{
    return f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && f->avx2 && f->fma && f->f16c;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

const simd_kernels simd_avx512 = {
    .isa = "avx512",
    .runs_on = avx512_runs_on,
    X86_KERNEL_TABLES,
    X86_GEMM_TABLE,
};

#endif
