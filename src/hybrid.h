/*
 * hybrid.h — the split state of hybrid decode (issue 10, docs/HYBRID.md):
 * which experts of each MoE layer live in the slab (VRAM on CUDA, a host
 * buffer in the CPU-only split) and which only in host memory, plus the
 * engagement counters.
 *
 * Per MoE layer a slot table slot_of[n_expert] (slot, or HYBRID_NO_SLOT:
 * the expert lives only in the model's mapping and the CPU computes it)
 * and its inverse expert_in[n_slots].  The slab of a layer is allocated
 * once for n_slots whole experts; re-pinning is a table update (and a copy
 * into the slot), never a reallocation, and bumps the layer's version and
 * the state's version, so a consumer holding a copy of the table (the
 * device slot table, a captured graph's view) knows when to refresh it.
 *
 * The CPU-only split (HYBRID_CPU_SPLIT) runs both sides on the CPU backend:
 * hybrid_moe_experts partitions a layer's routes into hits (computed from
 * the host slab, routes renumbered to slots) and misses (computed from the
 * mapping), each into its own partial sum, and combines them in a fixed
 * order: out += hits, then out += misses.  Same inputs and pin set, same
 * bits.
 *
 * Everything is sized at hybrid_init; a step allocates nothing.  Feature
 * switches are resolved there into the plain flags of hybrid_state.
 */
#ifndef HYDRA_HYBRID_H
#define HYDRA_HYBRID_H

#include "moe.h"
#include "threads.h"
#include "weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { HYBRID_NO_SLOT = -1 };

/* Which side computes the slab's experts. */
typedef enum hybrid_mode {
    HYBRID_OFF = 0,       /* no split: every expert on the session's backend */
    HYBRID_CPU_SPLIT = 1, /* both sides on the CPU (CI); host slab */
    HYBRID_CUDA = 2,      /* slab in VRAM (src/gpu), misses on the CPU */
} hybrid_mode;

/* Hand-off time samples kept per layer (a ring: the latest this many). */
enum { HYBRID_HANDOFF_SAMPLES = 1024 };

/* Counters of one MoE layer.  lookups/hits count decode steps only (every
 * sequence of the step one token): a route is one lookup (k per token). */
typedef struct hybrid_layer_stats {
    uint64_t lookups, hits;              /* decode only */
    uint64_t prefill_lookups, prefill_hits;
    uint64_t hit_ns, miss_ns;            /* time computing hits (slab side) and misses (CPU side) */
    uint64_t overlap_ns;                 /* of the two, running at the same time (CUDA; 0 on the CPU split) */
    uint32_t handoff_ns[HYBRID_HANDOFF_SAMPLES]; /* CUDA hand-off round trips, a ring */
    uint64_t n_handoff;                  /* samples ever recorded; the ring holds min(n, SAMPLES) */
    /* Misses computed on the CPU, every step: routes (the sum over the
     * step's tokens of each one's misses) and distinct experts (the union:
     * moe_experts runs each once for all the tokens that chose it, so a
     * verify pass of k + 1 rows reads a missed expert's weights once). */
    uint64_t miss_routes, miss_experts;
} hybrid_layer_stats;

typedef struct hybrid_stats {
    uint64_t decode_tokens; /* rows of decode steps through the split */
    uint64_t h2d_bytes;     /* host-to-device bytes of those steps (filled by the GPU side) */
    uint64_t repins;        /* hybrid_admit/hybrid_evict calls that changed a table */
} hybrid_stats;

/* One MoE layer's split.  Dense layers have n_slots 0 and NULL tables. */
typedef struct hybrid_layer {
    int32_t n_expert;
    int32_t n_slots;    /* slab slots allocated once */
    int32_t n_resident; /* slots holding an expert */
    int32_t *slot_of;   /* n_expert: slot, or HYBRID_NO_SLOT */
    int32_t *expert_in; /* n_slots: expert in the slot, or HYBRID_NO_SLOT when empty */
    int32_t *host_only; /* n_expert: the experts without a slot, ascending id; n_host_only of them */
    int32_t n_host_only;
    uint64_t version;   /* bumped by every change of this layer's tables */
    /* One slot holds gate, up and down of one expert in their own quant
     * types, each part starting HYBRID_SLOT_ALIGN-aligned: */
    size_t part_off[3];   /* gate, up, down within a slot */
    size_t part_bytes[3]; /* mat_bytes of each */
    size_t slot_bytes;    /* the stride of slots */
    size_t bias_bytes;    /* per-expert biases (gpt-oss), F32, kept beside the slab */
    uint8_t *slab;        /* CPU split: n_slots * slot_bytes; NULL otherwise (the device owns its slab) */
    float *bias_slab[3];  /* CPU split: per-slot rows of the gate/up/down biases; NULL where unbound */
    layer_weights slab_view; /* CPU split: lw with the expert tensors pointing into the slab, by slot */
    hybrid_layer_stats stats;
} hybrid_layer;

enum { HYBRID_SLOT_ALIGN = 256 };

typedef struct hybrid_state {
    hybrid_mode mode;
    bool host_slab;      /* resolved: copy resident experts into the host slab (CPU split) */
    bool count_time;     /* resolved: time each side of a layer */
    uint32_t n_layer;
    hybrid_layer *layer; /* n_layer entries */
    uint64_t version;    /* bumped by every table change of any layer */
    hybrid_stats stats;
    bool step_decode;    /* the current step is a decode step (hybrid_begin_step) */
    /* step buffers, sized for max_rows tokens */
    int64_t max_rows, max_routes;
    int64_t n_embd;
    moe_route *hits;     /* routes whose expert has a slot, .expert renumbered to the slot */
    moe_route *misses;   /* the others, unchanged */
    float *hit_sum;      /* max_rows x n_embd partial sums */
    float *miss_sum;
    const model_weights *w;
} hybrid_state;

