/*
 * GPU parity of the fused decode kernels against their unfused
 * definitions, computed here from the CPU reference dequantiser.  Skips
 * without a CUDA device.
 *
 *   router + top-k tail: logits to float rounding; experts and weights as
 *     the selection rule of src/moe.c gives them from those logits; with
 *     the norm fused in, over the RMSNorm of x computed here in double.
 */
#include "gpu/gpu.h"
#include "gpu/gpu_check_fused.h"
#include "quant.h"
#include "test.h"
#include "gpu_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fz_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float fz_float(uint64_t *s)
{
    return (float)((double)(fz_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Rows of n_cols written by the reference quantiser, and their values. */
static void fz_weights(uint32_t type, int64_t n_rows, int64_t n_cols, uint64_t *seed, uint8_t *w, float *wf)
{
    const quant_traits *q = quant_traits_of(type);
    uint64_t rb = 0;
    quant_row_bytes(type, (uint64_t)n_cols, &rb);
    float *src = malloc(sizeof(float) * (size_t)n_cols);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n_cols; i++)
            src[i] = fz_float(seed) * (float)(1 + (i / 32) % 5);
        q->from_float(src, w + r * rb, n_cols);
        q->to_float(w + r * rb, wf + r * n_cols, n_cols);
    }
    free(src);
}

/* The selection of src/moe.c from one token's logits: probabilities
 * (softmax with its sum in double, or sigmoid), the n_used largest (lower
 * id on a tie) in rank order, weights renormalised or not, then scaled. */
static void select_ref(const gpu_router_check *c, const float *l, int32_t *experts, float *weights)
{
    float p[256];
    float mx = -INFINITY;
    for (int e = 0; e < c->n_expert; e++)
        mx = fmaxf(mx, l[e]);
    double sum = 0;
    for (int e = 0; e < c->n_expert; e++) {
        p[e] = c->sigmoid ? 1.0f / (1.0f + expf(-l[e])) : expf(l[e] - mx);
        sum += p[e];
    }
    if (!c->sigmoid)
        for (int e = 0; e < c->n_expert; e++)
            p[e] *= (float)(1.0 / sum);
    bool taken[256] = {false};
    float wsum = 0;
    for (int k = 0; k < c->n_used; k++) {
        int best = -1;
        for (int e = 0; e < c->n_expert; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best]))
                best = e;
        taken[best] = true;
        experts[k] = best;
        weights[k] = p[best];
        wsum += p[best];
    }
    for (int k = 0; k < c->n_used; k++)
        weights[k] = (c->renorm ? weights[k] / wsum : weights[k]) * c->scale;
}

