/*
 * GPU op parity: the matvec (decode) and matmul (prefill) kernels for every
 * weight type the GPU runs, against references computed here in double
 * from the CPU reference dequantiser.  Skips without a CUDA device.
 *
 *   quantised weights, matvec: the quantised activations must be exactly
 *     the documented rule (d = amax / 127, q = round-half-even(x / d)),
 *     and y must equal sum over blocks d * sum(w_i q_i) to float rounding:
 *     the integer parts are exact, so any decoding slip shows.
 *   matvec, float weights: y = sum w_i x_i to float rounding.
 *   matmul, quantised and F16 weights: f16 tiles on tensor cores (both
 *     operands rounded to f16, so within 2^-10 of sum |w_i x_i|: a decoding
 *     or fragment slip is far larger); F32, BF16: f32 tiles (float
 *     rounding).
 * Row, token and column counts cross the kernels' tile edges (below).
 */
#include "../kernels/cpu/ops.h"
#include "gpu/gpu.h"
#include "gpu/gpu_check_ops.h"
#include "moe.h"
#include "quant.h"
#include "test.h"
#include "gpu_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t gpu_types[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q4_0,   QT_Q4_1,   QT_Q5_0,  QT_Q5_1,
                                     QT_Q8_0, QT_Q2_K, QT_Q3_K, QT_Q4_K,   QT_Q5_K,   QT_Q6_K,  QT_IQ4_NL,
                                     QT_IQ4_XS, QT_MXFP4};

enum { ROWS = 67, COLS = 512, COLS_ODD = 576, MAX_COLS = 576, MAX_TOK = 70 };

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rng_float(uint64_t *s)
{
    return (float)((double)(rng_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static bool is_float_type(uint32_t t)
{
    return t == QT_F32 || t == QT_F16 || t == QT_BF16;
}

typedef struct case_data {
    uint32_t type;
    int cols;
    uint8_t *w;
    float *wf;   /* dequantised weights */
    float *x;
    float *y;
    int8_t *xq, *hq;
    float *xd, *hd;
} case_data;

/* Checks y against the reference; NULL or a message. */
static const char *check_rows(const case_data *c, int n_tok, bool matmul, char *msg, size_t len)
{
    const int n = c->cols;
    const bool q8 = !is_float_type(c->type);
    if (q8)
        for (int t = 0; t < n_tok; t++)
            gpu_test_q8_rule(c->x + t * n, n, c->hq + t * n, c->hd + t * (n / 32));
    if (q8)
        for (int i = 0; i < n_tok * n; i++)
            if (c->xq[i] != c->hq[i] || c->xd[i / 32] != c->hd[i / 32]) {
                snprintf(msg, len, "activation %d: kernel q %d d %g, rule q %d d %g", i, c->xq[i], c->xd[i / 32],
                         c->hq[i], c->hd[i / 32]);
                return msg;
            }
    const bool one_level = q8 && !matmul, f16_tiles = matmul && (q8 || c->type == QT_F16);
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < ROWS; r++) {
            double want = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                const int k = t * n + i;
                const double w = c->wf[r * n + i], a = one_level ? (double)c->hq[k] * c->hd[k / 32] : c->x[k];
                want += w * a;
                mag += fabs(w * a);
            }
            const double got = c->y[t * ROWS + r];
            const double tol = (f16_tiles ? 2e-3 : 2e-5) * mag + 1e-6;
            if (!(fabs(got - want) <= tol)) {
                snprintf(msg, len, "token %d row %d: GPU %.9g, reference %.9g (tolerance %.3g)", t, r, got, want,
                         tol);
                return msg;
            }
        }
    return NULL;
}

/* Quantises ROWS random rows of c->cols values into c->w and their
 * dequantised values into c->wf. */
static bool make_weights(case_data *c, const quant_traits *q, float *src, uint64_t *seed)
{
    for (int i = 0; i < ROWS * c->cols; i++)
        src[i] = rng_float(seed) * (float)(1 + (i / 32) % 5);
    uint64_t rb;
    if (!quant_row_bytes(c->type, (uint64_t)c->cols, &rb))
        return false;
    for (int r = 0; r < ROWS; r++) {
        q->from_float(src + r * c->cols, c->w + r * rb, c->cols);
        q->to_float(c->w + r * rb, c->wf + r * c->cols, c->cols);
    }
    return true;
}

/* Shapes cross the tile edges: 67 rows (64-row tiles), 40 and 70 tokens
 * (64-token tiles, 8-token groups), and for the 32-value block formats 576
 * columns (an odd number of the matmul's 64-value steps). */
TEST(cuda_linear_every_type_matches_reference)
{
    REQUIRE_GPU();
    uint64_t seed = 0xD1B54A32D192ED03ull;
    case_data c = {0};
    float *src = malloc(sizeof(float) * ROWS * MAX_COLS);
    c.wf = malloc(sizeof(float) * ROWS * MAX_COLS);
    c.w = malloc(4 * ROWS * MAX_COLS);
    c.x = malloc(sizeof(float) * MAX_TOK * MAX_COLS);
    c.y = malloc(sizeof(float) * MAX_TOK * ROWS);
    c.xq = malloc(MAX_TOK * MAX_COLS);
    c.hq = malloc(MAX_TOK * MAX_COLS);
    c.xd = malloc(sizeof(float) * MAX_TOK * MAX_COLS / 32);
    c.hd = malloc(sizeof(float) * MAX_TOK * MAX_COLS / 32);
    CHECK(src && c.wf && c.w && c.x && c.y && c.xq && c.hq && c.xd && c.hd);
    static const struct {
        int n_tok;
        bool matmul;
    } shapes[] = {{1, false}, {3, false}, {8, false}, {40, true}, {70, true}, {9, true}};
    char msg[512];
    for (size_t ti = 0; ti < sizeof gpu_types / sizeof gpu_types[0]; ti++) {
        c.type = gpu_types[ti];
        const quant_traits *q = quant_traits_of(c.type);
        for (int odd = 0; odd < 2; odd++) {
            if (odd && q->block_size != 32)
                continue;
            c.cols = odd ? COLS_ODD : COLS;
            CHECK(make_weights(&c, q, src, &seed));
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                const int n_tok = shapes[si].n_tok;
                for (int i = 0; i < n_tok * c.cols; i++)
                    c.x[i] = rng_float(&seed) * (i % 97 == 0 ? 8.0f : 1.0f);
                for (int i = 0; i < n_tok * ROWS; i++)
                    c.y[i] = NAN; /* every output must be written */
                CHECK_OK(gpu_check_linear(c.type, c.w, ROWS, c.cols, c.x, n_tok, shapes[si].matmul, c.y, c.xq,
                                          c.xd));
                const char *bad = check_rows(&c, n_tok, shapes[si].matmul, msg, sizeof msg);
                if (bad != NULL)
                    FAIL("%s, %s of %d tokens x %d: %s", q->name, shapes[si].matmul ? "matmul" : "matvec", n_tok,
                         c.cols, bad);
            }
        }
    }
    free(src);
    free(c.wf);
    free(c.w);
    free(c.x);
    free(c.y);
    free(c.xq);
    free(c.hq);
    free(c.xd);
    free(c.hd);
}

