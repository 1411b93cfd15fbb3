/*
 * gpu_multi.c — one session over several GPUs (issue 13,
 * docs/MULTIGPU.md).  The plan (src/split.h) gives each device a part; each
 * part is an ordinary gpu_session on its device that runs a layer range
 * (gpu_options.device, layer0, layer1) with its own weights, KV cache,
 * scratch, stream, graph cache and, in hybrid decode, its own slab holding
 * the hot experts of its own layers.
 *
 * A step (-sm layer): part 0 embeds and runs its layers; every later part's
 * stream waits for the previous part's event, copies the hidden state rows
 * from the previous device into its own x (a peer copy, asynchronous on the
 * stream), and runs its layers; the last part, on the main GPU, runs the
 * output head.  Nothing on the host waits inside the step: the host syncs
 * each part's stream once at the end, as the single-GPU step does.  Each
 * part's share of the step is captured as its own CUDA graph, keyed by the
 * step's structure and the split cache's generation (a graph is never
 * replayed after the memory it captured changed).
 *
 * -sm tensor: the parts are sessions over each part's model view, made and
 * driven by gpu_tensor.c (one all-reduce per sublayer); this file keeps
 * the plan, the split cache and the merged counters for both modes.
 */
#include "gpu_tensor.h"

#include "../hybrid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room left on a device planned by its free memory: the CUDA context's
 * later growth (graphs, kernel images) and the driver's own. */
static const uint64_t FREE_MARGIN = 768ull << 20;

typedef struct gpu_multi {
    split_plan plan;
    gpu_session *part[SPLIT_MAX_DEV];
    gpuEvent_t done[SPLIT_MAX_DEV]; /* part i's share of the step enqueued */
    split_cache cache;
    hybrid_state slab;              /* the initial slab by fraction, when the caller gave none */
    hybrid_state view;              /* gpu_multi_split_state's merged view (borrows the parts' tables) */
    hybrid_layer *view_layer;       /* its n_layer layers, copied from the parts at each call */
    uint64_t peer_bytes, steps;
    gpu_tensor *tensor;             /* -sm tensor's step (gpu_tensor.c); NULL for -sm layer */
} gpu_multi;

int gpu_device_count(void)
{
    int n = 0;
    return gpuGetDeviceCount(&n) == gpuSuccess ? n : 0;
}

hydra_status gpu_mem_device_of(int device, uint64_t *free_bytes, uint64_t *total_bytes)
{
    int was = 0;
    TRY(gpuGetDevice(&was), "reading the current device");
    TRY(gpuSetDevice(device), "selecting a device");
    const hydra_status st = gpu_mem_device(free_bytes, total_bytes);
    gpuSetDevice(was);
    return st;
}

/* Bytes each device offers: the budget, else its free memory less a margin. */
static hydra_status device_avail(const gpu_options *o, int n_dev, uint64_t *avail)
{
    for (int d = 0; d < n_dev; d++) {
        if (o->split.budget > 0) {
            avail[d] = o->split.budget;
            continue;
        }
        size_t f = 0, t = 0;
        TRY(gpuSetDevice(d), "selecting a device");
        TRY(gpuMemGetInfo(&f, &t), "reading a device's free memory");
        avail[d] = f > FREE_MARGIN ? f - FREE_MARGIN : 0;
    }
    return HYDRA_OK;
}

static hydra_status make_plan(gpu_multi *m, const model_weights *w, const gpu_options *o)
{
    const int n_dev = gpu_device_count();
    if (n_dev > SPLIT_MAX_DEV)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "multi-GPU: %d devices, at most %d", n_dev, SPLIT_MAX_DEV);
    if (o->split.n_ratio > n_dev)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "-ts: %d ratios for %d device%s", o->split.n_ratio, n_dev,
                          n_dev == 1 ? "" : "s");
    uint64_t avail[SPLIT_MAX_DEV];
    TRY_ST(device_avail(o, n_dev, avail));
    float ratios[SPLIT_MAX_DEV] = {0};
    memcpy(ratios, o->split.ratio, sizeof(float) * (size_t)o->split.n_ratio);
    split_model sm;
    uint64_t *layer_bytes = NULL;
    hydra_status st = split_model_of(&sm, &layer_bytes, w, o->n_ctx, o->n_batch, o->kv_type, o->hybrid);
    const split_request rq = {.mode = (split_mode)o->split.mode, .n_dev = n_dev, .avail = avail,
                              .ratios = o->split.n_ratio > 0 ? ratios : NULL, .main_gpu = o->split.main_gpu};
    if (st == HYDRA_OK)
        st = split_plan_make(&m->plan, &sm, &rq);
    free(layer_bytes);
    if (st == HYDRA_OK && o->verbose) {
        char buf[2048];
        split_plan_describe(&m->plan, buf, sizeof buf);
        fputs(buf, stderr);
    }
    return st;
}

