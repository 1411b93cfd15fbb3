/*
 * moe.c — router, gating + top-k, the expert computation over a list of
 * routes, the shared expert (moe.h).  Formulas follow llama.cpp's
 * build_moe_ffn for these architectures: probabilities from the gating
 * function over all experts, top-k by probability, the selected
 * probabilities as weights, optionally divided by their sum, then scaled.
 */
#include "moe.h"

#include "../kernels/cpu/matmul.h"
#include "../kernels/cpu/ops.h"
#include "error.h"
#include "quant.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

moe_gating moe_gating_of(const model_weights *w, const layer_weights *lw)
{
    return (moe_gating){
        .func = (arch_gating)w->hp.gating,
        .n_expert = (int)w->hp.n_expert,
        .n_used = (int)w->hp.n_expert_used,
        .renorm = w->hp.expert_weights_norm,
        .scale = w->hp.expert_weights_scale,
        .sel_bias = wt_f32(&lw->w[W_MOE_PROBS_BIAS]),
        .n_group = (int)w->hp.n_expert_group,
        .n_group_used = (int)w->hp.n_expert_group_used,
    };
}

/* --- scratch */

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Bytes of the widest activation row of n values any matrix of `roles` in
 * w reads (gathered expert inputs). */
static size_t widest_act_row(const model_weights *w, const arch_role *roles, int n_roles, int64_t n)
{
    size_t widest = (size_t)n * sizeof(float);
    for (uint32_t l = 0; l < w->hp.n_layer; l++)
        for (int r = 0; r < n_roles; r++) {
            const wtensor *t = &w->layer[l].w[roles[r]];
            if (t->data != NULL && matmul_act_bytes(t->type, n) > widest)
                widest = matmul_act_bytes(t->type, n);
        }
    return widest;
}

static bool same_format(uint32_t a, uint32_t b)
{
    return quant_traits_of(a)->vec_dot_type == quant_traits_of(b)->vec_dot_type;
}

/* Whether some layer's expert gate and up matrices read their input in
 * different formats (then the gathered inputs need a copy for each). */
static bool gate_up_formats_differ(const model_weights *w)
{
    for (uint32_t l = 0; l < w->hp.n_layer; l++) {
        const wtensor *gate = &w->layer[l].w[W_MOE_GATE], *up = &w->layer[l].w[W_MOE_UP];
        if (gate->data != NULL && up->data != NULL && !same_format(gate->type, up->type))
            return true;
    }
    return false;
}

static hydra_status add_width(moe_scratch *s, const model_weights *w, int64_t width)
{
    if (width == 0)
        return HYDRA_OK;
    for (int i = 0; i < s->n_widths; i++)
        if (s->hidden[i].n == width)
            return HYDRA_OK;
    return act_init(&s->hidden[s->n_widths++], w, width, s->max_rows);
}

static act_set *hidden_for(moe_scratch *s, int64_t width)
{
    for (int i = 0; i < s->n_widths; i++)
        if (s->hidden[i].n == width)
            return &s->hidden[i];
    return NULL; /* moe_scratch_init added every width a layer has */
}

