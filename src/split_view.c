/*
 * split_view.c — one part of a tensor split (split.h) as a model of its
 * own: the hyperparameters say the part's KV heads (with their query
 * heads) and FFN widths, and every tensor is the part's slice.  A CUDA
 * session over the view (src/gpu/gpu_tensor.c) then runs the ordinary
 * step, and its sublayers produce partial sums that one all-reduce adds.
 *
 *   rows    (Q, K, V and their biases, FFN gate/up, sinks): a pointer into
 *           the mapping, no copy
 *   columns (attention output, FFN down): each row's range of whole quant
 *           blocks copied, in the model's type.  The plan cuts KV heads and
 *           FFN columns in granules of whole blocks (split_col_granule), so
 *           a slice never cuts a block: a slice decoded to F32 would be a
 *           product without the 8-bit activations of the quantised kernels,
 *           and that rounding alone moved qwen3moe-kq-q4_k_m's greedy run
 *           (token 6 of 32, session 5).
 *   unsplit a sublayer with fewer whole blocks of output columns than
 *           parts (tiny models: 4 heads x 64 = one 256-value Q5_K block)
 *           is held whole by every part, and every part but the main one
 *           gets its output projection as zero blocks of the same type and
 *           shape (all-zero bytes decode to 0 in every type: a zero
 *           block scale; MXFP4's and the float types' zero codes are 0).
 *           Its partial is then exactly 0, so the all-reduce gives the
 *           main part's output, bit for bit the one-GPU sublayer, with
 *           no change to the step or the sums.  Chosen over
 *           "main part only, the others skip it" because a part with no
 *           KV heads or no FFN width would need its own step code; the
 *           price, the other parts repeating that sublayer beside the
 *           main one, only arises where a layer's whole sublayer is one
 *           or a few blocks wide.
 *   experts the stacks of [exp0, exp1) (the session maps every other
 *           expert to zeros, gpu_tensor.c); the per-expert down bias keeps
 *           only the part's experts, so each expert's bias is added once
 *   summed  the attention output bias on the main part only
 *   latent  deepseek2's attention (model/mla.c) is cut by query heads:
 *           rows of q (attn_q, or q_b after the q_a bottleneck), the
 *           heads' matrices of the per-head stacks k_b and v_b (pointers
 *           into the mapping, as experts), the heads' attention output
 *           columns; the latent (q_a, kv_a_mqa, their norms) is computed
 *           whole on every part and its cache, one row of kv_lora + n_rot
 *           for all heads, is replicated per part.  Exact per head: head
 *           h's output depends on the latent and on its own slices only.
 */
#include "split.h"

#include "error.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>

/* A host copy the view owns. */
static void *view_alloc(split_view *v, size_t bytes)
{
    if (v->n_buf == v->cap_buf) {
        const int cap = v->cap_buf > 0 ? 2 * v->cap_buf : 64;
        void **grown = realloc(v->buf, sizeof *grown * (size_t)cap);
        if (grown == NULL)
            return NULL;
        v->buf = grown;
        v->cap_buf = cap;
    }
    void *p = calloc(1, bytes > 0 ? bytes : 1);
    if (p != NULL)
        v->buf[v->n_buf++] = p;
    return p;
}

/* Rows [r0, r1) of a matrix, or values [r0, r1) of a vector. */
static void slice_rows(wtensor *t, int64_t r0, int64_t r1)
{
    if (t->data == NULL)
        return;
    const bool vector = t->ne[1] == 1 && t->type == QT_F32 && t->ne[2] == 1;
    if (vector) {
        t->data += (size_t)r0 * sizeof(float);
        t->ne[0] = r1 - r0;
        t->row_bytes = t->mat_bytes = sizeof(float) * (size_t)t->ne[0];
        return;
    }
    t->data += (size_t)r0 * t->row_bytes;
    t->ne[1] = r1 - r0;
    t->mat_bytes = t->row_bytes * (size_t)t->ne[1];
}

/* Columns [c0, c1) of every row, copied in whole blocks (the plan's cuts
 * are on block boundaries; anything else is a planning bug, refused). */
