/*
 * gpu_hybrid_internal.h — the state of hybrid decode on the CUDA backend
 * and what its files share (issue 10, docs/HYBRID.md): the expert weights
 * of each MoE layer live in a VRAM slab of whole experts (the hot ones)
 * and in the model's mapping (all of them); the GPU computes the routes
 * whose expert is resident, the CPU the others, and the GPU adds the two
 * partial sums in a fixed order.
 *
 * The files, one job each:
 *   gpu_hybrid.c           the session: allocation, slab fill, create/free
 *   gpu_hybrid_pin.c       pinned copies of the expert stacks
 *   gpu_hybrid_table.c     the slot/pointer tables' host mirror and upload
 *   gpu_hybrid_stage.c     staged prefill: staging buffers and their DMA
 *   gpu_hybrid_calibrate.c the prefill crossover (stream vs split)
 *   gpu_hybrid_cpu.c       the CPU miss pass and the flag hand-off thread
 *   gpu_hybrid_step.c      one step: the split of a MoE layer, step begin/end
 *   gpu_hybrid_admit.c     the dynamic slab: scores and admissions
 *   gpu_hybrid_counters.c  counters and the split state for the stats
 *
 * One MoE layer of a step (every node captured in the step's graph):
 *
 *   main stream:  router, top-k, gk_hy_split --ev_fork--> hits (routed
 *                 matvecs, misses skipped), stamp ... wait ev_join, combine
 *   side stream:  wait ev_fork, host node hy_cpu_pass (moe_experts over the
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

#ifndef HYDRA_GPU_HYBRID_INTERNAL_H
#define HYDRA_GPU_HYBRID_INTERNAL_H

#include "gpu_internal.h"

#include "../act.h"
#include "../hybrid.h"
#include "../hybrid_pass.h"
#include "../moe.h"
#include "../threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

enum { N_PARTS = 3, MAX_REGIONS = 4096, N_EVENTS = 9 };
static const arch_role part_role[N_PARTS] = {W_MOE_GATE, W_MOE_UP, W_MOE_DOWN};

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
    unsigned long long handoff_ns; /* flag hand-off: the GPU's wait for a reply (hy_handoff_bound_ns) */

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

    /* -sm tensor (gpu_hybrid_join_tensor): the split's slab plan, shared
     * by the parts and kept current by their admissions and evictions;
     * this part's index, the zeroed matrix that an expert computed
     * elsewhere reads, and the main part's hybrid state, whose row of an
     * expert of this part changes role with this part's slab.  NULL ts:
     * not a part of a tensor split. */
    struct split_slab *ts;
    int ts_part;
    const uint8_t *ts_zero;
    gpu_hybrid *ts_main;

    hybrid_cpus cpus;        /* where o.cpu_pin puts the CPU pass's threads */
    pthread_t spinner;       /* flag hand-off: the CPU side */
    bool spinner_started;
    _Atomic bool stop, active;
    _Atomic bool stalled;    /* gpu_hybrid_stall_cpu_side */

    int64_t step_tok;
    bool step_split;         /* this step ran the split (host nodes, stamps) */
    gpu_hybrid_counters c;
};

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A MoE layer of this session (a layer split's part holds a range). */
static inline bool is_moe(const gpu_hybrid *hy, int l)
{
    return hy->w->layer[l].moe && l >= hy->o.layer0 && (hy->o.layer1 == 0 || l < hy->o.layer1);
}

static inline int32_t *tab_slot_of(uint8_t *tab, const gpu_hybrid *hy, int l)
{
    return (int32_t *)(tab + (size_t)l * hy->tab_row);
}

static inline const uint8_t **tab_ptrs(uint8_t *tab, const gpu_hybrid *hy, int l, int part)
{
    return (const uint8_t **)(tab + (size_t)l * hy->tab_row + hy->ptr_off) + (size_t)part * hy->n_expert;
}

static inline const uint8_t *host_part(const gpu_hybrid *hy, int l, int part, int e)
{
    const wtensor *t = &hy->w->layer[l].w[part_role[part]];
    return t->data == NULL ? NULL : (const uint8_t *)t->data + (size_t)e * t->mat_bytes;
}

static inline uint8_t *slot_addr(const gpu_hybrid *hy, int l, int slot)
{
    return hy->slab + hy->slab_off[l] + (size_t)slot * hy->st.layer[l].slot_bytes;
}

/* moving: per layer, n_expert flags of experts then n_expert of slots
 * (n_slots <= n_expert) whose admission is in flight. */
static inline uint8_t *moving_expert(const gpu_hybrid *hy, int l)
{
    return hy->moving + (size_t)l * 2 * (size_t)hy->n_expert;
}

static inline uint8_t *moving_slot(const gpu_hybrid *hy, int l)
{
    return moving_expert(hy, l) + hy->n_expert;
}

/* gpu_hybrid_pin.c */
const uint8_t *hy_mapped_of(const gpu_hybrid *hy, const uint8_t *host);
const uint8_t *hy_copy_src(const gpu_hybrid *hy, const uint8_t *host);
void hy_pin_experts(gpu_hybrid *hy);
void hy_unpin_all(gpu_hybrid *hy);

/* gpu_hybrid_table.c */
void hy_mirror_expert(gpu_hybrid *hy, int l, int e);
bool hy_owns(const gpu_hybrid *hy, int e);
bool hy_elsewhere(const gpu_hybrid *hy, int l, int e);
void hy_count_h2d(gpu_hybrid *hy, uint64_t bytes);
hydra_status hy_upload_tables(gpu_hybrid *hy, gpuStream_t s);

/* gpu_hybrid_step.c */
unsigned long long hy_handoff_bound_ns(void);

/* gpu_hybrid_stage.c */
size_t hy_stack_bytes(const gpu_hybrid *hy, int l, int p);
void hy_alloc_stage(gpu_hybrid *hy);
void hy_free_stage(gpu_hybrid *hy);
hydra_status hy_stage_copy(gpu_hybrid *hy, int l, int b);
hydra_status hy_staged_layer(gpu_session *g, gpu_hybrid *hy, int l, int n, const gk_norm_out *next);

/* gpu_hybrid_calibrate.c */
hydra_status hy_calibrate(gpu_hybrid *hy);

/* gpu_hybrid_cpu.c */
void hy_cpu_pass(void *arg);
hydra_status hy_start_spinner(gpu_hybrid *hy);

/* gpu_hybrid_admit.c */
hydra_status hy_install_landed(gpu_hybrid *hy);
void hy_check_in_flight(gpu_hybrid *hy);
void hy_update_scores(gpu_hybrid *hy);
hydra_status hy_admit(gpu_session *g, gpu_hybrid *hy);

#endif