TEST(cuda_router_topk_tail_matches_reference)
{
    REQUIRE_GPU();
    enum { MAX_E = 256, MAX_C = 512, MAX_T = 8, MAX_K = 8 };
    static float gain[MAX_C];
    uint64_t gseed = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < MAX_C; i++)
        gain[i] = 0.5f + fz_float(&gseed);
    const gpu_router_check cases[] = {
        {.type = QT_F32, .n_expert = 128, .n_used = 8, .n_cols = 512, .n_tok = 1, .renorm = true, .scale = 1.0f},
        {.type = QT_F32, .n_expert = 60, .n_used = 4, .n_cols = 256, .n_tok = 5, .renorm = false, .scale = 1.0f},
        {.type = QT_F32, .n_expert = 256, .n_used = 8, .n_cols = 256, .n_tok = 8, .sigmoid = true, .renorm = true,
         .scale = 2.5f},
        {.type = QT_BF16, .n_expert = 32, .n_used = 4, .n_cols = 64, .n_tok = 2, .renorm = true, .scale = 1.0f},
        {.type = QT_F16, .n_expert = 8, .n_used = 2, .n_cols = 128, .n_tok = 3, .renorm = true, .scale = 1.0f},
        {.type = QT_F32, .n_expert = 128, .n_used = 8, .n_cols = 512, .n_tok = 1, .renorm = true, .scale = 1.0f,
         .norm_gain = gain, .eps = 1e-6f},
        {.type = QT_BF16, .n_expert = 64, .n_used = 6, .n_cols = 96, .n_tok = 1, .sigmoid = true, .renorm = false,
         .scale = 1.5f, .norm_gain = gain, .eps = 1e-5f},
    };
    uint64_t seed = 0xB5AD4ECEDA1CE2A9ull;
    uint8_t *w = malloc(4 * MAX_E * MAX_C);
    float *wf = malloc(sizeof(float) * MAX_E * MAX_C), *x = malloc(sizeof(float) * MAX_T * MAX_C);
    float *logits = malloc(sizeof(float) * MAX_T * MAX_E);
    CHECK(w && wf && x && logits);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const gpu_router_check *c = &cases[ci];
        fz_weights(c->type, c->n_expert, c->n_cols, &seed, w, wf);
        for (int i = 0; i < c->n_tok * c->n_cols; i++)
            x[i] = fz_float(&seed);
        int32_t experts[MAX_T * MAX_K], want_e[MAX_K];
        float weights[MAX_T * MAX_K], want_w[MAX_K];
        CHECK_OK(gpu_check_router_topk(c, w, x, logits, experts, weights));
        if (c->norm_gain != NULL) { /* the reference below dots the normed row */
            double ss = 0;
            for (int i = 0; i < c->n_cols; i++)
                ss += (double)x[i] * x[i];
            const double inv = 1.0 / sqrt(ss / (double)c->n_cols + c->eps);
            for (int i = 0; i < c->n_cols; i++)
                x[i] = (float)(x[i] * inv * c->norm_gain[i]);
        }
        for (int t = 0; t < c->n_tok; t++) {
            for (int e = 0; e < c->n_expert; e++) {
                double want = 0, mag = 0;
                for (int i = 0; i < c->n_cols; i++) {
                    want += (double)wf[e * c->n_cols + i] * x[t * c->n_cols + i];
                    mag += fabs((double)wf[e * c->n_cols + i] * x[t * c->n_cols + i]);
                }
                if (!(fabs(logits[t * c->n_expert + e] - want) <= 2e-5 * mag + 1e-6))
                    FAIL("case %zu token %d logit %d: GPU %.9g, reference %.9g", ci, t, e,
                         logits[t * c->n_expert + e], want);
            }
            select_ref(c, logits + t * c->n_expert, want_e, want_w);
            for (int k = 0; k < c->n_used; k++) {
                const int r = t * c->n_used + k;
                if (experts[r] != want_e[k] || !(fabsf(weights[r] - want_w[k]) <= 1e-5f * want_w[k]))
                    FAIL("case %zu token %d rank %d: GPU expert %d weight %.9g, reference %d %.9g", ci, t, k,
                         experts[r], weights[r], want_e[k], want_w[k]);
            }
        }
    }
    free(w);
    free(wf);
    free(x);
    free(logits);
}

/* Whether q and d are the 8-bit rule's bits for v (gpu_test_q8_block). */
static bool follows_q8_rule(const float *v, const int8_t *q, const float *d, int n)
{
    for (int b = 0; b < n / 32; b++) {
        int8_t want_q[32];
        float want_d;
        gpu_test_q8_block(v + 32 * b, want_q, &want_d);
        if (memcmp(&d[b], &want_d, sizeof want_d) != 0 || memcmp(q + 32 * b, want_q, sizeof want_q) != 0)
            return false;
    }
    return true;
}

typedef hydra_status (*one_row_check)(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                      float *y);

/* A rows x cols matrix of type over one activation row through check,
 * which should give quantize + matvec's bits (gpu_check_linear); nothing
 * where a block is longer than the row. */
static void one_row_case(test_ctx *t_, one_row_check check, const char *what, uint32_t type, int64_t rows,
                         int64_t cols, uint64_t *seed)
{
    uint64_t rb = 0;
    if (!quant_row_bytes(type, (uint64_t)cols, &rb))
        return;
    uint8_t *w = malloc(rb * (size_t)rows);
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols)), *x = malloc(sizeof(float) * (size_t)cols);
    float *y = malloc(sizeof(float) * (size_t)rows), *want = malloc(sizeof(float) * (size_t)rows);
    CHECK(w && wf && x && y && want);
    fz_weights(type, rows, cols, seed, w, wf);
    for (int64_t i = 0; i < cols; i++)
        x[i] = fz_float(seed) * (i % 61 == 0 ? 6.0f : 1.0f);
    CHECK_OK(gpu_check_linear(type, w, rows, cols, x, 1, false, want, NULL, NULL));
    CHECK_OK(check(type, w, rows, cols, x, y));
    for (int64_t r = 0; r < rows; r++)
        if (memcmp(&y[r], &want[r], sizeof(float)) != 0)
            FAIL("%s %lld x %lld row %lld: %s %.9g, quantize + matvec %.9g", quant_traits_of(type)->name,
                 (long long)rows, (long long)cols, (long long)r, what, y[r], want[r]);
    free(w);
    free(wf);
    free(x);
    free(y);
    free(want);
}

