/*
 * quant.c — the tensor type table.  Sizes are the public GGUF/ggml block
 * layouts (e.g. Q4_K: 256 values in 144 bytes = f16 d, f16 dmin, 12 bytes of
 * 6-bit scales, 128 bytes of nibbles).  A type without functions is still
 * described, so any GGUF opens; using such a tensor fails where it is used.
 */
#include "quant.h"

#include "../kernels/cpu/quant_ref.h"

#include <stddef.h>

#define T(id, nm, bs, ts) [id] = {.name = nm, .block_size = bs, .type_size = ts}
/* A type with reference conversions: kernels/cpu/quant_ref.c. */
#define TF(id, nm, bs, ts, fn)                                                  \
    [id] = {.name = nm, .block_size = bs, .type_size = ts,                      \
            .to_float = quant_ref_##fn##_to_float, .from_float = quant_ref_##fn##_from_float}

static const quant_traits table[QT_COUNT] = {
    TF(QT_F32, "F32", 1, 4, f32),    TF(QT_F16, "F16", 1, 2, f16),
    T(QT_Q4_0, "Q4_0", 32, 18),      T(QT_Q4_1, "Q4_1", 32, 20),
    T(QT_Q5_0, "Q5_0", 32, 22),      T(QT_Q5_1, "Q5_1", 32, 24),
    TF(QT_Q8_0, "Q8_0", 32, 34, q8_0),      T(QT_Q8_1, "Q8_1", 32, 36),
    T(QT_Q2_K, "Q2_K", 256, 84),     T(QT_Q3_K, "Q3_K", 256, 110),
    T(QT_Q4_K, "Q4_K", 256, 144),    T(QT_Q5_K, "Q5_K", 256, 176),
    T(QT_Q6_K, "Q6_K", 256, 210),    T(QT_Q8_K, "Q8_K", 256, 292),
    T(QT_IQ2_XXS, "IQ2_XXS", 256, 66), T(QT_IQ2_XS, "IQ2_XS", 256, 74),
    T(QT_IQ3_XXS, "IQ3_XXS", 256, 98), T(QT_IQ1_S, "IQ1_S", 256, 50),
    T(QT_IQ4_NL, "IQ4_NL", 32, 18),  T(QT_IQ3_S, "IQ3_S", 256, 110),
    T(QT_IQ2_S, "IQ2_S", 256, 82),   T(QT_IQ4_XS, "IQ4_XS", 256, 136),
    T(QT_I8, "I8", 1, 1),            T(QT_I16, "I16", 1, 2),
    T(QT_I32, "I32", 1, 4),          T(QT_I64, "I64", 1, 8),
    T(QT_F64, "F64", 1, 8),          T(QT_IQ1_M, "IQ1_M", 256, 56),
    TF(QT_BF16, "BF16", 1, 2, bf16),
    T(QT_TQ1_0, "TQ1_0", 256, 54),   T(QT_TQ2_0, "TQ2_0", 256, 66),
    T(QT_MXFP4, "MXFP4", 32, 17),
    /* NVFP4: 64 values = 4 FP8 (UE4M3) scales of 16 values + 32 bytes of nibbles. */
    T(QT_NVFP4, "NVFP4", 64, 36),
    /* Q1_0 / Q2_0: newer ggml types; only their bits per value (1.125, 2.25)
     * are confirmed by ../shared/ref/dequant, so the block split is a guess and
     * they carry no functions. */
    T(QT_Q1_0, "Q1_0", 128, 18),     T(QT_Q2_0, "Q2_0", 128, 36),
};

const quant_traits *quant_traits_of(uint32_t type)
{
    if (type >= QT_COUNT || table[type].name == NULL)
        return NULL;
    return &table[type];
}

bool quant_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes)
{
    const quant_traits *t = quant_traits_of(type);
    if (t == NULL || n % t->block_size != 0)
        return false;
    uint64_t blocks = n / t->block_size;
    if (blocks > UINT64_MAX / t->type_size)
        return false;
    *bytes = blocks * t->type_size;
    return true;
}
