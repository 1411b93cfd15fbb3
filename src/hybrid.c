/*
 * hybrid.c — slot tables, the host slab of the CPU-only split, admission,
 * the partition of a layer's routes and the fixed-order combine (hybrid.h).
 */
#include "hybrid.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The expert tensors of a slot, in slot order: gate, up, down. */
static const arch_role part_role[3] = {W_MOE_GATE, W_MOE_UP, W_MOE_DOWN};
static const arch_role bias_role[3] = {W_MOE_GATE_BIAS, W_MOE_UP_BIAS, W_MOE_DOWN_BIAS};

static size_t align_up(size_t n)
{
    return (n + HYBRID_SLOT_ALIGN - 1) / HYBRID_SLOT_ALIGN * HYBRID_SLOT_ALIGN;
}

static bool is_moe(const model_weights *w, uint32_t l)
{
    return w->layer[l].moe && w->hp.n_expert > 0;
}

/* Slot layout of layer l: each part aligned, the stride a multiple of the
 * alignment so every slot of the slab starts aligned. */
static void slot_layout(const layer_weights *lw, hybrid_layer *L)
{
    size_t off = 0;
    L->bias_bytes = 0;
    for (int p = 0; p < 3; p++) {
        L->part_off[p] = off;
        L->part_bytes[p] = lw->w[part_role[p]].mat_bytes;
        off = align_up(off + L->part_bytes[p]);
        const wtensor *b = &lw->w[bias_role[p]];
        if (b->data != NULL)
            L->bias_bytes += sizeof(float) * (size_t)b->ne[0];
    }
    L->slot_bytes = off;
}

uint64_t hybrid_expert_bytes(const model_weights *w, uint32_t l)
{
    if (l >= w->hp.n_layer || !is_moe(w, l))
        return 0;
    hybrid_layer L = {0};
    slot_layout(&w->layer[l], &L);
    return L.slot_bytes + L.bias_bytes;
}

int32_t hybrid_slots_for_fraction(int32_t n_expert, double fraction)
{
    const double slots = (double)n_expert * fraction + 0.5;
    if (!(slots > 0.0))
        return 0;
    return slots >= (double)n_expert ? n_expert : (int32_t)slots;
}

int32_t hybrid_resident(const hybrid_state *h, uint32_t l)
{
    return l < h->n_layer ? h->layer[l].n_resident : 0;
}

double hybrid_resident_fraction(const hybrid_state *h, uint32_t l)
{
    if (l >= h->n_layer || h->layer[l].n_expert == 0)
        return 0.0;
    return (double)h->layer[l].n_resident / (double)h->layer[l].n_expert;
}

/* --- tables */

/* host_only: the experts without a slot, ascending (what the CPU pass may
 * be asked to compute). */
static void rebuild_host_only(hybrid_layer *L)
{
    L->n_host_only = 0;
    for (int32_t e = 0; e < L->n_expert; e++)
        if (L->slot_of[e] == HYBRID_NO_SLOT)
            L->host_only[L->n_host_only++] = e;
}

/* Copies expert e's matrices (and biases) of lw into slot of the host slab. */
static void copy_into_slot(hybrid_layer *L, const layer_weights *lw, int32_t e, int32_t slot)
{
    if (L->slab == NULL)
        return;
    uint8_t *dst = L->slab + (size_t)slot * L->slot_bytes;
    for (int p = 0; p < 3; p++) {
        const wtensor *t = &lw->w[part_role[p]];
        memcpy(dst + L->part_off[p], t->data + (size_t)e * t->mat_bytes, L->part_bytes[p]);
        const wtensor *b = &lw->w[bias_role[p]];
        if (L->bias_slab[p] != NULL) {
            const size_t n = (size_t)b->ne[0];
            memcpy(L->bias_slab[p] + (size_t)slot * n, wt_f32(b) + (size_t)e * n, sizeof(float) * n);
        }
    }
}

