/*
 * The CUDA backend end to end, against llama.cpp's logits (../shared/ref):
 * for every shared model whose architecture and types the GPU runs, the
 * 200-token prompt in one batch (F32 and F16 cache), token by token and in
 * batches of 7 must reach the reference's KL and top-1 bars, and the
 * greedy continuation its first min_greedy_match tokens.  Then: greedy
 * output identical across 3 sessions; logits bit-identical with and
 * without CUDA graphs over 64 greedy tokens (the graph captured once and
 * replayed); 20 open/close cycles give the device memory back.  Models the
 * GPU cannot run yet are skipped, naming what is missing.
 * Skips without a CUDA device.
 */
#include "gpu_test.h"
#include "hydra.h"
#include "quant.h"
#include "refcheck.h"
#include "test.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static hydra_status cuda_session(hydra_model *m, hydra_kv_type kv, bool graphs, hydra_session **s)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = 512;
    p.kv_type = kv;
    p.backend = HYDRA_BACKEND_CUDA;
    p.cuda_graphs = graphs;
    return hydra_session_create(s, m, &p);
}

static hydra_status eval_chunked(hydra_session *s, const ref_case *r, int chunk, float *rows)
{
    for (int i = 0; i < REF_PROMPT; i += chunk) {
        const int n = REF_PROMPT - i < chunk ? REF_PROMPT - i : chunk;
        hydra_status st = hydra_session_eval(s, r->prompt + i, (size_t)n, rows + (size_t)i * r->n_vocab);
        if (st != HYDRA_OK)
            return st;
    }
    return HYDRA_OK;
}

/* Greedy tokens after the prompt; out receives n ids (and logits, n rows,
 * when not NULL). */
static hydra_status greedy(hydra_session *s, const ref_case *r, int n, int32_t *out, float *logits)
{
    hydra_session_clear(s);
    hydra_status st = hydra_session_eval(s, r->prompt, REF_PROMPT, NULL);
    for (int i = 0; i < n && st == HYDRA_OK; i++) {
        const float *l = hydra_session_logits(s);
        if (logits != NULL)
            memcpy(logits + (size_t)i * r->n_vocab, l, sizeof(float) * r->n_vocab);
        out[i] = ref_argmax(l, r->n_vocab);
        st = hydra_session_decode(s, out[i]);
    }
    return st;
}

static int matched(const ref_case *r, const int32_t *ids)
{
    int k = 0;
    while (k < REF_GREEDY && ids[k] == r->greedy[k])
        k++;
    return k;
}

/* A case and its reference logits. */
typedef struct ref_model {
    ref_case c;
    float *logits;
} ref_model;

static ref_score compare(const ref_model *r, const float *rows)
{
    return ref_score_rows(r->logits, rows, REF_PROMPT, r->c.n_vocab);
}

typedef struct run_scores {
    ref_score batch32, batch16, tbt, by7;
    int greedy;
} run_scores;

static hydra_status score_model(hydra_model *m, const ref_model *rm, float *rows, run_scores *sc)
{
    const ref_case *r = &rm->c;
    hydra_session *s = NULL;
    hydra_status st = cuda_session(m, HYDRA_KV_F32, true, &s);
    if (st == HYDRA_OK && (st = hydra_session_eval(s, r->prompt, REF_PROMPT, rows)) == HYDRA_OK)
        sc->batch32 = compare(rm, rows);
    hydra_session_free(s);
    s = NULL;
    if (st == HYDRA_OK)
        st = cuda_session(m, HYDRA_KV_F16, true, &s);
    if (st == HYDRA_OK && (st = eval_chunked(s, r, REF_PROMPT, rows)) == HYDRA_OK)
        sc->batch16 = compare(rm, rows);
    hydra_session_clear(s);
    if (st == HYDRA_OK && (st = eval_chunked(s, r, 1, rows)) == HYDRA_OK)
        sc->tbt = compare(rm, rows);
    hydra_session_clear(s);
    if (st == HYDRA_OK && (st = eval_chunked(s, r, 7, rows)) == HYDRA_OK)
        sc->by7 = compare(rm, rows);
    int32_t ids[REF_GREEDY];
    if (st == HYDRA_OK && (st = greedy(s, r, REF_GREEDY, ids, NULL)) == HYDRA_OK)
        sc->greedy = matched(r, ids);
    hydra_session_free(s);
    return st;
}