typedef struct row_shape {
    int64_t rows, cols;
} row_shape;

/* one_row_case over every type and shape. */
static void row_cases(test_ctx *t_, one_row_check check, const char *what, const uint32_t *types, size_t n_types,
                      const row_shape *shapes, size_t n_shapes, uint64_t seed)
{
    for (size_t ti = 0; ti < n_types; ti++)
        for (size_t si = 0; si < n_shapes; si++)
            one_row_case(t_, check, what, types[ti], shapes[si].rows, shapes[si].cols, &seed);
}

TEST(cuda_staged_matvec_equals_quantize_then_matvec)
{
    REQUIRE_GPU();
    static const uint32_t types[] = {QT_Q4_K, QT_Q6_K, QT_Q8_0, QT_Q5_K, QT_Q4_0, QT_IQ4_XS};
    /* 45 and 6 rows: a last warp with fewer than its 4 rows; 768
     * columns as Qwen3-30B-A3B's down projection (Q6_K rows of 630 bytes:
     * a warp's rows start 8 bytes past a 16-byte boundary every other
     * warp), 1536 (Q6_K rows 16-byte aligned), 256 (2-byte aligned) */
    static const row_shape shapes[] = {{64, 768}, {37, 256}, {16, 2048}, {45, 768}, {6, 1536}};
    row_cases(t_, gpu_check_matvec_staged, "staged", types, sizeof types / sizeof types[0], shapes,
              sizeof shapes / sizeof shapes[0], 0x51A6EDull);
}

/* The output head's kernel (matvec_head.cu): its types, rows of whole
 * 16-byte units up to 8192 bytes (shorter rows go two to a warp), row
 * counts that leave the last tile part-filled, 256 to 8192 columns. */
static const uint32_t head_types[] = {QT_Q6_K, QT_Q4_K, QT_Q5_K, QT_Q8_0};
static const row_shape head_shapes[] = {{301, 2048}, {8, 4096}, {1, 2048}, {1001, 256}, {37, 8192}, {19, 1024}};

typedef void (*head_case)(test_ctx *t_, uint32_t type, int64_t rows, int64_t cols, uint64_t *seed);

/* case over every head type and shape whose rows the kernel takes. */
static void head_cases(test_ctx *t_, head_case one, uint64_t seed)
{
    for (size_t ti = 0; ti < sizeof head_types / sizeof head_types[0]; ti++)
        for (size_t si = 0; si < sizeof head_shapes / sizeof head_shapes[0]; si++) {
            uint64_t rb = 0;
            const int64_t cols = head_shapes[si].cols;
            if (quant_row_bytes(head_types[ti], (uint64_t)cols, &rb) && rb % 16 == 0 && rb <= 8192)
                one(t_, head_types[ti], head_shapes[si].rows, cols, &seed);
        }
}

static void head_plain_case(test_ctx *t_, uint32_t type, int64_t rows, int64_t cols, uint64_t *seed)
{
    one_row_case(t_, gpu_check_matvec_head, "head", type, rows, cols, seed);
}

TEST(cuda_head_matvec_equals_quantize_then_matvec)
{
    REQUIRE_GPU();
    head_cases(t_, head_plain_case, 0x4EADull);
}

/* The head given the raw row and the output norm (normed in the launch up
 * to 4096 columns, by gk_rmsnorm first beyond) against gk_rmsnorm then
 * gk_matvec, bit for bit. */
static void head_norm_case(test_ctx *t_, uint32_t type, int64_t rows, int64_t cols, uint64_t *seed)
{
    uint64_t rb = 0;
    quant_row_bytes(type, (uint64_t)cols, &rb);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols)), *x = malloc(sizeof(float) * (size_t)cols);
    float *gain = malloc(sizeof(float) * (size_t)cols), *y = malloc(sizeof(float) * (size_t)rows);
    float *want = malloc(sizeof(float) * (size_t)rows);
    CHECK(w && wf && x && gain && y && want);
    fz_weights(type, rows, cols, seed, w, wf);
    for (int64_t i = 0; i < cols; i++) {
        x[i] = fz_float(seed) * (i % 61 == 0 ? 40.0f : 3.0f);
        gain[i] = 1.0f + 0.5f * fz_float(seed);
    }
    CHECK_OK(gpu_check_head_norm(type, w, rows, cols, x, gain, 1e-6f, y, want));
    for (int64_t r = 0; r < rows; r++)
        if (memcmp(&y[r], &want[r], sizeof(float)) != 0)
            FAIL("%s %lld x %lld row %lld: head with norm %.9g, rmsnorm + matvec %.9g", quant_traits_of(type)->name,
                 (long long)rows, (long long)cols, (long long)r, y[r], want[r]);
    free(w);
    free(wf);
    free(x);
    free(gain);
    free(y);
    free(want);
}