static void set_slot(hybrid_state *h, uint32_t l, int32_t e, int32_t slot)
{
    hybrid_layer *L = &h->layer[l];
    const int32_t old_expert = L->expert_in[slot], old_slot = L->slot_of[e];
    if (old_expert != HYBRID_NO_SLOT)
        L->slot_of[old_expert] = HYBRID_NO_SLOT;
    else
        L->n_resident++;
    if (old_slot != HYBRID_NO_SLOT) {
        L->expert_in[old_slot] = HYBRID_NO_SLOT;
        L->n_resident--;
    }
    copy_into_slot(L, &h->w->layer[l], e, slot);
    L->slot_of[e] = slot;
    L->expert_in[slot] = e;
    rebuild_host_only(L);
    L->version++;
    h->version++;
}

static hydra_status check_layer(const hybrid_state *h, uint32_t l, int32_t expert, const char *what)
{
    if (l >= h->n_layer || h->layer[l].n_expert == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "%s: layer %u is not a MoE layer of the split", what, l);
    if (expert < 0 || expert >= h->layer[l].n_expert)
        return hydra_fail(HYDRA_ERR_RANGE, "%s: expert %d of layer %u outside [0, %d)", what, (int)expert, l,
                          (int)h->layer[l].n_expert);
    return HYDRA_OK;
}

hydra_status hybrid_admit(hybrid_state *h, uint32_t l, int32_t expert, int32_t slot)
{
    hydra_status st = check_layer(h, l, expert, "hybrid_admit");
    if (st != HYDRA_OK)
        return st;
    if (slot < 0 || slot >= h->layer[l].n_slots)
        return hydra_fail(HYDRA_ERR_RANGE, "hybrid_admit: slot %d of layer %u outside [0, %d)", (int)slot, l,
                          (int)h->layer[l].n_slots);
    if (h->layer[l].slot_of[expert] == slot)
        return HYDRA_OK;
    set_slot(h, l, expert, slot);
    h->stats.repins++;
    return HYDRA_OK;
}

hydra_status hybrid_evict(hybrid_state *h, uint32_t l, int32_t expert)
{
    hydra_status st = check_layer(h, l, expert, "hybrid_evict");
    if (st != HYDRA_OK)
        return st;
    hybrid_layer *L = &h->layer[l];
    const int32_t slot = L->slot_of[expert];
    if (slot == HYBRID_NO_SLOT)
        return HYDRA_OK;
    L->slot_of[expert] = HYBRID_NO_SLOT;
    L->expert_in[slot] = HYBRID_NO_SLOT;
    L->n_resident--;
    rebuild_host_only(L);
    L->version++;
    h->version++;
    h->stats.repins++;
    return HYDRA_OK;
}

/* --- building */

/* Whether order holds every id of [0, n) once; seen: n bytes of scratch. */
static bool is_permutation(const int32_t *order, int32_t n, uint8_t *seen)
{
    memset(seen, 0, (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= n || seen[order[i]])
            return false;
        seen[order[i]] = 1;
    }
    return true;
}

static void *alloc_slab(size_t bytes, bool *ok)
{
    if (bytes == 0)
        return NULL;
    void *p = aligned_alloc(HYBRID_SLOT_ALIGN, align_up(bytes));
    *ok = *ok && p != NULL;
    return p;
}

/* lw with its expert tensors pointing into the slab: expert index = slot
 * (moe_experts steps through experts by mat_bytes, here the slot stride). */
static void make_slab_view(hybrid_layer *L, const layer_weights *lw)
{
    L->slab_view = *lw;
    for (int p = 0; p < 3; p++) {
        wtensor *t = &L->slab_view.w[part_role[p]];
        t->data = L->slab ? L->slab + L->part_off[p] : NULL;
        t->mat_bytes = L->slot_bytes;
        if (lw->w[bias_role[p]].data != NULL)
            L->slab_view.w[bias_role[p]].data = (const uint8_t *)L->bias_slab[p];
    }
}