/* --- per-row kernels against the CPU's reference ops (kernels/cpu/ops.c,
 * src/moe.c), on random inputs: one behaviour per test.  The embedding
 * kernel is checked by test_cuda_quant.c (gpu_check_dequant). */

static float *random_floats(uint64_t *seed, size_t n, float scale)
{
    float *v = malloc(sizeof(float) * (n > 0 ? n : 1));
    for (size_t i = 0; v != NULL && i < n; i++)
        v[i] = rng_float(seed) * scale;
    return v;
}

/* The first index where got and want differ by more than abs + rel *
 * |want|, or -1. */
static long first_mismatch(const float *got, const float *want, size_t n, double abs_tol, double rel_tol)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= abs_tol + rel_tol * fabs((double)want[i])))
            return (long)i;
    return -1;
}

#define CHECK_CLOSE(got, want, n, abs_tol, rel_tol)                                                            \
    do {                                                                                                       \
        const long i_ = first_mismatch((got), (want), (n), (abs_tol), (rel_tol));                              \
        if (i_ >= 0)                                                                                           \
            FAIL("value %ld: GPU %.9g, CPU %.9g", i_, (double)(got)[i_], (double)(want)[i_]);                  \
    } while (0)

enum { NORM_ROWS = 5, NORM_N = 320 };

TEST(cuda_op_rmsnorm_matches_cpu)
{
    REQUIRE_GPU();
    uint64_t seed = 0x1234567ull;
    float *x = random_floats(&seed, NORM_ROWS * NORM_N, 3.0f), *gain = random_floats(&seed, NORM_N, 1.0f);
    float y[NORM_ROWS * NORM_N], want[NORM_ROWS * NORM_N];
    CHECK(x && gain);
    CHECK_OK(gpu_check_rmsnorm(x, gain, 1e-6f, NORM_ROWS, NORM_N, false, y, NULL, NULL));
    for (int r = 0; r < NORM_ROWS; r++)
        op_rmsnorm(want + r * NORM_N, x + r * NORM_N, gain, NORM_N, 1e-6f);
    CHECK_CLOSE(y, want, NORM_ROWS * NORM_N, 1e-7, 1e-6);
    free(x);
    free(gain);
}

