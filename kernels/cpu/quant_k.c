/*
 * quant_k.c — the K-quant super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and the
 * activation format Q8_K (layouts: quant_blocks.h).  Each type is a decoder
 * to quant_bk (integer quants, sub-block scales and mins) and an encoder
 * back; conversion and the dot product are written once over quant_bk, and
 * IQ4_XS (quant_nl.c) reuses them.
 *
 * The quantiser is the usual one without an importance matrix: fit each
 * sub-block's scale (and min) by a small search with least-squares refits,
 * quantise those to the super-block's 4/6/8-bit codes, then requantise every
 * value against the scales the decoder will actually see.
 */
#include "quant_ref.h"

#include "fp16.h"
#include "quant_blocks.h"

#include <float.h>
#include <string.h>

/* ---- the shared super-block machinery ---------------------------------- */

/* (d * sc) * q - dmin * m: ggml's order of float operations for every
 * K-quant (for types without mins, subtracting +0 changes nothing). */
void quant_bk_to_float(const void *src, size_t block_bytes, quant_bk_decode_fn decode, float *dst, int64_t n)
{
    const uint8_t *p = src;
    quant_bk u;
    for (int64_t i = 0; i < n / QK_K; i++) {
        decode(p + (size_t)i * block_bytes, &u);
        for (int j = 0; j < QK_K / u.sub; j++) {
            float dl = u.d * (float)u.sc[j];
            float ml = u.dmin * (float)u.m[j];
            for (int k = 0; k < u.sub; k++, dst++)
                *dst = dl * (float)u.q[j * u.sub + k] - ml;
        }
    }
}

/* sum_i (d sc_j q_i - dmin m_j) d_a qa_i
 *   = d d_a sum_j sc_j (sum_{i in j} q_i qa_i) - dmin d_a sum_j m_j (sum_{i in j} qa_i);
 * the second sums are Q8_K's bsums (16 values each). */
float quant_bk_dot_q8_k(const void *w, size_t block_bytes, quant_bk_decode_fn decode, const void *a, int64_t n)
{
    const uint8_t *p = w;
    const block_q8_K *act = a;
    double sum = 0.0;
    quant_bk u;
    for (int64_t i = 0; i < n / QK_K; i++) {
        decode(p + (size_t)i * block_bytes, &u);
        int isum = 0, msum = 0;
        for (int j = 0; j < QK_K / u.sub; j++) {
            int s = 0;
            for (int k = j * u.sub; k < (j + 1) * u.sub; k++)
                s += u.q[k] * act[i].qs[k];
            isum += u.sc[j] * s;
        }
        for (int g = 0; g < QK_K / 16; g++)
            msum += u.m[g * 16 / u.sub] * act[i].bsums[g];
        float d = u.d * act[i].d, dmin = u.dmin * act[i].d;
        sum += (double)(d * (float)isum - dmin * (float)msum);
    }
    return (float)sum;
}

/* ---- where value e of a super-block keeps its bits ---------------------- */

typedef struct bitpos {
    int byte, shift;
} bitpos;

/* Q2_K/Q3_K low 2 bits: each 128-value half uses 32 bytes; value e of it
 * sits in byte e % 32 at bits 2 * (e / 32). */
static bitpos crumb_pos(int e)
{
    return (bitpos){(e / 128) * 32 + e % 32, 2 * ((e % 128) / 32)};
}

/* Q4_K/Q5_K nibbles: each 64 values use 32 bytes, low nibbles first. */
static bitpos nibble_pos(int e)
{
    return (bitpos){(e / 64) * 32 + e % 32, 4 * ((e % 64) / 32)};
}

/* Q3_K hmask and Q5_K qh: 32 bytes, value e in byte e % 32, bit e / 32. */
static bitpos highbit_pos(int e)
{
    return (bitpos){e % 32, e / 32};
}

/* Q6_K: each 128-value half uses 64 ql bytes and 32 qh bytes; its quarter k
 * takes low nibbles (k < 2) or high nibbles of ql[32 * (k & 1) + l] and
 * bits 2k of qh[l]. */
