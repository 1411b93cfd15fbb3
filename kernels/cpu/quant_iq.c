/*
 * quant_iq.c — the lattice formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
 * IQ1_S, IQ1_M (layouts: iq_blocks.h, grids: iq_grids.h).  Each decodes to
 * quant_bk (quant_k.c), so conversion and the dot product against Q8_K are
 * the K-quants' own:
 *
 *   ggml's value                         quant_bk: d        sc       q
 *   d * (0.5 + l) * 0.25 * grid * sign   (IQ2)     d / 8    2l + 1   grid * sign
 *   d * (0.5 + l) * 0.5 * grid * sign    (IQ3_XXS) d / 4    2l + 1   grid * sign
 *   d * (1 + 2l) * grid * sign           (IQ3_S)   d        2l + 1   grid * sign
 *   d * (2l + 1) * (grid +- 1/8)         (IQ1)     d / 8    2l + 1   8 grid +- 1
 *
 * Bit-exact with ggml: d * (0.5 + l) * 0.25 rounds once, to the same float
 * as (d / 8) * (2l + 1) (scaling by powers of two is exact: d is an f16,
 * far from float's subnormals); a sign factor commutes with rounding; and
 * (d (2l+1) / 8) * (8 grid +- 1) rounds the same real number as
 * d (2l+1) * (grid +- 1/8).
 *
 * The quantisers (quant_iq_fit.c) fit grid points and scales; the encoders
 * here only pack them.
 */
#include "quant_iq.h"

#include "fp16.h"
#include "iq_blocks.h"
#include "iq_grids.h"
#include "quant_iq_fit.h"

#include <string.h>

/* ---- shared unpacking --------------------------------------------------- */

static void start_bk(quant_bk *u, float d, int sub)
{
    u->d = d;
    u->dmin = 0.0f;
    u->sub = sub;
    memset(u->m, 0, sizeof u->m);
}

/* 8 values of an 8-coordinate magnitude grid point with a sign byte. */
static void put_signed8(int8_t *q, uint64_t point, uint8_t signs)
{
    for (int j = 0; j < 8; j++) {
        int v = (uint8_t)(point >> (8 * j));
        q[j] = (int8_t)(signs >> j & 1 ? -v : v);
    }
}

/* 4 values of a 4-coordinate grid point with 4 bits of a sign byte. */
static void put_signed4(int8_t *q, uint32_t point, unsigned signs4)
{
    for (int j = 0; j < 4; j++) {
        int v = (uint8_t)(point >> (8 * j));
        q[j] = (int8_t)(signs4 >> j & 1 ? -v : v);
    }
}

/* 8 IQ1 values in units of 1/8: 8 * grid + delta, delta = +-1. */
static void put_iq1(int8_t *q, uint64_t point, int neg_delta)
{
    for (int j = 0; j < 8; j++)
        q[j] = (int8_t)(8 * (int8_t)(point >> (8 * j)) + (neg_delta ? -1 : 1));
}

/* to_float, vec_dot and from_float of a format, through its decoder and
 * encoder (one fit per super-block). */
#define IQ_FUNCTIONS(fn, block_t, shape)                                                 \
    BK_CONVERT_DOT(fn, block_t)                                                          \
    void quant_ref_##fn##_from_float(const float *src, void *dst, int64_t n)             \
    {                                                                                    \
        static const iq_shape sh = shape;                                                \
        block_t *b = dst;                                                                \
        iq_fit fit;                                                                      \
        for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {                            \
            iq_fit_superblock(src, &sh, &fit);                                           \
            memset(&b[i], 0, sizeof b[i]);                                               \
            encode_##fn(&fit, &b[i]);                                                    \
        }                                                                                \
    }

/* ---- IQ2_XXS -------------------------------------------------------------- */

static void decode_iq2_xxs(const void *blk, quant_bk *u)
{
    const block_iq2_xxs *b = blk;
    start_bk(u, fp16_to_fp32(b->d) * 0.125f, 32);
    for (int j = 0; j < 8; j++) {
        uint32_t aux = iq_u32(b->qs + 8 * j + 4);
        u->sc[j] = (int8_t)(2 * (aux >> 28) + 1);
        for (int k = 0; k < 4; k++)
            put_signed8(u->q + 32 * j + 8 * k, iq2xxs_grid[b->qs[8 * j + k]], iq_ksigns[(aux >> (7 * k)) & 127]);
    }
}

/* Sign bytes have even parity (quant_iq_fit.c), so their low 7 bits index
 * iq_ksigns back to themselves. */
static uint32_t pack_signs_scale(const iq_fit *f, int first_group, int l)
{
    uint32_t aux = (uint32_t)l << 28;
    for (int k = 0; k < 4; k++)
        aux |= (uint32_t)(f->sign[first_group + k] & 127) << (7 * k);
    return aux;
}

