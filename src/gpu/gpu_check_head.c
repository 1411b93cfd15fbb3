/*
 * gpu_check_head.c — the kernels of a decode step's fixed costs run once
 * over host data for their parity tests (gpu_check_fused.h): the output
 * head (matvec_head.cu), alone or with the output norm folded in, and the
 * embedding with the first layer's norm (ops.cu); each next to the
 * launches it replaces, in the same run.  gpu_check_run carves, copies,
 * launches and copies back.
 */
#include "gpu_check_fused.h"

#include "gpu_internal.h"

#include "../quant.h"

/* --- the head */

enum { HD_W, HD_X, HD_GAIN, HD_XN, HD_Q, HD_META, HD_Y_REF, HD_Y, HD_NY, HD_NQ, HD_NMETA, HD_N };

typedef struct head_ctx {
    gk_mat w;
    float eps;
    bool norm;
} head_ctx;

/* Without norm: gk_quantize_rows then the head.  With: gk_rmsnorm then
 * gk_matvec (y_ref), and the head given the raw row (y). */
static int launch_head(const void *ctx, const gpu_check_buf *b)
{
    const head_ctx *c = ctx;
    gk_mat w = c->w;
    w.data = b[HD_W].dev;
    const int64_t n = w.n_cols;
    const gk_act x = {.f = b[HD_X].dev, .q = b[HD_Q].dev, .meta = b[HD_META].dev, .n = n};
    const gk_out out = {.y = b[HD_Y].dev, .y_stride = w.n_rows};
    if (!c->norm) {
        const int e = gk_quantize_rows(0, x.f, 1, n, b[HD_Q].dev, b[HD_META].dev);
        return e == 0 ? gk_matvec_head(0, &w, &x, &out, NULL) : e;
    }
    const gk_act xn = {.f = b[HD_XN].dev, .q = b[HD_Q].dev, .meta = b[HD_META].dev, .n = n};
    const gk_rows one = {.n_tok = 1};
    const gk_out ref = {.y = b[HD_Y_REF].dev, .y_stride = w.n_rows};
    const gk_norm_out norm = {.gain = b[HD_GAIN].dev, .eps = c->eps, .y = b[HD_NY].dev, .q = b[HD_NQ].dev,
                              .meta = b[HD_NMETA].dev};
    int e = gk_rmsnorm(0, x.f, norm.gain, c->eps, 1, n, b[HD_XN].dev, b[HD_Q].dev, b[HD_META].dev);
    if (e == 0)
        e = gk_matvec(0, &w, NULL, &xn, &one, &ref);
    return e == 0 ? gk_matvec_head(0, &w, &x, &out, &norm) : e;
}

static hydra_status check_head(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                               const float *gain, float eps, float *y, float *y_ref)
{
    uint64_t rb = 0;
    if (!quant_row_bytes(type, (uint64_t)n_cols, &rb) || n_rows < 1 || n_cols % 32 != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_matvec_head: %lld x %lld of type %u", (long long)n_rows,
                          (long long)n_cols, type);
    const head_ctx c = {.w = {.type = type, .n_rows = n_rows, .n_cols = n_cols, .row_bytes = (size_t)rb,
                              .mat_bytes = (size_t)rb * (size_t)n_rows},
                        .eps = eps, .norm = gain != NULL};
    const size_t vec = sizeof(float) * (size_t)n_cols, meta = 16 * (size_t)(n_cols / 32 + 1);
    gpu_check_buf b[HD_N] = {
        [HD_W] = {.in = w, .bytes = (size_t)rb * (size_t)n_rows},
        [HD_X] = {.in = x, .bytes = vec},
        [HD_GAIN] = {.in = gain, .bytes = vec},
        [HD_XN] = {.bytes = vec},
        [HD_Q] = {.bytes = (size_t)n_cols},
        [HD_META] = {.bytes = meta},
        [HD_Y_REF] = {.out = y_ref, .bytes = sizeof(float) * (size_t)n_rows},
        [HD_Y] = {.out = y, .bytes = sizeof(float) * (size_t)n_rows},
        [HD_NY] = {.bytes = vec},
        [HD_NQ] = {.bytes = (size_t)n_cols},
        [HD_NMETA] = {.bytes = meta},
    };
    return gpu_check_run(b, HD_N, launch_head, &c, "output head matvec check");
}