hydra_status moe_scratch_init(moe_scratch *s, const model_weights *w, int64_t max_tokens)
{
    memset(s, 0, sizeof *s);
    const arch_hparams *hp = &w->hp;
    s->n_expert = (int)hp->n_expert;
    s->act = w->arch->act;
    s->max_rows = max64(max_tokens * (int64_t)hp->n_expert_used, max_tokens);
    const int64_t ff_max = max64(max64(hp->n_ff_exp, hp->n_ff_shexp), hp->n_ff);
    static const arch_role ffn_inputs[] = {W_MOE_GATE, W_MOE_UP};
    const size_t gathered_row = widest_act_row(w, ffn_inputs, 2, hp->n_embd);
    const size_t rows = (size_t)s->max_rows;
    s->probs = malloc(sizeof(float) * (size_t)(s->n_expert + 1));
    s->chosen = malloc((size_t)s->n_expert + 1);
    s->group_score = malloc(sizeof(float) * (size_t)(s->n_expert + 1));
    s->group_taken = malloc((size_t)s->n_expert + 1);
    s->order = malloc(sizeof(int32_t) * rows);
    s->start = malloc(sizeof(int32_t) * (size_t)(s->n_expert + 2));
    s->gathered = malloc(gathered_row * rows * (gate_up_formats_differ(w) ? 2 : 1));
    s->h_gate = malloc(sizeof(float) * rows * (size_t)ff_max);
    s->h_up = malloc(sizeof(float) * rows * (size_t)ff_max);
    s->y = malloc(sizeof(float) * rows * hp->n_embd);
    hydra_status st = HYDRA_OK;
    if (!s->probs || !s->chosen || !s->group_score || !s->group_taken || !s->order || !s->start || !s->gathered || !s->h_gate || !s->h_up || !s->y)
        st = hydra_fail(HYDRA_ERR_NOMEM, "MoE scratch for %lld rows of FFN width %lld", (long long)s->max_rows,
                        (long long)ff_max);
    if (st == HYDRA_OK && hp->n_expert > 0)
        st = add_width(s, w, hp->n_ff_exp);
    if (st == HYDRA_OK)
        st = add_width(s, w, hp->n_ff_shexp);
    if (st == HYDRA_OK)
        st = add_width(s, w, hp->n_ff);
    if (st != HYDRA_OK)
        moe_scratch_free(s);
    return st;
}

void moe_scratch_free(moe_scratch *s)
{
    free(s->probs);
    free(s->chosen);
    free(s->group_score);
    free(s->group_taken);
    free(s->order);
    free(s->start);
    free(s->gathered);
    free(s->h_gate);
    free(s->h_up);
    free(s->y);
    for (int i = 0; i < s->n_widths; i++)
        act_free(&s->hidden[i]);
    memset(s, 0, sizeof *s);
}

/* --- router and selection */

/* y[t][r] = W[r] . x[t] for every row of x. */
static void mat_rows(thread_pool *pool, const wtensor *wt, const uint8_t *wdata, act_set *x, float *y)
{
    size_t stride;
    const void *xq = act_for(x, pool, wt->type, &stride);
    matmul(pool, wt->type, wdata, wt->row_bytes, wt->ne[1], wt->ne[0], xq, stride, x->n_rows, y, (size_t)wt->ne[1]);
}

void moe_router(thread_pool *pool, const layer_weights *lw, act_set *x, float *logits)
{
    const wtensor *r = &lw->w[W_MOE_ROUTER], *bias = &lw->w[W_MOE_ROUTER_BIAS];
    mat_rows(pool, r, r->data, x, logits);
    if (bias->data != NULL)
        for (int64_t t = 0; t < x->n_rows; t++)
            op_axpy(logits + t * r->ne[1], 1.0f, wt_f32(bias), r->ne[1]);
}

/* The gating output of every expert; with SOFTMAX_WEIGHT the logits
 * themselves (the softmax comes after the choice). */
static void gate_probs(arch_gating func, const float *logits, int n, float *probs)
{
    memcpy(probs, logits, sizeof(float) * (size_t)n);
    if (func == GATING_SOFTMAX) {
        op_softmax(probs, n);
        return;
    }
    if (func == GATING_SIGMOID)
        for (int e = 0; e < n; e++)
            probs[e] = 1.0f / (1.0f + expf(-probs[e]));
}

/* What experts are chosen by: the gating output plus the selection bias. */
static float sel_score(const moe_gating *g, const float *probs, int e)
{
    return g->sel_bias ? probs[e] + g->sel_bias[e] : probs[e];
}

/* The unchosen expert of highest selection score, the lower id on a tie
 * (the scan is ascending and only a strictly greater value replaces).  NaN
 * never wins, but some expert is always returned. */
