/*
 * The split state's tables (src/hybrid.h) on a real model's weights: the
 * partition is stable and renumbers hits to slots, slot_of and expert_in
 * stay each other's inverse through any admission and eviction, every
 * change bumps the versions and counts as a re-pin, a slot of the host
 * slab holds exactly its expert's bytes, and bad rankings are refused.
 */
#include "hybrid.h"
#include "model_fixture.h"
#include "test.h"
#include "weights.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first MoE layer. */
static uint32_t first_moe(const model_weights *w)
{
    uint32_t l = 0;
    while (l < w->hp.n_layer && !w->layer[l].moe)
        l++;
    return l;
}

/* Whether the tables of layer l agree with each other and the counts. */
static bool tables_consistent(const hybrid_layer *L)
{
    int32_t resident = 0, host = 0;
    for (int32_t e = 0; e < L->n_expert; e++) {
        const int32_t s = L->slot_of[e];
        if (s != HYBRID_NO_SLOT && (s < 0 || s >= L->n_slots || L->expert_in[s] != e))
            return false;
        resident += s != HYBRID_NO_SLOT;
        if (s == HYBRID_NO_SLOT && (host >= L->n_host_only || L->host_only[host++] != e))
            return false;
    }
    for (int32_t s = 0; s < L->n_slots; s++)
        if (L->expert_in[s] != HYBRID_NO_SLOT && L->slot_of[L->expert_in[s]] != s)
            return false;
    return resident == L->n_resident && host == L->n_host_only;
}

/* Whether slot s of the host slab holds expert e's gate, up and down. */
static bool slot_holds(const hybrid_layer *L, const layer_weights *lw, int32_t s, int32_t e)
{
    static const arch_role roles[3] = {W_MOE_GATE, W_MOE_UP, W_MOE_DOWN};
    for (int p = 0; p < 3; p++) {
        const wtensor *t = &lw->w[roles[p]];
        if (memcmp(L->slab + (size_t)s * L->slot_bytes + L->part_off[p], t->data + (size_t)e * t->mat_bytes,
                   t->mat_bytes) != 0)
            return false;
    }
    return true;
}

TEST(hybrid_partition_is_stable_and_renumbers_hits_to_slots)
{
    int32_t slot_of[6] = {HYBRID_NO_SLOT, 2, HYBRID_NO_SLOT, 0, 1, HYBRID_NO_SLOT};
    const hybrid_layer L = {.n_expert = 6, .n_slots = 3, .slot_of = slot_of};
    const moe_route routes[8] = {{0, 1, 0.5f}, {0, 0, 0.5f}, {1, 3, 0.25f}, {1, 5, 0.75f},
                                 {2, 4, 0.1f}, {2, 1, 0.9f}, {3, 2, 0.6f}, {3, 3, 0.4f}};
    moe_route hits[8], misses[8];
    int64_t nh = -1, nm = -1;
    hybrid_partition(&L, routes, 8, hits, &nh, misses, &nm);
    CHECK_EQ_INT(nh, 5);
    CHECK_EQ_INT(nm, 3);
    const int want_hit[5][2] = {{0, 2}, {1, 0}, {2, 1}, {2, 2}, {3, 0}}; /* token, slot */
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(hits[i].token, want_hit[i][0]);
        CHECK_EQ_INT(hits[i].expert, want_hit[i][1]);
    }
    CHECK(hits[3].weight == 0.9f);
    const int want_miss[3][2] = {{0, 0}, {1, 5}, {3, 2}}; /* token, expert */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(misses[i].token, want_miss[i][0]);
        CHECK_EQ_INT(misses[i].expert, want_miss[i][1]);
    }
}

TEST(hybrid_admit_and_evict_keep_tables_inverse_and_slab_exact)
{
    REQUIRE_SHARED();
    model_fixture f;
    CHECK_OK(model_fixture_open(&f, "qwen3moe-kq-q4_k_m"));
    const hybrid_config cfg = {.mode = HYBRID_CPU_SPLIT, .resident_fraction = 0.5, .max_rows = 4};
    hybrid_state h;
    hydra_status st = hybrid_init(&h, &f.w, &cfg);
    const uint32_t l = first_moe(&f.w);
    bool ok = st == HYDRA_OK && l < f.w.hp.n_layer, versions_ok = ok;
    uint64_t changes = 0;
    uint32_t seed = 99;
    for (int i = 0; ok && i < 200; i++) {
        hybrid_layer *L = &h.layer[l];
        seed = seed * 1664525u + 1013904223u;
        const int32_t e = (int32_t)((seed >> 8) % (uint32_t)L->n_expert), s = (int32_t)((seed >> 20) % (uint32_t)L->n_slots);
        const bool evict = (seed >> 30) == 0;
        const bool changes_table = evict ? L->slot_of[e] != HYBRID_NO_SLOT : L->slot_of[e] != s;
        const uint64_t v = L->version, gv = h.version;
        ok = (evict ? hybrid_evict(&h, l, e) : hybrid_admit(&h, l, e, s)) == HYDRA_OK && tables_consistent(L) &&
             (evict || slot_holds(L, &f.w.layer[l], s, e));
        versions_ok = versions_ok && L->version == v + changes_table && h.version == gv + changes_table;
        changes += changes_table;
    }
    for (int32_t s = 0; ok && s < h.layer[l].n_slots; s++)
        if (h.layer[l].expert_in[s] != HYBRID_NO_SLOT)
            ok = slot_holds(&h.layer[l], &f.w.layer[l], s, h.layer[l].expert_in[s]);
    CHECK(ok);
    CHECK(versions_ok);
    CHECK_EQ_U64(h.stats.repins, changes);
    CHECK_EQ_INT(hybrid_admit(&h, l, h.layer[l].n_expert, 0), HYDRA_ERR_RANGE);
    CHECK_EQ_INT(hybrid_admit(&h, l, 0, h.layer[l].n_slots), HYDRA_ERR_RANGE);
    CHECK_EQ_INT(hybrid_evict(&h, f.w.hp.n_layer, 0), HYDRA_ERR_INVALID_ARG);
    hybrid_free(&h);
    model_fixture_close(&f);
}

