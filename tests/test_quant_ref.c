/*
 * test_quant_ref.c — the scalar references of the type table checked
 * against independent arithmetic:
 *   - vec_dot_ref of every weight type equals the double-precision dot of the
 *     dequantised weight row with the dequantised activation row (random rows
 *     quantised by the table, and real llama.cpp blocks from
 *     ../shared/ref/dequant), for one block, a few, odd counts and many;
 *   - from_float -> to_float stays within the type's expected error on the
 *     shared source weights and on random data;
 *   - the activation quantisers follow their documented rule (round half to
 *     even, d = amax / 127) and Q8_K's block sums are the sums of its quants;
 *   - all-zero blocks give exactly 0.
 */
#include "refcheck.h"
#include "test.h"
#include "util.h"

#include "hydra.h"
#include "quant.h"

#include "../kernels/cpu/fp16.h"
#include "../kernels/cpu/quant_blocks.h"

#include <math.h>
#include <stdlib.h>

/* ---- helpers -------------------------------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

static double rng_uniform(rng *r) /* (0, 1) */
{
    r->s += 0x9e3779b97f4a7c15ull;
    uint64_t z = r->s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

static double rng_normal(rng *r)
{
    return sqrt(-2.0 * log(rng_uniform(r))) * cos(6.283185307179586 * rng_uniform(r));
}

/* Weight-like rows, as the shared source: normal with a per-row spread and
 * 0.5% outliers of 5-20x. */
static void fill_weights(rng *r, float *x, int64_t n)
{
    double sd = 0.02 * exp(0.3 * rng_normal(r));
    for (int64_t i = 0; i < n; i++) {
        double v = sd * rng_normal(r);
        if (rng_uniform(r) < 0.005)
            v *= (rng_uniform(r) < 0.5 ? -1 : 1) * (5 + 15 * rng_uniform(r));
        x[i] = (float)v;
    }
}

static void fill_activations(rng *r, float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(rng_normal(r) * (rng_uniform(r) < 0.01 ? 8.0 : 1.0));
}

static uint32_t type_by_name(const char *name)
{
    for (uint32_t t = 0; t < hydra_type_count(); t++)
        if (hydra_type_name(t) != NULL && strcmp(hydra_type_name(t), name) == 0)
            return t;
    return UINT32_MAX;
}

static void *row_alloc(uint32_t type, int64_t n)
{
    uint64_t bytes;
    if (!quant_row_bytes(type, (uint64_t)n, &bytes))
        return NULL;
    return calloc(1, (size_t)bytes + 1);
}

/* Values per test block: the type's block, or 32 for the float types. */
static int64_t unit_of(const quant_traits *q)
{
    return q->block_size > 32 ? q->block_size : 32;
}

/* ---- vec_dot_ref against the dot of the dequantised rows --------------------
 *
 * The reference sums integers inside a block (exact) and adds block terms in
 * double, so its error is only float roundings: at most 4 per value in
 * to_float (d*sc, *q, dmin*m, the difference) and about 6 per block term in
 * vec_dot (d*d_a, the int->float conversion, the product, the same for the
 * min term, the difference).  Each is at most 2^-24 of a magnitude bounded by
 * sum (|w_i| + 2 B_i) |a_i|, where B_i = max |w| over value i's block: a
 * block's scaled quant and min are each within twice its largest value.  So
 * 16 * 2^-24 of that sum bounds the difference.  Q8_1 pairs add the error of
 * the stored s = f16(d_a * sum qa): 2^-11 relative (plus half the smallest
 * f16 subnormal, 2^-25, absolute), times the weight's min, which is within
 * B of zero. */
static double dot_tolerance(const quant_traits *q, uint32_t act_type, const float *w, const float *a, int64_t n)
{
    double bound = 0, q8_1_extra = 0;
    for (int64_t b = 0; b < n; b += q->block_size) {
        double big = 0, block_abs_a = 0;
        for (int64_t i = b; i < b + q->block_size; i++)
            big = fmax(big, fabs(w[i]));
        for (int64_t i = b; i < b + q->block_size; i++) {
            bound += (fabs(w[i]) + 2 * big) * fabs(a[i]);
            block_abs_a += fabs(a[i]);
        }
        q8_1_extra += big * (block_abs_a * ldexp(1, -11) + ldexp(1, -25));
    }
    return 16 * ldexp(bound, -24) + (act_type == QT_Q8_1 ? q8_1_extra : 0) + 1e-30;
}

/* Checks vec_dot_ref(w_q, a_q) against the double dot of their
 * dequantisations; NULL if within tolerance, else a message. */
static const char *check_dot(uint32_t type, const void *w_q, const void *a_q, int64_t n)
{
    static char msg[512];
    const quant_traits *q = quant_traits_of(type), *act = quant_traits_of(q->vec_dot_type);
    float *w = malloc((size_t)n * sizeof *w), *a = malloc((size_t)n * sizeof *a);
    q->to_float(w_q, w, n);
    act->to_float(a_q, a, n);
    double exact = 0;
    for (int64_t i = 0; i < n; i++)
        exact += (double)w[i] * (double)a[i];
    float got = NAN;
    q->vec_dot_ref(n, &got, w_q, a_q);
    double tol = dot_tolerance(q, q->vec_dot_type, w, a, n);
    const char *result = NULL;
    if (!(fabs((double)got - exact) <= tol)) {
        snprintf(msg, sizeof msg, "%s . %s, n=%" PRId64 ": vec_dot_ref %.9g, dequantised dot %.9g, |diff| %.3g > %.3g",
                 q->name, act->name, n, (double)got, exact, fabs((double)got - exact), tol);
        result = msg;
    }
    free(w);
    free(a);
    return result;
}

/* Quantises an activation row for type's vec_dot_type. */
static void *make_activation(uint32_t type, rng *r, int64_t n)
{
    const quant_traits *act = quant_traits_of(quant_traits_of(type)->vec_dot_type);
    float *x = malloc((size_t)n * sizeof *x);
    void *a = row_alloc(quant_traits_of(type)->vec_dot_type, n);
    fill_activations(r, x, n);
    act->from_float(x, a, n);
    free(x);
    return a;
}

TEST(quant_vec_dot_ref_matches_dot_of_dequantised_rows)
{
    static const int64_t block_counts[] = {1, 2, 3, 7, 33, 64};
    int types = 0;
    for (uint32_t t = 0; t < hydra_type_count(); t++) {
        const quant_traits *q = quant_traits_of(t);
        if (q == NULL || q->vec_dot_ref == NULL)
            continue;
        types++;
        for (size_t k = 0; k < sizeof block_counts / sizeof block_counts[0]; k++) {
            int64_t n = block_counts[k] * unit_of(q);
            rng r = {t * 1000003u + (uint64_t)k};
            float *x = malloc((size_t)n * sizeof *x);
            void *w = row_alloc(t, n);
            fill_weights(&r, x, n);
            q->from_float(x, w, n);
            void *a = make_activation(t, &r, n);
            const char *err = check_dot(t, w, a, n);
            free(x);
            free(w);
            free(a);
            if (err != NULL)
                FAIL("%s", err);
        }
    }
    CHECK_EQ_INT(types, 25);
}

/* The same on blocks llama-quantize wrote: every row of the shared 3-D
 * tensor, over its first block, its first three and the whole row. */
TEST(quant_vec_dot_ref_on_llama_cpp_blocks)
{
    REQUIRE_SHARED();
    static const char *const files[] = {
        "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k",
        "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4",
        "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "tq1_0", "tq2_0",
    };
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/ref/dequant/dequant-%s.gguf", test_shared_dir(), files[f]);
        hydra_model_params p = hydra_model_default_params();
        p.path = path;
        hydra_model *m;
        CHECK_OK(hydra_model_open(&m, &p));
        hydra_tensor_info info;
        hydra_status st = hydra_model_tensor_find(m, "blk.0.ffn_down_exps.weight", &info);
        const quant_traits *q = quant_traits_of(info.type);
        const char *err = st != HYDRA_OK ? "tensor missing" : NULL;
        uint64_t row_bytes = 0;
        quant_row_bytes(info.type, info.ne[0], &row_bytes);
        for (uint64_t row = 0; err == NULL && row < info.n_elements / info.ne[0]; row++) {
            rng r = {f * 7919u + row};
            int64_t lens[] = {unit_of(q), 3 * unit_of(q), (int64_t)info.ne[0]};
            void *a = make_activation(info.type, &r, (int64_t)info.ne[0]);
            for (int k = 0; k < 3 && err == NULL; k++)
                err = check_dot(info.type, (const uint8_t *)info.data + row * row_bytes, a, lens[k]);
            free(a);
        }
        hydra_model_close(m);
        if (err != NULL)
            FAIL("%s: %s", path, err);
    }
}

