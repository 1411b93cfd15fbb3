/*
 * gpu_hybrid.c — a hybrid decode session on the CUDA backend
 * (gpu_hybrid_internal.h says how the parts fit): the split state, the
 * device slab and its tables, the pinned hand-off buffers, the streams,
 * and the resident experts copied in; gpu_hybrid_create and _free.
 */
#include "gpu_hybrid_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hydra_status alloc_device(gpu_hybrid *hy)
{
    size_t slab = 0;
    for (int l = 0; l < hy->n_layer; l++) {
        hy->slab_off[l] = slab;
        slab += (size_t)hy->st.layer[l].n_slots * hy->st.layer[l].slot_bytes;
    }
    hy->ptr_off = ((size_t)hy->n_expert * sizeof(int32_t) + 255) / 256 * 256;
    hy->tab_row = hy->ptr_off + ((size_t)N_PARTS * hy->n_expert * sizeof(void *) + 255) / 256 * 256;
    uint64_t free_b = 0, total_b = 0;
    TRY_ST(gpu_mem_device(&free_b, &total_b));
    carve c = {0};
    CARVE(&c, hy->slab, slab);
    CARVE(&c, hy->d_tab, hy->tab_row * (size_t)hy->n_layer);
    CARVE(&c, hy->d_hits, sizeof(gk_route) * (size_t)hy->max_routes);
    CARVE(&c, hy->d_n_miss, sizeof(int32_t) * (size_t)hy->n_layer);
    CARVE(&c, hy->d_counts, sizeof(uint32_t) * (size_t)hy->n_layer * (size_t)hy->n_expert);
    CARVE(&c, hy->d_seq, sizeof(uint32_t));
    if (c.total > free_b)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: the expert slab and its tables need %.1f MiB, the device has %.1f "
                          "MiB free after the other weights, the KV cache and the scratch", c.total / 1048576.0,
                          free_b / 1048576.0);
    hy->dev_bytes = c.total;
    hy->c.slab_bytes = slab;
    TRY_ST(carve_alloc(&c, GPU_MEM_WEIGHTS, &hy->dev_base, "expert slab"));
    TRY(gpuMemset(hy->d_counts, 0, sizeof(uint32_t) * (size_t)hy->n_layer * (size_t)hy->n_expert), "zeroing counts");
    TRY(gpuMemset(hy->d_seq, 0, sizeof(uint32_t)), "zeroing the request number");
    return HYDRA_OK;
}

static hydra_status alloc_pinned(gpu_hybrid *hy)
{
    const size_t rows = (size_t)hy->max_rows * (size_t)hy->n_embd, nl = (size_t)hy->n_layer;
    carve c = {0};
    CARVE(&c, hy->h.n_miss, sizeof(int32_t));
    CARVE(&c, hy->h.miss, sizeof(gk_route) * (size_t)hy->max_routes);
    CARVE(&c, hy->h.x, sizeof(float) * rows);
    CARVE(&c, hy->h.part, sizeof(float) * rows);
    CARVE(&c, hy->h.t0, sizeof(unsigned long long) * nl);
    CARVE(&c, hy->h.t1, sizeof(unsigned long long) * nl);
    CARVE(&c, hy->h.t3, sizeof(unsigned long long) * nl);
    CARVE(&c, hy->h.cpu_ns, sizeof(uint64_t) * nl);
    CARVE(&c, hy->h.counts, sizeof(uint32_t) * nl * (size_t)hy->n_expert);
    CARVE(&c, hy->h.tab, hy->tab_row * nl);
    CARVE(&c, hy->h.req, sizeof(uint32_t));
    CARVE(&c, hy->h.done, sizeof(uint32_t));
    CARVE(&c, hy->h.layer, sizeof(int32_t));
    CARVE(&c, hy->h.err, sizeof(int32_t));
    hy->pin_bytes = c.total;
    TRY_ST(carve_alloc(&c, GPU_MEM_PINNED, &hy->pin_base, "hybrid hand-off"));
    memset(hy->pin_base, 0, hy->pin_bytes);
    /* Page-locked host memory is mapped at the same address on devices
     * with unified addressing; the runtime says where. */
    void *dev = NULL;
    TRY(GPU_RT(HostGetDevicePointer)(&dev, hy->pin_base, 0), "mapping the hand-off buffers");
    const ptrdiff_t delta = (uint8_t *)dev - (uint8_t *)hy->pin_base;
#define HY_MAP_(f) hy->d.f = (void *)((uint8_t *)hy->h.f + delta)
    HY_MAP_(n_miss), HY_MAP_(miss), HY_MAP_(x), HY_MAP_(part), HY_MAP_(t0), HY_MAP_(t1), HY_MAP_(t3);
    HY_MAP_(cpu_ns), HY_MAP_(counts), HY_MAP_(tab), HY_MAP_(req), HY_MAP_(done), HY_MAP_(layer), HY_MAP_(err);
#undef HY_MAP_
    return HYDRA_OK;
}

