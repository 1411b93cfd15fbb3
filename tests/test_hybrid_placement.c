/*
 * Placement of hybrid decode (src/placement.h): the parts' bytes against
 * what the file and a session say independently (tensor sizes by name,
 * hydra_session_kv_bytes), a budget below the fixed part refused with the
 * numbers, every plan's parts summing to its budget with no whole expert
 * left out that would fit, uniform slots without a profile, more slots
 * where a profile says the top experts serve more lookups, and a session
 * whose split follows the plan of its vram_budget.
 */
#include "expert_rank.h"
#include "hybrid.h"
#include "model_fixture.h"
#include "placement.h"
#include "quant.h"
#include "test.h"
#include "weights.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_CTX = 256, N_BATCH = 32 };

static const char *const models[] = {"qwen3moe-kq-q4_k_m", "mixtral-tiny-q4_0", "qwen2moe-tiny-q8_0",
                                     "deepseek2-tiny-q8_0", "gptoss-tiny-mxfp4"};

static placement_input input(const model_fixture *f, uint64_t budget, const expert_rank *rank)
{
    return (placement_input){.w = &f->w, .budget = budget, .n_ctx = N_CTX, .n_batch = N_BATCH, .kv_type = QT_F16,
                             .rank = rank};
}

static uint64_t fixed_part(const placement_plan *p)
{
    return p->nonexpert_bytes + p->shared_bytes + p->kv_bytes + p->scratch_bytes;
}

/* Bytes of the file's tensors whose name contains part. */
static uint64_t named_bytes(const hydra_model *m, const char *part)
{
    uint64_t n = 0;
    for (size_t i = 0; i < hydra_model_tensor_count(m); i++) {
        hydra_tensor_info ti;
        if (hydra_model_tensor_at(m, i, &ti) == HYDRA_OK && strstr(ti.name, part) != NULL)
            n += ti.n_bytes;
    }
    return n;
}

TEST(placement_parts_match_the_file_and_the_session)
{
    REQUIRE_SHARED();
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        model_fixture f;
        CHECK_OK(model_fixture_open(&f, models[i]));
        placement_plan p;
        const placement_input in = input(&f, UINT64_MAX / 2, NULL);
        hydra_status st = placement_make(&p, &in);
        hydra_session_params sp = hydra_session_default_params();
        sp.n_ctx = N_CTX;
        sp.n_batch = N_BATCH;
        sp.n_threads = 1;
        hydra_session *s = NULL;
        if (st == HYDRA_OK)
            st = hydra_session_create(&s, f.m, &sp);
        const uint64_t kv = hydra_session_kv_bytes(s);
        const uint64_t exps = named_bytes(f.m, "_exps"), shexp = named_bytes(f.m, "_shexp");
        const uint64_t all = hydra_model_n_bytes(f.m);
        hydra_session_free(s);
        model_fixture_close(&f);
        CHECK_OK(st);
        printf("  %s: non-expert %" PRIu64 ", shared %" PRIu64 ", experts %" PRIu64 ", KV %" PRIu64 "\n", models[i],
               p.nonexpert_bytes, p.shared_bytes, p.expert_bytes, p.kv_bytes);
        CHECK_EQ_U64(p.expert_bytes, exps);
        CHECK_EQ_U64(p.shared_bytes, shexp);
        CHECK_EQ_U64(p.nonexpert_bytes, all - exps - shexp);
        CHECK_EQ_U64(p.kv_bytes, kv);
        CHECK_EQ_INT(p.n_slots_total, p.n_experts_total); /* everything fits */
        placement_free(&p);
    }
}

TEST(placement_refuses_a_budget_below_the_fixed_part_naming_the_numbers)
{
    REQUIRE_SHARED();
    model_fixture f;
    CHECK_OK(model_fixture_open(&f, "qwen2moe-tiny-q8_0"));
    placement_plan p, q;
    placement_input in = input(&f, UINT64_MAX / 2, NULL);
    CHECK_OK(placement_make(&p, &in));
    in.budget = fixed_part(&p) - 1;
    const hydra_status st = placement_make(&q, &in);
    const char *msg = hydra_last_error();
    char want[5][32];
    snprintf(want[0], sizeof want[0], "%" PRIu64, p.nonexpert_bytes);
    snprintf(want[1], sizeof want[1], "%" PRIu64, p.shared_bytes);
    snprintf(want[2], sizeof want[2], "%" PRIu64, p.kv_bytes);
    snprintf(want[3], sizeof want[3], "%" PRIu64, p.scratch_bytes);
    snprintf(want[4], sizeof want[4], "%" PRIu64, fixed_part(&p));
    in.budget = fixed_part(&p);
    placement_plan exact;
    const hydra_status st_exact = placement_make(&exact, &in);
    placement_free(&p);
    model_fixture_close(&f);
    CHECK_EQ_INT(st, HYDRA_ERR_RANGE);
    for (int i = 0; i < 5; i++)
        if (strstr(msg, want[i]) == NULL)
            FAIL("the message lacks %s: %s", want[i], msg);
    CHECK_OK(st_exact);
    CHECK_EQ_INT(exact.n_slots_total, 0);
    CHECK_EQ_U64(exact.unused_bytes, 0);
    placement_free(&exact);
}

