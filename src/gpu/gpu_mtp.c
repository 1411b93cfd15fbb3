/*
 * gpu_mtp.c — the MTP block on the device (gpu_mtp.h).  One call of
 * gpu_mtp_rows, on the block session's stream:
 *
 *   h    = the rows' states (the target's residual rows, the kept one, or
 *          the block's own last row), copied device to device
 *   hn   = hnorm(norm(h)), norm being output_norm for target states and
 *          shared_head_norm for the block's own (src/mtp.h)
 *   en   = enorm(embed(tokens))
 *   cat  = [en | hn] (two strided copies)
 *   x    = eh_proj . cat, written into the block's embedding table
 *   step = the block session's step over row ids 0 .., replayed from its
 *          graph cache like any step (gpu_graph.c)
 *
 * The prelude's launches are not captured (they read what changes from
 * call to call only through device pointers, but they are few); the
 * block's step is, so a constant width keeps one graph.
 */
#include "gpu_mtp.h"

#include "gpu_arch.h"

#include "../quant.h"

#include <stdlib.h>
#include <string.h>

struct gpu_mtp {
    gpu_session *target, *block;
    model_weights view;    /* what block->w points to */
    layer_weights layer;   /* view.layer: the MTP block without its nextn.* roles */
    model_weights aux_w;   /* eh_proj, enorm, hnorm, embed_tokens as a one-layer model, for the upload */
    layer_weights aux_layer;
    gpu_weights aux;
    gk_mat embd;           /* the MTP embedding (nextn.embed_tokens, else the target's token_embd) */
    const float *out_norm; /* the target's output_norm */
    float *table;          /* the block's embedding table: n_batch rows of x */
    int64_t n_batch, n_embd, n_vocab;
    void *base;
    size_t bytes;
    int32_t *d_tokens;
    float *h, *t, *e, *kept;
    gpu_act cat;
    int32_t *row_ids, *tokens; /* host: 0 .., the padded tokens */
    int64_t width;             /* catch-up rows evaluated (gpu_mtp_set_width); 0: exact */
    float *rows;               /* host: width x n_vocab logits of a padded call */
    int64_t last_row;          /* the block's last real row in its last step; -1: none */
};

/* The roles the drafter computes itself (the prelude and the view's head);
 * the block session must not see them. */
static const arch_role nextn_roles[] = {W_NEXTN_EH_PROJ,          W_NEXTN_ENORM,            W_NEXTN_HNORM,
                                        W_NEXTN_SHARED_HEAD_NORM, W_NEXTN_SHARED_HEAD_HEAD, W_NEXTN_EMBED_TOKENS};
static const arch_role prelude_roles[] = {W_NEXTN_EH_PROJ, W_NEXTN_ENORM, W_NEXTN_HNORM, W_NEXTN_EMBED_TOKENS};

void gpu_mtp_free(gpu_mtp *m)
{
    if (m == NULL)
        return;
    gpu_session_free(m->block);
    gpu_weights_free(&m->aux);
    gpu_mem_free(GPU_MEM_SCRATCH, m->base, m->bytes);
    free(m->row_ids);
    free(m->tokens);
    free(m->rows);
    free(m);
}

static hydra_status upload_prelude(gpu_mtp *m, const model_weights *target_w, const layer_weights *mtp)
{
    m->aux_w = (model_weights){.arch = target_w->arch, .hp = target_w->hp, .layer = &m->aux_layer};
    m->aux_w.hp.n_layer = 1;
    for (size_t i = 0; i < sizeof prelude_roles / sizeof prelude_roles[0]; i++)
        m->aux_layer.w[prelude_roles[i]] = mtp->w[prelude_roles[i]];
    TRY_ST(gpu_weights_upload(&m->aux, &m->aux_w, false, 0, 1));
    const gk_mat *own = gw_at(&m->aux, 0, W_NEXTN_EMBED_TOKENS);
    m->embd = own->data != NULL ? *own : m->target->gw.global[W_TOKEN_EMBD];
    m->out_norm = gw_vec(&m->target->gw.global[W_OUTPUT_NORM]);
    return HYDRA_OK;
}

