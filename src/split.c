/*
 * split.c — the multi-GPU partition (split.h): shares by ratio, the layer
 * and tensor plans with their fit check, the model's bytes per layer, and
 * the cache of split states keyed by the step's structure.
 */
#include "split.h"

#include "error.h"
#include "placement.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static const char *const mode_name[] = {"none", "layer", "tensor"};

void split_shares(int64_t total, int64_t granule, const double *weights, int n, int64_t *begin)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += weights[i] > 0 ? weights[i] : 0;
    const int64_t units = granule > 0 ? total / granule : total;
    const int64_t g = granule > 0 ? granule : 1;
    double acc = 0;
    begin[0] = 0;
    /* Boundaries at the rounded cumulative share, so the cut of share i
     * does not depend on how later shares round. */
    for (int i = 0; i < n; i++) {
        acc += sum > 0 ? (weights[i] > 0 ? weights[i] : 0) : 1.0;
        const double frac = acc / (sum > 0 ? sum : (double)n);
        int64_t b = (int64_t)(frac * (double)units + 0.5) * g;
        if (b < begin[i])
            b = begin[i];
        begin[i + 1] = i + 1 == n ? total : b;
    }
}

static double gib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0 * 1024.0);
}

/* Devices in run order (layer split: id order with the main GPU last) and
 * their weights: the -ts ratios, else the available bytes. */
static int device_order(const split_request *r, int *order, double *weight)
{
    bool any = false;
    for (int d = 0; r->ratios != NULL && d < r->n_dev; d++)
        any |= r->ratios[d] > 0;
    int n = 0;
    for (int d = 0; d < r->n_dev; d++)
        if (r->mode != SPLIT_LAYER || d != r->main_gpu)
            order[n++] = d;
    if (r->mode == SPLIT_LAYER)
        order[n++] = r->main_gpu;
    for (int i = 0; i < n; i++)
        weight[i] = any ? (double)r->ratios[order[i]] : (double)r->avail[order[i]];
    return n;
}

static hydra_status check_request(const split_model *m, const split_request *r)
{
    if (r->mode < SPLIT_NONE || r->mode > SPLIT_TENSOR)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "split mode %d: none, layer or tensor", (int)r->mode);
    if (r->n_dev < 1 || r->n_dev > SPLIT_MAX_DEV)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "split: %d devices (1 to %d)", r->n_dev, SPLIT_MAX_DEV);
    if (r->main_gpu < 0 || r->main_gpu >= r->n_dev)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "--main-gpu %d: %d device%s present", r->main_gpu, r->n_dev,
                          r->n_dev == 1 ? " is" : "s are");
    if (m->n_layer < 1)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "split: a model of %d layers", m->n_layer);
    for (int d = 0; r->ratios != NULL && d < r->n_dev; d++)
        if (!(r->ratios[d] >= 0))
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "-ts: ratio %g of device %d is negative", r->ratios[d], d);
    if (r->mode != SPLIT_NONE && r->ratios != NULL && r->ratios[r->main_gpu] <= 0) {
        bool any = false;
        for (int d = 0; d < r->n_dev; d++)
            any |= r->ratios[d] > 0;
        if (any)
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "-sm %s: the main GPU %d holds the output head, so its -ts "
                              "ratio must not be 0", mode_name[r->mode], r->main_gpu);
    }
    return HYDRA_OK;
}

static hydra_status check_fit(const split_plan *p, const split_request *r)
{
    for (int i = 0; i < p->n_part; i++) {
        const split_part *q = &p->part[i];
        if (q->need > q->avail)
            return hydra_fail(HYDRA_ERR_RANGE, "-sm %s: device %d needs %.2f GiB (layers %d-%d, KV heads %d-%d, "
                              "experts %d-%d%s%s) but has %.2f GiB", mode_name[p->mode], q->device, gib(q->need),
                              q->layer0, q->layer1 - 1, q->head0, q->head1 - 1, q->exp0, q->exp1 - 1,
                              q->embed ? ", embedding" : "", q->head ? ", output head" : "", gib(q->avail));
    }
    (void)r;
    return HYDRA_OK;
}

static uint64_t layers_bytes(const split_model *m, int l0, int l1)
{
    uint64_t b = 0;
    for (int l = l0; l < l1; l++)
        b += m->layer_bytes[l];
    return b;
}

