/*
 * test_quant_iq.c — the lattice and ternary formats (IQ1_S, IQ1_M, IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0) beyond what the shared tests
 * cover (bit-exact dequantisation: test_quant_dequant.c; vec_dot_ref on
 * quantised and llama.cpp rows: test_quant_ref.c; every SIMD set on raw and
 * quantised rows: test_simd.c):
 *   - the grid tables hold what their definitions say (levels, sign parity);
 *   - vec_dot_ref on raw random blocks (every index, sign and scale pattern)
 *     equals the double dot of the dequantised rows;
 *   - every x86 set of these formats equals the AVX2 set bit for bit;
 *   - the dispatched matvec over odd row counts and unaligned odd strides,
 *     one block and many, equals vec_dot_ref row by row; matmul over odd
 *     row and token counts equals vec_dot bit for bit and vec_dot_ref;
 *   - the quantisers stay within llama-quantize's error on the shared source
 *     (its figures in ../shared/ref/dequant/README.md, made with an
 *     importance matrix) and keep all-zero super-blocks exactly zero;
 *   - ternary values survive TQ1_0/TQ2_0 exactly, and TQ1_0's base-3 packing
 *     rule recovers every trit of all 243 byte values.
 * Tolerance for float sums: 2e-6 * sum |w_i a_i| (test_simd.c's reasoning:
 * the integer parts are exact, only block-term roundings remain).
 */
#include "refcheck.h"
#include "test.h"
#include "util.h"

#include "quant.h"
#include "threads.h"

#include "../kernels/cpu/fp16.h"
#include "../kernels/cpu/iq_blocks.h"
#include "../kernels/cpu/iq_grids.h"
#include "../kernels/cpu/matmul.h"
#include "../kernels/cpu/vec_dot_iq.h"

#include <math.h>
#include <stdlib.h>

static const uint32_t iq_types[] = {QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S,
                                    QT_IQ1_S,   QT_IQ1_M,  QT_TQ1_0, QT_TQ2_0};