static hydra_status init_layer(hybrid_state *h, uint32_t l, const hybrid_config *cfg, uint8_t *seen)
{
    const model_weights *w = h->w;
    hybrid_layer *L = &h->layer[l];
    const layer_weights *lw = &w->layer[l];
    L->n_expert = (int32_t)w->hp.n_expert;
    L->n_slots = cfg->n_slots ? cfg->n_slots[l] : hybrid_slots_for_fraction(L->n_expert, cfg->resident_fraction);
    if (L->n_slots < 0 || L->n_slots > L->n_expert)
        return hydra_fail(HYDRA_ERR_RANGE, "hybrid: layer %u asks for %d slots of %d experts", l, (int)L->n_slots,
                          (int)L->n_expert);
    const int32_t *order = cfg->order ? cfg->order[l] : NULL;
    if (order != NULL && !is_permutation(order, L->n_expert, seen))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid: the ranking of layer %u does not list each of its %d "
                          "experts once", l, (int)L->n_expert);
    slot_layout(lw, L);
    bool ok = true;
    L->slot_of = malloc(sizeof(int32_t) * (size_t)L->n_expert);
    L->host_only = malloc(sizeof(int32_t) * (size_t)L->n_expert);
    L->expert_in = malloc(sizeof(int32_t) * (size_t)(L->n_slots + 1));
    ok = L->slot_of && L->host_only && L->expert_in;
    if (h->host_slab) {
        L->slab = alloc_slab((size_t)L->n_slots * L->slot_bytes, &ok);
        for (int p = 0; p < 3; p++)
            if (lw->w[bias_role[p]].data != NULL)
                L->bias_slab[p] = alloc_slab(sizeof(float) * (size_t)lw->w[bias_role[p]].ne[0] * (size_t)L->n_slots,
                                             &ok);
    }
    if (!ok)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: layer %u, %d slots of %zu bytes", l, (int)L->n_slots,
                          L->slot_bytes);
    for (int32_t e = 0; e < L->n_expert; e++)
        L->slot_of[e] = HYBRID_NO_SLOT;
    for (int32_t s = 0; s < L->n_slots; s++)
        L->expert_in[s] = HYBRID_NO_SLOT;
    make_slab_view(L, lw);
    for (int32_t s = 0; s < L->n_slots; s++)
        set_slot(h, l, order ? order[s] : s, s);
    rebuild_host_only(L);
    L->version = 1;
    return HYDRA_OK;
}

static hydra_status check_config(const hybrid_config *cfg)
{
    if (cfg->mode != HYBRID_OFF && cfg->mode != HYBRID_CPU_SPLIT && cfg->mode != HYBRID_CUDA)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid mode %d: off, cpu_split or cuda", (int)cfg->mode);
    if (!(cfg->resident_fraction >= 0.0 && cfg->resident_fraction <= 1.0))
        return hydra_fail(HYDRA_ERR_RANGE, "hybrid: resident fraction %g outside [0, 1]", cfg->resident_fraction);
    if (cfg->max_rows < 1)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hybrid: a step of %lld rows", (long long)cfg->max_rows);
    return HYDRA_OK;
}

static hydra_status init_buffers(hybrid_state *h)
{
    const arch_hparams *hp = &h->w->hp;
    h->n_embd = hp->n_embd;
    h->max_routes = h->max_rows * (int64_t)hp->n_expert_used;
    const size_t routes = (size_t)h->max_routes + 1, sums = (size_t)h->max_rows * (size_t)h->n_embd;
    h->hits = malloc(sizeof(moe_route) * routes);
    h->misses = malloc(sizeof(moe_route) * routes);
    h->hit_sum = malloc(sizeof(float) * sums);
    h->miss_sum = malloc(sizeof(float) * sums);
    if (!h->hits || !h->misses || !h->hit_sum || !h->miss_sum)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: step buffers for %lld rows", (long long)h->max_rows);
    return HYDRA_OK;
}