/* A plan's parts sum to its budget, its slab is its slots' bytes, and no
 * layer that is not full could take one more expert. */
static bool plan_consistent(const placement_plan *p)
{
    uint64_t slab = 0;
    int32_t slots = 0;
    for (uint32_t l = 0; l < p->n_layer; l++) {
        const placement_layer *L = &p->layer[l];
        slab += (uint64_t)L->n_slots * L->expert_bytes;
        slots += L->n_slots;
        if (L->n_slots > L->n_expert || (L->moe && L->n_slots < L->n_expert && L->expert_bytes <= p->unused_bytes))
            return false;
    }
    return fixed_part(p) + p->stage_bytes + p->slab_bytes + p->unused_bytes == p->budget && slab == p->slab_bytes &&
           slots == p->n_slots_total;
}

TEST(placement_parts_sum_to_the_budget_and_slots_are_uniform)
{
    REQUIRE_SHARED();
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        model_fixture f;
        CHECK_OK(model_fixture_open(&f, models[i]));
        placement_plan full;
        placement_input in = input(&f, UINT64_MAX / 2, NULL);
        CHECK_OK(placement_make(&full, &in));
        const uint64_t fixed = fixed_part(&full), slab_all = full.slab_bytes;
        placement_free(&full);
        bool ok = true;
        for (int step = 0; step <= 40 && ok; step++) {
            placement_plan p;
            in.budget = fixed + slab_all * (uint64_t)step / 37; /* past 100% too */
            ok = placement_make(&p, &in) == HYDRA_OK && plan_consistent(&p);
            /* uniform: a layer of experts at least as large has at most one slot more */
            for (uint32_t a = 0; ok && a < p.n_layer; a++)
                for (uint32_t b = 0; ok && b < p.n_layer; b++)
                    ok = !p.layer[a].moe || !p.layer[b].moe || p.layer[a].expert_bytes < p.layer[b].expert_bytes ||
                         p.layer[a].n_slots <= p.layer[b].n_slots + 1;
            ok = ok && p.hit_rate < 0.0;
            if (!ok)
                printf("  %s: budget %" PRIu64 ": uneven, unused %" PRIu64 "\n", models[i], in.budget, p.unused_bytes);
            placement_free(&p);
        }
        model_fixture_close(&f);
        if (!ok)
            FAIL("%s: an inconsistent or uneven plan", models[i]);
    }
}

/* Layer 0 sends all its lookups to one expert; every other MoE layer
 * spreads them evenly: with room for a few experts, layer 0 needs one to
 * serve everything, and the rest go where each serves the most. */
