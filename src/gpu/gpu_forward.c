/*
 * gpu_forward.c — one step of the forward pass as a sequence of kernel
 * launches on the session's stream, the CUDA twin of src/forward.c:
 *
 *   x = embed(tokens)
 *   for each layer:
 *       x += attention(rmsnorm(x))   Q/K/V (+ biases), QK-norm + RoPE +
 *                                    KV store, flash-decoding GQA, output
 *                                    projection added into x
 *       x += ffn(rmsnorm(x))         MoE: router, top-k, experts per route
 *                                    (decode) or grouped by expert
 *                                    (prefill), combine; shared expert;
 *                                    or a dense SwiGLU FFN
 *   logits = output(rmsnorm(x))
 *
 * Nothing here waits for the device or reads device memory: token ids and
 * the first position are in device memory (gk_step), so the whole step can
 * be captured once and replayed.  Up to GK_MATVEC_MAX_TOK tokens take the
 * matrix-vector kernels (8-bit activations, integer dot products); larger
 * steps take the tiled matrix-matrix kernels.
 */
#include "gpu_arch.h"

#include "../quant.h"
#include "../../kernels/cuda/attn_out_router.h"

#include <math.h>

void gpu_prof_mark(gpu_session *g, gpu_op op)
{
    if (!g->o.profile || g->n_ev >= PROF_MAX_EVENTS)
        return;
    gpuEventRecord(g->events[g->n_ev], g->stream);
    g->ev_op[g->n_ev++] = op;
}

/* --- activation sets */

static void act_bind(gpu_act *a, int64_t n, int n_rows)
{
    a->n = n;
    a->n_rows = n_rows;
    a->q_ready = false;
    a->h_ready = false;
}

static bool reads_8bit(const gk_mat *w)
{
    return w->type != QT_F32 && w->type != QT_F16 && w->type != QT_BF16;
}

/* The 8-bit form of a's rows, made on first use after a bind. */
static hydra_status act_quantize(gpu_session *g, gpu_act *a)
{
    if (a->q_ready)
        return HYDRA_OK;
    TRY(gk_quantize_rows(g->stream, a->f, a->n_rows, a->n, a->q, a->meta), "quantizing activations");
    gpu_prof_mark(g, OP_QUANT);
    a->q_ready = true;
    return HYDRA_OK;
}

/* The f16 form of a's rows, which the prefill matmuls of quantised
 * weights read (mmq.cu), made on first use after a bind. */
static hydra_status act_half(gpu_session *g, gpu_act *a)
{
    if (a->h_ready)
        return HYDRA_OK;
    TRY(gk_rows_to_f16(g->stream, a->f, a->n_rows, a->n, a->h), "activations to f16");
    gpu_prof_mark(g, OP_QUANT);
    a->h_ready = true;
    return HYDRA_OK;
}

static gk_act act_view(const gpu_act *a, int64_t row0)
{
    const int64_t meta_row = row0 * (a->n / 32) * 4;
    return (gk_act){.f = a->f + row0 * a->n, .q = a->q + row0 * a->n, .meta = a->meta + meta_row, .n = a->n,
                    .h = a->h + row0 * a->n};
}

/* --- building blocks */

/* y[t] = W . x[row0 + t] (+ bias) for t < n_tok, added to y when
 * accumulate. */
static hydra_status linear(gpu_session *g, const gk_mat *w, gpu_act *x, int64_t row0, int n_tok, float *y,
                           int64_t y_stride, const float *bias, bool accumulate, gpu_op op)
{
    const bool tiled = n_tok > GK_MATVEC_MAX_TOK && w->n_cols % GK_MATMUL_K == 0;
    if (tiled) {
        if (reads_8bit(w)) /* quantised weights: f16 tensor-core products (mmq.cu) */
            TRY_ST(act_half(g, x));
        const gk_act xa = act_view(x, row0);
        const gk_out out = {.y = y, .y_stride = y_stride, .bias = bias, .accumulate = accumulate};
        TRY(gk_matmul(g->stream, w, &xa, n_tok, &out), "matmul");
    } else {
        if (reads_8bit(w))
            TRY_ST(act_quantize(g, x));
        for (int t0 = 0; t0 < n_tok; t0 += GK_MATVEC_MAX_TOK) {
            const int nt = n_tok - t0 < GK_MATVEC_MAX_TOK ? n_tok - t0 : GK_MATVEC_MAX_TOK;
            const gk_act xa = act_view(x, row0 + t0);
            const gk_rows rows = {.n_tok = nt};
            const gk_out out = {.y = y + t0 * y_stride, .y_stride = y_stride, .bias = bias, .accumulate = accumulate};
            TRY(gk_matvec(g->stream, w, NULL, &xa, &rows, &out), "matvec");
        }
    }
    gpu_prof_mark(g, op);
    return HYDRA_OK;
}

/* Prefill: n_mats quantised matrices over the same rows of x in one tiled
 * launch (gk_matmul_multi; gk_matmul_stacks said it takes them). */
static hydra_status linear_stack(gpu_session *g, const gk_mat *const *w, const gk_out *out, int n_mats, gpu_act *x,
                                 int n_tok, gpu_op op)
{
    TRY_ST(act_half(g, x));
    const gk_act xa = act_view(x, 0);
    TRY(gk_matmul_multi(g->stream, w, out, n_mats, &xa, NULL, n_tok), "matmul (stacked)");
    gpu_prof_mark(g, op);
    return HYDRA_OK;
}

