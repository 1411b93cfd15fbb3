/*
 * The CUDA kernels' block decoders, run on the host (they are
 * __host__ __device__), against the CPU reference dequantisers: every
 * 32-value chunk of rows written by the reference quantisers must decode to
 * the same values, and the chunk's integer dot product (the formula the
 * matvec kernel uses, with offsets folded into the half sums) must equal
 * the dot of those values with the activation bytes.  Needs no GPU; skips
 * in builds without CUDA=1.
 */
#include "gpu/gpu.h"
#include "quant.h"
#include "test.h"
#include "gpu_test.h"

#include <math.h>
#include <stdlib.h>

/* The types the GPU decodes with 8-bit activations. */
static const uint32_t gpu_quant_types[] = {QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q8_0, QT_Q2_K, QT_Q3_K,
                                           QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4};

enum { ROW = 1024 };

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

TEST(cuda_quant_host_decoders_match_reference)
{
    float probe[32];
    uint8_t dummy[64] = {0};
    if (!gpu_host_decode_chunk(QT_Q8_0, dummy, 0, probe))
        SKIP("built without CUDA=1: the kernels' decoders are not in this build");
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    float *x = malloc(sizeof(float) * ROW), *ref = malloc(sizeof(float) * ROW);
    uint8_t *row = malloc(ROW * 2);
    CHECK(x && ref && row);
    for (size_t ti = 0; ti < sizeof gpu_quant_types / sizeof gpu_quant_types[0]; ti++) {
        const uint32_t type = gpu_quant_types[ti];
        const quant_traits *q = quant_traits_of(type);
        for (int trial = 0; trial < 4; trial++) {
            /* varied magnitudes per 32 values, so sub-block scales differ */
            for (int i = 0; i < ROW; i++)
                x[i] = rng_float(&seed) * (float)(1 + (i / 32) % 7) * (trial + 1);
            q->from_float(x, row, ROW);
            q->to_float(row, ref, ROW);
            for (int c = 0; c < ROW / 32; c++) {
                float got[32];
                int8_t a[32];
                for (int i = 0; i < 32; i++)
                    a[i] = (int8_t)((int)(rng_next(&seed) % 255) - 127);
                CHECK(gpu_host_decode_chunk(type, row, c, got));
                /* Formats with offsets (q - 32 in Q6_K...) decode as s q + m,
                 * where the reference computes s (q - 32): the two agree to
                 * rounding of the chunk's largest magnitude. */
                float chunk_max = 0;
                for (int i = 0; i < 32; i++)
                    chunk_max = fmaxf(chunk_max, fabsf(ref[32 * c + i]));
                double want_dot = 0, mag = 0;
                for (int i = 0; i < 32; i++) {
                    const float want = ref[32 * c + i];
                    if (fabsf(got[i] - want) > 4e-6f * chunk_max)
                        FAIL("%s chunk %d value %d: GPU decoder %.9g, reference %.9g", q->name, c, i, got[i], want);
                    want_dot += (double)want * a[i];
                    mag += ((double)fabsf(want) + chunk_max) * abs(a[i]);
                }
                float dot;
                CHECK(gpu_host_chunk_dot(type, row, c, a, &dot));
                if (fabs(dot - want_dot) > 1e-5 * mag + 1e-30)
                    FAIL("%s chunk %d: GPU chunk dot %.9g, reference %.9g", q->name, c, dot, want_dot);
            }
        }
    }
    free(x);
    free(ref);
    free(row);
}

/* ---- the lattice and ternary formats (issue 11) ---------------------------
 *
 * Their GPU decoders (kernels/cuda/quant_iq.cuh) promise the CPU's values
 * bit for bit, so these checks compare bits: on the host (no GPU needed)
 * and on the device, on raw random blocks (every grid index, sign and
 * scale pattern, negative d too) and on rows of the reference quantisers.
 * Then the device matvec against the CPU's vec_dot with its Q8_K
 * activations, and against the exact sum over the kernel's own 8-bit
 * activations; the prefill kernel against the float dot. */

static const uint32_t iq_gpu_types[] = {QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S,
                                        QT_IQ1_S,   QT_IQ1_M,  QT_TQ1_0, QT_TQ2_0};
