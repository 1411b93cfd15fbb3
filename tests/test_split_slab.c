/*
 * test_split_slab.c — the hybrid slab of a tensor split (split_slab.c)
 * without a GPU: each part's slots sized by its own budget (avail - need),
 * filled with the hottest experts it owns, every MoE (layer, expert)
 * computed exactly once (one slab, or the main part's CPU pass), dense
 * layers by nobody, and the order handed to each part's hybrid session.
 */
#include "test.h"
#include "util.h"

#include "error.h"
#include "split.h"

#include <stdlib.h>
#include <string.h>

enum { GIB = 1 << 30 };

/* Parts that compute (l, e): its slab holder, or the main part's CPU pass. */
static int computed_by(const split_slab *s, int l, int e)
{
    int n = 0;
    for (int i = 0; i < s->n_part; i++)
        n += split_slab_role_of(s, i, l, e) != SPLIT_SLAB_ELSEWHERE;
    return n;
}

/* Two parts of 4 experts each, 3 layers of which layer 1 is dense, 100
 * bytes an expert: part 0 has 450 bytes (2 slots a layer, 50 left),
 * part 1 (main) 350 (1 slot a layer, the 150 left one more in layer 0). */
TEST(split_slab_hand_counted)
{
    split_plan plan = {.mode = SPLIT_TENSOR, .n_part = 2};
    plan.part[0] = (split_part){.device = 0, .exp0 = 0, .exp1 = 4, .avail = 1000, .need = 550};
    plan.part[1] = (split_part){.device = 1, .exp0 = 4, .exp1 = 8, .avail = 1000, .need = 650, .head = true};
    const uint64_t bytes[3] = {100, 0, 100};
    const int32_t hot0[8] = {7, 0, 5, 1, 6, 2, 3, 4};
    const int32_t *order[3] = {hot0, NULL, NULL};
    const split_slab_input in = {.plan = &plan, .n_layer = 3, .n_expert = 8, .expert_bytes = bytes, .order = order,
                                 .fraction = -1};
    split_slab s;
    CHECK_OK(split_slab_make(&s, &in));
    CHECK_EQ_INT(s.main, 1);
    CHECK_EQ_INT(s.budget[0], 450);
    CHECK_EQ_INT(s.budget[1], 350);
    const int32_t slots[2][3] = {{2, 0, 2}, {2, 0, 1}};
    for (int i = 0; i < 2; i++)
        for (int l = 0; l < 3; l++)
            CHECK_EQ_INT(s.n_slots[i * 3 + l], slots[i][l]);
    /* layer 0 by heat: part 0 its 0 and 1, part 1 its 7 and 5; layer 2 ascending: 0, 1 and 4 */
    const int16_t holder0[8] = {0, 0, -1, -1, -1, 1, -1, 1}, holder2[8] = {0, 0, -1, -1, 1, -1, -1, -1};
    for (int e = 0; e < 8; e++) {
        CHECK_EQ_INT(s.holder[0 * 8 + e], holder0[e]);
        CHECK_EQ_INT(s.holder[2 * 8 + e], holder2[e]);
        CHECK_EQ_INT(computed_by(&s, 0, e), 1);
        CHECK_EQ_INT(computed_by(&s, 2, e), 1);
        CHECK_EQ_INT(computed_by(&s, 1, e), 0); /* dense layer: no expert runs */
    }
    CHECK_EQ_INT(split_slab_role_of(&s, 0, 0, 2), SPLIT_SLAB_ELSEWHERE);
    CHECK_EQ_INT(split_slab_role_of(&s, 1, 0, 2), SPLIT_SLAB_CPU);
    CHECK_EQ_INT(split_slab_role_of(&s, 1, 0, 7), SPLIT_SLAB_HERE);
    CHECK_EQ_INT(split_slab_role_of(&s, 0, 0, 7), SPLIT_SLAB_ELSEWHERE);
    CHECK_EQ_INT(split_slab_role_of(&s, 0, 2, 1), SPLIT_SLAB_HERE);
    int32_t ids[8];
    CHECK_EQ_INT(split_slab_order(&s, 1, 0, ids), 2);
    const int32_t want[8] = {5, 7, 0, 1, 2, 3, 4, 6};
    CHECK(memcmp(ids, want, sizeof want) == 0);
    split_slab_free(&s);
    CHECK(s.holder == NULL && s.n_slots == NULL);
}

/* 48 layers of 1 GiB (routed experts left out), 128 experts of 6 MiB per
 * layer, a 16 GiB budget per device, -ts 3,1 with the main GPU 1: every
 * expert computed once, holders inside their owner's range, each part's
 * slab within its own budget: part 0 (96 experts, 6.5 GiB left) 23 or 24
 * slots a layer, part 1 (32 experts, 12 GiB left) all of its own. */
