/*
 * quant.c — the tensor type table.  Sizes are the public GGUF/ggml block
 * layouts (kernels/cpu/quant_blocks.h; e.g. Q4_K: 256 values in 144 bytes =
 * f16 d, f16 dmin, 12 bytes of 6-bit scales, 128 bytes of nibbles).  A type
 * without functions is still described, so any GGUF opens; using such a
 * tensor fails at load through quant_require().
 *
 * The table is filled declaratively with the scalar references; on first use
 * quant_cpu_dispatch() (kernels/cpu/dispatch.c) sets .vec_dot to the fastest
 * path this CPU runs, exactly once (pthread_once).
 */
#include "quant.h"

#include "../kernels/cpu/quant_iq.h"
#include "../kernels/cpu/quant_ref.h"
#include "error.h"

#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>

/* Described only: hydra knows its size but cannot compute with it. */
#define DESCRIBED(id, nm, bs, ts) [id] = {.name = nm, .block_size = bs, .type_size = ts}
/* A weight type: reference conversions and dot product against act. */
#define WEIGHT(id, nm, bs, ts, fn, act)                                                        \
    [id] = {.name = nm, .block_size = bs, .type_size = ts, .to_float = quant_ref_##fn##_to_float, \
            .from_float = quant_ref_##fn##_from_float, .vec_dot_ref = quant_ref_##fn##_vec_dot,   \
            .vec_dot_type = act}
/* An activation format: conversions only; no weight tensor uses it. */
#define ACTIVATION(id, nm, bs, ts, fn)                                                         \
    [id] = {.name = nm, .block_size = bs, .type_size = ts, .to_float = quant_ref_##fn##_to_float, \
            .from_float = quant_ref_##fn##_from_float, .vec_dot_type = id}

static quant_traits table[QT_COUNT] = {
    WEIGHT(QT_F32, "F32", 1, 4, f32, QT_F32),
    WEIGHT(QT_F16, "F16", 1, 2, f16, QT_F16),
    WEIGHT(QT_BF16, "BF16", 1, 2, bf16, QT_BF16),
    WEIGHT(QT_Q4_0, "Q4_0", 32, 18, q4_0, QT_Q8_0),
    WEIGHT(QT_Q4_1, "Q4_1", 32, 20, q4_1, QT_Q8_1),
    WEIGHT(QT_Q5_0, "Q5_0", 32, 22, q5_0, QT_Q8_0),
    WEIGHT(QT_Q5_1, "Q5_1", 32, 24, q5_1, QT_Q8_1),
    WEIGHT(QT_Q8_0, "Q8_0", 32, 34, q8_0, QT_Q8_0),
    ACTIVATION(QT_Q8_1, "Q8_1", 32, 36, q8_1),
    WEIGHT(QT_Q2_K, "Q2_K", 256, 84, q2_k, QT_Q8_K),
    WEIGHT(QT_Q3_K, "Q3_K", 256, 110, q3_k, QT_Q8_K),
    WEIGHT(QT_Q4_K, "Q4_K", 256, 144, q4_k, QT_Q8_K),
    WEIGHT(QT_Q5_K, "Q5_K", 256, 176, q5_k, QT_Q8_K),
    WEIGHT(QT_Q6_K, "Q6_K", 256, 210, q6_k, QT_Q8_K),
    ACTIVATION(QT_Q8_K, "Q8_K", 256, 292, q8_k),
    WEIGHT(QT_IQ4_NL, "IQ4_NL", 32, 18, iq4_nl, QT_Q8_0),
    WEIGHT(QT_IQ4_XS, "IQ4_XS", 256, 136, iq4_xs, QT_Q8_K),
    WEIGHT(QT_MXFP4, "MXFP4", 32, 17, mxfp4, QT_Q8_0),
    WEIGHT(QT_IQ2_XXS, "IQ2_XXS", 256, 66, iq2_xxs, QT_Q8_K),
    WEIGHT(QT_IQ2_XS, "IQ2_XS", 256, 74, iq2_xs, QT_Q8_K),
    WEIGHT(QT_IQ3_XXS, "IQ3_XXS", 256, 98, iq3_xxs, QT_Q8_K),
    WEIGHT(QT_IQ1_S, "IQ1_S", 256, 50, iq1_s, QT_Q8_K),
    WEIGHT(QT_IQ3_S, "IQ3_S", 256, 110, iq3_s, QT_Q8_K),
    WEIGHT(QT_IQ2_S, "IQ2_S", 256, 82, iq2_s, QT_Q8_K),
    DESCRIBED(QT_I8, "I8", 1, 1),
    DESCRIBED(QT_I16, "I16", 1, 2),
    DESCRIBED(QT_I32, "I32", 1, 4),
    DESCRIBED(QT_I64, "I64", 1, 8),
    DESCRIBED(QT_F64, "F64", 1, 8),
    WEIGHT(QT_IQ1_M, "IQ1_M", 256, 56, iq1_m, QT_Q8_K),
    WEIGHT(QT_TQ1_0, "TQ1_0", 256, 54, tq1_0, QT_Q8_K),
    WEIGHT(QT_TQ2_0, "TQ2_0", 256, 66, tq2_0, QT_Q8_K),
    /* NVFP4: 64 values = 4 FP8 (UE4M3) scales of 16 values + 32 bytes of nibbles. */
    DESCRIBED(QT_NVFP4, "NVFP4", 64, 36),
    /* Q1_0 / Q2_0: newer ggml types; only their bits per value (1.125, 2.25)
     * are confirmed by ../shared/ref/dequant, so the block split is a guess and
     * they carry no functions. */
    DESCRIBED(QT_Q1_0, "Q1_0", 128, 18),
    DESCRIBED(QT_Q2_0, "Q2_0", 128, 36),
};

static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    quant_cpu_dispatch(table, QT_COUNT);
}

const quant_traits *quant_traits_of(uint32_t type)
{
    pthread_once(&table_once, table_init);
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

hydra_status quant_require(uint32_t type, const char *tensor_name)
{
    const quant_traits *t = quant_traits_of(type);
    if (t == NULL)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "tensor '%s' has type id %" PRIu32 ", which is not a ggml type hydra knows",
                          tensor_name, type);
    if (t->to_float == NULL || t->vec_dot_ref == NULL)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "tensor '%s' has type %s, which hydra cannot compute yet", tensor_name,
                          t->name);
    return HYDRA_OK;
}