enum { N_IQ_GPU = sizeof iq_gpu_types / sizeof iq_gpu_types[0] };

/* f16 bits of a float in [-0.05, 0.05] by truncation: finite, normal or
 * subnormal, either sign (the test needs valid d, not a rounded one). */
static uint16_t iq_d_bits(uint64_t *s)
{
    const float f = rng_float(s) * 0.05f;
    uint32_t u;
    memcpy(&u, &f, 4);
    const int e = (int)((u >> 23) & 0xFF) - 127 + 15;
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    return e <= 0 ? sign : (uint16_t)(sign | e << 10 | ((u >> 13) & 0x3FF));
}

/* Random bytes with a valid d: at byte 0, except TQ1_0 (52), TQ2_0 (64)
 * and IQ1_M (the top nibbles of its four scale words at 48..55). */
static void iq_fill_raw(uint32_t type, uint8_t *w, int64_t n_blocks, uint64_t *s)
{
    const uint32_t size = quant_traits_of(type)->type_size;
    for (int64_t i = 0; i < n_blocks * (int64_t)size; i++)
        w[i] = (uint8_t)rng_next(s);
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = w + b * size;
        const uint16_t h = iq_d_bits(s);
        if (type == QT_IQ1_M) {
            for (int k = 0; k < 4; k++)
                blk[48 + 2 * k + 1] = (uint8_t)((blk[48 + 2 * k + 1] & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
            continue;
        }
        const int at = type == QT_TQ1_0 ? 52 : type == QT_TQ2_0 ? 64 : 0;
        blk[at] = (uint8_t)h;
        blk[at + 1] = (uint8_t)(h >> 8);
    }
}

/* Rows of n values: raw blocks when raw, else the reference quantiser's
 * rows of values whose magnitude varies per 32. */
static void iq_make_rows(uint32_t type, bool raw, int rows, int n, uint8_t *w, uint64_t *s)
{
    const quant_traits *q = quant_traits_of(type);
    const size_t rb = (size_t)n / q->block_size * q->type_size;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int r = 0; r < rows; r++) {
        if (raw) {
            iq_fill_raw(type, w + r * rb, n / (int)q->block_size, s);
            continue;
        }
        for (int i = 0; i < n; i++)
            x[i] = rng_float(s) * (float)(1 + (i / 32) % 7);
        q->from_float(x, w + r * rb, n);
    }
    free(x);
}

TEST(cuda_iq_host_decoders_bit_exact)
{
    float probe[32];
    uint8_t dummy[64] = {0};
    if (!gpu_host_decode_chunk(QT_Q8_0, dummy, 0, probe))
        SKIP("built without CUDA=1: the kernels' decoders are not in this build");
    enum { N = 2048 };
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    uint8_t *row = malloc(N);
    float *ref = malloc(sizeof(float) * N);
    CHECK(row && ref);
    for (int ti = 0; ti < N_IQ_GPU; ti++) {
        const uint32_t type = iq_gpu_types[ti];
        const char *name = quant_traits_of(type)->name;
        for (int trial = 0; trial < 8; trial++) {
            iq_make_rows(type, trial % 2 == 0, 1, N, row, &seed);
            quant_traits_of(type)->to_float(row, ref, N);
            for (int c = 0; c < N / 32; c++) {
                float got[32];
                int8_t a[32];
                for (int i = 0; i < 32; i++)
                    a[i] = (int8_t)((int)(rng_next(&seed) % 255) - 127);
                CHECK(gpu_host_decode_chunk(type, row, c, got));
                if (memcmp(got, ref + 32 * c, sizeof got) != 0)
                    for (int i = 0; i < 32; i++)
                        if (memcmp(&got[i], &ref[32 * c + i], sizeof(float)) != 0)
                            FAIL("%s trial %d chunk %d value %d: GPU decoder %.9g, CPU to_float %.9g", name, trial,
                                 c, i, got[i], ref[32 * c + i]);
                /* The chunk dot sums integers exactly and applies at most
                 * two scales in float: within a few float roundings. */
                double want = 0, mag = 0;
                for (int i = 0; i < 32; i++) {
                    want += (double)ref[32 * c + i] * a[i];
                    mag += fabs((double)ref[32 * c + i] * a[i]);
                }
                float dot;
                CHECK(gpu_host_chunk_dot(type, row, c, a, &dot));
                if (!(fabs(dot - want) <= 1e-6 * mag))
                    FAIL("%s trial %d chunk %d: GPU chunk dot %.9g, exact %.9g", name, trial, c, dot, want);
            }
        }
    }
    free(row);
    free(ref);
}

