/*
 * The split state (src/hybrid.h) under any pin set: random rankings and
 * random slot counts per layer, re-pinning between decode steps, against
 * the un-split forward pass of the same model (logits within the model's
 * bars in ../shared/ref/tolerances.json, the same greedy tokens), and
 * repeatable to the bit.  Runs the engine's internal forward() so that
 * the pin set can be anything, not only what the session parameters say.
 */
#include "forward.h"
#include "hybrid.h"
#include "quant.h"
#include "refcheck.h"
#include "test.h"
#include "util.h"
#include "weights.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_CTX = 256, N_BATCH = 256, N_SEEDS = 3 };

static const char *const models[] = {"qwen3moe-tiny-q8_0", "mixtral-tiny-q4_0", "qwen2moe-tiny-q8_0",
                                     "deepseek2-tiny-q8_0", "gptoss-tiny-mxfp4", "qwen3moe-kq-q4_k_m",
                                     "qwen3moe-kq-iq2_xxs"};

typedef struct engine {
    hydra_model *m;
    model_weights w;
    thread_pool *pool;
    kv_cache kv;
    fwd_scratch f;
    ref_case r;
} engine;

static void engine_close(engine *e)
{
    fwd_free(&e->f);
    kv_free(&e->kv);
    pool_destroy(e->pool);
    weights_free(&e->w);
    hydra_model_close(e->m);
}

static hydra_status engine_open(engine *e, const char *name)
{
    memset(e, 0, sizeof *e);
    if (!ref_load(name, &e->r))
        return HYDRA_ERR_IO;
    hydra_status st = util_open_shared_model(name, &e->m);
    if (st == HYDRA_OK)
        st = weights_bind(&e->w, e->m);
    if (st == HYDRA_OK)
        st = pool_create(&e->pool, 2);
    if (st == HYDRA_OK)
        st = kv_init(&e->kv, &e->w, QT_F32, N_CTX, N_BATCH);
    if (st == HYDRA_OK)
        st = fwd_init(&e->f, &e->w, N_BATCH, N_CTX, 2);
    return st;
}

static uint32_t next_rand(uint32_t *seed)
{
    *seed = *seed * 1664525u + 1013904223u;
    return *seed >> 8;
}

/* A random ranking of every MoE layer and a random slot count (0 ..
 * n_expert), into order (n_layer x n_expert ids) and n_slots. */
static void random_pins(const model_weights *w, uint32_t seed, int32_t *ids, const int32_t **order, int32_t *n_slots)
{
    const int32_t n = (int32_t)w->hp.n_expert;
    for (uint32_t l = 0; l < w->hp.n_layer; l++) {
        int32_t *o = ids + (size_t)l * (size_t)n;
        for (int32_t i = 0; i < n; i++)
            o[i] = i;
        for (int32_t i = n - 1; i > 0; i--) {
            const int32_t j = (int32_t)(next_rand(&seed) % (uint32_t)(i + 1)), t = o[i];
            o[i] = o[j], o[j] = t;
        }
        order[l] = o;
        n_slots[l] = (int32_t)(next_rand(&seed) % (uint32_t)(n + 1));
    }
}

/* The prompt (every row into rows), then REF_GREEDY greedy steps.  With
 * repin_seed nonzero, before each decode step one random expert of every
 * MoE layer moves into a random slot (the dynamic slab's admission). */
static void run(engine *e, hybrid_state *h, uint32_t repin_seed, float *rows, int32_t *greedy, float *last)
{
    const int n_vocab = e->r.n_vocab;
    e->kv.n_written = 0;
    e->f.hybrid = h;
    forward(&e->w, e->pool, &e->kv, &e->f, 0, e->r.prompt, REF_PROMPT, true, rows);
    memcpy(last, rows + (size_t)(REF_PROMPT - 1) * n_vocab, sizeof(float) * n_vocab);
    for (int i = 0; i < REF_GREEDY; i++) {
        greedy[i] = ref_argmax(last, n_vocab);
        for (uint32_t l = 0; h != NULL && repin_seed != 0 && l < h->n_layer; l++)
            if (h->layer[l].n_slots > 0)
                hybrid_admit(h, l, (int32_t)(next_rand(&repin_seed) % (uint32_t)h->layer[l].n_expert),
                             (int32_t)(next_rand(&repin_seed) % (uint32_t)h->layer[l].n_slots));
        forward(&e->w, e->pool, &e->kv, &e->f, REF_PROMPT + i, &greedy[i], 1, false, last);
    }
    e->f.hybrid = NULL;
}

typedef struct outputs {
    float *rows, *last;
    int32_t greedy[REF_GREEDY];
} outputs;

