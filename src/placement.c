/*
 * placement.c — the fit of a model into a device budget (placement.h).
 */
#include "placement.h"

#include "error.h"
#include "forward.h"
#include "hybrid.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- what each part weighs */

static uint64_t tensor_bytes(const wtensor *t)
{
    return t->data ? (uint64_t)t->mat_bytes * (uint64_t)(t->ne[2] > 0 ? t->ne[2] : 1) : 0;
}

typedef enum part { PART_NONEXPERT, PART_SHARED, PART_EXPERT } part;

/* Which part a per-layer role belongs to: a table, every role not named is
 * non-expert (attention, norms, routers, dense FFN). */
static part part_of(arch_role r)
{
    switch (r) {
    case W_MOE_GATE: case W_MOE_UP: case W_MOE_DOWN:
    case W_MOE_GATE_BIAS: case W_MOE_UP_BIAS: case W_MOE_DOWN_BIAS:
        return PART_EXPERT;
    case W_SHEXP_ROUTER: case W_SHEXP_GATE: case W_SHEXP_UP: case W_SHEXP_DOWN:
        return PART_SHARED;
    default:
        return PART_NONEXPERT;
    }
}

static void weigh_weights(const model_weights *w, placement_plan *p)
{
    for (int r = 0; r < W_COUNT; r++) {
        const wtensor *t = &w->global[r];
        /* a tied output matrix is the embedding itself */
        if (r == W_OUTPUT && t->data == w->global[W_TOKEN_EMBD].data)
            continue;
        p->nonexpert_bytes += tensor_bytes(t);
    }
    for (uint32_t l = 0; l < w->hp.n_layer; l++)
        for (int r = 0; r < W_COUNT; r++) {
            const uint64_t b = tensor_bytes(&w->layer[l].w[r]);
            const part pt = part_of((arch_role)r);
            if (pt == PART_EXPERT)
                p->expert_bytes += b;
            else if (pt == PART_SHARED)
                p->shared_bytes += b;
            else
                p->nonexpert_bytes += b;
        }
}

uint64_t placement_scratch_estimate(const model_weights *w, int64_t n_batch, int64_t n_ctx)
{
    const arch_hparams *hp = &w->hp;
    const uint64_t nb = (uint64_t)n_batch, embd = hp->n_embd;
    const uint64_t k = hp->n_expert_used > 0 ? hp->n_expert_used : 1;
    /* the widest FFN that runs: the dense width only where a layer is dense */
    bool dense = false;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        dense = dense || !w->layer[l].moe;
    uint64_t ff = dense && hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp;
    ff = ff > hp->n_ff_shexp ? ff : hp->n_ff_shexp;
    const uint64_t att = (uint64_t)hp->n_head * (hp->head_dim_k + hp->head_dim_v);
    const uint64_t kv = (uint64_t)hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v);
    /* floats: residual, normed rows, sublayer output, their conversions;
     * Q/K/V and attention output; RoPE; router; logits of every row */
    uint64_t floats = nb * (4 * embd + att + kv + hp->n_rot + hp->n_expert + 1 + hp->n_vocab);
    /* MoE rows (k per token): gathered inputs, gate, up, hidden, outputs */
    floats += nb * k * (2 * embd + 3 * ff);
    /* attention scores of one row of heads over the context */
    floats += (uint64_t)hp->n_head * (uint64_t)n_ctx;
    const uint64_t routes = nb * k * 12;
    return floats * sizeof(float) + routes;
}

/* --- slots */

static void layers_init(const model_weights *w, placement_plan *p)
{
    for (uint32_t l = 0; l < p->n_layer; l++) {
        placement_layer *L = &p->layer[l];
        L->expert_bytes = hybrid_expert_bytes(w, l);
        L->moe = L->expert_bytes > 0;
        L->n_expert = L->moe ? (int32_t)w->hp.n_expert : 0;
        L->coverage = -1.0;
        p->n_experts_total += L->n_expert;
    }
}

/* Without a profile: rounds of one more slot per MoE layer, from the
 * first layer on, while any fits.  Slot counts differ by at most one
 * between layers of equal expert bytes; a layer of larger experts never
 * has more than one slot over a layer of smaller ones. */
static uint64_t place_uniform(placement_plan *p, uint64_t avail)
{
    uint64_t used = 0;
    for (bool added = true; added;) {
        added = false;
        for (uint32_t l = 0; l < p->n_layer; l++) {
            placement_layer *L = &p->layer[l];
            if (L->moe && L->n_slots < L->n_expert && L->expert_bytes <= avail - used) {
                L->n_slots++;
                used += L->expert_bytes;
                added = true;
            }
        }
    }
    return used;
}