enum { N_IQ = sizeof iq_types / sizeof iq_types[0] };

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rng_float(uint64_t *s) /* uniform in [-1, 1) */
{
    return (float)((double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Raw random blocks with an ordinary f16 d (random bits there would be NaN
 * or inf now and then).  d sits at byte 0, except TQ1_0 (52), TQ2_0 (64) and
 * IQ1_M, whose d is the top nibbles of its four scale words. */
static void fill_raw(uint32_t type, uint8_t *w, int64_t n_blocks, uint64_t *rng)
{
    const quant_traits *t = quant_traits_of(type);
    for (int64_t i = 0; i < n_blocks * (int64_t)t->type_size; i++)
        w[i] = (uint8_t)rng_next(rng);
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = w + b * t->type_size;
        uint16_t h = fp32_to_fp16(rng_float(rng) * 0.05f);
        if (type == QT_IQ1_M) {
            for (int k = 0; k < 4; k++)
                blk[offsetof(block_iq1_m, scales) + 2 * k + 1] =
                    (uint8_t)((blk[offsetof(block_iq1_m, scales) + 2 * k + 1] & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
            continue;
        }
        size_t at = type == QT_TQ1_0 ? offsetof(block_tq1_0, d) : type == QT_TQ2_0 ? offsetof(block_tq2_0, d) : 0;
        memcpy(blk + at, &h, 2);
    }
}

static uint8_t *alloc_row(uint32_t type, int64_t n, size_t extra)
{
    uint64_t bytes = 0;
    quant_row_bytes(type, (uint64_t)n, &bytes);
    return malloc((size_t)bytes + extra);
}

/* A Q8_K activation row of weight-like values with a few large ones. */
static uint8_t *make_act(int64_t n, uint64_t *rng)
{
    float *x = malloc((size_t)n * sizeof *x);
    uint8_t *a = alloc_row(QT_Q8_K, n, 0);
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_float(rng) * (i % 5 == 0 ? 4.0f : 1.0f);
    quant_traits_of(QT_Q8_K)->from_float(x, a, n);
    free(x);
    return a;
}

/* The exact dot of the dequantised rows and its magnitude sum |w a|. */
static double exact_dot(uint32_t type, const void *w, const void *a, int64_t n, double *mag)
{
    float *wf = malloc((size_t)n * sizeof *wf), *af = malloc((size_t)n * sizeof *af);
    quant_traits_of(type)->to_float(w, wf, n);
    quant_traits_of(QT_Q8_K)->to_float(a, af, n);
    double dot = 0.0;
    *mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        dot += (double)wf[i] * af[i];
        *mag += fabs((double)wf[i] * af[i]);
    }
    free(wf);
    free(af);
    return dot;
}

/* ---- tables ------------------------------------------------------------- */

static bool bytes_in(uint64_t word, int n, const int *levels, int n_levels)
{
    for (int j = 0; j < n; j++) {
        int v = (int8_t)(word >> (8 * j)), found = 0;
        for (int k = 0; k < n_levels; k++)
            found |= v == levels[k];
        if (!found)
            return false;
    }
    return true;
}

TEST(iq_grid_tables_hold_their_levels_and_sign_parity)
{
    static const int iq2[] = {8, 25, 43}, iq3xxs[] = {4, 12, 20, 28, 36, 44, 52, 62},
                     iq3s[] = {1, 3, 5, 7, 9, 11, 13, 15}, iq1[] = {-1, 0, 1};
    for (int p = 0; p < 256; p++)
        CHECK(bytes_in(iq2xxs_grid[p], 8, iq2, 3) && bytes_in(iq3xxs_grid[p], 4, iq3xxs, 8));
    for (int p = 0; p < 512; p++)
        CHECK(bytes_in(iq2xs_grid[p], 8, iq2, 3) && bytes_in(iq3s_grid[p], 4, iq3s, 8));
    for (int p = 0; p < 1024; p++)
        CHECK(bytes_in(iq2s_grid[p], 8, iq2, 3));
    for (int p = 0; p < 2048; p++) {
        CHECK(bytes_in(iq1s_grid[p], 8, iq1, 3));
        for (int j = 0; j < 8; j++) { /* the x86 IQ1_S kernels' unsigned copies */
            CHECK_EQ_INT((int8_t)(iq1s_grid_p1[p] >> (8 * j)), (int8_t)(iq1s_grid[p] >> (8 * j)) + 1);
            CHECK_EQ_INT((int)(iq1s_grid_p1_nib[p] >> (4 * j) & 0xF), (int8_t)(iq1s_grid[p] >> (8 * j)) + 1);
        }
    }
    for (int k = 0; k < 128; k++) {
        CHECK_EQ_INT(iq_ksigns[k] & 127, k);
        CHECK_EQ_INT(__builtin_popcount(iq_ksigns[k]) % 2, 0);
        for (int j = 0; j < 8; j++)
            CHECK_EQ_INT((int8_t)(iq_ksigns_pm1[k] >> (8 * j)), iq_ksigns[k] >> j & 1 ? -1 : 1);
    }
}

/* ---- dot products -------------------------------------------------------- */

TEST(iq_vec_dot_ref_on_raw_blocks_equals_dequantised_dot)
{
    static const int64_t blocks[] = {1, 3, 64};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int t = 0; t < N_IQ; t++) {
        const quant_traits *q = quant_traits_of(iq_types[t]);
        for (size_t s = 0; s < sizeof blocks / sizeof blocks[0]; s++) {
            int64_t n = blocks[s] * QK_K;
            uint8_t *w = alloc_row(iq_types[t], n, 0), *a = make_act(n, &rng);
            fill_raw(iq_types[t], w, blocks[s], &rng);
            double mag, want = exact_dot(iq_types[t], w, a, n, &mag);
            float got = NAN;
            q->vec_dot_ref(n, &got, w, a);
            free(w);
            free(a);
            if (!(fabs((double)got - want) <= 2e-6 * mag + 1e-30))
                FAIL("%s, %lld blocks: vec_dot_ref %.9g, dequantised dot %.9g", q->name, (long long)blocks[s], got,
                     want);
        }
    }
}

/* matvec with the dispatched kernel (the best SIMD set here) on rows at an
 * odd, unaligned stride, against vec_dot_ref per row. */
TEST(iq_matvec_on_odd_row_counts_matches_reference)
{
    static const int64_t rows_list[] = {1, 3, 7, 13};
    static const int64_t blocks[] = {1, 5};
    thread_pool *pool = NULL;
    CHECK_OK(pool_create(&pool, 2));
    uint64_t rng = 0x243f6a8885a308d3ull;
    for (int t = 0; t < N_IQ && t_->result == TEST_PASS; t++) {
        const quant_traits *q = quant_traits_of(iq_types[t]);
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
            for (size_t rr = 0; rr < sizeof rows_list / sizeof rows_list[0]; rr++) {
                int64_t n = blocks[b] * QK_K, rows = rows_list[rr];
                size_t stride = (size_t)(blocks[b] * q->type_size) + 3;
                uint8_t *w = malloc(stride * (size_t)rows), *a = make_act(n, &rng);
                float *y = malloc((size_t)rows * sizeof *y);
                for (int64_t r = 0; r < rows; r++)
                    fill_raw(iq_types[t], w + (size_t)r * stride, blocks[b], &rng);
                matvec(pool, iq_types[t], w, stride, rows, n, a, y);
                for (int64_t r = 0; r < rows && t_->result == TEST_PASS; r++) {
                    float want = NAN;
                    q->vec_dot_ref(n, &want, w + (size_t)r * stride, a);
                    double mag;
                    exact_dot(iq_types[t], w + (size_t)r * stride, a, n, &mag);
                    if (!(fabs((double)y[r] - want) <= 2e-6 * mag + 1e-30))
                        test_failf(t_, __FILE__, __LINE__, "%s matvec, %lld rows of %lld blocks, row %lld: %.9g, reference %.9g",
                                   q->name, (long long)rows, (long long)blocks[b], (long long)r, y[r], want);
                }
                free(w);
                free(a);
                free(y);
            }
        }
    }
    pool_destroy(pool);
}

/* rows raw rows of `blocks` blocks at w, stride apart, and toks activation
 * rows at a, a_stride apart. */
static void fill_case(uint32_t type, int64_t blocks, int64_t rows, int64_t toks, uint8_t *w, size_t stride, uint8_t *a,
                      size_t a_stride, uint64_t *rng)
{
    const int64_t n = blocks * QK_K;
    for (int64_t r = 0; r < rows; r++)
        fill_raw(type, w + (size_t)r * stride, blocks, rng);
    for (int64_t t = 0; t < toks; t++) {
        uint8_t *one = make_act(n, rng);
        memcpy(a + (size_t)t * a_stride, one, matmul_act_bytes(type, n));
        free(one);
    }
}

/* matmul (the multi-token kernels: 8 tokens per call, then the remainder)
 * over odd row and token counts at odd, unaligned strides: every output is
 * bit for bit the dispatched vec_dot of its row and token (batch and token
 * by token agree) and within the tolerance of vec_dot_ref. */
static bool matmul_case(test_ctx *t_, thread_pool *pool, uint32_t type, int64_t blocks, int64_t rows, int64_t toks,
                        uint64_t *rng)
{
    const quant_traits *q = quant_traits_of(type);
    const int64_t n = blocks * QK_K;
    const size_t stride = (size_t)(blocks * q->type_size) + 3, a_stride = matmul_act_bytes(type, n) + 4;
    const size_t y_stride = (size_t)rows + 2;
    uint8_t *w = malloc(stride * (size_t)rows), *a = malloc(a_stride * (size_t)toks);
    float *y = malloc(y_stride * (size_t)toks * sizeof *y);
    fill_case(type, blocks, rows, toks, w, stride, a, a_stride, rng);
    matmul(pool, type, w, stride, rows, n, a, a_stride, toks, y, y_stride);
    bool ok = true;
    for (int64_t t = 0; t < toks && ok; t++)
        for (int64_t r = 0; r < rows && ok; r++) {
            const uint8_t *wr = w + (size_t)r * stride, *at = a + (size_t)t * a_stride;
            float got = y[(size_t)t * y_stride + (size_t)r], one = NAN, want = NAN;
            double mag;
            q->vec_dot(n, &one, wr, at);
            q->vec_dot_ref(n, &want, wr, at);
            exact_dot(type, wr, at, n, &mag);
            ok = memcmp(&got, &one, sizeof got) == 0 && fabs((double)got - want) <= 2e-6 * mag + 1e-30;
            if (!ok)
                test_failf(t_, __FILE__, __LINE__,
                           "%s matmul, %lld rows of %lld blocks, %lld tokens, y[%lld][%lld]: %.9g, vec_dot %.9g, "
                           "reference %.9g",
                           q->name, (long long)rows, (long long)blocks, (long long)toks, (long long)t, (long long)r,
                           got, one, want);
        }
    free(w);
    free(a);
    free(y);
    return ok;
}

TEST(iq_matmul_on_odd_rows_and_tokens_matches_vec_dot_and_reference)
{
    static const int64_t rows_list[] = {1, 7}, blocks[] = {1, 3}, toks_list[] = {1, 3, 8, 11};
    thread_pool *pool = NULL;
    CHECK_OK(pool_create(&pool, 2));
    uint64_t rng = 0x13198a2e03707344ull;
    bool ok = true;
    for (int t = 0; t < N_IQ && ok; t++)
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0] && ok; b++)
            for (size_t rr = 0; rr < sizeof rows_list / sizeof rows_list[0] && ok; rr++)
                for (size_t k = 0; k < sizeof toks_list / sizeof toks_list[0] && ok; k++)
                    ok = matmul_case(t_, pool, iq_types[t], blocks[b], rows_list[rr], toks_list[k], &rng);
    pool_destroy(pool);
}

