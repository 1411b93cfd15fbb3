/*
 * vec_dot_iq_avx512.c — the lattice and ternary formats' kernels
 * (vec_dot_iq_x86.inc) compiled for AVX-512 F/BW/VL/VNNI: the same 256-bit
 * code with EVEX encodings (32 vector registers for the unrolled
 * sub-blocks), sign bits applied under mask registers and vpdpwssd for the
 * scaled sums (IQ_X86_AVX512).  Results equal the AVX2 set's.  256-bit
 * registers on purpose, as in vec_dot_avx512.c.
 */
#include "vec_dot_iq.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

#define IQ_X86_AVX512 1
#include "vec_dot_iq_x86.inc"

static bool iq_avx512_runs_on(const cpu_features *f)
{
    return f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && f->avx2 && f->fma && f->f16c;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

const simd_kernels simd_iq_avx512 = {
    .isa = "avx512-iq",
    .runs_on = iq_avx512_runs_on,
    IQ_X86_KERNEL_TABLES,
};

#endif