/* Peer access from each part's device to the previous part's, where the
 * hardware has it (else the runtime stages the copy through the host). */
static hydra_status enable_peers(const gpu_multi *m)
{
    for (int i = 1; i < m->plan.n_part; i++) {
        const int dst = m->plan.part[i].device, src = m->plan.part[i - 1].device;
        int can = 0;
        if (dst == src || GPU_RT(DeviceCanAccessPeer)(&can, dst, src) != gpuSuccess || !can)
            continue;
        TRY(gpuSetDevice(dst), "selecting a device");
        const gpuError_t e = GPU_RT(DeviceEnablePeerAccess)(src, 0);
        if (e == GPU_ENUM(ErrorPeerAccessAlreadyEnabled))
            gpuGetLastError(); /* enabled by an earlier session: clear the sticky error */
        else if (e != gpuSuccess)
            return gpu_fail(e, "enabling peer access between devices");
    }
    return HYDRA_OK;
}

static hydra_status create_parts(gpu_multi *m, const model_weights *w, const gpu_options *o)
{
    if (o->hybrid && o->slab_init == NULL) { /* one fraction for every part's layers */
        const hybrid_config cfg = {.mode = HYBRID_CUDA, .resident_fraction = o->slab_fraction,
                                   .max_rows = o->n_batch};
        TRY_ST(hybrid_init(&m->slab, w, &cfg));
    }
    for (int i = 0; i < m->plan.n_part; i++) {
        const split_part *q = &m->plan.part[i];
        gpu_options po = *o;
        po.split = (gpu_split){0};
        po.device = q->device;
        po.layer0 = q->layer0;
        po.layer1 = q->layer1;
        if (o->hybrid && o->slab_init == NULL)
            po.slab_init = &m->slab; /* each part's slab takes the slots of its own layers */
        /* The parts' CPU passes never run at once (a token's layers run one
         * device after the other) but each part keeps its pool and flag
         * thread: sharing the threads keeps them within the cores (one
         * pool each of all the threads measured 123 against 146 tokens/s
         * at a 50% slab, docs/PERFORMANCE.md). */
        if (o->hybrid && o->cpu_threads > m->plan.n_part)
            po.cpu_threads = o->cpu_threads / m->plan.n_part;
        TRY_ST(gpu_session_create(&m->part[i], w, &po));
        TRY(GPU_RT(EventCreateWithFlags)(&m->done[i], GPU_ENUM(EventDisableTiming)), "creating a part's event");
    }
    hybrid_free(&m->slab); /* the parts keep their own tables */
    return HYDRA_OK;
}

hydra_status gpu_multi_create(gpu_session **out, const model_weights *w, const gpu_options *o)
{
    *out = NULL;
    gpu_session *g = calloc(1, sizeof *g);
    gpu_multi *m = calloc(1, sizeof *m);
    if (g == NULL || m == NULL) {
        free(g);
        free(m);
        return hydra_fail(HYDRA_ERR_NOMEM, "multi-GPU session");
    }
    g->w = w;
    g->o = *o;
    g->multi = m;
    hydra_status st = make_plan(m, w, o);
    if (st == HYDRA_OK && o->split.mode == SPLIT_TENSOR)
        st = gpu_tensor_create(&m->tensor, m->part, &m->plan, w, o);
    else if (st == HYDRA_OK)
        st = enable_peers(m);
    if (st == HYDRA_OK && m->tensor == NULL)
        st = create_parts(m, w, o);
    if (st != HYDRA_OK) {
        gpu_multi_free(g);
        return st;
    }
    *out = g;
    return HYDRA_OK;
}

void gpu_multi_free(gpu_session *g)
{
    gpu_multi *m = g->multi;
    gpu_tensor_free(m->tensor, m->part); /* its parts, then the views they read */
    for (int i = 0; i < m->plan.n_part; i++) {
        if (m->part[i] == NULL)
            continue;
        gpuSetDevice(m->part[i]->o.device);
        if (m->done[i] != NULL)
            gpuEventDestroy(m->done[i]);
        gpu_session_free(m->part[i]);
    }
    hybrid_free(&m->slab);
    free(m->view_layer);
    free(m);
    free(g);
}