static hydra_status alloc_host(gpu_hybrid *hy)
{
    const size_t nl = (size_t)hy->n_layer, ne = (size_t)hy->n_layer * (size_t)hy->n_expert;
    hy->slab_off = calloc(nl, sizeof *hy->slab_off);
    hy->counts_seen = calloc(ne, sizeof *hy->counts_seen);
    hy->score = calloc(ne, sizeof *hy->score);
    hy->dirty = calloc(nl, sizeof *hy->dirty);
    hy->pass = calloc(nl, sizeof *hy->pass);
    hy->pending = calloc(ne, sizeof *hy->pending);
    hy->moving = calloc(2 * ne, 1);
    hy->stage_off = calloc(nl * N_PARTS, sizeof *hy->stage_off);
    hy->moe_index = calloc(nl, sizeof *hy->moe_index);
    hy->next_moe = calloc(nl, sizeof *hy->next_moe);
    hy->tab_gen = calloc(nl, sizeof *hy->tab_gen);
    if (!hy->slab_off || !hy->counts_seen || !hy->score || !hy->dirty || !hy->pass || !hy->pending || !hy->moving ||
        !hy->stage_off || !hy->moe_index || !hy->next_moe || !hy->tab_gen)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: tables of %d layers", hy->n_layer);
    for (int l = 0; l < hy->n_layer; l++)
        hy->pass[l] = (hy_pass){hy, l};
    return HYDRA_OK;
}

static hydra_status create_streams(gpu_hybrid *hy)
{
    TRY(gpuStreamCreateWithFlags(&hy->side, gpuStreamNonBlocking), "hybrid side stream");
    TRY(gpuStreamCreateWithFlags(&hy->copy, gpuStreamNonBlocking), "hybrid copy stream");
    TRY(gpuStreamCreateWithFlags(&hy->stage_s, gpuStreamNonBlocking), "hybrid stage stream");
    gpuEvent_t *ev[N_EVENTS] = {&hy->ev_fork,     &hy->ev_join,      &hy->ev_tab,     &hy->ev_copy, &hy->ev_stage_go,
                                &hy->ev_landed[0], &hy->ev_landed[1], &hy->ev_free[0], &hy->ev_free[1]};
    for (int i = 0; i < N_EVENTS; i++)
        TRY(GPU_RT(EventCreateWithFlags)(ev[i], GPU_ENUM(EventDisableTiming)), "hybrid events");
    return HYDRA_OK;
}

/* The resident experts' weights into their slots, the mirror filled, the
 * tables uploaded, and the model's expert matrices pointed at them. */
static hydra_status fill_slab(gpu_session *g, gpu_hybrid *hy)
{
    for (int l = 0; l < hy->n_layer; l++) {
        if (!is_moe(hy, l))
            continue;
        const hybrid_layer *L = &hy->st.layer[l];
        for (int s = 0; s < L->n_slots; s++) {
            const int e = L->expert_in[s];
            for (int p = 0; p < N_PARTS && e >= 0; p++)
                if (host_part(hy, l, p, e) != NULL)
                    TRY(gpuMemcpy(slot_addr(hy, l, s) + L->part_off[p], hy_copy_src(hy, host_part(hy, l, p, e)),
                                  L->part_bytes[p],
                                  gpuMemcpyHostToDevice),
                        "copying an expert into the slab");
        }
        for (int e = 0; e < hy->n_expert; e++)
            hy_mirror_expert(hy, l, e);
        for (int p = 0; p < N_PARTS; p++) {
            gk_mat *m = &g->gw.layer[(size_t)l * W_COUNT + part_role[p]];
            m->data = NULL;
            m->expert_data = tab_ptrs(hy->d_tab, hy, l, p);
        }
    }
    TRY_ST(hy_upload_tables(hy, g->stream));
    hy->c.h2d_bytes = 0;
    hy->st.stats.h2d_bytes = 0;
    hy->c.table_bytes = 0;
    TRY(gpuStreamSynchronize(g->stream), "uploading the slot tables");
    return HYDRA_OK;
}