/* y += W . x (+ bias) for n_tok rows of x.  Where a prefill launch of W
 * would leave the GPU half idle (gk_matmul_split_pays) and y's rows have
 * no gaps: W's two column halves in one stacked launch, the low half into
 * scratch (n_tok rows of W's), the high half added to y, then scratch
 * added: y + hi + lo, the same order every run. */
static hydra_status linear_add(gpu_session *g, const gk_mat *w, gpu_act *x, int n_tok, float *y, int64_t y_stride,
                               const float *bias, float *scratch, gpu_op op)
{
    uint64_t half_bytes = 0;
    const bool split = n_tok > GK_MATVEC_MAX_TOK && y_stride == w->n_rows && gk_matmul_split_pays(w, n_tok) &&
                       quant_row_bytes(w->type, (uint64_t)w->n_cols / 2, &half_bytes);
    gk_mat half[2] = {*w, *w};
    half[0].n_cols = half[1].n_cols = w->n_cols / 2;
    half[1].data = w->data + half_bytes;
    const gk_mat *const hw[2] = {&half[0], &half[1]};
    if (!split || !gk_matmul_stacks(hw, 2))
        return linear(g, w, x, 0, n_tok, y, y_stride, bias, true, op);
    const gk_out out[2] = {{.y = scratch, .y_stride = w->n_rows},
                           {.y = y, .y_stride = w->n_rows, .bias = bias, .accumulate = true}};
    const int64_t x_col[2] = {0, w->n_cols / 2};
    TRY_ST(act_half(g, x));
    const gk_act xa = act_view(x, 0);
    TRY(gk_matmul_multi(g->stream, hw, out, 2, &xa, x_col, n_tok), "matmul (column halves)");
    TRY(gk_add_rows(g->stream, y, scratch, NULL, n_tok, w->n_rows), "adding the low half");
    gpu_prof_mark(g, op);
    return HYDRA_OK;
}

/* out = rmsnorm(x rows) as the matrices' input.  In decode the matrices
 * read the 8-bit form, which the norm kernel writes on the way. */
static hydra_status rmsnorm(gpu_session *g, const float *x, const gk_mat *gain, int n_rows, gpu_act *out)
{
    const int64_t n = g->w->hp.n_embd;
    const bool q8 = n_rows <= GK_MATVEC_MAX_TOK;
    act_bind(out, n, n_rows);
    TRY(gk_rmsnorm(g->stream, x, gw_vec(gain), g->w->hp.norm_eps, n_rows, n, out->f, q8 ? out->q : NULL,
                   q8 ? out->meta : NULL),
        "rmsnorm");
    out->q_ready = q8;
    gpu_prof_mark(g, OP_NORM);
    return HYDRA_OK;
}

static bool routes_in_attn_out(const gpu_session *g, int l, int n);
static hydra_status attn_out_route(gpu_session *g, int l);

static bool glu_pair(const gk_mat *gate, const gk_mat *up)
{
    return gate->type == up->type && gate->row_bytes == up->row_bytes && gate->n_rows == up->n_rows;
}

/* --- attention */

/* Q, K and V of the normed rows.  In decode, one launch for each run of
 * consecutive matrices of one type and row length (all three in one; two
 * where Q4_K_M's attn_v is Q6_K and Q, K are not, except for one token,
 * which takes the kernels' mixed launch); in prefill, one stacked launch
 * where the tiles take the three (gk_matmul_stacks), else one each. */
static hydra_status project_qkv(gpu_session *g, int l, int n)
{
    const gpu_weights *gw = &g->gw;
    const gk_mat *const w[3] = {gw_at(gw, l, W_ATTN_Q), gw_at(gw, l, W_ATTN_K), gw_at(gw, l, W_ATTN_V)};
    static const arch_role bias[3] = {W_ATTN_Q_BIAS, W_ATTN_K_BIAS, W_ATTN_V_BIAS};
    float *y[3] = {g->q, g->k, g->v};
    gk_out out[3];
    for (int i = 0; i < 3; i++)
        out[i] = (gk_out){.y = y[i], .y_stride = w[i]->n_rows, .bias = gw_vec(gw_at(gw, l, bias[i]))};
    if (n > GK_MATVEC_MAX_TOK && gk_matmul_stacks(w, 3))
        return linear_stack(g, w, out, 3, &g->xn, n, OP_QKV);
    if (n > GK_MATVEC_MAX_TOK) {
        for (int i = 0; i < 3; i++)
            TRY_ST(linear(g, w[i], &g->xn, 0, n, y[i], w[i]->n_rows, out[i].bias, false, OP_QKV));
        return HYDRA_OK;
    }
    const gk_act xa = act_view(&g->xn, 0);
    const bool mixed = n == 1 && w[1]->type == w[0]->type && gk_matvec_mixed(w[0]->type, w[2]->type) &&
                       w[1]->n_cols == w[0]->n_cols && w[2]->n_cols == w[0]->n_cols;
    for (int i = 0, run; i < 3; i += run) {
        for (run = 1; i + run < 3 && w[i + run]->type == w[i]->type && w[i + run]->n_cols == w[i]->n_cols; run++)
            ;
        run = mixed ? 3 : run;
        if (reads_8bit(w[i]))
            TRY_ST(act_quantize(g, &g->xn));
        TRY(gk_matvec_multi(g->stream, w + i, out + i, run, &xa, n), "Q/K/V");
    }
    gpu_prof_mark(g, OP_QKV);
    return HYDRA_OK;
}

