/*
 * gpu_hybrid_counters.c — the counters of hybrid decode
 * (gpu_hybrid_internal.h) and the split state behind the session's stats.
 */
#include "gpu_hybrid_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
