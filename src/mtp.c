/*
 * mtp.c — the MTP drafter (formula and row convention in mtp.h).
 *
 * The MTP block is a decoder block like the main ones, so the generic pass
 * runs it: the drafter's model_weights is the target's seen as a one-block
 * model (the first MTP block; shared_head_norm and the MTP head, else
 * output_norm and output, as its output), and the block's input rows x_i
 * reach forward() as the rows of an F32 "embedding table" looked up by row
 * index.  Its cache and working buffers are its own; its thread pool is
 * the target's, idle while the drafter runs.
 *
 * When the target runs on CUDA the same view runs as a device session of
 * its own (src/gpu/gpu_mtp.h): the x rows are made on the device from the
 * target's residual rows, and only the last row's logits come back.  A
 * fixed width (mtp_set_width) pads the catch-up rows so that every
 * catch-up replays one captured graph.
 */
#include "mtp.h"

#include "error.h"
#include "forward.h"
#include "gpu/gpu_mtp.h"
#include "quant.h"
#include "session_hidden.h"

#include <stdlib.h>
#include <string.h>

struct mtp_drafter {
    hydra_session *target;
    session_parts parts;
    model_weights w;      /* the one-block view */
    const wtensor *embd;  /* the MTP block's token embedding (nextn.embed_tokens, else token_embd) */
    const wtensor *out_norm; /* the target's output_norm: h_i = output_norm(residual) */
    kv_cache kv;
    fwd_scratch f;
    int64_t n_embd, n_vocab;
    float *in;            /* n_batch x n_embd: x rows, the view's embedding table */
    int32_t *row_ids;     /* 0 .. n_batch - 1: looks the x rows up */
    float *cat;           /* n_batch x 2 n_embd: [enorm(embedding) | hnorm(state)] */
    act_set cat_act;
    float *h;             /* n_batch x n_embd: the states the rows read */
    float *e;             /* n_embd: one embedding row */
    float *logits;        /* n_vocab: the last row's */
    float *state;         /* n_embd: shared_head_norm(y) of the last row, what a chained row reads */
    float *last_h;        /* n_embd: h of row last_h_row, kept past the target's next step */
    int64_t last_h_row;   /* -1: none */
    int64_t n_past;       /* rows in the cache */
    int64_t n_true;       /* of them, rows from the target's states */
    int64_t logits_row;   /* the row whose logits and state are held; -1: none */
    gpu_mtp *gpu;         /* the block on the target's device; NULL on the CPU */
};

/* ------------------------------------------------------------ setup */

void mtp_free(mtp_drafter *m)
{
    if (m == NULL)
        return;
    gpu_mtp_free(m->gpu);
    fwd_free(&m->f);
    kv_free(&m->kv);
    act_free(&m->cat_act);
    free(m->in);
    free(m->row_ids);
    free(m->cat);
    free(m->h);
    free(m->e);
    free(m->logits);
    free(m->state);
    free(m->last_h);
    free(m);
}

/* The target's weights as a model of one block, the first MTP block, whose
 * embedding is the table of x rows and whose head is the MTP head. */
static void make_view(mtp_drafter *m, const model_weights *tw)
{
    m->w = *tw;
    m->w.hp.n_layer = 1;
    m->w.hp.n_layer_dense_lead = 0;
    m->w.layer = &tw->nextn[0];
    m->w.nextn = NULL;
    m->w.n_nextn = 0;
    const layer_weights *lw = &tw->nextn[0];
    const size_t row_bytes = sizeof(float) * (size_t)tw->hp.n_embd;
    m->w.global[W_TOKEN_EMBD] = (wtensor){.data = (const uint8_t *)m->in, .type = QT_F32,
                                          .ne = {tw->hp.n_embd, m->parts.n_batch, 1}, .row_bytes = row_bytes,
                                          .mat_bytes = row_bytes * (size_t)m->parts.n_batch};
    if (lw->w[W_NEXTN_SHARED_HEAD_NORM].data != NULL)
        m->w.global[W_OUTPUT_NORM] = lw->w[W_NEXTN_SHARED_HEAD_NORM];
    if (lw->w[W_NEXTN_SHARED_HEAD_HEAD].data != NULL)
        m->w.global[W_OUTPUT] = lw->w[W_NEXTN_SHARED_HEAD_HEAD];
    m->embd = lw->w[W_NEXTN_EMBED_TOKENS].data != NULL ? &lw->w[W_NEXTN_EMBED_TOKENS] : &tw->global[W_TOKEN_EMBD];
    m->out_norm = &tw->global[W_OUTPUT_NORM];
}

