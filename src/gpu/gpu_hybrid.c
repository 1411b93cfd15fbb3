/*
 * gpu_hybrid.c — hybrid decode on the CUDA backend (issue 10,
 * docs/HYBRID.md): the expert weights of each MoE layer live in a VRAM
 * slab of whole experts (the hot ones) and in the model's mapping (all of
 * them); the GPU computes the routes whose expert is resident, the CPU the
 * others, and the GPU adds the two partial sums in a fixed order.
 *
 * One MoE layer of a step (every node captured in the step's graph):
 *
 *   main stream:  router, top-k, gk_hy_split --ev_fork--> hits (routed
 *                 matvecs, misses skipped), stamp ... wait ev_join, combine
 *   side stream:  wait ev_fork, host node cpu_pass (moe_experts over the
 *                 misses from the mapping, into mapped pinned memory),
 *                 record ev_join
 *
 * The split kernel writes the miss list and the normed rows straight into
 * mapped pinned memory and the combine reads the CPU's partial sum from
 * there, so no copy node and no host synchronisation sit inside a layer.
 *
 * The slot table (expert -> slot) and the expert pointer tables the
 * kernels read are in device memory, mirrored in pinned host memory: a
 * re-pin rewrites table rows between steps and never recaptures a graph.
 * Admissions (the dynamic slab) run between steps: the victim leaves the
 * table first (uploaded before the next step), its slot is rewritten by an
 * asynchronous copy on a copy stream, and the newcomer enters the table
 * only once that copy has landed; every launch checks that no table entry
 * points at a slot in flight (unsafe_replays, expected 0).
 *
 * Prefill: the expert stacks are copied once into page-locked memory.  A
 * step of at least the measured crossover of tokens streams: each MoE
 * layer's stacks are copied by DMA (a stage stream inside the step's
 * graph) into one of two device staging buffers, a MoE layer ahead of the
 * compute that reads them, and the grouped matmul reads missed experts
 * there (their pointer table entries point into the layer's buffer).  A
 * shorter step takes the same split as decode.  Without a staging buffer
 * (not enough device memory) the matmul reads missed experts from the
 * pinned copy over the bus (zero-copy, ~10 GB/s).
 */
#include "gpu_internal.h"

#include "../act.h"
#include "../hybrid.h"
#include "../hybrid_pass.h"
#include "../moe.h"
#include "../threads.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { N_PARTS = 3, MAX_REGIONS = 4096, N_EVENTS = 9 };
/* The flag hand-off's bound: a reply later than this is a failure of the
 * step (a CPU pass takes well under a millisecond), not a hang. */
static const unsigned long long HANDOFF_TIMEOUT_NS = 2000000000ull;
static const arch_role part_role[N_PARTS] = {W_MOE_GATE, W_MOE_UP, W_MOE_DOWN};

/* Policy constants (docs/HYBRID.md "Dynamic slab"): scores decay per step;
 * a candidate must beat its victim by a factor and a margin, so that two
 * experts of similar popularity do not swap back and forth. */
static const double SCORE_DECAY = 0.97, ADMIT_FACTOR = 1.5, ADMIT_MARGIN = 2.0;

/* Pinned host memory the GPU reads or writes through its mapping. */
typedef struct hy_mapped {
    int32_t *n_miss;
    gk_route *miss;          /* max_routes */
    float *x;                /* max_rows x n_embd: the layer's normed rows */
    float *part;             /* max_rows x n_embd: the CPU's partial sums */
    unsigned long long *t0, *t1, *t3; /* per layer: split done, hits done, combine start (GPU clock) */
    uint64_t *cpu_ns;        /* per layer: the CPU pass (host clock) */
    uint32_t *counts;        /* n_layer x n_expert lookups (copied back after each step) */
    uint8_t *tab;            /* mirror of the device tables */
    uint32_t *req, *done;    /* flag hand-off: the GPU's request number, the CPU's reply */
    int32_t *layer, *err;    /* the request's layer; set by the GPU when a reply timed out */
} hy_mapped;

typedef struct hy_pass {
    gpu_hybrid *hy;
    int layer;
} hy_pass;

typedef struct hy_pending {
    int layer, expert, slot;
} hy_pending;

typedef struct hy_region {
    uint8_t *host;           /* page range of the mapping */
    uint8_t *copy, *dev;     /* its pinned copy, and the copy's device address */
    size_t bytes;
} hy_region;