static void encode_iq2_xxs(const iq_fit *f, block_iq2_xxs *b)
{
    b->d = f->d;
    for (int j = 0; j < 8; j++) {
        for (int k = 0; k < 4; k++)
            b->qs[8 * j + k] = (uint8_t)f->idx[4 * j + k];
        uint32_t aux = pack_signs_scale(f, 4 * j, f->l[j]);
        memcpy(b->qs + 8 * j + 4, &aux, 4);
    }
}

IQ_FUNCTIONS(iq2_xxs, block_iq2_xxs,
             ((iq_shape){.grid = IQ_GRID_2XXS, .scale_sub = 32, .l_max = 15, .unit = 0.125f, .even_signs = 1}))

/* ---- IQ2_XS and IQ2_S: scales per 16 values -------------------------------- */

static void decode_scales16(const uint8_t *scales, quant_bk *u)
{
    for (int j = 0; j < 8; j++) {
        u->sc[2 * j] = (int8_t)(2 * (scales[j] & 0xF) + 1);
        u->sc[2 * j + 1] = (int8_t)(2 * (scales[j] >> 4) + 1);
    }
}

static void encode_scales16(const iq_fit *f, uint8_t *scales)
{
    for (int j = 0; j < 8; j++)
        scales[j] = (uint8_t)(f->l[2 * j] | f->l[2 * j + 1] << 4);
}

static void decode_iq2_xs(const void *blk, quant_bk *u)
{
    const block_iq2_xs *b = blk;
    start_bk(u, fp16_to_fp32(b->d) * 0.125f, 16);
    decode_scales16(b->scales, u);
    for (int g = 0; g < 32; g++) {
        uint16_t v = iq_u16(b->qs + 2 * g);
        put_signed8(u->q + 8 * g, iq2xs_grid[v & 511], iq_ksigns[v >> 9]);
    }
}

static void encode_iq2_xs(const iq_fit *f, block_iq2_xs *b)
{
    b->d = f->d;
    encode_scales16(f, b->scales);
    for (int g = 0; g < 32; g++) {
        uint16_t v = (uint16_t)(f->idx[g] | (f->sign[g] & 127) << 9);
        memcpy(b->qs + 2 * g, &v, 2);
    }
}

IQ_FUNCTIONS(iq2_xs, block_iq2_xs,
             ((iq_shape){.grid = IQ_GRID_2XS, .scale_sub = 16, .l_max = 15, .unit = 0.125f, .even_signs = 1}))

static void decode_iq2_s(const void *blk, quant_bk *u)
{
    const block_iq2_s *b = blk;
    start_bk(u, fp16_to_fp32(b->d) * 0.125f, 16);
    decode_scales16(b->scales, u);
    for (int g = 0; g < 32; g++) {
        int idx = b->qs[g] | ((b->qh[g / 4] >> (2 * (g % 4))) & 3) << 8;
        put_signed8(u->q + 8 * g, iq2s_grid[idx], b->qs[32 + g]);
    }
}

static void encode_iq2_s(const iq_fit *f, block_iq2_s *b)
{
    b->d = f->d;
    encode_scales16(f, b->scales);
    for (int g = 0; g < 32; g++) {
        b->qs[g] = (uint8_t)f->idx[g];
        b->qs[32 + g] = f->sign[g];
        b->qh[g / 4] = (uint8_t)(b->qh[g / 4] | (f->idx[g] >> 8) << (2 * (g % 4)));
    }
}

IQ_FUNCTIONS(iq2_s, block_iq2_s, ((iq_shape){.grid = IQ_GRID_2S, .scale_sub = 16, .l_max = 15, .unit = 0.125f}))

/* ---- IQ3_XXS and IQ3_S: grid points of 4 values ----------------------------- */

static void decode_iq3_xxs(const void *blk, quant_bk *u)
{
    const block_iq3_xxs *b = blk;
    start_bk(u, fp16_to_fp32(b->d) * 0.25f, 32);
    for (int j = 0; j < 8; j++) {
        uint32_t aux = iq_u32(b->qs + 64 + 4 * j);
        u->sc[j] = (int8_t)(2 * (aux >> 28) + 1);
        for (int k = 0; k < 8; k++) {
            uint8_t signs = iq_ksigns[(aux >> (7 * (k / 2))) & 127];
            put_signed4(u->q + 32 * j + 4 * k, iq3xxs_grid[b->qs[8 * j + k]], signs >> (4 * (k % 2)));
        }
    }
}

static void encode_iq3_xxs(const iq_fit *f, block_iq3_xxs *b)
{
    b->d = f->d;
    for (int p = 0; p < 64; p++)
        b->qs[p] = (uint8_t)f->idx[p];
    for (int j = 0; j < 8; j++) {
        uint32_t aux = pack_signs_scale(f, 4 * j, f->l[j]);
        memcpy(b->qs + 64 + 4 * j, &aux, 4);
    }
}