TEST(hybrid_init_places_the_ranking_first_in_slot_order)
{
    REQUIRE_SHARED();
    model_fixture f;
    CHECK_OK(model_fixture_open(&f, "qwen3moe-tiny-q8_0"));
    const uint32_t n_layer = f.w.hp.n_layer;
    const int32_t n = (int32_t)f.w.hp.n_expert;
    int32_t ids[64], n_slots[16];
    const int32_t *order[16];
    CHECK(n <= 64 && n_layer <= 16);
    for (int32_t i = 0; i < n; i++)
        ids[i] = n - 1 - i; /* most used: the highest id */
    for (uint32_t l = 0; l < n_layer; l++)
        order[l] = ids, n_slots[l] = (int32_t)(l % 2 ? n : 3);
    const hybrid_config cfg = {.mode = HYBRID_CPU_SPLIT, .order = order, .n_slots = n_slots, .max_rows = 4};
    hybrid_state h;
    CHECK_OK(hybrid_init(&h, &f.w, &cfg));
    bool ok = true;
    for (uint32_t l = 0; l < n_layer; l++) {
        const hybrid_layer *L = &h.layer[l];
        if (!f.w.layer[l].moe)
            continue;
        ok = ok && L->n_slots == n_slots[l] && L->n_resident == n_slots[l] && tables_consistent(L);
        for (int32_t s = 0; s < L->n_slots; s++)
            ok = ok && L->expert_in[s] == ids[s] && slot_holds(L, &f.w.layer[l], s, ids[s]);
        ok = ok && hybrid_resident(&h, l) == n_slots[l];
    }
    hybrid_free(&h);
    model_fixture_close(&f);
    CHECK(ok);
}

TEST(hybrid_init_refuses_bad_rankings_and_counts)
{
    REQUIRE_SHARED();
    model_fixture f;
    CHECK_OK(model_fixture_open(&f, "qwen3moe-tiny-q8_0"));
    const int32_t n = (int32_t)f.w.hp.n_expert;
    int32_t dup[64], slots[16] = {0};
    const int32_t *order[16];
    CHECK(n <= 64 && f.w.hp.n_layer <= 16);
    for (int32_t i = 0; i < n; i++)
        dup[i] = i;
    dup[n - 1] = 0; /* expert 0 twice, the last missing */
    for (uint32_t l = 0; l < f.w.hp.n_layer; l++)
        order[l] = dup;
    hybrid_state h;
    hybrid_config cfg = {.mode = HYBRID_CPU_SPLIT, .order = order, .max_rows = 4};
    CHECK_EQ_INT(hybrid_init(&h, &f.w, &cfg), HYDRA_ERR_INVALID_ARG);
    CHECK(strstr(hydra_last_error(), "each of its") != NULL);
    cfg.order = NULL;
    cfg.n_slots = slots;
    slots[first_moe(&f.w)] = n + 1;
    CHECK_EQ_INT(hybrid_init(&h, &f.w, &cfg), HYDRA_ERR_RANGE);
    cfg.n_slots = NULL;
    cfg.resident_fraction = 1.5;
    CHECK_EQ_INT(hybrid_init(&h, &f.w, &cfg), HYDRA_ERR_RANGE);
    model_fixture_close(&f);
}

TEST(hybrid_slots_for_fraction_rounds_to_nearest_whole_expert)
{
    CHECK_EQ_INT(hybrid_slots_for_fraction(128, 0.0), 0);
    CHECK_EQ_INT(hybrid_slots_for_fraction(128, 0.25), 32);
    CHECK_EQ_INT(hybrid_slots_for_fraction(8, 0.5), 4);
    CHECK_EQ_INT(hybrid_slots_for_fraction(7, 0.5), 4);
    CHECK_EQ_INT(hybrid_slots_for_fraction(8, 1.0), 8);
    CHECK_EQ_INT(hybrid_slots_for_fraction(8, 0.01), 0);
}

TEST(hybrid_handoff_quantiles_are_nearest_rank)
{
    hybrid_layer layer = {.n_expert = 1};
    hybrid_state h = {.n_layer = 1, .layer = &layer};
    uint64_t p50, p99;
    hybrid_handoff_quantiles(&h, 0, &p50, &p99);
    CHECK_EQ_U64(p50, 0);
    for (uint64_t i = 100; i >= 1; i--) /* 1..100 us, in reverse */
        hybrid_record_handoff(&h, 0, i * 1000);
    hybrid_handoff_quantiles(&h, 0, &p50, &p99);
    CHECK_EQ_U64(p50, 50000);
    CHECK_EQ_U64(p99, 99000);
    CHECK_EQ_U64(layer.stats.n_handoff, 100);
}