/* Every x86 set of these formats that runs here (the AVX-512 one on the lent
 * machine, with its mask-register signs and vpdpwssd) against the AVX2 set,
 * bit for bit: both take the same float step, so equal outputs mean equal
 * integer totals.  Raw rows at an odd stride (every index, sign and scale
 * pattern), one block and many, 1 to 8 tokens. */
#if defined(__x86_64__)
static bool sets_agree(test_ctx *t_, const simd_kernels *set, uint32_t type, int64_t blocks, int toks, uint64_t *rng)
{
    enum { ROWS = 3 };
    const int64_t n = blocks * QK_K;
    const size_t stride = (size_t)(blocks * quant_traits_of(type)->type_size) + 3;
    const size_t a_stride = matmul_act_bytes(type, n) + 4;
    uint8_t *w = malloc(stride * ROWS), *a = malloc(a_stride * (size_t)toks);
    float want[ROWS * SIMD_GEMM_TOKENS], got[ROWS * SIMD_GEMM_TOKENS], dot = NAN, dot_avx2 = NAN;
    fill_case(type, blocks, ROWS, toks, w, stride, a, a_stride, rng);
    simd_iq_avx2.gemm[type](n, w, stride, ROWS, a, a_stride, toks, want, ROWS);
    set->gemm[type](n, w, stride, ROWS, a, a_stride, toks, got, ROWS);
    simd_iq_avx2.vec_dot[type](n, &dot_avx2, w + stride, a);
    set->vec_dot[type](n, &dot, w + stride, a);
    bool ok = memcmp(want, got, sizeof(float) * ROWS * (size_t)toks) == 0 && memcmp(&dot, &dot_avx2, sizeof dot) == 0;
    if (!ok)
        test_failf(t_, __FILE__, __LINE__, "%s %s, %lld blocks, %d tokens: differs from %s", set->isa,
                   quant_traits_of(type)->name, (long long)blocks, toks, simd_iq_avx2.isa);
    free(w);
    free(a);
    return ok;
}
#endif