TEST(cuda_op_rmsnorm_8bit_form_follows_the_rule)
{
    REQUIRE_GPU();
    uint64_t seed = 0x7654321ull;
    float *x = random_floats(&seed, NORM_ROWS * NORM_N, 2.0f);
    float y[NORM_ROWS * NORM_N], d[NORM_ROWS * NORM_N / 32], want_d[NORM_ROWS * NORM_N / 32];
    int8_t q[NORM_ROWS * NORM_N], want_q[NORM_ROWS * NORM_N];
    CHECK(x != NULL);
    CHECK_OK(gpu_check_rmsnorm(x, NULL, 1e-5f, NORM_ROWS, NORM_N, true, y, q, d));
    gpu_test_q8_rule(y, NORM_ROWS * NORM_N, want_q, want_d);
    for (int i = 0; i < NORM_ROWS * NORM_N; i++)
        if (q[i] != want_q[i])
            FAIL("value %d: 8-bit %d, rule %d", i, q[i], want_q[i]);
    CHECK(memcmp(d, want_d, sizeof d) == 0);
    free(x);
}

/* --- RoPE */

enum { ROPE_HEADS = 4, ROPE_KV = 2, ROPE_DIM = 64, ROPE_TOK = 5, ROPE_POS0 = 37 };

/* Runs c on random q/k and compares with op_rmsnorm (when gains) then
 * op_rope at every head of every token. */
static const char *rope_case(gpu_rope_check *c, char *msg, size_t len)
{
    uint64_t seed = 0xABCDEFull;
    const int nq = ROPE_TOK * ROPE_HEADS * ROPE_DIM, nk = ROPE_TOK * ROPE_KV * ROPE_DIM;
    float *q = random_floats(&seed, nq, 1.0f), *k = random_floats(&seed, nk, 1.0f);
    float *wq = malloc(sizeof(float) * nq), *wk = malloc(sizeof(float) * nk);
    const char *bad = NULL;
    if (!q || !k || !wq || !wk) {
        bad = "out of memory";
        goto done;
    }
    memcpy(wq, q, sizeof(float) * nq);
    memcpy(wk, k, sizeof(float) * nk);
    c->n_head = ROPE_HEADS, c->n_head_kv = ROPE_KV, c->head_dim = ROPE_DIM, c->n_tok = ROPE_TOK;
    c->pos0 = ROPE_POS0;
    if (gpu_check_rope(c, q, k) != HYDRA_OK) {
        snprintf(msg, len, "gpu_check_rope: %s", hydra_last_error());
        bad = msg;
        goto done;
    }
    const rope_style style = c->neox ? ROPE_NEOX : ROPE_NORMAL;
    float cs[ROPE_DIM];
    for (int t = 0; t < ROPE_TOK; t++) {
        op_rope_cache_ext(cs, ROPE_POS0 + t, &c->rope);
        for (int h = 0; h < ROPE_HEADS + ROPE_KV; h++) {
            float *head = h < ROPE_HEADS ? wq + (t * ROPE_HEADS + h) * ROPE_DIM
                                         : wk + (t * ROPE_KV + h - ROPE_HEADS) * ROPE_DIM;
            const float *gain = h < ROPE_HEADS ? c->q_norm : c->k_norm;
            if (gain != NULL)
                op_rmsnorm(head, head, gain, ROPE_DIM, c->eps);
            op_rope(head, cs, c->rope.n_rot, style);
        }
    }
    const long iq = first_mismatch(q, wq, nq, 2e-5, 1e-4), ik = first_mismatch(k, wk, nk, 2e-5, 1e-4);
    if (iq >= 0 || ik >= 0) {
        snprintf(msg, len, "%s value %ld: GPU %.9g, CPU %.9g", iq >= 0 ? "q" : "k", iq >= 0 ? iq : ik,
                 iq >= 0 ? q[iq] : k[ik], iq >= 0 ? wq[iq] : wk[ik]);
        bad = msg;
    }
done:
    free(q);
    free(k);
    free(wq);
    free(wk);
    return bad;
}

TEST(cuda_op_rope_neox_matches_cpu)
{
    REQUIRE_GPU();
    gpu_rope_check c = {.neox = true, .rope = op_rope_plain(ROPE_DIM, 1e6f)};
    char msg[256];
    const char *bad = rope_case(&c, msg, sizeof msg);
    if (bad != NULL)
        FAIL("%s", bad);
}

TEST(cuda_op_rope_normal_partial_matches_cpu)
{
    REQUIRE_GPU();
    gpu_rope_check c = {.neox = false, .rope = op_rope_plain(ROPE_DIM / 2, 1e4f)};
    char msg[256];
    const char *bad = rope_case(&c, msg, sizeof msg);
    if (bad != NULL)
        FAIL("%s", bad);
}