hydra_status gpu_check_matvec_head(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                   float *y)
{
    return check_head(type, w, n_rows, n_cols, x, NULL, 0.0f, y, NULL);
}

hydra_status gpu_check_head_norm(uint32_t type, const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                                 const float *gain, float eps, float *y, float *y_ref)
{
    if (gain == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_head_norm: no gain");
    return check_head(type, w, n_rows, n_cols, x, gain, eps, y, y_ref);
}

/* --- the embedding with the first norm */

enum { EN_TABLE, EN_TOKENS, EN_GAIN, EN_REF, EN_FUSED = EN_REF + 4, EN_N = EN_FUSED + 4 };
enum { EN_X, EN_Y, EN_Q, EN_META }; /* after EN_REF and EN_FUSED */

typedef struct embed_ctx {
    gk_mat table;
    int n_tok;
    float eps;
} embed_ctx;

static int launch_embed(const void *ctx, const gpu_check_buf *b)
{
    const embed_ctx *c = ctx;
    gk_mat t = c->table;
    t.data = b[EN_TABLE].dev;
    const int32_t *tokens = b[EN_TOKENS].dev;
    const gpu_check_buf *r = b + EN_REF, *f = b + EN_FUSED;
    int e = gk_embed(0, &t, tokens, c->n_tok, r[EN_X].dev);
    if (e == 0)
        e = gk_rmsnorm(0, r[EN_X].dev, b[EN_GAIN].dev, c->eps, c->n_tok, t.n_cols, r[EN_Y].dev, r[EN_Q].dev,
                       r[EN_META].dev);
    const gk_norm_out norm = {.gain = b[EN_GAIN].dev, .eps = c->eps, .y = f[EN_Y].dev, .q = f[EN_Q].dev,
                              .meta = f[EN_META].dev};
    return e == 0 ? gk_embed_norm(0, &t, tokens, c->n_tok, f[EN_X].dev, &norm) : e;
}

static void embed_outs(gpu_check_buf *b, const gpu_embed_norm_out *o, int64_t values)
{
    b[EN_X] = (gpu_check_buf){.out = o->x, .bytes = sizeof(float) * (size_t)values};
    b[EN_Y] = (gpu_check_buf){.out = o->y, .bytes = sizeof(float) * (size_t)values};
    b[EN_Q] = (gpu_check_buf){.out = o->q, .bytes = (size_t)values};
    b[EN_META] = (gpu_check_buf){.out = o->meta, .bytes = 16 * (size_t)(values / 32)};
}

hydra_status gpu_check_embed_norm(uint32_t type, const void *table, int64_t n_rows, int64_t n_cols,
                                  const int32_t *tokens, int n_tok, const float *gain, float eps,
                                  const gpu_embed_norm_out *ref, const gpu_embed_norm_out *fused)
{
    uint64_t rb = 0;
    if (!quant_row_bytes(type, (uint64_t)n_cols, &rb) || n_rows < 1 || n_tok < 1 || n_cols % 32 != 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_check_embed_norm: %lld x %lld of type %u, %d tokens",
                          (long long)n_rows, (long long)n_cols, type, n_tok);
    const embed_ctx c = {.table = {.type = type, .n_rows = n_rows, .n_cols = n_cols, .row_bytes = (size_t)rb,
                                   .mat_bytes = (size_t)rb * (size_t)n_rows},
                         .n_tok = n_tok, .eps = eps};
    gpu_check_buf b[EN_N] = {
        [EN_TABLE] = {.in = table, .bytes = (size_t)rb * (size_t)n_rows},
        [EN_TOKENS] = {.in = tokens, .bytes = sizeof(int32_t) * (size_t)n_tok},
        [EN_GAIN] = {.in = gain, .bytes = sizeof(float) * (size_t)n_cols},
    };
    embed_outs(b + EN_REF, ref, n_tok * n_cols);
    embed_outs(b + EN_FUSED, fused, n_tok * n_cols);
    return gpu_check_run(b, EN_N, launch_embed, &c, "embedding + norm check");
}
