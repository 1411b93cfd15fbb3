/*
 * Slab policies (src/slab_policy.h): static never changes, LRU evicts the
 * least recently used, decayed LFU admits only a hotter expert, the bus
 * budget bounds copies per token, one copy in flight per layer.
 */
#include "slab_policy.h"
#include "test.h"

enum { N_EXPERT = 8 };

static hydra_status make(slab_policy *sp, slab_policy_kind kind, double budget, int32_t slots)
{
    slab_policy_params p = slab_policy_default_params();
    p.kind = kind, p.bus_budget = budget;
    const int32_t n_slots[2] = {slots, 0}; /* layer 1: dense */
    return slab_policy_init(sp, &p, 2, N_EXPERT, n_slots, NULL);
}

/* Observes one token of k = 2 experts, then makes every admission. */
static int step(slab_policy *sp, int32_t a, int32_t b, int *copies)
{
    const int32_t e[2] = {a, b};
    int hits = slab_policy_observe(sp, 0, e, 2, 2);
    int32_t x, slot;
    while (slab_policy_next_admission(sp, 0, &x, &slot)) {
        slab_policy_commit(sp, 0, x, slot);
        ++*copies;
    }
    return hits;
}

TEST(slab_policy_static_never_changes)
{
    slab_policy sp;
    CHECK_OK(make(&sp, SLAB_STATIC, 0, 2)); /* experts 0, 1 resident */
    int copies = 0;
    CHECK_EQ_INT(step(&sp, 0, 5, &copies), 1);
    CHECK_EQ_INT(step(&sp, 5, 6, &copies), 0);
    CHECK_EQ_INT(step(&sp, 1, 0, &copies), 2);
    CHECK_EQ_INT(copies, 0);
    int32_t e, s;
    CHECK(!slab_policy_next_admission(&sp, 1, &e, &s)); /* dense layer */
    slab_policy_free(&sp);
}

TEST(slab_policy_lru_evicts_least_recent)
{
    slab_policy sp;
    CHECK_OK(make(&sp, SLAB_LRU, 0, 3)); /* 0, 1, 2 */
    int copies = 0;
    CHECK_EQ_INT(step(&sp, 0, 1, &copies), 2);
    CHECK_EQ_INT(step(&sp, 0, 5, &copies), 1); /* 5 replaces 2 (never used) */
    CHECK_EQ_INT(sp.layer[0].slot_of[2], SLAB_NO_SLOT);
    CHECK(sp.layer[0].slot_of[5] != SLAB_NO_SLOT);
    CHECK_EQ_INT(step(&sp, 6, 5, &copies), 1); /* 6 replaces 1 (least recent) */
    CHECK_EQ_INT(sp.layer[0].slot_of[1], SLAB_NO_SLOT);
    CHECK_EQ_INT(copies, 2);
    slab_policy_free(&sp);
}

TEST(slab_policy_lfu_admits_only_hotter)
{
    slab_policy sp;
    CHECK_OK(make(&sp, SLAB_LFU, 0, 2)); /* 0, 1 */
    int copies = 0;
    for (int i = 0; i < 5; i++)
        step(&sp, 0, 1, &copies);
    CHECK_EQ_INT(step(&sp, 0, 7, &copies), 1); /* 7 once: colder than 1 */
    CHECK_EQ_INT(copies, 0);
    for (int i = 0; i < 12; i++)
        step(&sp, 0, 7, &copies); /* 7 heats up, 1 decays */
    CHECK_EQ_INT(copies, 1);
    CHECK(sp.layer[0].slot_of[7] != SLAB_NO_SLOT);
    CHECK_EQ_INT(sp.layer[0].slot_of[1], SLAB_NO_SLOT);
    CHECK_EQ_INT(step(&sp, 0, 7, &copies), 2);
    slab_policy_free(&sp);
}

/* A stream of misses: copies stay within budget x tokens (+ the credit cap). */
TEST(slab_policy_budget_bounds_copies)
{
    slab_policy sp;
    CHECK_OK(make(&sp, SLAB_LRU, 0.25, 3));
    int copies = 0;
    uint64_t state = 7;
    for (int t = 0; t < 1000; t++) {
        state = state * 6364136223846793005u + 1442695040888963407u;
        int32_t a = (int32_t)((state >> 33) % N_EXPERT), b = (a + 1 + (int32_t)((state >> 40) % (N_EXPERT - 1))) % N_EXPERT;
        step(&sp, a, b, &copies);
    }
    CHECK(copies <= 250 + (int)SLAB_MAX_CREDIT);
    CHECK(copies >= 200);
    slab_policy_free(&sp);
}

TEST(slab_policy_one_copy_in_flight)
{
    slab_policy sp;
    CHECK_OK(make(&sp, SLAB_LRU, 0, 2));
    const int32_t e[2] = {5, 6};
    slab_policy_observe(&sp, 0, e, 2, 2);
    int32_t x, slot, y, slot2;
    CHECK(slab_policy_next_admission(&sp, 0, &x, &slot));
    CHECK(!slab_policy_next_admission(&sp, 0, &y, &slot2)); /* x still copying */
    slab_policy_abort(&sp, 0);
    CHECK_EQ_INT(sp.layer[0].slot_of[x], SLAB_NO_SLOT);  /* an aborted copy changes nothing */
    CHECK(slab_policy_next_admission(&sp, 0, &y, &slot2));
    CHECK(y != x);                                        /* x was dropped as a candidate */
    slab_policy_commit(&sp, 0, y, slot2);
    CHECK_EQ_INT(sp.layer[0].slot_of[y], slot2);
    CHECK_EQ_INT(sp.layer[0].expert_in[slot2], y);
    slab_policy_free(&sp);
}

TEST(slab_policy_rejects_bad_parameters)
{
    slab_policy sp;
    slab_policy_params p = slab_policy_default_params();
    const int32_t slots[2] = {2, 0}, too_many[2] = {9, 0};
    const int32_t dup[N_EXPERT] = {1, 1, 2, 3, 4, 5, 6, 7};
    const int32_t *order[2] = {dup, NULL};
    CHECK_EQ_INT(slab_policy_init(&sp, &p, 2, N_EXPERT, too_many, NULL), HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(slab_policy_init(&sp, &p, 2, N_EXPERT, slots, order), HYDRA_ERR_INVALID_ARG);
    p.decay = 0;
    CHECK_EQ_INT(slab_policy_init(&sp, &p, 2, N_EXPERT, slots, NULL), HYDRA_ERR_INVALID_ARG);
    p = slab_policy_default_params();
    p.hysteresis = 0.5;
    CHECK_EQ_INT(slab_policy_init(&sp, &p, 2, N_EXPERT, slots, NULL), HYDRA_ERR_INVALID_ARG);
    slab_policy_kind k;
    CHECK(slab_policy_kind_parse("LFU", &k) && k == SLAB_LFU);
    CHECK(!slab_policy_kind_parse("fifo", &k));
}