/* ---- round trips ---------------------------------------------------------- */

/* RMSE of llama-quantize (with an importance matrix) on the shared source,
 * from ../shared/ref/dequant/README.md; hydra's plain quantisers must stay
 * within 10% of it on the same data. */
static const struct {
    const char *type;
    double rmse;
} ggml_rmse[] = {
    {"F16", 6.14e-06}, {"BF16", 4.93e-05}, {"Q8_0", 0.000278}, {"Q4_0", 0.00409}, {"Q4_1", 0.00275},
    {"Q5_0", 0.0023},  {"Q5_1", 0.00135},  {"Q2_K", 0.00824},  {"Q3_K", 0.00507}, {"Q4_K", 0.00286},
    {"Q5_K", 0.00147}, {"Q6_K", 0.000915}, {"IQ4_NL", 0.00378}, {"IQ4_XS", 0.00363}, {"MXFP4", 0.00411},
};
enum { N_RMSE = sizeof ggml_rmse / sizeof ggml_rmse[0] };
static const double source_rms = 0.0333; /* the README's RMS of the source */

/* Quantises and dequantises rows of len values; returns the RMSE, and the
 * largest |output| where the input is exactly 0 in *zero_out. */
static double round_trip_rmse(uint32_t type, const float *x, int64_t rows, int64_t len, double *zero_out)
{
    const quant_traits *q = quant_traits_of(type);
    void *buf = row_alloc(type, len);
    float *y = malloc((size_t)len * sizeof *y);
    double se = 0;
    for (int64_t r = 0; r < rows; r++) {
        q->from_float(x + r * len, buf, len);
        q->to_float(buf, y, len);
        for (int64_t i = 0; i < len; i++) {
            double e = (double)y[i] - x[r * len + i];
            se += e * e;
            if (x[r * len + i] == 0.0f)
                *zero_out = fmax(*zero_out, fabs(y[i]));
        }
    }
    free(buf);
    free(y);
    return sqrt(se / (double)(rows * len));
}