static bool outputs_alloc(outputs *o, int n_vocab)
{
    o->rows = malloc(sizeof(float) * REF_PROMPT * (size_t)n_vocab);
    o->last = malloc(sizeof(float) * (size_t)n_vocab);
    return o->rows && o->last;
}

static void outputs_free(outputs *o)
{
    free(o->rows);
    free(o->last);
}

/* Each model with N_SEEDS random pin sets (repin: also re-pinning between
 * decode steps) against its un-split pass. */
static void check_random_pins(test_ctx *t_, bool repin)
{
    REQUIRE_SHARED();
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        engine e;
        outputs base = {0}, split = {0};
        hybrid_state h = {0};
        CHECK_OK(engine_open(&e, models[mi]));
        const size_t n_ids = (size_t)e.w.hp.n_layer * e.w.hp.n_expert;
        int32_t *ids = malloc(sizeof(int32_t) * n_ids + 1), *n_slots = malloc(sizeof(int32_t) * e.w.hp.n_layer);
        const int32_t **order = malloc(sizeof *order * e.w.hp.n_layer);
        bool ok = ids && n_slots && order && outputs_alloc(&base, e.r.n_vocab) && outputs_alloc(&split, e.r.n_vocab);
        if (ok)
            run(&e, NULL, 0, base.rows, base.greedy, base.last);
        for (uint32_t seed = 1; ok && seed <= N_SEEDS; seed++) {
            random_pins(&e.w, seed * 7919u, ids, order, n_slots);
            const hybrid_config cfg = {.mode = HYBRID_CPU_SPLIT, .order = order, .n_slots = n_slots,
                                       .max_rows = N_BATCH};
            if (hybrid_init(&h, &e.w, &cfg) != HYDRA_OK) {
                ok = false;
                break;
            }
            run(&e, &h, repin ? seed : 0, split.rows, split.greedy, split.last);
            const ref_score sc = ref_score_rows(base.rows, split.rows, REF_PROMPT, e.r.n_vocab);
            const bool same = memcmp(base.greedy, split.greedy, sizeof base.greedy) == 0;
            printf("  %s seed %u: %" PRIu64 " re-pins, KL vs un-split %.3g, top-1 %.3f, greedy %s\n", models[mi],
                   seed, h.stats.repins, sc.kl, sc.top1, same ? "same" : "DIFFERS");
            ok = ref_passes(&e.r, sc) && same && (!repin || h.stats.repins > 0);
            hybrid_free(&h);
        }
        free(ids);
        free(n_slots);
        free(order);
        outputs_free(&base);
        outputs_free(&split);
        engine_close(&e);
        if (!ok)
            FAIL("%s: a random pin set differs from the un-split pass (or could not run: %s)", models[mi],
                 hydra_last_error());
    }
}

TEST(hybrid_random_pin_sets_match_unsplit)
{
    check_random_pins(t_, false);
}

TEST(hybrid_repinning_between_decode_steps_matches_unsplit)
{
    check_random_pins(t_, true);
}

TEST(hybrid_split_is_bit_identical_across_runs)
{
    REQUIRE_SHARED();
    engine e;
    CHECK_OK(engine_open(&e, "qwen3moe-kq-q4_k_m"));
    const size_t n_ids = (size_t)e.w.hp.n_layer * e.w.hp.n_expert;
    int32_t *ids = malloc(sizeof(int32_t) * n_ids + 1), *n_slots = malloc(sizeof(int32_t) * e.w.hp.n_layer);
    const int32_t **order = malloc(sizeof *order * e.w.hp.n_layer);
    outputs first = {0}, again = {0};
    bool ok = ids && n_slots && order && outputs_alloc(&first, e.r.n_vocab) && outputs_alloc(&again, e.r.n_vocab);
    bool same = ok;
    random_pins(&e.w, 4242u, ids, order, n_slots);
    const hybrid_config cfg = {.mode = HYBRID_CPU_SPLIT, .order = order, .n_slots = n_slots, .max_rows = N_BATCH};
    for (int i = 0; i < 3 && ok; i++) {
        hybrid_state h;
        ok = hybrid_init(&h, &e.w, &cfg) == HYDRA_OK; /* a fresh state each run: same pins, same bits */
        if (ok)
            run(&e, &h, 0, i == 0 ? first.rows : again.rows, i == 0 ? first.greedy : again.greedy,
                i == 0 ? first.last : again.last);
        hybrid_free(&h);
        if (ok && i > 0)
            same = same && memcmp(first.rows, again.rows, sizeof(float) * REF_PROMPT * (size_t)e.r.n_vocab) == 0 &&
                   memcmp(first.last, again.last, sizeof(float) * (size_t)e.r.n_vocab) == 0;
    }
    free(ids);
    free(n_slots);
    free(order);
    outputs_free(&first);
    outputs_free(&again);
    engine_close(&e);
    CHECK(ok);
    CHECK(same);
}
