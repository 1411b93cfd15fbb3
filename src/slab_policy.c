/*
 * slab_policy.c — the slab's admission and eviction policies (see
 * slab_policy.h).
 *
 * Decayed frequency without touching every score each token: instead of
 * multiplying all scores by `decay` per token, what a lookup adds grows by
 * 1/decay per token (`unit`); comparisons between experts are the same,
 * and when unit gets large every score and unit are divided by it.
 */
#include "slab_policy.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Past this, scores and unit are rescaled (far below DBL_MAX, so that a
 * score of many lookups at this unit stays finite). */
static const double UNIT_RESCALE = 1e150;

slab_policy_params slab_policy_default_params(void)
{
    return (slab_policy_params){.kind = SLAB_LFU, .bus_budget = 0.25, .decay = 0.99, .hysteresis = 1.25};
}

static const char *const kind_names[] = {"static", "lru", "lfu"};

bool slab_policy_kind_parse(const char *name, slab_policy_kind *out)
{
    for (int i = 0; i < (int)(sizeof kind_names / sizeof kind_names[0]); i++)
        if (strcasecmp(name, kind_names[i]) == 0)
            return *out = (slab_policy_kind)i, true;
    return false;
}

const char *slab_policy_kind_name(slab_policy_kind kind)
{
    return (unsigned)kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : "?";
}

static hydra_status check_params(const slab_policy_params *p)
{
    if ((unsigned)p->kind > SLAB_LFU)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "slab policy: unknown kind %d", (int)p->kind);
    if (p->kind == SLAB_LFU && !(p->decay > 0 && p->decay <= 1 && p->hysteresis >= 1))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "slab policy lfu: decay %g (0 < decay <= 1), hysteresis %g (>= 1)",
                          p->decay, p->hysteresis);
    if (!(p->bus_budget <= SLAB_MAX_CREDIT * 1e6)) /* also NaN */
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "slab policy: bus budget %g", p->bus_budget);
    return HYDRA_OK;
}

/* Tables of one layer, the first n_slots experts of order resident. */
static hydra_status layer_init(slab_layer_policy *L, int n_expert, int32_t n_slots, const int32_t *order)
{
    L->n_slots = n_slots, L->in_flight = SLAB_NO_SLOT, L->unit = 1.0;
    L->slot_of = malloc(sizeof *L->slot_of * (size_t)n_expert);
    L->expert_in = malloc(sizeof *L->expert_in * (size_t)(n_slots ? n_slots : 1));
    L->last_use = calloc((size_t)n_expert, sizeof *L->last_use);
    L->score = calloc((size_t)n_expert, sizeof *L->score);
    if (L->slot_of == NULL || L->expert_in == NULL || L->last_use == NULL || L->score == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "slab policy: out of memory");
    for (int e = 0; e < n_expert; e++)
        L->slot_of[e] = SLAB_NO_SLOT;
    for (int32_t s = 0; s < n_slots; s++) {
        int32_t e = order ? order[s] : s;
        if (e < 0 || e >= n_expert || L->slot_of[e] != SLAB_NO_SLOT)
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "slab policy: the ranking is not a permutation of %d experts",
                              n_expert);
        L->slot_of[e] = s, L->expert_in[s] = e;
    }
    return HYDRA_OK;
}

hydra_status slab_policy_init(slab_policy *sp, const slab_policy_params *p, int n_layer, int n_expert,
                              const int32_t *n_slots, const int32_t *const *order)
{
    memset(sp, 0, sizeof *sp);
    hydra_status st = check_params(p);
    if (st != HYDRA_OK)
        return st;
    if (n_layer <= 0 || n_expert <= 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "slab policy: %d layers x %d experts", n_layer, n_expert);
    sp->p = *p, sp->n_layer = n_layer, sp->n_expert = n_expert;
    sp->layer = calloc((size_t)n_layer, sizeof *sp->layer);
    if (sp->layer == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "slab policy: out of memory");
    for (int l = 0; l < n_layer && st == HYDRA_OK; l++) {
        if (n_slots[l] < 0 || n_slots[l] > n_expert)
            st = hydra_fail(HYDRA_ERR_INVALID_ARG, "slab policy: layer %d: %d slots for %d experts", l, n_slots[l],
                            n_expert);
        else
            st = layer_init(&sp->layer[l], n_expert, n_slots[l], order ? order[l] : NULL);
    }
    if (st != HYDRA_OK)
        slab_policy_free(sp);
    return st;
}

void slab_policy_free(slab_policy *sp)
{
    for (int l = 0; sp->layer != NULL && l < sp->n_layer; l++) {
        free(sp->layer[l].slot_of);
        free(sp->layer[l].expert_in);
        free(sp->layer[l].last_use);
        free(sp->layer[l].score);
    }
    free(sp->layer);
    memset(sp, 0, sizeof *sp);
}

/* ------------------------------------------------------------ observing */

/* Remembers a missed expert as the newest candidate (once). */
static void push_candidate(slab_layer_policy *L, int32_t e)
{
    int32_t i = 0;
    while (i < L->n_cand && L->cand[i] != e)
        i++;
    if (i == L->n_cand && L->n_cand == SLAB_MAX_CANDIDATES)
        i = 0; /* full: the oldest goes */
    else if (i == L->n_cand)
        L->n_cand++;
    memmove(&L->cand[i], &L->cand[i + 1], sizeof L->cand[0] * (size_t)(L->n_cand - 1 - i));
    L->cand[L->n_cand - 1] = e;
}