hydra_status gpu_multi_forward(gpu_session *g, int64_t pos0, const int32_t *tokens, int64_t n, bool all_rows,
                               float *logits)
{
    gpu_multi *m = g->multi;
    const split_shape shape = {.n_tok = n, .max_kv = gpu_context_bucket(pos0 + n, g->o.n_ctx), .all_rows = all_rows};
    const split_state *ss = split_cache_get(&m->cache, &m->plan, g->w->hp.n_embd, &shape);
    if (m->tensor != NULL) {
        const hydra_status st = gpu_tensor_forward(m->tensor, m->part, ss, pos0, tokens, n, all_rows, logits);
        m->steps += st == HYDRA_OK;
        return st;
    }
    hydra_status st = HYDRA_OK;
    int launched = 0;
    for (int i = 0; i < m->plan.n_part && st == HYDRA_OK; i++) {
        gpu_session *p = m->part[i];
        TRY(gpuSetDevice(p->o.device), "selecting a part's device");
        if (i > 0) { /* the previous part's hidden state, device to device, after its layers */
            const gpu_session *prev = m->part[i - 1];
            const size_t bytes = sizeof(float) * (size_t)ss->boundary_floats;
            gpuError_t e = GPU_RT(StreamWaitEvent)(p->stream, m->done[i - 1], 0);
            if (e == gpuSuccess)
                e = GPU_RT(MemcpyPeerAsync)(p->x, p->o.device, prev->x, prev->o.device, bytes, p->stream);
            if (e != gpuSuccess) {
                st = gpu_fail(e, "copying the hidden state to the next device");
                break;
            }
            m->peer_bytes += bytes;
        }
        st = gpu_step_launch(p, pos0, tokens, n, all_rows, ss->generation);
        if (st == HYDRA_OK && i + 1 < m->plan.n_part) {
            const gpuError_t e = gpuEventRecord(m->done[i], p->stream);
            st = e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "marking a part's step");
        }
        launched = st == HYDRA_OK ? i + 1 : i;
    }
    /* Every launched part is waited for, also after a failure, so that no
     * stream still runs into the buffers of the next step. */
    for (int i = 0; i < launched; i++) {
        gpu_session *p = m->part[i];
        gpuSetDevice(p->o.device);
        const hydra_status fin = st == HYDRA_OK ? gpu_step_finish(p, n, all_rows, logits) : HYDRA_OK;
        if (st != HYDRA_OK)
            gpuStreamSynchronize(p->stream);
        if (st == HYDRA_OK)
            st = fin;
    }
    m->steps += st == HYDRA_OK;
    return st;
}

float *gpu_multi_logits_row(const gpu_session *g)
{
    const gpu_multi *m = g->multi;
    for (int i = 0; i < m->plan.n_part; i++) /* one part runs the head: a layer split's last, a tensor split's main */
        if (m->part[i]->logits_row != NULL)
            return m->part[i]->logits_row;
    return NULL;
}

