/*
 * test_cuda_stack.c — the stacked prefill launch (gk_matmul_multi:
 * several matrices' row tiles in one grid, kernels/cuda/mmq.cu) against one
 * gk_matmul launch per matrix, bit for bit, and a matrix split into its two
 * column halves (the attention output's split) against the float
 * reference of the whole.  Skips without a device.
 */
#include "gpu/gpu.h"
#include "gpu/gpu_check_stack.h"
#include "quant.h"
#include "test.h"
#include "xorshift.h"
#include "gpu_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ST_MAX_ROWS = 96, ST_MAX_COLS = 1024, ST_MAX_TOK = 100 };

/* Rows of n_cols written by the reference quantiser (w), their values (wf). */
static void st_weights(uint32_t type, int64_t n_rows, int64_t n_cols, uint64_t *seed, uint8_t *w, float *wf)
{
    const quant_traits *q = quant_traits_of(type);
    uint64_t rb = 0;
    quant_row_bytes(type, (uint64_t)n_cols, &rb);
    float src[ST_MAX_COLS];
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n_cols; i++)
            src[i] = rng_float(seed) * (float)(1 + (i / 32) % 5);
        q->from_float(src, w + r * rb, n_cols);
        q->to_float(w + r * rb, wf + r * n_cols, n_cols);
    }
}

static bool same_bits(const float *a, const float *b, size_t n, size_t *at)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            *at = i;
            return false;
        }
    return true;
}

/* Q and K of one type and V of another (the pairs the stacked launch
 * takes), and three of one type; 100 and 70 tokens cross the 64-token
 * tiles, 67 and 5 rows the 64-row ones. */
TEST(cuda_stacked_matmul_equals_one_launch_each)
{
    REQUIRE_GPU();
    static const struct {
        uint32_t type[3];
        int64_t rows[3], cols;
        int n_tok;
    } cases[] = {
        {{QT_Q4_K, QT_Q4_K, QT_Q6_K}, {96, 32, 40}, 512, 100},
        {{QT_Q5_K, QT_Q5_K, QT_Q6_K}, {64, 16, 16}, 256, 70},
        {{QT_Q8_0, QT_Q8_0, QT_Q8_0}, {67, 64, 5}, 576, 70},
    };
    uint64_t seed = 0x57AC4EDull;
    float *wf = malloc(sizeof(float) * ST_MAX_ROWS * ST_MAX_COLS), *x = malloc(sizeof(float) * ST_MAX_TOK * ST_MAX_COLS);
    float *ys = malloc(sizeof(float) * 3 * ST_MAX_ROWS * ST_MAX_TOK), *ye = malloc(sizeof(float) * 3 * ST_MAX_ROWS * ST_MAX_TOK);
    uint8_t *w[3];
    for (int i = 0; i < 3; i++)
        w[i] = malloc(4 * ST_MAX_ROWS * ST_MAX_COLS);
    CHECK(wf && x && ys && ye && w[0] && w[1] && w[2]);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        gpu_stack_mat m[3];
        size_t n_out = 0;
        for (int i = 0; i < 3; i++) {
            uint64_t rb = 0;
            CHECK(quant_row_bytes(cases[ci].type[i], (uint64_t)cases[ci].cols, &rb));
            st_weights(cases[ci].type[i], cases[ci].rows[i], cases[ci].cols, &seed, w[i], wf);
            m[i] = (gpu_stack_mat){.type = cases[ci].type[i], .w = w[i], .w_bytes = rb * (size_t)cases[ci].rows[i],
                                   .row_bytes = rb, .n_rows = cases[ci].rows[i], .n_cols = cases[ci].cols};
            n_out += (size_t)(cases[ci].rows[i] * cases[ci].n_tok);
        }
        for (int64_t i = 0; i < cases[ci].cols * cases[ci].n_tok; i++)
            x[i] = rng_float(&seed) * (i % 97 == 0 ? 8.0f : 1.0f);
        CHECK_OK(gpu_check_matmul_stack(m, 3, x, cases[ci].cols, cases[ci].n_tok, ys, ye));
        size_t at = 0;
        if (!same_bits(ys, ye, n_out, &at))
            FAIL("case %zu output %zu: stacked %.9g, one launch %.9g", ci, at, ys[at], ye[at]);
    }
    for (int i = 0; i < 3; i++)
        free(w[i]);
    free(wf);
    free(x);
    free(ys);
    free(ye);
}

/* A matrix as its two column halves in one stacked launch: each half the
 * same bits as its own launch, and their sum within the f16 tiles' bar of
 * the float reference (dequantised weights . x, double). */
TEST(cuda_column_halves_sum_to_the_whole)
{
    REQUIRE_GPU();
    static const uint32_t types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q4_0};
    const int64_t rows = 67, cols = 1024;
    const int n_tok = 40;
    uint64_t seed = 0x4A1F5ull;
    float *wf = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * n_tok * cols);
    float *ys = malloc(sizeof(float) * 2 * rows * n_tok), *ye = malloc(sizeof(float) * 2 * rows * n_tok);
    uint8_t *w = malloc(4 * rows * cols);
    CHECK(wf && x && ys && ye && w);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint64_t rb = 0, half = 0;
        CHECK(quant_row_bytes(types[ti], (uint64_t)cols, &rb) && quant_row_bytes(types[ti], (uint64_t)cols / 2, &half));
        st_weights(types[ti], rows, cols, &seed, w, wf);
        for (int64_t i = 0; i < cols * n_tok; i++)
            x[i] = rng_float(&seed);
        const gpu_stack_mat lo = {.type = types[ti], .w = w, .w_bytes = rb * rows, .row_bytes = rb, .n_rows = rows,
                                  .n_cols = cols / 2};
        gpu_stack_mat m[2] = {lo, lo};
        m[1].offset = half;
        m[1].x_col = cols / 2;
        CHECK_OK(gpu_check_matmul_stack(m, 2, x, cols, n_tok, ys, ye));
        size_t at = 0;
        if (!same_bits(ys, ye, (size_t)(2 * rows * n_tok), &at))
            FAIL("type %u output %zu: stacked %.9g, one launch %.9g", types[ti], at, ys[at], ye[at]);
        for (int t = 0; t < n_tok; t++)
            for (int64_t r = 0; r < rows; r++) {
                double want = 0, mag = 0;
                for (int64_t k = 0; k < cols; k++) {
                    want += (double)wf[r * cols + k] * x[t * cols + k];
                    mag += fabs((double)wf[r * cols + k] * x[t * cols + k]);
                }
                const double got = (double)ys[t * rows + r] + ys[rows * n_tok + t * rows + r];
                if (!(fabs(got - want) <= 2e-3 * mag + 1e-6))
                    FAIL("type %u token %d row %lld: halves %.9g, reference %.9g", types[ti], t, (long long)r, got,
                         want);
            }
    }
    free(w);
    free(wf);
    free(x);
    free(ys);
    free(ye);
}