TEST(cuda_op_rope_yarn_matches_cpu)
{
    REQUIRE_GPU();
    rope_params p = op_rope_plain(ROPE_DIM, 150000.0f);
    p.freq_scale = 1.0f / 32.0f;
    p.ext_factor = 1.0f;
    op_rope_yarn_corr(&p, 4096, 32.0f, 1.0f);
    gpu_rope_check c = {.neox = true, .rope = p};
    char msg[256];
    const char *bad = rope_case(&c, msg, sizeof msg);
    if (bad != NULL)
        FAIL("%s", bad);
}

TEST(cuda_op_qk_norm_then_rope_matches_cpu)
{
    REQUIRE_GPU();
    uint64_t seed = 0x5151ull;
    float *qn = random_floats(&seed, ROPE_DIM, 1.5f), *kn = random_floats(&seed, ROPE_DIM, 1.5f);
    CHECK(qn && kn);
    gpu_rope_check c = {.neox = true, .rope = op_rope_plain(ROPE_DIM, 1e6f), .q_norm = qn, .k_norm = kn,
                        .eps = 1e-6f};
    char msg[256];
    const char *bad = rope_case(&c, msg, sizeof msg);
    free(qn);
    free(kn);
    if (bad != NULL)
        FAIL("%s", bad);
}

/* --- attention */

/* out of every (token, KV head) by op_attention_group over an F32 cache
 * without a ring. */
static void attention_cpu(const gpu_attn_check *c, const float *q, const float *k, const float *v, float *out)
{
    const int group = c->n_head / c->n_head_kv, dk = c->head_dim_k, dv = c->head_dim_v;
    const size_t k_row = (size_t)c->n_head_kv * dk, v_row = c->v_in_k ? k_row : (size_t)c->n_head_kv * dv;
    float *scratch = malloc(sizeof(float) * op_attention_scratch(group, c->n_ctx, dk, dv));
    for (int t = 0; scratch != NULL && t < c->n_tok; t++)
        for (int g = 0; g < c->n_head_kv; g++) {
            const int64_t pos = c->pos0 + t;
            int64_t n_kv = pos + 1;
            if (c->window > 0 && n_kv > c->window)
                n_kv = c->window;
            const attn_args a = {.head_dim_k = dk, .head_dim_v = dv, .scale = c->scale, .kv_type = QT_F32,
                                 .k = k + (size_t)g * dk, .k_stride = sizeof(float) * k_row,
                                 .v = c->v_in_k ? k : v + (size_t)g * dv, .v_stride = sizeof(float) * v_row,
                                 .n_kv = n_kv, .first = pos - n_kv + 1, .n_slots = 0,
                                 .sinks = c->sinks != NULL ? c->sinks + g * group : NULL};
            const size_t head0 = (size_t)t * c->n_head + (size_t)g * group;
            op_attention_group(&op_kernels_scalar, q + head0 * dk, group, &a, scratch, out + head0 * dv);
        }
    free(scratch);
}

/* x rounded to f16 in place; returns the f16 bits (NULL: no memory). */
static uint16_t *f16_rows(float *x, size_t n)
{
    uint16_t *h = x != NULL ? malloc(sizeof *h * n) : NULL;
    if (h != NULL) {
        op_kernels_scalar.f32_to_f16(x, h, (int)n);
        op_kernels_scalar.f16_to_f32(h, x, (int)n);
    }
    return h;
}

static const char *attention_case(const gpu_attn_check *c, char *msg, size_t len)
{
    uint64_t seed = 0xA77E5ull + (uint64_t)c->pos0;
    const size_t nq = (size_t)c->n_tok * c->n_head * c->head_dim_k, no = (size_t)c->n_tok * c->n_head * c->head_dim_v;
    float *q = random_floats(&seed, nq, 1.0f);
    float *k = random_floats(&seed, (size_t)c->n_ctx * c->n_head_kv * c->head_dim_k, 1.0f);
    float *v = random_floats(&seed, (size_t)c->n_ctx * c->n_head_kv * c->head_dim_v, 1.0f);
    float *got = malloc(sizeof(float) * no), *want = malloc(sizeof(float) * no);
    const char *bad = NULL;
    /* the tile kernel reads an F16 cache: the reference takes the same
     * rounded rows, the kernel's own f16 rounding of the queries and
     * probabilities (2^-11) is the tolerance */
    uint16_t *kh = c->tiles ? f16_rows(k, (size_t)c->n_ctx * c->n_head_kv * c->head_dim_k) : NULL;
    uint16_t *vh = c->tiles ? f16_rows(v, (size_t)c->n_ctx * c->n_head_kv * c->head_dim_v) : NULL;
    if (!q || !k || !v || !got || !want || (c->tiles && (!kh || !vh)))
        bad = "out of memory";
    else if (gpu_check_attention(c, q, c->tiles ? (const float *)kh : k,
                                 c->v_in_k ? NULL : c->tiles ? (const float *)vh : v, got) != HYDRA_OK)
        bad = hydra_last_error();
    if (bad == NULL) {
        attention_cpu(c, q, k, v, want);
        const double tol = c->tiles ? 3e-3 : 5e-5;
        const long i = first_mismatch(got, want, no, tol, 2 * tol);
        if (i >= 0) {
            snprintf(msg, len, "token %ld head %ld value %ld: GPU %.9g, CPU %.9g",
                     i / ((long)c->n_head * c->head_dim_v), i / c->head_dim_v % c->n_head, i % c->head_dim_v,
                     got[i], want[i]);
            bad = msg;
        }
    }
    free(kh);
    free(vh);
    free(q);
    free(k);
    free(v);
    free(got);
    free(want);
    return bad;
}