static bitpos q6_low_pos(int e)
{
    int k = (e % 128) / 32;
    return (bitpos){(e / 128) * 64 + (k & 1) * 32 + e % 32, 4 * (k >> 1)};
}

static bitpos q6_high_pos(int e)
{
    return (bitpos){(e / 128) * 32 + e % 32, 2 * ((e % 128) / 32)};
}

static int get_bits(const uint8_t *buf, bitpos p, int mask)
{
    return (buf[p.byte] >> p.shift) & mask;
}

static void put_bits(uint8_t *buf, bitpos p, int v)
{
    buf[p.byte] = (uint8_t)(buf[p.byte] | v << p.shift);
}

/* ---- sub-block fits ----------------------------------------------------- */

/* x ~ s * q - mn with q in 0..nmax, s >= 0, mn >= 0 (the formats store a
 * non-negative min, so the offset is clamped to <= 0).  Tries scales around
 * (max - min) / nmax and refits s and the offset by least squares. */
static void fit_affine(const float *x, int n, int nmax, float *s_out, float *mn_out)
{
    float lo = 0.0f, hi = -FLT_MAX;
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    *s_out = (hi - lo) / (float)nmax; /* the plain min/max fit, kept if no refit is valid */
    *mn_out = -lo;
    if (hi <= lo)
        return;
    float best_err = FLT_MAX;
    for (int k = 0; k <= 20; k++) {
        float iscale = ((float)nmax - 1.0f + 0.1f * (float)k) / (hi - lo);
        double sq = 0, sqq = 0, sx = 0, sqx = 0;
        int q[32];
        for (int i = 0; i < n; i++) {
            q[i] = quant_clamp(quant_round((x[i] - lo) * iscale), 0, nmax);
            sq += q[i];
            sqq += (double)q[i] * q[i];
            sx += x[i];
            sqx += (double)q[i] * x[i];
        }
        double det = n * sqq - sq * sq;
        if (det <= 0)
            continue;
        double s = (n * sqx - sq * sx) / det, b = (sqq * sx - sq * sqx) / det;
        if (b > 0) {
            b = 0;
            s = sqx / sqq;
        }
        if (s <= 0)
            continue;
        double err = 0;
        for (int i = 0; i < n; i++)
            err += (s * q[i] + b - x[i]) * (s * q[i] + b - x[i]);
        if (err < best_err) {
            best_err = (float)err;
            *s_out = (float)s;
            *mn_out = (float)-b;
        }
    }
}

/* x ~ s * q with q in -nlo..nhi (s may be negative, so the largest value can
 * take the extra level of whichever side has it). */
static float fit_symmetric(const float *x, int n, int nlo, int nhi)
{
    float v = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(v))
            v = x[i];
    if (v == 0.0f)
        return 0.0f;
    float best_s = 0.0f;
    double best_err = DBL_MAX;
    /* v goes to (around) either end of the range: -nlo +- 0.5 or nhi +- 0.5 */
    for (int c = 0; c < 22; c++) {
        float end = c < 11 ? -(float)nlo : (float)nhi;
        float iscale = (end + 0.1f * (float)(c % 11 - 5)) / v;
        double sxq = 0, sqq = 0, sxx = 0;
        for (int i = 0; i < n; i++) {
            int q = quant_clamp(quant_round(x[i] * iscale), -nlo, nhi);
            sxq += (double)x[i] * q;
            sqq += (double)q * q;
            sxx += (double)x[i] * x[i];
        }
        if (sqq == 0)
            continue;
        double err = sxx - sxq * sxq / sqq; /* residual of the least-squares scale */
        if (err < best_err) {
            best_err = err;
            best_s = (float)(sxq / sqq);
        }
    }
    return best_s;
}

/* Quantises n_sub values v[j] >= 0 to codes 0..cmax of one f16 super-scale. */
static uint16_t code_unsigned(const float *v, int n_sub, int cmax, int *codes, float *scale)
{
    float vmax = 0.0f;
    for (int j = 0; j < n_sub; j++)
        vmax = fmaxf(vmax, v[j]);
    uint16_t h = fp32_to_fp16(vmax / (float)cmax);
    *scale = fp16_to_fp32(h);
    for (int j = 0; j < n_sub; j++)
        codes[j] = *scale > 0.0f ? quant_clamp(quant_round(v[j] / *scale), 0, cmax) : 0;
    return h;
}