hydra_status hybrid_init(hybrid_state *h, const model_weights *w, const hybrid_config *cfg)
{
    memset(h, 0, sizeof *h);
    hydra_status st = check_config(cfg);
    if (st != HYDRA_OK)
        return st;
    h->w = w;
    h->mode = cfg->mode;
    h->host_slab = cfg->mode == HYBRID_CPU_SPLIT;
    h->count_time = cfg->count_time;
    h->max_rows = cfg->max_rows;
    h->n_layer = w->hp.n_layer;
    h->layer = calloc(h->n_layer, sizeof *h->layer);
    uint8_t *seen = malloc((size_t)w->hp.n_expert + 1);
    if (h->layer == NULL || seen == NULL)
        st = hydra_fail(HYDRA_ERR_NOMEM, "hybrid: tables of %u layers", h->n_layer);
    for (uint32_t l = 0; l < h->n_layer && st == HYDRA_OK; l++)
        if (is_moe(w, l))
            st = init_layer(h, l, cfg, seen);
    free(seen);
    if (st == HYDRA_OK)
        st = init_buffers(h);
    if (st != HYDRA_OK) {
        hybrid_free(h);
        return st;
    }
    h->version = 1;
    return HYDRA_OK;
}

void hybrid_free(hybrid_state *h)
{
    for (uint32_t l = 0; h->layer != NULL && l < h->n_layer; l++) {
        hybrid_layer *L = &h->layer[l];
        free(L->slot_of);
        free(L->expert_in);
        free(L->host_only);
        free(L->slab);
        for (int p = 0; p < 3; p++)
            free(L->bias_slab[p]);
    }
    free(h->layer);
    free(h->hits);
    free(h->misses);
    free(h->hit_sum);
    free(h->miss_sum);
    memset(h, 0, sizeof *h);
}

/* --- the split of one layer */