/* Layer L's experts in slot order, then the others ascending: an order
 * whose first n_slots entries hybrid_init puts back into the same slots
 * (a slot left empty takes the next expert instead). */
static const int32_t *slab_order(const hybrid_layer *L, int32_t *ids)
{
    int n = 0;
    for (int s = 0; s < L->n_slots; s++)
        if (L->expert_in[s] >= 0)
            ids[n++] = L->expert_in[s];
    for (int e = 0; e < L->n_expert; e++)
        if (L->slot_of[e] < 0)
            ids[n++] = e;
    return ids;
}

/* The split state: the slot counts and slot contents of o->slab_init
 * (the session's pin file, placement or fraction), else slab_fraction of
 * each MoE layer in expert id order. */
static hydra_status init_split(gpu_hybrid *hy, const gpu_options *o)
{
    hybrid_config cfg = {.mode = HYBRID_CUDA, .resident_fraction = o->slab_fraction, .max_rows = o->n_batch,
                         .count_time = true};
    const hybrid_state *init = o->slab_init;
    if (init == NULL)
        return hybrid_init(&hy->st, hy->w, &cfg);
    if (init->n_layer != (uint32_t)hy->n_layer)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid: the initial slab has %u layers, the model %d",
                          init->n_layer, hy->n_layer);
    const size_t nl = (size_t)hy->n_layer, ne = (size_t)hy->n_expert;
    int32_t *ids = malloc(sizeof(int32_t) * nl * ne + 1), *n_slots = calloc(nl + 1, sizeof *n_slots);
    const int32_t **order = calloc(nl + 1, sizeof *order);
    hydra_status st = ids && n_slots && order ? HYDRA_OK : hydra_fail(HYDRA_ERR_NOMEM, "hybrid: initial slab");
    for (int l = 0; st == HYDRA_OK && l < hy->n_layer; l++) {
        const hybrid_layer *L = &init->layer[l];
        if (!is_moe(hy, l))
            continue;
        if (L->n_expert != hy->n_expert)
            st = hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid: layer %d of the initial slab has %d experts, the "
                            "model %d", l, L->n_expert, hy->n_expert);
        else
            order[l] = slab_order(L, ids + (size_t)l * ne);
        n_slots[l] = L->n_slots;
    }
    cfg.order = order;
    cfg.n_slots = n_slots;
    if (st == HYDRA_OK)
        st = hybrid_init(&hy->st, hy->w, &cfg);
    free(ids);
    free(n_slots);
    free(order);
    return st;
}

/* Resident experts over routed experts, all MoE layers. */
static double resident_share(const gpu_hybrid *hy)
{
    uint64_t resident = 0, all = 0;
    for (int l = 0; l < hy->n_layer; l++) {
        resident += (uint64_t)hybrid_resident(&hy->st, (uint32_t)l);
        all += is_moe(hy, l) ? (uint64_t)hy->n_expert : 0;
    }
    return all ? (double)resident / (double)all : 0.0;
}

