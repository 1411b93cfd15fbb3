/*
 * GPU parity of the fused decode kernels against their unfused
 * definitions, computed here from the CPU reference dequantiser.  Skips
 * without a CUDA device.
 *
 *   router + top-k tail: logits to float rounding; experts and weights as
 *     the selection rule of src/moe.c gives them from those logits.
 */
#include "gpu/gpu.h"
#include "gpu/gpu_check_fused.h"
#include "quant.h"
#include "test.h"

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
    const char *why;
    if (!gpu_available(&why))
        SKIP("%s", why);
    static const gpu_router_check cases[] = {
        {.type = QT_F32, .n_expert = 128, .n_used = 8, .n_cols = 512, .n_tok = 1, .renorm = true, .scale = 1.0f},
        {.type = QT_F32, .n_expert = 60, .n_used = 4, .n_cols = 256, .n_tok = 5, .renorm = false, .scale = 1.0f},
        {.type = QT_F32, .n_expert = 256, .n_used = 8, .n_cols = 256, .n_tok = 8, .sigmoid = true, .renorm = true,
         .scale = 2.5f},
        {.type = QT_BF16, .n_expert = 32, .n_used = 4, .n_cols = 64, .n_tok = 2, .renorm = true, .scale = 1.0f},
        {.type = QT_F16, .n_expert = 8, .n_used = 2, .n_cols = 128, .n_tok = 3, .renorm = true, .scale = 1.0f},
    };
    enum { MAX_E = 256, MAX_C = 512, MAX_T = 8, MAX_K = 8 };
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