struct gpu_hybrid {
    const model_weights *w;
    gpu_options o;
    hybrid_state st;
    int n_layer, n_expert, n_used;
    int64_t n_embd, max_rows, max_routes;

    void *dev_base;
    size_t dev_bytes;
    uint8_t *slab;
    size_t *slab_off;        /* per layer: its slots' start in the slab */
    uint8_t *d_tab;
    size_t tab_row, ptr_off; /* bytes per layer row; the pointer tables' offset in a row */
    gk_route *d_hits;
    int32_t *d_n_miss;
    uint32_t *d_counts;
    uint32_t *d_seq;         /* flag hand-off: the last request number */

    void *pin_base;
    size_t pin_bytes;
    hy_mapped h, d;          /* host and device addresses of the same memory */
    uint32_t *counts_seen;   /* counts at the previous step */
    float *score;            /* n_layer x n_expert: decayed lookups */
    bool *dirty;             /* per layer: table row to upload */

    hy_region *region;       /* pinned copies of the expert stacks */
    int n_region;
    bool registered;

    /* Staged prefill: two device buffers of stage_bytes, allocated once per
     * session (never regrown: a captured step's copies point into them).
     * MoE layer i (in MoE order) uses buffer i % 2; each layer's parts sit
     * at stage_off within it, experts mat_bytes apart as in the mapping.
     * tab_gen: the staging generation each layer's table row was written
     * against (a row of an older generation would point into freed
     * memory: counted as stale_stage_refs, rewritten). */
    void *stage_base;
    size_t stage_bytes, stage_alloc;
    uint8_t *stage[2];
    size_t *stage_off;       /* n_layer x N_PARTS */
    int *moe_index, *next_moe; /* per layer: index among MoE layers (-1: dense); the next MoE layer (-1: none) */
    int first_moe;
    uint32_t stage_gen, *tab_gen;
    uint64_t stage_step_bytes; /* bytes one streamed step copies */
    int stream_min_tok;
    gpuStream_t stage_s;
    gpuEvent_t ev_stage_go, ev_landed[2], ev_free[2];

    thread_pool *pool;
    moe_scratch scratch;
    hybrid_pass one;         /* decode's misses (one token): src/hybrid_pass.c */
    act_set x;
    hy_pass *pass;

    gpuStream_t side, copy;
    gpuEvent_t ev_fork, ev_join, ev_tab, ev_copy;

    hy_pending *pending;     /* admissions whose copy is in flight */
    uint8_t *moving;         /* flags of the experts and slots in pending */
    int n_pending;
    int rr;                  /* layer the next admission round starts at */

    hybrid_cpus cpus;        /* where o.cpu_pin puts the CPU pass's threads */
    pthread_t spinner;       /* flag hand-off: the CPU side */
    bool spinner_started;
    _Atomic bool stop, active;

