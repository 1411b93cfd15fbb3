/*
 * gpu_hybrid_step.c — one step of hybrid decode (gpu_hybrid_internal.h):
 * the split of a MoE layer between the GPU and the CPU pass (or a
 * streamed prefill layer), and what runs before and after a step.
 */
#include "gpu_hybrid_internal.h"

#include <unistd.h>

/* The flag hand-off's bound on the current device: a reply later than
 * this fails the step instead of hanging it.  A CPU pass takes well under
 * a millisecond, but it reads the missed experts from the mapped file, so
 * a cold page cache behind a busy disk, or a loaded host, can hold it for
 * seconds (on the lent host, hybrid tests failed at a 2 s bound while
 * other test processes ran and another wrote 17 GiB: docs/PERFORMANCE.md,
 * "CUDA decode, session 9: the router" and "... the combine without
 * cluster barriers"): 30 s.  A device with a kernel run-time limit (a display's
 * watchdog) would kill the waiting kernel first, taking the context with
 * it: there the bound stays at 2 s. */
unsigned long long hy_handoff_bound_ns(void)
{
    const unsigned long long watchdog_safe = 2000000000ull, patient = 30000000000ull;
    int dev = 0, limited = 1;
    if (gpuGetDevice(&dev) != gpuSuccess ||
        gpuDeviceGetAttribute(&limited, gpuDevAttrKernelExecTimeout, dev) != gpuSuccess) {
        (void)gpuGetLastError(); /* not known: the safe bound, and no error left for the next call */
        return watchdog_safe;
    }
    return limited ? watchdog_safe : patient;
}

static hydra_status split_layer(gpu_session *g, gpu_hybrid *hy, int l, int n, const gk_norm_out *next)
{
    const int n_routes = n * hy->n_used;
    gk_hy_split_args a = {.routes = g->routes, .n_tok = n, .n_used = hy->n_used,
                           .slot_of = tab_slot_of(hy->d_tab, hy, l), .hits = hy->d_hits,
                           .n_miss_dev = hy->d_n_miss + l, .counts = hy->d_counts + (size_t)l * hy->n_expert,
                           .miss = hy->d.miss, .n_miss_host = hy->d.n_miss, .xn = g->xn.f, .n_embd = hy->n_embd,
                           .x_host = hy->d.x, .stamp = hy->d.t0 + l, .layer = l};
    const bool flags = hy->o.handoff_flags;
    if (flags) {
        a.seq = hy->d_seq;
        a.req_host = hy->d.req;
        a.layer_host = hy->d.layer;
    }
    TRY(gk_hy_split(g->stream, &a), "hybrid split");
    gpu_prof_mark(g, OP_GROUP);
    if (!flags) {
        TRY(gpuEventRecord(hy->ev_fork, g->stream), "hybrid fork");
        TRY(GPU_RT(StreamWaitEvent)(hy->side, hy->ev_fork, 0), "hybrid fork");
        TRY(GPU_RT(LaunchHostFunc)(hy->side, hy_cpu_pass, &hy->pass[l]), "hybrid CPU pass");
        TRY(gpuEventRecord(hy->ev_join, hy->side), "hybrid join");
    }
    TRY_ST(gpu_experts_routed(g, l, hy->d_hits, n_routes));
    TRY(gk_hy_stamp(g->stream, hy->d.t1 + l), "hybrid stamp");
    if (flags)
        TRY(gk_hy_wait(g->stream, hy->d_seq, hy->d.done, hy->d.err, hy->handoff_ns), "hybrid wait");
    else
        TRY(GPU_RT(StreamWaitEvent)(g->stream, hy->ev_join, 0), "hybrid join");
    const gk_hy_combine_args c = {.hits = hy->d_hits, .y = g->y, .part = hy->d.part, .n_miss = hy->d_n_miss + l,
                             .n_tok = n, .n_used = hy->n_used, .n_embd = hy->n_embd, .x = g->x,
                             .stamp = hy->d.t3 + l};
    TRY(gk_hy_combine(g->stream, &c, next), "hybrid combine");
    gpu_prof_mark(g, OP_COMBINE);
    return HYDRA_OK;
}

/* Whether a step of n tokens streams missed experts (staged copies, or
 * the grouped matmul over the pinned copy) instead of splitting. */
static bool streams(const gpu_hybrid *hy, int n)
{
    return n > GK_MATVEC_MAX_TOK && n >= hy->stream_min_tok && hy->registered && hy->o.stream_prefill;
}