static hydra_status slice_cols(split_view *v, wtensor *t, int64_t c0, int64_t c1, const char *what)
{
    if (t->data == NULL)
        return HYDRA_OK;
    const quant_traits *qt = quant_traits_of(t->type);
    if (qt == NULL || qt->block_size == 0)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "-sm tensor: %s has type id %u", what, t->type);
    const int64_t bs = qt->block_size, rows = t->ne[1] * t->ne[2], cols = c1 - c0;
    if (c0 % bs != 0 || (c1 % bs != 0 && c1 != t->ne[0]))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "-sm tensor: %s (%s): columns %lld-%lld cut its %lld-value blocks",
                          what, qt->name, (long long)c0, (long long)c1 - 1, (long long)bs);
    const size_t row_out = (size_t)((cols + bs - 1) / bs) * qt->type_size;
    uint8_t *dst = view_alloc(v, row_out * (size_t)rows);
    if (dst == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor: a copy of %s", what);
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * row_out, t->data + (size_t)r * t->row_bytes + (size_t)(c0 / bs) * qt->type_size,
               row_out);
    t->data = dst;
    t->ne[0] = cols;
    t->row_bytes = row_out;
    t->mat_bytes = row_out * (size_t)t->ne[1];
    return HYDRA_OK;
}

/* An unsplit sublayer's output projection off the main part: zero blocks
 * of the same type and shape, so the part's partial sum is exactly 0. */