static void run_reference(test_ctx *t_, const char *name)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    ref_model rm;
    char why[600];
    if (!ref_load_with_logits(name, &rm.c, &rm.logits, why, sizeof why))
        FAIL("%s", why);
    const ref_case r = rm.c;
    hydra_model *m = NULL;
    hydra_status st = util_open_shared_model(name, &m);
    float *rows = malloc(sizeof(float) * REF_PROMPT * (size_t)r.n_vocab);
    run_scores sc = {0};
    if (st == HYDRA_OK && rows != NULL)
        st = score_model(m, &rm, rows, &sc);
    snprintf(why, sizeof why, "%s: %s: %s", name, hydra_strerror(st), hydra_last_error());
    hydra_model_close(m);
    free(rows);
    free(rm.logits);
    if (st == HYDRA_ERR_UNSUPPORTED)
        SKIP("%s", why);
    if (st != HYDRA_OK)
        FAIL("%s", why);
    printf("  cuda %-20s batch(f32 kv) KL %.2e top1 %.3f | batch KL %.2e top1 %.3f | tokenwise KL %.2e top1 %.3f | "
           "by 7 KL %.2e top1 %.3f | greedy %d/%d (bars: KL %.2g, top1 %.3f)\n", name, sc.batch32.kl, sc.batch32.top1,
           sc.batch16.kl, sc.batch16.top1, sc.tbt.kl, sc.tbt.top1, sc.by7.kl, sc.by7.top1, sc.greedy, REF_GREEDY,
           r.max_kl_mean, r.min_top1);
    const ref_score all[4] = {sc.batch32, sc.batch16, sc.tbt, sc.by7};
    static const char *const what[4] = {"one batch, F32 cache", "one batch, F16 cache", "token by token",
                                        "batches of 7"};
    for (int i = 0; i < 4; i++)
        if (!ref_passes(&r, all[i]))
            FAIL("%s %s: KL %.3g (max %.3g), top-1 %.3f (min %.3f)", name, what[i], all[i].kl, r.max_kl_mean,
                 all[i].top1, r.min_top1);
    if (sc.greedy < r.min_greedy_match)
        FAIL("%s: greedy continuation matches %d tokens, need %d", name, sc.greedy, r.min_greedy_match);
}

