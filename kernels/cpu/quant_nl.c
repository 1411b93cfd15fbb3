/*
 * quant_nl.c — the codebook formats: IQ4_NL (32 values, f16 scale, 4-bit
 * indices into a non-uniform codebook), IQ4_XS (its 256-value super-block
 * form with 6-bit sub-block scales) and MXFP4 (OCP microscaling FP4: E2M1
 * values with a shared E8M0 exponent).  Layouts: quant_blocks.h.  IQ4_NL
 * and MXFP4 decode to quant_b32 (quant_legacy.c), IQ4_XS to quant_bk
 * (quant_k.c), so conversion and dot products are shared with those files.
 */
#include "quant_ref.h"

#include "fp16.h"
#include "quant_blocks.h"

#include <float.h>
#include <string.h>

/* The IQ4_NL levels (ggml's kvalues_iq4nl). */
const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* E2M1 codes 0..15 = sign bit, 2 exponent bits, 1 mantissa bit: magnitudes
 * 0, 0.5, 1, 1.5, 2, 3, 4, 6, here doubled. */
const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Index of the codebook level nearest t (the first on ties). */
static int nearest_level(const int8_t *levels, float t)
{
    int best = 0;
    for (int i = 1; i < 16; i++)
        if (fabsf(t - (float)levels[i]) < fabsf(t - (float)levels[best]))
            best = i;
    return best;
}

/* The same for the ascending IQ4_NL codebook, by bisection: the quantisers
 * call it for every value of every candidate scale. */
static int nearest_iq4nl(float t)
{
    const int8_t *lv = quant_iq4nl_values;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (t < (float)lv[mid])
            hi = mid;
        else
            lo = mid;
    }
    return t - (float)lv[lo] <= (float)lv[hi] - t ? lo : hi;
}

/* Nibbles in Q4_0 order: index j low, j + 16 high. */
static void pack_nibbles(const uint8_t *idx, uint8_t *qs)
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(idx[j] | idx[j + 16] << 4);
}

static void unpack_levels(const uint8_t *qs, const int8_t *levels, int8_t *q)
{
    for (int j = 0; j < 16; j++) {
        q[j] = levels[qs[j] & 0xF];
        q[j + 16] = levels[qs[j] >> 4];
    }
}

/* Scale d for 32 values x ~ d * iq4nl[idx]: candidates map the largest
 * magnitude near either end of the codebook; each is refit by least
 * squares over its chosen levels, and the smallest residual wins. */
static float fit_iq4nl_scale(const float *x)
{
    float v = 0.0f;
    for (int i = 0; i < QK_LEGACY; i++)
        if (fabsf(x[i]) > fabsf(v))
            v = x[i];
    if (v == 0.0f)
        return 0.0f;
    float best_d = v / (float)quant_iq4nl_values[0];
    double best_err = DBL_MAX;
    /* v goes to (around) either end of the codebook: -127 +- 7.5 or 113 +- 7.5 */
    for (int c = 0; c < 22; c++) {
        float end = (float)quant_iq4nl_values[c < 11 ? 0 : 15];
        float d = v / (end + 1.5f * (float)(c % 11 - 5));
        double sxl = 0, sll = 0, sxx = 0;
        for (int i = 0; i < QK_LEGACY; i++) {
            int l = quant_iq4nl_values[nearest_iq4nl(x[i] / d)];
            sxl += (double)x[i] * l;
            sll += (double)l * l;
            sxx += (double)x[i] * x[i];
        }
        double err = sxx - sxl * sxl / sll;
        if (err < best_err) {
            best_err = err;
            best_d = (float)(sxl / sll);
        }
    }
    return best_d;
}

static void choose_levels(const float *x, float d, const int8_t *levels, uint8_t *idx)
{
    for (int i = 0; i < QK_LEGACY; i++)
        idx[i] = (uint8_t)(d != 0.0f ? nearest_level(levels, x[i] / d) : nearest_level(levels, 0.0f));
}

/* ---- IQ4_NL (. Q8_0) ------------------------------------------------------ */

static void decode_iq4_nl(const void *blk, quant_b32 *u)
{
    const block_iq4_nl *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->neg_m = 0.0f;
    unpack_levels(b->qs, quant_iq4nl_values, u->q);
}

