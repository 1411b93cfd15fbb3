/*
 * vec_dot_iq_avx2.c — the lattice and ternary formats' kernels
 * (vec_dot_iq_x86.inc) for AVX2 + FMA + F16C.  As vec_dot_avx2.c, the
 * instruction set comes from the pragma, not from build flags; dispatch.c
 * calls these only where cpu_features reports all three.
 */
#include "vec_dot_iq.h"
#include "x86_target.h"

#if defined(__x86_64__)

X86_TARGET_BEGIN(X86_SET_AVX2)

#include "vec_dot_iq_x86.inc"

X86_TARGET_END

const simd_kernels simd_iq_avx2 = {
    .isa = "avx2-iq",
    .runs_on = cpu_has_avx2_set,
    IQ_X86_KERNEL_TABLES,
};

#endif