    int64_t step_tok;
    bool step_split;         /* this step ran the split (host nodes, stamps) */
    gpu_hybrid_counters c;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A MoE layer of this session (a layer split's part holds a range). */
static bool is_moe(const gpu_hybrid *hy, int l)
{
    return hy->w->layer[l].moe && l >= hy->o.layer0 && (hy->o.layer1 == 0 || l < hy->o.layer1);
}

static int32_t *tab_slot_of(uint8_t *tab, const gpu_hybrid *hy, int l)
{
    return (int32_t *)(tab + (size_t)l * hy->tab_row);
}

static const uint8_t **tab_ptrs(uint8_t *tab, const gpu_hybrid *hy, int l, int part)
{
    return (const uint8_t **)(tab + (size_t)l * hy->tab_row + hy->ptr_off) + (size_t)part * hy->n_expert;
}

static const uint8_t *host_part(const gpu_hybrid *hy, int l, int part, int e)
{
    const wtensor *t = &hy->w->layer[l].w[part_role[part]];
    return t->data == NULL ? NULL : (const uint8_t *)t->data + (size_t)e * t->mat_bytes;
}

/* The region holding a byte of the mapping, or NULL. */
static const hy_region *region_of(const gpu_hybrid *hy, const uint8_t *host)
{
    for (int i = 0; i < hy->n_region && host != NULL; i++)
        if (host >= hy->region[i].host && host < hy->region[i].host + hy->region[i].bytes)
            return &hy->region[i];
    return NULL;
}

/* The device address of a byte of the mapping through its pinned copy, or
 * NULL when the stacks are not pinned. */
static const uint8_t *mapped_of(const gpu_hybrid *hy, const uint8_t *host)
{
    const hy_region *r = region_of(hy, host);
    return r != NULL ? r->dev + (host - r->host) : NULL;
}

/* Where copies to the device read a byte of the mapping from: its pinned
 * copy (a true asynchronous DMA) when there is one. */
static const uint8_t *copy_src(const gpu_hybrid *hy, const uint8_t *host)
{
    const hy_region *r = region_of(hy, host);
    return r != NULL ? r->copy + (host - r->host) : host;
}

static uint8_t *slot_addr(const gpu_hybrid *hy, int l, int slot)
{
    return hy->slab + hy->slab_off[l] + (size_t)slot * hy->st.layer[l].slot_bytes;
}

/* moving: per layer, n_expert flags of experts then n_expert of slots
 * (n_slots <= n_expert) whose admission is in flight. */
static uint8_t *moving_expert(const gpu_hybrid *hy, int l)
{
    return hy->moving + (size_t)l * 2 * (size_t)hy->n_expert;
}

static uint8_t *moving_slot(const gpu_hybrid *hy, int l)
{
    return moving_expert(hy, l) + hy->n_expert;
}

/* Where a streamed prefill reads part p of a missed expert e of layer l:
 * the layer's staging buffer when there is one, else the pinned copy over
 * the bus; NULL when neither (such a step splits instead). */
static const uint8_t *miss_addr(const gpu_hybrid *hy, int l, int p, int e)
{
    const uint8_t *host = host_part(hy, l, p, e);
    if (host == NULL || hy->stage_base == NULL || hy->moe_index[l] < 0)
        return mapped_of(hy, host);
    const wtensor *t = &hy->w->layer[l].w[part_role[p]];
    return hy->stage[hy->moe_index[l] % 2] + hy->stage_off[(size_t)l * N_PARTS + p] + (size_t)e * t->mat_bytes;
}

/* Rewrites expert e's entries of layer l's mirror row from the split state. */
static void mirror_expert(gpu_hybrid *hy, int l, int e)
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
static void count_h2d(gpu_hybrid *hy, uint64_t bytes)
{
    if (hy->step_tok != 1)
        return;
    hy->c.h2d_bytes += bytes;
    hy->st.stats.h2d_bytes += bytes;
}

/* Uploads the dirty rows of the mirror, in stream order before the next
 * step. */
static hydra_status upload_tables(gpu_hybrid *hy, gpuStream_t s)
{
    for (int l = 0; l < hy->n_layer; l++) {
        if (!hy->dirty[l])
            continue;
        const size_t off = (size_t)l * hy->tab_row;
        TRY(gpuMemcpyAsync(hy->d_tab + off, hy->h.tab + off, hy->tab_row, gpuMemcpyHostToDevice, s),
            "uploading a slot table");
        hy->c.table_bytes += hy->tab_row;
        count_h2d(hy, hy->tab_row);
        hy->dirty[l] = false;
        hy->c.table_version++;
    }
    return HYDRA_OK;
}

/* --- pinned copies of the expert stacks.  Registering the mapping itself
 * (cudaHostRegister, read-only) worked on the small test files but had not
 * returned after 150 s for the 16.3 GiB of expert stacks of the benchmark
 * file (H200, 2026-11-29), so the stacks are copied once into page-locked
 * memory of our own: the GPU reads missed experts from it in prefill, and
 * admissions copy from it without the driver's staging. */

static int cmp_region(const void *a, const void *b)
{
    const hy_region *x = a, *y = b;
    return x->host < y->host ? -1 : x->host > y->host;
}

static void unpin_all(gpu_hybrid *hy)
{
    for (int i = 0; i < hy->n_region; i++)
        gpu_mem_free(GPU_MEM_PINNED, hy->region[i].copy, hy->region[i].bytes);
    hy->n_region = 0;
    hy->registered = false;
}

/* Page-aligned ranges covering every expert stack, merged where they touch
 * (two stacks may share a page). */
static int collect_regions(gpu_hybrid *hy, hy_region *r)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    int n = 0;
    for (int l = 0; l < hy->n_layer && n + N_PARTS <= MAX_REGIONS; l++)
        for (int p = 0; p < N_PARTS; p++) {
            const wtensor *t = &hy->w->layer[l].w[part_role[p]];
            if (t->data == NULL || !is_moe(hy, l))
                continue;
            const uintptr_t a = (uintptr_t)t->data / page * page;
            const uintptr_t b = ((uintptr_t)t->data + t->mat_bytes * (size_t)t->ne[2] + page - 1) / page * page;
            r[n++] = (hy_region){(uint8_t *)a, NULL, NULL, b - a};
        }
    qsort(r, (size_t)n, sizeof *r, cmp_region);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && r[i].host <= r[m - 1].host + r[m - 1].bytes) {
            uint8_t *end = r[i].host + r[i].bytes;
            if (end > r[m - 1].host + r[m - 1].bytes)
                r[m - 1].bytes = (size_t)(end - r[m - 1].host);
        } else {
            r[m++] = r[i];
        }
    }
    return m;
}