TEST(quant_round_trip_on_shared_source_within_ggml_error)
{
    REQUIRE_SHARED();
    char path[1024];
    size_t size = 0;
    float *src = ref_read_quant_source(path, sizeof path, &size);
    if (src == NULL)
        FAIL("cannot read %s (%zu bytes)", path, size);
    for (int k = 0; k < N_RMSE; k++) {
        uint32_t t = type_by_name(ggml_rmse[k].type);
        double zero_out = 0;
        double se = pow(round_trip_rmse(t, src, 8, 512, &zero_out), 2) * 4096 +
                    pow(round_trip_rmse(t, src + 4096, 4, 768, &zero_out), 2) * 3072;
        double rmse = sqrt(se / REF_QUANT_SOURCE);
        if (!(rmse <= 1.1 * ggml_rmse[k].rmse) || zero_out != 0) {
            free(src);
            FAIL("%s: round-trip RMSE %.4g (ggml %.4g), largest output for a 0 input %.3g", ggml_rmse[k].type, rmse,
                 ggml_rmse[k].rmse, zero_out);
        }
    }
    free(src);
}

/* Random weight-like data: relative RMSE within 1.5x of ggml's on the
 * shared source (a sanity bound: a broken quantiser is off by far more). */
TEST(quant_round_trip_on_random_data)
{
    enum { ROWS = 16, LEN = 1024 };
    float *x = malloc(ROWS * LEN * sizeof *x);
    double rms = 0;
    rng r = {42};
    for (int i = 0; i < ROWS; i++)
        fill_weights(&r, x + i * LEN, LEN);
    for (int i = 0; i < ROWS * LEN; i++)
        rms += (double)x[i] * x[i];
    rms = sqrt(rms / (ROWS * LEN));
    for (int k = 0; k < N_RMSE; k++) {
        double zero_out = 0;
        double rel = round_trip_rmse(type_by_name(ggml_rmse[k].type), x, ROWS, LEN, &zero_out) / rms;
        if (!(rel <= 1.5 * ggml_rmse[k].rmse / source_rms)) {
            free(x);
            FAIL("%s: relative round-trip RMSE %.4g, bound %.4g", ggml_rmse[k].type, rel,
                 1.5 * ggml_rmse[k].rmse / source_rms);
        }
    }
    free(x);
}