static int pick_best(const moe_gating *g, const float *probs, const uint8_t *chosen)
{
    int best = -1;
    float best_score = 0.0f;
    for (int e = 0; e < g->n_expert; e++) {
        if (chosen[e])
            continue;
        const float score = sel_score(g, probs, e);
        if (best < 0 || score > best_score)
            best = e, best_score = score;
    }
    return best;
}

/* Sum of the two best selection scores of a group (DeepSeek-V3's group
 * score, as llama.cpp's build_moe_ffn computes it). */
static float group_score(const moe_gating *g, const float *probs, int first, int n)
{
    float top1 = -INFINITY, top2 = -INFINITY;
    for (int e = first; e < first + n; e++) {
        const float score = sel_score(g, probs, e);
        if (score > top1)
            top2 = top1, top1 = score;
        else if (score > top2)
            top2 = score;
    }
    return n >= 2 ? top1 + top2 : top1;
}

/* Marks in s->chosen the experts of every group but the n_group_used best,
 * so that top-k sees only those. */
static void exclude_groups(const moe_gating *g, moe_scratch *s)
{
    const int per_group = g->n_expert / g->n_group;
    for (int grp = 0; grp < g->n_group; grp++) {
        s->group_score[grp] = group_score(g, s->probs, grp * per_group, per_group);
        s->group_taken[grp] = 0;
    }
    for (int k = 0; k < g->n_group_used; k++) {
        int best = -1;
        for (int grp = 0; grp < g->n_group; grp++)
            if (!s->group_taken[grp] && (best < 0 || s->group_score[grp] > s->group_score[best]))
                best = grp;
        s->group_taken[best] = 1;
    }
    for (int e = 0; e < g->n_expert; e++)
        s->chosen[e] = !s->group_taken[e / per_group];
}

/* The chosen experts' weights: softmax over them (SOFTMAX_WEIGHT), divided
 * by their sum (renorm; the sum clamped below as llama.cpp does, so that
 * tiny sigmoid outputs cannot blow up), scaled. */
static void finish_weights(const moe_gating *g, moe_route *r)
{
    if (g->func == GATING_SOFTMAX_WEIGHT) {
        float max = r[0].weight;
        for (int k = 1; k < g->n_used; k++)
            max = fmaxf(max, r[k].weight);
        double sum = 0.0;
        for (int k = 0; k < g->n_used; k++)
            sum += (r[k].weight = expf(r[k].weight - max));
        for (int k = 0; k < g->n_used; k++)
            r[k].weight = (float)(r[k].weight / sum);
    }
    if (g->renorm) {
        float sum = 0.0f;
        for (int k = 0; k < g->n_used; k++)
            sum += r[k].weight;
        sum = fmaxf(sum, 6.103515625e-5f);
        for (int k = 0; k < g->n_used; k++)
            r[k].weight /= sum;
    }
    for (int k = 0; k < g->n_used; k++)
        r[k].weight *= g->scale;
}

void moe_select(const moe_gating *g, moe_scratch *s, const float *logits, int64_t n_tok, moe_route *routes)
{
    for (int64_t t = 0; t < n_tok; t++) {
        moe_route *r = &routes[t * g->n_used];
        gate_probs(g->func, logits + t * g->n_expert, g->n_expert, s->probs);
        memset(s->chosen, 0, (size_t)g->n_expert);
        if (g->n_group > 1)
            exclude_groups(g, s);
        for (int k = 0; k < g->n_used; k++) {
            int e = pick_best(g, s->probs, s->chosen);
            s->chosen[e] = 1;
            r[k] = (moe_route){.token = (int32_t)t, .expert = e, .weight = s->probs[e]};
        }
        finish_weights(g, r);
    }
}

/* --- expert computation */

/* Counting sort of routes by expert, stable: order[] lists route indices,
 * start[e]..start[e+1] those of expert e. */