typedef struct copy_job {
    uint8_t *dst;
    const uint8_t *src;
    size_t bytes;
} copy_job;

static void copy_task(void *ctx, int idx, int n_threads)
{
    const copy_job *j = ctx;
    const size_t per = (j->bytes / (size_t)n_threads + 4095) / 4096 * 4096;
    const size_t a = per * (size_t)idx, b = a + per < j->bytes ? a + per : j->bytes;
    if (a < b)
        memcpy(j->dst + a, j->src + a, b - a);
}

static void pin_experts(gpu_hybrid *hy)
{
    hy->region = calloc(MAX_REGIONS, sizeof *hy->region);
    if (hy->region == NULL)
        return;
    const int n = collect_regions(hy, hy->region);
    const uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        hy_region *r = &hy->region[i];
        void *copy = NULL, *dev = NULL;
        hydra_status st = gpu_mem_alloc(GPU_MEM_PINNED, r->bytes, &copy, "pinned expert stacks");
        gpuError_t e = st == HYDRA_OK ? GPU_RT(HostGetDevicePointer)(&dev, copy, 0) : gpuSuccess;
        if (st != HYDRA_OK || e != gpuSuccess) {
            if (hy->o.verbose)
                fprintf(stderr, "hybrid: expert stacks not pinned (%s): prefill misses on the CPU, admissions "
                        "staged by the driver\n", st != HYDRA_OK ? hydra_last_error() : gpuGetErrorString(e));
            gpuGetLastError();
            if (copy != NULL)
                gpu_mem_free(GPU_MEM_PINNED, copy, r->bytes);
            unpin_all(hy);
            return;
        }
        r->copy = copy;
        r->dev = dev;
        hy->n_region = i + 1;
        copy_job j = {r->copy, r->host, r->bytes};
        pool_run(hy->pool, copy_task, &j);
    }
    hy->registered = true;
    hy->c.register_ms = (double)(now_ns() - t0) / 1e6;
}

/* --- staged prefill: layer order, the staging area, its copies */

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

static size_t stack_bytes(const gpu_hybrid *hy, int l, int p)
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
            off += (stack_bytes(hy, l, p) + 255) / 256 * 256;
            hy->stage_step_bytes += stack_bytes(hy, l, p);
        }
        hy->stage_bytes = off > hy->stage_bytes ? off : hy->stage_bytes;
    }
}

/* Two staging buffers, once per session, when the stacks are pinned (the
 * copies are DMA from the pinned copy) and the device has room; without
 * them a streamed prefill reads the pinned copy over the bus. */
static void alloc_stage(gpu_hybrid *hy)
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

static void free_stage(gpu_hybrid *hy)
{
    gpu_mem_free(GPU_MEM_SCRATCH, hy->stage_base, hy->stage_alloc);
    hy->stage_base = NULL;
    hy->stage_alloc = 0;
    hy->stage_gen++;
}

/* Layer l's stacks from the pinned copy into staging buffer b on the stage
 * stream (DMA), then ev_landed[b]. */