/* Quantises signed v[j] to codes -cneg..cneg-1: the largest magnitude takes
 * -cneg, the level only the negative side has. */
uint16_t quant_code_signed(const float *v, int n_sub, int cneg, int *codes, float *scale)
{
    float big = 0.0f;
    for (int j = 0; j < n_sub; j++)
        if (fabsf(v[j]) > fabsf(big))
            big = v[j];
    uint16_t h = fp32_to_fp16(big / -(float)cneg);
    *scale = fp16_to_fp32(h);
    for (int j = 0; j < n_sub; j++)
        codes[j] = *scale != 0.0f ? quant_clamp(quant_round(v[j] / *scale), -cneg, cneg - 1) : 0;
    return h;
}

typedef struct bk_shape {
    int sub;        /* values per sub-block */
    int qlo, qhi;   /* quant range */
    int cmax;       /* affine: codes 0..cmax; symmetric: -cmax..cmax-1 */
    int affine;
} bk_shape;

/* Fits one super-block to quant_bk form: sub-block scales and mins coded
 * with cmax levels (mins: affine types only), values requantised against
 * the coded scales.  Returns the f16 bits of d and dmin in *hd, *hdmin. */
static void fit_superblock(const float *x, bk_shape sh, quant_bk *u, uint16_t *hd, uint16_t *hdmin)
{
    int n_sub = QK_K / sh.sub, sc[16], mc[16] = {0};
    float s[16], mn[16];
    for (int j = 0; j < n_sub; j++) {
        if (sh.affine)
            fit_affine(x + j * sh.sub, sh.sub, sh.qhi, &s[j], &mn[j]);
        else
            s[j] = fit_symmetric(x + j * sh.sub, sh.sub, -sh.qlo, sh.qhi);
    }
    u->sub = sh.sub;
    u->dmin = 0.0f;
    *hdmin = 0;
    if (sh.affine) {
        *hd = code_unsigned(s, n_sub, sh.cmax, sc, &u->d);
        *hdmin = code_unsigned(mn, n_sub, sh.cmax, mc, &u->dmin);
    } else {
        *hd = quant_code_signed(s, n_sub, sh.cmax, sc, &u->d);
    }
    for (int j = 0; j < n_sub; j++) {
        u->sc[j] = (int8_t)sc[j];
        u->m[j] = (uint8_t)mc[j];
        float dl = u->d * (float)sc[j], ml = u->dmin * (float)mc[j];
        for (int k = j * sh.sub; k < (j + 1) * sh.sub; k++) {
            int q = dl != 0.0f ? quant_round((x[k] + ml) / dl) : 0;
            u->q[k] = (int8_t)quant_clamp(q, sh.qlo, sh.qhi);
        }
    }
}

/* Each type's quantiser: fit, then encode. */
#define BK_FROM_FLOAT(fn, block_t, shape)                                     \
    void quant_ref_##fn##_from_float(const float *src, void *dst, int64_t n)  \
    {                                                                         \
        block_t *b = dst;                                                     \
        quant_bk u;                                                           \
        for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {                 \
            uint16_t hd, hdmin;                                               \
            fit_superblock(src, shape, &u, &hd, &hdmin);                      \
            encode_##fn(&u, hd, hdmin, &b[i]);                                \
        }                                                                     \
    }

/* ---- Q2_K ---------------------------------------------------------------- */

static void decode_q2_k(const void *blk, quant_bk *u)
{
    const block_q2_K *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->dmin = fp16_to_fp32(b->dmin);
    u->sub = 16;
    for (int j = 0; j < 16; j++) {
        u->sc[j] = (int8_t)(b->scales[j] & 0xF);
        u->m[j] = (uint8_t)(b->scales[j] >> 4);
    }
    for (int e = 0; e < QK_K; e++)
        u->q[e] = (int8_t)get_bits(b->qs, crumb_pos(e), 3);
}

