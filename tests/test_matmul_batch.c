/*
 * test_matmul_batch.c — matmul_batch (matmul.h): a batch of independent
 * products of mixed types, shapes and token counts (1 to 9: one-token
 * rows, the gemm kernels' 2-8, and a second gemm call), computed in one
 * parallel region with chunks claimed from both ends, gives every output
 * bit-identical to the dispatched vec_dot of its row and token, writes
 * nothing outside each output, and handles batches longer than one region
 * takes (pools of 1-3 threads).
 */
#include "test.h"
#include "xorshift.h"

#include "../kernels/cpu/matmul.h"
#include "quant.h"

#include <math.h>
#include <stdlib.h>

enum { PAD = 3 };

typedef struct owned_item {
    matmul_item it;
    uint8_t *w, *x_q;
    float *y; /* n_tok rows of n_rows + PAD, the pad NAN */
} owned_item;

static bool make_item(owned_item *o, uint32_t type, int64_t n_rows, int64_t n_blocks, int64_t n_tok, uint64_t *rng)
{
    const quant_traits *t = quant_traits_of(type);
    const int64_t n = n_blocks * (int64_t)t->block_size, y_stride = n_rows + PAD;
    const size_t row_bytes = (size_t)(n / t->block_size * t->type_size), stride = row_bytes + 8;
    const size_t x_stride = matmul_act_bytes(type, n);
    float *x = malloc(sizeof(float) * (size_t)n);
    o->w = malloc(stride * (size_t)n_rows);
    o->x_q = malloc(x_stride * (size_t)n_tok);
    o->y = malloc(sizeof(float) * (size_t)(y_stride * n_tok));
    if (x == NULL || o->w == NULL || o->x_q == NULL || o->y == NULL) {
        free(x);
        return false;
    }
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n; i++)
            x[i] = rng_float(rng);
        t->from_float(x, o->w + (size_t)r * stride, n);
    }
    for (int64_t k = 0; k < n_tok; k++) {
        for (int64_t i = 0; i < n; i++)
            x[i] = rng_float(rng);
        matmul_quantize_act(type, x, o->x_q + (size_t)k * x_stride, n);
    }
    for (int64_t r = 0; r < y_stride * n_tok; r++)
        o->y[r] = NAN;
    o->it = (matmul_item){type, o->w, stride, n_rows, n, o->x_q, x_stride, n_tok, o->y, (size_t)y_stride};
    free(x);
    return true;
}

static void free_items(owned_item *o, int n)
{
    for (int i = 0; i < n; i++) {
        free(o[i].w);
        free(o[i].x_q);
        free(o[i].y);
    }
}

/* The first wrong output of item o, described in msg; false when right. */
static bool item_wrong(const owned_item *o, char *msg, size_t len)
{
    const matmul_item *it = &o->it;
    const char *name = quant_traits_of(it->wtype)->name;
    for (int64_t k = 0; k < it->n_tok; k++)
        for (int64_t r = 0; r < it->n_rows + PAD; r++) {
            float got = o->y[(size_t)k * it->y_stride + (size_t)r], want;
            if (r >= it->n_rows) {
                if (!isnan(got))
                    return snprintf(msg, len, "%s token %lld: wrote past row %lld", name, (long long)k,
                                    (long long)it->n_rows), true;
                continue;
            }
            quant_traits_of(it->wtype)->vec_dot(it->n, &want, o->w + (size_t)r * it->row_stride,
                                                o->x_q + (size_t)k * it->x_stride);
            if (memcmp(&got, &want, sizeof got) != 0)
                return snprintf(msg, len, "%s %lld x %lld, %lld tokens, row %lld token %lld: %.9g, vec_dot %.9g",
                                name, (long long)it->n_rows, (long long)it->n, (long long)it->n_tok, (long long)r,
                                (long long)k, got, want), true;
        }
    return false;
}

static void check_batch(test_ctx *t_, int n_items, int threads, uint64_t *rng)
{
    static const uint32_t types[] = {QT_Q4_K, QT_Q6_K, QT_Q8_0, QT_F32, QT_Q5_K, QT_Q4_0};
    static const int64_t rows[] = {1, 7, 64, 133};
    static const int64_t tokens[] = {1, 1, 2, 3, 4, 8, 9};
    owned_item *o = calloc((size_t)n_items, sizeof *o);
    thread_pool *pool = NULL;
    char msg[256] = "";
    bool ok = o != NULL && pool_create(&pool, threads) == HYDRA_OK;
    for (int i = 0; ok && i < n_items; i++) {
        uint32_t type = types[rng_next(rng) % (sizeof types / sizeof types[0])];
        const int64_t n_rows = rows[rng_next(rng) % 4], n_blocks = 1 + (int64_t)(rng_next(rng) % 3);
        ok = make_item(&o[i], type, n_rows, n_blocks, tokens[rng_next(rng) % (sizeof tokens / sizeof tokens[0])], rng);
    }
    if (ok) {
        matmul_item *items = malloc(sizeof *items * (size_t)n_items);
        ok = items != NULL;
        for (int i = 0; ok && i < n_items; i++)
            items[i] = o[i].it;
        if (ok)
            matmul_batch(pool, items, n_items);
        free(items);
    }
    bool wrong = false;
    for (int i = 0; ok && !wrong && i < n_items; i++)
        wrong = item_wrong(&o[i], msg, sizeof msg);
    pool_destroy(pool);
    if (o != NULL)
        free_items(o, n_items);
    free(o);
    if (!ok)
        FAIL("setup failed (memory or threads)");
    if (wrong)
        FAIL("%d items, %d threads: %s", n_items, threads, msg);
}

TEST(matmul_batch_matches_vec_dot)
{
    uint64_t rng = 0xbb67ae8584caa73bull;
    static const int counts[] = {1, 3, 16, 70, 140};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int threads = 1; threads <= 3; threads++) {
            check_batch(t_, counts[c], threads, &rng);
            if (t_->result != TEST_PASS)
                return;
        }
}

TEST(matmul_batch_of_nothing_does_nothing)
{
    thread_pool *pool = NULL;
    CHECK_OK(pool_create(&pool, 2));
    matmul_batch(pool, NULL, 0);
    pool_destroy(pool);
}