TEST(cuda_iq_device_dequant_bit_exact)
{
    REQUIRE_GPU();
    enum { ROWS = 5, N = 768 }; /* an odd row count, 3 super-blocks each */
    uint64_t seed = 0x94D049BB133111EBull;
    uint8_t *w = malloc((size_t)ROWS * N);
    float *ref = malloc(sizeof(float) * ROWS * N), *got = malloc(sizeof(float) * ROWS * N);
    CHECK(w && ref && got);
    for (int ti = 0; ti < N_IQ_GPU; ti++) {
        const uint32_t type = iq_gpu_types[ti];
        for (int raw = 0; raw < 2; raw++) {
            iq_make_rows(type, raw, ROWS, N, w, &seed);
            quant_traits_of(type)->to_float(w, ref, (int64_t)ROWS * N);
            CHECK_OK(gpu_check_dequant(type, w, ROWS, N, got));
            for (int i = 0; i < ROWS * N; i++)
                if (memcmp(&got[i], &ref[i], sizeof(float)) != 0)
                    FAIL("%s (%s rows) value %d: device %.9g, CPU to_float %.9g", quant_traits_of(type)->name,
                         raw ? "raw" : "quantised", i, got[i], ref[i]);
        }
    }
    free(w);
    free(ref);
    free(got);
}

typedef struct iq_case {
    uint32_t type;
    int rows, n, n_tok;
    const uint8_t *w;
    const float *wf, *x;
} iq_case;

/* Checks token t's outputs of a matvec: against the exact sum over the
 * rule's 8-bit activations (float rounding only: 2e-5 sum |w a|), and
 * against the CPU's vec_dot over Q8_K activations, which quantise per 256
 * values instead of 32: each activation then differs by at most half of
 * each format's step, so the bound is sum |w| (step_256 + step_32) / 2,
 * plus the rounding allowance. */
static const char *iq_check_matvec(const iq_case *c, int t, const float *y, char *msg, size_t len)
{
    const quant_traits *q = quant_traits_of(c->type), *q8k = quant_traits_of(QT_Q8_K);
    const size_t rb = (size_t)c->n / q->block_size * q->type_size;
    const float *x = c->x + (size_t)t * c->n;
    int8_t *hq = malloc((size_t)c->n);
    float *hd = malloc(sizeof(float) * (size_t)c->n / 32);
    uint8_t *a8k = malloc((size_t)c->n / q8k->block_size * q8k->type_size);
    float *amax256 = calloc((size_t)c->n / 256, sizeof(float));
    const char *bad = NULL;
    gpu_test_q8_rule(x, c->n, hq, hd);
    q8k->from_float(x, a8k, c->n);
    for (int i = 0; i < c->n; i++)
        amax256[i / 256] = fmaxf(amax256[i / 256], fabsf(x[i]));
    for (int r = 0; r < c->rows && bad == NULL; r++) {
        const float *wr = c->wf + (size_t)r * c->n;
        double want = 0, mag = 0, spread = 0;
        for (int i = 0; i < c->n; i++) {
            want += (double)wr[i] * hq[i] * hd[i / 32];
            mag += fabs((double)wr[i] * x[i]);
            spread += fabs((double)wr[i]) * (amax256[i / 256] / 127.0 + hd[i / 32]) / 2;
        }
        float cpu;
        q->vec_dot(c->n, &cpu, c->w + r * rb, a8k);
        const double got = y[(size_t)t * c->rows + r];
        const double tol_exact = 2e-5 * mag + 1e-6, tol_cpu = spread * 1.01 + 2e-5 * mag + 1e-6;
        if (!(fabs(got - want) <= tol_exact))
            snprintf(msg, len, "row %d: GPU %.9g, exact over its activations %.9g (tolerance %.3g)", r, got, want,
                     tol_exact);
        else if (!(fabs(got - cpu) <= tol_cpu))
            snprintf(msg, len, "row %d: GPU %.9g, CPU vec_dot %.9g (tolerance %.3g)", r, got, cpu, tol_cpu);
        else
            continue;
        bad = msg;
    }
    free(hq);
    free(hd);
    free(a8k);
    free(amax256);
    return bad;
}

