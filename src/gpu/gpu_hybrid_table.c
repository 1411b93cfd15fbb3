/*
 * gpu_hybrid_table.c — the slot and expert pointer tables of hybrid decode
 * (gpu_hybrid_internal.h): the pinned host mirror of each layer's row and
 * its upload before a step.
 */
#include "gpu_hybrid_internal.h"

#include "../split.h"

/* Where a streamed prefill reads part p of a missed expert e of layer l:
 * the layer's staging buffer when there is one, else the pinned copy over
 * the bus; NULL when neither (such a step splits instead). */
static const uint8_t *miss_addr(const gpu_hybrid *hy, int l, int p, int e)
{
    const uint8_t *host = host_part(hy, l, p, e);
    if (host == NULL || hy->stage_base == NULL || hy->moe_index[l] < 0)
        return hy_mapped_of(hy, host);
    const wtensor *t = &hy->w->layer[l].w[part_role[p]];
    return hy->stage[hy->moe_index[l] % 2] + hy->stage_off[(size_t)l * N_PARTS + p] + (size_t)e * t->mat_bytes;
}

bool hy_owns(const gpu_hybrid *hy, int e)
{
    return hy->ts == NULL || (e >= hy->ts->exp0[hy->ts_part] && e < hy->ts->exp1[hy->ts_part]);
}

/* Whether expert e of layer l is computed by another part or the main
 * part's CPU pass (-sm tensor): its row reads the zero matrix. */
bool hy_elsewhere(const gpu_hybrid *hy, int l, int e)
{
    return hy->ts != NULL && split_slab_role_of(hy->ts, hy->ts_part, l, e) == SPLIT_SLAB_ELSEWHERE;
}

static void mirror_tensor(gpu_hybrid *hy, int l, int e, bool resident);

/* Rewrites expert e's entries of layer l's mirror row from the split state
 * (and, on a part of a tensor split, the split's slab plan). */
void hy_mirror_expert(gpu_hybrid *hy, int l, int e)
{
    const hybrid_layer *L = &hy->st.layer[l];
    const int32_t slot = L->slot_of[e];
    tab_slot_of(hy->h.tab, hy, l)[e] = slot;
    for (int p = 0; p < N_PARTS; p++)
        tab_ptrs(hy->h.tab, hy, l, p)[e] = slot >= 0 ? slot_addr(hy, l, slot) + L->part_off[p]
                                                     : miss_addr(hy, l, p, e);
    hy->tab_gen[l] = hy->stage_gen;
    hy->dirty[l] = true;
    if (hy->ts != NULL && is_moe(hy, l))
        mirror_tensor(hy, l, e, slot >= 0);
}

/* Host-to-device bytes of a decode step (one token): the counters and the
 * split state's, which hydra_session_hybrid_stats reports. */
void hy_count_h2d(gpu_hybrid *hy, uint64_t bytes)
{
    if (hy->step_tok != 1)
        return;
    hy->c.h2d_bytes += bytes;
    hy->st.stats.h2d_bytes += bytes;
}

/* Uploads the dirty rows of the mirror, in stream order before the next
 * step. */
hydra_status hy_upload_tables(gpu_hybrid *hy, gpuStream_t s)
{
    for (int l = 0; l < hy->n_layer; l++) {
        if (!hy->dirty[l])
            continue;
        const size_t off = (size_t)l * hy->tab_row;
        TRY(gpuMemcpyAsync(hy->d_tab + off, hy->h.tab + off, hy->tab_row, gpuMemcpyHostToDevice, s),
            "uploading a slot table");
        hy->c.table_bytes += hy->tab_row;
        hy_count_h2d(hy, hy->tab_row);
        hy->dirty[l] = false;
        hy->c.table_version++;
    }
    return HYDRA_OK;
}

/* -sm tensor (gpu_tensor.c).  An expert of this part's own enters or
 * leaves the split's slab plan with this part's slab (split_slab_hold),
 * and the main part's row of it is rewritten: it reads the zero matrix
 * while this part holds it, else it is the main part's CPU miss.  Both
 * rows reach their devices before the same step: this part's in its
 * hy_admit (eviction) or begin_step (a landed admission), the main
 * part's in its begin_step, which gpu_tensor_forward runs last.  Then an
 * expert computed elsewhere (another part's slab, and off the main part
 * the CPU pass's) reads as resident at the zeroed matrix (every weight
 * pointer at it, whose output is exactly 0), so neither this GPU nor its
 * CPU pass adds it and the all-reduce adds its one result. */
static void mirror_tensor(gpu_hybrid *hy, int l, int e, bool resident)
{
    if (hy_owns(hy, e)) {
        split_slab_hold(hy->ts, hy->ts_part, l, e, resident);
        if (hy->ts_main != NULL && hy->ts_main != hy)
            hy_mirror_expert(hy->ts_main, l, e);
    }
    if (!hy_elsewhere(hy, l, e))
        return;
    tab_slot_of(hy->h.tab, hy, l)[e] = 0; /* not a miss; the slot is not read (the pointers are) */
    for (int p = 0; p < N_PARTS; p++)
        tab_ptrs(hy->h.tab, hy, l, p)[e] = hy->ts_zero;
}

/* Joins part `part` of a tensor split: every MoE row rewritten through
 * mirror_tensor.  The main part's rows written here reach its device in
 * its next begin_step. */
hydra_status gpu_hybrid_join_tensor(gpu_session *g, struct split_slab *s, int part, const uint8_t *zero,
                                    gpu_session *main_part)
{
    gpu_hybrid *hy = g->hy;
    hy->ts = s;
    hy->ts_part = part;
    hy->ts_zero = zero;
    hy->ts_main = main_part->hy;
    for (int l = 0; l < hy->n_layer; l++)
        for (int e = 0; is_moe(hy, l) && e < hy->n_expert; e++)
            hy_mirror_expert(hy, l, e);
    TRY_ST(hy_upload_tables(hy, g->stream));
    TRY(gpuStreamSynchronize(g->stream), "uploading a part's slot tables");
    return HYDRA_OK;
}