#define CUDA_REFERENCE_TEST(id, file)                                         \
    TEST(cuda_ref_##id)                                                       \
    {                                                                         \
        run_reference(TEST_CTX, file);                                        \
    }

CUDA_REFERENCE_TEST(qwen3moe_tiny_f32, "qwen3moe-tiny-f32")
CUDA_REFERENCE_TEST(qwen3moe_tiny_q8_0, "qwen3moe-tiny-q8_0")
CUDA_REFERENCE_TEST(qwen3moe_kq_q4_k_m, "qwen3moe-kq-q4_k_m")
CUDA_REFERENCE_TEST(qwen3moe_kq_iq4_xs, "qwen3moe-kq-iq4_xs")
CUDA_REFERENCE_TEST(qwen3moe_kq_iq2_xxs, "qwen3moe-kq-iq2_xxs")
CUDA_REFERENCE_TEST(qwen3moe_kq_iq3_xxs, "qwen3moe-kq-iq3_xxs")
CUDA_REFERENCE_TEST(mixtral_tiny_f16, "mixtral-tiny-f16")
CUDA_REFERENCE_TEST(mixtral_tiny_q4_0, "mixtral-tiny-q4_0")
CUDA_REFERENCE_TEST(qwen2moe_tiny_f32, "qwen2moe-tiny-f32")
CUDA_REFERENCE_TEST(qwen2moe_tiny_q8_0, "qwen2moe-tiny-q8_0")
CUDA_REFERENCE_TEST(deepseek2_tiny_f32, "deepseek2-tiny-f32")
CUDA_REFERENCE_TEST(deepseek2_tiny_q8_0, "deepseek2-tiny-q8_0")
CUDA_REFERENCE_TEST(gptoss_tiny_f32, "gptoss-tiny-f32")
CUDA_REFERENCE_TEST(gptoss_tiny_mxfp4, "gptoss-tiny-mxfp4")

enum { GRAPH_TOKENS = 64 };

/* Graphs on and off: same ids, bit-identical logits at every step; greedy
 * ids identical across 3 sessions. */
TEST(cuda_graphs_bit_identical_and_deterministic)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    static const char *const name = "qwen3moe-kq-q4_k_m";
    ref_case r;
    if (!ref_load(name, &r))
        FAIL("cannot read the reference of %s", name);
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model(name, &m));
    const size_t n_logits = (size_t)GRAPH_TOKENS * r.n_vocab;
    float *with = malloc(sizeof(float) * n_logits), *without = malloc(sizeof(float) * n_logits);
    int32_t ids[3][GRAPH_TOKENS], ids_plain[GRAPH_TOKENS];
    CHECK(with && without);
    for (int run = 0; run < 3; run++) {
        hydra_session *s = NULL;
        CHECK_OK(cuda_session(m, HYDRA_KV_F16, true, &s));
        CHECK_OK(greedy(s, &r, GRAPH_TOKENS, ids[run], run == 0 ? with : NULL));
        hydra_session_free(s);
    }
    hydra_session *s = NULL;
    CHECK_OK(cuda_session(m, HYDRA_KV_F16, false, &s));
    CHECK_OK(greedy(s, &r, GRAPH_TOKENS, ids_plain, without));
    hydra_session_free(s);
    hydra_model_close(m);
    for (int run = 1; run < 3; run++)
        for (int i = 0; i < GRAPH_TOKENS; i++)
            if (ids[run][i] != ids[0][i])
                FAIL("run %d differs from run 0 at greedy token %d: %d vs %d", run, i, ids[run][i], ids[0][i]);
    for (int i = 0; i < GRAPH_TOKENS; i++)
        if (ids_plain[i] != ids[0][i])
            FAIL("without graphs, greedy token %d is %d; with graphs %d", i, ids_plain[i], ids[0][i]);
    if (memcmp(with, without, sizeof(float) * n_logits) != 0)
        FAIL("logits with and without CUDA graphs are not bit-identical");
    free(with);
    free(without);
}

/* A shared model opened and its weights bound, for gpu_session tests. */
static hydra_status open_bound(const char *name, hydra_model **m, model_weights *w)
{
    hydra_status st = util_open_shared_model(name, m);
    return st == HYDRA_OK ? weights_bind(w, *m) : st;
}

/* n greedy decode steps (one token each, positions 0 .. n - 1, graphs
 * replayed) of a session on the device; logits n x n_vocab, the session's
 * counters in *st. */
static hydra_status decode_steps(const model_weights *w, bool route_words, int n, float *logits, gpu_stats *st)
{
    gpu_session *g = NULL;
    const gpu_options o = {.n_ctx = 256, .n_batch = 64, .kv_type = QT_F16, .graphs = true,
                           .no_route_words = !route_words};
    hydra_status s = gpu_session_create(&g, w, &o);
    int32_t tok = 1;
    for (int i = 0; i < n && s == HYDRA_OK; i++) {
        float *row = logits + (size_t)i * w->hp.n_vocab;
        s = gpu_forward(g, i, &tok, 1, false, row);
        tok = ref_argmax(row, (int)w->hp.n_vocab);
    }
    if (g != NULL)
        gpu_session_stats(g, st);
    gpu_session_free(g);
    return s;
}

