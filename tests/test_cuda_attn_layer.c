/*
 * GPU parity of the one-launch attention layer (attn_layer.cu) with the
 * three launches it replaces (gk_matvec for Q, K, V; gk_attention_rope;
 * gk_matvec adding the output projection into x): the same code in the
 * same order, so the K/V cache, the attention output and x must agree bit
 * for bit; both with the Q/K/V rows in the launch and after a Q/K/V
 * launch (case 2 i and 2 i + 1 of the table's row i).  Random layers over GQA ratios 1/4/8, head sizes 64/128,
 * positions at and beside the attention's chunk edges up to a 2048
 * context, Q4_K/Q5_K/Q6_K/Q8_0 weights with a V of another type, with
 * and without QK-norm, NEOX and normal rope, F16 and F32 caches.  Skips
 * without a CUDA device.
 */
#include "gpu/gpu.h"
#include "gpu/gpu_check_attn.h"
#include "quant.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static uint64_t al_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float al_float(uint64_t *s)
{
    return (float)((double)(al_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* n_rows rows of n_cols random values in type's blocks; NULL on failure. */
static void *al_weights(uint32_t type, int64_t n_rows, int64_t n_cols, uint64_t *seed)
{
    uint64_t rb = 0;
    float *src = malloc(sizeof(float) * (size_t)n_cols);
    uint8_t *w = quant_row_bytes(type, (uint64_t)n_cols, &rb) ? malloc((size_t)rb * (size_t)n_rows) : NULL;
    if (src == NULL || w == NULL) {
        free(src);
        free(w);
        return NULL;
    }
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n_cols; i++)
            src[i] = al_float(seed) * 0.1f * (float)(1 + (i / 32) % 5);
        quant_traits_of(type)->from_float(src, w + r * (int64_t)rb, n_cols);
    }
    free(src);
    return w;
}

/* The earlier positions' K and V rows (n values each side) as the cache
 * holds them. */
static void *al_cache(int64_t n, bool f16, uint64_t *seed)
{
    float *v = malloc(sizeof(float) * (size_t)n);
    if (v == NULL)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        v[i] = al_float(seed) * 2.0f;
    if (!f16)
        return v;
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    if (h != NULL)
        quant_traits_of(QT_F16)->from_float(v, h, n);
    free(v);
    return h;
}

/* The first index where a and b differ in their bits, or -1. */
static int64_t al_first_diff(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            return i;
    return -1;
}

/* Host buffers of one case: the weights, xn, x's start, both ways' x
 * (n_embd floats each) and attention outputs (ar, af), the norm gains. */
typedef struct al_bufs {
    void *w[4];
    float *xn, *x0, *xr, *xf, *ar, *af;
    float gq[128], gk[128];
} al_bufs;

/* Both ways over case c's random layer; FAILs name what differed. */
static void al_compare(test_ctx *t_, size_t ci, const gpu_attn_layer_check *c, al_bufs *a, uint64_t *seed)
{
    const int64_t nq = (int64_t)c->n_head * c->head_dim;
    for (int i = 0; i < c->n_embd; i++) {
        a->xn[i] = al_float(seed) * 2.0f;
        a->x0[i] = al_float(seed);
    }
    for (int i = 0; i < c->head_dim; i++) {
        a->gq[i] = 0.5f + al_float(seed);
        a->gk[i] = 0.5f + al_float(seed);
    }
    gpu_attn_layer_check cc = *c;
    cc.q_norm = c->q_norm != NULL ? a->gq : NULL;
    cc.k_norm = c->k_norm != NULL ? a->gk : NULL;
    bool same_cache = false;
    CHECK_OK(gpu_check_attn_layer(&cc, (const void *const *)a->w, a->xn, a->x0, a->xr, a->xf, a->ar, a->af,
                                  &same_cache));
    if (!same_cache)
        FAIL("case %zu (position %d of %d): the one launch left other cache bits", ci, c->pos0, c->n_ctx);
    const int64_t da = al_first_diff(a->ar, a->af, nq), dx = al_first_diff(a->xr, a->xf, c->n_embd);
    if (da >= 0)
        FAIL("case %zu (position %d of %d): attention output %lld: one launch %.9g, three %.9g", ci, c->pos0,
             c->n_ctx, (long long)da, a->af[da], a->ar[da]);
    if (dx >= 0)
        FAIL("case %zu (position %d of %d): x[%lld]: one launch %.9g, three %.9g", ci, c->pos0, c->n_ctx,
             (long long)dx, a->xf[dx], a->xr[dx]);
}

static void al_case(test_ctx *t_, size_t ci, const gpu_attn_layer_check *c, uint64_t *seed)
{
    const int64_t nq = (int64_t)c->n_head * c->head_dim, nk = (int64_t)c->n_head_kv * c->head_dim;
    const size_t embd = sizeof(float) * (size_t)c->n_embd;
    al_bufs *a = calloc(1, sizeof *a);
    gpu_attn_layer_check cc = *c;
    if (a != NULL) {
        a->w[0] = al_weights(c->type_q, nq, c->n_embd, seed);
        a->w[1] = al_weights(c->type_q, nk, c->n_embd, seed);
        a->w[2] = al_weights(c->type_v, nk, c->n_embd, seed);
        a->w[3] = al_weights(c->type_o, c->n_embd, nq, seed);
        a->xn = malloc(embd), a->x0 = malloc(embd), a->xr = malloc(embd), a->xf = malloc(embd);
        a->ar = malloc(sizeof(float) * (size_t)nq), a->af = malloc(sizeof(float) * (size_t)nq);
        cc.cache_init = c->cache_init != NULL ? al_cache(2 * (int64_t)c->n_ctx * nk, c->kv_f16, seed) : NULL;
    }
    if (a != NULL && a->w[0] && a->w[1] && a->w[2] && a->w[3] && a->xn && a->x0 && a->xr && a->xf && a->ar &&
        a->af && (c->cache_init == NULL || cc.cache_init != NULL))
        al_compare(t_, ci, &cc, a, seed);
    else
        test_failf(t_, __FILE__, __LINE__, "case %zu: out of memory", ci);
    if (a != NULL) {
        for (int i = 0; i < 4; i++)
            free(a->w[i]);
        free(a->xn), free(a->x0), free(a->xr), free(a->xf), free(a->ar), free(a->af);
    }
    free((void *)cc.cache_init);
    free(a);
}

TEST(cuda_attn_layer_equals_three_launches)
{
    const char *why;
    if (!gpu_available(&why))
        SKIP("%s", why);
    static const float on = 1.0f; /* a non-NULL marker: the case has that norm (al_case makes the gains) */
    static const char init = 1;   /* likewise: the cache has earlier rows */
    const gpu_attn_layer_check cases[] = {
        /* Qwen3-30B-A3B's shape: GQA 8, 128, QK-norm, NEOX, Q4_K with a Q6_K V */
        {.n_embd = 512, .n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_rot = 128, .pos0 = 0, .n_ctx = 256,
         .type_q = QT_Q4_K, .type_v = QT_Q6_K, .type_o = QT_Q4_K, .neox = true, .kv_f16 = true, .eps = 1e-6f,
         .theta_base = 1e6f, .q_norm = &on, .k_norm = &on},
        {.n_embd = 512, .n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_rot = 128, .pos0 = 63, .n_ctx = 256,
         .type_q = QT_Q4_K, .type_v = QT_Q6_K, .type_o = QT_Q4_K, .neox = true, .kv_f16 = true, .eps = 1e-6f,
         .theta_base = 1e6f, .q_norm = &on, .k_norm = &on, .cache_init = &init},
        {.n_embd = 512, .n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_rot = 128, .pos0 = 64, .n_ctx = 512,
         .type_q = QT_Q4_K, .type_v = QT_Q6_K, .type_o = QT_Q6_K, .neox = true, .kv_f16 = false, .eps = 1e-6f,
         .theta_base = 1e6f, .q_norm = &on, .k_norm = &on, .cache_init = &init},
        {.n_embd = 512, .n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_rot = 128, .pos0 = 2047, .n_ctx = 2048,
         .type_q = QT_Q4_K, .type_v = QT_Q6_K, .type_o = QT_Q4_K, .neox = true, .kv_f16 = true, .eps = 1e-6f,
         .theta_base = 1e6f, .q_norm = &on, .k_norm = &on, .cache_init = &init},
        /* GQA 4, 64, normal rope on half the head, no norm, Q8_0 */
        {.n_embd = 256, .n_head = 16, .n_head_kv = 4, .head_dim = 64, .n_rot = 32, .pos0 = 127, .n_ctx = 2048,
         .type_q = QT_Q8_0, .type_v = QT_Q8_0, .type_o = QT_Q8_0, .neox = false, .kv_f16 = false, .eps = 1e-5f,
         .theta_base = 1e4f, .cache_init = &init},
        {.n_embd = 256, .n_head = 16, .n_head_kv = 4, .head_dim = 64, .n_rot = 64, .pos0 = 1000, .n_ctx = 1024,
         .type_q = QT_Q5_K, .type_v = QT_Q6_K, .type_o = QT_Q5_K, .neox = false, .kv_f16 = true, .eps = 1e-5f,
         .theta_base = 1e4f, .k_norm = &on, .cache_init = &init},
        /* GQA 1 */
        {.n_embd = 512, .n_head = 4, .n_head_kv = 4, .head_dim = 128, .n_rot = 128, .pos0 = 128, .n_ctx = 1024,
         .type_q = QT_Q6_K, .type_v = QT_Q6_K, .type_o = QT_Q6_K, .neox = true, .kv_f16 = false, .eps = 1e-6f,
         .theta_base = 1e6f, .q_norm = &on, .k_norm = &on, .cache_init = &init},
        {.n_embd = 512, .n_head = 4, .n_head_kv = 4, .head_dim = 64, .n_rot = 64, .pos0 = 1, .n_ctx = 64,
         .type_q = QT_Q8_0, .type_v = QT_Q4_K, .type_o = QT_Q8_0, .neox = false, .kv_f16 = true, .eps = 1e-6f,
         .theta_base = 1e4f, .cache_init = &init},
    };
    uint64_t seed = 0xA77E1A7Eull;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int qkv = 1; qkv >= 0; qkv--) { /* the whole layer, and the launch after a Q/K/V launch */
            gpu_attn_layer_check c = cases[ci];
            c.qkv = qkv;
            al_case(t_, 2 * ci + (size_t)(1 - qkv), &c, &seed);
        }
}
