/*
 * test_simd.c — every SIMD kernel set this CPU runs (simd.h), called
 * directly, against the scalar references of the type table:
 *
 *   vec_dot    |simd - ref| <= 2e-6 * sum_i |w_i a_i|, the sum taken over the
 *              dequantised weight and activation rows.  The integer part of
 *              every block is exact in both; what remains is float rounding:
 *              the SIMD kernels add block terms in float lanes (about 6e-8
 *              relative each, a few dozen terms deep at most here), the
 *              reference in double.  A wrong scale, bit or sub-block moves
 *              the result by a whole block's term, orders of magnitude more.
 *   rows       multi-row kernels equal the same set's vec_dot bit for bit.
 *   quantise   activation quantisers produce bytes identical to from_float,
 *              including round-half-even ties, zero blocks, F16 subnormals,
 *              overflow and NaN.
 *
 * Sizes: one block, a few blocks, many blocks, odd element counts for the
 * float types; weights both from the reference quantiser and from raw random
 * bytes (every scale and bit pattern a file may hold, with sane f16 scales).
 * A set this CPU cannot run is skipped with a message.
 */
#include "raw_blocks.h"
#include "test.h"
#include "xorshift.h"

#include "../kernels/cpu/fp16.h"
#include "../kernels/cpu/quant_blocks.h"
#include "../kernels/cpu/simd.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

/* sum |w_i a_i| over the dequantised rows: the scale of rounding errors. */
static double magnitude(const quant_traits *wt, const void *w, const void *a, int64_t n, float *wf, float *af)
{
    const quant_traits *at = quant_traits_of(wt->vec_dot_type);
    wt->to_float(w, wf, n);
    at->to_float(a, af, n);
    double mag = 0.0;
    for (int64_t i = 0; i < n; i++)
        mag += fabs((double)wf[i] * af[i]);
    return mag;
}

typedef struct dot_case {
    int64_t n;
    uint8_t *w, *a;
    float *xf, *wf, *af;
} dot_case;

static void free_dot_case(dot_case *c)
{
    free(c->w);
    free(c->a);
    free(c->xf);
    free(c->wf);
    free(c->af);
}

static bool alloc_dot_case(dot_case *c, const quant_traits *wt, int64_t n)
{
    const quant_traits *at = quant_traits_of(wt->vec_dot_type);
    c->n = n;
    c->w = malloc((size_t)(n / wt->block_size * wt->type_size) + 64);
    c->a = malloc((size_t)(n / at->block_size * at->type_size) + 64);
    c->xf = malloc((size_t)n * sizeof(float));
    c->wf = malloc((size_t)n * sizeof(float));
    c->af = malloc((size_t)n * sizeof(float));
    return c->w && c->a && c->xf && c->wf && c->af;
}

/* Compares one kernel with the reference on one weight row; returns false
 * and fills msg on a mismatch. */
static bool compare_dot(quant_vec_dot_fn fn, const quant_traits *wt, dot_case *c, char *msg, size_t msg_size)
{
    float got = NAN, want = NAN;
    fn(c->n, &got, c->w, c->a);
    wt->vec_dot_ref(c->n, &want, c->w, c->a);
    double mag = magnitude(wt, c->w, c->a, c->n, c->wf, c->af);
    double tol = 2e-6 * mag + 1e-30;
    if (isfinite(got) && fabs((double)got - want) <= tol)
        return true;
    snprintf(msg, msg_size, "n=%lld: simd %.9g, reference %.9g, |diff| %.3g > tolerance %.3g", (long long)c->n,
             got, want, fabs((double)got - want), tol);
    return false;
}

static const int64_t dot_blocks[] = {1, 2, 3, 8, 33, 64};
static const int64_t float_lengths[] = {1, 7, 8, 31, 33, 100, 257, 4099};