TEST(split_slab_ts_3_1_budgets)
{
    enum { N_LAYER = 48, N_EXPERT = 128 };
    uint64_t lb[N_LAYER], bytes[N_LAYER];
    for (int l = 0; l < N_LAYER; l++) {
        lb[l] = GIB / 4;
        bytes[l] = 6ull << 20;
    }
    const split_model m = {.n_layer = N_LAYER, .layer_bytes = lb, .embed_bytes = GIB / 2, .head_bytes = GIB / 2,
                           .n_head_kv = 4, .n_ff = 6144, .ff_granule = 256, .n_expert = N_EXPERT};
    const uint64_t avail[2] = {16ull * GIB, 16ull * GIB};
    const float ratios[2] = {3, 1};
    const split_request r = {.mode = SPLIT_TENSOR, .n_dev = 2, .avail = avail, .ratios = ratios, .main_gpu = 1};
    split_plan plan;
    CHECK_OK(split_plan_make(&plan, &m, &r));
    const split_slab_input in = {.plan = &plan, .n_layer = N_LAYER, .n_expert = N_EXPERT, .expert_bytes = bytes,
                                 .fraction = -1};
    split_slab s;
    CHECK_OK(split_slab_make(&s, &in));
    int cpu = 0;
    for (int i = 0; i < s.n_part; i++) {
        const split_part *q = &plan.part[i];
        CHECK_EQ_INT(s.budget[i], q->avail - q->need);
        uint64_t used = 0;
        for (int l = 0; l < N_LAYER; l++) {
            used += (uint64_t)s.n_slots[i * N_LAYER + l] * bytes[l];
            CHECK(s.n_slots[i * N_LAYER + l] <= q->exp1 - q->exp0);
        }
        CHECK(used <= s.budget[i]);
        const bool all_owned = s.n_slots[i * N_LAYER] == q->exp1 - q->exp0;
        CHECK(all_owned || s.budget[i] - used < (uint64_t)N_LAYER * bytes[0]); /* no whole round left unused */
    }
    for (int l = 0; l < N_LAYER; l++)
        for (int e = 0; e < N_EXPERT; e++) {
            const int h = s.holder[l * N_EXPERT + e];
            CHECK_EQ_INT(computed_by(&s, l, e), 1);
            CHECK(h < 0 || (e >= plan.part[h].exp0 && e < plan.part[h].exp1));
            cpu += h < 0;
        }
    CHECK(cpu > 0);
    CHECK_EQ_INT(plan.part[0].exp1, 96);
    /* 6.5 GiB = 23 rounds of 48 x 6 MiB and 32 MiB: 5 more slots, layers 0-4 */
    CHECK_EQ_INT(s.n_slots[0], 24);
    CHECK_EQ_INT(s.n_slots[4], 24);
    CHECK_EQ_INT(s.n_slots[5], 23);
    CHECK_EQ_INT(s.n_slots[N_LAYER], 32);
    CHECK_EQ_INT(cpu, N_LAYER * (96 - 23) - 5);
    split_slab_free(&s);
}

/* Budgets at the extremes: nothing left (all on the main part's CPU) and
 * room for everything (every expert in its owner's slab, no CPU pass);
 * then a fraction instead of a budget. */
TEST(split_slab_empty_and_full)
{
    split_plan plan = {.mode = SPLIT_TENSOR, .n_part = 2};
    plan.part[0] = (split_part){.device = 0, .exp0 = 0, .exp1 = 3, .avail = 500, .need = 600, .head = true};
    plan.part[1] = (split_part){.device = 1, .exp0 = 3, .exp1 = 6, .avail = 500, .need = 500};
    const uint64_t bytes[2] = {10, 10};
    split_slab_input in = {.plan = &plan, .n_layer = 2, .n_expert = 6, .expert_bytes = bytes, .fraction = -1};
    split_slab s;
    CHECK_OK(split_slab_make(&s, &in));
    CHECK_EQ_INT(s.budget[0], 0);
    for (int l = 0; l < 2; l++)
        for (int e = 0; e < 6; e++) {
            CHECK_EQ_INT(split_slab_role_of(&s, 0, l, e), SPLIT_SLAB_CPU);
            CHECK_EQ_INT(split_slab_role_of(&s, 1, l, e), SPLIT_SLAB_ELSEWHERE);
        }
    split_slab_free(&s);
    plan.part[0].need = plan.part[1].need = 0;
    CHECK_OK(split_slab_make(&s, &in));
    for (int l = 0; l < 2; l++) {
        CHECK_EQ_INT(s.n_slots[l], 3);
        CHECK_EQ_INT(s.n_slots[2 + l], 3);
        for (int e = 0; e < 6; e++) {
            CHECK_EQ_INT(s.holder[l * 6 + e], e / 3);
            CHECK_EQ_INT(computed_by(&s, l, e), 1);
        }
    }
    split_slab_free(&s);
    in.fraction = 0.5; /* by fraction (no budget): 2 of each part's 3 (1.5 rounds up) */
    CHECK_OK(split_slab_make(&s, &in));
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 2; i++)
            CHECK_EQ_INT(s.n_slots[i * 2 + l], 2);
    CHECK_EQ_INT(s.holder[2], -1);
    CHECK_EQ_INT(s.holder[4], 1);
    CHECK_EQ_INT(s.holder[5], -1);
    CHECK_EQ_INT(split_slab_role_of(&s, 0, 0, 5), SPLIT_SLAB_CPU); /* part 0 is the main one */
    split_slab_free(&s);
}

