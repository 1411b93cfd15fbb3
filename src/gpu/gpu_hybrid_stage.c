/*
 * gpu_hybrid_stage.c — staged prefill of hybrid decode
 * (gpu_hybrid_internal.h): the MoE layer order, the two device staging
 * buffers and the DMA of each MoE layer's stacks into them, a layer ahead
 * of the compute.
 */
#include "gpu_hybrid_internal.h"

#include <stdio.h>

/* MoE layers in order: each layer's index among them and the next one. */
static void moe_order(gpu_hybrid *hy)
{
    int i = 0, prev = -1;
    hy->first_moe = -1;
    for (int l = 0; l < hy->n_layer; l++) {
        hy->next_moe[l] = -1;
        hy->moe_index[l] = is_moe(hy, l) ? i++ : -1;
        if (hy->moe_index[l] < 0)
            continue;
        if (prev >= 0)
            hy->next_moe[prev] = l;
        else
            hy->first_moe = l;
        prev = l;
    }
}

size_t hy_stack_bytes(const gpu_hybrid *hy, int l, int p)
{
    const wtensor *t = &hy->w->layer[l].w[part_role[p]];
    return t->data == NULL ? 0 : t->mat_bytes * (size_t)t->ne[2];
}

/* Part offsets of every MoE layer inside a staging buffer (256-byte
 * aligned), the largest layer's bytes, and what one streamed step copies. */
static void stage_layout(gpu_hybrid *hy)
{
    hy->stage_bytes = 0;
    hy->stage_step_bytes = 0;
    for (int l = 0; l < hy->n_layer; l++) {
        size_t off = 0;
        for (int p = 0; p < N_PARTS && is_moe(hy, l); p++) {
            hy->stage_off[(size_t)l * N_PARTS + p] = off;
            off += (hy_stack_bytes(hy, l, p) + 255) / 256 * 256;
            hy->stage_step_bytes += hy_stack_bytes(hy, l, p);
        }
        hy->stage_bytes = off > hy->stage_bytes ? off : hy->stage_bytes;
    }
}

/* Two staging buffers, once per session, when the stacks are pinned (the
 * copies are DMA from the pinned copy) and the device has room; without
 * them a streamed prefill reads the pinned copy over the bus. */
void hy_alloc_stage(gpu_hybrid *hy)
{
    moe_order(hy);
    stage_layout(hy);
    bool misses = false; /* a layer with fewer slots than experts: else nothing is ever staged */
    for (int l = 0; l < hy->n_layer; l++)
        misses |= is_moe(hy, l) && hy->st.layer[l].n_slots < hy->n_expert;
    uint64_t free_b = 0, total_b = 0;
    if (!hy->registered || !hy->o.stream_prefill || !misses || hy->stage_bytes == 0 ||
        gpu_mem_device(&free_b, &total_b) != HYDRA_OK)
        return;
    const size_t bytes = 2 * hy->stage_bytes;
    void *base = NULL;
    if (bytes > free_b || gpu_mem_alloc(GPU_MEM_SCRATCH, bytes, &base, "prefill staging") != HYDRA_OK) {
        if (hy->o.verbose)
            fprintf(stderr, "hybrid: no room for the prefill staging area (%.1f MiB, %.1f MiB free): prefill reads "
                    "missed experts over the bus\n", bytes / 1048576.0, free_b / 1048576.0);
        return;
    }
    hy->stage_base = base;
    hy->stage_alloc = bytes;
    hy->stage[0] = base;
    hy->stage[1] = (uint8_t *)base + hy->stage_bytes;
    hy->stage_gen++;
}

void hy_free_stage(gpu_hybrid *hy)
{
    gpu_mem_free(GPU_MEM_SCRATCH, hy->stage_base, hy->stage_alloc);
    hy->stage_base = NULL;
    hy->stage_alloc = 0;
    hy->stage_gen++;
}

/* Layer l's stacks from the pinned copy into staging buffer b on the stage
 * stream (DMA), then ev_landed[b]. */
hydra_status hy_stage_copy(gpu_hybrid *hy, int l, int b)
{
    for (int p = 0; p < N_PARTS; p++) {
        const uint8_t *host = host_part(hy, l, p, 0);
        if (host == NULL)
            continue;
        TRY(gpuMemcpyAsync(hy->stage[b] + hy->stage_off[(size_t)l * N_PARTS + p], hy_copy_src(hy, host),
                           hy_stack_bytes(hy, l, p), gpuMemcpyHostToDevice, hy->stage_s),
            "staging an expert stack");
    }
    TRY(gpuEventRecord(hy->ev_landed[b], hy->stage_s), "staging done");
    return HYDRA_OK;
}

/* One MoE layer of a streamed step.  The first MoE layer starts the stage
 * stream (its own and the next layer's stacks); every layer waits for its
 * stacks, computes, and hands its buffer to the MoE layer after next.  All
 * copies issued are waited for by the main stream, so a captured step
 * joins the stage stream back. */
hydra_status hy_staged_layer(gpu_session *g, gpu_hybrid *hy, int l, int n, const gk_norm_out *next)
{
    const int b = hy->moe_index[l] % 2, l1 = hy->next_moe[l], l2 = l1 >= 0 ? hy->next_moe[l1] : -1;
    if (l == hy->first_moe) {
        TRY(gpuEventRecord(hy->ev_stage_go, g->stream), "staging start");
        TRY(GPU_RT(StreamWaitEvent)(hy->stage_s, hy->ev_stage_go, 0), "staging start");
        TRY_ST(hy_stage_copy(hy, l, b));
        if (l1 >= 0)
            TRY_ST(hy_stage_copy(hy, l1, 1 - b));
    }
    TRY(GPU_RT(StreamWaitEvent)(g->stream, hy->ev_landed[b], 0), "waiting for staged experts");
    TRY_ST(gpu_moe_experts(g, l, n, next));
    if (l2 < 0)
        return HYDRA_OK;
    TRY(gpuEventRecord(hy->ev_free[b], g->stream), "staging buffer free");
    TRY(GPU_RT(StreamWaitEvent)(hy->stage_s, hy->ev_free[b], 0), "staging buffer free");
    return hy_stage_copy(hy, l2, b);
}