/* One case of a check: the check_t from the designated initialisers, run
 * through run(case, msg, len), which returns NULL or what went wrong. */
#define GPU_CASE(check_t, run, ...)                                                                            \
    do {                                                                                                       \
        REQUIRE_GPU();                                                                                         \
        const check_t c_ = {__VA_ARGS__};                                                                      \
        char msg_[256];                                                                                        \
        const char *bad_ = run(&c_, msg_, sizeof msg_);                                                        \
        if (bad_ != NULL)                                                                                      \
            FAIL("%s", bad_);                                                                                  \
    } while (0)
#define ATTENTION_CASE(...) GPU_CASE(gpu_attn_check, attention_case, __VA_ARGS__)

TEST(cuda_op_attention_gqa_decode_matches_cpu)
{
    ATTENTION_CASE(.n_head = 8, .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64, .scale = 0.125f, .n_tok = 1,
                   .pos0 = 300, .n_ctx = 400);
}

TEST(cuda_op_attention_gqa_prefill_matches_cpu)
{
    ATTENTION_CASE(.n_head = 8, .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64, .scale = 0.125f, .n_tok = 37,
                   .pos0 = 100, .n_ctx = 256);
}

/* Prefill's tile kernel (F16 cache, tensor cores): both head sizes it
 * takes, token tiles of 64 crossed (100 tokens: a partial second tile),
 * positions starting off a 64-row cache tile, GQA groups of 4 and 8. */
TEST(cuda_op_attention_prefill_tiles_match_cpu)
{
    ATTENTION_CASE(.n_head = 8, .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64, .scale = 0.125f, .n_tok = 100,
                   .pos0 = 37, .n_ctx = 256, .tiles = true);
    ATTENTION_CASE(.n_head = 32, .n_head_kv = 4, .head_dim_k = 128, .head_dim_v = 128, .scale = 0.088388f,
                   .n_tok = 130, .pos0 = 0, .n_ctx = 192, .tiles = true);
}

TEST(cuda_op_attention_ext_kernel_matches_cpu_without_extras)
{
    ATTENTION_CASE(.n_head = 8, .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64, .scale = 0.125f, .n_tok = 9,
                   .pos0 = 250, .n_ctx = 300, .ext = true);
}

TEST(cuda_op_attention_sinks_match_cpu)
{
    const float sinks[4] = {0.5f, -1.0f, 2.5f, 0.0f};
    ATTENTION_CASE(.n_head = 4, .n_head_kv = 2, .head_dim_k = 32, .head_dim_v = 32, .scale = 0.17f, .n_tok = 6,
                   .pos0 = 140, .n_ctx = 200, .sinks = sinks);
}

TEST(cuda_op_attention_sliding_window_matches_cpu)
{
    ATTENTION_CASE(.n_head = 4, .n_head_kv = 2, .head_dim_k = 32, .head_dim_v = 32, .scale = 0.17f, .n_tok = 20,
                   .pos0 = 150, .n_ctx = 300, .window = 48);
}

TEST(cuda_op_attention_mla_latent_matches_cpu)
{
    /* deepseek2's shape in latent space: one KV head of kv_lora + n_rot
     * for 16 query heads, the value the first kv_lora of each row */
    ATTENTION_CASE(.n_head = 16, .n_head_kv = 1, .head_dim_k = 80, .head_dim_v = 64, .v_in_k = true,
                   .scale = 0.144f, .n_tok = 6, .pos0 = 200, .n_ctx = 260);
}

/* --- expert selection */

enum { SEL_TOK = 16 };

