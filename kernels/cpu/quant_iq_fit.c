/*
 * quant_iq_fit.c — fits super-blocks to the lattice formats (quant_iq_fit.h).
 *
 * A grid point covers 8 values (4 for IQ3).  Its nearest point is found
 * through the cell of the product lattice the values round to: each
 * coordinate goes to its nearest level, and a table built once per grid
 * maps every cell (3^8 or 8^4 of them) to the grid point nearest to it.
 * That is not always the point nearest to the values themselves, but it is
 * one table look-up, and the quantiser stays simple and correct.
 *
 * Per sub-block: a scale search (candidates mapping max |x| around the top
 * level, each refit by least squares over its points); then the super-block
 * scale d is set so the largest sub-block scale takes the top code, every
 * sub-block tries its nearest codes, and the values are refit against the
 * scales the decoder will see.  Signs: each value's own, except where the
 * format stores 7 sign bits per 8 values and the 8th is their parity - an
 * odd count flips the value that costs least.
 */
#include "quant_iq_fit.h"

#include "fp16.h"
#include "iq_blocks.h"
#include "iq_grids.h"
#include "quant_ref.h"

#include <float.h>
#include <pthread.h>
#include <stdatomic.h>

enum { MAX_POINTS = 2048, MAX_DIM = 8, MAX_CELLS = 6561 /* 3^8 >= 8^4 */ };

typedef struct grid_source {
    const void *table; /* uint64_t[] for 8 coordinates, uint32_t[] for 4 */
    int n_points, dim, n_levels;
    int is_signed;     /* IQ1: coordinates carry their sign; no sign bits */
    float level[8];    /* a coordinate's values, ascending (iq_grids.h) */
} grid_source;

static const grid_source sources[IQ_GRID_COUNT] = {
    [IQ_GRID_2XXS] = {iq2xxs_grid, 256, 8, 3, 0, {8, 25, 43}},
    [IQ_GRID_2XS] = {iq2xs_grid, 512, 8, 3, 0, {8, 25, 43}},
    [IQ_GRID_2S] = {iq2s_grid, 1024, 8, 3, 0, {8, 25, 43}},
    [IQ_GRID_3XXS] = {iq3xxs_grid, 256, 4, 8, 0, {4, 12, 20, 28, 36, 44, 52, 62}},
    [IQ_GRID_3S] = {iq3s_grid, 512, 4, 8, 0, {1, 3, 5, 7, 9, 11, 13, 15}},
    [IQ_GRID_1S] = {iq1s_grid, 2048, 8, 3, 1, {-1, 0, 1}},
};

typedef struct lattice {
    const grid_source *src;
    int8_t coord[MAX_POINTS * MAX_DIM]; /* point p's coordinate j at p * dim + j */
    uint16_t nearest[MAX_CELLS];        /* cell -> nearest point; a cell's digit j (base n_levels) is coordinate j's level */
    atomic_int ready;
} lattice;

static lattice lattices[IQ_GRID_COUNT];
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

static int coordinate(const grid_source *s, int p, int j)
{
    if (s->dim == 8)
        return (int8_t)(((const uint64_t *)s->table)[p] >> (8 * j));
    return (uint8_t)(((const uint32_t *)s->table)[p] >> (8 * j));
}

static void build(lattice *L, const grid_source *s)
{
    L->src = s;
    for (int p = 0; p < s->n_points; p++)
        for (int j = 0; j < s->dim; j++)
            L->coord[p * s->dim + j] = (int8_t)coordinate(s, p, j);
    int cells = 1;
    for (int j = 0; j < s->dim; j++)
        cells *= s->n_levels;
    for (int c = 0; c < cells; c++) {
        float v[MAX_DIM];
        for (int j = 0, rest = c; j < s->dim; j++, rest /= s->n_levels)
            v[j] = s->level[rest % s->n_levels];
        float best = FLT_MAX;
        for (int p = 0; p < s->n_points; p++) {
            float dist = 0.0f;
            for (int j = 0; j < s->dim; j++)
                dist += (L->coord[p * s->dim + j] - v[j]) * (L->coord[p * s->dim + j] - v[j]);
            if (dist < best) {
                best = dist;
                L->nearest[c] = (uint16_t)p;
            }
        }
    }
}