static float *floats(size_t n, bool *ok)
{
    float *p = malloc(sizeof(float) * (n > 0 ? n : 1));
    *ok = *ok && p != NULL;
    return p;
}

static hydra_status alloc_buffers(mtp_drafter *m)
{
    const size_t nb = (size_t)m->parts.n_batch, ne = (size_t)m->n_embd;
    bool ok = true;
    m->in = calloc(nb * ne, sizeof(float)); /* zeros: the device copy's padding rows read them */
    ok = m->in != NULL;
    m->cat = floats(nb * 2 * ne, &ok);
    m->h = floats(nb * ne, &ok);
    m->e = floats(ne, &ok);
    m->logits = floats((size_t)m->n_vocab, &ok);
    m->state = floats(ne, &ok);
    m->last_h = floats(ne, &ok);
    m->row_ids = malloc(sizeof *m->row_ids * nb);
    if (!ok || m->row_ids == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "MTP drafter buffers for a batch of %zu", nb);
    for (size_t i = 0; i < nb; i++)
        m->row_ids[i] = (int32_t)i;
    return HYDRA_OK;
}

/* The CPU block's cache, pass buffers and concatenated rows. */
static hydra_status cpu_parts(mtp_drafter *m)
{
    hydra_status st = kv_init(&m->kv, &m->w, m->parts.kv_type, m->parts.n_ctx, m->parts.n_batch);
    if (st == HYDRA_OK)
        st = fwd_init(&m->f, &m->w, m->parts.n_batch, m->parts.n_ctx, m->parts.n_threads);
    if (st == HYDRA_OK)
        st = act_init(&m->cat_act, &m->w, 2 * m->n_embd, m->parts.n_batch);
    return st;
}

hydra_status mtp_new(hydra_session *target, mtp_drafter **out)
{
    if (target == NULL || out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "mtp_new: a target session and out are required");
    *out = NULL;
    mtp_drafter *m = calloc(1, sizeof *m);
    if (m == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "MTP drafter");
    hydra_status st = session_keep_hidden(target, &m->parts);
    const model_weights *tw = m->parts.w;
    if (st == HYDRA_OK && tw->n_nextn == 0)
        st = hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s: the model has no MTP/NextN block (nextn_predict_layers %u%s): "
                        "speculative decoding needs a draft model (-md)", tw->arch->name, tw->hp.n_nextn,
                        tw->hp.n_nextn ? ", but the file has no blk.N.nextn.* tensors" : "");
    if (st == HYDRA_OK) {
        *m = (mtp_drafter){.target = target, .parts = m->parts, .n_embd = tw->hp.n_embd, .n_vocab = tw->hp.n_vocab,
                           .last_h_row = -1, .logits_row = -1};
        st = alloc_buffers(m);
    }
    if (st == HYDRA_OK)
        make_view(m, tw);
    if (st == HYDRA_OK && m->parts.gpu != NULL)
        st = gpu_mtp_create(&m->gpu, m->parts.gpu, tw, &m->w, &tw->nextn[0]);
    else if (st == HYDRA_OK)
        st = cpu_parts(m);
    if (st != HYDRA_OK) {
        mtp_free(m);
        return st;
    }
    *out = m;
    return HYDRA_OK;
}

/* ------------------------------------------------------------ rows */

/* n rows at positions pos0 ..: tokens[r] with state h + r * n_embd each;
 * keeps the last row's logits and the state a chained row reads. */