static hydra_status stage_copy(gpu_hybrid *hy, int l, int b)
{
    for (int p = 0; p < N_PARTS; p++) {
        const uint8_t *host = host_part(hy, l, p, 0);
        if (host == NULL)
            continue;
        TRY(gpuMemcpyAsync(hy->stage[b] + hy->stage_off[(size_t)l * N_PARTS + p], copy_src(hy, host),
                           stack_bytes(hy, l, p), gpuMemcpyHostToDevice, hy->stage_s),
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
static hydra_status staged_layer(gpu_session *g, gpu_hybrid *hy, int l, int n, const gk_norm_out *next)
{
    const int b = hy->moe_index[l] % 2, l1 = hy->next_moe[l], l2 = l1 >= 0 ? hy->next_moe[l1] : -1;
    if (l == hy->first_moe) {
        TRY(gpuEventRecord(hy->ev_stage_go, g->stream), "staging start");
        TRY(GPU_RT(StreamWaitEvent)(hy->stage_s, hy->ev_stage_go, 0), "staging start");
        TRY_ST(stage_copy(hy, l, b));
        if (l1 >= 0)
            TRY_ST(stage_copy(hy, l1, 1 - b));
    }
    TRY(GPU_RT(StreamWaitEvent)(g->stream, hy->ev_landed[b], 0), "waiting for staged experts");
    TRY_ST(gpu_moe_experts(g, l, n, next));
    if (l2 < 0)
        return HYDRA_OK;
    TRY(gpuEventRecord(hy->ev_free[b], g->stream), "staging buffer free");
    TRY(GPU_RT(StreamWaitEvent)(hy->stage_s, hy->ev_free[b], 0), "staging buffer free");
    return stage_copy(hy, l2, b);
}

/* --- allocation */

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

static void cpu_pass(void *arg);

static inline void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The flag hand-off's CPU side: answers each request number the split
 * kernel publishes with the CPU pass of its layer, then the same number as
 * the reply.  Spins while a step runs, polls every 50 us between steps. */
static void *spinner_main(void *arg)
{
    gpu_hybrid *hy = arg;
    if (hy->o.cpu_pin)
        hybrid_pin_self(&hy->cpus, 1);
    uint32_t seen = __atomic_load_n(hy->h.req, __ATOMIC_ACQUIRE);
    while (!atomic_load(&hy->stop)) {
        const uint32_t req = __atomic_load_n(hy->h.req, __ATOMIC_ACQUIRE);
        if (req != seen) {
            seen = req;
            const int32_t l = __atomic_load_n(hy->h.layer, __ATOMIC_ACQUIRE);
            if (l >= 0 && l < hy->n_layer)
                cpu_pass(&hy->pass[l]);
            __atomic_store_n(hy->h.done, req, __ATOMIC_RELEASE);
        } else if (atomic_load_explicit(&hy->active, memory_order_relaxed)) {
            spin_pause();
        } else {
            usleep(50);
        }
    }
    return NULL;
}

static hydra_status start_spinner(gpu_hybrid *hy)
{
    if (pthread_create(&hy->spinner, NULL, spinner_main, hy) != 0)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: starting the hand-off thread");
    hy->spinner_started = true;
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
                    TRY(gpuMemcpy(slot_addr(hy, l, s) + L->part_off[p], copy_src(hy, host_part(hy, l, p, e)),
                                  L->part_bytes[p],
                                  gpuMemcpyHostToDevice),
                        "copying an expert into the slab");
        }
        for (int e = 0; e < hy->n_expert; e++)
            mirror_expert(hy, l, e);
        for (int p = 0; p < N_PARTS; p++) {
            gk_mat *m = &g->gw.layer[(size_t)l * W_COUNT + part_role[p]];
            m->data = NULL;
            m->expert_data = tab_ptrs(hy->d_tab, hy, l, p);
        }
    }
    TRY_ST(upload_tables(hy, g->stream));
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

/* --- the prefill crossover */

/* Seconds of the CPU pass (moe_experts on the pool, as cpu_pass runs it)
 * over n_tok tokens of k routes each, token t choosing experts t*k ..
 * t*k + k - 1 (mod n_expert): best of three.  The rows are the hand-off
 * buffer's (zeros at creation; the kernels' time does not depend on the
 * values). */
static double time_cpu_pass(gpu_hybrid *hy, int l, moe_route *routes, int n_tok)
{
    const int64_t n_routes = (int64_t)n_tok * hy->n_used;
    for (int64_t r = 0; r < n_routes; r++)
        routes[r] = (moe_route){.token = (int32_t)(r / hy->n_used), .expert = (int32_t)(r % hy->n_expert),
                                .weight = 1.0f};
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        const uint64_t t0 = now_ns();
        act_bind(&hy->x, hy->h.x, n_tok);
        moe_experts(hy->pool, &hy->scratch, &hy->w->layer[l], &hy->x, routes, n_routes, hy->h.part,
                    (size_t)hy->n_embd);
        const double s = (double)(now_ns() - t0) / 1e9;
        best = s < best ? s : best;
    }
    return best;
}

/* Seconds of one MoE layer's staging copies: best of two. */
static hydra_status time_stage(gpu_hybrid *hy, int l, double *sec)
{
    *sec = 1e30;
    for (int rep = 0; rep < 2; rep++) {
        const uint64_t t0 = now_ns();
        TRY_ST(stage_copy(hy, l, 0));
        TRY(gpuStreamSynchronize(hy->stage_s), "timing the staging copies");
        const double s = (double)(now_ns() - t0) / 1e9;
        *sec = s < *sec ? s : *sec;
    }
    return HYDRA_OK;
}

/* The shortest prefill step that streams: the first n (past the matvec
 * range) whose split would keep the CPU longer than staging the layer's
 * stacks takes.  Per MoE layer the split's CPU pass costs about
 * experts x t_expert + routes x t_route over the layer's missed experts,
 * fitted from a one-token pass (k experts, k routes) and an m-token pass
 * (min(E, mk) experts, mk routes); with uniform routing over the E_miss
 * experts outside the slab, n tokens touch E_miss (1 - (1 - k/E)^n) of
 * them by n k E_miss / E routes.  options.stream_min_tokens > 0 overrides
 * the choice (tests force streaming on tiny files). */
static hydra_status calibrate(gpu_hybrid *hy)
{
    hy->stream_min_tok = hy->o.stream_min_tokens;
    hy->c.stream_min_tokens = hy->stream_min_tok;
    if (hy->stage_base == NULL)
        return HYDRA_OK;
    const int l = hy->first_moe, k = hy->n_used, E = hy->n_expert;
    const int m = hy->max_rows < 64 ? (int)hy->max_rows : 64;
    double t_stage = 0;
    TRY_ST(time_stage(hy, l, &t_stage));
    moe_route *routes = malloc(sizeof *routes * (size_t)m * (size_t)k);
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: calibration routes");
    const double t1 = time_cpu_pass(hy, l, routes, 1), tm = time_cpu_pass(hy, l, routes, m);
    free(routes);
    const double d1 = k, r1 = k, dm = m * k < E ? m * k : E, rm = (double)m * k, det = d1 * rm - dm * r1;
    double te = det > 0 ? (t1 * rm - tm * r1) / det : t1 / d1, tr = det > 0 ? (d1 * tm - dm * t1) / det : 0.0;
    te = te > 0 ? te : 0;
    tr = tr > 0 ? tr : 0;
    const double e_miss = E - hybrid_resident(&hy->st, (uint32_t)l);
    int cross = (int)hy->max_rows + 1;
    for (int n = GK_MATVEC_MAX_TOK + 1; n <= hy->max_rows; n++) {
        const double touched = e_miss * (1.0 - pow(1.0 - (double)k / E, n)), routes_miss = (double)n * k * e_miss / E;
        if (touched * te + routes_miss * tr >= t_stage) {
            cross = n;
            break;
        }
    }
    if (hy->stream_min_tok <= 0)
        hy->stream_min_tok = cross;
    size_t layer_bytes = 0;
    for (int p = 0; p < N_PARTS; p++)
        layer_bytes += stack_bytes(hy, l, p);
    hy->c.stream_min_tokens = hy->stream_min_tok;
    hy->c.stage_gbps = (double)layer_bytes / t_stage / 1e9;
    hy->c.cpu_expert_us = te * 1e6;
    hy->c.cpu_route_us = tr * 1e6;
    if (hy->o.verbose)
        fprintf(stderr, "hybrid: prefill crossover %d tokens%s (measured %d): staging %.1f MiB per MoE layer at %.1f "
                "GB/s (%.2f ms); CPU pass %.1f us per expert + %.2f us per route; %.0f of %d experts of layer %d "
                "outside the slab\n", hy->stream_min_tok, hy->o.stream_min_tokens > 0 ? " (set)" : "", cross,
                layer_bytes / 1048576.0, hy->c.stage_gbps, t_stage * 1e3, hy->c.cpu_expert_us, hy->c.cpu_route_us,
                e_miss, E, l);
    return HYDRA_OK;
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
        pin_experts(hy);
    alloc_stage(hy);
    TRY_ST(fill_slab(g, hy));
    TRY_ST(calibrate(hy));
    if (g->o.handoff_flags)
        TRY_ST(start_spinner(hy));
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
    free_stage(hy);
    unpin_all(hy);
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

/* --- the CPU side of one layer: a host node of the step's graph.  It may
 * call no CUDA function; it reads what the split kernel wrote and writes
 * the partial sums the combine reads. */
static void cpu_pass(void *arg)
{
    const hy_pass *p = arg;
    gpu_hybrid *hy = p->hy;
    const uint64_t t0 = now_ns();
    const int n_miss = *(volatile int32_t *)hy->h.n_miss;
    const int64_t n_tok = hy->step_tok, n_routes = n_tok * hy->n_used;
    hybrid_count(&hy->st, (uint32_t)p->layer, n_routes, n_routes - n_miss);
    if (n_miss > 0) {
        const layer_weights *lw = &hy->w->layer[p->layer];
        const moe_route *miss = (const moe_route *)hy->h.miss;
        memset(hy->h.part, 0, sizeof(float) * (size_t)(n_tok * hy->n_embd));
        act_bind(&hy->x, hy->h.x, n_tok);
        /* one token: the batch-chunked pass (same bits as moe_experts) */
        if (n_tok != 1 ||
            !hybrid_pass_token(&hy->one, hy->pool, lw, hy->w->arch->act, &hy->x, miss, n_miss, hy->h.part))
            moe_experts(hy->pool, &hy->scratch, lw, &hy->x, miss, n_miss, hy->h.part, (size_t)hy->n_embd);
    }
    hy->h.cpu_ns[p->layer] = now_ns() - t0;
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
        TRY(GPU_RT(LaunchHostFunc)(hy->side, cpu_pass, &hy->pass[l]), "hybrid CPU pass");
        TRY(gpuEventRecord(hy->ev_join, hy->side), "hybrid join");
    }
    TRY_ST(gpu_experts_routed(g, l, hy->d_hits, n_routes));
    TRY(gk_hy_stamp(g->stream, hy->d.t1 + l), "hybrid stamp");
    if (flags)
        TRY(gk_hy_wait(g->stream, hy->d_seq, hy->d.done, hy->d.err, HANDOFF_TIMEOUT_NS), "hybrid wait");
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
        return staged_layer(g, hy, l, n, next);
    return gpu_moe_experts(g, l, n, next);
}

/* --- between steps */

/* Copies that have landed put their expert into the table. */
static hydra_status install_landed(gpu_hybrid *hy)
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
        mirror_expert(hy, p->layer, p->expert);
        moving_expert(hy, p->layer)[p->expert] = 0;
        moving_slot(hy, p->layer)[p->slot] = 0;
        hy->c.admissions++;
    }
    hy->n_pending = 0;
    return HYDRA_OK;
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
            mirror_expert(hy, l, e);
    }
}

