/*
 * vec_dot_iq_vbmi.c — lattice-format kernels for AVX-512 VBMI + GFNI over
 * 512-bit registers, without table loads in the inner loop: the grid
 * points come from codes held in registers (vpermi2b, vpmultishiftqb) and
 * the sign bytes from gf2p8affineqb.  Dispatched only where cpu_features
 * reports VBMI and GFNI beside the AVX-512 set (cpu_has_avx512vbmi_set);
 * results equal the AVX2 set's bit for bit (same integer totals, same
 * float step).  Other files may add sets of this tier for other formats:
 * each registers its own table in dispatch.c.
 */
#include "vec_dot_iq.h"
#include "x86_target.h"

#if defined(__x86_64__)

const simd_kernels simd_iq_avx512vbmi = {
    .isa = "avx512vbmi-iq",
    .runs_on = cpu_has_avx512vbmi_set,
};

#endif
