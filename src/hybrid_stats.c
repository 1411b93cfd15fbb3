/*
 * hybrid_stats.c — the split's counters as the public API reports them
 * (hydra_hybrid_stats, hydra_hybrid_layer_stats in hydra.h).
 */
#include "hybrid.h"

#include <string.h>

static hydra_hybrid_mode public_mode(hybrid_mode m)
{
    return m == HYBRID_CPU_SPLIT ? HYDRA_HYBRID_CPU_SPLIT : m == HYBRID_CUDA ? HYDRA_HYBRID_CUDA : HYDRA_HYBRID_OFF;
}

void hybrid_public_layer_stats(const hybrid_state *h, uint32_t l, hydra_hybrid_layer_stats *out)
{
    memset(out, 0, sizeof *out);
    if (l >= h->n_layer || h->layer[l].n_expert == 0)
        return;
    const hybrid_layer *L = &h->layer[l];
    const hybrid_layer_stats *st = &L->stats;
    *out = (hydra_hybrid_layer_stats){
        .moe = true,
        .n_expert = L->n_expert,
        .n_slots = L->n_slots,
        .n_resident = L->n_resident,
        .lookups = st->lookups,
        .hits = st->hits,
        .prefill_lookups = st->prefill_lookups,
        .prefill_hits = st->prefill_hits,
        .hit_ns = st->hit_ns,
        .miss_ns = st->miss_ns,
        .overlap_ns = st->overlap_ns,
        .n_handoff = st->n_handoff,
        .miss_routes = st->miss_routes,
        .miss_experts = st->miss_experts,
        .version = L->version,
    };
    hybrid_handoff_quantiles(h, l, &out->handoff_p50_ns, &out->handoff_p99_ns);
}

void hybrid_public_stats(const hybrid_state *h, hydra_hybrid_stats *out)
{
    memset(out, 0, sizeof *out);
    out->mode = public_mode(h->mode);
    for (uint32_t l = 0; l < h->n_layer; l++) {
        const hybrid_layer *L = &h->layer[l];
        if (L->n_expert == 0)
            continue;
        const hybrid_layer_stats *st = &L->stats;
        out->n_moe_layers++;
        out->n_experts += (uint64_t)L->n_expert;
        out->n_slots += (uint64_t)L->n_slots;
        out->n_resident += (uint64_t)L->n_resident;
        out->slab_bytes += (uint64_t)L->n_slots * (L->slot_bytes + L->bias_bytes);
        out->lookups += st->lookups;
        out->hits += st->hits;
        out->prefill_lookups += st->prefill_lookups;
        out->prefill_hits += st->prefill_hits;
        out->hit_ns += st->hit_ns;
        out->miss_ns += st->miss_ns;
        out->overlap_ns += st->overlap_ns;
        out->miss_routes += st->miss_routes;
        out->miss_experts += st->miss_experts;
    }
    out->decode_tokens = h->stats.decode_tokens;
    out->h2d_bytes = h->stats.h2d_bytes;
    out->h2d_bytes_per_token = out->decode_tokens ? (double)out->h2d_bytes / (double)out->decode_tokens : 0.0;
    out->repins = h->stats.repins;
    out->version = h->version;
}