TEST(cuda_head_with_norm_equals_rmsnorm_then_matvec)
{
    REQUIRE_GPU();
    head_cases(t_, head_norm_case, 0x4EAD2ull);
}

/* gk_embed_norm against gk_embed then gk_rmsnorm, bit for bit: the rows,
 * the normed rows and their 8-bit form; one launch up to 4096 columns,
 * the two beyond. */
TEST(cuda_embed_norm_equals_embed_then_rmsnorm)
{
    REQUIRE_GPU();
    static const uint32_t types[] = {QT_Q4_K, QT_Q6_K, QT_Q8_0, QT_F16, QT_F32};
    static const int64_t cols_of[] = {256, 2048, 4096, 8192};
    static const int n_toks[] = {1, 3, 9};
    enum { TABLE_ROWS = 40 };
    uint64_t seed = 0xE3BEDull;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ci = 0; ci < sizeof cols_of / sizeof cols_of[0]; ci++) {
            const uint32_t type = types[ti];
            const int64_t cols = cols_of[ci];
            const int n_tok = n_toks[(ti + ci) % 3];
            uint64_t rb = 0;
            if (!quant_row_bytes(type, (uint64_t)cols, &rb))
                continue;
            const size_t values = (size_t)(n_tok * cols);
            uint8_t *table = malloc(rb * TABLE_ROWS);
            float *tf = malloc(sizeof(float) * TABLE_ROWS * (size_t)cols), *gain = malloc(sizeof(float) * (size_t)cols);
            float *f[4] = {malloc(sizeof(float) * values), malloc(sizeof(float) * values),
                           malloc(sizeof(float) * values), malloc(sizeof(float) * values)};
            int8_t *q[2] = {malloc(values), malloc(values)};
            int32_t *meta[2] = {malloc(values / 2), malloc(values / 2)};
            int32_t tokens[9];
            CHECK(table && tf && gain && f[0] && f[1] && f[2] && f[3] && q[0] && q[1] && meta[0] && meta[1]);
            fz_weights(type, TABLE_ROWS, cols, &seed, table, tf);
            for (int64_t i = 0; i < cols; i++)
                gain[i] = 1.0f + 0.5f * fz_float(&seed);
            for (int t = 0; t < n_tok; t++)
                tokens[t] = (int32_t)(fz_next(&seed) % TABLE_ROWS);
            const gpu_embed_norm_out ref = {f[0], f[1], q[0], meta[0]}, fused = {f[2], f[3], q[1], meta[1]};
            CHECK_OK(gpu_check_embed_norm(type, table, TABLE_ROWS, cols, tokens, n_tok, gain, 1e-6f, &ref, &fused));
            const char *name = quant_traits_of(type)->name;
            if (memcmp(f[0], f[2], sizeof(float) * values) != 0)
                FAIL("%s %lld columns, %d tokens: embedding rows differ", name, (long long)cols, n_tok);
            if (memcmp(f[1], f[3], sizeof(float) * values) != 0)
                FAIL("%s %lld columns, %d tokens: normed rows differ", name, (long long)cols, n_tok);
            if (memcmp(q[0], q[1], values) != 0 || memcmp(meta[0], meta[1], values / 2) != 0)
                FAIL("%s %lld columns, %d tokens: 8-bit forms differ", name, (long long)cols, n_tok);
            free(table);
            free(tf);
            free(gain);
            for (int i = 0; i < 4; i++)
                free(f[i]);
            for (int i = 0; i < 2; i++) {
                free(q[i]);
                free(meta[i]);
            }
        }
}