void hybrid_partition(const hybrid_layer *L, const moe_route *routes, int64_t n, moe_route *hits, int64_t *n_hits,
                      moe_route *misses, int64_t *n_misses)
{
    int64_t nh = 0, nm = 0;
    for (int64_t i = 0; i < n; i++) {
        const int32_t slot = L->slot_of[routes[i].expert];
        if (slot != HYBRID_NO_SLOT) {
            hits[nh] = routes[i];
            hits[nh++].expert = slot;
        } else {
            misses[nm++] = routes[i];
        }
    }
    *n_hits = nh;
    *n_misses = nm;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* out[t] += hit_sum[t], then out[t] += miss_sum[t]: one fixed order for
 * every row, so the result depends only on the two partial sums. */
static void combine(const hybrid_state *h, int64_t n_rows, float *out, size_t out_stride)
{
    const int64_t embd = h->n_embd;
    for (int64_t t = 0; t < n_rows; t++) {
        float *o = out + (size_t)t * out_stride;
        const float *hs = h->hit_sum + t * embd, *ms = h->miss_sum + t * embd;
        for (int64_t i = 0; i < embd; i++)
            o[i] += hs[i];
        for (int64_t i = 0; i < embd; i++)
            o[i] += ms[i];
    }
}

void hybrid_begin_step(hybrid_state *h, int64_t n_rows, bool decode)
{
    h->step_decode = decode;
    if (decode)
        h->stats.decode_tokens += (uint64_t)n_rows;
}

void hybrid_count(hybrid_state *h, uint32_t l, int64_t n, int64_t n_hits)
{
    hybrid_layer_stats *st = &h->layer[l].stats;
    if (h->step_decode) {
        st->lookups += (uint64_t)n;
        st->hits += (uint64_t)n_hits;
    } else {
        st->prefill_lookups += (uint64_t)n;
        st->prefill_hits += (uint64_t)n_hits;
    }
}

void hybrid_count_misses(hybrid_state *h, uint32_t l, const moe_route *misses, int64_t n)
{
    hybrid_layer_stats *st = &h->layer[l].stats;
    const int32_t n_expert = h->layer[l].n_expert;
    uint64_t seen[(n_expert + 63) / 64 + 1];
    memset(seen, 0, sizeof seen);
    uint64_t distinct = 0;
    for (int64_t i = 0; i < n; i++) {
        const int32_t e = misses[i].expert;
        if (e < 0 || e >= n_expert || (seen[e / 64] >> (e % 64) & 1))
            continue;
        seen[e / 64] |= 1ull << (e % 64);
        distinct++;
    }
    st->miss_routes += (uint64_t)n;
    st->miss_experts += distinct;
}

void hybrid_moe_experts(hybrid_state *h, thread_pool *pool, moe_scratch *s, uint32_t l, const layer_weights *lw,
                        act_set *x, const moe_route *routes, int64_t n, float *out, size_t out_stride)
{
    hybrid_layer *L = &h->layer[l];
    int64_t n_hits, n_misses;
    hybrid_partition(L, routes, n, h->hits, &n_hits, h->misses, &n_misses);
    hybrid_count(h, l, n, n_hits);
    hybrid_count_misses(h, l, h->misses, n_misses);
    hybrid_layer_stats *st = &L->stats;
    const size_t sums = (size_t)x->n_rows * (size_t)h->n_embd;
    memset(h->hit_sum, 0, sizeof(float) * sums);
    memset(h->miss_sum, 0, sizeof(float) * sums);
    const uint64_t t0 = h->count_time ? now_ns() : 0;
    if (n_hits > 0)
        moe_experts(pool, s, &L->slab_view, x, h->hits, n_hits, h->hit_sum, (size_t)h->n_embd);
    const uint64_t t1 = h->count_time ? now_ns() : 0;
    if (n_misses > 0)
        moe_experts(pool, s, lw, x, h->misses, n_misses, h->miss_sum, (size_t)h->n_embd);
    if (h->count_time) {
        const uint64_t t2 = now_ns();
        st->hit_ns += t1 - t0;
        st->miss_ns += t2 - t1;
    }
    combine(h, x->n_rows, out, out_stride);
}

/* --- counters */

void hybrid_record_handoff(hybrid_state *h, uint32_t l, uint64_t ns)
{
    if (l >= h->n_layer)
        return;
    hybrid_layer_stats *st = &h->layer[l].stats;
    st->handoff_ns[st->n_handoff % HYBRID_HANDOFF_SAMPLES] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
    st->n_handoff++;
}

static int cmp_u32(const void *a, const void *b)
{
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the ceil(q * n)-th smallest, 1-based. */
static uint64_t rank_of(const uint32_t *sorted, size_t n, double q)
{
    size_t r = (size_t)(q * (double)n);
    if ((double)r < q * (double)n)
        r++;
    return sorted[r > 0 ? r - 1 : 0];
}

void hybrid_handoff_quantiles(const hybrid_state *h, uint32_t l, uint64_t *p50, uint64_t *p99)
{
    *p50 = *p99 = 0;
    if (l >= h->n_layer)
        return;
    const hybrid_layer_stats *st = &h->layer[l].stats;
    const size_t n = st->n_handoff < HYBRID_HANDOFF_SAMPLES ? (size_t)st->n_handoff : HYBRID_HANDOFF_SAMPLES;
    if (n == 0)
        return;
    uint32_t sorted[HYBRID_HANDOFF_SAMPLES];
    memcpy(sorted, st->handoff_ns, sizeof(uint32_t) * n);
    qsort(sorted, n, sizeof *sorted, cmp_u32);
    *p50 = rank_of(sorted, n, 0.50);
    *p99 = rank_of(sorted, n, 0.99);
}

void hybrid_reset_stats(hybrid_state *h)
{
    memset(&h->stats, 0, sizeof h->stats);
    for (uint32_t l = 0; l < h->n_layer; l++)
        memset(&h->layer[l].stats, 0, sizeof h->layer[l].stats);
}