/* Share of layer l's lookups its next ranked expert would serve, per byte. */
static double next_gain(const placement_plan *p, const expert_rank *r, const int32_t *ids, uint32_t l)
{
    const placement_layer *L = &p->layer[l];
    const uint64_t lookups = expert_rank_lookups(r, (int)l);
    if (lookups == 0)
        return 0.0;
    const uint64_t c = expert_rank_count(r, (int)l, ids[(size_t)l * (size_t)r->n_expert + (size_t)L->n_slots]);
    return (double)c / (double)lookups / (double)L->expert_bytes;
}

/* The layer that gets the next slot; -1 when none fits. */
static int best_layer(const placement_plan *p, const expert_rank *r, const int32_t *ids, uint64_t left)
{
    int best = -1;
    double best_gain = 0.0;
    for (uint32_t l = 0; l < p->n_layer; l++) {
        const placement_layer *L = &p->layer[l];
        if (!L->moe || L->n_slots >= L->n_expert || L->expert_bytes > left)
            continue;
        const double g = next_gain(p, r, ids, l);
        if (best < 0 || g > best_gain || (g == best_gain && L->n_slots < p->layer[best].n_slots))
            best = (int)l, best_gain = g;
    }
    return best;
}

static hydra_status place_by_profile(placement_plan *p, const expert_rank *r, uint64_t avail, uint64_t *used)
{
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)p->n_layer * (size_t)r->n_expert + 1);
    if (ids == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "placement: rankings of %u layers", p->n_layer);
    for (uint32_t l = 0; l < p->n_layer; l++)
        if (p->layer[l].moe)
            expert_rank_order(r, (int)l, ids + (size_t)l * (size_t)r->n_expert);
    *used = 0;
    for (int l; (l = best_layer(p, r, ids, avail - *used)) >= 0;) {
        p->layer[l].n_slots++;
        *used += p->layer[l].expert_bytes;
    }
    free(ids);
    return HYDRA_OK;
}

static void expected_hits(placement_plan *p, const expert_rank *r)
{
    double hits = 0.0, lookups = 0.0;
    for (uint32_t l = 0; l < p->n_layer; l++) {
        placement_layer *L = &p->layer[l];
        if (!L->moe)
            continue;
        L->coverage = expert_rank_coverage(r, (int)l, L->n_slots);
        hits += L->coverage * (double)expert_rank_lookups(r, (int)l);
        lookups += (double)expert_rank_lookups(r, (int)l);
    }
    p->hit_rate = lookups > 0.0 ? hits / lookups : -1.0;
}

/* --- the plan */

static hydra_status check_input(const placement_input *in)
{
    const arch_hparams *hp = &in->w->hp;
    if (in->rank != NULL && (in->rank->n_layer != (int)hp->n_layer || in->rank->n_expert != (int)hp->n_expert))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "placement: the ranking has %d layers x %d experts, the model "
                          "%u x %u", in->rank->n_layer, in->rank->n_expert, hp->n_layer, hp->n_expert);
    if (in->n_ctx < 1 || in->n_batch < 1)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "placement: context %lld, batch %lld", (long long)in->n_ctx,
                          (long long)in->n_batch);
    return HYDRA_OK;
}

static hydra_status too_small(const placement_plan *p, uint64_t fixed)
{
    return hydra_fail(HYDRA_ERR_RANGE, "a VRAM budget of %" PRIu64 " bytes (%.2f MiB) cannot hold the non-expert "
                      "part: weights %" PRIu64 " + shared experts %" PRIu64 " + KV cache %" PRIu64 " + scratch %"
                      PRIu64 " = %" PRIu64 " bytes (%.2f MiB)", p->budget, (double)p->budget / (1u << 20),
                      p->nonexpert_bytes, p->shared_bytes, p->kv_bytes, p->scratch_bytes, fixed,
                      (double)fixed / (1u << 20));
}

/* Prefill streams a MoE layer's expert stacks into one of two device
 * buffers while the other is computed (src/gpu/gpu_hybrid_stage.c), so the
 * area is twice the largest layer's experts (an upper bound: biases are
 * counted too).  Needed only when some expert is not resident; when it
 * does not fit, prefill reads the misses over the bus instead. */
static uint64_t stage_reserve(const placement_plan *p, const placement_input *in, uint64_t avail)
{
    uint64_t all = 0, widest = 0;
    for (uint32_t l = 0; l < p->n_layer; l++) {
        const uint64_t layer = (uint64_t)p->layer[l].n_expert * p->layer[l].expert_bytes;
        all += layer;
        widest = layer > widest ? layer : widest;
    }
    if (!in->stage_prefill || avail >= all || 2 * widest > avail)
        return 0;
    return 2 * widest;
}