/* How to build the state. */
typedef struct hybrid_config {
    hybrid_mode mode;
    /* Per layer (n_layer pointers, NULL entries for dense layers): every
     * expert id once, most used first; the first n_slots get slots 0, 1, ...
     * NULL: ascending expert id. */
    const int32_t *const *order;
    /* Per layer slot counts (n_layer entries; dense layers ignored).  NULL:
     * resident_fraction of each MoE layer's experts, rounded to nearest. */
    const int32_t *n_slots;
    double resident_fraction; /* 0..1 */
    int64_t max_rows;         /* tokens of the largest step (n_batch) */
    bool count_time;
} hybrid_config;

/* Builds tables (and, in the CPU split, the host slab with the resident
 * experts copied in).  Fails naming the layer on an order that is not a
 * permutation of the layer's experts, a slot count outside [0, n_expert],
 * a fraction outside [0, 1], or no memory.  Free with hybrid_free. */
hydra_status hybrid_init(hybrid_state *h, const model_weights *w, const hybrid_config *cfg);
void hybrid_free(hybrid_state *h); /* zeroes *h; safe on a zeroed one */

/* Slots of a layer of n_expert for a fraction: nearest whole expert. */
int32_t hybrid_slots_for_fraction(int32_t n_expert, double fraction);

/* Bytes of one expert of layer l in the slab: its gate, up and down
 * matrices in their own types (slot_bytes, alignment included) plus its
 * biases.  0 for a dense layer. */
uint64_t hybrid_expert_bytes(const model_weights *w, uint32_t l);

/* Resident experts of layer l, and their share of the layer's experts (0
 * for a dense layer). */
int32_t hybrid_resident(const hybrid_state *h, uint32_t l);
double hybrid_resident_fraction(const hybrid_state *h, uint32_t l);

/* Puts expert into slot of layer l (evicting the slot's expert, if any,
 * back to host only), copying its weights into the host slab when there is
 * one.  On CUDA the caller calls this when its copy into the device slot
 * has landed.  An expert already in another slot moves.  No-op (no version
 * bump) when already there.  Fails on an id or slot out of range or a
 * dense layer. */
hydra_status hybrid_admit(hybrid_state *h, uint32_t l, int32_t expert, int32_t slot);
/* Takes expert out of its slot (the slot becomes empty). */
hydra_status hybrid_evict(hybrid_state *h, uint32_t l, int32_t expert);

/* Splits n routes (stable: each list keeps the routes' order) into hits,
 * .expert renumbered to the slot, and misses.  The GPU side's on-device
 * compaction must produce the same lists. */
void hybrid_partition(const hybrid_layer *L, const moe_route *routes, int64_t n, moe_route *hits, int64_t *n_hits,
                      moe_route *misses, int64_t *n_misses);

/* Starts a forward step of n_rows rows; decode: every sequence of the
 * step is one token (its lookups count as decode, its rows as decoded
 * tokens).  Called once per step, before the first layer. */
void hybrid_begin_step(hybrid_state *h, int64_t n_rows, bool decode);

/* Counts the lookups of n routes of layer l, n_hits of them hits, as the
 * current step's kind (decode or prefill). */
void hybrid_count(hybrid_state *h, uint32_t l, int64_t n, int64_t n_hits);

/* Counts the n missed routes of layer l that the CPU computes in one step
 * (miss_routes, miss_experts). */
void hybrid_count_misses(hybrid_state *h, uint32_t l, const moe_route *misses, int64_t n);

/* The CPU split of one MoE layer: out[t * out_stride] += the experts of
 * the n routes of x's rows, hits from the slab, misses from the mapping,
 * combined hits first. */
void hybrid_moe_experts(hybrid_state *h, thread_pool *pool, moe_scratch *s, uint32_t l, const layer_weights *lw,
                        act_set *x, const moe_route *routes, int64_t n, float *out, size_t out_stride);

/* Records one hand-off round trip of layer l (CUDA side). */
void hybrid_record_handoff(hybrid_state *h, uint32_t l, uint64_t ns);

/* p50 and p99 of layer l's recorded hand-offs in ns (0 when none);
 * nearest-rank over the samples the ring holds. */
void hybrid_handoff_quantiles(const hybrid_state *h, uint32_t l, uint64_t *p50, uint64_t *p99);

/* Zeroes every counter (tables untouched). */
void hybrid_reset_stats(hybrid_state *h);

/* --- from a session's parameters (hybrid_setup.c) */

/* The split a session asks for (hydra_session_params' hybrid fields): the
 * ranking of p->pin_file (none: expert id order); slots per layer from the
 * placement of p->vram_budget when nonzero, else the pin file's pins per
 * layer, else p->resident_fraction.  Fails as expert_rank_load (file:line)
 * or placement_make (the numbers) do. */
hydra_status hybrid_setup(hybrid_state *h, const model_weights *w, const hydra_session_params *p, int64_t n_ctx,
                          int64_t n_batch, uint32_t kv_type);

/* The public counters (hybrid_stats.c); a zeroed state gives mode off. */
void hybrid_public_stats(const hybrid_state *h, hydra_hybrid_stats *out);
void hybrid_public_layer_stats(const hybrid_state *h, uint32_t l, hydra_hybrid_layer_stats *out);

#endif
