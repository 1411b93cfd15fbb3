/*
 * GPU parity of gk_moe_down_combine (one decode token's experts down
 * projection, combine and next-layer norm in one launch,
 * kernels/cuda/moe_decode.cu) against the two launches it replaces
 * (gk_matvec_staged, gk_moe_combine), on random layers: x after the block
 * must be bit-identical (the kernel keeps every sum's order); the next
 * layer's input xn within a relative 4e-7 (its sum of squares is added in
 * another order: the scale may differ in its last bit, 1.2e-7 relative),
 * its 8-bit form within one step.  Skips without a CUDA device of compute
 * capability 9.0 or later.
 */
#include "gpu/gpu_check_moe.h"
#include "gpu_test.h"
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t md_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float md_float(uint64_t *s)
{
    return (float)((double)(md_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

enum { MD_POOL = 61 }; /* distinct rows a matrix stack draws from: quantising 128 experts' rows takes seconds */

/* n_mats matrices of n_rows rows of n_cols in type, each row one of
 * MD_POOL rows quantised by the reference quantiser, picked at random. */
static uint8_t *md_stack(uint32_t type, int n_mats, int64_t n_rows, int64_t n_cols, float spread, uint64_t *seed)
{
    uint64_t rb = 0;
    quant_row_bytes(type, (uint64_t)n_cols, &rb);
    uint8_t *pool = malloc(rb * MD_POOL), *w = malloc(rb * (size_t)(n_mats * n_rows));
    float *src = malloc(sizeof(float) * (size_t)n_cols);
    for (int p = 0; p < MD_POOL; p++) {
        for (int64_t i = 0; i < n_cols; i++)
            src[i] = md_float(seed) * spread * (float)(1 + (i / 32) % 5);
        quant_traits_of(type)->from_float(src, pool + p * rb, n_cols);
    }
    for (int64_t r = 0; r < n_mats * n_rows; r++)
        memcpy(w + r * rb, pool + (md_next(seed) % MD_POOL) * rb, rb);
    free(pool);
    free(src);
    return w;
}

typedef struct md_case {
    uint32_t down;
    int n_expert, n_used;
    int64_t n_embd, ff;
    bool next_norm;
} md_case;

static const md_case md_cases[] = {
    {QT_Q6_K, 128, 8, 2048, 768, true}, /* Qwen3-30B-A3B, Q4_K_M: Q6_K and Q4_K down layers */
    {QT_Q4_K, 128, 8, 2048, 768, true},
    {QT_Q8_0, 8, 1, 64, 32, true},
    {QT_Q6_K, 60, 4, 256, 512, true},
    {QT_Q6_K, 32, 6, 512, 256, false},
    {QT_Q8_0, 17, 3, 96, 96, true},
    {QT_Q4_K, 256, 8, 1024, 256, true},
    {QT_Q5_K, 100, 5, 768, 512, true},
    {QT_Q8_0, 32, 8, 2048, 1536, false},
    {QT_Q5_K, 9, 7, 256, 256, true},
};

typedef struct md_way {
    gpu_moe_result r;
} md_way;

static void md_way_alloc(md_way *w, const md_case *c)
{
    w->r = (gpu_moe_result){.x = malloc(sizeof(float) * (size_t)c->n_embd),
                            .xn = malloc(sizeof(float) * (size_t)c->n_embd),
                            .xd = malloc(sizeof(float) * (size_t)(c->n_embd / 32)),
                            .xq = malloc((size_t)c->n_embd)};
}

static void md_way_free(md_way *w)
{
    free(w->r.x);
    free(w->r.xn);
    free(w->r.xd);
    free(w->r.xq);
}

static bool md_close(float a, float b, float rel)
{
    return fabsf(a - b) <= rel * fmaxf(fabsf(a), fabsf(b)) || a == b;
}

/* Compares the two ways of case ci; says what differed. */
static int md_compare(int ci, const md_case *c, const md_way *s, const md_way *o)
{
    int fails = 0;
    for (int64_t i = 0; i < c->n_embd; i++)
        if (memcmp(&s->r.x[i], &o->r.x[i], sizeof(float)) != 0) {
            fprintf(stderr, "  case %d: x[%lld] %.9g (two launches) vs %.9g (one)\n", ci, (long long)i, s->r.x[i],
                    o->r.x[i]);
            fails++;
            break;
        }
    for (int64_t i = 0; c->next_norm && i < c->n_embd; i++) {
        const bool ok = md_close(s->r.xn[i], o->r.xn[i], 4e-7f) && abs(s->r.xq[i] - o->r.xq[i]) <= 1 &&
                        md_close(s->r.xd[i / 32], o->r.xd[i / 32], 4e-7f);
        if (!ok) {
            fprintf(stderr, "  case %d: xn[%lld] %.9g q %d d %.9g vs %.9g q %d d %.9g\n", ci, (long long)i,
                    s->r.xn[i], s->r.xq[i], s->r.xd[i / 32], o->r.xn[i], o->r.xq[i], o->r.xd[i / 32]);
            fails++;
            break;
        }
    }
    return fails;
}

static float *md_vec(int64_t n, float base, float spread, uint64_t *seed)
{
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        v[i] = base + spread * md_float(seed);
    return v;
}

/* n_used distinct experts in random order, and softmax-like weights. */
static void md_routes(const md_case *c, uint64_t *seed, int32_t *experts, float *weights)
{
    for (int k = 0; k < c->n_used; k++) {
        bool fresh;
        do {
            experts[k] = (int32_t)(md_next(seed) % (uint64_t)c->n_expert);
            fresh = true;
            for (int j = 0; j < k; j++)
                fresh = fresh && experts[j] != experts[k];
        } while (!fresh);
        weights[k] = 0.05f + 0.5f * (1.0f + md_float(seed));
    }
}

static int md_run_case(int ci, const md_case *c, hydra_status *st)
{
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(ci + 1) * 0xD1B54A32D192ED03ull;
    uint8_t *down = md_stack(c->down, c->n_expert, c->n_embd, c->ff, 0.1f, &seed);
    float *h = md_vec(c->n_used * c->ff, 0.0f, 1.0f, &seed), *x = md_vec(c->n_embd, 0.0f, 2.0f, &seed);
    float *ng = md_vec(c->n_embd, 1.0f, 0.5f, &seed);
    int32_t experts[8];
    float weights[8];
    md_routes(c, &seed, experts, weights);
    const gpu_moe_check mc = {.down_type = c->down, .n_expert = c->n_expert, .n_used = c->n_used,
                              .n_embd = c->n_embd, .ff = c->ff, .experts = experts, .weights = weights,
                              .eps = 1e-6f, .next_gain = c->next_norm ? ng : NULL};
    md_way s, o;
    md_way_alloc(&s, c);
    md_way_alloc(&o, c);
    *st = gpu_check_moe_down_combine(&mc, down, h, x, &s.r, &o.r);
    const int fails = *st == HYDRA_OK ? md_compare(ci, c, &s, &o) : 0;
    md_way_free(&s);
    md_way_free(&o);
    free(down), free(h), free(x), free(ng);
    return fails;
}

TEST(cuda_moe_down_combine_one_launch_matches_two)
{
    REQUIRE_GPU();
    int fails = 0;
    for (int ci = 0; ci < (int)(sizeof md_cases / sizeof md_cases[0]); ci++) {
        hydra_status st = HYDRA_OK;
        const int f = md_run_case(ci, &md_cases[ci], &st);
        if (st == HYDRA_ERR_UNSUPPORTED && ci == 0)
            SKIP("gk_moe_down_combine needs compute capability 9.0 or later: %s", hydra_last_error());
        CHECK_OK(st);
        fails += f;
    }
    CHECK_EQ_INT(fails, 0);
}
