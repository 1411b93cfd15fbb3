/*
 * GPU parity of the attention output + router launch
 * (kernels/cuda/attn_out_router.cu) against the two launches it replaces
 * (the attention output's gk_matvec accumulating into x, then
 * gk_router_topk with the FFN norm) on random layers.  Skips without a
 * CUDA device.
 *
 *   x: the same bits (the same terms in the same order)
 *   the normed row xn: within 1e-6 relative (the norm's sum of squares in
 *     double, in another order: the float scale nearly always the same);
 *     its 8-bit form: values within 1, scales within 1e-6 relative, the
 *     halves' sums within 16
 *   logits: |fused - ref| <= 2e-5 * sum_i |Wr[e][i] * xn[i]| + 1e-6 (the
 *     same terms summed in another order, scaled once at the end; the
 *     router test's bound)
 *   routes: the same experts in the same rank order, except where the two
 *     experts' reference logits are within twice that bound of each other
 *     (a near-tie); weights of equal experts within 1e-5 relative
 */
#include "gpu/gpu.h"
#include "gpu/gpu_check_aor.h"
#include "quant.h"
#include "test.h"
#include "gpu_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float ao_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void ao_fill(float *v, int64_t n, float mul, float add, uint64_t *s)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = add + mul * ao_rand(s);
}

typedef struct ao_bufs {
    uint8_t *wo;
    float *wof, *att, *x, *router, *gain, *wo_bias, *router_bias;
    gpu_aor_out out[2];
} ao_bufs;

static bool ao_alloc(ao_bufs *b, const gpu_aor_check *c)
{
    uint64_t rb = 0;
    quant_row_bytes(c->wo_type, (uint64_t)c->n_att, &rb);
    const size_t fe = sizeof(float) * (size_t)c->n_embd, fx = sizeof(float) * (size_t)c->n_expert;
    b->wo = malloc(rb * (size_t)c->n_embd);
    b->wof = malloc(fe * (size_t)c->n_att);
    b->att = malloc(sizeof(float) * (size_t)c->n_att);
    b->x = malloc(fe), b->gain = malloc(fe), b->wo_bias = malloc(fe);
    b->router = malloc(fe * (size_t)c->n_expert), b->router_bias = malloc(fx);
    bool ok = b->wo && b->wof && b->att && b->x && b->gain && b->wo_bias && b->router && b->router_bias;
    for (int s = 0; s < 2; s++) {
        gpu_aor_out *o = &b->out[s];
        o->x = malloc(fe), o->logits = malloc(fx), o->xn = malloc(fe), o->q = malloc((size_t)c->n_embd);
        o->meta = malloc(16 * (size_t)(c->n_embd / 32));
        o->experts = malloc(sizeof(int32_t) * (size_t)c->n_used), o->weights = malloc(sizeof(float) * (size_t)c->n_used);
        ok = ok && o->x && o->logits && o->xn && o->q && o->meta && o->experts && o->weights;
    }
    return ok;
}

static void ao_free(ao_bufs *b)
{
    free(b->wo), free(b->wof), free(b->att), free(b->x), free(b->gain), free(b->wo_bias), free(b->router),
        free(b->router_bias);
    for (int s = 0; s < 2; s++) {
        gpu_aor_out *o = &b->out[s];
        free(o->x), free(o->logits), free(o->xn), free(o->q), free(o->meta), free(o->experts), free(o->weights);
    }
}

/* Expert e's logit bound from the reference's normed row. */
static double ao_logit_tol(const gpu_aor_check *c, const ao_bufs *b, const float *xn, int e)
{
    double mag = 0;
    for (int64_t i = 0; i < c->n_embd; i++)
        mag += fabs((double)b->router[e * c->n_embd + i] * xn[i]);
    return 2e-5 * mag + 1e-6;
}