/* Graph capture is counted: one decode structure is captured once. */
TEST(cuda_decode_graph_captured_once)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    enum { STEPS = 40 };
    hydra_model *m = NULL;
    model_weights w;
    CHECK_OK(open_bound("qwen3moe-tiny-q8_0", &m, &w));
    float *logits = malloc(sizeof(float) * STEPS * w.hp.n_vocab);
    CHECK(logits != NULL);
    gpu_stats st = {0};
    const hydra_status s_run = decode_steps(&w, true, STEPS, logits, &st);
    weights_free(&w);
    hydra_model_close(m);
    free(logits);
    CHECK_OK(s_run);
    CHECK_EQ_INT(st.steps, STEPS);
    CHECK_EQ_INT(st.captures, 1);
    CHECK_EQ_INT(st.replays, STEPS - 1);
}

/* The experts' launch that takes its routes by the layer's route words
 * (kernels.h's gk_route_word) and norms x itself gives the logits of the
 * one that waits for the router launch's completion, bit for bit, and the
 * words did carry the routes (every layer of this Qwen3-MoE file). */
TEST(cuda_route_words_give_the_bits_of_the_completion_wait)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    model_weights w;
    CHECK_OK(open_bound("qwen3moe-kq-q4_k_m", &m, &w));
    const size_t n_logits = (size_t)GRAPH_TOKENS * w.hp.n_vocab;
    float *by_word = malloc(sizeof(float) * n_logits), *by_wait = malloc(sizeof(float) * n_logits);
    CHECK(by_word && by_wait);
    gpu_stats sw = {0}, sp = {0};
    CHECK_OK(decode_steps(&w, true, GRAPH_TOKENS, by_word, &sw));
    CHECK_OK(decode_steps(&w, false, GRAPH_TOKENS, by_wait, &sp));
    const uint32_t n_layer = w.hp.n_layer, n_vocab = w.hp.n_vocab;
    weights_free(&w);
    hydra_model_close(m);
    CHECK_EQ_INT(sp.route_words, 0);
    if (sw.route_words != n_layer)
        FAIL("%llu layers took their routes by word in the captured step, expected all %u",
             (unsigned long long)sw.route_words, n_layer);
    for (int i = 0; i < GRAPH_TOKENS; i++)
        if (memcmp(by_word + (size_t)i * n_vocab, by_wait + (size_t)i * n_vocab, sizeof(float) * n_vocab) != 0)
            FAIL("step %d: logits with route words differ from those with the completion wait", i);
    free(by_word);
    free(by_wait);
}

/* Every open/close cycle gives back what it took: hydra's accounting
 * returns to zero and the device's free memory to its level after a first
 * cycle (which also loads the kernels). */
TEST(cuda_open_close_20_times_returns_memory)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    uint64_t start_free = 0, total = 0;
    for (int cycle = 0; cycle <= 20; cycle++) {
        hydra_model *m = NULL;
        hydra_session *s = NULL;
        CHECK_OK(util_open_shared_model("qwen3moe-kq-q4_k_m", &m));
        CHECK_OK(cuda_session(m, HYDRA_KV_F16, true, &s));
        const int32_t prompt[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        CHECK_OK(hydra_session_eval(s, prompt, 12, NULL));
        CHECK_OK(hydra_session_decode(s, 5));
        hydra_session_free(s);
        hydra_model_close(m);
        CHECK_NO_GPU_MEMORY_HELD(cycle);
        uint64_t free_now = 0;
        CHECK_OK(gpu_mem_device(&free_now, &total));
        if (cycle == 0)
            start_free = free_now;
        else if (free_now < start_free)
            FAIL("cycle %d: device free memory %llu, after the first cycle %llu", cycle,
                 (unsigned long long)free_now, (unsigned long long)start_free);
    }
    printf("  cuda: 20 open/close cycles, device free memory %.1f MiB each time\n", (double)start_free / (1 << 20));
}