/* The lattice of a grid, built on first use (a few hundred ms for IQ1_S's
 * 2048 points), then shared read-only by every thread. */
static const lattice *lattice_get(int grid)
{
    lattice *L = &lattices[grid];
    if (!atomic_load_explicit(&L->ready, memory_order_acquire)) {
        pthread_mutex_lock(&build_lock);
        if (!atomic_load_explicit(&L->ready, memory_order_relaxed)) {
            build(L, &sources[grid]);
            atomic_store_explicit(&L->ready, 1, memory_order_release);
        }
        pthread_mutex_unlock(&build_lock);
    }
    return L;
}

static int nearest_level(const grid_source *s, float t)
{
    int i = 0;
    while (i + 1 < s->n_levels && t > 0.5f * (s->level[i] + s->level[i + 1]))
        i++;
    return i;
}

static int cell_point(const lattice *L, const float *t)
{
    const grid_source *s = L->src;
    int cell = 0;
    for (int j = s->dim - 1; j >= 0; j--)
        cell = cell * s->n_levels + nearest_level(s, t[j]);
    return L->nearest[cell];
}

/* 8 values fitted at scale s: value j = s * q[j]. */
typedef struct group_fit {
    uint16_t idx[2]; /* one point of 8 coordinates, or two of 4 */
    uint8_t sign, neg_delta;
    float q[8];
} group_fit;

/* Magnitudes |x| / s to grid points; signs apart (IQ2, IQ3). */
static void fit_magnitudes(const lattice *L, int even_signs, const float *x, float s, group_fit *g)
{
    const int dim = L->src->dim;
    float t[8];
    for (int j = 0; j < 8; j++)
        t[j] = s > 0.0f ? fabsf(x[j]) / s : 0.0f;
    g->sign = 0;
    g->neg_delta = 0;
    for (int k = 0; k < 8 / dim; k++) {
        int p = cell_point(L, t + k * dim);
        g->idx[k] = (uint16_t)p;
        for (int j = 0; j < dim; j++)
            g->q[k * dim + j] = L->coord[p * dim + j];
    }
    for (int j = 0; j < 8; j++)
        if (x[j] < 0.0f)
            g->sign = (uint8_t)(g->sign | 1 << j);
    if (even_signs && __builtin_popcount(g->sign) % 2 != 0) {
        int flip = 0; /* the value whose sign is cheapest to get wrong */
        for (int j = 1; j < 8; j++)
            if (fabsf(x[j]) * g->q[j] < fabsf(x[flip]) * g->q[flip])
                flip = j;
        g->sign = (uint8_t)(g->sign ^ 1 << flip);
    }
    for (int j = 0; j < 8; j++)
        if (g->sign >> j & 1)
            g->q[j] = -g->q[j];
}

/* Values x / s - delta to the signed IQ1 grid. */
static void fit_signed(const lattice *L, const float *x, float s, float delta, group_fit *g)
{
    float t[8];
    for (int j = 0; j < 8; j++)
        t[j] = (s > 0.0f ? x[j] / s : 0.0f) - delta;
    int p = cell_point(L, t);
    g->idx[0] = (uint16_t)p;
    g->sign = 0;
    g->neg_delta = delta < 0.0f;
    for (int j = 0; j < 8; j++)
        g->q[j] = L->coord[p * 8 + j] + delta;
}

static double group_error(const float *x, const group_fit *g, float s)
{
    double err = 0.0;
    for (int j = 0; j < 8; j++)
        err += ((double)x[j] - (double)s * g->q[j]) * ((double)x[j] - (double)s * g->q[j]);
    return err;
}

static double fit_groups(const lattice *L, const iq_shape *sh, const float *x, int n, float s, float delta,
                         group_fit *g)
{
    double err = 0.0;
    for (int k = 0; k < n / 8; k++) {
        if (sh->delta == IQ_DELTA_NONE) {
            fit_magnitudes(L, sh->even_signs, x + 8 * k, s, &g[k]);
        } else if (sh->delta == IQ_DELTA_PER_8) {
            group_fit other;
            fit_signed(L, x + 8 * k, s, IQ1_DELTA, &g[k]);
            fit_signed(L, x + 8 * k, s, -IQ1_DELTA, &other);
            if (group_error(x + 8 * k, &other, s) < group_error(x + 8 * k, &g[k], s))
                g[k] = other;
        } else {
            fit_signed(L, x + 8 * k, s, delta, &g[k]);
        }
        err += group_error(x + 8 * k, &g[k], s);
    }
    return err;
}