static const char *select_case(const gpu_select_check *c, char *msg, size_t len)
{
    uint64_t seed = 0x5E1Eull + (uint64_t)c->n_expert;
    float *logits = random_floats(&seed, (size_t)SEL_TOK * c->n_expert, 4.0f);
    const size_t n_routes = (size_t)SEL_TOK * c->n_used;
    int32_t *experts = malloc(sizeof(int32_t) * n_routes);
    float *weights = malloc(sizeof(float) * n_routes);
    moe_route *want = malloc(sizeof(moe_route) * n_routes);
    moe_scratch s = {.n_expert = c->n_expert, .probs = malloc(sizeof(float) * c->n_expert),
                     .chosen = malloc((size_t)c->n_expert), .group_score = malloc(sizeof(float) * c->n_expert),
                     .group_taken = malloc((size_t)c->n_expert)};
    const char *bad = NULL;
    if (!logits || !experts || !weights || !want || !s.probs || !s.chosen || !s.group_score || !s.group_taken)
        bad = "out of memory";
    else if (gpu_check_select(c, logits, SEL_TOK, experts, weights) != HYDRA_OK)
        bad = hydra_last_error();
    if (bad == NULL) {
        const moe_gating g = {.func = (arch_gating)c->func, .n_expert = c->n_expert, .n_used = c->n_used,
                              .renorm = c->renorm, .scale = c->scale, .sel_bias = c->sel_bias,
                              .n_group = c->n_group, .n_group_used = c->n_group_used};
        moe_select(&g, &s, logits, SEL_TOK, want);
        for (size_t i = 0; i < n_routes && bad == NULL; i++)
            if (experts[i] != want[i].expert ||
                !(fabs((double)weights[i] - want[i].weight) <= 1e-6 + 1e-5 * fabs((double)want[i].weight))) {
                snprintf(msg, len, "token %zu rank %zu: GPU expert %d weight %.9g, CPU expert %d weight %.9g",
                         i / c->n_used, i % c->n_used, experts[i], weights[i], want[i].expert, want[i].weight);
                bad = msg;
            }
    }
    free(logits);
    free(experts);
    free(weights);
    free(want);
    free(s.probs);
    free(s.chosen);
    free(s.group_score);
    free(s.group_taken);
    return bad;
}

#define SELECT_CASE(...) GPU_CASE(gpu_select_check, select_case, __VA_ARGS__)

TEST(cuda_op_topk_softmax_renorm_matches_cpu)
{
    SELECT_CASE(.n_expert = 64, .n_used = 8, .func = GATING_SOFTMAX, .renorm = true, .scale = 1.0f,
                .plain_kernel = true);
}

TEST(cuda_op_topk_sigmoid_scaled_matches_cpu)
{
    SELECT_CASE(.n_expert = 40, .n_used = 4, .func = GATING_SIGMOID, .renorm = false, .scale = 2.5f,
                .plain_kernel = true);
}

TEST(cuda_op_select_softmax_renorm_matches_cpu)
{
    SELECT_CASE(.n_expert = 64, .n_used = 8, .func = GATING_SOFTMAX, .renorm = true, .scale = 1.0f);
}

TEST(cuda_op_select_sigmoid_bias_groups_matches_cpu)
{
    REQUIRE_GPU(); /* before the allocation: a skip returns from here */
    uint64_t seed = 0xB1A5ull;
    float *bias = random_floats(&seed, 64, 0.3f);
    CHECK(bias != NULL);
    SELECT_CASE(.n_expert = 64, .n_used = 6, .func = GATING_SIGMOID, .renorm = true, .scale = 2.5f, .sel_bias = bias,
                .n_group = 8, .n_group_used = 3);
    free(bias);
}

TEST(cuda_op_select_softmax_over_chosen_matches_cpu)
{
    SELECT_CASE(.n_expert = 32, .n_used = 4, .func = GATING_SOFTMAX_WEIGHT, .renorm = false, .scale = 1.0f);
}

/* --- FFN activation */

enum { GLU_ROWS = 12, GLU_FF = 96, GLU_EXPERTS = 5 };

TEST(cuda_op_swiglu_matches_cpu)
{
    REQUIRE_GPU();
    uint64_t seed = 0x6106ull;
    float *g = random_floats(&seed, GLU_ROWS * GLU_FF, 6.0f), *u = random_floats(&seed, GLU_ROWS * GLU_FF, 6.0f);
    float h[GLU_ROWS * GLU_FF], want[GLU_ROWS * GLU_FF];
    CHECK(g && u);
    const gpu_glu_check c = {.n_rows = GLU_ROWS, .ff = GLU_FF};
    CHECK_OK(gpu_check_glu(&c, g, u, h));
    op_swiglu(want, g, u, GLU_ROWS * GLU_FF);
    CHECK_CLOSE(h, want, GLU_ROWS * GLU_FF, 1e-6, 1e-5);
    free(g);
    free(u);
}