static void encode_q2_k(const quant_bk *u, uint16_t hd, uint16_t hdmin, block_q2_K *b)
{
    memset(b, 0, sizeof *b);
    b->d = hd;
    b->dmin = hdmin;
    for (int j = 0; j < 16; j++)
        b->scales[j] = (uint8_t)(u->sc[j] | u->m[j] << 4);
    for (int e = 0; e < QK_K; e++)
        put_bits(b->qs, crumb_pos(e), u->q[e]);
}

BK_CONVERT_DOT(q2_k, block_q2_K)
BK_FROM_FLOAT(q2_k, block_q2_K, ((bk_shape){.sub = 16, .qlo = 0, .qhi = 3, .cmax = 15, .affine = 1}))

/* ---- Q3_K ---------------------------------------------------------------- */

static void decode_q3_k(const void *blk, quant_bk *u)
{
    const block_q3_K *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->dmin = 0.0f;
    u->sub = 16;
    for (int j = 0; j < 16; j++) {
        u->sc[j] = (int8_t)q3k_scale(b->scales, j);
        u->m[j] = 0;
    }
    for (int e = 0; e < QK_K; e++) {
        int high = get_bits(b->hmask, highbit_pos(e), 1);
        u->q[e] = (int8_t)(get_bits(b->qs, crumb_pos(e), 3) - (high ? 0 : 4));
    }
}

static void encode_q3_k(const quant_bk *u, uint16_t hd, uint16_t hdmin, block_q3_K *b)
{
    (void)hdmin;
    memset(b, 0, sizeof *b);
    b->d = hd;
    for (int j = 0; j < 16; j++) {
        int v = u->sc[j] + 32;
        if (j < 8)
            b->scales[j] |= (uint8_t)(v & 0xF);
        else
            b->scales[j - 8] |= (uint8_t)((v & 0xF) << 4);
        b->scales[8 + j % 4] |= (uint8_t)((v >> 4) << (2 * (j / 4)));
    }
    for (int e = 0; e < QK_K; e++) {
        int v = u->q[e] + 4; /* 0..7: bit 2 set means "no -4" */
        put_bits(b->qs, crumb_pos(e), v & 3);
        put_bits(b->hmask, highbit_pos(e), v >> 2);
    }
}

BK_CONVERT_DOT(q3_k, block_q3_K)
BK_FROM_FLOAT(q3_k, block_q3_K, ((bk_shape){.sub = 16, .qlo = -4, .qhi = 3, .cmax = 32, .affine = 0}))

/* ---- Q4_K and Q5_K --------------------------------------------------------- */

static void decode_k4_scales(const uint8_t *scales, quant_bk *u)
{
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        q4k_scale_min(scales, j, &sc, &m);
        u->sc[j] = (int8_t)sc;
        u->m[j] = m;
    }
}

static void encode_k4_scales(const quant_bk *u, uint8_t *scales)
{
    for (int j = 0; j < 4; j++) {
        int sc_hi = (uint8_t)u->sc[j + 4], m_hi = u->m[j + 4];
        scales[j] = (uint8_t)((uint8_t)u->sc[j] | (sc_hi >> 4) << 6);
        scales[j + 4] = (uint8_t)(u->m[j] | (m_hi >> 4) << 6);
        scales[j + 8] = (uint8_t)((sc_hi & 0xF) | (m_hi & 0xF) << 4);
    }
}

static void decode_q4_k(const void *blk, quant_bk *u)
{
    const block_q4_K *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->dmin = fp16_to_fp32(b->dmin);
    u->sub = 32;
    decode_k4_scales(b->scales, u);
    for (int e = 0; e < QK_K; e++)
        u->q[e] = (int8_t)get_bits(b->qs, nibble_pos(e), 0xF);
}

static void encode_q4_k(const quant_bk *u, uint16_t hd, uint16_t hdmin, block_q4_K *b)
{
    memset(b, 0, sizeof *b);
    b->d = hd;
    b->dmin = hdmin;
    encode_k4_scales(u, b->scales);
    for (int e = 0; e < QK_K; e++)
        put_bits(b->qs, nibble_pos(e), u->q[e]);
}