static void group_by_expert(moe_scratch *s, const moe_route *routes, int64_t n_routes)
{
    memset(s->start, 0, sizeof(int32_t) * (size_t)(s->n_expert + 2));
    for (int64_t i = 0; i < n_routes; i++)
        s->start[routes[i].expert + 2]++;
    for (int e = 0; e < s->n_expert; e++)
        s->start[e + 2] += s->start[e + 1];
    for (int64_t i = 0; i < n_routes; i++)
        s->order[s->start[routes[i].expert + 1]++] = (int32_t)i;
}

/* Copies the converted rows of the routes' tokens next to each other, at dst. */
static const uint8_t *gather(uint8_t *dst, const uint8_t *rows, size_t stride, const moe_route *routes,
                             const int32_t *idx, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + (size_t)i * stride, rows + (size_t)routes[idx[i]].token * stride, stride);
    return dst;
}

/* Row e of a per-expert bias (ne {width, n_expert}); NULL when unbound. */
static const float *expert_bias(const wtensor *bias, int e)
{
    return bias->data ? wt_f32(bias) + (size_t)e * (size_t)bias->ne[0] : NULL;
}

static void add_bias(float *y, const float *bias, int64_t n, int64_t width)
{
    if (bias != NULL)
        for (int64_t t = 0; t < n; t++)
            op_axpy(y + t * width, 1.0f, bias, width);
}

/* The activation of values [v0, v1) of h_gate and h_up, into h_gate. */
static void activate_range(const moe_scratch *s, int64_t v0, int64_t v1)
{
    /* gpt-oss's constants (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE) */
    static const float oai_alpha = 1.702f, oai_limit = 7.0f;
    if (s->act == ACT_SWIGLU_OAI)
        op_swiglu_oai(s->h_gate + v0, s->h_gate + v0, s->h_up + v0, v1 - v0, oai_alpha, oai_limit);
    else
        op_swiglu(s->h_gate + v0, s->h_gate + v0, s->h_up + v0, v1 - v0);
}

/* Rows of ff values a thread activates per claim. */
enum { ACTIVATE_ROWS = 4 };

typedef struct activate_job {
    const moe_scratch *s;
    int64_t n_rows, ff;
    _Atomic int64_t next;
} activate_job;

static void activate_task(void *ctx, int thread_idx, int n_threads)
{
    (void)thread_idx;
    (void)n_threads;
    activate_job *job = ctx;
    for (int64_t r; (r = atomic_fetch_add_explicit(&job->next, ACTIVATE_ROWS, memory_order_relaxed)) < job->n_rows;) {
        const int64_t end = r + ACTIVATE_ROWS < job->n_rows ? r + ACTIVATE_ROWS : job->n_rows;
        activate_range(job->s, r * job->ff, end * job->ff);
    }
}

/* The activation of n rows of ff values, into h_gate, in a parallel
 * region: a step of several sequences activates tens of rows (one per
 * route), each an expf per value, which the caller alone would take while
 * the other threads wait. */
static void activate(thread_pool *pool, const moe_scratch *s, int64_t n, int64_t ff)
{
    activate_job job = {.s = s, .n_rows = n, .ff = ff};
    atomic_init(&job.next, 0);
    if (n <= ACTIVATE_ROWS)
        activate_task(&job, 0, 1);
    else
        pool_run(pool, activate_task, &job);
}

/* y = down . act(h_gate, h_up) (+ bias) for n rows (h_gate, h_up already
 * hold gate . x and up . x). */
static void ffn_out(thread_pool *pool, moe_scratch *s, const wtensor *down, const uint8_t *down_w,
                    const float *bias, int64_t n, float *y)
{
    const int64_t ff = down->ne[0];
    activate(pool, s, n, ff);
    act_set *h = hidden_for(s, ff);
    act_bind(h, s->h_gate, n);
    size_t stride;
    const void *hq = act_for(h, pool, down->type, &stride);
    matmul(pool, down->type, down_w, down->row_bytes, down->ne[1], ff, hq, stride, n, y, (size_t)down->ne[1]);
    add_bias(y, bias, n, down->ne[1]);
}

