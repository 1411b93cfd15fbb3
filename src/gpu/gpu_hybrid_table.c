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

/* Rewrites expert e's entries of layer l's mirror row from the split state. */
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

/* -sm tensor (gpu_tensor.c): the experts of another part's slab, and on a
 * part other than the main one the CPU pass's too, read here as resident
 * at a zeroed matrix (every weight pointer at zero, whose output is
 * exactly 0), so neither this GPU nor its CPU pass adds them and the
 * all-reduce adds their one result.  A static slab only: an admission or
 * a staged prefill rewrites rows from the split state. */
hydra_status gpu_hybrid_point_elsewhere(gpu_session *g, const struct split_slab *s, int part, const uint8_t *zero)
{
    gpu_hybrid *hy = g->hy;
    if (hy->o.admit_bytes_per_token > 0 || hy->stage_base != NULL)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "-sm tensor: a part's hybrid slab must be static (no admissions, "
                          "no staged prefill)");
    for (int l = 0; l < hy->n_layer; l++)
        for (int e = 0; is_moe(hy, l) && e < hy->n_expert; e++) {
            if (split_slab_role_of(s, part, l, e) != SPLIT_SLAB_ELSEWHERE)
                continue;
            tab_slot_of(hy->h.tab, hy, l)[e] = 0; /* not a miss; the slot is not read (the pointers are) */
            for (int p = 0; p < N_PARTS; p++)
                tab_ptrs(hy->h.tab, hy, l, p)[e] = zero;
            hy->dirty[l] = true;
        }
    TRY_ST(hy_upload_tables(hy, g->stream));
    TRY(gpuStreamSynchronize(g->stream), "uploading a part's slot tables");
    return HYDRA_OK;
}