TEST(split_slab_rejects_bad_input)
{
    split_plan plan = {.mode = SPLIT_LAYER, .n_part = 1};
    plan.part[0] = (split_part){.exp0 = 0, .exp1 = 4, .avail = 100, .head = true};
    const uint64_t bytes[1] = {10};
    const int32_t twice[4] = {0, 1, 1, 3};
    const int32_t *order[1] = {twice};
    split_slab_input in = {.plan = &plan, .n_layer = 1, .n_expert = 4, .expert_bytes = bytes, .fraction = -1};
    split_slab s;
    CHECK_EQ_INT(split_slab_make(&s, &in), HYDRA_ERR_INVALID_ARG);
    CHECK(strstr(hydra_last_error(), "not a tensor split") != NULL);
    plan.mode = SPLIT_TENSOR;
    in.order = order;
    CHECK_EQ_INT(split_slab_make(&s, &in), HYDRA_ERR_INVALID_ARG);
    CHECK(strstr(hydra_last_error(), "layer 0's expert order") != NULL);
    CHECK(s.holder == NULL && s.n_slots == NULL);
}

/* Admissions and evictions of a part (split_slab_hold): one MoE layer,
 * part 0 (experts 0-3, 150 bytes: slot for expert 0) admits 3 and
 * evicts 0, part 1 (main, 4-7, 350 bytes: 4, 5, 6) evicts 4; each change moves exactly one
 * expert between a slab and the main part's CPU pass, every expert still
 * computed once; a part cannot take another's expert, nor a dense layer's. */
TEST(split_slab_hold_moves_one_computer)
{
    split_plan plan = {.mode = SPLIT_TENSOR, .n_part = 2};
    plan.part[0] = (split_part){.device = 0, .exp0 = 0, .exp1 = 4, .avail = 1000, .need = 850};
    plan.part[1] = (split_part){.device = 1, .exp0 = 4, .exp1 = 8, .avail = 1000, .need = 650, .head = true};
    const uint64_t bytes[2] = {100, 0};
    const split_slab_input in = {.plan = &plan, .n_layer = 2, .n_expert = 8, .expert_bytes = bytes, .fraction = -1};
    split_slab s;
    CHECK_OK(split_slab_make(&s, &in));
    CHECK_EQ_INT(s.exp0[1], 4);
    CHECK_EQ_INT(s.exp1[1], 8);
    CHECK_EQ_INT(split_slab_role_of(&s, 1, 0, 3), SPLIT_SLAB_CPU);
    split_slab_hold(&s, 0, 0, 3, true);
    CHECK_EQ_INT(split_slab_role_of(&s, 0, 0, 3), SPLIT_SLAB_HERE);
    CHECK_EQ_INT(split_slab_role_of(&s, 1, 0, 3), SPLIT_SLAB_ELSEWHERE);
    split_slab_hold(&s, 0, 0, 0, false);
    CHECK_EQ_INT(split_slab_role_of(&s, 0, 0, 0), SPLIT_SLAB_ELSEWHERE);
    CHECK_EQ_INT(split_slab_role_of(&s, 1, 0, 0), SPLIT_SLAB_CPU);
    CHECK_EQ_INT(split_slab_role_of(&s, 1, 0, 4), SPLIT_SLAB_HERE);
    split_slab_hold(&s, 1, 0, 4, false);
    CHECK_EQ_INT(split_slab_role_of(&s, 1, 0, 4), SPLIT_SLAB_CPU);
    split_slab_hold(&s, 0, 0, 5, true); /* not part 0's: unchanged */
    CHECK_EQ_INT(split_slab_role_of(&s, 0, 0, 5), SPLIT_SLAB_ELSEWHERE);
    split_slab_hold(&s, 0, 1, 1, true); /* dense layer: nobody */
    CHECK_EQ_INT(split_slab_role_of(&s, 0, 1, 1), SPLIT_SLAB_ELSEWHERE);
    for (int e = 0; e < 8; e++) {
        CHECK_EQ_INT(computed_by(&s, 0, e), 1);
        CHECK_EQ_INT(computed_by(&s, 1, e), 0);
    }
    split_slab_free(&s);
}