TEST(cuda_op_clamped_swiglu_with_expert_biases_matches_cpu)
{
    REQUIRE_GPU();
    uint64_t seed = 0x0A1ull;
    float *g = random_floats(&seed, GLU_ROWS * GLU_FF, 12.0f), *u = random_floats(&seed, GLU_ROWS * GLU_FF, 12.0f);
    float *gb = random_floats(&seed, GLU_EXPERTS * GLU_FF, 2.0f);
    float *ub = random_floats(&seed, GLU_EXPERTS * GLU_FF, 2.0f);
    float h[GLU_ROWS * GLU_FF], want[GLU_ROWS * GLU_FF];
    int32_t experts[GLU_ROWS];
    CHECK(g && u && gb && ub);
    for (int r = 0; r < GLU_ROWS; r++)
        experts[r] = (r * 3) % GLU_EXPERTS;
    const gpu_glu_check c = {.n_rows = GLU_ROWS, .ff = GLU_FF, .gate_bias = gb, .up_bias = ub, .experts = experts,
                             .n_expert = GLU_EXPERTS, .oai = true, .alpha = 1.702f, .limit = 7.0f};
    CHECK_OK(gpu_check_glu(&c, g, u, h));
    for (int r = 0; r < GLU_ROWS; r++) {
        op_axpy(g + r * GLU_FF, 1.0f, gb + experts[r] * GLU_FF, GLU_FF);
        op_axpy(u + r * GLU_FF, 1.0f, ub + experts[r] * GLU_FF, GLU_FF);
    }
    op_swiglu_oai(want, g, u, GLU_ROWS * GLU_FF, 1.702f, 7.0f);
    CHECK_CLOSE(h, want, GLU_ROWS * GLU_FF, 1e-6, 1e-5);
    free(g);
    free(u);
    free(gb);
    free(ub);
}

/* --- combine and residual adds */

enum { CB_TOK = 3, CB_USED = 4, CB_N = 200 };

TEST(cuda_op_moe_combine_matches_cpu)
{
    REQUIRE_GPU();
    uint64_t seed = 0xC0B1ull;
    float *w = random_floats(&seed, CB_TOK * CB_USED, 1.0f), *y = random_floats(&seed, CB_TOK * CB_USED * CB_N, 3.0f);
    float *x = random_floats(&seed, CB_TOK * CB_N, 3.0f);
    float want[CB_TOK * CB_N];
    CHECK(w && y && x);
    memcpy(want, x, sizeof want);
    CHECK_OK(gpu_check_combine(w, y, CB_TOK, CB_USED, CB_N, x));
    for (int t = 0; t < CB_TOK; t++) {
        float sub[CB_N] = {0};
        for (int k = 0; k < CB_USED; k++)
            op_axpy(sub, w[t * CB_USED + k], y + (t * CB_USED + k) * CB_N, CB_N);
        op_axpy(want + t * CB_N, 1.0f, sub, CB_N);
    }
    CHECK_CLOSE(x, want, CB_TOK * CB_N, 1e-6, 1e-5);
    free(w);
    free(y);
    free(x);
}

TEST(cuda_op_gated_residual_add_matches_cpu)
{
    REQUIRE_GPU();
    uint64_t seed = 0xADDull;
    float *y = random_floats(&seed, CB_TOK * CB_N, 3.0f), *x = random_floats(&seed, CB_TOK * CB_N, 3.0f);
    const float gate[CB_TOK] = {-1.5f, 0.0f, 2.0f};
    float want[CB_TOK * CB_N];
    CHECK(y && x);
    memcpy(want, x, sizeof want);
    CHECK_OK(gpu_check_add_rows(y, gate, CB_TOK, CB_N, x));
    for (int t = 0; t < CB_TOK; t++)
        op_axpy(want + t * CB_N, 1.0f / (1.0f + expf(-gate[t])), y + t * CB_N, CB_N);
    CHECK_CLOSE(x, want, CB_TOK * CB_N, 1e-6, 1e-5);
    free(y);
    free(x);
}

/* --- MLA's cache rows and query split (mla.cu) against model/mla.c's
 * steps: op_rmsnorm of the latent, op_rope of the shared key and of each
 * head's rope part (normal pairing, YaRN as deepseek2 sets it). */

enum { MLA_HEADS = 4, MLA_NOPE = 32, MLA_ROT = 16, MLA_LORA = 64, MLA_TOK = 3, MLA_POS0 = 21 };
enum { MLA_ROW = MLA_LORA + MLA_ROT, MLA_DK = MLA_NOPE + MLA_ROT };

