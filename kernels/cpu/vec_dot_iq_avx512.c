/*
 * vec_dot_iq_avx512.c — the lattice and ternary formats' kernels
 * (vec_dot_iq_x86.inc) compiled for AVX-512 F/BW/VL/VNNI: the same 256-bit
 * code with EVEX encodings (32 vector registers for the unrolled
 * sub-blocks), sign bits applied under mask registers and vpdpwssd for the
 * scaled sums (IQ_X86_AVX512).  Results equal the AVX2 set's.  256-bit
 * registers on purpose, as in vec_dot_avx512.c.
 */
#include "vec_dot_iq.h"
#include "x86_target.h"

#if defined(__x86_64__)

X86_TARGET_BEGIN(X86_SET_AVX512)

#define IQ_X86_AVX512 1
#include "vec_dot_iq_x86.inc"

X86_TARGET_END

const simd_kernels simd_iq_avx512 = {
    .isa = "avx512-iq",
    .runs_on = cpu_has_avx512_set,
    IQ_X86_KERNEL_TABLES,
};

#endif
