/*
 * test_hybrid_pass.c — the hybrid decode's CPU pass over one token's missed
 * experts (src/hybrid_pass.c) gives the same bits as moe_experts, the
 * engine's expert computation, over the same routes: every subset size of
 * one token's experts, random experts, weights and input rows, on 1 and 3
 * threads, on the K-quant, Q4_0, Q8_0 and F32 tiny files; it declines
 * (touching nothing) what it does not cover: several tokens, a repeated
 * expert, expert biases with the clamped SwiGLU (gpt-oss).  The CPU order
 * for pinning lists every allowed CPU once, and a pinned pool's workers
 * run where the order says.
 */
#include "hybrid_pass.h"
#include "hydra.h"
#include "moe.h"
#include "rng.h"
#include "test.h"
#include "threads.h"
#include "util.h"
#include "weights.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pass_case {
    hydra_model *m;
    model_weights w;
    moe_scratch s;
    hybrid_pass p;
    act_set x;
    float *row, *want, *got;
    int layer; /* the first MoE layer */
} pass_case;

static void case_free(pass_case *c)
{
    free(c->row);
    free(c->want);
    free(c->got);
    act_free(&c->x);
    hybrid_pass_free(&c->p);
    moe_scratch_free(&c->s);
    if (c->m != NULL) {
        weights_free(&c->w);
        hydra_model_close(c->m);
    }
}

static hydra_status case_open(pass_case *c, const char *name)
{
    memset(c, 0, sizeof *c);
    hydra_status st = util_open_shared_model(name, &c->m);
    if (st != HYDRA_OK)
        return st;
    if ((st = weights_bind(&c->w, c->m)) != HYDRA_OK) {
        hydra_model_close(c->m);
        c->m = NULL;
        return st;
    }
    const int64_t embd = c->w.hp.n_embd;
    c->row = malloc(sizeof(float) * (size_t)embd * 2);
    c->want = malloc(sizeof(float) * (size_t)embd);
    c->got = malloc(sizeof(float) * (size_t)embd);
    if (c->row == NULL || c->want == NULL || c->got == NULL)
        return HYDRA_ERR_NOMEM;
    c->layer = 0;
    while (c->layer < (int)c->w.hp.n_layer && !c->w.layer[c->layer].moe)
        c->layer++;
    st = moe_scratch_init(&c->s, &c->w, 2);
    if (st == HYDRA_OK)
        st = hybrid_pass_init(&c->p, &c->w);
    if (st == HYDRA_OK)
        st = act_init(&c->x, &c->w, embd, 2);
    return st;
}

/* n distinct random experts of token 0 with random weights, in random order. */
static void random_routes(uint64_t rng[4], int n_expert, int n, moe_route *r)
{
    for (int i = 0; i < n; i++) {
        bool taken;
        do {
            r[i].expert = (int32_t)(xoshiro_next(rng) % (uint64_t)n_expert);
            taken = false;
            for (int j = 0; j < i; j++)
                taken |= r[j].expert == r[i].expert;
        } while (taken);
        r[i].token = 0;
        r[i].weight = (float)(0.1 + uniform01(rng));
    }
}

static void random_rows(uint64_t rng[4], float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * uniform01(rng) - 1.0);
}

static void same_bits_as_moe_experts(test_ctx *t_, const char *name)
{
    REQUIRE_SHARED();
    pass_case c;
    hydra_status st = case_open(&c, name);
    if (st != HYDRA_OK) {
        case_free(&c);
        FAIL("%s: %s", name, hydra_last_error());
    }
    const int64_t embd = c.w.hp.n_embd;
    const int k = (int)c.w.hp.n_expert_used, n_expert = (int)c.w.hp.n_expert;
    const layer_weights *lw = &c.w.layer[c.layer];
    uint64_t rng[4];
    rng_seed(rng, 0x5eed);
    static const int threads[2] = {1, 3};
    for (int ti = 0; ti < 2; ti++) {
        thread_pool *pool = NULL;
        CHECK_OK(pool_create(&pool, threads[ti]));
        for (int trial = 0; trial < 8; trial++) {
            moe_route routes[64];
            const int n = 1 + trial % k;
            random_routes(rng, n_expert, n, routes);
            random_rows(rng, c.row, embd);
            random_rows(rng, c.want, embd);
            memcpy(c.got, c.want, sizeof(float) * (size_t)embd);
            act_bind(&c.x, c.row, 1);
            moe_experts(pool, &c.s, lw, &c.x, routes, n, c.want, (size_t)embd);
            act_bind(&c.x, c.row, 1);
            if (!hybrid_pass_token(&c.p, pool, lw, c.w.arch->act, &c.x, routes, n, c.got)) {
                pool_destroy(pool);
                case_free(&c);
                FAIL("%s: the pass declined %d routes of one token", name, n);
            }
            if (memcmp(c.got, c.want, sizeof(float) * (size_t)embd) != 0) {
                pool_destroy(pool);
                case_free(&c);
                FAIL("%s, %d threads, %d experts: not the bits of moe_experts", name, threads[ti], n);
            }
        }
        pool_destroy(pool);
    }
    case_free(&c);
}