static void plan_layer(split_plan *p, const split_model *m, const split_request *r)
{
    int order[SPLIT_MAX_DEV];
    double weight[SPLIT_MAX_DEV];
    int64_t begin[SPLIT_MAX_DEV + 1];
    const int n = device_order(r, order, weight);
    split_shares(m->n_layer, 1, weight, n, begin);
    for (int i = 0; i < n; i++) {
        if (begin[i + 1] == begin[i])
            continue; /* a zero share: the device takes no part */
        split_part *q = &p->part[p->n_part++];
        *q = (split_part){.device = order[i], .layer0 = (int)begin[i], .layer1 = (int)begin[i + 1],
                          .head1 = m->n_head_kv, .ff1 = m->n_ff, .exp1 = m->n_expert, .avail = r->avail[order[i]]};
        q->need = layers_bytes(m, q->layer0, q->layer1) + m->scratch_bytes;
    }
    p->part[0].embed = true;
    p->part[p->n_part - 1].head = true;
    p->part[0].need += m->embed_bytes;
    p->part[p->n_part - 1].need += m->head_bytes;
}

void split_shares_min1(int64_t total, int64_t granule, const double *weights, int n, int64_t *begin)
{
    const int64_t g = granule > 0 ? granule : 1, units = (total + g - 1) / g;
    if (units < n) {
        split_shares(total, g, weights, n, begin);
        return;
    }
    split_shares(units - n, 1, weights, n, begin);
    for (int i = 0; i <= n; i++)
        begin[i] = (begin[i] + i) * g < total ? (begin[i] + i) * g : total;
}

void split_cut(const split_plan *plan, int part, int64_t total, int64_t granule, int64_t *b0, int64_t *b1)
{
    double share[SPLIT_MAX_DEV];
    int64_t begin[SPLIT_MAX_DEV + 1];
    for (int i = 0; i < plan->n_part; i++)
        share[i] = plan->part[i].share;
    split_shares_min1(total, granule, share, plan->n_part, begin);
    *b0 = begin[part];
    *b1 = begin[part + 1];
}

bool split_cut_blocks(const split_plan *plan, int part, int64_t total, int64_t granule, int64_t *b0, int64_t *b1)
{
    const int64_t g = granule > 0 ? granule : 1;
    if (total / g < plan->n_part) {
        *b0 = 0;
        *b1 = total;
        return false;
    }
    split_cut(plan, part, total, g, b0, b1);
    return true;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b != 0) {
        const int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

int64_t split_col_granule(const model_weights *w, int role, int64_t unit)
{
    int64_t granule = 1;
    for (uint32_t l = 0; l < w->hp.n_layer; l++) {
        const wtensor *t = &w->layer[l].w[role];
        const quant_traits *qt = t->data != NULL ? quant_traits_of(t->type) : NULL;
        if (qt == NULL || qt->block_size == 0 || unit <= 0)
            continue;
        const int64_t g = (int64_t)qt->block_size / gcd64(unit, (int64_t)qt->block_size); /* units per block run */
        granule = granule / gcd64(granule, g) * g;
    }
    return granule;
}

/* Bytes every part of a tensor split holds whole: its unsplit sublayers,
 * and what is never cut (attn_bytes includes the replicated part). */
static uint64_t whole_bytes(const split_plan *p, const split_model *m)
{
    return (p->heads_whole ? m->attn_bytes : m->replicated_bytes) + (p->ff_whole ? m->ffn_bytes : 0);
}

/* Devices with a share, each every layer; the cuts of split_cut, heads and
 * FFN columns in whole blocks of their output projections. */
static void plan_tensor(split_plan *p, const split_model *m, const split_request *r)
{
    int order[SPLIT_MAX_DEV];
    double weight[SPLIT_MAX_DEV];
    const int n_dev = device_order(r, order, weight);
    double sum = 0;
    for (int i = 0; i < n_dev; i++)
        sum += weight[i] > 0 ? weight[i] : 0;
    for (int i = 0; i < n_dev; i++) {
        if (sum > 0 && !(weight[i] > 0))
            continue; /* a zero share: the device takes no part */
        p->part[p->n_part++] = (split_part){.device = order[i], .layer1 = m->n_layer, .embed = true,
                                            .head = order[i] == r->main_gpu, .avail = r->avail[order[i]],
                                            .share = sum > 0 ? weight[i] / sum : 1.0 / n_dev};
    }
    for (int i = 0; i < p->n_part; i++) {
        split_part *q = &p->part[i];
        int64_t b0, b1;
        p->heads_whole = !split_cut_blocks(p, i, m->n_head_kv, m->head_granule, &b0, &b1);
        q->head0 = (int)b0;
        q->head1 = (int)b1;
        p->ff_whole = !split_cut_blocks(p, i, m->n_ff, m->ff_granule, &q->ff0, &q->ff1);
        split_cut(p, i, m->n_expert, 1, &b0, &b1);
        q->exp0 = (int)b0;
        q->exp1 = (int)b1;
    }
    const uint64_t whole = whole_bytes(p, m), layers = layers_bytes(m, 0, m->n_layer);
    for (int i = 0; i < p->n_part; i++) {
        split_part *q = &p->part[i];
        q->need = (uint64_t)(q->share * (double)(layers > whole ? layers - whole : 0)) + whole + m->scratch_bytes +
                  m->embed_bytes + (q->head ? m->head_bytes : 0);
    }
}

hydra_status split_plan_make(split_plan *plan, const split_model *m, const split_request *r)
{
    memset(plan, 0, sizeof *plan);
    hydra_status st = check_request(m, r);
    if (st != HYDRA_OK)
        return st;
    plan->mode = r->mode;
    if (r->mode == SPLIT_LAYER) {
        plan_layer(plan, m, r);
    } else if (r->mode == SPLIT_TENSOR) {
        plan_tensor(plan, m, r);
    } else {
        plan->n_part = 1;
        plan->part[0] = (split_part){.device = r->main_gpu, .layer1 = m->n_layer, .embed = true, .head = true,
                                     .head1 = m->n_head_kv, .ff1 = m->n_ff, .exp1 = m->n_expert,
                                     .avail = r->avail[r->main_gpu]};
        plan->part[0].need = layers_bytes(m, 0, m->n_layer) + m->scratch_bytes + m->embed_bytes + m->head_bytes;
    }
    return check_fit(plan, r);
}

size_t split_plan_describe(const split_plan *plan, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "split %s over %d device%s:\n", mode_name[plan->mode], plan->n_part,
                                  plan->n_part == 1 ? "" : "s");
    for (int i = 0; i < plan->n_part; i++) {
        const split_part *q = &plan->part[i];
        len += (size_t)snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0,
                                "  GPU %d: layers %d-%d, KV heads %d-%d, FFN columns %lld-%lld, experts %d-%d%s%s; "
                                "%.2f of %.2f GiB\n", q->device, q->layer0, q->layer1 - 1, q->head0, q->head1 - 1,
                                (long long)q->ff0, (long long)q->ff1 - 1, q->exp0, q->exp1 - 1,
                                q->embed ? ", embedding" : "", q->head ? ", output head" : "", gib(q->need),
                                gib(q->avail));
    }
    if (plan->mode == SPLIT_TENSOR && (plan->heads_whole || plan->ff_whole))
        len += (size_t)snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0,
                                "  not split (fewer whole quant blocks of columns than devices; on every GPU, counted "
                                "on the main one):%s%s\n", plan->heads_whole ? " attention" : "",
                                plan->ff_whole ? " dense FFN" : "");
    return len;
}

