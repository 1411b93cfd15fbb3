#include "raw_blocks.h"

#include "quant.h"
#include "xorshift.h"

#include "../kernels/cpu/fp16.h"
#include "../kernels/cpu/iq_blocks.h"

#include <stddef.h>
#include <string.h>

/* Byte offsets of the f16 scale fields of each block type: raw random blocks
 * get these overwritten with ordinary scales (random bits there would be
 * NaN or inf half the time, and say nothing about the kernels). */
typedef struct scale_fields {
    uint32_t type;
    int n;
    size_t at[2];
} scale_fields;

static const scale_fields f16_fields[] = {
    {QT_Q4_0, 1, {offsetof(block_q4_0, d)}},
    {QT_Q4_1, 2, {offsetof(block_q4_1, d), offsetof(block_q4_1, m)}},
    {QT_Q5_0, 1, {offsetof(block_q5_0, d)}},
    {QT_Q5_1, 2, {offsetof(block_q5_1, d), offsetof(block_q5_1, m)}},
    {QT_Q8_0, 1, {offsetof(block_q8_0, d)}},
    {QT_Q2_K, 2, {offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)}},
    {QT_Q3_K, 1, {offsetof(block_q3_K, d)}},
    {QT_Q4_K, 2, {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)}},
    {QT_Q5_K, 2, {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)}},
    {QT_Q6_K, 1, {offsetof(block_q6_K, d)}},
    {QT_IQ4_NL, 1, {offsetof(block_iq4_nl, d)}},
    {QT_IQ4_XS, 1, {offsetof(block_iq4_xs, d)}},
    /* the lattice formats lead with d (iq_blocks.h), except IQ1_M (below) */
    {QT_IQ2_XXS, 1, {0}}, {QT_IQ2_XS, 1, {0}}, {QT_IQ2_S, 1, {0}}, {QT_IQ3_XXS, 1, {0}},
    {QT_IQ3_S, 1, {0}},   {QT_IQ1_S, 1, {0}},
    /* the ternary formats end with d */
    {QT_TQ1_0, 1, {offsetof(block_tq1_0, d)}}, {QT_TQ2_0, 1, {offsetof(block_tq2_0, d)}},
};

bool fill_raw_blocks(uint32_t type, uint8_t *w, int64_t n_blocks, uint64_t *rng)
{
    const quant_traits *t = quant_traits_of(type);
    if (t->block_size == 1)
        return false;
    for (int64_t i = 0; i < n_blocks * (int64_t)t->type_size; i++)
        w[i] = (uint8_t)rng_next(rng);
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = w + b * t->type_size;
        if (type == QT_MXFP4)
            blk[offsetof(block_mxfp4, e)] = (uint8_t)(110 + rng_next(rng) % 30); /* 2^-18 .. 2^11 */
        if (type == QT_IQ1_M) { /* d's f16 nibbles top its four scale words (bytes 49, 51, 53, 55) */
            uint16_t h = fp32_to_fp16(rng_float(rng) * 0.05f);
            for (int k = 0; k < 4; k++)
                blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
        }
        for (size_t f = 0; f < sizeof f16_fields / sizeof f16_fields[0]; f++) {
            if (f16_fields[f].type != type)
                continue;
            for (int k = 0; k < f16_fields[f].n; k++) {
                uint16_t h = fp32_to_fp16(rng_float(rng) * 0.05f);
                memcpy(blk + f16_fields[f].at[k], &h, 2);
            }
        }
    }
    return true;
}