static hydra_status attention(gpu_session *g, int l, const step_shape *sh)
{
    const arch_hparams *hp = &g->w->hp;
    const int n = (int)sh->n_tok;
    const int64_t dq = (int64_t)hp->n_head * hp->head_dim_k, datt = (int64_t)hp->n_head * hp->head_dim_v;
    const gpu_weights *gw = &g->gw;
    if (!g->xn_normed) /* else the previous layer's combine wrote it */
        TRY_ST(rmsnorm(g, g->x, gw_at(gw, l, W_ATTN_NORM), n, &g->xn));
    g->xn_normed = false;
    if (g->mla != NULL) /* deepseek2: attention in latent space (gpu_mla.c) */
        return gpu_mla_attention(g, l, sh);
    TRY_ST(project_qkv(g, l, n));

    const size_t kv_l = (size_t)(l - g->o.layer0); /* the cache holds the session's layers only */
    uint8_t *k_cache = g->k_cache + kv_l * (size_t)g->o.n_ctx * (size_t)g->k_row * g->kv_elem;
    uint8_t *v_cache = g->v_cache + kv_l * (size_t)g->o.n_ctx * (size_t)g->v_row * g->kv_elem;
    const gk_rope r = {.q = g->q, .k = g->k, .v = g->v, .q_norm = gw_vec(gw_at(gw, l, W_ATTN_Q_NORM)),
                       .k_norm = gw_vec(gw_at(gw, l, W_ATTN_K_NORM)), .eps = hp->norm_eps, .n_head = (int)hp->n_head,
                       .n_head_kv = (int)hp->n_head_kv, .head_dim_k = (int)hp->head_dim_k,
                       .head_dim_v = (int)hp->head_dim_v, .n_rot = (int)hp->n_rot,
                       .neox = g->w->arch->rope == ROPE_NEOX, .theta_scale = powf(hp->rope.base, -2.0f / (float)hp->n_rot),
                       .freq_scale = hp->rope.freq_scale, .attn_factor = hp->rope.attn_factor,
                       .ext_factor = hp->rope.ext_factor, .corr_low = hp->rope.corr_low,
                       .corr_high = hp->rope.corr_high, .k_cache = k_cache, .v_cache = v_cache, .kv_f16 = g->o.kv_type == QT_F16, .n_tok = n};
    /* Plain attention (no sinks or windows, which take gpu_attn_launch's
     * extended kernel): in decode the partials do the rope themselves (no
     * rope launch), and the combine also writes the output's 8-bit form
     * for the output projection (no quantize launch). */
    const bool plain = gw_at(gw, l, W_ATTN_SINKS)->data == NULL && g->w->layer[l].window == 0;
    const bool att_q8 = plain && n <= GK_MATVEC_MAX_TOK && hp->head_dim_v % 32 == 0 &&
                        reads_8bit(gw_at(gw, l, W_ATTN_OUT));
    const bool rope_in_attention = plain && n == 1;
    if (!rope_in_attention) {
        TRY(gk_rope_store(g->stream, &r, g->d_step), "rope");
        gpu_prof_mark(g, OP_ROPE);
    }

    /* The whole step's attention; prefill over an F16 cache takes it in
     * one tiled launch on the tensor cores (attn_prefill.cu). */
    const gk_attn whole = {.q = g->q, .k = k_cache, .v = v_cache, .kv_f16 = g->o.kv_type == QT_F16,
                           .k_row = g->k_row, .v_row = g->v_row, .n_head = (int)hp->n_head,
                           .n_head_kv = (int)hp->n_head_kv, .head_dim_k = (int)hp->head_dim_k,
                           .head_dim_v = (int)hp->head_dim_v, .scale = hp->kq_scale, .n_tok = n,
                           .max_kv = (int)sh->max_kv, .scratch = g->attn_scratch, .out = g->att.f};
    const bool tiled = plain && n > GK_MATVEC_MAX_TOK && gk_attention_tiles_fit(&whole);
    if (tiled)
        TRY(gk_attention_tiles(g->stream, &whole, g->d_step), "attention");
    /* Else token groups whose partials fit the attention scratch (sized at
     * creation): halved until they fit, so the same step always cuts the
     * same groups. */
    for (int t0 = 0, n_g; !tiled && t0 < n; t0 += n_g) {
        n_g = n - t0;
        while (n_g > 1 && gk_attention_scratch(n_g, (int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim_v,
                                               (int)sh->max_kv) > g->attn_scratch_floats)
            n_g = (n_g + 1) / 2;
        gk_attn a = whole;
        a.q = g->q + t0 * dq;
        a.n_tok = n_g;
        a.tok0 = t0;
        a.out = g->att.f + t0 * datt;
        a.out_q = att_q8 ? g->att.q + t0 * datt : NULL;
        a.out_meta = att_q8 ? g->att.meta + t0 * (datt / 32) * 4 : NULL;
        TRY(rope_in_attention ? gk_attention_rope(g->stream, &a, &r, g->d_step)
                              : gpu_attn_launch(g, l, &a), /* sinks, windows: gpu_arch.c */
            "attention");
    }
    gpu_prof_mark(g, OP_ATTN);
    act_bind(&g->att, datt, n);
    g->att.q_ready = att_q8;
    if (routes_in_attn_out(g, l, n)) /* implies att_q8 */
        return attn_out_route(g, l);
    /* g->y (expert outputs) is free until this layer's FFN */
    return linear_add(g, gw_at(gw, l, W_ATTN_OUT), &g->att, n, g->x, hp->n_embd, gw_vec(gw_at(gw, l, W_ATTN_OUT_BIAS)),
                      g->y, OP_ATTN_OUT);
}

/* --- feed-forward */

/* out (rows of n_embd) = down . swiglu(gate . xn, up . xn), added to out
 * when accumulate. */
static hydra_status ffn_dense(gpu_session *g, const gk_mat *gate, const gk_mat *up, const gk_mat *down, int n,
                              float *out, bool accumulate)
{
    const int64_t ff = gate->n_rows, embd = g->w->hp.n_embd;
    if (n <= GK_MATVEC_MAX_TOK && glu_pair(gate, up) && g->w->arch->act == ACT_SWIGLU) {
        if (reads_8bit(gate))
            TRY_ST(act_quantize(g, &g->xn));
        const gk_act xa = act_view(&g->xn, 0);
        const gk_rows rows = {.n_tok = n};
        const gk_out o = {.y = g->h.f, .y_stride = ff};
        TRY(gk_matvec(g->stream, gate, up, &xa, &rows, &o), "FFN gate/up");
    } else {
        TRY_ST(linear(g, gate, &g->xn, 0, n, g->h_gate, ff, NULL, false, OP_FFN));
        TRY_ST(linear(g, up, &g->xn, 0, n, g->h_up, ff, NULL, false, OP_FFN));
        TRY_ST(gpu_ffn_activate(g, 0, false, NULL, NULL, n, ff));
    }
    act_bind(&g->h, ff, n);
    return linear(g, down, &g->h, 0, n, out, embd, NULL, accumulate, OP_FFN);
}

static gk_gating gating_of(const model_weights *w)
{
    return (gk_gating){.n_expert = (int)w->hp.n_expert, .n_used = (int)w->hp.n_expert_used,
                       .sigmoid = w->hp.gating == GATING_SIGMOID, .renorm = w->hp.expert_weights_norm,
                       .scale = w->hp.expert_weights_scale};
}

static bool routes_by_word(const gpu_session *g, int l, int n);

/* Layer l's route words (n_expert_used of them). */
static unsigned long long *layer_route_words(const gpu_session *g, int l)
{
    return g->route_words + (size_t)l * g->w->hp.n_expert_used;
}

/* Decode: one matvec launch per matrix over every route (routes with
 * expert -1, the hybrid split's misses, are skipped by the kernels), or
 * gate/up and down in one launch (gk_experts: 16 blocks a route, one an
 * SM, each asking for its weights by bulk copies; tg128 on the H200
 * 505.6 -> 520.8 t/s, docs/PERFORMANCE.md, "CUDA decode, session 13") where it
 * takes the layer's matrices: plain SwiGLU, the type pairs and shapes of
 * experts.cu, the model's own expert stacks, not a hybrid session (its
 * side streams' kernels would share the SMs that the launch's blocks,
 * which wait for each other, need all at once). */
hydra_status gpu_experts_routed(gpu_session *g, int l, const gk_route *routes, int n_routes)
{
    const gpu_weights *gw = &g->gw;
    const gk_mat *gate = gw_at(gw, l, W_MOE_GATE), *up = gw_at(gw, l, W_MOE_UP), *down = gw_at(gw, l, W_MOE_DOWN);
    const int64_t ff = gate->n_rows, embd = g->w->hp.n_embd;
    if (reads_8bit(gate) || reads_8bit(up))
        TRY_ST(act_quantize(g, &g->xn));
    const gk_act xa = act_view(&g->xn, 0);
    const gk_rows by_token = {.routes = routes, .n_routes = n_routes, .act_by_token = true};
    if (g->hy == NULL && gpu_ffn_plain(g, l) && reads_8bit(gate) && gk_experts_fits(gate, up, down, n_routes)) {
        gk_experts_job e = {.gate = *gate, .up = *up, .down = *down, .x = xa, .rows = by_token,
                            .out = {.y = g->y, .y_stride = embd}, .h = g->h.f, .sync = g->experts_sync};
        if (routes == g->routes && n_routes == (int)g->w->hp.n_expert_used && routes_by_word(g, l, 1)) {
            e.ready = (gk_route_word){.words = layer_route_words(g, l), .step = g->d_step};
            e.x_raw = g->x;
            e.gain = gw_vec(gw_at(gw, l, W_FFN_NORM));
        }
        TRY(gk_experts(g->stream, &e), "experts gate/up + down");
        TRY_ST(gpu_expert_down_bias(g, l, routes, NULL, n_routes));
        gpu_prof_mark(g, OP_EXPERTS);
        return HYDRA_OK;
    }
    if (glu_pair(gate, up) && gpu_ffn_plain(g, l)) {
        const gk_out o = {.y = g->h.f, .y_stride = ff};
        TRY(gk_matvec(g->stream, gate, up, &xa, &by_token, &o), "experts gate/up");
    } else {
        const gk_out og = {.y = g->h_gate, .y_stride = ff}, ou = {.y = g->h_up, .y_stride = ff};
        TRY(gk_matvec(g->stream, gate, NULL, &xa, &by_token, &og), "experts gate");
        TRY(gk_matvec(g->stream, up, NULL, &xa, &by_token, &ou), "experts up");
        TRY_ST(gpu_ffn_activate(g, l, true, routes, NULL, n_routes, ff));
    }
    gpu_prof_mark(g, OP_EXP_UP);
    act_bind(&g->h, ff, n_routes);
    /* the down launch quantises its hidden row itself where it can */
    const bool staged = reads_8bit(down) && ff % 32 == 0 && ff <= 32768;
    if (reads_8bit(down) && !staged)
        TRY_ST(act_quantize(g, &g->h));
    const gk_act ha = act_view(&g->h, 0);
    const gk_rows by_route = {.routes = routes, .n_routes = n_routes, .act_by_token = false};
    const gk_out oy = {.y = g->y, .y_stride = embd};
    TRY(staged ? gk_matvec_staged(g->stream, down, &ha, &by_route, &oy)
               : gk_matvec(g->stream, down, NULL, &ha, &by_route, &oy),
        "experts down");
    TRY_ST(gpu_expert_down_bias(g, l, routes, NULL, n_routes));
    gpu_prof_mark(g, OP_EXP_DOWN);
    return HYDRA_OK;
}

/* Prefill: routes grouped by expert, one tiled launch per matrix. */
static hydra_status experts_grouped(gpu_session *g, int l, int n_routes)
{
    const gpu_weights *gw = &g->gw;
    const gk_mat *gate = gw_at(gw, l, W_MOE_GATE), *up = gw_at(gw, l, W_MOE_UP), *down = gw_at(gw, l, W_MOE_DOWN);
    const int64_t ff = gate->n_rows, embd = g->w->hp.n_embd;
    const gk_groups gr = {.order = g->order, .slot_of = g->slot_of, .tiles = g->tiles, .n_tiles = g->n_tiles,
                          .max_tiles = gk_moe_max_tiles(n_routes, (int)g->w->hp.n_expert)};
    TRY(gk_moe_group(g->stream, g->routes, n_routes, (int)g->w->hp.n_expert, &gr), "grouping routes");
    gpu_prof_mark(g, OP_GROUP);
    if (reads_8bit(gate) || reads_8bit(up))
        TRY_ST(act_half(g, &g->xn));
    const gk_act xa = act_view(&g->xn, 0);
    if (glu_pair(gate, up) && reads_8bit(gate) && gpu_ffn_plain(g, l)) { /* one launch, SwiGLU applied */
        const gk_out oh = {.y = g->h.f, .y_stride = ff};
        TRY(gk_matmul_grouped_glu(g->stream, gate, up, &xa, g->routes, &gr, true, &oh), "experts gate/up");
    } else {
        const gk_out og = {.y = g->h_gate, .y_stride = ff}, ou = {.y = g->h_up, .y_stride = ff};
        TRY(gk_matmul_grouped(g->stream, gate, &xa, g->routes, &gr, true, &og), "experts gate");
        TRY(gk_matmul_grouped(g->stream, up, &xa, g->routes, &gr, true, &ou), "experts up");
        TRY_ST(gpu_ffn_activate(g, l, true, g->routes, g->order, n_routes, ff));
    }
    gpu_prof_mark(g, OP_EXP_UP);
    act_bind(&g->h, ff, n_routes);
    if (reads_8bit(down))
        TRY_ST(act_half(g, &g->h));
    const gk_act ha = act_view(&g->h, 0);
    const gk_out oy = {.y = g->y, .y_stride = embd};
    TRY(gk_matmul_grouped(g->stream, down, &ha, g->routes, &gr, false, &oy), "experts down");
    TRY_ST(gpu_expert_down_bias(g, l, g->routes, g->order, n_routes));
    gpu_prof_mark(g, OP_EXP_DOWN);
    return HYDRA_OK;
}

/* Every route's expert, then each token's weighted sum added to x (and,
 * with next, the next layer's input norm). */
hydra_status gpu_moe_experts(gpu_session *g, int l, int n, const gk_norm_out *next)
{
    const gpu_weights *gw = &g->gw;
    const gk_gating gating = gating_of(g->w);
    const int n_routes = n * gating.n_used;
    const bool grouped = n > GK_MATVEC_MAX_TOK && gw_at(gw, l, W_MOE_GATE)->n_cols % GK_MATMUL_K == 0 &&
                         gw_at(gw, l, W_MOE_DOWN)->n_cols % GK_MATMUL_K == 0;
    TRY_ST(grouped ? experts_grouped(g, l, n_routes) : gpu_experts_routed(g, l, g->routes, n_routes));
    TRY(gk_moe_combine(g->stream, g->routes, grouped ? g->slot_of : NULL, g->y, n, gating.n_used,
                       g->w->hp.n_embd, g->x, next),
        "combine");
    gpu_prof_mark(g, OP_COMBINE);
    return HYDRA_OK;
}

/* Whether layer l's routing takes gk_router_topk: decode, a float router
 * and plain gating (softmax or sigmoid over all experts, no selection
 * bias, no groups). */
static bool router_fused(const gpu_session *g, int l, int n)
{
    const gpu_weights *gw = &g->gw;
    const arch_hparams *hp = &g->w->hp;
    const bool plain = (hp->gating == GATING_SOFTMAX || hp->gating == GATING_SIGMOID) && hp->n_expert_group <= 1 &&
                       gw_at(gw, l, W_MOE_PROBS_BIAS)->data == NULL;
    return n <= GK_MATVEC_MAX_TOK && plain && !reads_8bit(gw_at(gw, l, W_MOE_ROUTER)) &&
           hp->n_expert <= GK_TAIL_MAX_EXPERTS && hp->n_expert_used <= GK_TAIL_MAX_USED;
}

/* ... and, for one token of a row it can hold, also norms the FFN input
 * (gk_router_topk's norm), saving the RMSNorm launch. */
static bool router_norms(const gpu_session *g, int l, int n)
{
    const int64_t embd = g->w->hp.n_embd;
    return n == 1 && g->w->layer[l].moe && router_fused(g, l, n) && embd % 32 == 0 && embd <= GK_ROUTER_NORM_MAX;
}

/* Router logits, then each token's experts.  With router_fused the
 * router launch's last block selects them (tail.cuh), saving the top-k
 * launch; other cases take gpu_route_select.  norm (router_norms): the
 * FFN norm's gain; the launch norms x into xn itself. */
static hydra_status route(gpu_session *g, int l, int n, const gk_gating *gating, const gk_mat *norm)
{
    const gpu_weights *gw = &g->gw;
    const arch_hparams *hp = &g->w->hp;
    const gk_mat *router = gw_at(gw, l, W_MOE_ROUTER);
    const float *bias = gw_vec(gw_at(gw, l, W_MOE_ROUTER_BIAS));
    if (!router_fused(g, l, n)) {
        TRY_ST(linear(g, router, &g->xn, 0, n, g->router, gating->n_expert, bias, false, OP_ROUTER));
        TRY_ST(gpu_route_select(g, l, gating, n)); /* biases, groups, softmax over the chosen: gpu_arch.c */
        gpu_prof_mark(g, OP_TOPK);
        return HYDRA_OK;
    }
    if (norm != NULL && routes_in_attn_out(g, l, n)) { /* the attention output's launch routed */
        act_bind(&g->xn, hp->n_embd, n);
        g->xn.q_ready = true;
        return HYDRA_OK;
    }
    const gk_act xa = norm != NULL ? (gk_act){.f = g->x, .n = hp->n_embd} : act_view(&g->xn, 0);
    const gk_out out = {.y = g->router, .y_stride = gating->n_expert, .bias = bias};
    const gk_tail tail = {.counter = g->counter, .gating = *gating, .routes = g->routes};
    const gk_norm_out no = {.gain = norm != NULL ? gw_vec(norm) : NULL, .eps = hp->norm_eps, .y = g->xn.f,
                            .q = g->xn.q, .meta = g->xn.meta};
    TRY(gk_router_topk(g->stream, router, &xa, n, &out, &tail, norm != NULL ? &no : NULL), "router + top-k");
    if (norm != NULL) {
        act_bind(&g->xn, hp->n_embd, n);
        g->xn.q_ready = true;
    }
    gpu_prof_mark(g, OP_ROUTER);
    return HYDRA_OK;
}

/* Whether layer l's one-token attention output also routes, in one
 * launch (gk_attn_out_router: the RMSNorm is a scalar divisor, so each
 * block dots its new values of x with the router's columns): the
 * router_norms case, plain attention (its output's 8-bit form), shapes the
 * launch takes (so a quantised attention output: with the rest, the
 * attention's launch wrote its 8-bit form, att_q8), and room for its
 * partial sums in g->y (gk_attn_out_router_scratch; g->y holds n_used
 * rows of n_embd at least and is free until the experts' down
 * projection).  Not in a tensor
 * split, whose x is a partial sum until the all-reduce.  Else the two
 * launches, attention output then router. */
static bool routes_in_attn_out(const gpu_session *g, int l, int n)
{
    const gpu_weights *gw = &g->gw;
    const arch_hparams *hp = &g->w->hp;
    const gk_gating gating = gating_of(g->w);
    const bool plain = gw_at(gw, l, W_ATTN_SINKS)->data == NULL && g->w->layer[l].window == 0;
    return router_norms(g, l, n) && g->mla == NULL && !g->o.tensor_part && plain && hp->head_dim_v % 32 == 0 &&
           gk_attn_out_router_scratch(hp->n_embd, gating.n_expert) <= (int64_t)gating.n_used * hp->n_embd &&
           gk_attn_out_router_fits(gw_at(gw, l, W_ATTN_OUT), gw_at(gw, l, W_MOE_ROUTER), &gating);
}

/* Whether layer l's routes go from the attention output's launch to the
 * experts' one launch by the layer's route word (gk_route_word, kernels.h):
 * the experts' launch then norms x itself, so nothing else may read the
 * normed row: no shared expert.  Decided from the layer alone, so the two
 * launches agree. */
static bool routes_by_word(const gpu_session *g, int l, int n)
{
    const gpu_weights *gw = &g->gw;
    const gk_mat *gate = gw_at(gw, l, W_MOE_GATE), *up = gw_at(gw, l, W_MOE_UP), *down = gw_at(gw, l, W_MOE_DOWN);
    return !g->o.no_route_words && g->hy == NULL && routes_in_attn_out(g, l, n) &&
           gw_at(gw, l, W_SHEXP_GATE)->data == NULL && gpu_ffn_plain(g, l) && reads_8bit(gate) &&
           gk_experts_fits(gate, up, down, (int)g->w->hp.n_expert_used);
}

/* x += the attention output projection, then the router of the new x,
 * its norm into xn and the routes, in one launch (routes_in_attn_out). */
static hydra_status attn_out_route(gpu_session *g, int l)
{
    const gpu_weights *gw = &g->gw;
    const arch_hparams *hp = &g->w->hp;
    const gk_aor a = {.wo = *gw_at(gw, l, W_ATTN_OUT), .wo_bias = gw_vec(gw_at(gw, l, W_ATTN_OUT_BIAS)), .x = g->x,
                      .router = *gw_at(gw, l, W_MOE_ROUTER),
                      .router_bias = gw_vec(gw_at(gw, l, W_MOE_ROUTER_BIAS)), .logits = g->router,
                      .tail = {.counter = g->counter, .gating = gating_of(g->w), .routes = g->routes},
                      .norm = {.gain = gw_vec(gw_at(gw, l, W_FFN_NORM)), .eps = hp->norm_eps, .y = g->xn.f,
                               .q = g->xn.q, .meta = g->xn.meta},
                      .partial = g->y,
                      .ready = {.words = routes_by_word(g, l, 1) ? layer_route_words(g, l) : NULL, .step = g->d_step}};
    const gk_act att = act_view(&g->att, 0);
    TRY(gk_attn_out_router(g->stream, &a, &att), "attention output + router");
    g->stats.route_words += a.ready.words != NULL;
    gpu_prof_mark(g, OP_AOR);
    return HYDRA_OK;
}

static hydra_status moe(gpu_session *g, int l, int n, const gk_mat *norm)
{
    const gpu_weights *gw = &g->gw;
    const gk_gating gating = gating_of(g->w);
    const int64_t embd = g->w->hp.n_embd;
    TRY_ST(route(g, l, n, &gating, norm));
    const gk_mat *sh_gate = gw_at(gw, l, W_SHEXP_GATE);
    /* Without a shared expert the combine ends the layer: it also norms
     * the new rows into the next layer's input. */
    const bool ends = sh_gate->data == NULL && l + 1 < gpu_layer_end(g) && /* the next layer is on this device */
                      !g->o.tensor_part; /* a tensor split's x is a partial sum until the all-reduce */
    const bool q8 = n <= GK_MATVEC_MAX_TOK;
    const gk_norm_out next = {.gain = gw_vec(gw_at(gw, l + 1 < (int)g->w->hp.n_layer ? l + 1 : l, W_ATTN_NORM)),
                              .eps = g->w->hp.norm_eps, .y = g->xn.f, .q = q8 ? g->xn.q : NULL,
                              .meta = q8 ? g->xn.meta : NULL};
    if (g->hy != NULL) /* the hybrid split: slab hits here, misses on the CPU (gpu_hybrid.c) */
        TRY_ST(gpu_hybrid_experts(g, l, n, ends ? &next : NULL));
    else
        TRY_ST(gpu_moe_experts(g, l, n, ends ? &next : NULL));
    if (ends) {
        act_bind(&g->xn, embd, n);
        g->xn.q_ready = q8;
        g->xn_normed = true;
    }
    if (sh_gate->data == NULL)
        return HYDRA_OK;
    const gk_mat *sh_router = gw_at(gw, l, W_SHEXP_ROUTER);
    if (sh_router->data != NULL)
        TRY_ST(linear(g, sh_router, &g->xn, 0, n, g->shexp_gate, 1, NULL, false, OP_FFN));
    TRY_ST(ffn_dense(g, sh_gate, gw_at(gw, l, W_SHEXP_UP), gw_at(gw, l, W_SHEXP_DOWN), n, g->y, false));
    TRY(gk_add_rows(g->stream, g->x, g->y, sh_router->data != NULL ? g->shexp_gate : NULL, n, embd),
        "shared expert add");
    gpu_prof_mark(g, OP_FFN);
    return HYDRA_OK;
}

static hydra_status feed_forward(gpu_session *g, int l, int n)
{
    const gpu_weights *gw = &g->gw;
    if (router_norms(g, l, n))
        return moe(g, l, n, gw_at(gw, l, W_FFN_NORM));
    TRY_ST(rmsnorm(g, g->x, gw_at(gw, l, W_FFN_NORM), n, &g->xn));
    if (g->w->layer[l].moe)
        return moe(g, l, n, NULL);
    return ffn_dense(g, gw_at(gw, l, W_FFN_GATE), gw_at(gw, l, W_FFN_UP), gw_at(gw, l, W_FFN_DOWN), n, g->x, true);
}

/* --- the step */

/* x = the tokens' embedding rows, and with them the first layer's input
 * norm into xn as rmsnorm() writes it (gk_embed_norm: one launch where
 * there were two). */
static hydra_status embed(gpu_session *g, int n)
{
    const arch_hparams *hp = &g->w->hp;
    const bool q8 = n <= GK_MATVEC_MAX_TOK;
    const gk_norm_out norm = {.gain = gw_vec(gw_at(&g->gw, 0, W_ATTN_NORM)), .eps = hp->norm_eps, .y = g->xn.f,
                              .q = q8 ? g->xn.q : NULL, .meta = q8 ? g->xn.meta : NULL};
    TRY(gk_embed_norm(g->stream, &g->gw.global[W_TOKEN_EMBD], g->d_tokens, n, g->x, &norm),
        "embedding + first norm");
    act_bind(&g->xn, hp->n_embd, n);
    g->xn.q_ready = q8;
    g->xn_normed = true;
    gpu_prof_mark(g, OP_EMBED);
    return HYDRA_OK;
}

hydra_status gpu_enqueue_step(gpu_session *g, const step_shape *sh)
{
    const arch_hparams *hp = &g->w->hp;
    const int n = (int)sh->n_tok;
    g->xn_normed = false;
    if (g->o.layer0 == 0) /* else a layer split's later part: x came from the previous device */
        TRY_ST(embed(g, n));
    for (int l = g->o.layer0; l < gpu_layer_end(g); l++) {
        TRY_ST(attention(g, l, sh));
        TRY_ST(feed_forward(g, l, n));
    }
    if (gpu_layer_end(g) < (int)hp->n_layer)
        return HYDRA_OK; /* the output head is on a later device */
    return gpu_enqueue_head(g, sh);
}

/* The one-row head's stores cross the bus into the pinned row while it
 * reads the vocabulary's rows, where a copy after it held each decode
 * step up by its transfer (608 KB for Qwen3-30B-A3B's 151936 logits:
 * ~17 us a token on the H200; docs/PERFORMANCE.md, session 14). */
bool gpu_head_to_row(const gpu_session *g, int64_t n, bool all_rows)
{
    return g->logits_row_dev != NULL && (n == 1 || !all_rows) && gk_matvec_head_fits(&g->gw.global[W_OUTPUT]);
}

hydra_status gpu_enqueue_head(gpu_session *g, const step_shape *sh)
{
    const arch_hparams *hp = &g->w->hp;
    const int n = (int)sh->n_tok;
    const int first = sh->all_rows ? 0 : n - 1;
    const float *x = g->x + (int64_t)first * hp->n_embd;
    const gk_mat *w = &g->gw.global[W_OUTPUT], *norm = &g->gw.global[W_OUTPUT_NORM];
    if (n - first > 1 || !gk_matvec_head_fits(w)) {
        TRY_ST(rmsnorm(g, x, norm, n - first, &g->xn));
        return linear(g, w, &g->xn, 0, n - first, g->logits, hp->n_vocab, NULL, false, OP_OUTPUT);
    }
    /* one row through the vocabulary: the kernel that reads it at the
     * memory's pace (matvec_head.cu), which also applies the output norm */
    const gk_act xa = {.f = x, .n = hp->n_embd};
    const gk_norm_out no = {.gain = gw_vec(norm), .eps = hp->norm_eps, .y = g->xn.f, .q = g->xn.q,
                            .meta = g->xn.meta};
    const gk_out out = {.y = gpu_head_to_row(g, n, sh->all_rows) ? g->logits_row_dev : g->logits,
                        .y_stride = hp->n_vocab};
    TRY(gk_matvec_head(g->stream, w, &xa, &out, &no), "output norm + projection");
    act_bind(&g->xn, hp->n_embd, 1); /* xn is not written where the launch norms the row itself */
    gpu_prof_mark(g, OP_OUTPUT);
    return HYDRA_OK;
}

/* A tensor split's part (gpu_tensor.c): the sublayer's input norm, then
 * x zeroed when zero_x (every part but the main one), then the sublayer,
 * which adds the part's partial output into x; the all-reduce that
 * follows sums x once plus every part's partial. */
hydra_status gpu_enqueue_sublayer(gpu_session *g, int l, const step_shape *sh, bool ffn, bool zero_x)
{
    const gpu_weights *gw = &g->gw;
    const int n = (int)sh->n_tok;
    TRY_ST(rmsnorm(g, g->x, gw_at(gw, l, ffn ? W_FFN_NORM : W_ATTN_NORM), n, &g->xn));
    if (zero_x)
        TRY(gpuMemsetAsync(g->x, 0, sizeof(float) * (size_t)n * g->w->hp.n_embd, g->stream), "zeroing a part's x");
    if (!ffn) {
        g->xn_normed = true;
        return attention(g, l, sh);
    }
    if (g->w->layer[l].moe)
        return moe(g, l, n, NULL);
    return ffn_dense(g, gw_at(gw, l, W_FFN_GATE), gw_at(gw, l, W_FFN_UP), gw_at(gw, l, W_FFN_DOWN), n, g->x, true);
}

/* --- what gpu_arch.c and gpu_mla.c borrow (gpu_arch.h) */

hydra_status gpu_linear(gpu_session *g, const gk_mat *w, gpu_act *x, int64_t row0, int n_tok, float *y,
                        int64_t y_stride, const float *bias, bool accumulate, gpu_op op)
{
    return linear(g, w, x, row0, n_tok, y, y_stride, bias, accumulate, op);
}

hydra_status gpu_act_quantize(gpu_session *g, gpu_act *a)
{
    return act_quantize(g, a);
}

void gpu_act_bind(gpu_act *a, int64_t n, int n_rows)
{
    act_bind(a, n, n_rows);
}