static uint64_t tensor_bytes(const wtensor *t)
{
    return t->data != NULL ? (uint64_t)t->mat_bytes * (uint64_t)t->ne[2] : 0;
}

static bool routed(int role)
{
    return role == W_MOE_GATE || role == W_MOE_UP || role == W_MOE_DOWN;
}

hydra_status split_model_of(split_model *m, uint64_t **layer_bytes, const model_weights *w, int64_t n_ctx,
                            int64_t n_batch, uint32_t kv_type, bool skip_experts)
{
    const arch_hparams *hp = &w->hp;
    uint64_t *lb = calloc(hp->n_layer + 1, sizeof *lb);
    *layer_bytes = lb;
    if (lb == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "split: bytes of %u layers", hp->n_layer);
    size_t k_row = (size_t)hp->n_head_kv * hp->head_dim_k, v_row = (size_t)hp->n_head_kv * hp->head_dim_v;
    if (w->arch->attention != NULL)
        w->arch->attention->kv_row_elems(hp, &k_row, &v_row);
    const uint64_t kv_layer = (uint64_t)n_ctx * (k_row + v_row) * (kv_type == QT_F32 ? 4 : 2);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        lb[l] = kv_layer;
        for (int r = 0; r < W_COUNT; r++)
            if (!(skip_experts && routed(r)))
                lb[l] += tensor_bytes(&w->layer[l].w[r]);
    }
    /* Latent attention (deepseek2) is cut by query heads: each part its
     * heads' rows of q (or q_b) and slices of the per-head k_b / v_b, while
     * the latent (q_a, kv_a_mqa, their norms) and its cache, one row for all
     * heads, are on every part (split_view.c). */
    const bool latent = w->arch->attention != NULL;
    uint64_t attn = 0, ffn = 0, replicated = 0;
    bool dense = false;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        static const int attn_roles[] = {W_ATTN_Q, W_ATTN_K, W_ATTN_V, W_ATTN_OUT, W_ATTN_Q_B, W_ATTN_K_B,
                                         W_ATTN_V_B};
        static const int latent_roles[] = {W_ATTN_Q_A, W_ATTN_Q_A_NORM, W_ATTN_KV_A_MQA, W_ATTN_KV_A_NORM};
        static const int ffn_roles[] = {W_FFN_GATE, W_FFN_UP, W_FFN_DOWN, W_SHEXP_GATE, W_SHEXP_UP, W_SHEXP_DOWN};
        attn += latent ? 0 : kv_layer; /* the latent cache is replicated, a GQA cache cut by KV heads */
        replicated += latent ? kv_layer : 0;
        for (size_t r = 0; r < sizeof attn_roles / sizeof attn_roles[0]; r++)
            attn += tensor_bytes(&w->layer[l].w[attn_roles[r]]);
        for (size_t r = 0; r < sizeof latent_roles / sizeof latent_roles[0]; r++)
            replicated += tensor_bytes(&w->layer[l].w[latent_roles[r]]);
        for (size_t r = 0; r < sizeof ffn_roles / sizeof ffn_roles[0]; r++)
            ffn += tensor_bytes(&w->layer[l].w[ffn_roles[r]]);
        dense |= w->layer[l].w[W_FFN_DOWN].data != NULL;
    }
    const int64_t group = latent || hp->n_head_kv == 0 ? 1 : hp->n_head / hp->n_head_kv;
    *m = (split_model){.n_layer = (int)hp->n_layer, .layer_bytes = lb,
                       .embed_bytes = tensor_bytes(&w->global[W_TOKEN_EMBD]),
                       .head_bytes = tensor_bytes(&w->global[W_OUTPUT]) + tensor_bytes(&w->global[W_OUTPUT_NORM]),
                       .scratch_bytes = placement_scratch_estimate(w, n_batch, n_ctx),
                       .n_head_kv = (int)(latent ? hp->n_head : hp->n_head_kv),
                       .head_granule = (int)split_col_granule(w, W_ATTN_OUT, group * hp->head_dim_v),
                       .n_ff = hp->n_ff > 0 ? hp->n_ff : hp->n_ff_shexp,
                       .ff_granule = split_col_granule(w, dense ? W_FFN_DOWN : W_SHEXP_DOWN, 1),
                       .n_expert = (int)hp->n_expert, .attn_bytes = attn + replicated, .ffn_bytes = ffn,
                       .replicated_bytes = replicated};
    return HYDRA_OK;
}

