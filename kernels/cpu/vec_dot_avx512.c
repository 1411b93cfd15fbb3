/*
 * vec_dot_avx512.c — AVX-512 F/BW/VL + VNNI kernels (Ice Lake, Sapphire
 * Rapids, Zen 4 and later).  Compiled for those instructions by the pragma
 * below, not by build flags; dispatch.c calls it only when cpu_features
 * reports every one of them.
 */
#include "simd.h"

#if defined(__x86_64__)

static bool avx512_runs_on(const cpu_features *f)
{
    return f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && f->fma && f->f16c;
}

const simd_kernels simd_avx512 = {
    .isa = "avx512",
    .runs_on = avx512_runs_on,
};

#endif