TEST(iq_simd_sets_equal_avx2_set_bit_for_bit)
{
#if defined(__x86_64__)
    const cpu_features *f = cpu_features_get();
    if (!simd_iq_avx2.runs_on(f))
        SKIP("no AVX2 here");
    static const int64_t blocks[] = {1, 5};
    static const int toks_list[] = {1, 2, 3, 8};
    uint64_t rng = 0xa4093822299f31d0ull;
    int compared = 0;
    for (int s = 0; s < simd_kernel_set_count; s++) {
        const simd_kernels *set = simd_kernel_sets[s];
        if (set == &simd_iq_avx2 || !set->runs_on(f))
            continue;
        for (int t = 0; t < N_IQ; t++) {
            if (set->gemm[iq_types[t]] == NULL || set->vec_dot[iq_types[t]] == NULL)
                continue;
            for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
                for (size_t k = 0; k < sizeof toks_list / sizeof toks_list[0]; k++)
                    if (!sets_agree(t_, set, iq_types[t], blocks[b], toks_list[k], &rng))
                        return;
            compared++;
        }
    }
    if (compared == 0)
        SKIP("no other set of these formats runs here");
#else
    SKIP("x86 sets only");
#endif
}

/* ---- quantisers ------------------------------------------------------------ */

/* llama-quantize's RMSE on the shared source, with an importance matrix
 * (../shared/ref/dequant/README.md). */