/* Checks token t's outputs of a matmul (f16 tiles, mmq.cu): within 2^-10
 * of sum |w x| (both operands rounded to f16) of the float dot. */
static const char *iq_check_matmul(const iq_case *c, int t, const float *y, char *msg, size_t len)
{
    const float *x = c->x + (size_t)t * c->n;
    for (int r = 0; r < c->rows; r++) {
        double want = 0, mag = 0;
        for (int i = 0; i < c->n; i++) {
            const double w = c->wf[(size_t)r * c->n + i];
            want += w * x[i];
            mag += fabs(w * x[i]);
        }
        const double got = y[(size_t)t * c->rows + r], tol = 2e-3 * mag + 1e-6;
        if (!(fabs(got - want) <= tol)) {
            snprintf(msg, len, "token %d row %d: GPU %.9g, float dot %.9g (tolerance %.3g)", t, r, got, want, tol);
            return msg;
        }
    }
    return NULL;
}

TEST(cuda_iq_matvec_and_matmul_match_cpu)
{
    REQUIRE_GPU();
    /* one super-block and many; odd row counts crossing the kernels' 4-row
     * and 64-row tiles; 1 and 3 tokens for decode, 9 and 70 for prefill */
    static const struct {
        int rows, n, n_tok;
        bool matmul;
    } shapes[] = {{1, 256, 1, false}, {7, 256, 3, false}, {67, 2304, 1, false}, {13, 4096, 3, false},
                  {67, 2304, 70, true}, {7, 256, 9, true}};
    enum { MAX_ROWS = 67, MAX_N = 4096, MAX_TOK = 70 };
    uint64_t seed = 0xBF58476D1CE4E5B9ull;
    uint8_t *w = malloc((size_t)MAX_ROWS * MAX_N);
    float *wf = malloc(sizeof(float) * MAX_ROWS * MAX_N), *x = malloc(sizeof(float) * MAX_TOK * MAX_N);
    float *y = malloc(sizeof(float) * MAX_TOK * MAX_ROWS);
    CHECK(w && wf && x && y);
    char msg[512];
    for (int ti = 0; ti < N_IQ_GPU; ti++) {
        const uint32_t type = iq_gpu_types[ti];
        const char *name = quant_traits_of(type)->name;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const iq_case c = {type, shapes[si].rows, shapes[si].n, shapes[si].n_tok, w, wf, x};
            iq_make_rows(type, si % 2 == 1, c.rows, c.n, w, &seed);
            quant_traits_of(type)->to_float(w, wf, (int64_t)c.rows * c.n);
            for (int i = 0; i < c.n_tok * c.n; i++)
                x[i] = rng_float(&seed) * (i % 97 == 0 ? 8.0f : 1.0f);
            for (int i = 0; i < c.n_tok * c.rows; i++)
                y[i] = NAN; /* every output must be written */
            CHECK_OK(gpu_check_linear(type, w, c.rows, c.n, x, c.n_tok, shapes[si].matmul, y, NULL, NULL));
            const char *bad = NULL;
            for (int t = 0; t < c.n_tok && bad == NULL; t++)
                bad = shapes[si].matmul ? iq_check_matmul(&c, t, y, msg, sizeof msg)
                                        : iq_check_matvec(&c, t, y, msg, sizeof msg);
            if (bad != NULL)
                FAIL("%s, %s of %d rows x %d, %d tokens: %s", name, shapes[si].matmul ? "matmul" : "matvec", c.rows,
                     c.n, c.n_tok, bad);
        }
    }
    free(w);
    free(wf);
    free(x);
    free(y);
}
