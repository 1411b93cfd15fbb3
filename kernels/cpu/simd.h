/*
 * simd.h — the SIMD kernel sets.  Each instruction set contributes one
 * table, indexed by type id: a vec_dot per weight type and an activation
 * quantiser per activation type (NULL where that set has none).  dispatch.c
 * layers the sets that this CPU runs over the scalar references, best last,
 * so a set may implement any subset and the rest falls through.  Tests call
 * every set that runs here against the references.
 */
#ifndef HYDRA_SIMD_H
#define HYDRA_SIMD_H

#include "cpu_features.h"
#include "quant.h"

#include <stddef.h>

/* Rows a vec_dot_rows kernel computes in one call: they share the loads and
 * scales of the activation row. */
enum { SIMD_ROWS = 4 };

/* out[r] = row r . a for r < SIMD_ROWS, row r at w + r * row_stride; each
 * out[r] bit-identical to the same set's vec_dot on that row. */
typedef void (*quant_vec_dot_rows_fn)(int64_t n, float *out, const void *w, size_t row_stride, const void *a);

/* Tokens a gemm kernel takes in one call at most. */
enum { SIMD_GEMM_TOKENS = 8 };

/* y[t * y_stride + r] = row r . activation t for r < rows and t < toks
 * (1 <= toks <= SIMD_GEMM_TOKENS): row r at w + r * row_stride, activation
 * t (in the type's vec_dot_type) at a + t * a_stride.  Each output
 * bit-identical to the same set's vec_dot of that row and activation. */
typedef void (*quant_gemm_fn)(int64_t n, const void *w, size_t row_stride, int rows, const void *a,
                              size_t a_stride, int toks, float *y, size_t y_stride);

typedef struct simd_kernels {
    const char *isa;                           /* "avx2" */
    bool (*runs_on)(const cpu_features *f);    /* every instruction it uses is there */
    quant_vec_dot_fn vec_dot[QT_COUNT];        /* by weight type */
    quant_vec_dot_rows_fn vec_dot_rows[QT_COUNT]; /* by weight type, where sharing pays */
    quant_gemm_fn gemm[QT_COUNT];              /* by weight type: several tokens at once */
    quant_from_float_fn quantize[QT_COUNT];    /* by activation type; bytes identical to from_float */
} simd_kernels;

#if defined(__x86_64__)
extern const simd_kernels simd_avx2;    /* vec_dot_avx2.c: AVX2 + FMA + F16C */
extern const simd_kernels simd_avxvnni; /* vec_dot_avxvnni.c: + AVX-VNNI */
extern const simd_kernels simd_avx512;  /* vec_dot_avx512.c: + AVX-512 F, BW, VL, VNNI */
#elif defined(__aarch64__)
extern const simd_kernels simd_neon;    /* vec_dot_neon.c: compiled, not yet run */
#endif

/* The sets compiled into this build, in ascending preference. */
extern const simd_kernels *const simd_kernel_sets[];
extern const int simd_kernel_set_count;

/* The SIMD_ROWS-row kernel matching the dispatched vec_dot of weight type
 * wtype (the same set's), or NULL when that set has none. */
quant_vec_dot_rows_fn quant_cpu_vec_dot_rows(uint32_t wtype);

/* The gemm kernel of the set whose vec_dot was dispatched for wtype, or
 * NULL when that set has none. */
quant_gemm_fn quant_cpu_gemm(uint32_t wtype);

/* The fastest activation quantiser for type act_type this CPU runs, or NULL
 * when only the reference (the table's from_float) exists. */
quant_from_float_fn quant_cpu_act_quantizer(uint32_t act_type);

#endif