static hydra_status zero_matrix(split_view *v, wtensor *t, const char *what)
{
    if (t->data == NULL)
        return HYDRA_OK;
    uint8_t *zeros = view_alloc(v, t->mat_bytes * (size_t)(t->ne[2] > 0 ? t->ne[2] : 1));
    if (zeros == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor: zeros for %s", what);
    t->data = zeros;
    return HYDRA_OK;
}

/* The per-expert down bias with every other expert's row zeroed. */
static hydra_status own_expert_bias(split_view *v, wtensor *t)
{
    if (t->data == NULL)
        return HYDRA_OK;
    uint8_t *copy = view_alloc(v, t->mat_bytes);
    if (copy == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "-sm tensor: a copy of an expert bias");
    memcpy(copy + (size_t)v->exp0 * t->row_bytes, t->data + (size_t)v->exp0 * t->row_bytes,
           (size_t)(v->exp1 - v->exp0) * t->row_bytes);
    t->data = copy;
    return HYDRA_OK;
}

/* Matrices [m0, m1) of a stack (routed experts, MLA's per-head k_b / v_b). */
static void slice_stack(wtensor *t, int64_t m0, int64_t m1)
{
    if (t->data == NULL)
        return;
    t->data += (size_t)m0 * t->mat_bytes;
    t->ne[2] = m1 - m0;
}

typedef struct cuts {
    int64_t q0, q1, k0, k1, v0, v1, o0, o1; /* Q rows, K rows, V rows, output columns */
    int64_t h0, h1;                           /* query heads (sinks, MLA's per-head stacks) */
    bool heads_whole;                         /* attention not split (split_plan) */
    int64_t ff_granule, shexp_granule;        /* FFN columns per whole block run of each down matrix */
} cuts;

static hydra_status view_attention(split_view *v, layer_weights *lw, const cuts *c, bool main)
{
    static const struct { arch_role role; int which; } rows[] = {
        {W_ATTN_Q, 0}, {W_ATTN_Q_BIAS, 0}, {W_ATTN_Q_B, 0}, {W_ATTN_K, 1}, {W_ATTN_K_BIAS, 1},
        {W_ATTN_V, 2}, {W_ATTN_V_BIAS, 2}, {W_ATTN_SINKS, 3},
    };
    const int64_t lo[4] = {c->q0, c->k0, c->v0, c->h0}, hi[4] = {c->q1, c->k1, c->v1, c->h1};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        slice_rows(&lw->w[rows[i].role], lo[rows[i].which], hi[rows[i].which]);
    slice_stack(&lw->w[W_ATTN_K_B], c->h0, c->h1);
    slice_stack(&lw->w[W_ATTN_V_B], c->h0, c->h1);
    if (!main)
        lw->w[W_ATTN_OUT_BIAS] = (wtensor){0};
    if (c->heads_whole)
        return main ? HYDRA_OK : zero_matrix(v, &lw->w[W_ATTN_OUT], "attn_output");
    return slice_cols(v, &lw->w[W_ATTN_OUT], c->o0, c->o1, "attn_output");
}

/* A GLU FFN (dense or shared expert): gate/up rows and down columns
 * [f0, f1), cut in whole blocks of the down matrix (granule columns);
 * too narrow for that: whole, its down zero off the main part.  *width:
 * the part's. */
static hydra_status view_ffn(split_view *v, const split_plan *plan, int part, layer_weights *lw, arch_role gate,
                             arch_role up, arch_role down, int64_t granule, uint32_t *width)
{
    wtensor *d = &lw->w[down];
    if (d->data == NULL)
        return HYDRA_OK;
    int64_t f0, f1;
    if (!split_cut_blocks(plan, part, d->ne[0], granule, &f0, &f1)) {
        *width = (uint32_t)d->ne[0];
        return plan->part[part].head ? HYDRA_OK : zero_matrix(v, d, arch_tensor_specs[down].name);
    }
    slice_rows(&lw->w[gate], f0, f1);
    slice_rows(&lw->w[up], f0, f1);
    *width = (uint32_t)(f1 - f0);
    return slice_cols(v, d, f0, f1, arch_tensor_specs[down].name);
}

static hydra_status view_layer(split_view *v, const split_plan *plan, int part, layer_weights *lw, const cuts *c,
                               bool all_experts)
{
    hydra_status st = view_attention(v, lw, c, plan->part[part].head);
    if (st == HYDRA_OK)
        st = view_ffn(v, plan, part, lw, W_FFN_GATE, W_FFN_UP, W_FFN_DOWN, c->ff_granule, &v->w.hp.n_ff);
    if (st == HYDRA_OK)
        st = view_ffn(v, plan, part, lw, W_SHEXP_GATE, W_SHEXP_UP, W_SHEXP_DOWN, c->shexp_granule,
                      &v->w.hp.n_ff_shexp);
    if (all_experts || st != HYDRA_OK)
        return st;
    static const arch_role stacks[] = {W_MOE_GATE, W_MOE_UP, W_MOE_DOWN};
    for (size_t i = 0; i < sizeof stacks / sizeof stacks[0]; i++)
        slice_stack(&lw->w[stacks[i]], v->exp0, v->exp1);
    return own_expert_bias(v, &lw->w[W_MOE_DOWN_BIAS]);
}

hydra_status split_view_make(split_view *v, const model_weights *w, const split_plan *plan, int part,
                             bool all_experts)
{
    memset(v, 0, sizeof *v);
    const arch_hparams *hp = &w->hp;
    const split_part *q = &plan->part[part];
    if (plan->mode != SPLIT_TENSOR || part < 0 || part >= plan->n_part)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "split view: part %d of a %d-part plan", part, plan->n_part);
    v->w = *w;
    v->w.nextn = NULL; /* the main pass only (MTP blocks are not split) */
    v->w.n_nextn = 0;
    v->layer = malloc(sizeof *v->layer * hp->n_layer);
    if (v->layer == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "split view: %u layers", hp->n_layer);
    memcpy(v->layer, w->layer, sizeof *v->layer * hp->n_layer);
    v->w.layer = v->layer;
    v->exp0 = q->exp0;
    v->exp1 = q->exp1;
    /* the plan's head units: KV heads with their query heads; latent
     * attention's are query heads (split_model_of), its one latent KV head
     * on every part */
    const bool latent = w->arch->attention != NULL;
    const int64_t group = latent ? 1 : hp->n_head / hp->n_head_kv;
    const cuts c = {.q0 = q->head0 * group * hp->head_dim_k, .q1 = q->head1 * group * hp->head_dim_k,
                    .k0 = q->head0 * (int64_t)hp->head_dim_k, .k1 = q->head1 * (int64_t)hp->head_dim_k,
                    .v0 = q->head0 * (int64_t)hp->head_dim_v, .v1 = q->head1 * (int64_t)hp->head_dim_v,
                    .o0 = q->head0 * group * hp->head_dim_v, .o1 = q->head1 * group * hp->head_dim_v,
                    .h0 = q->head0 * group, .h1 = q->head1 * group, .heads_whole = plan->heads_whole,
                    .ff_granule = split_col_granule(w, W_FFN_DOWN, 1),
                    .shexp_granule = split_col_granule(w, W_SHEXP_DOWN, 1)};
    v->w.hp.n_head_kv = latent ? hp->n_head_kv : (uint32_t)(q->head1 - q->head0);
    v->w.hp.n_head = (uint32_t)((q->head1 - q->head0) * group);
    if (!q->head) /* the output head runs on the main part only */
        v->w.global[W_OUTPUT] = v->w.global[W_OUTPUT_NORM] = (wtensor){0};
    hydra_status st = HYDRA_OK;
    for (uint32_t l = 0; l < hp->n_layer && st == HYDRA_OK; l++)
        st = view_layer(v, plan, part, &v->layer[l], &c, all_experts);
    if (st != HYDRA_OK)
        split_view_free(v);
    return st;
}

void split_view_free(split_view *v)
{
    for (int i = 0; i < v->n_buf; i++)
        free(v->buf[i]);
    free(v->buf);
    free(v->layer);
    memset(v, 0, sizeof *v);
}