static void drop_candidate(slab_layer_policy *L, int32_t i)
{
    memmove(&L->cand[i], &L->cand[i + 1], sizeof L->cand[0] * (size_t)(L->n_cand - 1 - i));
    L->n_cand--;
}

static void next_token(const slab_policy *sp, slab_layer_policy *L, int n_expert)
{
    L->tick++;
    if (sp->p.bus_budget > 0) {
        L->credit += sp->p.bus_budget;
        L->credit = L->credit > SLAB_MAX_CREDIT ? SLAB_MAX_CREDIT : L->credit;
    }
    if (sp->p.kind != SLAB_LFU || sp->p.decay == 1)
        return;
    L->unit /= sp->p.decay;
    if (L->unit > UNIT_RESCALE) {
        for (int e = 0; e < n_expert; e++)
            L->score[e] /= L->unit;
        L->unit = 1.0;
    }
}

int slab_policy_observe(slab_policy *sp, int layer, const int32_t *experts, int n, int k)
{
    if (layer < 0 || layer >= sp->n_layer || k <= 0)
        return 0;
    slab_layer_policy *L = &sp->layer[layer];
    int hits = 0;
    for (int i = 0; i < n; i++) {
        if (i % k == 0)
            next_token(sp, L, sp->n_expert);
        int32_t e = experts[i];
        if (e < 0 || e >= sp->n_expert)
            continue;
        L->last_use[e] = L->tick;
        L->score[e] += L->unit;
        if (L->slot_of[e] != SLAB_NO_SLOT)
            hits++;
        else if (L->n_slots > 0 && sp->p.kind != SLAB_STATIC)
            push_candidate(L, e);
    }
    return hits;
}

/* ------------------------------------------------------------ admitting */

/* The candidate to admit: LRU the newest, LFU the highest score; resident
 * ones (admitted since) are dropped on the way.  -1: none. */
static int32_t pick_candidate(slab_layer_policy *L, slab_policy_kind kind)
{
    int32_t best = -1;
    for (int32_t i = L->n_cand - 1; i >= 0; i--) {
        if (L->slot_of[L->cand[i]] != SLAB_NO_SLOT || L->cand[i] == L->in_flight) {
            drop_candidate(L, i);
            best = best > i ? best - 1 : best;
            continue;
        }
        if (best < 0 || (kind == SLAB_LFU && L->score[L->cand[i]] > L->score[L->cand[best]]))
            best = i;
    }
    return best;
}

/* The slot to reuse: an empty one, else the least recently used (LRU) or
 * lowest-scored (LFU) resident. */
static int32_t pick_victim(const slab_layer_policy *L, slab_policy_kind kind)
{
    int32_t victim = 0;
    for (int32_t s = 0; s < L->n_slots; s++) {
        if (L->expert_in[s] == SLAB_NO_SLOT)
            return s;
        int32_t e = L->expert_in[s], v = L->expert_in[victim];
        if (kind == SLAB_LRU ? L->last_use[e] < L->last_use[v] : L->score[e] < L->score[v])
            victim = s;
    }
    return victim;
}

bool slab_policy_next_admission(slab_policy *sp, int layer, int32_t *expert, int32_t *victim_slot)
{
    if (layer < 0 || layer >= sp->n_layer || sp->p.kind == SLAB_STATIC)
        return false;
    slab_layer_policy *L = &sp->layer[layer];
    if (L->n_slots == 0 || L->in_flight != SLAB_NO_SLOT || (sp->p.bus_budget > 0 && L->credit < 1))
        return false;
    int32_t c = pick_candidate(L, sp->p.kind);
    if (c < 0)
        return false;
    int32_t e = L->cand[c], slot = pick_victim(L, sp->p.kind);
    int32_t v = L->expert_in[slot];
    if (sp->p.kind == SLAB_LFU && v != SLAB_NO_SLOT && !(L->score[e] > sp->p.hysteresis * L->score[v]))
        return false;
    drop_candidate(L, c);
    L->in_flight = e;
    if (sp->p.bus_budget > 0)
        L->credit -= 1;
    *expert = e, *victim_slot = slot;
    return true;
}

void slab_policy_commit(slab_policy *sp, int layer, int32_t expert, int32_t slot)
{
    if (layer < 0 || layer >= sp->n_layer)
        return;
    slab_layer_policy *L = &sp->layer[layer];
    if (expert < 0 || expert >= sp->n_expert || slot < 0 || slot >= L->n_slots)
        return;
    int32_t old = L->expert_in[slot];
    if (old != SLAB_NO_SLOT)
        L->slot_of[old] = SLAB_NO_SLOT;
    if (L->slot_of[expert] != SLAB_NO_SLOT)
        L->expert_in[L->slot_of[expert]] = SLAB_NO_SLOT;
    L->slot_of[expert] = slot, L->expert_in[slot] = expert;
    L->in_flight = SLAB_NO_SLOT;
    L->admissions++;
}

void slab_policy_abort(slab_policy *sp, int layer)
{
    if (layer >= 0 && layer < sp->n_layer)
        sp->layer[layer].in_flight = SLAB_NO_SLOT;
}