hydra_status gpu_hybrid_experts(gpu_session *g, int l, int n, const gk_norm_out *next)
{
    gpu_hybrid *hy = g->hy;
    if (!streams(hy, n))
        return split_layer(g, hy, l, n, next);
    TRY(gk_hy_count(g->stream, g->routes, n * hy->n_used, hy->d_counts + (size_t)l * hy->n_expert), "counting");
    if (hy->stage_base != NULL)
        return hy_staged_layer(g, hy, l, n, next);
    return gpu_moe_experts(g, l, n, next);
}

/* No table row may point into a staging generation that is gone: such a
 * row is counted and rewritten before the step. */
static void check_stage_gen(gpu_hybrid *hy)
{
    for (int l = 0; l < hy->n_layer; l++) {
        if (!is_moe(hy, l) || hy->tab_gen[l] == hy->stage_gen)
            continue;
        hy->c.stale_stage_refs++;
        for (int e = 0; e < hy->n_expert; e++)
            hy_mirror_expert(hy, l, e);
    }
}

/* After a step whose hand-off timed out (gpu_hybrid_end_step), the CPU
 * side may still be in that step's pass, writing the partial sums and
 * reading the rows that this step's split would hand it: the step waits
 * until the last request is answered, then clears the failure, which the
 * wait kernel sets and nothing else resets (else one late reply would fail
 * every later step of the session). */
static hydra_status recover_handoff(gpu_hybrid *hy)
{
    if (*(volatile int32_t *)hy->h.err == 0)
        return HYDRA_OK;
    const uint64_t t0 = now_ns();
    while (__atomic_load_n(hy->h.done, __ATOMIC_ACQUIRE) != __atomic_load_n(hy->h.req, __ATOMIC_ACQUIRE)) {
        if (now_ns() - t0 > hy->handoff_ns)
            return hydra_fail(HYDRA_ERR_IO, "hybrid: the CPU side has still not answered the failed step's last "
                              "hand-off after %.1f s more", hy->handoff_ns / 1e9);
        usleep(100);
    }
    *(volatile int32_t *)hy->h.err = 0;
    return HYDRA_OK;
}

hydra_status gpu_hybrid_begin_step(gpu_session *g, int64_t n)
{
    gpu_hybrid *hy = g->hy;
    TRY_ST(recover_handoff(hy));
    hy->step_tok = n;
    hy->step_split = !streams(hy, (int)n);
    atomic_store(&hy->active, true);
    TRY_ST(hy_install_landed(hy));
    check_stage_gen(hy);
    TRY_ST(hy_upload_tables(hy, g->stream));
    if (!hy->step_split && hy->stage_base != NULL) {
        hy->c.staged_steps++;
        hy->c.stage_bytes += hy->stage_step_bytes;
    }
    hy_check_in_flight(hy);
    hybrid_begin_step(&hy->st, n, n == 1);
    if (n == 1)
        hy->c.decode_tokens++;
    return HYDRA_OK;
}

hydra_status gpu_hybrid_enqueue_tail(gpu_session *g)
{
    gpu_hybrid *hy = g->hy;
    TRY(gpuMemcpyAsync(hy->h.counts, hy->d_counts, sizeof(uint32_t) * (size_t)hy->n_layer * (size_t)hy->n_expert,
                       gpuMemcpyDeviceToHost, g->stream),
        "copying expert counts");
    return HYDRA_OK;
}

static void record_times(gpu_hybrid *hy)
{
    for (int l = 0; l < hy->n_layer; l++) {
        if (!is_moe(hy, l))
            continue;
        const uint64_t t0 = hy->h.t0[l], t1 = hy->h.t1[l], t3 = hy->h.t3[l], cpu = hy->h.cpu_ns[l];
        if (t1 < t0 || t3 < t1)
            continue; /* the clock read out of order: not a sample */
        const uint64_t wall = t3 - t0, hit = t1 - t0;
        hybrid_record_handoff(&hy->st, (uint32_t)l, wall > cpu ? wall - cpu : 0);
        hybrid_layer_stats *s = &hy->st.layer[l].stats;
        s->hit_ns += hit;
        s->miss_ns += cpu;
        s->overlap_ns += hit < cpu ? hit : cpu;
        if (hy->step_tok == 1) {
            hy->c.exposed_ns += t3 - t1;
            hy->c.cpu_ns += cpu;
            hy->c.hit_ns += hit;
            hy->c.layer_steps++;
        }
    }
}

hydra_status gpu_hybrid_end_step(gpu_session *g)
{
    gpu_hybrid *hy = g->hy;
    atomic_store(&hy->active, false);
    if (*(volatile int32_t *)hy->h.err != 0)
        return hydra_fail(HYDRA_ERR_IO, "hybrid: the CPU side did not answer a layer's hand-off within %.1f s",
                          hy->handoff_ns / 1e9);
    if (hy->step_split)
        record_times(hy);
    hy_update_scores(hy);
    return hy_admit(g, hy);
}
