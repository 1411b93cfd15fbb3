/*
 * test_gemm.c — the multi-token kernels (simd.h quant_gemm_fn) of every
 * SIMD set this CPU runs: each output equals, bit for bit, the same set's
 * vec_dot of that row and token (which test_simd.c checks against the
 * scalar reference), for every token count 1..SIMD_GEMM_TOKENS, one to
 * several rows, rows and activations not adjacent (strides with padding),
 * one to many super-blocks, and weights of raw random bytes (every scale
 * and bit pattern a file may hold, with ordinary f16 scales).  Outputs
 * outside the tile stay untouched.
 */
#include "raw_blocks.h"
#include "test.h"
#include "xorshift.h"

#include "../kernels/cpu/fp16.h"
#include "../kernels/cpu/iq_blocks.h"
#include "../kernels/cpu/simd.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

typedef struct gemm_case {
    int64_t n;
    int rows, toks;
    size_t row_stride, a_stride, y_stride;
    uint8_t *w, *a;
    float *y;
} gemm_case;

static bool make_case(gemm_case *c, uint32_t type, int64_t n_blocks, int rows, int toks, uint64_t *rng)
{
    const quant_traits *wt = quant_traits_of(type), *at = quant_traits_of(wt->vec_dot_type);
    c->n = n_blocks * (int64_t)wt->block_size;
    c->rows = rows, c->toks = toks;
    c->row_stride = (size_t)(n_blocks * (int64_t)wt->type_size) + 7;
    c->a_stride = (size_t)(c->n / at->block_size * at->type_size) + 16; /* keeps Q8_K's 4-byte alignment */
    c->y_stride = (size_t)rows + 3;
    c->w = malloc(c->row_stride * (size_t)rows);
    c->a = malloc(c->a_stride * (size_t)toks);
    c->y = malloc(sizeof(float) * c->y_stride * (size_t)toks);
    float *x = malloc(sizeof(float) * (size_t)c->n);
    if (c->w == NULL || c->a == NULL || c->y == NULL || x == NULL) {
        free(x);
        return false;
    }
    for (int r = 0; r < rows; r++)
        fill_raw_blocks(type, c->w + (size_t)r * c->row_stride, n_blocks, rng);
    for (int t = 0; t < toks; t++) {
        for (int64_t i = 0; i < c->n; i++)
            x[i] = rng_float(rng) * (i % 7 == 0 ? 4.0f : 1.0f);
        at->from_float(x, c->a + (size_t)t * c->a_stride, c->n);
    }
    for (size_t i = 0; i < c->y_stride * (size_t)toks; i++)
        c->y[i] = NAN;
    free(x);
    return true;
}

static void free_case(gemm_case *c)
{
    free(c->w);
    free(c->a);
    free(c->y);
}

/* The first output that differs from vec_dot (or padding that was
 * written), described in msg; false when all match. */
static bool find_mismatch(const simd_kernels *set, uint32_t type, const gemm_case *c, char *msg, size_t len)
{
    for (int t = 0; t < c->toks; t++)
        for (size_t r = 0; r < c->y_stride; r++) {
            float got = c->y[(size_t)t * c->y_stride + r];
            if (r >= (size_t)c->rows) {
                if (!isnan(got))
                    return snprintf(msg, len, "wrote padding y[%d][%zu]", t, r), true;
                continue;
            }
            float want;
            set->vec_dot[type](c->n, &want, c->w + r * c->row_stride, c->a + (size_t)t * c->a_stride);
            if (memcmp(&got, &want, sizeof got) != 0)
                return snprintf(msg, len, "y[%d][%zu] = %.9g, vec_dot %.9g", t, r, got, want), true;
        }
    return false;
}

static void check_set(test_ctx *t_, const simd_kernels *set, uint64_t *rng, int *checked)
{
    static const int64_t blocks[] = {1, 3, 8};
    static const int row_counts[] = {1, 5};
    char msg[256];
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        if (set->gemm[type] == NULL)
            continue;
        CHECK(set->vec_dot[type] != NULL);
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
            for (size_t rc = 0; rc < sizeof row_counts / sizeof row_counts[0]; rc++)
                for (int toks = 1; toks <= SIMD_GEMM_TOKENS; toks++) {
                    gemm_case c = {0};
                    if (!make_case(&c, type, blocks[b], row_counts[rc], toks, rng)) {
                        free_case(&c);
                        FAIL("out of memory");
                    }
                    set->gemm[type](c.n, c.w, c.row_stride, c.rows, c.a, c.a_stride, toks, c.y, c.y_stride);
                    bool bad = find_mismatch(set, type, &c, msg, sizeof msg);
                    free_case(&c);
                    if (bad)
                        FAIL("%s gemm of %s, %lld blocks, %d rows, %d tokens: %s", set->isa,
                             quant_traits_of(type)->name, (long long)blocks[b], row_counts[rc], toks, msg);
                    (*checked)++;
                }
    }
}

TEST(gemm_kernels_equal_vec_dot)
{
    const cpu_features *f = cpu_features_get();
    uint64_t rng = 0x6a09e667f3bcc908ull;
    int checked = 0;
    for (int s = 0; s < simd_kernel_set_count; s++) {
        if (!simd_kernel_sets[s]->runs_on(f))
            continue;
        check_set(t_, simd_kernel_sets[s], &rng, &checked);
        if (t_->result != TEST_PASS)
            return;
    }
    if (checked == 0)
        SKIP("no SIMD set this CPU runs has gemm kernels");
}

/* The dispatched gemm belongs to the set whose vec_dot was dispatched. */
TEST(gemm_dispatch_follows_vec_dot)
{
    const cpu_features *f = cpu_features_get();
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        const quant_traits *t = quant_traits_of(type);
        if (t == NULL || t->vec_dot == NULL)
            continue;
        quant_gemm_fn want = NULL;
        for (int s = 0; s < simd_kernel_set_count; s++)
            if (simd_kernel_sets[s]->runs_on(f) && simd_kernel_sets[s]->vec_dot[type] == t->vec_dot)
                want = simd_kernel_sets[s]->gemm[type];
        if (quant_cpu_gemm(type) != want)
            FAIL("%s: quant_cpu_gemm is not the dispatched set's", t->name);
    }
    CHECK(quant_cpu_gemm(QT_COUNT) == NULL);
}