/* out = W . x (+ bias) for n rows of converted input x (stride bytes apart). */
static void ffn_in(thread_pool *pool, const wtensor *w, const uint8_t *w_data, const float *bias, const void *x,
                   size_t stride, int64_t n, float *out)
{
    matmul(pool, w->type, w_data, w->row_bytes, w->ne[1], w->ne[0], x, stride, n, out, (size_t)w->ne[1]);
    add_bias(out, bias, n, w->ne[1]);
}

/* The experts of one layer, in two passes over the experts that some route
 * chose: first those chosen by several rows, then those chosen by one. */
enum { MULTI_ROW, SINGLE_ROW };

static bool in_pass(int pass, int64_t n_rows)
{
    return n_rows > 0 && (pass == MULTI_ROW) == (n_rows > 1);
}

/* Adds expert e's bias row (when bound) to its n rows of width at slot. */
static void add_expert_bias(const wtensor *bias, int e, float *rows, int64_t slot, int64_t n, int64_t width)
{
    add_bias(rows + slot * width, expert_bias(bias, e), n, width);
}

/* The gate and up products of every chosen expert in one parallel region
 * (matmul_batch), multi-row experts first, as its front-and-back schedule
 * wants: an expert chosen by several rows multiplies their gathered inputs
 * with each weight block read once; one chosen by one row reads its token's
 * input in place.  Hidden rows land in h_gate/h_up by slot (the route's
 * place in the grouped order). */
static void experts_in(thread_pool *pool, moe_scratch *s, const layer_weights *lw, act_set *x,
                       const moe_route *routes, int64_t n_routes)
{
    const wtensor *gate = &lw->w[W_MOE_GATE], *up = &lw->w[W_MOE_UP];
    const int64_t ff = gate->ne[1];
    size_t sg, su;
    const uint8_t *xg = act_for(x, pool, gate->type, &sg);
    const uint8_t *xu = act_for(x, pool, up->type, &su);
    const bool one_input = same_format(gate->type, up->type);
    uint8_t *gathered_up = s->gathered + (size_t)n_routes * sg; /* moe_scratch_init sized it when formats differ */
    matmul_item items[2 * s->n_expert];
    int n_items = 0;
    for (int pass = MULTI_ROW; pass <= SINGLE_ROW; pass++)
        for (int e = 0; e < s->n_expert; e++) {
            const int64_t slot = s->start[e], n = s->start[e + 1] - slot;
            if (!in_pass(pass, n))
                continue;
            const int32_t *idx = &s->order[slot];
            const uint8_t *in_g, *in_u;
            if (n == 1) {
                in_g = xg + (size_t)routes[idx[0]].token * sg;
                in_u = xu + (size_t)routes[idx[0]].token * su;
            } else {
                in_g = gather(s->gathered + (size_t)slot * sg, xg, sg, routes, idx, n);
                in_u = one_input ? in_g : gather(gathered_up + (size_t)slot * su, xu, su, routes, idx, n);
            }
            items[n_items++] = (matmul_item){gate->type, gate->data + (size_t)e * gate->mat_bytes, gate->row_bytes,
                                             ff, gate->ne[0], in_g, sg, n, s->h_gate + slot * ff, (size_t)ff};
            items[n_items++] = (matmul_item){up->type, up->data + (size_t)e * up->mat_bytes, up->row_bytes,
                                             up->ne[1], up->ne[0], in_u, su, n, s->h_up + slot * ff, (size_t)ff};
        }
    matmul_batch(pool, items, n_items);
    for (int e = 0; e < s->n_expert; e++) {
        const int64_t slot = s->start[e], n = s->start[e + 1] - slot;
        add_expert_bias(&lw->w[W_MOE_GATE_BIAS], e, s->h_gate, slot, n, ff);
        add_expert_bias(&lw->w[W_MOE_UP_BIAS], e, s->h_up, slot, n, ff);
    }
}