static void run_rows(mtp_drafter *m, const hydra_token *tokens, const float *h, int64_t n, int64_t pos0)
{
    const int64_t ne = m->n_embd;
    const model_weights *tw = m->parts.w;
    const layer_weights *lw = m->w.layer;
    const quant_to_float_fn to_float = quant_traits_of(m->embd->type)->to_float;
    const float eps = tw->hp.norm_eps;
    for (int64_t r = 0; r < n; r++) {
        to_float(m->embd->data + (size_t)tokens[r] * m->embd->row_bytes, m->e, ne);
        float *cat = m->cat + r * 2 * ne;
        op_rmsnorm(cat, m->e, wt_f32(&lw->w[W_NEXTN_ENORM]), ne, eps);
        op_rmsnorm(cat + ne, h + r * ne, wt_f32(&lw->w[W_NEXTN_HNORM]), ne, eps);
    }
    act_bind(&m->cat_act, m->cat, n);
    fwd_project(m->parts.pool, &lw->w[W_NEXTN_EH_PROJ], NULL, &m->cat_act, m->in);
    forward(&m->w, m->parts.pool, &m->kv, &m->f, pos0, m->row_ids, n, false, m->logits);
    op_rmsnorm(m->state, m->f.x + (n - 1) * ne, wt_f32(&m->w.global[W_OUTPUT_NORM]), ne, eps);
    m->n_past = pos0 + n;
    m->logits_row = m->n_past - 1;
}

static hydra_status check_token(const mtp_drafter *m, hydra_token t, int64_t row)
{
    if (t < 0 || t >= m->n_vocab)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "MTP row %lld: token id %d is outside the vocabulary of %lld",
                          (long long)row, (int)t, (long long)m->n_vocab);
    return HYDRA_OK;
}

/* The state row i reads: output_norm of the target's hidden state. */
static hydra_status target_state(mtp_drafter *m, int64_t i, float *h)
{
    const float *x = session_hidden_row(m->target, i);
    if (x == NULL && i == m->last_h_row) {
        memcpy(h, m->last_h, sizeof(float) * (size_t)m->n_embd);
        return HYDRA_OK;
    }
    if (x == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "MTP drafter: the target's hidden state of position %lld is not among "
                          "its last step's rows (was the target evaluated outside the decoder?)", (long long)i);
    op_rmsnorm(h, x, wt_f32(m->out_norm), m->n_embd, m->parts.w->hp.norm_eps);
    return HYDRA_OK;
}

static hydra_status cpu_sync_rows(mtp_drafter *m, const hydra_token *tokens, int64_t pos0, int64_t rows)
{
    for (int64_t r = 0; r < rows; r++) {
        hydra_status st = target_state(m, pos0 + r, m->h + r * m->n_embd);
        if (st != HYDRA_OK)
            return st;
    }
    run_rows(m, tokens, m->h, rows, pos0);
    memcpy(m->last_h, m->h + (rows - 1) * m->n_embd, sizeof(float) * (size_t)m->n_embd);
    return HYDRA_OK;
}

/* Rows on the device (gpu_mtp_rows pads catch-up rows to the width). */
static hydra_status gpu_rows(mtp_drafter *m, const hydra_token *tokens, int64_t n, int64_t pos0, gpu_mtp_source src,
                             int64_t row0)
{
    hydra_status st = gpu_mtp_rows(m->gpu, tokens, n, pos0, src, row0, m->logits);
    if (st != HYDRA_OK)
        return st;
    m->n_past = pos0 + n;
    m->logits_row = m->n_past - 1;
    return HYDRA_OK;
}

/* The states of rows pos0 .. are the target's last step's rows (on its
 * device), or, for the row of the last catch-up alone, the kept one. */
