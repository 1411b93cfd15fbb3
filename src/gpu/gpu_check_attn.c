/*
 * gpu_check_attn.c — gpu_check_attn_layer (gpu_check_attn.h): the
 * buffers of both ways carved from one zeroed allocation (gpu_check_run),
 * so the fused launch's barrier words and both attention scratches'
 * counters start at zero; each way has its own Q/K/V rows, cache,
 * scratch, output and x, the inputs are shared.
 */
#include "gpu_check_attn.h"

#include "gpu_internal.h"

#include "../quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Shared inputs, then one set of buffers per way (ref, fused). */
enum { AC_WQ, AC_WK, AC_WV, AC_WO, AC_XN, AC_XQ, AC_XMETA, AC_QN, AC_KN, AC_STEP, AC_BAR, AC_SHARED };
enum { AW_Q, AW_K, AW_V, AW_KC, AW_VC, AW_SCRATCH, AW_OUT, AW_OUT_Q, AW_OUT_META, AW_X, AW_N };
enum { AC_N = AC_SHARED + 2 * AW_N };

static int way(int which, int buf)
{
    return AC_SHARED + which * AW_N + buf;
}

typedef struct ac_ctx {
    const gpu_attn_layer_check *c;
    gk_mat w[4];
} ac_ctx;

static gk_mat mat_of(uint32_t type, int64_t n_rows, int64_t n_cols)
{
    uint64_t rb = 0;
    quant_row_bytes(type, (uint64_t)n_cols, &rb);
    return (gk_mat){.type = type, .n_rows = n_rows, .n_cols = n_cols, .row_bytes = (size_t)rb,
                    .mat_bytes = (size_t)rb * (size_t)n_rows};
}

/* The layer's description over way `which`'s buffers. */
static gk_attn_layer layer_of(const ac_ctx *x, const gpu_check_buf *b, int which)
{
    const gpu_attn_layer_check *c = x->c;
    const int64_t row = (int64_t)c->n_head_kv * c->head_dim;
    gk_attn_layer l = {.wq = x->w[0], .wk = x->w[1], .wv = x->w[2], .wo = x->w[3]};
    l.wq.data = b[AC_WQ].dev, l.wk.data = b[AC_WK].dev, l.wv.data = b[AC_WV].dev, l.wo.data = b[AC_WO].dev;
    l.xn = (gk_act){.f = b[AC_XN].dev, .q = b[AC_XQ].dev, .meta = b[AC_XMETA].dev, .n = c->n_embd};
    l.attn = (gk_attn){.q = b[way(which, AW_Q)].dev, .k = b[way(which, AW_KC)].dev, .v = b[way(which, AW_VC)].dev,
                       .kv_f16 = c->kv_f16, .k_row = row, .v_row = row, .n_head = c->n_head,
                       .n_head_kv = c->n_head_kv, .head_dim_k = c->head_dim, .head_dim_v = c->head_dim,
                       .scale = 1.0f / sqrtf((float)c->head_dim), .n_tok = 1, .max_kv = c->n_ctx,
                       .scratch = b[way(which, AW_SCRATCH)].dev, .out = b[way(which, AW_OUT)].dev,
                       .out_q = b[way(which, AW_OUT_Q)].dev, .out_meta = b[way(which, AW_OUT_META)].dev};
    l.rope = (gk_rope){.q = b[way(which, AW_Q)].dev, .k = b[way(which, AW_K)].dev, .v = b[way(which, AW_V)].dev,
                       .q_norm = c->q_norm != NULL ? b[AC_QN].dev : NULL,
                       .k_norm = c->k_norm != NULL ? b[AC_KN].dev : NULL, .eps = c->eps, .n_head = c->n_head,
                       .n_head_kv = c->n_head_kv, .head_dim_k = c->head_dim, .head_dim_v = c->head_dim,
                       .n_rot = c->n_rot, .neox = c->neox,
                       .theta_scale = powf(c->theta_base, -2.0f / (float)c->n_rot), .freq_scale = 1.0f,
                       .attn_factor = 1.0f, .k_cache = b[way(which, AW_KC)].dev,
                       .v_cache = b[way(which, AW_VC)].dev, .kv_f16 = c->kv_f16, .n_tok = 1};
    l.x = b[way(which, AW_X)].dev;
    l.bar = b[AC_BAR].dev;
    return l;
}

/* Q, K and V by gk_matvec, one launch each. */
static int launch_qkv(const gk_attn_layer *l)
{
    const gk_rows one = {.n_tok = 1};
    const gk_mat *w[3] = {&l->wq, &l->wk, &l->wv};
    float *y[3] = {l->rope.q, l->rope.k, (float *)l->rope.v};
    int e = 0;
    for (int i = 0; i < 3 && e == 0; i++) {
        const gk_out out = {.y = y[i], .y_stride = w[i]->n_rows};
        e = gk_matvec(0, w[i], NULL, &l->xn, &one, &out);
    }
    return e;
}