TEST(placement_with_a_profile_gives_slots_where_they_serve_most)
{
    REQUIRE_SHARED();
    model_fixture f;
    CHECK_OK(model_fixture_open(&f, "qwen3moe-tiny-q8_0")); /* every layer's experts of one size */
    const int n_layer = (int)f.w.hp.n_layer, n_expert = (int)f.w.hp.n_expert;
    expert_rank r;
    CHECK_OK(expert_rank_init(&r, n_layer, n_expert, NULL));
    for (int l = 0; l < n_layer; l++)
        for (int e = 0; e < n_expert; e++)
            r.count[(size_t)l * n_expert + e] = l == 0 ? (e == 5 ? 1000 : 0) : 1000 / (uint64_t)n_expert + (e < 2);
    placement_plan full, p;
    placement_input in = input(&f, UINT64_MAX / 2, &r);
    hydra_status st = placement_make(&full, &in);
    const uint64_t expert = hybrid_expert_bytes(&f.w, 0);
    if (st == HYDRA_OK) {
        in.budget = fixed_part(&full) + 3 * expert;
        st = placement_make(&p, &in);
    }
    placement_free(&full);
    model_fixture_close(&f);
    expert_rank_free(&r);
    CHECK_OK(st);
    CHECK(plan_consistent(&p));
    CHECK_EQ_INT(p.layer[0].n_slots, 1);
    CHECK(p.layer[0].coverage == 1.0);
    CHECK_EQ_INT(p.n_slots_total, 3);
    /* layers 1..: their first two experts serve one lookup more each */
    double want = 1000.0, lookups = 1000.0;
    for (int l = 1; l < n_layer; l++) {
        want += p.layer[l].n_slots > 0 ? (double)p.layer[l].n_slots * (1000 / n_expert + 1) : 0.0;
        lookups += (double)n_expert * (1000 / n_expert) + 2;
    }
    CHECK(p.hit_rate > 0.0 && p.hit_rate <= 1.0);
    CHECK(p.hit_rate - want / lookups < 1e-12 && want / lookups - p.hit_rate < 1e-12);
    char text[2048];
    placement_describe(&p, text, sizeof text);
    CHECK(strstr(text, "expected decode hit rate") != NULL && strstr(text, "from the profile") != NULL);
    placement_free(&p);
}

TEST(placement_session_split_follows_the_vram_budget)
{
    REQUIRE_SHARED();
    model_fixture f;
    CHECK_OK(model_fixture_open(&f, "mixtral-tiny-q4_0"));
    placement_plan full, p;
    placement_input in = input(&f, UINT64_MAX / 2, NULL);
    CHECK_OK(placement_make(&full, &in));
    in.budget = fixed_part(&full) + full.slab_bytes / 2;
    CHECK_OK(placement_make(&p, &in));
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_batch = N_BATCH;
    sp.n_threads = 1;
    sp.hybrid = HYDRA_HYBRID_CPU_SPLIT;
    sp.vram_budget = in.budget;
    hydra_session *s = NULL;
    hydra_status st = hydra_session_create(&s, f.m, &sp);
    hydra_hybrid_stats hs = {0};
    bool same = st == HYDRA_OK && hydra_session_hybrid_stats(s, &hs) == HYDRA_OK;
    for (uint32_t l = 0; same && l < p.n_layer; l++) {
        hydra_hybrid_layer_stats ls;
        same = hydra_session_hybrid_layer_stats(s, l, &ls) == HYDRA_OK && ls.n_slots == p.layer[l].n_slots;
    }
    hydra_session_free(s);
    sp.vram_budget = fixed_part(&full) - 1;
    const hydra_status too_small = hydra_session_create(&s, f.m, &sp);
    placement_free(&full);
    placement_free(&p);
    model_fixture_close(&f);
    CHECK_OK(st);
    CHECK(same);
    CHECK(hs.n_slots > 0 && hs.n_slots < hs.n_experts);
    CHECK_EQ_INT(too_small, HYDRA_ERR_RANGE);
}

/* With stage_prefill, a budget that cannot hold every expert keeps room for
 * prefill's two staging buffers of the largest layer's experts; one that
 * holds them all, or has no room for the buffers, reserves nothing. */
TEST(placement_reserves_prefill_staging_only_when_experts_miss)
{
    REQUIRE_SHARED();
    model_fixture f;
    CHECK_OK(model_fixture_open(&f, "gptoss-tiny-mxfp4")); /* 4 MoE layers: two fit beside the slab */
    placement_input in = input(&f, UINT64_MAX / 2, NULL);
    in.stage_prefill = true;
    placement_plan p;
    CHECK_OK(placement_make(&p, &in));
    const uint64_t fixed = fixed_part(&p), all = p.slab_bytes;
    CHECK_EQ_U64(p.stage_bytes, 0);
    uint64_t widest = 0;
    for (uint32_t l = 0; l < p.n_layer; l++) {
        const uint64_t b = (uint64_t)p.layer[l].n_expert * p.layer[l].expert_bytes;
        widest = b > widest ? b : widest;
    }
    placement_free(&p);
    in.budget = fixed + all / 4 * 3;
    CHECK_OK(placement_make(&p, &in));
    CHECK_EQ_U64(p.stage_bytes, 2 * widest);
    CHECK(plan_consistent(&p));
    placement_free(&p);
    in.budget = fixed + widest;
    CHECK_OK(placement_make(&p, &in));
    CHECK_EQ_U64(p.stage_bytes, 0);
    CHECK(plan_consistent(&p));
    placement_free(&p);
    model_fixture_close(&f);
}
