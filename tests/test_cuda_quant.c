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