static void check_set_dots(test_ctx *t_, const simd_kernels *set, uint64_t *rng, int *checked)
{
    char msg[512];
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        quant_vec_dot_fn fn = set->vec_dot[type];
        if (fn == NULL)
            continue;
        const quant_traits *wt = quant_traits_of(type);
        const quant_traits *at = quant_traits_of(wt->vec_dot_type);
        bool is_float = wt->block_size == 1;
        size_t n_sizes = is_float ? sizeof float_lengths / sizeof float_lengths[0]
                                  : sizeof dot_blocks / sizeof dot_blocks[0];
        for (size_t s = 0; s < n_sizes; s++) {
            int64_t n = is_float ? float_lengths[s] : dot_blocks[s] * (int64_t)wt->block_size;
            for (int raw = 0; raw < 2; raw++) {
                dot_case c = {0};
                if (!alloc_dot_case(&c, wt, n)) {
                    free_dot_case(&c);
                    FAIL("out of memory");
                }
                for (int64_t i = 0; i < n; i++)
                    c.xf[i] = rng_float(rng);
                bool have_w = raw ? fill_raw_blocks(type, c.w, n / wt->block_size, rng) : true;
                if (!raw)
                    wt->from_float(c.xf, c.w, n);
                for (int64_t i = 0; i < n; i++)
                    c.xf[i] = rng_float(rng) * (i % 5 == 0 ? 4.0f : 1.0f);
                at->from_float(c.xf, c.a, n);
                bool ok = !have_w || compare_dot(fn, wt, &c, msg, sizeof msg);
                free_dot_case(&c);
                if (!ok)
                    FAIL("%s vec_dot of %s (%s weights): %s", set->isa, wt->name, raw ? "raw" : "quantised", msg);
                (*checked)++;
            }
        }
    }
}

/* Each set's multi-row kernels give, row by row, exactly its vec_dot. */
static void check_set_rows(test_ctx *t_, const simd_kernels *set, uint64_t *rng, int *checked)
{
    static const int64_t blocks[] = {1, 2, 5, 64};
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        quant_vec_dot_rows_fn rows_fn = set->vec_dot_rows[type];
        if (rows_fn == NULL)
            continue;
        CHECK(set->vec_dot[type] != NULL);
        const quant_traits *wt = quant_traits_of(type);
        const quant_traits *at = quant_traits_of(wt->vec_dot_type);
        for (size_t s = 0; s < sizeof blocks / sizeof blocks[0]; s++) {
            int64_t n = blocks[s] * (int64_t)wt->block_size;
            size_t row_bytes = (size_t)(blocks[s] * (int64_t)wt->type_size), stride = row_bytes + 5;
            uint8_t *w = malloc(stride * SIMD_ROWS), *a = malloc((size_t)(n / at->block_size * at->type_size));
            float *x = malloc((size_t)n * sizeof(float));
            if (w == NULL || a == NULL || x == NULL) {
                free(w), free(a), free(x);
                FAIL("out of memory");
            }
            for (int r = 0; r < SIMD_ROWS; r++)
                fill_raw_blocks(type, w + (size_t)r * stride, blocks[s], rng);
            for (int64_t i = 0; i < n; i++)
                x[i] = rng_float(rng);
            at->from_float(x, a, n);
            float got[SIMD_ROWS], want[SIMD_ROWS];
            rows_fn(n, got, w, stride, a);
            for (int r = 0; r < SIMD_ROWS; r++)
                set->vec_dot[type](n, &want[r], w + (size_t)r * stride, a);
            free(w), free(a), free(x);
            for (int r = 0; r < SIMD_ROWS; r++)
                if (memcmp(&got[r], &want[r], sizeof got[r]) != 0)
                    FAIL("%s vec_dot_rows of %s, n=%lld, row %d: %.9g, vec_dot %.9g", set->isa, wt->name,
                         (long long)n, r, got[r], want[r]);
            (*checked)++;
        }
    }
}

/* Inputs that probe the quantisers' rounding: ties at .5 after scaling
 * (amax 127 makes the scale exactly 1), zero blocks, tiny and huge values,
 * F16 subnormals and overflow, NaN for the float formats. */
static void fill_quant_input(float *x, int64_t n, int pattern, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        switch (pattern) {
        case 0: x[i] = rng_float(rng) * 3.0f; break;
        case 1: x[i] = i % 32 == 0 ? 127.0f : (float)((int64_t)(rng_next(rng) % 253) - 126) + 0.5f; break;
        case 2: x[i] = (i / 32) % 2 == 0 ? 0.0f : rng_float(rng) * 1e-3f; break;
        case 3: x[i] = rng_float(rng) * 1e-6f; break; /* F16 subnormals */
        default: x[i] = rng_float(rng) * 7e4f; break; /* F16 overflow */
        }
    }
}

