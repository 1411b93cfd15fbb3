/*
 * gpu_hybrid_admit.c — the dynamic slab of hybrid decode
 * (gpu_hybrid_internal.h): decayed lookup scores, the choice of an expert
 * to admit and its victim, the admission copies and their landing.
 */
#include "gpu_hybrid_internal.h"

/* Policy constants (docs/HYBRID.md "Dynamic slab"): scores decay per step;
 * a candidate must beat its victim by a factor and a margin, so that two
 * experts of similar popularity do not swap back and forth. */
static const double SCORE_DECAY = 0.97, ADMIT_FACTOR = 1.5, ADMIT_MARGIN = 2.0;

/* Copies that have landed put their expert into the table. */
hydra_status hy_install_landed(gpu_hybrid *hy)
{
    if (hy->n_pending == 0)
        return HYDRA_OK;
    const gpuError_t q = GPU_RT(EventQuery)(hy->ev_copy);
    if (q != gpuSuccess) {
        if (q == GPU_ENUM(ErrorNotReady))
            return HYDRA_OK;
        return gpu_fail(q, "an expert admission");
    }
    for (int i = 0; i < hy->n_pending; i++) {
        const hy_pending *p = &hy->pending[i];
        TRY_ST(hybrid_admit(&hy->st, (uint32_t)p->layer, p->expert, p->slot));
        hy_mirror_expert(hy, p->layer, p->expert);
        moving_expert(hy, p->layer)[p->expert] = 0;
        moving_slot(hy, p->layer)[p->slot] = 0;
        hy->c.admissions++;
    }
    hy->n_pending = 0;
    return HYDRA_OK;
}

/* No table entry may point at a slot whose copy is in flight (an expert
 * computed elsewhere, -sm tensor, reads slot 0 but no slot's memory). */
void hy_check_in_flight(gpu_hybrid *hy)
{
    for (int i = 0; i < hy->n_pending; i++) {
        const int32_t *slot_of = tab_slot_of(hy->h.tab, hy, hy->pending[i].layer);
        for (int e = 0; e < hy->n_expert; e++)
            if (slot_of[e] == hy->pending[i].slot && !hy_elsewhere(hy, hy->pending[i].layer, e))
                hy->c.unsafe_replays++;
    }
}

/* The step's lookups per expert into the decayed scores.  A streamed
 * prefill has no CPU pass to count its lookups and hits for the split's
 * counters: the counts do, against the table the step ran with (hy_admit
 * changes it only after this). */
void hy_update_scores(gpu_hybrid *hy)
{
    for (int l = 0; l < hy->n_layer; l++) {
        const int32_t *slot_of = hy->st.layer[l].slot_of;
        int64_t lookups = 0, hits = 0;
        for (int e = 0; e < hy->n_expert; e++) {
            const size_t i = (size_t)l * (size_t)hy->n_expert + (size_t)e;
            const uint32_t delta = hy->h.counts[i] - hy->counts_seen[i]; /* wraps like the counter */
            hy->counts_seen[i] = hy->h.counts[i];
            hy->score[i] = (float)(hy->score[i] * SCORE_DECAY + delta);
            lookups += delta;
            hits += slot_of != NULL && slot_of[e] >= 0 ? delta : 0;
        }
        if (!hy->step_split && is_moe(hy, l))
            hybrid_count(&hy->st, (uint32_t)l, lookups, hits);
    }
}

/* The best non-resident expert of layer l and the slot it would take (an
 * empty one, else the resident expert of lowest score), if it wins by the
 * margin; experts and slots already moving are not choices, nor, on a
 * part of a tensor split, the experts of other parts. */
static bool pick(const gpu_hybrid *hy, int l, int *cand, int *slot)
{
    const hybrid_layer *L = &hy->st.layer[l];
    const float *sc = hy->score + (size_t)l * hy->n_expert;
    int best = -1, victim_slot = -1;
    for (int e = 0; e < hy->n_expert; e++)
        if (L->slot_of[e] < 0 && (best < 0 || sc[e] > sc[best]) && !moving_expert(hy, l)[e] && hy_owns(hy, e))
            best = e;
    float victim_score = 0.0f;
    for (int s = 0; s < L->n_slots; s++) {
        const int e = L->expert_in[s];
        const float v = e < 0 ? -1.0f : sc[e];
        if ((victim_slot < 0 || v < victim_score) && !moving_slot(hy, l)[s]) {
            victim_slot = s;
            victim_score = v;
        }
    }
    if (best < 0 || victim_slot < 0 || !(sc[best] > victim_score * ADMIT_FACTOR + ADMIT_MARGIN))
        return false;
    *cand = best;
    *slot = victim_slot;
    return true;
}

/* Copies expert e's parts into the slot on the copy stream. */
static hydra_status copy_expert(gpu_hybrid *hy, int l, int e, int slot)
{
    const hybrid_layer *L = &hy->st.layer[l];
    for (int p = 0; p < N_PARTS; p++) {
        const uint8_t *src = hy_copy_src(hy, host_part(hy, l, p, e));
        if (src == NULL)
            continue;
        TRY(gpuMemcpyAsync(slot_addr(hy, l, slot) + L->part_off[p], src, L->part_bytes[p], gpuMemcpyHostToDevice,
                           hy->copy),
            "admitting an expert");
        hy_count_h2d(hy, L->part_bytes[p]);
        hy->c.admit_bytes += L->part_bytes[p];
    }
    return HYDRA_OK;
}

/* New admissions within the bus budget of this step's tokens: victims
 * leave the tables now (uploaded in stream order before the next step),
 * their slots are rewritten after that upload, and the newcomers enter the
 * tables when the copies have landed (hy_install_landed). */
hydra_status hy_admit(gpu_session *g, gpu_hybrid *hy)
{
    if (hy->o.admit_bytes_per_token == 0 || hy->n_pending > 0)
        return HYDRA_OK;
    uint64_t budget = hy->o.admit_bytes_per_token * (uint64_t)hy->step_tok;
    const int per_layer = hy->step_tok == 1 ? 1 : hy->n_expert;
    for (int i = 0; i < hy->n_layer; i++) {
        const int l = (hy->rr + i) % hy->n_layer;
        if (!is_moe(hy, l))
            continue;
        const uint64_t bytes = hy->st.layer[l].slot_bytes;
        int cand, slot;
        for (int k = 0; k < per_layer && bytes <= budget && pick(hy, l, &cand, &slot); k++) {
            const int victim = hy->st.layer[l].expert_in[slot];
            if (victim >= 0) {
                TRY_ST(hybrid_evict(&hy->st, (uint32_t)l, victim));
                hy_mirror_expert(hy, l, victim);
            }
            hy->pending[hy->n_pending++] = (hy_pending){l, cand, slot};
            moving_expert(hy, l)[cand] = 1;
            moving_slot(hy, l)[slot] = 1;
            budget -= bytes;
        }
    }
    hy->rr = (hy->rr + 1) % hy->n_layer;
    if (hy->n_pending == 0)
        return HYDRA_OK;
    TRY_ST(hy_upload_tables(hy, g->stream));
    TRY(gpuEventRecord(hy->ev_tab, g->stream), "admission order");
    TRY(GPU_RT(StreamWaitEvent)(hy->copy, hy->ev_tab, 0), "admission order");
    for (int i = 0; i < hy->n_pending; i++)
        TRY_ST(copy_expert(hy, hy->pending[i].layer, hy->pending[i].expert, hy->pending[i].slot));
    TRY(gpuEventRecord(hy->ev_copy, hy->copy), "admission done");
    return HYDRA_OK;
}
