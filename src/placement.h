/*
 * placement.h — what of a model goes into a device budget for hybrid
 * decode (issue 10, docs/HYBRID.md "Placement"), decided before anything
 * is allocated:
 *
 *   fixed   non-expert weights (embeddings, attention, norms, routers,
 *           dense FFNs, output), shared experts, KV cache, scratch
 *   stage   with stage_prefill and misses possible, prefill's double
 *           buffer of one MoE layer's experts (docs/HYBRID.md, "Prefill")
 *   slab    what is left, in whole experts: one expert of one layer is
 *           its gate, up and down matrices in their own quant types (a
 *           slab slot, hybrid_expert_bytes) plus its biases
 *
 * Slots per layer: without a profile, the same count in every MoE layer
 * (the most the budget allows), the remainder one more slot per layer
 * from the first layer on.  With a profile (selection counts), slot by
 * slot to the layer whose next most used expert serves the largest share
 * of that layer's lookups per byte (every layer sees k lookups per token,
 * so this maximises the expected hit rate; a layer's counts are
 * decreasing along its ranking, so greedy is optimal), ties to the layer
 * with fewer slots, then the lower layer.
 */
#ifndef HYDRA_PLACEMENT_H
#define HYDRA_PLACEMENT_H

#include "expert_rank.h"
#include "weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct placement_input {
    const model_weights *w;
    uint64_t budget;         /* bytes of device memory to plan */
    int64_t n_ctx, n_batch;
    uint32_t kv_type;        /* QT_F16 or QT_F32 */
    uint64_t scratch_bytes;  /* working buffers; 0: placement_scratch_estimate */
    const expert_rank *rank; /* selection counts (a profile or pin file); NULL: none */
    bool stage_prefill;      /* CUDA: reserve prefill's staging area when the slab cannot hold every expert */
} placement_input;

typedef struct placement_layer {
    bool moe;
    int32_t n_expert, n_slots;
    uint64_t expert_bytes; /* one expert: slot and biases */
    double coverage;       /* share of the layer's profiled lookups its slots serve; -1: no profile */
} placement_layer;

typedef struct placement_plan {
    uint64_t budget;
    uint64_t nonexpert_bytes; /* every bound tensor but the routed and shared experts */
    uint64_t shared_bytes;    /* shared experts (and their gate) */
    uint64_t kv_bytes, scratch_bytes;
    uint64_t stage_bytes;     /* prefill's two staging buffers of one MoE layer's experts; 0: none */
    uint64_t slab_bytes;      /* sum of n_slots x expert_bytes */
    uint64_t unused_bytes;    /* budget minus all of the above */
    uint64_t expert_bytes;    /* every routed expert of the model (the slab at 100%) */
    uint32_t n_layer;
    placement_layer *layer;   /* n_layer */
    int32_t n_slots_total, n_experts_total;
    double hit_rate;          /* expected decode hit rate from the profile; -1: no profile */
} placement_plan;

/* Plans the budget.  Fails with HYDRA_ERR_RANGE, naming every part's
 * bytes, when the fixed part does not fit; HYDRA_ERR_INVALID_ARG for a
 * rank of another shape than the model.  Free with placement_free. */
hydra_status placement_make(placement_plan *plan, const placement_input *in);
void placement_free(placement_plan *plan); /* zeroes; safe on a zeroed one */

/* Bytes of the forward pass's working buffers for a batch and context
 * (fwd_init and moe_scratch_init's sizes, rounded up). */
uint64_t placement_scratch_estimate(const model_weights *w, int64_t n_batch, int64_t n_ctx);

/* The plan as text (bytes per part, slots per layer, hit rate), into buf
 * (always terminated).  Returns the length it needed. */
size_t placement_describe(const placement_plan *plan, char *buf, size_t cap);

#endif
