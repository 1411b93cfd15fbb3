/*
 * quant.h — the tensor type table: the single source of block sizes, bytes
 * per block and per-type functions for every ggml type id.  The GGUF reader
 * uses the sizes; the kernels fill in the functions.
 */
#ifndef HYDRA_QUANT_H
#define HYDRA_QUANT_H

#include "hydra.h"

#include <stdbool.h>
#include <stdint.h>

/* ggml type ids, as stored in GGUF tensor infos.  Gaps are ids ggml retired;
 * no valid file uses them. */
enum {
    QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3,
    QT_Q5_0 = 6, QT_Q5_1 = 7, QT_Q8_0 = 8, QT_Q8_1 = 9,
    QT_Q2_K = 10, QT_Q3_K = 11, QT_Q4_K = 12, QT_Q5_K = 13, QT_Q6_K = 14, QT_Q8_K = 15,
    QT_IQ2_XXS = 16, QT_IQ2_XS = 17, QT_IQ3_XXS = 18, QT_IQ1_S = 19, QT_IQ4_NL = 20,
    QT_IQ3_S = 21, QT_IQ2_S = 22, QT_IQ4_XS = 23,
    QT_I8 = 24, QT_I16 = 25, QT_I32 = 26, QT_I64 = 27, QT_F64 = 28,
    QT_IQ1_M = 29, QT_BF16 = 30,
    QT_TQ1_0 = 34, QT_TQ2_0 = 35,
    QT_MXFP4 = 39, QT_NVFP4 = 40, QT_Q1_0 = 41, QT_Q2_0 = 42,
    QT_COUNT
};

/* Dequantise n values (a multiple of the block size) of a row. */
typedef void (*quant_to_float_fn)(const void *src, float *dst, int64_t n);
/* Quantise n values (a multiple of the block size) into a row. */
typedef void (*quant_from_float_fn)(const float *src, void *dst, int64_t n);
/* *out = dot(weight row, activation row) over n values; the activation row is
 * in the weight type's vec_dot_type. */
typedef void (*quant_vec_dot_fn)(int64_t n, float *out, const void *w, const void *a);

typedef struct quant_traits {
    const char *name;           /* "Q4_K"; NULL for a retired id */
    uint32_t block_size;        /* values per block */
    uint32_t type_size;         /* bytes per block */
    quant_to_float_fn to_float;      /* scalar reference, exact; NULL = unsupported */
    quant_from_float_fn from_float;  /* reference quantiser (for activation formats:
                                        the activation quantiser); NULL = hydra cannot write it */
    quant_vec_dot_fn vec_dot_ref;    /* scalar reference dot product; NULL for activation-only
                                        formats (Q8_1, Q8_K) and unsupported types */
    quant_vec_dot_fn vec_dot;        /* fastest path on this CPU (chosen once at first use) */
    uint32_t vec_dot_type;      /* activation format both vec_dots expect: Q8_0 for Q4_0, Q5_0,
                                   Q8_0, IQ4_NL, MXFP4; Q8_1 for Q4_1, Q5_1; Q8_K for the
                                   K-quants and IQ4_XS; F32/F16/BF16 for themselves */
} quant_traits;

/* Replaces vec_dot entries of the table with SIMD versions this CPU runs
 * (CPUID); implemented in kernels/cpu/dispatch.c, called once. */
void quant_cpu_dispatch(quant_traits *table, uint32_t n);

/* Traits of a type id, or NULL for an id no file may contain.  Thread-safe;
 * the first call picks the SIMD paths. */
const quant_traits *quant_traits_of(uint32_t type);

/* HYDRA_OK if hydra can compute with a tensor of this type; otherwise
 * HYDRA_ERR_UNSUPPORTED with a message naming the tensor and the type.  The
 * engine calls it at load for every tensor it will use. */
hydra_status quant_require(uint32_t type, const char *tensor_name);

/* Bytes of a row of n values: false if n is not a multiple of the block size
 * or the type is unknown. */
bool quant_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes);

#endif