hydra_status gpu_hybrid_create(gpu_session *g)
{
    const model_weights *w = g->w;
    if (w->hp.n_expert == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid: %s has no experts to split", w->arch->name);
    if (g->o.slab_fraction < 0.0 || g->o.slab_fraction > 1.0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid: slab fraction %g outside [0, 1]", g->o.slab_fraction);
    gpu_hybrid *hy = calloc(1, sizeof *hy);
    if (hy == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid state");
    g->hy = hy;
    hy->w = w;
    hy->o = g->o;
    hy->handoff_ns = g->o.handoff_bound_ns > 0 ? g->o.handoff_bound_ns : hy_handoff_bound_ns();
    hy->n_layer = (int)w->hp.n_layer;
    hy->n_expert = (int)w->hp.n_expert;
    hy->n_used = (int)w->hp.n_expert_used;
    hy->n_embd = w->hp.n_embd;
    hy->max_rows = g->o.n_batch;
    hy->max_routes = g->o.n_batch * hy->n_used;
    const int threads = g->o.cpu_threads > 0 ? g->o.cpu_threads : 1;
    const hydra_status split = init_split(hy, &g->o);
    g->o.slab_init = hy->o.slab_init = NULL; /* the caller's; not kept past creation */
    TRY_ST(split);
    TRY_ST(alloc_host(hy));
    TRY_ST(alloc_device(hy));
    TRY_ST(alloc_pinned(hy));
    TRY_ST(create_streams(hy));
    TRY_ST(pool_create(&hy->pool, threads));
    if (g->o.cpu_pin) {
        hybrid_cpus_find(&hy->cpus);
        hybrid_pin_pool(hy->pool, &hy->cpus);
    }
    TRY_ST(moe_scratch_init(&hy->scratch, w, g->o.n_batch));
    TRY_ST(hybrid_pass_init(&hy->one, w));
    TRY_ST(act_init(&hy->x, w, w->hp.n_embd, g->o.n_batch));
    if (g->o.stream_prefill || g->o.admit_bytes_per_token > 0)
        hy_pin_experts(hy);
    hy_alloc_stage(hy);
    TRY_ST(fill_slab(g, hy));
    TRY_ST(hy_calibrate(hy));
    if (g->o.handoff_flags)
        TRY_ST(hy_start_spinner(hy));
    hy->c.registered = hy->registered;
    if (g->o.verbose)
        fprintf(stderr, "hybrid: slab %.1f MiB (%.0f%% of the MoE layers' experts), expert stacks %s, %d CPU "
                "threads\n", hy->c.slab_bytes / 1048576.0, 100.0 * resident_share(hy),
                !hy->registered    ? "not pinned"
                : hy->stage_base ? "pinned (prefill stages them through 2 device buffers)"
                                 : "pinned (prefill reads misses over the bus)",
                threads);
    return HYDRA_OK;
}

void gpu_hybrid_free(gpu_session *g)
{
    gpu_hybrid *hy = g->hy;
    if (hy == NULL)
        return;
    if (hy->spinner_started) {
        atomic_store(&hy->stop, true);
        pthread_join(hy->spinner, NULL);
    }
    if (hy->copy != NULL)
        gpuStreamSynchronize(hy->copy);
    if (hy->side != NULL)
        gpuStreamSynchronize(hy->side);
    if (hy->stage_s != NULL)
        gpuStreamSynchronize(hy->stage_s);
    hy_free_stage(hy);
    hy_unpin_all(hy);
    free(hy->region);
    gpuEvent_t ev[N_EVENTS] = {hy->ev_fork,     hy->ev_join,      hy->ev_tab,     hy->ev_copy, hy->ev_stage_go,
                               hy->ev_landed[0], hy->ev_landed[1], hy->ev_free[0], hy->ev_free[1]};
    for (int i = 0; i < N_EVENTS; i++)
        if (ev[i] != NULL)
            gpuEventDestroy(ev[i]);
    gpuStream_t streams[3] = {hy->side, hy->copy, hy->stage_s};
    for (int i = 0; i < 3; i++)
        if (streams[i] != NULL)
            gpuStreamDestroy(streams[i]);
    pool_destroy(hy->pool);
    moe_scratch_free(&hy->scratch);
    hybrid_pass_free(&hy->one);
    act_free(&hy->x);
    gpu_mem_free(GPU_MEM_PINNED, hy->pin_base, hy->pin_bytes);
    gpu_mem_free(GPU_MEM_WEIGHTS, hy->dev_base, hy->dev_bytes);
    hybrid_free(&hy->st);
    free(hy->slab_off);
    free(hy->counts_seen);
    free(hy->score);
    free(hy->dirty);
    free(hy->pass);
    free(hy->pending);
    free(hy->moving);
    free(hy->stage_off);
    free(hy->moe_index);
    free(hy->next_moe);
    free(hy->tab_gen);
    free(hy);
    g->hy = NULL;
}