static hydra_status alloc_rows(gpu_mtp *m)
{
    const int64_t nb = m->n_batch, ne = m->n_embd;
    carve c = {0};
    CARVE(&c, m->d_tokens, sizeof(int32_t) * (size_t)nb);
    CARVE(&c, m->h, sizeof(float) * (size_t)(nb * ne));
    CARVE(&c, m->t, sizeof(float) * (size_t)(nb * ne));
    CARVE(&c, m->e, sizeof(float) * (size_t)(nb * ne));
    CARVE(&c, m->kept, sizeof(float) * (size_t)ne);
    carve_act(&c, &m->cat, nb, 2 * ne);
    m->bytes = c.total;
    TRY_ST(carve_alloc(&c, GPU_MEM_SCRATCH, &m->base, "MTP rows"));
    /* padding rows read these before anything wrote them: finite zeros */
    TRY(gpuMemset(m->base, 0, m->bytes), "zeroing the MTP rows");
    m->row_ids = malloc(sizeof *m->row_ids * (size_t)nb);
    m->tokens = malloc(sizeof *m->tokens * (size_t)nb);
    if (m->row_ids == NULL || m->tokens == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "MTP drafter on CUDA: host rows for a batch of %lld", (long long)nb);
    for (int64_t i = 0; i < nb; i++)
        m->row_ids[i] = (int32_t)i;
    return HYDRA_OK;
}

/* The block's session: the target's options for one device, all of the
 * block in VRAM (a hybrid target's slab is for its own layers). */
static hydra_status create_block(gpu_mtp *m, const model_weights *view)
{
    m->view = *view;
    m->layer = view->layer[0];
    for (size_t i = 0; i < sizeof nextn_roles / sizeof nextn_roles[0]; i++)
        m->layer.w[nextn_roles[i]] = (wtensor){0};
    m->view.layer = &m->layer;
    gpu_options o = m->target->o;
    o.hybrid = false;
    o.slab_init = NULL;
    o.profile = false;
    o.layer0 = o.layer1 = 0;
    o.split = (gpu_split){0};
    TRY_ST(gpu_session_create(&m->block, &m->view, &o));
    m->table = (float *)m->block->gw.global[W_TOKEN_EMBD].data; /* the x rows are written here */
    return HYDRA_OK;
}

hydra_status gpu_mtp_create(gpu_mtp **out, gpu_session *target, const model_weights *target_w,
                            const model_weights *view, const layer_weights *mtp)
{
    *out = NULL;
    if (target->multi != NULL)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "MTP drafting with a model split over several GPUs is not built "
                          "(the residual rows live on the last part's device)");
    if (view->global[W_TOKEN_EMBD].type != QT_F32 || view->global[W_TOKEN_EMBD].ne[1] < target->o.n_batch)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_mtp_create: the view's embedding must be an F32 table of "
                          "n_batch rows");
    gpuError_t e = gpuSetDevice(target->o.device);
    if (e != gpuSuccess)
        return gpu_fail(e, "selecting the MTP block's device");
    gpu_mtp *m = calloc(1, sizeof *m);
    if (m == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "MTP drafter on CUDA");
    *m = (gpu_mtp){.target = target, .n_batch = target->o.n_batch, .n_embd = target_w->hp.n_embd,
                   .n_vocab = target_w->hp.n_vocab, .last_row = -1};
    hydra_status st = upload_prelude(m, target_w, mtp);
    if (st == HYDRA_OK)
        st = create_block(m, view);
    if (st == HYDRA_OK)
        st = alloc_rows(m);
    if (st != HYDRA_OK) {
        gpu_mtp_free(m);
        return st;
    }
    *out = m;
    return HYDRA_OK;
}

/* dst rows of 2 n_embd, column offset col: = the width rows of n_embd of src. */
static hydra_status put_half(gpu_mtp *m, float *dst, const float *src, int64_t width)
{
    const size_t row = sizeof(float) * (size_t)m->n_embd;
    TRY(gpuMemcpy2DAsync(dst, 2 * row, src, row, row, (size_t)width, gpuMemcpyDeviceToDevice, m->block->stream),
        "MTP rows: [enorm(embedding) | hnorm(state)]");
    return HYDRA_OK;
}

/* h rows [0, n) from src; the target's last row is also kept. */
static hydra_status load_states(gpu_mtp *m, int64_t n, gpu_mtp_source src, int64_t row0, const float **gain)
{
    const size_t row = sizeof(float) * (size_t)m->n_embd;
    const float *from = src == GPU_MTP_TARGET ? m->target->x + row0 * m->n_embd
                        : src == GPU_MTP_KEPT ? m->kept
                                              : m->block->x + m->last_row * m->n_embd;
    *gain = src == GPU_MTP_CHAIN ? gw_vec(&m->block->gw.global[W_OUTPUT_NORM]) : m->out_norm;
    gpuStream_t s = m->block->stream;
    TRY(gpuMemcpyAsync(m->h, from, row * (size_t)n, gpuMemcpyDeviceToDevice, s), "MTP rows: the states");
    if (src == GPU_MTP_TARGET)
        TRY(gpuMemcpyAsync(m->kept, from + (n - 1) * m->n_embd, row, gpuMemcpyDeviceToDevice, s),
            "MTP rows: keeping the last state");
    return HYDRA_OK;
}

