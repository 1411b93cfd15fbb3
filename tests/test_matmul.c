/*
 * test_matmul.c — the matvec/matmul drivers: every output equals the
 * dispatched vec_dot of its row and token (bit-exact: the driver only
 * splits and orders the work), for odd shapes, strided rows and outputs,
 * and pools of 1-3 threads; and the result agrees with a double-precision
 * dot of the dequantised weights and the original activations, within the
 * error that quantising the activations explains.
 */
#include "test.h"
#include "xorshift.h"

#include "../kernels/cpu/matmul.h"
#include "quant.h"

#include <math.h>
#include <stdlib.h>

typedef struct shape {
    int64_t n_rows, n_blocks, n_tok;
    int threads;
} shape;

static const shape shapes[] = {
    {1, 1, 1, 1}, {7, 1, 3, 2}, {37, 3, 1, 3}, {64, 8, 17, 2}, {33, 2, 9, 1}, {5, 1, 2, 3},
};

/* A weight type the drivers can be tested on: it quantises and dots. */
static bool testable(const quant_traits *t)
{
    if (t == NULL || t->vec_dot == NULL || t->from_float == NULL || t->to_float == NULL)
        return false;
    const quant_traits *a = quant_traits_of(t->vec_dot_type);
    return a != NULL && a->from_float != NULL;
}

typedef struct case_data {
    int64_t n, row_bytes, act_bytes;
    size_t row_stride, y_stride;
    uint8_t *w, *x_q;
    float *wf, *xf, *y;
} case_data;

static void free_case(case_data *c)
{
    free(c->w);
    free(c->x_q);
    free(c->wf);
    free(c->xf);
    free(c->y);
}

static bool make_case(case_data *c, uint32_t type, const shape *s, uint64_t *rng)
{
    const quant_traits *t = quant_traits_of(type);
    c->n = s->n_blocks * (int64_t)(t->block_size < 32 ? 32 : t->block_size);
    c->row_bytes = (int64_t)(c->n / t->block_size * t->type_size);
    c->act_bytes = (int64_t)matmul_act_bytes(type, c->n);
    c->row_stride = (size_t)c->row_bytes + 24; /* rows need not be adjacent */
    c->y_stride = (size_t)s->n_rows + 3;
    c->w = calloc((size_t)s->n_rows, c->row_stride);
    c->wf = malloc((size_t)(s->n_rows * c->n) * sizeof(float));
    c->x_q = malloc((size_t)(s->n_tok * c->act_bytes));
    c->xf = malloc((size_t)(s->n_tok * c->n) * sizeof(float));
    c->y = malloc(c->y_stride * (size_t)s->n_tok * sizeof(float));
    if (!c->w || !c->wf || !c->x_q || !c->xf || !c->y)
        return false;
    for (int64_t r = 0; r < s->n_rows; r++) {
        float *row = c->wf + r * c->n;
        for (int64_t i = 0; i < c->n; i++)
            row[i] = rng_float(rng);
        t->from_float(row, c->w + (size_t)r * c->row_stride, c->n);
        t->to_float(c->w + (size_t)r * c->row_stride, row, c->n); /* what the kernel sees */
    }
    for (int64_t k = 0; k < s->n_tok; k++) {
        float *x = c->xf + k * c->n;
        for (int64_t i = 0; i < c->n; i++)
            x[i] = rng_float(rng);
        matmul_quantize_act(type, x, c->x_q + k * c->act_bytes, c->n);
    }
    for (size_t i = 0; i < c->y_stride * (size_t)s->n_tok; i++)
        c->y[i] = NAN; /* padding must stay untouched */
    return true;
}

/* |y - exact| against a bound: 8-bit activations carry <= 1/254 relative
 * error per value, so the dot moves by at most sum|w x| / 127 (loose). */
static bool near_exact(float y, const float *w, const float *x, int64_t n)
{
    double exact = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        exact += (double)w[i] * x[i];
        mag += fabs((double)w[i] * x[i]);
    }
    return fabs(y - exact) <= mag / 127.0 + 1e-6;
}

static void check_type(test_ctx *t_, uint32_t type, const shape *s, uint64_t *rng)
{
    const quant_traits *t = quant_traits_of(type);
    case_data c = {0};
    thread_pool *pool = NULL;
    if (!make_case(&c, type, s, rng)) {
        free_case(&c);
        FAIL("%s: out of memory", t->name);
    }
    hydra_status st = pool_create(&pool, s->threads);
    if (st != HYDRA_OK) {
        free_case(&c);
        FAIL("pool_create(%d): %s", s->threads, hydra_last_error());
    }
    if (s->n_tok == 1)
        matvec(pool, type, c.w, c.row_stride, s->n_rows, c.n, c.x_q, c.y);
    else
        matmul(pool, type, c.w, c.row_stride, s->n_rows, c.n, c.x_q, (size_t)c.act_bytes, s->n_tok, c.y,
               c.y_stride);
    pool_destroy(pool);
    for (int64_t k = 0; k < s->n_tok; k++) {
        for (int64_t r = 0; r < (int64_t)c.y_stride; r++) {
            float got = c.y[(size_t)k * c.y_stride + (size_t)r];
            if (r >= s->n_rows) {
                if (!isnan(got)) {
                    free_case(&c);
                    FAIL("%s: wrote padding y[%lld][%lld]", t->name, (long long)k, (long long)r);
                }
                continue;
            }
            float want;
            t->vec_dot(c.n, &want, c.w + (size_t)r * c.row_stride, c.x_q + k * c.act_bytes);
            bool exact_ok = memcmp(&got, &want, sizeof got) == 0;
            bool near_ok = near_exact(got, c.wf + r * c.n, c.xf + k * c.n, c.n);
            if (!exact_ok || !near_ok) {
                free_case(&c);
                FAIL("%s rows=%lld n=%lld tok=%lld threads=%d: y[%lld][%lld] = %.9g, vec_dot %.9g%s",
                     t->name, (long long)s->n_rows, (long long)c.n, (long long)s->n_tok, s->threads,
                     (long long)k, (long long)r, got, want, near_ok ? "" : " (far from the exact dot)");
            }
        }
    }
    free_case(&c);
}

TEST(matmul_drivers_match_vec_dot)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int tested = 0;
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        if (!testable(quant_traits_of(type)))
            continue;
        tested++;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            check_type(t_, type, &shapes[i], &rng);
            if (t_->result != TEST_PASS)
                return;
        }
    }
    if (tested == 0)
        SKIP("no type has a vec_dot and a reference quantiser yet");
}

TEST(matmul_act_bytes_follow_vec_dot_type)
{
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        const quant_traits *t = quant_traits_of(type);
        if (t == NULL || t->vec_dot == NULL)
            continue;
        const quant_traits *a = quant_traits_of(t->vec_dot_type);
        CHECK(a != NULL);
        int64_t n = 256 * 3;
        CHECK_EQ_U64(matmul_act_bytes(type, n), (uint64_t)(n / a->block_size * a->type_size));
    }
}