/* No table entry may point at a slot whose copy is in flight. */
static void check_in_flight(gpu_hybrid *hy)
{
    for (int i = 0; i < hy->n_pending; i++) {
        const int32_t *slot_of = tab_slot_of(hy->h.tab, hy, hy->pending[i].layer);
        for (int e = 0; e < hy->n_expert; e++)
            if (slot_of[e] == hy->pending[i].slot)
                hy->c.unsafe_replays++;
    }
}

hydra_status gpu_hybrid_begin_step(gpu_session *g, int64_t n)
{
    gpu_hybrid *hy = g->hy;
    hy->step_tok = n;
    hy->step_split = !streams(hy, (int)n);
    atomic_store(&hy->active, true);
    TRY_ST(install_landed(hy));
    check_stage_gen(hy);
    TRY_ST(upload_tables(hy, g->stream));
    if (!hy->step_split && hy->stage_base != NULL) {
        hy->c.staged_steps++;
        hy->c.stage_bytes += hy->stage_step_bytes;
    }
    check_in_flight(hy);
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

/* The step's lookups per expert into the decayed scores.  A streamed
 * prefill has no CPU pass to count its lookups and hits for the split's
 * counters: the counts do, against the table the step ran with (admit
 * changes it only after this). */
static void update_scores(gpu_hybrid *hy)
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
 * margin; experts and slots already moving are not choices. */
static bool pick(const gpu_hybrid *hy, int l, int *cand, int *slot)
{
    const hybrid_layer *L = &hy->st.layer[l];
    const float *sc = hy->score + (size_t)l * hy->n_expert;
    int best = -1, victim_slot = -1;
    for (int e = 0; e < hy->n_expert; e++)
        if (L->slot_of[e] < 0 && (best < 0 || sc[e] > sc[best]) && !moving_expert(hy, l)[e])
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
        const uint8_t *src = copy_src(hy, host_part(hy, l, p, e));
        if (src == NULL)
            continue;
        TRY(gpuMemcpyAsync(slot_addr(hy, l, slot) + L->part_off[p], src, L->part_bytes[p], gpuMemcpyHostToDevice,
                           hy->copy),
            "admitting an expert");
        count_h2d(hy, L->part_bytes[p]);
        hy->c.admit_bytes += L->part_bytes[p];
    }
    return HYDRA_OK;
}