/* n values (one scale sub-block) at scale s; for IQ1_S both deltas of the
 * sub-block are tried.  Returns the squared error; g[] the fit. */
static double fit_run(const lattice *L, const iq_shape *sh, const float *x, int n, float s, group_fit *g)
{
    double err = fit_groups(L, sh, x, n, s, IQ1_DELTA, g);
    if (sh->delta == IQ_DELTA_PER_32) {
        group_fit other[4];
        double err_neg = fit_groups(L, sh, x, n, s, -IQ1_DELTA, other);
        if (err_neg < err) {
            err = err_neg;
            for (int k = 0; k < n / 8; k++)
                g[k] = other[k];
        }
    }
    return err;
}

/* The sub-block's own best scale: candidates put max |x| between half and
 * 1.5 times the top level; each is refit by least squares over the points
 * it chose, and the smallest residual wins. */
static float search_scale(const lattice *L, const iq_shape *sh, const float *x, int n)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    if (amax == 0.0f)
        return 0.0f;
    const grid_source *src = L->src;
    float qmax = src->is_signed ? 1.0f + IQ1_DELTA : src->level[src->n_levels - 1];
    float best = amax / qmax;
    double best_err = DBL_MAX;
    group_fit g[4];
    for (int k = 0; k <= 10; k++) {
        fit_run(L, sh, x, n, amax / (qmax * (0.5f + 0.1f * (float)k)), g);
        double sxq = 0.0, sqq = 0.0, sxx = 0.0;
        for (int i = 0; i < n; i++) {
            float q = g[i / 8].q[i % 8];
            sxq += (double)x[i] * q;
            sqq += (double)q * q;
            sxx += (double)x[i] * x[i];
        }
        if (sqq <= 0.0 || sxq <= 0.0)
            continue;
        double err = sxx - sxq * sxq / sqq;
        if (err < best_err) {
            best_err = err;
            best = (float)(sxq / sqq);
        }
    }
    return best;
}

static void store_run(const lattice *L, const group_fit *g, int first_group, int n_groups, iq_fit *fit)
{
    int per_group = 8 / L->src->dim;
    for (int k = 0; k < n_groups; k++) {
        int at = first_group + k;
        for (int p = 0; p < per_group; p++)
            fit->idx[at * per_group + p] = g[k].idx[p];
        fit->sign[at] = g[k].sign;
        fit->neg_delta[at] = g[k].neg_delta;
    }
}

void iq_fit_superblock(const float *x, const iq_shape *sh, iq_fit *fit)
{
    const lattice *L = lattice_get(sh->grid);
    const int sub = sh->scale_sub, n_sub = QK_K / sub;
    float s[16], smax = 0.0f;
    for (int j = 0; j < n_sub; j++) {
        s[j] = search_scale(L, sh, x + j * sub, sub);
        smax = fmaxf(smax, s[j]);
    }
    /* the largest sub-block scale takes the top code; f16 keeps d finite */
    fit->d = fp32_to_fp16(fminf(smax / (sh->unit * (float)(2 * sh->l_max + 1)), 65504.0f));
    const float unit = fp16_to_fp32(fit->d) * sh->unit;
    for (int j = 0; j < n_sub; j++) {
        int l0 = unit > 0.0f ? quant_clamp(quant_round((s[j] / unit - 1.0f) * 0.5f), 0, sh->l_max) : 0;
        group_fit g[4], best[4];
        double best_err = DBL_MAX;
        for (int l = l0 > 0 ? l0 - 1 : 0; l <= l0 + 1 && l <= sh->l_max; l++) {
            double err = fit_run(L, sh, x + j * sub, sub, unit * (float)(2 * l + 1), g);
            if (err < best_err) {
                best_err = err;
                fit->l[j] = (uint8_t)l;
                for (int k = 0; k < sub / 8; k++)
                    best[k] = g[k];
            }
        }
        store_run(L, best, j * sub / 8, sub / 8, fit);
    }
}