static hydra_status gpu_sync_rows(mtp_drafter *m, const hydra_token *tokens, int64_t pos0, int64_t rows)
{
    const int64_t first = session_hidden_index(m->target, pos0);
    if (first >= 0 && session_hidden_index(m->target, pos0 + rows - 1) == first + rows - 1)
        return gpu_rows(m, tokens, rows, pos0, GPU_MTP_TARGET, first);
    if (rows == 1 && pos0 == m->last_h_row)
        return gpu_rows(m, tokens, 1, pos0, GPU_MTP_KEPT, 0);
    return hydra_fail(HYDRA_ERR_INVALID_ARG, "MTP drafter: the target's hidden states of positions %lld .. %lld are "
                      "not among its last step's rows (was the target evaluated outside the decoder?)",
                      (long long)pos0, (long long)(pos0 + rows - 1));
}

hydra_status mtp_sync(mtp_drafter *m, const hydra_token *tokens, int64_t n)
{
    if (n < 0 || n > m->parts.n_ctx)
        return hydra_fail(HYDRA_ERR_RANGE, "mtp_sync: %lld rows (the context holds %lld)", (long long)n,
                          (long long)m->parts.n_ctx);
    if (m->n_true > n)
        m->n_true = n;
    if (n > 0 && m->n_true == n && m->logits_row != n - 1)
        m->n_true = n - 1; /* the last row again, for its logits */
    m->n_past = m->n_true;
    if (m->logits_row >= m->n_past)
        m->logits_row = -1;
    while (m->n_true < n) {
        const int64_t pos0 = m->n_true, rows = n - pos0 < m->parts.n_batch ? n - pos0 : m->parts.n_batch;
        for (int64_t r = 0; r < rows; r++) {
            hydra_status st = check_token(m, tokens[pos0 + r + 1], pos0 + r);
            if (st != HYDRA_OK)
                return st;
        }
        hydra_status st = m->gpu ? gpu_sync_rows(m, tokens + pos0 + 1, pos0, rows)
                                 : cpu_sync_rows(m, tokens + pos0 + 1, pos0, rows);
        if (st != HYDRA_OK)
            return st;
        m->n_true = pos0 + rows;
        m->last_h_row = m->n_true - 1;
    }
    return HYDRA_OK;
}

hydra_status mtp_chain(mtp_drafter *m, hydra_token t)
{
    if (m->logits_row < 0 || m->logits_row != m->n_past - 1)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "mtp_chain: no row to chain from (call mtp_sync first)");
    if (m->n_past >= m->parts.n_ctx)
        return hydra_fail(HYDRA_ERR_RANGE, "mtp_chain: the MTP cache of %lld positions is full",
                          (long long)m->parts.n_ctx);
    hydra_status st = check_token(m, t, m->n_past);
    if (st != HYDRA_OK)
        return st;
    if (m->gpu != NULL)
        return gpu_rows(m, &t, 1, m->n_past, GPU_MTP_CHAIN, 0);
    memcpy(m->h, m->state, sizeof(float) * (size_t)m->n_embd);
    run_rows(m, &t, m->h, 1, m->n_past);
    return HYDRA_OK;
}

const float *mtp_logits(const mtp_drafter *m)
{
    return m != NULL && m->logits_row >= 0 ? m->logits : NULL;
}

int64_t mtp_n_rows(const mtp_drafter *m)
{
    return m != NULL ? m->n_true : 0;
}

void mtp_truncate(mtp_drafter *m, int64_t n)
{
    if (m == NULL || n < 0)
        return;
    if (m->n_true > n)
        m->n_true = n;
    if (m->n_past > n)
        m->n_past = n;
    if (m->logits_row >= n)
        m->logits_row = -1;
}

int64_t mtp_n_batch(const mtp_drafter *m)
{
    return m != NULL ? m->parts.n_batch : 0;
}

hydra_status mtp_set_width(mtp_drafter *m, int64_t width)
{
    return m != NULL && m->gpu != NULL ? gpu_mtp_set_width(m->gpu, width) : HYDRA_OK;
}

uint64_t mtp_graph_captures(const mtp_drafter *m)
{
    if (m == NULL || m->gpu == NULL)
        return 0;
    gpu_stats st;
    gpu_mtp_stats(m->gpu, &st);
    return st.captures;
}
