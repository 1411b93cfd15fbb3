/*
 * The forward pass's ops (kernels/cpu/ops.c) against independent
 * double-precision formulas written here, and against properties that a
 * wrong pairing or scale would break.
 */
#include "test.h"

#include "../kernels/cpu/fp16.h"
#include "../kernels/cpu/ops.h"
#include "quant.h"

#include <math.h>
#include <stdlib.h>

/* Deterministic values in [-1, 1). */
static void fill(float *x, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) / 8388608.0 - 1.0);
    }
}

static double max_abs_diff(const float *a, const double *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

TEST(ops_rmsnorm_matches_double_formula)
{
    enum { N = 300 };
    float x[N], w[N], y[N];
    double want[N];
    fill(x, N, 1);
    fill(w, N, 2);
    double ss = 0;
    for (int i = 0; i < N; i++)
        ss += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(ss / N + 1e-5);
    for (int i = 0; i < N; i++)
        want[i] = x[i] * scale * w[i];
    op_rmsnorm(y, x, w, N, 1e-5f);
    CHECK(max_abs_diff(y, want, N) < 1e-6);
    /* in place, no gain */
    for (int i = 0; i < N; i++)
        want[i] = x[i] * scale;
    op_rmsnorm(x, x, NULL, N, 1e-5f);
    CHECK(max_abs_diff(x, want, N) < 1e-6);
}

TEST(ops_rope_cache_matches_direct_angles)
{
    enum { R = 64 };
    float cs[R];
    const int64_t positions[] = {0, 1, 17, 230, 4000};
    for (size_t p = 0; p < sizeof positions / sizeof positions[0]; p++) {
        op_rope_cache(cs, positions[p], R, 1e6f);
        for (int i = 0; i < R / 2; i++) {
            double theta = (double)positions[p] * pow(1e6, -2.0 * i / R);
            /* ggml's float recurrence drifts from the exact angle by a few
             * ulps of theta; 1e-6 relative covers it. */
            double tol = 1e-6 * fmax(1.0, theta) + 1e-6;
            if (fabs(cs[2 * i] - cos(theta)) > tol || fabs(cs[2 * i + 1] - sin(theta)) > tol)
                FAIL("pos %lld dim %d: got (%g, %g), want (%g, %g)", (long long)positions[p], i, cs[2 * i],
                     cs[2 * i + 1], cos(theta), sin(theta));
        }
    }
}

/* Rotating a unit vector on one dimension moves it onto that dimension's
 * partner: the partner is what tells the two styles apart. */
TEST(ops_rope_pairs_dimensions_by_style)
{
    enum { HD = 16, ROT = 8 };
    float cs[ROT];
    op_rope_cache(cs, 3, ROT, 10000.0f);
    for (int i = 0; i < ROT / 2; i++) {
        float normal[HD] = {0}, neox[HD] = {0};
        normal[2 * i] = 1.0f;
        neox[i] = 1.0f;
        op_rope(normal, cs, ROT, ROPE_NORMAL);
        op_rope(neox, cs, ROT, ROPE_NEOX);
        double theta = 3.0 * pow(10000.0, -2.0 * i / ROT);
        CHECK(fabs(normal[2 * i] - cos(theta)) < 1e-6 && fabs(normal[2 * i + 1] - sin(theta)) < 1e-6);
        CHECK(fabs(neox[i] - cos(theta)) < 1e-6 && fabs(neox[i + ROT / 2] - sin(theta)) < 1e-6);
    }
    /* dimensions past n_rot are untouched, and the norm is preserved */
    float x[HD], before[HD];
    fill(x, HD, 9);
    for (int i = 0; i < HD; i++)
        before[i] = x[i];
    op_rope(x, cs, ROT, ROPE_NEOX);
    double n0 = 0, n1 = 0;
    for (int i = 0; i < HD; i++) {
        n0 += (double)before[i] * before[i];
        n1 += (double)x[i] * x[i];
        if (i >= ROT)
            CHECK(x[i] == before[i]);
    }
    CHECK(fabs(n0 - n1) < 1e-5);
}

TEST(ops_softmax_matches_double_and_survives_large_inputs)
{
    enum { N = 50 };
    float x[N];
    double want[N], sum = 0;
    fill(x, N, 3);
    for (int i = 0; i < N; i++)
        x[i] = x[i] * 20.0f + 1000.0f; /* exp(1000) overflows without the max shift */
    for (int i = 0; i < N; i++)
        sum += exp((double)x[i] - 1000.0);
    for (int i = 0; i < N; i++)
        want[i] = exp((double)x[i] - 1000.0) / sum;
    op_softmax(x, N);
    CHECK(max_abs_diff(x, want, N) < 1e-6);
}

TEST(ops_swiglu_matches_double_formula)
{
    enum { N = 40 };
    float g[N], u[N], y[N];
    double want[N];
    fill(g, N, 4);
    fill(u, N, 5);
    for (int i = 0; i < N; i++) {
        g[i] *= 8.0f;
        want[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    }
    op_swiglu(y, g, u, N);
    CHECK(max_abs_diff(y, want, N) < 1e-5);
}

/* The kernel tables to check: the scalar one and, where this CPU runs it,
 * the fastest. */
static int kernel_tables(const op_kernels *out[2])
{
    out[0] = &op_kernels_scalar;
    out[1] = op_kernels_best();
    return out[1] == out[0] ? 1 : 2;
}

/* Attention of the query heads of one KV head against a cache written
 * through op_kv_store, in both cache types and with every kernel table,
 * against softmax(scale q.k) v computed in double. */
static void attention_case(test_ctx *t_, const op_kernels *kern, uint32_t kv_type, double tol)
{
    enum { HK = 24, HV = 20, NKV = 37, KV_HEADS = 3, HEAD = 1, NQ = 3 };
    float q[NQ][HK], k[NKV][KV_HEADS * HK], v[NKV][KV_HEADS * HV], out[NQ][HV];
    fill(&q[0][0], NQ * HK, 6);
    fill(&k[0][0], NKV * KV_HEADS * HK, 7);
    fill(&v[0][0], NKV * KV_HEADS * HV, 8);
    size_t es = op_kv_elem_size(kv_type);
    CHECK(es != 0);
    uint8_t *kc = malloc(NKV * KV_HEADS * HK * es), *vc = malloc(NKV * KV_HEADS * HV * es);
    float *scratch = malloc(sizeof(float) * op_attention_scratch(NQ, NKV, HK, HV));
    if (kc == NULL || vc == NULL || scratch == NULL) {
        free(kc);
        free(vc);
        free(scratch);
        FAIL("out of memory");
    }
    for (int j = 0; j < NKV; j++) {
        op_kv_store(kern, kc + j * KV_HEADS * HK * es, kv_type, k[j], KV_HEADS * HK);
        op_kv_store(kern, vc + j * KV_HEADS * HV * es, kv_type, v[j], KV_HEADS * HV);
    }
    const float scale = 1.0f / sqrtf(HK);
    attn_args a = {.head_dim_k = HK, .head_dim_v = HV, .scale = scale, .kv_type = kv_type,
                   .k = kc + HEAD * HK * es, .k_stride = KV_HEADS * HK * es,
                   .v = vc + HEAD * HV * es, .v_stride = KV_HEADS * HV * es, .n_kv = NKV};
    op_attention_group(kern, &q[0][0], NQ, &a, scratch, &out[0][0]);
    free(kc);
    free(vc);
    free(scratch);
    for (int h = 0; h < NQ; h++) {
        double s[NKV], max = -1e300, sum = 0, want[HV] = {0};
        for (int j = 0; j < NKV; j++) {
            s[j] = 0;
            for (int i = 0; i < HK; i++)
                s[j] += (double)q[h][i] * k[j][HEAD * HK + i];
            s[j] *= scale;
            max = fmax(max, s[j]);
        }
        for (int j = 0; j < NKV; j++)
            sum += (s[j] = exp(s[j] - max));
        for (int j = 0; j < NKV; j++)
            for (int i = 0; i < HV; i++)
                want[i] += s[j] / sum * v[j][HEAD * HV + i];
        double d = max_abs_diff(out[h], want, HV);
        if (d > tol)
            FAIL("%s, kv type %u, head %d: max |diff| %g > %g", kern->isa, kv_type, h, d, tol);
    }
}

TEST(ops_attention_group_matches_double_in_f32_and_f16_cache)
{
    const op_kernels *kern[2];
    for (int i = 0; i < kernel_tables(kern); i++) {
        attention_case(TEST_CTX, kern[i], QT_F32, 1e-6);
        /* F16 storage rounds each value by up to 2^-11 relative. */
        if (TEST_CTX->result != TEST_FAIL)
            attention_case(TEST_CTX, kern[i], QT_F16, 2e-3);
        if (TEST_CTX->result == TEST_FAIL)
            return;
    }
}

/* The fastest table against the scalar one: conversions bit for bit (both
 * round to nearest even), dot and axpy to float rounding. */
TEST(ops_kernel_tables_agree_with_scalar)
{
    const op_kernels *kern[2];
    if (kernel_tables(kern) == 1)
        SKIP("this CPU runs the scalar kernels only");
    enum { N = 203 }; /* not a multiple of any vector width */
    float a[N], b[N], y0[N], y1[N], back0[N], back1[N];
    uint16_t h0[N], h1[N];
    fill(a, N, 21);
    fill(b, N, 22);
    a[5] = 65519.0f; /* rounds to the largest half */
    a[6] = 1e-7f;    /* a half subnormal */
    a[7] = -0.0f;
    kern[0]->f32_to_f16(a, h0, N);
    kern[1]->f32_to_f16(a, h1, N);
    CHECK(memcmp(h0, h1, sizeof h0) == 0);
    kern[0]->f16_to_f32(h0, back0, N);
    kern[1]->f16_to_f32(h0, back1, N);
    CHECK(memcmp(back0, back1, sizeof back0) == 0);
    double want = 0, magnitude = 0;
    for (int i = 0; i < N; i++) {
        want += (double)b[i] * back0[i];
        magnitude += fabs((double)b[i] * back0[i]);
    }
    /* float accumulation: relative error of a few ulps of the magnitude */
    CHECK(fabs(kern[1]->dot(b, back0, N) - want) < 1e-6 * magnitude);
    CHECK(fabs(kern[0]->dot(b, back0, N) - want) < 1e-6 * magnitude);
    for (int i = 0; i < N; i++)
        y0[i] = y1[i] = b[i];
    kern[0]->axpy(y0, 0.37f, a, N);
    kern[1]->axpy(y1, 0.37f, a, N);
    for (int i = 0; i < N; i++)
        if (fabs(y0[i] - y1[i]) > 1e-6 * fmax(1.0, fabs(y0[i])))
            FAIL("axpy[%d]: %s %g, scalar %g", i, kern[1]->isa, y1[i], y0[i]);
}

TEST(ops_kv_store_rounds_to_f16_and_rejects_other_types)
{
    float x[3] = {1.0f, 1.0f / 3.0f, -65504.0f};
    uint16_t h[3];
    op_kv_store(&op_kernels_scalar, h, QT_F16, x, 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(h[i], fp32_to_fp16(x[i]));
    CHECK_EQ_INT(op_kv_elem_size(QT_F32), 4);
    CHECK_EQ_INT(op_kv_elem_size(QT_F16), 2);
    CHECK_EQ_INT(op_kv_elem_size(QT_Q4_K), 0);
}