TEST(hybrid_pass_same_bits_q4_k_m)
{
    same_bits_as_moe_experts(TEST_CTX, "qwen3moe-kq-q4_k_m");
}

TEST(hybrid_pass_same_bits_mixtral_q4_0)
{
    same_bits_as_moe_experts(TEST_CTX, "mixtral-tiny-q4_0");
}

TEST(hybrid_pass_same_bits_qwen2moe_q8_0)
{
    same_bits_as_moe_experts(TEST_CTX, "qwen2moe-tiny-q8_0");
}

TEST(hybrid_pass_same_bits_f32)
{
    same_bits_as_moe_experts(TEST_CTX, "qwen3moe-tiny-f32");
}

TEST(hybrid_pass_declines_what_it_does_not_cover)
{
    REQUIRE_SHARED();
    pass_case c;
    static const char *const names[2] = {"qwen3moe-kq-q4_k_m", "gptoss-tiny-mxfp4"};
    for (int f = 0; f < 2; f++) {
        hydra_status st = case_open(&c, names[f]);
        if (st != HYDRA_OK) {
            case_free(&c);
            FAIL("%s: %s", names[f], hydra_last_error());
        }
        const int64_t embd = c.w.hp.n_embd;
        const layer_weights *lw = &c.w.layer[c.layer];
        memset(c.row, 0, sizeof(float) * (size_t)embd * 2);
        memset(c.got, 0, sizeof(float) * (size_t)embd);
        act_bind(&c.x, c.row, 2);
        moe_route two_tokens[2] = {{0, 0, 1.0f}, {1, 1, 1.0f}}, repeated[2] = {{0, 1, 1.0f}, {0, 1, 0.5f}};
        const moe_route one[1] = {{0, 0, 1.0f}};
        if (f == 0) {
            CHECK(!hybrid_pass_token(&c.p, NULL, lw, c.w.arch->act, &c.x, two_tokens, 2, c.got));
            CHECK(!hybrid_pass_token(&c.p, NULL, lw, c.w.arch->act, &c.x, repeated, 2, c.got));
            CHECK(!hybrid_pass_token(&c.p, NULL, lw, c.w.arch->act, &c.x, one, 0, c.got));
        } else { /* expert biases, clamped SwiGLU */
            CHECK(!hybrid_pass_token(&c.p, NULL, lw, c.w.arch->act, &c.x, one, 1, c.got));
        }
        for (int64_t i = 0; i < embd; i++)
            CHECK(c.got[i] == 0.0f);
        case_free(&c);
    }
}

TEST(hybrid_cpus_lists_every_allowed_cpu_once)
{
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    hybrid_cpus *c = malloc(sizeof *c);
    CHECK(c != NULL);
    hybrid_cpus_find(c);
    CHECK_EQ_INT(c->n, CPU_COUNT(&set));
    for (int i = 0; i < c->n; i++) {
        CHECK(CPU_ISSET(c->cpu[i], &set));
        for (int j = 0; j < i; j++)
            CHECK(c->cpu[j] != c->cpu[i]);
    }
    free(c);
}

typedef struct where_job {
    int cpu[4]; /* the one CPU each thread may run on, or -1 */
} where_job;

static void where_task(void *ctx, int idx, int n_threads)
{
    (void)n_threads;
    where_job *j = ctx;
    cpu_set_t set;
    j->cpu[idx] = -1;
    if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0 || CPU_COUNT(&set) != 1)
        return;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            j->cpu[idx] = c;
}

TEST(hybrid_pin_pool_puts_workers_where_the_order_says)
{
    hybrid_cpus *c = malloc(sizeof *c);
    CHECK(c != NULL);
    hybrid_cpus_find(c);
    if (c->n < 2) {
        free(c);
        SKIP("one CPU: nothing to pin");
    }
    thread_pool *pool = NULL;
    CHECK_OK(pool_create(&pool, 3));
    hybrid_pin_pool(pool, c);
    where_job j;
    pool_run(pool, where_task, &j);
    pool_destroy(pool);
    for (int idx = 1; idx < 3; idx++)
        CHECK_EQ_INT(j.cpu[idx], c->cpu[(idx + 1) % c->n]);
    free(c);
}
