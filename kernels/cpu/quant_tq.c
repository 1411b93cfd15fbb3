/*
 * quant_tq.c — the ternary formats TQ1_0 (trits packed 5 per byte in base
 * 3) and TQ2_0 (2 bits per value), value = d * (t - 1) (layouts:
 * iq_blocks.h).  Both decode to quant_bk (quant_k.c) with scale 1, whose
 * d * 1 * q is ggml's (float)(t - 1) * d exactly.
 *
 * The quantiser is the best ternary fit of a super-block: with the k
 * largest magnitudes kept as +-d and the rest 0, the least-squares d is
 * their mean and the error is sum x^2 - (sum of those k)^2 / k, so the
 * best k is the one that maximises (sum of the top k)^2 / k.
 */
#include "quant_iq.h"

#include "fp16.h"
#include "iq_blocks.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static int by_magnitude_desc(const void *pa, const void *pb)
{
    float a = *(const float *)pa, b = *(const float *)pb;
    return (a < b) - (a > b);
}

/* Trits t in 0..2 of the 256 values and the f16 bits of d. */
static uint16_t fit_ternary(const float *x, uint8_t *t)
{
    float mag[QK_K];
    for (int i = 0; i < QK_K; i++)
        mag[i] = fabsf(x[i]);
    qsort(mag, QK_K, sizeof mag[0], by_magnitude_desc);
    double sum = 0.0, best = 0.0, best_d = 0.0;
    for (int k = 1; k <= QK_K; k++) {
        sum += mag[k - 1];
        if (sum * sum / k > best) {
            best = sum * sum / k;
            best_d = sum / k;
        }
    }
    uint16_t h = fp32_to_fp16((float)best_d);
    float d = fp16_to_fp32(h);
    for (int i = 0; i < QK_K; i++)
        t[i] = (uint8_t)(d > 0.0f && fabsf(x[i]) > 0.5f * d ? (x[i] < 0.0f ? 0 : 2) : 1);
    return h;
}

static void start_ternary(quant_bk *u, uint16_t d)
{
    u->d = fp16_to_fp32(d);
    u->dmin = 0.0f;
    u->sub = 32;
    memset(u->sc, 1, sizeof u->sc);
    memset(u->m, 0, sizeof u->m);
}

/* ---- TQ1_0 ---------------------------------------------------------------- */

/* qs and qh read as one run of 52 bytes. */
_Static_assert(offsetof(block_tq1_0, qh) == 48, "TQ1_0: qh follows qs");

/* Where value e keeps its trit: byte of that run and trit position n
 * (iq_blocks.h). */
static void tq1_pos(int e, int *byte, int *n)
{
    if (e < 160)
        *byte = e % 32, *n = e / 32;
    else if (e < 240)
        *byte = 32 + (e - 160) % 16, *n = (e - 160) / 16;
    else
        *byte = 48 + (e - 240) % 4, *n = (e - 240) / 4;
}

static void decode_tq1_0(const void *blk, quant_bk *u)
{
    const block_tq1_0 *b = blk;
    const uint8_t *run = blk;
    start_ternary(u, b->d);
    for (int e = 0; e < QK_K; e++) {
        int byte, n;
        tq1_pos(e, &byte, &n);
        u->q[e] = (int8_t)(tq1_trit(run[byte], n) - 1);
    }
}

BK_CONVERT_DOT(tq1_0, block_tq1_0)

/* A byte of trits t_0..t_4 is ceil(256 v / 243), v = sum t_n 3^(4 - n): the
 * base-3 fraction v / 243 in fixed point, rounded up so that the decoder's
 * truncating multiplications recover every trit. */
void quant_ref_tq1_0_from_float(const float *src, void *dst, int64_t n)
{
    block_tq1_0 *b = dst;
    uint8_t t[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        b[i].d = fit_ternary(src, t);
        int v[52] = {0};
        for (int e = 0; e < QK_K; e++) {
            int byte, k;
            tq1_pos(e, &byte, &k);
            static const int pow3[5] = {81, 27, 9, 3, 1};
            v[byte] += t[e] * pow3[k];
        }
        uint8_t *run = (uint8_t *)&b[i];
        for (int byte = 0; byte < 52; byte++)
            run[byte] = (uint8_t)((v[byte] * 256 + 242) / 243);
    }
}

/* ---- TQ2_0 ---------------------------------------------------------------- */

static int tq2_byte(int e)
{
    return 32 * (e / 128) + e % 32;
}

static int tq2_shift(int e)
{
    return 2 * ((e % 128) / 32);
}

static void decode_tq2_0(const void *blk, quant_bk *u)
{
    const block_tq2_0 *b = blk;
    start_ternary(u, b->d);
    for (int e = 0; e < QK_K; e++)
        u->q[e] = (int8_t)(((b->qs[tq2_byte(e)] >> tq2_shift(e)) & 3) - 1);
}

BK_CONVERT_DOT(tq2_0, block_tq2_0)

void quant_ref_tq2_0_from_float(const float *src, void *dst, int64_t n)
{
    block_tq2_0 *b = dst;
    uint8_t t[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = fit_ternary(src, t);
        for (int e = 0; e < QK_K; e++)
            b[i].qs[tq2_byte(e)] = (uint8_t)(b[i].qs[tq2_byte(e)] | t[e] << tq2_shift(e));
    }
}
