/*
 * GPU op parity: the matvec (decode) and matmul (prefill) kernels for every
 * weight type the GPU runs, against references computed here in double
 * from the CPU reference dequantiser.  Skips without a CUDA device.
 *
 *   matvec, 8-bit activations: the kernel's quantised activations must be
 *     exactly the documented rule (d = amax / 127, q = round-half-even(x /
 *     d)), and y must equal sum over blocks d * sum(w_i q_i) to float
 *     rounding: the integer parts are exact, so any decoding slip shows.
 *   matvec, float weights: y = sum w_i x_i to float rounding.
 *   matmul: f16 tiles on tensor cores (quantised and F16 weights: both
 *     operands rounded to f16, so within 2^-10 of sum |w_i x_i|) or f32
 *     tiles (F32, BF16: float rounding).
 * Row counts cross the kernels' tile edges (67 rows; 3, 8 and 40 tokens).
 */
#include "gpu/gpu.h"
#include "quant.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

static const uint32_t gpu_types[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q4_0,   QT_Q4_1,   QT_Q5_0,  QT_Q5_1,
                                     QT_Q8_0, QT_Q2_K, QT_Q3_K, QT_Q4_K,   QT_Q5_K,   QT_Q6_K,  QT_IQ4_NL,
                                     QT_IQ4_XS, QT_MXFP4};

enum { ROWS = 67, COLS = 512, MAX_TOK = 40 };

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

/* The activation rule of the matvec kernels, on the host. */
static void quantize_rule(const float *x, int n, int8_t *q, float *d)
{
    for (int b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[32 * b + i]));
        d[b] = amax / 127.0f;
        const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int i = 0; i < 32; i++)
            q[32 * b + i] = (int8_t)nearbyintf(x[32 * b + i] * iscale);
    }
}

typedef struct case_data {
    uint32_t type;
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
    const bool q8 = !matmul && !is_float_type(c->type);
    if (q8)
        for (int t = 0; t < n_tok; t++)
            quantize_rule(c->x + t * COLS, COLS, c->hq + t * COLS, c->hd + t * (COLS / 32));
    if (q8)
        for (int i = 0; i < n_tok * COLS; i++)
            if (c->xq[i] != c->hq[i] || c->xd[i / 32] != c->hd[i / 32]) {
                snprintf(msg, len, "activation %d: kernel q %d d %g, rule q %d d %g", i, c->xq[i], c->xd[i / 32],
                         c->hq[i], c->hd[i / 32]);
                return msg;
            }
    const bool f16_tiles = matmul && c->type != QT_F32 && c->type != QT_BF16;
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < ROWS; r++) {
            double want = 0, mag = 0;
            for (int i = 0; i < COLS; i++) {
                const double a = q8 ? (double)c->hq[t * COLS + i] * c->hd[(t * COLS + i) / 32] : c->x[t * COLS + i];
                want += (double)c->wf[r * COLS + i] * a;
                mag += fabs((double)c->wf[r * COLS + i] * a);
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

TEST(cuda_linear_every_type_matches_reference)
{
    const char *why;
    if (!gpu_available(&why))
        SKIP("%s", why);
    uint64_t seed = 0xD1B54A32D192ED03ull;
    case_data c = {0};
    float *src = malloc(sizeof(float) * ROWS * COLS);
    c.wf = malloc(sizeof(float) * ROWS * COLS);
    c.w = malloc(4 * ROWS * COLS);
    c.x = malloc(sizeof(float) * MAX_TOK * COLS);
    c.y = malloc(sizeof(float) * MAX_TOK * ROWS);
    c.xq = malloc(MAX_TOK * COLS);
    c.hq = malloc(MAX_TOK * COLS);
    c.xd = malloc(sizeof(float) * MAX_TOK * COLS / 32);
    c.hd = malloc(sizeof(float) * MAX_TOK * COLS / 32);
    CHECK(src && c.wf && c.w && c.x && c.y && c.xq && c.hq && c.xd && c.hd);
    static const struct {
        int n_tok;
        bool matmul;
    } shapes[] = {{1, false}, {3, false}, {8, false}, {40, true}, {8, true}};
    char msg[512];
    for (size_t ti = 0; ti < sizeof gpu_types / sizeof gpu_types[0]; ti++) {
        c.type = gpu_types[ti];
        const quant_traits *q = quant_traits_of(c.type);
        for (int i = 0; i < ROWS * COLS; i++)
            src[i] = rng_float(&seed) * (float)(1 + (i / 32) % 5);
        for (int r = 0; r < ROWS; r++) {
            uint64_t rb;
            CHECK(quant_row_bytes(c.type, COLS, &rb));
            q->from_float(src + r * COLS, c.w + r * rb, COLS);
            q->to_float(c.w + r * rb, c.wf + r * COLS, COLS);
        }
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int n_tok = shapes[si].n_tok;
            for (int i = 0; i < n_tok * COLS; i++)
                c.x[i] = rng_float(&seed) * (i % 97 == 0 ? 8.0f : 1.0f);
            for (int i = 0; i < n_tok * ROWS; i++)
                c.y[i] = NAN; /* every output must be written */
            CHECK_OK(gpu_check_linear(c.type, c.w, ROWS, COLS, c.x, n_tok, shapes[si].matmul, c.y, c.xq, c.xd));
            const char *bad = check_rows(&c, n_tok, shapes[si].matmul, msg, sizeof msg);
            if (bad != NULL)
                FAIL("%s, %s of %d tokens: %s", q->name, shapes[si].matmul ? "matmul" : "matvec", n_tok, bad);
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