TEST(cuda_rope_in_attention_equals_rope_then_attention)
{
    REQUIRE_GPU();
    enum { MAX_DIM = 128, MAX_HEADS = 32, MAX_CTX = 512 };
    uint64_t seed = 0xA77E27ull;
    static float gain_q[MAX_DIM], gain_k[MAX_DIM], init[2 * MAX_CTX * 4 * MAX_DIM];
    for (int i = 0; i < MAX_DIM; i++) {
        gain_q[i] = 0.5f + fz_float(&seed);
        gain_k[i] = 0.5f + fz_float(&seed);
    }
    for (size_t i = 0; i < sizeof init / sizeof init[0]; i++)
        init[i] = fz_float(&seed);
    const gpu_rope_attn_check cases[] = {
        {.n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_rot = 128, .pos0 = 0, .n_ctx = 256, .neox = true,
         .kv_f16 = true, .eps = 1e-6f, .theta_base = 1e6f, .q_norm = gain_q, .k_norm = gain_k},
        {.n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_rot = 128, .pos0 = 300, .n_ctx = 512, .neox = true,
         .kv_f16 = false, .eps = 1e-6f, .theta_base = 1e6f, .q_norm = gain_q, .k_norm = gain_k, .cache_init = init},
        {.n_head = 8, .n_head_kv = 2, .head_dim = 64, .n_rot = 32, .pos0 = 77, .n_ctx = 128, .neox = false,
         .kv_f16 = false, .eps = 1e-5f, .theta_base = 1e4f, .cache_init = init},
        {.n_head = 16, .n_head_kv = 4, .head_dim = 128, .n_rot = 64, .pos0 = 511, .n_ctx = 512, .neox = true,
         .kv_f16 = true, .eps = 1e-6f, .theta_base = 1e4f, .k_norm = gain_k},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const gpu_rope_attn_check *c = &cases[ci];
        const int nq = c->n_head * c->head_dim, nk = c->n_head_kv * c->head_dim;
        float q[MAX_HEADS * MAX_DIM], k[4 * MAX_DIM], v[4 * MAX_DIM];
        float ref[MAX_HEADS * MAX_DIM], fused[MAX_HEADS * MAX_DIM], d[MAX_HEADS * MAX_DIM / 32];
        int8_t q8[MAX_HEADS * MAX_DIM];
        for (int i = 0; i < nq; i++)
            q[i] = fz_float(&seed) * 2.0f;
        for (int i = 0; i < nk; i++) {
            k[i] = fz_float(&seed) * 2.0f;
            v[i] = fz_float(&seed);
        }
        bool same_cache = false;
        CHECK_OK(gpu_check_rope_attention(c, q, k, v, ref, fused, q8, d, &same_cache));
        if (!same_cache)
            FAIL("case %zu: the fused launch left other cache bits", ci);
        for (int i = 0; i < nq; i++)
            if (memcmp(&ref[i], &fused[i], sizeof(float)) != 0)
                FAIL("case %zu value %d: fused %.9g, rope then attention %.9g", ci, i, fused[i], ref[i]);
        if (!follows_q8_rule(fused, q8, d, nq))
            FAIL("case %zu: the output's 8-bit form breaks the rule", ci);
    }
}

TEST(cuda_mixed_qkv_launch_equals_one_launch_each)
{
    REQUIRE_GPU();
    static const uint32_t pairs[][2] = {{QT_Q4_K, QT_Q6_K}, {QT_Q5_K, QT_Q6_K}};
    const int64_t rows[3] = {96, 32, 40}, cols = 512;
    uint64_t seed = 0x3C5A11EDull;
    float *wf = malloc(sizeof(float) * 96 * cols), *x = malloc(sizeof(float) * cols);
    float *y = malloc(sizeof(float) * 168), *want = malloc(sizeof(float) * 96);
    uint8_t *w[3];
    for (int i = 0; i < 3; i++)
        w[i] = malloc(4 * 96 * cols);
    CHECK(wf && x && y && want && w[0] && w[1] && w[2]);
    for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
        for (int i = 0; i < 3; i++)
            fz_weights(pairs[pi][i < 2 ? 0 : 1], rows[i], cols, &seed, w[i], wf);
        for (int64_t i = 0; i < cols; i++)
            x[i] = fz_float(&seed);
        const void *const wc[3] = {w[0], w[1], w[2]};
        CHECK_OK(gpu_check_matvec_mixed(pairs[pi][0], pairs[pi][1], wc, rows, cols, x, y));
        for (int i = 0, off = 0; i < 3; off += (int)rows[i], i++) {
            CHECK_OK(gpu_check_linear(pairs[pi][i < 2 ? 0 : 1], w[i], rows[i], cols, x, 1, false, want, NULL, NULL));
            for (int64_t r = 0; r < rows[i]; r++)
                if (memcmp(&y[off + r], &want[r], sizeof(float)) != 0)
                    FAIL("pair %zu matrix %d row %lld: one launch %.9g, alone %.9g", pi, i, (long long)r,
                         y[off + r], want[r]);
        }
    }
    for (int i = 0; i < 3; i++)
        free(w[i]);
    free(wf);
    free(x);
    free(y);
    free(want);
}