/* The three launches of gpu_forward.c's attention() for one token. */
static int launch_ref(const gk_attn_layer *l, const gk_step *step)
{
    int e = launch_qkv(l);
    if (e == 0)
        e = gk_attention_rope(0, &l->attn, &l->rope, step);
    const gk_rows one = {.n_tok = 1};
    const gk_act att = {.f = l->attn.out, .q = l->attn.out_q, .meta = l->attn.out_meta, .n = l->wo.n_cols};
    const gk_out ox = {.y = l->x, .y_stride = l->wo.n_rows, .accumulate = true};
    return e == 0 ? gk_matvec(0, &l->wo, NULL, &att, &one, &ox) : e;
}

static int launch_both(const void *ctx, const gpu_check_buf *b)
{
    const ac_ctx *x = ctx;
    const gk_attn_layer ref = layer_of(x, b, 0);
    gk_attn_layer fused = layer_of(x, b, 1);
    fused.qkv = x->c->qkv;
    if (!gk_attn_layer_fits(&fused))
        return (int)gpuErrorInvalidValue;
    int e = gk_quantize_rows(0, ref.xn.f, 1, ref.xn.n, (int8_t *)ref.xn.q, (int32_t *)ref.xn.meta);
    if (e == 0)
        e = launch_ref(&ref, b[AC_STEP].dev);
    if (e == 0 && !fused.qkv)
        e = launch_qkv(&fused);
    return e == 0 ? gk_attn_layer_run(0, &fused, b[AC_STEP].dev) : e;
}

hydra_status gpu_check_attn_layer(const gpu_attn_layer_check *c, const void *const w[4], const float *xn,
                                  const float *x_init, float *x_ref, float *x_fused, float *att_ref,
                                  float *att_fused, bool *same_cache)
{
    const int64_t nq = (int64_t)c->n_head * c->head_dim, nk = (int64_t)c->n_head_kv * c->head_dim;
    ac_ctx x = {.c = c,
                .w = {mat_of(c->type_q, nq, c->n_embd), mat_of(c->type_q, nk, c->n_embd),
                      mat_of(c->type_v, nk, c->n_embd), mat_of(c->type_o, c->n_embd, nq)}};
    if (c->pos0 < 0 || c->pos0 >= c->n_ctx || c->head_dim % 32 != 0 || c->n_embd % 256 != 0 ||
        x.w[0].row_bytes == 0 || x.w[2].row_bytes == 0 || x.w[3].row_bytes == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_attn_layer: position %d of %d, head size %d, %d wide",
                          c->pos0, c->n_ctx, c->head_dim, c->n_embd);
    const size_t cache = (size_t)c->n_ctx * (size_t)nk * (c->kv_f16 ? 2 : 4);
    const size_t scratch = sizeof(float) * gk_attention_scratch(1, c->n_head, c->n_head_kv, c->head_dim, c->n_ctx);
    const gk_step step = {.pos0 = c->pos0, .n_tok = 1};
    uint8_t *caches = malloc(4 * cache);
    if (caches == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gpu_check_attn_layer: %zu cache bytes", cache);
    const uint8_t *init_k = c->cache_init, *init_v = init_k != NULL ? init_k + cache : NULL;
    gpu_check_buf b[AC_N] = {
        [AC_XN] = {.in = xn, .bytes = sizeof(float) * (size_t)c->n_embd},
        [AC_XQ] = {.bytes = (size_t)c->n_embd},
        [AC_XMETA] = {.bytes = 16 * (size_t)(c->n_embd / 32)},
        [AC_QN] = {.in = c->q_norm, .bytes = sizeof(float) * (size_t)c->head_dim},
        [AC_KN] = {.in = c->k_norm, .bytes = sizeof(float) * (size_t)c->head_dim},
        [AC_STEP] = {.in = &step, .bytes = sizeof step},
        [AC_BAR] = {.bytes = 2 * sizeof(unsigned int)},
    };
    for (int i = 0; i < 4; i++)
        b[AC_WQ + i] = (gpu_check_buf){.in = w[i], .bytes = x.w[i].mat_bytes};
    float *x_out[2] = {x_ref, x_fused}, *att_out[2] = {att_ref, att_fused};
    for (int k = 0; k < 2; k++) {
        b[way(k, AW_Q)].bytes = sizeof(float) * (size_t)nq;
        b[way(k, AW_K)].bytes = b[way(k, AW_V)].bytes = sizeof(float) * (size_t)nk;
        b[way(k, AW_KC)] = (gpu_check_buf){.in = init_k, .out = caches + 2 * k * cache, .bytes = cache};
        b[way(k, AW_VC)] = (gpu_check_buf){.in = init_v, .out = caches + (2 * k + 1) * cache, .bytes = cache};
        b[way(k, AW_SCRATCH)].bytes = scratch;
        b[way(k, AW_OUT)] = (gpu_check_buf){.out = att_out[k], .bytes = sizeof(float) * (size_t)nq};
        b[way(k, AW_OUT_Q)].bytes = (size_t)nq;
        b[way(k, AW_OUT_META)].bytes = 16 * (size_t)(nq / 32);
        b[way(k, AW_X)] = (gpu_check_buf){.in = x_init, .out = x_out[k], .bytes = sizeof(float) * (size_t)c->n_embd};
    }
    const hydra_status st = gpu_check_run(b, AC_N, launch_both, &x, "attention layer check");
    if (st == HYDRA_OK)
        *same_cache = memcmp(caches, caches + 2 * cache, 2 * cache) == 0;
    free(caches);
    return st;
}