void gpu_multi_stats(const gpu_session *g, gpu_stats *out)
{
    const gpu_multi *m = g->multi;
    memset(out, 0, sizeof *out);
    out->steps = m->steps;
    for (int i = 0; i < m->plan.n_part; i++) {
        gpu_stats s;
        gpu_session_stats(m->part[i], &s);
        out->captures += s.captures;
        out->replays += s.replays;
        out->graphs_cached += s.graphs_cached;
    }
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* Sums over parts; per-token counts (decode tokens) and quantiles are the
 * largest part's.  reset: reset every part's instead.  -sm tensor: the
 * lookups and hits are the main part's (its misses are exactly the CPU
 * pass's; another part's slab reads as a hit there, and every other part
 * has none: gpu_tensor.c), and so are the CPU pass's times and their
 * layer steps: every part runs every MoE layer, but only the main part's
 * pass computes anything, so summing the parts' layer steps halved the
 * reported "CPU pass per MoE layer" on two GPUs (session 5's 184 us was
 * the main part's ~368, docs/PERFORMANCE.md "Multi-GPU, session 6"). */
void gpu_multi_hybrid_counters(const gpu_session *g, gpu_hybrid_counters *out, bool reset)
{
    const gpu_multi *m = g->multi;
    for (int i = 0; i < m->plan.n_part; i++) {
        if (reset) {
            gpu_hybrid_counters_reset(m->part[i]);
            continue;
        }
        gpu_hybrid_counters c;
        gpu_hybrid_counters_get(m->part[i], &c);
        out->engaged |= c.engaged;
        out->registered |= c.registered;
        out->decode_tokens = max_u64(out->decode_tokens, c.decode_tokens);
        const bool routes = m->tensor == NULL || m->plan.part[i].head;
        out->lookups += routes ? c.lookups : 0;
        out->hits += routes ? c.hits : 0;
        out->resident += c.resident;
        out->slab_bytes += c.slab_bytes;
        out->h2d_bytes += c.h2d_bytes;
        out->admit_bytes += c.admit_bytes;
        out->table_bytes += c.table_bytes;
        out->admissions += c.admissions;
        out->table_version += c.table_version;
        out->unsafe_replays += c.unsafe_replays;
        out->handoff_p50_ns = max_u64(out->handoff_p50_ns, c.handoff_p50_ns);
        out->handoff_p99_ns = max_u64(out->handoff_p99_ns, c.handoff_p99_ns);
        out->cpu_ns += routes ? c.cpu_ns : 0;
        out->hit_ns += routes ? c.hit_ns : 0;
        out->exposed_ns += routes ? c.exposed_ns : 0;
        out->layer_steps += routes ? c.layer_steps : 0;
        out->register_ms += c.register_ms;
        /* every part stages its own layers in the same steps: the steps
         * once, the bytes and stale references summed, the crossover and
         * the rates of the part that streams slowest */
        out->staged_steps = max_u64(out->staged_steps, c.staged_steps);
        out->stage_bytes += c.stage_bytes;
        out->stale_stage_refs += c.stale_stage_refs;
        out->stream_min_tokens = c.stream_min_tokens > out->stream_min_tokens ? c.stream_min_tokens
                                                                              : out->stream_min_tokens;
        if (c.stage_gbps > 0 && (out->stage_gbps == 0 || c.stage_gbps < out->stage_gbps))
            out->stage_gbps = c.stage_gbps; /* -sm tensor: only the main part stages */
        out->cpu_expert_us = c.cpu_expert_us > out->cpu_expert_us ? c.cpu_expert_us : out->cpu_expert_us;
        out->cpu_route_us = c.cpu_route_us > out->cpu_route_us ? c.cpu_route_us : out->cpu_route_us;
    }
}

/* -sm tensor: each layer's slots and residents summed over the parts'
 * slabs (each part holds experts of its own range), so --stats counts
 * every GPU's.  The merged layers are then counts only: their slot tables
 * are the main part's, so they are cleared rather than left describing
 * fewer slots than n_slots says (nothing reads them: session.c's stats). */
static void add_part_slab(hybrid_layer *view, const hybrid_state *part)
{
    for (uint32_t l = 0; l < part->n_layer; l++) {
        view[l].n_slots += part->layer[l].n_slots;
        view[l].n_resident += part->layer[l].n_resident;
        view[l].slot_of = view[l].expert_in = view[l].host_only = NULL;
    }
}

const struct hybrid_state *gpu_multi_split_state(const gpu_session *g)
{
    gpu_multi *m = g->multi;
    const hybrid_state *first = gpu_hybrid_split_state(m->part[0]);
    if (first == NULL)
        return NULL;
    if (m->view_layer == NULL && (m->view_layer = calloc(first->n_layer, sizeof *m->view_layer)) == NULL)
        return NULL;
    m->view = *first;
    m->view.layer = m->view_layer;
    m->view.stats = (hybrid_stats){0};
    m->view.version = 0;
    for (int i = 0; i < m->plan.n_part; i++) {
        const hybrid_state *st = gpu_hybrid_split_state(m->part[i]);
        const split_part *q = &m->plan.part[i];
        /* -sm tensor: every part runs every layer; the main part's tables
         * and counters say which routes the CPU computed */
        const size_t n = m->tensor != NULL && !q->head ? 0 : (size_t)(q->layer1 - q->layer0);
        memcpy(&m->view_layer[q->layer0], &st->layer[q->layer0], sizeof *m->view_layer * n);
        m->view.stats.decode_tokens = max_u64(m->view.stats.decode_tokens, st->stats.decode_tokens);
        m->view.stats.h2d_bytes += st->stats.h2d_bytes;
        m->view.stats.repins += st->stats.repins;
        m->view.version += st->version;
    }
    for (int i = 0; m->tensor != NULL && i < m->plan.n_part; i++) /* after the main part's layers are in */
        if (!m->plan.part[i].head)
            add_part_slab(m->view_layer, gpu_hybrid_split_state(m->part[i]));
    return &m->view;
}