/* New admissions within the bus budget of this step's tokens: victims
 * leave the tables now (uploaded in stream order before the next step),
 * their slots are rewritten after that upload, and the newcomers enter the
 * tables when the copies have landed (install_landed). */
static hydra_status admit(gpu_session *g, gpu_hybrid *hy)
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
                mirror_expert(hy, l, victim);
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
    TRY_ST(upload_tables(hy, g->stream));
    TRY(gpuEventRecord(hy->ev_tab, g->stream), "admission order");
    TRY(GPU_RT(StreamWaitEvent)(hy->copy, hy->ev_tab, 0), "admission order");
    for (int i = 0; i < hy->n_pending; i++)
        TRY_ST(copy_expert(hy, hy->pending[i].layer, hy->pending[i].expert, hy->pending[i].slot));
    TRY(gpuEventRecord(hy->ev_copy, hy->copy), "admission done");
    return HYDRA_OK;
}

hydra_status gpu_hybrid_end_step(gpu_session *g)
{
    gpu_hybrid *hy = g->hy;
    atomic_store(&hy->active, false);
    if (*(volatile int32_t *)hy->h.err != 0)
        return hydra_fail(HYDRA_ERR_IO, "hybrid: the CPU side did not answer a layer's hand-off within %.1f s",
                          HANDOFF_TIMEOUT_NS / 1e9);
    if (hy->step_split)
        record_times(hy);
    update_scores(hy);
    return admit(g, hy);
}