B32_CONVERT_DOT(iq4_nl, block_iq4_nl, q8_0)

void quant_ref_iq4_nl_from_float(const float *src, void *dst, int64_t n)
{
    block_iq4_nl *b = dst;
    uint8_t idx[QK_LEGACY];
    for (int64_t i = 0; i < n / QK_LEGACY; i++, src += QK_LEGACY) {
        b[i].d = fp32_to_fp16(fit_iq4nl_scale(src));
        choose_levels(src, fp16_to_fp32(b[i].d), quant_iq4nl_values, idx);
        pack_nibbles(idx, b[i].qs);
    }
}

/* ---- IQ4_XS (. Q8_K) ------------------------------------------------------ */

static void decode_iq4_xs(const void *blk, quant_bk *u)
{
    const block_iq4_xs *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->dmin = 0.0f;
    u->sub = 32;
    for (int j = 0; j < 8; j++) {
        u->sc[j] = (int8_t)iq4xs_scale(b, j);
        u->m[j] = 0;
        unpack_levels(b->qs + 16 * j, quant_iq4nl_values, u->q + 32 * j);
    }
}

BK_CONVERT_DOT(iq4_xs, block_iq4_xs)

/* Fit each sub-block's scale as for IQ4_NL, code the scales as d * (ls - 32),
 * then choose levels against the coded scales. */
void quant_ref_iq4_xs_from_float(const float *src, void *dst, int64_t n)
{
    block_iq4_xs *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float s[8], d;
        int codes[8];
        for (int j = 0; j < 8; j++)
            s[j] = fit_iq4nl_scale(src + 32 * j);
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = quant_code_signed(s, 8, 32, codes, &d);
        uint16_t scales_h = 0;
        for (int j = 0; j < 8; j++) {
            int ls = codes[j] + 32;
            b[i].scales_l[j / 2] |= (uint8_t)((ls & 0xF) << (4 * (j % 2)));
            scales_h |= (uint16_t)((ls >> 4) << (2 * j));
            uint8_t idx[32];
            choose_levels(src + 32 * j, d * (float)codes[j], quant_iq4nl_values, idx);
            pack_nibbles(idx, b[i].qs + 16 * j);
        }
        b[i].scales_h = scales_h;
    }
}

/* ---- MXFP4 (. Q8_0) ------------------------------------------------------- */

static void decode_mxfp4(const void *blk, quant_b32 *u)
{
    const block_mxfp4 *b = blk;
    u->d = e8m0_half(b->e);
    u->neg_m = 0.0f;
    unpack_levels(b->qs, quant_mxfp4_values, u->q);
}

B32_CONVERT_DOT(mxfp4, block_mxfp4, q8_0)

static double mxfp4_error(const float *x, uint8_t e)
{
    float d = e8m0_half(e);
    double err = 0;
    for (int i = 0; i < QK_LEGACY; i++) {
        float v = (float)quant_mxfp4_values[nearest_level(quant_mxfp4_values, x[i] / d)] * d;
        err += ((double)x[i] - v) * ((double)x[i] - v);
    }
    return err;
}

/* The exponent is a power of two: take the smallest e whose largest level
 * (6 * 2^(e-127)) covers max |x|, and the next smaller one, which clips the
 * largest values but halves the step; keep the one with less error. */
void quant_ref_mxfp4_from_float(const float *src, void *dst, int64_t n)
{
    block_mxfp4 *b = dst;
    uint8_t idx[QK_LEGACY];
    for (int64_t i = 0; i < n / QK_LEGACY; i++, src += QK_LEGACY) {
        float amax = 0.0f;
        for (int j = 0; j < QK_LEGACY; j++)
            amax = fmaxf(amax, fabsf(src[j]));
        int e = 0;
        while (e < 254 && 12.0f * e8m0_half((uint8_t)e) < amax)
            e++;
        if (e > 0 && mxfp4_error(src, (uint8_t)(e - 1)) < mxfp4_error(src, (uint8_t)e))
            e--;
        b[i].e = (uint8_t)e;
        choose_levels(src, e8m0_half((uint8_t)e), quant_mxfp4_values, idx);
        pack_nibbles(idx, b[i].qs);
    }
}