IQ_FUNCTIONS(iq3_xxs, block_iq3_xxs,
             ((iq_shape){.grid = IQ_GRID_3XXS, .scale_sub = 32, .l_max = 15, .unit = 0.25f, .even_signs = 1}))

static void decode_iq3_s(const void *blk, quant_bk *u)
{
    const block_iq3_s *b = blk;
    start_bk(u, fp16_to_fp32(b->d), 32);
    for (int j = 0; j < 8; j++)
        u->sc[j] = (int8_t)(2 * ((b->scales[j / 2] >> (4 * (j % 2))) & 0xF) + 1);
    for (int p = 0; p < 64; p++) {
        int idx = b->qs[p] | ((b->qh[p / 8] >> (p % 8)) & 1) << 8;
        put_signed4(u->q + 4 * p, iq3s_grid[idx], b->signs[p / 2] >> (4 * (p % 2)));
    }
}

static void encode_iq3_s(const iq_fit *f, block_iq3_s *b)
{
    b->d = f->d;
    for (int j = 0; j < 8; j++)
        b->scales[j / 2] = (uint8_t)(b->scales[j / 2] | f->l[j] << (4 * (j % 2)));
    for (int p = 0; p < 64; p++) {
        b->qs[p] = (uint8_t)f->idx[p];
        b->qh[p / 8] = (uint8_t)(b->qh[p / 8] | (f->idx[p] >> 8) << (p % 8));
    }
    memcpy(b->signs, f->sign, 32);
}

IQ_FUNCTIONS(iq3_s, block_iq3_s, ((iq_shape){.grid = IQ_GRID_3S, .scale_sub = 32, .l_max = 15, .unit = 1.0f}))

/* ---- IQ1_S and IQ1_M: signed grid points plus a delta ----------------------- */

static void decode_iq1_s(const void *blk, quant_bk *u)
{
    const block_iq1_s *b = blk;
    start_bk(u, fp16_to_fp32(b->d) * 0.125f, 32);
    for (int j = 0; j < 8; j++) {
        uint16_t qh = b->qh[j];
        u->sc[j] = (int8_t)(2 * ((qh >> 12) & 7) + 1);
        for (int k = 0; k < 4; k++) {
            int idx = b->qs[4 * j + k] | ((qh >> (3 * k)) & 7) << 8;
            put_iq1(u->q + 32 * j + 8 * k, iq1s_grid[idx], qh >> 15);
        }
    }
}

static void encode_iq1_s(const iq_fit *f, block_iq1_s *b)
{
    b->d = f->d;
    for (int j = 0; j < 8; j++) {
        unsigned qh = (unsigned)f->l[j] << 12 | (unsigned)f->neg_delta[4 * j] << 15;
        for (int k = 0; k < 4; k++) {
            b->qs[4 * j + k] = (uint8_t)f->idx[4 * j + k];
            qh |= (unsigned)(f->idx[4 * j + k] >> 8) << (3 * k);
        }
        b->qh[j] = (uint16_t)qh;
    }
}

/* The fit works in grid units (value = scale * (grid +- 1/8)), so its unit is 1. */
IQ_FUNCTIONS(iq1_s, block_iq1_s,
             ((iq_shape){.grid = IQ_GRID_1S, .scale_sub = 32, .l_max = 7, .unit = 1.0f, .delta = IQ_DELTA_PER_32}))

static void decode_iq1_m(const void *blk, quant_bk *u)
{
    const block_iq1_m *b = blk;
    start_bk(u, fp16_to_fp32(iq1m_d_bits(b)) * 0.125f, 16);
    for (int h = 0; h < 16; h++)
        u->sc[h] = (int8_t)(2 * iq1m_scale(b, h) + 1);
    for (int g = 0; g < 32; g++) {
        int nib = (b->qh[g / 2] >> (4 * (g % 2))) & 0xF;
        put_iq1(u->q + 8 * g, iq1s_grid[b->qs[g] | (nib & 7) << 8], nib >> 3);
    }
}

static void encode_iq1_m(const iq_fit *f, block_iq1_m *b)
{
    for (int g = 0; g < 32; g++) {
        b->qs[g] = (uint8_t)f->idx[g];
        int nib = f->idx[g] >> 8 | f->neg_delta[g] << 3;
        b->qh[g / 2] = (uint8_t)(b->qh[g / 2] | nib << (4 * (g % 2)));
    }
    for (int k = 0; k < 4; k++) {
        unsigned s = (unsigned)((f->d >> (4 * k)) & 0xF) << 12;
        for (int h = 0; h < 4; h++)
            s |= (unsigned)f->l[4 * k + h] << (3 * h);
        uint16_t word = (uint16_t)s;
        memcpy(b->scales + 2 * k, &word, 2);
    }
}

IQ_FUNCTIONS(iq1_m, block_iq1_m,
             ((iq_shape){.grid = IQ_GRID_1S, .scale_sub = 16, .l_max = 7, .unit = 1.0f, .delta = IQ_DELTA_PER_8}))
