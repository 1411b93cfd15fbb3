/*
 * hybrid_setup.c — a session's split from its parameters (hybrid.h): the
 * ranking of the pin file, the slot counts of the placement, the pins or
 * the fraction, then hybrid_init.
 */
#include "hybrid.h"

#include "error.h"
#include "expert_rank.h"
#include "placement.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>

/* What hybrid_init needs besides the parameters: per-layer orders and slot
 * counts, owned here for the call. */
typedef struct setup {
    expert_rank rank;
    bool have_rank;
    int32_t *ids;            /* n_layer x n_expert */
    const int32_t **order;   /* n_layer: into ids, NULL for dense layers */
    int32_t *n_slots;        /* n_layer */
} setup;

static void setup_free(setup *su)
{
    expert_rank_free(&su->rank);
    free(su->ids);
    free(su->order);
    free(su->n_slots);
}

static hydra_status load_rank(setup *su, const model_weights *w, const char *path)
{
    const uint32_t n_layer = w->hp.n_layer;
    uint8_t *moe = malloc(n_layer + 1);
    if (moe == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: layer flags");
    for (uint32_t l = 0; l < n_layer; l++)
        moe[l] = w->layer[l].moe;
    hydra_status st = expert_rank_init(&su->rank, (int)n_layer, (int)w->hp.n_expert, moe);
    free(moe);
    if (st == HYDRA_OK)
        st = expert_rank_load(&su->rank, path);
    su->have_rank = st == HYDRA_OK;
    return st;
}

static hydra_status make_orders(setup *su, const model_weights *w)
{
    const uint32_t n_layer = w->hp.n_layer, n_expert = w->hp.n_expert;
    su->ids = malloc(sizeof(int32_t) * (size_t)n_layer * n_expert + 1);
    su->order = calloc(n_layer + 1, sizeof *su->order);
    su->n_slots = calloc(n_layer + 1, sizeof *su->n_slots);
    if (su->ids == NULL || su->order == NULL || su->n_slots == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: rankings of %u layers", n_layer);
    for (uint32_t l = 0; l < n_layer && su->have_rank; l++)
        if (w->layer[l].moe) {
            int32_t *ids = su->ids + (size_t)l * n_expert;
            expert_rank_order(&su->rank, (int)l, ids);
            su->order[l] = ids;
        }
    return HYDRA_OK;
}

static hydra_status slots_from_budget(setup *su, const model_weights *w, const hydra_session_params *p,
                                      int64_t n_ctx, int64_t n_batch, uint32_t kv_type)
{
    const placement_input in = {.w = w, .budget = p->vram_budget, .n_ctx = n_ctx, .n_batch = n_batch,
                                .kv_type = kv_type, .rank = su->have_rank ? &su->rank : NULL,
                                .stage_prefill = p->hybrid == HYDRA_HYBRID_CUDA};
    placement_plan plan;
    hydra_status st = placement_make(&plan, &in);
    if (st != HYDRA_OK)
        return st;
    for (uint32_t l = 0; l < plan.n_layer; l++)
        su->n_slots[l] = plan.layer[l].n_slots;
    placement_free(&plan);
    return HYDRA_OK;
}

static hybrid_mode mode_of(hydra_hybrid_mode m)
{
    return m == HYDRA_HYBRID_CPU_SPLIT ? HYBRID_CPU_SPLIT : m == HYDRA_HYBRID_CUDA ? HYBRID_CUDA : HYBRID_OFF;
}

hydra_status hybrid_setup(hybrid_state *h, const model_weights *w, const hydra_session_params *p, int64_t n_ctx,
                          int64_t n_batch, uint32_t kv_type)
{
    memset(h, 0, sizeof *h);
    if (!(p->resident_fraction >= 0.0 && p->resident_fraction <= 1.0))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "resident_fraction %g: must be in [0, 1]", p->resident_fraction);
    setup su = {0};
    hydra_status st = p->pin_file ? load_rank(&su, w, p->pin_file) : HYDRA_OK;
    if (st == HYDRA_OK)
        st = make_orders(&su, w);
    const bool by_budget = p->vram_budget > 0;
    if (st == HYDRA_OK && by_budget)
        st = slots_from_budget(&su, w, p, n_ctx, n_batch, kv_type);
    for (uint32_t l = 0; st == HYDRA_OK && !by_budget && su.have_rank && l < w->hp.n_layer; l++)
        su.n_slots[l] = w->layer[l].moe ? expert_rank_pinned(&su.rank, (int)l) : 0;
    if (st == HYDRA_OK) {
        const hybrid_config cfg = {.mode = mode_of(p->hybrid), .order = su.have_rank ? su.order : NULL,
                                   .n_slots = by_budget || su.have_rank ? su.n_slots : NULL,
                                   .resident_fraction = p->resident_fraction, .max_rows = n_batch,
                                   .count_time = true};
        st = hybrid_init(h, w, &cfg);
    }
    setup_free(&su);
    return st;
}
