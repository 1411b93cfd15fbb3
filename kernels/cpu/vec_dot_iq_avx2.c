/*
 * vec_dot_iq_avx2.c — the lattice and ternary formats' kernels
 * (vec_dot_iq_x86.inc) for AVX2 + FMA + F16C.  As vec_dot_avx2.c, the
 * instruction set comes from the pragma, not from build flags; dispatch.c
 * calls these only where cpu_features reports all three.
 */
#include "vec_dot_iq.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include "vec_dot_iq_x86.inc"

static bool iq_avx2_runs_on(const cpu_features *f)
{
    return f->avx2 && f->fma && f->f16c;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

const simd_kernels simd_iq_avx2 = {
    .isa = "avx2-iq",
    .runs_on = iq_avx2_runs_on,
    IQ_X86_KERNEL_TABLES,
};

#endif