/* x rows [0, width) into the block's table. */
static hydra_status prelude(gpu_mtp *m, int64_t n, int64_t width, gpu_mtp_source src, int64_t row0)
{
    gpu_session *b = m->block;
    const int64_t ne = m->n_embd;
    const float eps = b->w->hp.norm_eps;
    const gk_mat *eh = gw_at(&m->aux, 0, W_NEXTN_EH_PROJ);
    const float *enorm = gw_vec(gw_at(&m->aux, 0, W_NEXTN_ENORM)), *hnorm = gw_vec(gw_at(&m->aux, 0, W_NEXTN_HNORM));
    const float *gain = NULL;
    TRY(gpuMemcpyAsync(m->d_tokens, m->tokens, sizeof(int32_t) * (size_t)width, gpuMemcpyHostToDevice, b->stream),
        "MTP rows: the tokens");
    TRY_ST(load_states(m, n, src, row0, &gain));
    TRY(gk_rmsnorm(b->stream, m->h, gain, eps, (int)width, ne, m->t, NULL, NULL), "MTP rows: the state's norm");
    TRY(gk_rmsnorm(b->stream, m->t, hnorm, eps, (int)width, ne, m->h, NULL, NULL), "MTP rows: hnorm");
    TRY_ST(put_half(m, m->cat.f + ne, m->h, width));
    TRY(gk_embed(b->stream, &m->embd, m->d_tokens, (int)width, m->e), "MTP rows: the embedding");
    TRY(gk_rmsnorm(b->stream, m->e, enorm, eps, (int)width, ne, m->t, NULL, NULL), "MTP rows: enorm");
    TRY_ST(put_half(m, m->cat.f, m->t, width));
    gpu_act_bind(&m->cat, 2 * ne, (int)width);
    return gpu_linear(b, eh, &m->cat, 0, (int)width, m->table, ne, NULL, false, OP_EMBED);
}

hydra_status gpu_mtp_set_width(gpu_mtp *m, int64_t width)
{
    if (width < 0 || width > m->n_batch)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "MTP catch-up width %lld: at most n_batch %lld", (long long)width,
                          (long long)m->n_batch);
    float *rows = width > 0 ? malloc(sizeof *rows * (size_t)width * (size_t)m->n_vocab) : NULL;
    if (width > 0 && rows == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "MTP catch-up logits of %lld rows", (long long)width);
    free(m->rows);
    m->rows = rows;
    m->width = width;
    return HYDRA_OK;
}

hydra_status gpu_mtp_rows(gpu_mtp *m, const int32_t *tokens, int64_t n, int64_t pos0, gpu_mtp_source src,
                          int64_t row0, float *logits)
{
    if (n < 1 || n > m->n_batch || (src != GPU_MTP_TARGET && n != 1) || (src == GPU_MTP_CHAIN && m->last_row < 0))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "gpu_mtp_rows: %lld rows (batch %lld), source %d", (long long)n,
                          (long long)m->n_batch, (int)src);
    const bool padded = src != GPU_MTP_CHAIN && m->width >= n && pos0 + m->width <= m->block->o.n_ctx;
    const int64_t width = padded ? m->width : n;
    gpuError_t e = gpuSetDevice(m->block->o.device);
    if (e != gpuSuccess)
        return gpu_fail(e, "selecting the MTP block's device");
    for (int64_t r = 0; r < width; r++)
        m->tokens[r] = tokens[r < n ? r : n - 1];
    hydra_status st = prelude(m, n, width, src, row0);
    if (st != HYDRA_OK) {
        gpuStreamSynchronize(m->block->stream);
        return st;
    }
    m->last_row = -1;
    TRY_ST(gpu_forward(m->block, pos0, m->row_ids, width, padded, padded ? m->rows : logits));
    if (padded)
        memcpy(logits, m->rows + (size_t)(n - 1) * (size_t)m->n_vocab, sizeof(float) * (size_t)m->n_vocab);
    m->last_row = n - 1;
    return HYDRA_OK;
}

void gpu_mtp_stats(const gpu_mtp *m, gpu_stats *out)
{
    gpu_session_stats(m->block, out);
}