static const double ggml_rmse[N_IQ] = {0.0265, 0.0197, 0.0189, 0.0142, 0.00974, 0.0254, 0.0212, 0.0194, 0.0194};

/* Sum of squared errors of rows of len values; *zero_out: largest |output|
 * over all-zero super-blocks of the input. */
static double round_trip_se(uint32_t type, const float *x, int64_t rows, int64_t len, double *zero_out)
{
    const quant_traits *q = quant_traits_of(type);
    uint8_t *buf = alloc_row(type, len, 0);
    float *y = malloc((size_t)len * sizeof *y);
    double se = 0.0;
    for (int64_t r = 0; r < rows; r++, x += len) {
        q->from_float(x, buf, len);
        q->to_float(buf, y, len);
        for (int64_t b = 0; b < len; b += QK_K) {
            bool all_zero = true;
            for (int64_t i = b; i < b + QK_K; i++) {
                se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
                all_zero &= x[i] == 0.0f;
            }
            for (int64_t i = b; all_zero && i < b + QK_K; i++)
                *zero_out = fmax(*zero_out, fabs(y[i]));
        }
    }
    free(buf);
    free(y);
    return se;
}

TEST(iq_quantisers_within_llama_quantize_error_on_shared_source)
{
    REQUIRE_SHARED();
    char path[1024];
    size_t size = 0;
    float *src = ref_read_quant_source(path, sizeof path, &size);
    if (src == NULL)
        FAIL("cannot read %s (%zu bytes)", path, size);
    for (int t = 0; t < N_IQ; t++) {
        double zero_out = 0.0;
        double se = round_trip_se(iq_types[t], src, 8, 512, &zero_out) + round_trip_se(iq_types[t], src + 4096, 4, 768, &zero_out);
        double rmse = sqrt(se / REF_QUANT_SOURCE);
        printf("  %-8s round-trip RMSE %.5f (llama-quantize with imatrix %.5f)\n", quant_traits_of(iq_types[t])->name,
               rmse, ggml_rmse[t]);
        if (!(rmse <= 1.1 * ggml_rmse[t]) || zero_out != 0.0) {
            free(src);
            FAIL("%s: RMSE %.4g (llama-quantize %.4g), largest output of an all-zero super-block %.3g",
                 quant_traits_of(iq_types[t])->name, rmse, ggml_rmse[t], zero_out);
        }
    }
    free(src);
}

TEST(tq_ternary_values_round_trip_exactly)
{
    enum { BLOCKS = 64 };
    uint64_t rng = 7;
    float *x = malloc(BLOCKS * QK_K * sizeof *x), *y = malloc(BLOCKS * QK_K * sizeof *y);
    for (int i = 0; i < BLOCKS * QK_K; i++)
        x[i] = 0.375f * (float)((int)(rng_next(&rng) % 3) - 1);
    for (int b = 0; b < BLOCKS; b++)
        x[b * QK_K + b] = -0.375f; /* every block has a nonzero value */
    static const uint32_t types[] = {QT_TQ1_0, QT_TQ2_0};
    for (int t = 0; t < 2; t++) {
        uint8_t *buf = alloc_row(types[t], BLOCKS * QK_K, 0);
        quant_traits_of(types[t])->from_float(x, buf, BLOCKS * QK_K);
        quant_traits_of(types[t])->to_float(buf, y, BLOCKS * QK_K);
        free(buf);
        for (int i = 0; i < BLOCKS * QK_K; i++)
            if (x[i] != y[i]) {
                float was = x[i], got = y[i];
                free(x);
                free(y);
                FAIL("%s: value %d is %g after a round trip, was %g", quant_traits_of(types[t])->name, i, got, was);
            }
    }
    free(x);
    free(y);
}

/* The packing rule of iq_blocks.h: byte = ceil(256 v / 243) for the 5-trit
 * number v, and trit n = ((byte * 3^n mod 256) * 3) >> 8. */
TEST(tq1_packing_recovers_every_trit)
{
    for (int v = 0; v < 243; v++) {
        uint8_t byte = (uint8_t)((v * 256 + 242) / 243);
        for (int n = 0, p = 81; n < 5; n++, p /= 3)
            CHECK_EQ_INT(tq1_trit(byte, n), (v / p) % 3);
    }
}