TEST(cuda_op_mla_cache_rows_and_query_split_match_cpu)
{
    REQUIRE_GPU();
    uint64_t seed = 0x31A0ull;
    float *latent = random_floats(&seed, MLA_TOK * MLA_ROW, 2.0f), *norm = random_floats(&seed, MLA_LORA, 1.0f);
    float *q = random_floats(&seed, MLA_TOK * MLA_HEADS * MLA_DK, 1.0f);
    static float cache[(MLA_POS0 + MLA_TOK) * MLA_ROW], nope[MLA_TOK * MLA_HEADS * MLA_NOPE],
        q_lat[MLA_TOK * MLA_HEADS * MLA_ROW];
    CHECK(latent && norm && q);
    rope_params p = op_rope_plain(MLA_ROT, 1e4f);
    p.freq_scale = 0.25f;
    p.ext_factor = 1.0f;
    p.attn_factor = 1.0f / (1.0f + 0.1f * logf(4.0f));
    op_rope_yarn_corr(&p, 4096, 32.0f, 1.0f);
    const gpu_mla_prep_check c = {.n_head = MLA_HEADS, .nope = MLA_NOPE, .n_rot = MLA_ROT, .kv_lora = MLA_LORA,
                             .n_tok = MLA_TOK, .pos0 = MLA_POS0, .eps = 1e-6f, .neox = false, .rope = p};
    CHECK_OK(gpu_check_mla_prepare(&c, latent, norm, q, cache, nope, q_lat));
    for (int t = 0; t < MLA_TOK; t++) {
        float cs[MLA_ROT], row[MLA_ROW];
        op_rope_cache_ext(cs, MLA_POS0 + t, &p);
        memcpy(row, latent + t * MLA_ROW, sizeof row);
        op_rmsnorm(row, row, norm, MLA_LORA, 1e-6f);
        op_rope(row + MLA_LORA, cs, MLA_ROT, ROPE_NORMAL);
        CHECK_CLOSE(cache + (MLA_POS0 + t) * MLA_ROW, row, MLA_ROW, 2e-6, 1e-5);
        for (int h = 0; h < MLA_HEADS; h++) {
            const float *qh = q + (t * MLA_HEADS + h) * MLA_DK;
            const float *lat = q_lat + (t * MLA_HEADS + h) * MLA_ROW;
            float rot[MLA_ROT];
            CHECK(memcmp(nope + (t * MLA_HEADS + h) * MLA_NOPE, qh, sizeof(float) * MLA_NOPE) == 0);
            memcpy(rot, qh + MLA_NOPE, sizeof rot);
            op_rope(rot, cs, MLA_ROT, ROPE_NORMAL);
            CHECK_CLOSE(lat + MLA_LORA, rot, MLA_ROT, 2e-6, 1e-5);
        }
    }
    free(latent);
    free(norm);
    free(q);
}

/* --- per-expert output bias: a row's bias is its route's expert's, rows
 * being routes (decode) or slots of the grouped order (prefill); the
 * hybrid split's misses (expert -1) get none */

enum { RB_EXPERTS = 6, RB_WIDTH = 40, RB_ROUTES = 10 };

TEST(cuda_op_expert_bias_by_route_and_slot_matches_cpu)
{
    REQUIRE_GPU();
    uint64_t seed = 0xB1A5B1A5ull;
    float *bias = random_floats(&seed, RB_EXPERTS * RB_WIDTH, 1.0f);
    float *y0 = random_floats(&seed, RB_ROUTES * RB_WIDTH, 1.0f);
    const int32_t experts[RB_ROUTES] = {3, 0, 5, -1, 2, 2, 1, 4, 0, 3};
    int32_t order[RB_ROUTES];
    float y[RB_ROUTES * RB_WIDTH], want[RB_ROUTES * RB_WIDTH];
    CHECK(bias && y0);
    for (int s = 0; s < RB_ROUTES; s++)
        order[s] = (s * 3) % RB_ROUTES;
    for (int grouped = 0; grouped < 2; grouped++) {
        memcpy(y, y0, sizeof y);
        memcpy(want, y0, sizeof want);
        CHECK_OK(gpu_check_route_bias(bias, RB_EXPERTS, experts, RB_ROUTES, grouped ? order : NULL, RB_ROUTES,
                                      RB_WIDTH, y));
        for (int r = 0; r < RB_ROUTES; r++) {
            const int e = experts[grouped ? order[r] : r];
            if (e >= 0)
                op_axpy(want + r * RB_WIDTH, 1.0f, bias + e * RB_WIDTH, RB_WIDTH);
        }
        CHECK_CLOSE(y, want, RB_ROUTES * RB_WIDTH, 0.0, 0.0);
    }
    free(bias);
    free(y0);
}