/* The down products of every chosen expert in one region, after the
 * activation and one conversion of all hidden rows; outputs land in s->y
 * by slot. */
static void experts_out(thread_pool *pool, moe_scratch *s, const layer_weights *lw, int64_t n_routes)
{
    const wtensor *down = &lw->w[W_MOE_DOWN];
    const int64_t ff = down->ne[0], embd = down->ne[1];
    activate(pool, s, n_routes, ff);
    act_set *h = hidden_for(s, ff);
    act_bind(h, s->h_gate, n_routes);
    size_t stride;
    const uint8_t *hq = act_for(h, pool, down->type, &stride);
    matmul_item items[s->n_expert];
    int n_items = 0;
    for (int pass = MULTI_ROW; pass <= SINGLE_ROW; pass++)
        for (int e = 0; e < s->n_expert; e++) {
            const int64_t slot = s->start[e], n = s->start[e + 1] - slot;
            if (in_pass(pass, n))
                items[n_items++] = (matmul_item){down->type, down->data + (size_t)e * down->mat_bytes,
                                                 down->row_bytes, embd, ff, hq + (size_t)slot * stride, stride, n,
                                                 s->y + slot * embd, (size_t)embd};
        }
    matmul_batch(pool, items, n_items);
    for (int e = 0; e < s->n_expert; e++)
        add_expert_bias(&lw->w[W_MOE_DOWN_BIAS], e, s->y, s->start[e], s->start[e + 1] - s->start[e], embd);
}

void moe_experts(thread_pool *pool, moe_scratch *s, const layer_weights *lw, act_set *x, const moe_route *routes,
                 int64_t n_routes, float *out, size_t out_stride)
{
    const int64_t embd = lw->w[W_MOE_DOWN].ne[1];
    group_by_expert(s, routes, n_routes);
    experts_in(pool, s, lw, x, routes, n_routes);
    experts_out(pool, s, lw, n_routes);
    /* Slots run in expert order, so each token's sum is in ascending expert
     * id whatever the order of the routes. */
    for (int64_t slot = 0; slot < n_routes; slot++) {
        const moe_route *r = &routes[s->order[slot]];
        op_axpy(out + (size_t)r->token * out_stride, r->weight, s->y + slot * embd, embd);
    }
}

void ffn_swiglu(thread_pool *pool, moe_scratch *s, const wtensor *gate, const wtensor *up, const wtensor *down,
                act_set *x, const float *row_scale, float *out, size_t out_stride)
{
    const int64_t embd = down->ne[1];
    size_t sg, su;
    const void *xg = act_for(x, pool, gate->type, &sg);
    const void *xu = act_for(x, pool, up->type, &su);
    ffn_in(pool, gate, gate->data, NULL, xg, sg, x->n_rows, s->h_gate);
    ffn_in(pool, up, up->data, NULL, xu, su, x->n_rows, s->h_up);
    ffn_out(pool, s, down, down->data, NULL, x->n_rows, s->y);
    for (int64_t t = 0; t < x->n_rows; t++)
        op_axpy(out + (size_t)t * out_stride, row_scale ? row_scale[t] : 1.0f, s->y + t * embd, embd);
}

void moe_shared(thread_pool *pool, moe_scratch *s, const layer_weights *lw, act_set *x, float *gate_scratch,
                float *out, size_t out_stride)
{
    if (lw->w[W_SHEXP_GATE].data == NULL)
        return;
    const wtensor *router = &lw->w[W_SHEXP_ROUTER];
    const float *scale = NULL;
    if (router->data != NULL) {
        mat_rows(pool, router, router->data, x, gate_scratch);
        for (int64_t t = 0; t < x->n_rows; t++)
            gate_scratch[t] = 1.0f / (1.0f + expf(-gate_scratch[t]));
        scale = gate_scratch;
    }
    ffn_swiglu(pool, s, &lw->w[W_SHEXP_GATE], &lw->w[W_SHEXP_UP], &lw->w[W_SHEXP_DOWN], x, scale, out, out_stride);
}