/* --- counters */

static int cmp_u32(const void *a, const void *b)
{
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void handoff_quantiles(const gpu_hybrid *hy, gpu_hybrid_counters *c)
{
    size_t n = 0;
    for (int l = 0; l < hy->n_layer; l++) {
        const uint64_t k = hy->st.layer[l].stats.n_handoff;
        n += k < HYBRID_HANDOFF_SAMPLES ? k : HYBRID_HANDOFF_SAMPLES;
    }
    uint32_t *all = n > 0 ? malloc(n * sizeof *all) : NULL;
    if (all == NULL)
        return;
    size_t m = 0;
    for (int l = 0; l < hy->n_layer; l++) {
        const uint64_t k = hy->st.layer[l].stats.n_handoff;
        const size_t kk = k < HYBRID_HANDOFF_SAMPLES ? (size_t)k : HYBRID_HANDOFF_SAMPLES;
        memcpy(all + m, hy->st.layer[l].stats.handoff_ns, kk * sizeof *all);
        m += kk;
    }
    qsort(all, m, sizeof *all, cmp_u32);
    c->handoff_p50_ns = all[(size_t)ceil(0.50 * (double)m) - 1];
    c->handoff_p99_ns = all[(size_t)ceil(0.99 * (double)m) - 1];
    free(all);
}

void gpu_hybrid_counters_get(const gpu_session *g, gpu_hybrid_counters *out)
{
    const gpu_hybrid *hy = g->hy;
    memset(out, 0, sizeof *out);
    if (g->multi != NULL) /* summed over the devices' parts */
        gpu_multi_hybrid_counters(g, out, false);
    if (hy == NULL)
        return;
    *out = hy->c;
    out->engaged = true;
    for (int l = 0; l < hy->n_layer; l++) {
        out->lookups += hy->st.layer[l].stats.lookups;
        out->hits += hy->st.layer[l].stats.hits;
        out->resident += (uint64_t)hybrid_resident(&hy->st, (uint32_t)l);
    }
    handoff_quantiles(hy, out);
}

const struct hybrid_state *gpu_hybrid_split_state(const gpu_session *g)
{
    if (g->multi != NULL)
        return gpu_multi_split_state(g);
    return g->hy != NULL ? &g->hy->st : NULL;
}

void gpu_hybrid_counters_reset(gpu_session *g)
{
    gpu_hybrid *hy = g->hy;
    if (g->multi != NULL)
        gpu_multi_hybrid_counters(g, NULL, true);
    if (hy == NULL)
        return;
    hybrid_reset_stats(&hy->st);
    const gpu_hybrid_counters keep = hy->c;
    memset(&hy->c, 0, sizeof hy->c);
    hy->c.registered = keep.registered;
    hy->c.register_ms = keep.register_ms;
    hy->c.stream_min_tokens = keep.stream_min_tokens;
    hy->c.stage_gbps = keep.stage_gbps;
    hy->c.cpu_expert_us = keep.cpu_expert_us;
    hy->c.cpu_route_us = keep.cpu_route_us;
    hy->c.slab_bytes = keep.slab_bytes;
    hy->c.table_version = keep.table_version;
}