hydra_status placement_make(placement_plan *p, const placement_input *in)
{
    memset(p, 0, sizeof *p);
    hydra_status st = check_input(in);
    if (st != HYDRA_OK)
        return st;
    const model_weights *w = in->w;
    p->budget = in->budget;
    p->hit_rate = -1.0;
    weigh_weights(w, p);
    p->kv_bytes = kv_bytes_for(w, in->kv_type, in->n_ctx, in->n_batch);
    p->scratch_bytes = in->scratch_bytes ? in->scratch_bytes : placement_scratch_estimate(w, in->n_batch, in->n_ctx);
    const uint64_t fixed = p->nonexpert_bytes + p->shared_bytes + p->kv_bytes + p->scratch_bytes;
    if (fixed > p->budget)
        return too_small(p, fixed);
    p->n_layer = w->hp.n_layer;
    p->layer = calloc(p->n_layer + 1, sizeof *p->layer);
    if (p->layer == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "placement of %u layers", p->n_layer);
    layers_init(w, p);
    p->stage_bytes = stage_reserve(p, in, p->budget - fixed);
    const uint64_t avail = p->budget - fixed - p->stage_bytes;
    if (in->rank != NULL) {
        st = place_by_profile(p, in->rank, avail, &p->slab_bytes);
        if (st != HYDRA_OK) {
            placement_free(p);
            return st;
        }
        expected_hits(p, in->rank);
    } else {
        p->slab_bytes = place_uniform(p, avail);
    }
    for (uint32_t l = 0; l < p->n_layer; l++)
        p->n_slots_total += p->layer[l].n_slots;
    p->unused_bytes = avail - p->slab_bytes;
    return HYDRA_OK;
}

void placement_free(placement_plan *p)
{
    free(p->layer);
    memset(p, 0, sizeof *p);
}

/* --- text */

typedef struct text {
    char *buf;
    size_t cap, len;
} text;

static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const size_t room = t->len < t->cap ? t->cap - t->len : 0;
    const int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n;
}

static void put_part(text *t, const char *name, uint64_t bytes)
{
    put(t, "  %-20s %14" PRIu64 " bytes  %9.2f MiB\n", name, bytes, (double)bytes / (1u << 20));
}

/* Runs of consecutive MoE layers with the same slots: "layers 0-47: 32 of 128". */
static void put_layers(text *t, const placement_plan *p)
{
    for (uint32_t l = 0; l < p->n_layer;) {
        const placement_layer *L = &p->layer[l];
        uint32_t end = l + 1;
        while (end < p->n_layer && p->layer[end].moe == L->moe && p->layer[end].n_slots == L->n_slots &&
               p->layer[end].expert_bytes == L->expert_bytes && p->layer[end].coverage == L->coverage)
            end++;
        char which[48];
        if (end - 1 == l)
            snprintf(which, sizeof which, "layer %u", l);
        else
            snprintf(which, sizeof which, "layers %u-%u", l, end - 1);
        if (!L->moe)
            put(t, "  %s: dense\n", which);
        else if (L->coverage >= 0.0)
            put(t, "  %s: %d of %d experts resident (%" PRIu64 " bytes each), covering %.1f%% of lookups\n", which,
                (int)L->n_slots, (int)L->n_expert, L->expert_bytes, 100.0 * L->coverage);
        else
            put(t, "  %s: %d of %d experts resident (%" PRIu64 " bytes each)\n", which, (int)L->n_slots,
                (int)L->n_expert, L->expert_bytes);
        l = end;
    }
}

size_t placement_describe(const placement_plan *p, char *buf, size_t cap)
{
    text t = {.buf = buf, .cap = cap};
    if (cap > 0)
        buf[0] = '\0';
    put(&t, "placement for a budget of %" PRIu64 " bytes (%.2f MiB):\n", p->budget, (double)p->budget / (1u << 20));
    put_part(&t, "non-expert weights", p->nonexpert_bytes);
    put_part(&t, "shared experts", p->shared_bytes);
    put_part(&t, "KV cache", p->kv_bytes);
    put_part(&t, "scratch", p->scratch_bytes);
    put_part(&t, "prefill staging", p->stage_bytes);
    put_part(&t, "expert slab", p->slab_bytes);
    put_part(&t, "unused", p->unused_bytes);
    put(&t, "  slab: %d of %d routed experts (%.1f%%), all experts %" PRIu64 " bytes\n", (int)p->n_slots_total,
        (int)p->n_experts_total, p->n_experts_total ? 100.0 * p->n_slots_total / p->n_experts_total : 0.0,
        p->expert_bytes);
    put_layers(&t, p);
    if (p->hit_rate >= 0.0)
        put(&t, "  expected decode hit rate: %.1f%% (from the profile)\n", 100.0 * p->hit_rate);
    else
        put(&t, "  expected decode hit rate: unknown (no profile)\n");
    return t.len;
}