int split_parse_ratios(const char *text, float *ratios, int max)
{
    int n = 0;
    for (const char *p = text; *p != '\0'; n++) {
        char *end = NULL;
        const double v = strtod(p, &end);
        if (n >= max || end == p || !(v >= 0) || v > 1e9 || (*end != ',' && *end != '\0'))
            return -1;
        ratios[n] = (float)v;
        p = *end == ',' ? end + 1 : end;
        if (*end == ',' && *p == '\0')
            return -1;
    }
    return n;
}

/* --- split states */

static uint64_t shape_key(const split_plan *plan, const split_shape *sh)
{
    const int64_t k[5] = {sh->n_tok, sh->max_kv, sh->all_rows, plan->mode, plan->n_part};
    return XXH3_64bits(k, sizeof k);
}

static void build(split_state *s, const split_plan *plan, int64_t n_embd, const split_shape *sh, uint64_t key,
                  uint64_t generation)
{
    *s = (split_state){.key = key, .generation = generation, .shape = *sh, .n_part = plan->n_part};
    s->boundary_floats = plan->mode == SPLIT_LAYER ? sh->n_tok * n_embd : 0;
    s->reduce_floats = plan->mode == SPLIT_TENSOR ? sh->n_tok * n_embd : 0;
}

const split_state *split_cache_get(split_cache *c, const split_plan *plan, int64_t n_embd, const split_shape *sh)
{
    const uint64_t key = shape_key(plan, sh);
    c->clock++;
    int lru = 0;
    for (int i = 0; i < c->n; i++) {
        split_state *s = &c->way[i];
        if (s->key == key && memcmp(&s->shape, sh, sizeof *sh) == 0) {
            if (s->generation != c->generation) { /* memory changed since: rebuilt in place */
                build(s, plan, n_embd, sh, key, c->generation);
                c->builds++;
            } else {
                c->hits++;
            }
            s->last_use = c->clock;
            return s;
        }
        if (s->last_use < c->way[lru].last_use)
            lru = i;
    }
    split_state *s;
    if (c->n < SPLIT_CACHE_WAYS) {
        s = &c->way[c->n++];
    } else {
        s = &c->way[lru];
        c->evictions++;
    }
    build(s, plan, n_embd, sh, key, c->generation);
    s->last_use = c->clock;
    c->builds++;
    return s;
}

void split_cache_bump(split_cache *c)
{
    c->generation++;
}