static void check_set_quantisers(test_ctx *t_, const simd_kernels *set, uint64_t *rng, int *checked)
{
    static const int64_t lengths[] = {256, 512, 2048 + 256};
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        quant_from_float_fn fn = set->quantize[type];
        if (fn == NULL)
            continue;
        const quant_traits *t = quant_traits_of(type);
        for (size_t s = 0; s < sizeof lengths / sizeof lengths[0]; s++) {
            for (int pattern = 0; pattern < 5; pattern++) {
                int64_t n = lengths[s] + (t->block_size == 1 ? 3 : 0); /* odd tails for F16/BF16 */
                size_t bytes = (size_t)(n / t->block_size * t->type_size);
                float *x = malloc((size_t)n * sizeof(float));
                uint8_t *got = malloc(bytes), *want = malloc(bytes);
                if (x == NULL || got == NULL || want == NULL) {
                    free(x), free(got), free(want);
                    FAIL("out of memory");
                }
                fill_quant_input(x, n, pattern, rng);
                if (t->block_size == 1 && pattern == 4)
                    x[1] = NAN, x[2] = -INFINITY, x[n - 1] = NAN;
                memset(got, 0xA5, bytes);
                memset(want, 0x5A, bytes);
                fn(x, got, n);
                t->from_float(x, want, n);
                size_t first = bytes;
                for (size_t i = 0; i < bytes && first == bytes; i++)
                    if (got[i] != want[i])
                        first = i;
                free(x), free(got), free(want);
                if (first != bytes)
                    FAIL("%s quantiser for %s, n=%lld, input pattern %d: bytes differ from the reference at %zu",
                         set->isa, t->name, (long long)n, pattern, first);
                (*checked)++;
            }
        }
    }
}

TEST(simd_sets_match_references)
{
    const cpu_features *f = cpu_features_get();
    char features[256];
    cpu_features_describe(f, features, sizeof features);
    uint64_t rng = 0x243f6a8885a308d3ull;
    int ran = 0, checked = 0;
    char skipped[512] = "";
    for (int s = 0; s < simd_kernel_set_count; s++) {
        const simd_kernels *set = simd_kernel_sets[s];
        if (!set->runs_on(f)) {
            size_t len = strlen(skipped);
            snprintf(skipped + len, sizeof skipped - len, "%s%s", len ? ", " : "", set->isa);
            continue;
        }
        check_set_dots(t_, set, &rng, &checked);
        if (t_->result != TEST_PASS)
            return;
        check_set_rows(t_, set, &rng, &checked);
        if (t_->result != TEST_PASS)
            return;
        check_set_quantisers(t_, set, &rng, &checked);
        if (t_->result != TEST_PASS)
            return;
        ran++;
    }
    if (skipped[0] != '\0')
        printf("note: simd sets not run on this CPU (%s): %s\n", features, skipped);
    if (ran == 0)
        SKIP("this CPU (%s) runs none of the %d SIMD sets compiled in", features, simd_kernel_set_count);
    CHECK(checked > 0);
}

/* The dispatched table entry is the best set that runs here, and the
 * reference entry is untouched. */
TEST(simd_dispatch_picks_best_running_set)
{
    const cpu_features *f = cpu_features_get();
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        const quant_traits *t = quant_traits_of(type);
        if (t == NULL || t->vec_dot_ref == NULL)
            continue;
        quant_vec_dot_fn want = t->vec_dot_ref;
        for (int s = 0; s < simd_kernel_set_count; s++)
            if (simd_kernel_sets[s]->runs_on(f) && simd_kernel_sets[s]->vec_dot[type] != NULL)
                want = simd_kernel_sets[s]->vec_dot[type];
        if (t->vec_dot != want)
            FAIL("%s: dispatched vec_dot is not the best running set's", t->name);
        for (int s = 0; s < simd_kernel_set_count; s++)
            CHECK(t->vec_dot_ref != simd_kernel_sets[s]->vec_dot[type]);
    }
}