static int ao_compare(const gpu_aor_check *c, const ao_bufs *b)
{
    const gpu_aor_out *r = &b->out[0], *f = &b->out[1];
    int bad = 0;
    bad += memcmp(r->x, f->x, sizeof(float) * (size_t)c->n_embd) != 0;
    for (int64_t i = 0; i < c->n_embd; i++)
        bad += !(fabsf(f->xn[i] - r->xn[i]) <= 1e-6f * fabsf(r->xn[i])) + (abs(f->q[i] - r->q[i]) > 1);
    for (int64_t k = 0; k < c->n_embd / 32; k++) {
        const int32_t *mr = r->meta + 4 * k, *mf = f->meta + 4 * k;
        float dr, df;
        memcpy(&dr, &mr[0], sizeof dr);
        memcpy(&df, &mf[0], sizeof df);
        bad += !(fabsf(df - dr) <= 1e-6f * fabsf(dr)) + (abs(mf[1] - mr[1]) > 16) + (abs(mf[2] - mr[2]) > 16);
    }
    for (int e = 0; e < c->n_expert; e++)
        bad += !(fabs((double)f->logits[e] - r->logits[e]) <= ao_logit_tol(c, b, r->xn, e));
    for (int k = 0; k < c->n_used; k++) {
        const int er = r->experts[k], ef = f->experts[k];
        if (er < 0 || ef < 0 || er >= c->n_expert || ef >= c->n_expert) {
            bad++;
            continue;
        }
        if (er == ef)
            bad += !(fabsf(f->weights[k] - r->weights[k]) <= 1e-5f * fabsf(r->weights[k]) + 1e-7f);
        else /* a near-tie: both within twice the bound */
            bad += !(fabs((double)r->logits[er] - r->logits[ef]) <=
                     2 * fmax(ao_logit_tol(c, b, r->xn, er), ao_logit_tol(c, b, r->xn, ef)));
    }
    return bad;
}

TEST(cuda_attn_out_router_matches_the_two_launches)
{
    REQUIRE_GPU();
    const gpu_aor_check cases[] = {
        /* Qwen3-30B-A3B's decode layer (Q4_K_M's attention output) */
        {.wo_type = QT_Q4_K, .n_embd = 2048, .n_att = 4096, .n_expert = 128, .n_used = 8, .renorm = true,
         .scale = 1.0f, .eps = 1e-6f},
        {.wo_type = QT_Q6_K, .n_embd = 1024, .n_att = 512, .n_expert = 256, .n_used = 8, .sigmoid = true,
         .renorm = true, .scale = 2.5f, .eps = 1e-5f},
        {.wo_type = QT_Q8_0, .n_embd = 96, .n_att = 64, .n_expert = 61, .n_used = 4, .scale = 1.0f, .eps = 1e-6f},
        {.wo_type = QT_Q5_K, .n_embd = 32, .n_att = 256, .n_expert = 8, .n_used = 2, .renorm = true, .scale = 1.0f,
         .eps = 1e-6f},
    };
    uint64_t seed = 0x51D3A0C5E11F00D5ull;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const gpu_aor_check *c = &cases[ci];
        ao_bufs b = {0};
        CHECK(ao_alloc(&b, c));
        uint64_t rb = 0;
        quant_row_bytes(c->wo_type, (uint64_t)c->n_att, &rb);
        ao_fill(b.wof, c->n_embd * c->n_att, 0.05f, 0.0f, &seed);
        for (int64_t r = 0; r < c->n_embd; r++)
            quant_traits_of(c->wo_type)->from_float(b.wof + r * c->n_att, b.wo + r * rb, c->n_att);
        ao_fill(b.att, c->n_att, 1.0f, 0.0f, &seed);
        ao_fill(b.x, c->n_embd, 1.0f, 0.0f, &seed);
        ao_fill(b.router, c->n_embd * c->n_expert, 0.05f, 0.0f, &seed);
        ao_fill(b.gain, c->n_embd, 0.5f, 1.0f, &seed);
        ao_fill(b.wo_bias, c->n_embd, 0.1f, 0.0f, &seed);
        ao_fill(b.router_bias, c->n_expert, 0.1f, 0.0f, &seed);
        const bool biased = ci % 2 == 1;
        const gpu_aor_in in = {.wo = b.wo, .att = b.att, .x = b.x, .router = b.router, .gain = b.gain,
                               .wo_bias = biased ? b.wo_bias : NULL, .router_bias = biased ? b.router_bias : NULL};
        bool fits = false;
        CHECK_OK(gpu_check_attn_out_router(c, &in, &b.out[0], &b.out[1], &fits));
        if (!fits) /* a device without thread-block clusters: the two launches only */
            printf("  case %zu: the device takes no clusters, not compared\n", ci);
        const int bad = fits ? ao_compare(c, &b) : 0;
        if (bad != 0)
            printf("  case %zu (type %u, %lld x %lld, %d experts): %d mismatches\n", ci, c->wo_type,
                   (long long)c->n_embd, (long long)c->n_att, c->n_expert, bad);
        CHECK_EQ_INT(bad, 0);
        ao_free(&b);
    }
}