/* ---- activation formats ------------------------------------------------------ */

/* x[0] = 127 makes d = 1 and 127/amax = 1, so every quant is x rounded half
 * to even; x[j] = v + 0.5 for v = j - 16 puts every value on a tie. */
static void tie_block(float *x, int n, int *want)
{
    x[0] = 127.0f;
    want[0] = 127;
    for (int j = 1; j < n; j++) {
        int v = j % 32 - 16;
        x[j] = (float)v + 0.5f;
        want[j] = (v % 2 == 0) ? v : v + 1; /* the even neighbour of v + 0.5 */
    }
}

TEST(quant_activation_quantisers_round_half_to_even)
{
    float x[256];
    int want[256];
    tie_block(x, 256, want);
    block_q8_0 b0;
    quant_traits_of(QT_Q8_0)->from_float(x, &b0, 32);
    block_q8_1 b1;
    quant_traits_of(QT_Q8_1)->from_float(x, &b1, 32);
    block_q8_K bk;
    quant_traits_of(QT_Q8_K)->from_float(x, &bk, 256);
    CHECK_EQ_INT(b0.d, 0x3C00); /* f16 1.0 */
    CHECK_EQ_INT(b1.d, 0x3C00);
    CHECK(bk.d == 1.0f);
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        CHECK_EQ_INT(b0.qs[j], want[j]);
        CHECK_EQ_INT(b1.qs[j], want[j]);
        sum += want[j];
    }
    CHECK_EQ_INT(b1.s, fp32_to_fp16((float)sum));
    for (int j = 0; j < 256; j++)
        CHECK_EQ_INT(bk.qs[j], want[j]);
}

TEST(quant_q8_k_block_sums_are_sums_of_quants)
{
    enum { N = 4 * 256 };
    float x[N];
    block_q8_K b[4];
    rng r = {7};
    fill_activations(&r, x, N);
    quant_traits_of(QT_Q8_K)->from_float(x, b, N);
    for (int i = 0; i < 4; i++)
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++)
                sum += b[i].qs[16 * g + j];
            CHECK_EQ_INT(b[i].bsums[g], sum);
        }
}

/* ---- all-zero blocks ------------------------------------------------------ */

TEST(quant_all_zero_blocks_give_exactly_zero)
{
    enum { N = 512 };
    float zeros[N] = {0}, y[N];
    for (uint32_t t = 0; t < hydra_type_count(); t++) {
        const quant_traits *q = quant_traits_of(t);
        if (q == NULL || q->from_float == NULL)
            continue;
        void *buf = row_alloc(t, N);
        q->from_float(zeros, buf, N);
        q->to_float(buf, y, N);
        for (int i = 0; i < N; i++)
            if (y[i] != 0.0f) {
                free(buf);
                FAIL("%s: zeros come back as %.9g at %d", q->name, (double)y[i], i);
            }
        if (q->vec_dot_ref != NULL) {
            rng r = {t};
            void *a = make_activation(t, &r, N);
            void *a_zero = row_alloc(q->vec_dot_type, N);
            quant_traits_of(q->vec_dot_type)->from_float(zeros, a_zero, N);
            float w_zero_dot = NAN, a_zero_dot = NAN;
            q->vec_dot_ref(N, &w_zero_dot, buf, a);
            q->vec_dot_ref(N, &a_zero_dot, buf, a_zero);
            free(a);
            free(a_zero);
            if (w_zero_dot != 0.0f || a_zero_dot != 0.0f) {
                free(buf);
                FAIL("%s: dot with a zero row is %.9g / %.9g", q->name, (double)w_zero_dot, (double)a_zero_dot);
            }
        }
        free(buf);
    }
}