BK_CONVERT_DOT(q4_k, block_q4_K)
BK_FROM_FLOAT(q4_k, block_q4_K, ((bk_shape){.sub = 32, .qlo = 0, .qhi = 15, .cmax = 63, .affine = 1}))

static void decode_q5_k(const void *blk, quant_bk *u)
{
    const block_q5_K *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->dmin = fp16_to_fp32(b->dmin);
    u->sub = 32;
    decode_k4_scales(b->scales, u);
    for (int e = 0; e < QK_K; e++)
        u->q[e] = (int8_t)(get_bits(b->qs, nibble_pos(e), 0xF) | get_bits(b->qh, highbit_pos(e), 1) << 4);
}

static void encode_q5_k(const quant_bk *u, uint16_t hd, uint16_t hdmin, block_q5_K *b)
{
    memset(b, 0, sizeof *b);
    b->d = hd;
    b->dmin = hdmin;
    encode_k4_scales(u, b->scales);
    for (int e = 0; e < QK_K; e++) {
        put_bits(b->qs, nibble_pos(e), u->q[e] & 0xF);
        put_bits(b->qh, highbit_pos(e), u->q[e] >> 4);
    }
}

BK_CONVERT_DOT(q5_k, block_q5_K)
BK_FROM_FLOAT(q5_k, block_q5_K, ((bk_shape){.sub = 32, .qlo = 0, .qhi = 31, .cmax = 63, .affine = 1}))

/* ---- Q6_K ---------------------------------------------------------------- */

static void decode_q6_k(const void *blk, quant_bk *u)
{
    const block_q6_K *b = blk;
    u->d = fp16_to_fp32(b->d);
    u->dmin = 0.0f;
    u->sub = 16;
    for (int j = 0; j < 16; j++) {
        u->sc[j] = b->scales[j];
        u->m[j] = 0;
    }
    for (int e = 0; e < QK_K; e++)
        u->q[e] = (int8_t)((get_bits(b->ql, q6_low_pos(e), 0xF) | get_bits(b->qh, q6_high_pos(e), 3) << 4) - 32);
}

static void encode_q6_k(const quant_bk *u, uint16_t hd, uint16_t hdmin, block_q6_K *b)
{
    (void)hdmin;
    memset(b, 0, sizeof *b);
    b->d = hd;
    for (int j = 0; j < 16; j++)
        b->scales[j] = u->sc[j];
    for (int e = 0; e < QK_K; e++) {
        int v = u->q[e] + 32;
        put_bits(b->ql, q6_low_pos(e), v & 0xF);
        put_bits(b->qh, q6_high_pos(e), v >> 4);
    }
}

BK_CONVERT_DOT(q6_k, block_q6_K)
BK_FROM_FLOAT(q6_k, block_q6_K, ((bk_shape){.sub = 16, .qlo = -32, .qhi = 31, .cmax = 128, .affine = 0}))

/* ---- Q8_K (activations) ---------------------------------------------------- */

static void decode_q8_k(const void *blk, quant_bk *u)
{
    const block_q8_K *b = blk;
    u->d = b->d;
    u->dmin = 0.0f;
    u->sub = 16;
    for (int j = 0; j < 16; j++) {
        u->sc[j] = 1;
        u->m[j] = 0;
    }
    memcpy(u->q, b->qs, QK_K);
}

/* (d * 1) * q - 0 is d * q exactly. */
void quant_ref_q8_k_to_float(const void *src, float *dst, int64_t n)
{
    quant_bk_to_float(src, sizeof(block_q8_K), decode_q8_k, dst, n);
}

/* The activation rule of quant_ref.h, d kept in float; bsums as stored. */
void quant_ref_q8_k_from_float(const float *src, void *dst, int64_t n)
{
    block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++)
            amax = fmaxf(amax, fabsf(src[j]));
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = amax / 127.0f;
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = g * 16; j < (g + 1) * 16; j++) {
                b[i].qs[j] = (int8_t)quant_clamp(quant_round(src[j] * id), -127, 127);
                sum += b[i].qs[j];
            }
            b[i].bsums[g] = (int16_t)sum;
        }
    }
}
