/*
 * vec_dot_iq.h — the SIMD sets of the lattice and ternary formats
 * (vec_dot_iq_x86.inc), kept apart from the other formats' sets so each
 * file has one job; dispatch.c layers them like any other set.
 */
#ifndef HYDRA_VEC_DOT_IQ_H
#define HYDRA_VEC_DOT_IQ_H

#include "simd.h"

#if defined(__x86_64__)
extern const simd_kernels simd_iq_avx2;   /* vec_dot_iq_avx2.c: AVX2 + FMA + F16C */
extern const simd_kernels simd_iq_avx512; /* vec_dot_iq_avx512.c: + AVX-512 F, BW, VL */
extern const simd_kernels simd_iq_avx512vbmi; /* vec_dot_iq_vbmi.c: + AVX-512 VBMI, GFNI, 512-bit */
extern const simd_kernels simd_iq1_avx512vbmi; /* vec_dot_iq1_vbmi.c: IQ1_S, same tier */
#endif

#endif
