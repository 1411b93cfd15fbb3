/*
 * Hybrid decode on the CUDA backend (issue 10, src/gpu/gpu_hybrid*.c): the
 * slab holds a share of each MoE layer's experts, the CPU computes the
 * misses.  Against llama.cpp's logits (../shared/ref) and against the
 * all-GPU session, at 0%, 50% and 100% resident: the prompt token by token
 * (the split) and in one batch (prefill), within the reference's bars.
 * Then: bit-identical logits across 3 sessions (static slab); a full slab
 * moves no bytes host->device per decoded token and its decode graph is
 * captured once; an engaged run shows hits, misses, hand-off samples and
 * no replay against a slot being rewritten; open/close gives the memory
 * back.  Through the public API (hydra_session_create with
 * HYDRA_HYBRID_CUDA): decode logits vs the all-GPU session, the counters
 * of hydra_session_hybrid_stats, slots from a pin file and from a
 * vram_budget placement, hydra-run --hybrid cuda --stats.  Staged prefill
 * (the stacks copied through the device staging buffers) against the
 * all-GPU session, replayed bit-identically.  Skips without a
 * CUDA device, except the refusal of HYDRA_HYBRID_CUDA by a build or
 * machine without one.
 */
#include "gpu_test.h"
#include "hydra.h"
#include "placement.h"
#include "quant.h"
#include "refcheck.h"
#include "test.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct hy_case {
    hydra_model *m;
    model_weights w;
    ref_case r;
    float *ref;
} hy_case;

static bool open_case(const char *name, hy_case *c, char *why, size_t len)
{
    memset(c, 0, sizeof *c);
    if (!ref_load_with_logits(name, &c->r, &c->ref, why, len))
        return false;
    if (util_open_shared_model(name, &c->m) != HYDRA_OK || weights_bind(&c->w, c->m) != HYDRA_OK) {
        snprintf(why, len, "%s: %s", name, hydra_last_error());
        return false;
    }
    return true;
}

/* Skips without a CUDA device or ../shared, then opens NAME's case into
 * C; the test fails when it cannot. */
#define REQUIRE_CASE(name, c)                                                                                  \
    do {                                                                                                       \
        REQUIRE_GPU();                                                                                         \
        REQUIRE_SHARED();                                                                                      \
        char why_[600];                                                                                        \
        if (!open_case(name, c, why_, sizeof why_))                                                            \
            FAIL("%s", why_);                                                                                  \
    } while (0)

static void close_case(hy_case *c)
{
    if (c->m != NULL) {
        weights_free(&c->w);
        hydra_model_close(c->m);
    }
    free(c->ref);
}

static gpu_options options(bool hybrid, double fraction, uint64_t admit)
{
    return (gpu_options){.n_ctx = 512, .n_batch = 256, .kv_type = QT_F16, .graphs = true, .hybrid = hybrid,
                         .slab_fraction = fraction, .cpu_threads = 2, .admit_bytes_per_token = admit,
                         .stream_prefill = true};
}

/* The prompt's logits, one row per position: token by token (decode) or
 * in one batch. */
static hydra_status prompt_rows(gpu_session *g, const ref_case *r, bool batch, float *rows)
{
    if (batch)
        return gpu_forward(g, 0, r->prompt, REF_PROMPT, true, rows);
    for (int i = 0; i < REF_PROMPT; i++) {
        hydra_status st = gpu_forward(g, i, &r->prompt[i], 1, false, rows + (size_t)i * r->n_vocab);
        if (st != HYDRA_OK)
            return st;
    }
    return HYDRA_OK;
}

static hydra_status session_rows(hy_case *c, const gpu_options *o, bool batch, float *rows)
{
    gpu_session *g = NULL;
    hydra_status st = gpu_session_create(&g, &c->w, o);
    if (st == HYDRA_OK)
        st = prompt_rows(g, &c->r, batch, rows);
    gpu_session_free(g);
    return st;
}

static void hybrid_vs_reference(test_ctx *t_, const char *name)
{
    hy_case c;
    REQUIRE_CASE(name, &c);
    const size_t n = (size_t)REF_PROMPT * c.r.n_vocab;
    float *all_gpu = malloc(sizeof(float) * n), *rows = malloc(sizeof(float) * n);
    CHECK(all_gpu != NULL && rows != NULL);
    static const double fractions[3] = {0.0, 0.5, 1.0};
    for (int batch = 0; batch < 2; batch++) {
        const gpu_options plain = options(false, 1.0, 0);
        hydra_status st = session_rows(&c, &plain, batch, all_gpu);
        if (st == HYDRA_ERR_UNSUPPORTED) {
            close_case(&c);
            SKIP("%s: %s", name, hydra_last_error());
        }
        CHECK_OK(st);
        for (int f = 0; f < 3; f++) {
            const gpu_options o = options(true, fractions[f], 0);
            CHECK_OK(session_rows(&c, &o, batch, rows));
            const ref_score vs_ref = ref_score_rows(c.ref, rows, REF_PROMPT, c.r.n_vocab);
            const ref_score vs_gpu = ref_score_rows(all_gpu, rows, REF_PROMPT, c.r.n_vocab);
            printf("  hybrid %-20s %s %3.0f%% resident: vs reference KL %.2e top1 %.3f | vs all-GPU KL %.2e top1 "
                   "%.3f\n", name, batch ? "batch" : "tokens", 100 * fractions[f], vs_ref.kl, vs_ref.top1, vs_gpu.kl,
                   vs_gpu.top1);
            if (!ref_passes(&c.r, vs_ref) || !ref_passes(&c.r, vs_gpu))
                FAIL("%s, %.0f%% resident, %s: KL %.3g / %.3g (max %.3g), top-1 %.3f / %.3f (min %.3f)", name,
                     100 * fractions[f], batch ? "one batch" : "token by token", vs_ref.kl, vs_gpu.kl,
                     c.r.max_kl_mean, vs_ref.top1, vs_gpu.top1, c.r.min_top1);
        }
    }
    free(all_gpu);
    free(rows);
    close_case(&c);
}

#define HYBRID_REFERENCE_TEST(id, file)                                                                        \
    TEST(cuda_hybrid_ref_##id)                                                                                 \
    {                                                                                                          \
        hybrid_vs_reference(TEST_CTX, file);                                                                   \
    }

HYBRID_REFERENCE_TEST(qwen3moe_tiny_f32, "qwen3moe-tiny-f32")
HYBRID_REFERENCE_TEST(qwen3moe_kq_q4_k_m, "qwen3moe-kq-q4_k_m")
HYBRID_REFERENCE_TEST(mixtral_tiny_q4_0, "mixtral-tiny-q4_0")
HYBRID_REFERENCE_TEST(qwen2moe_tiny_q8_0, "qwen2moe-tiny-q8_0")

enum { DECODE_TOKENS = 48 };

/* Decodes DECODE_TOKENS greedy tokens after the prompt (in one batch). */
static hydra_status greedy_decode(gpu_session *g, const ref_case *r, int32_t *ids, float *logits)
{
    float *row = malloc(sizeof(float) * (size_t)r->n_vocab);
    if (row == NULL)
        return HYDRA_ERR_NOMEM;
    hydra_status st = gpu_forward(g, 0, r->prompt, REF_PROMPT, false, row);
    for (int i = 0; i < DECODE_TOKENS && st == HYDRA_OK; i++) {
        ids[i] = ref_argmax(row, r->n_vocab);
        st = gpu_forward(g, REF_PROMPT + i, &ids[i], 1, false, row);
        if (logits != NULL)
            memcpy(logits + (size_t)i * r->n_vocab, row, sizeof(float) * (size_t)r->n_vocab);
    }
    free(row);
    return st;
}

TEST(cuda_hybrid_bit_identical_across_3_runs)
{
    hy_case c;
    REQUIRE_CASE("qwen3moe-kq-q4_k_m", &c);
    const size_t n = (size_t)DECODE_TOKENS * c.r.n_vocab;
    float *logits[3];
    int32_t ids[3][DECODE_TOKENS];
    const gpu_options o = options(true, 0.5, 0);
    for (int run = 0; run < 3; run++) {
        logits[run] = malloc(sizeof(float) * n);
        CHECK(logits[run] != NULL);
        gpu_session *g = NULL;
        CHECK_OK(gpu_session_create(&g, &c.w, &o));
        CHECK_OK(greedy_decode(g, &c.r, ids[run], logits[run]));
        gpu_session_free(g);
    }
    for (int run = 1; run < 3; run++) {
        if (memcmp(ids[run], ids[0], sizeof ids[0]) != 0)
            FAIL("run %d: greedy ids differ from run 0", run);
        if (memcmp(logits[run], logits[0], sizeof(float) * n) != 0)
            FAIL("run %d: logits are not bit-identical to run 0's", run);
    }
    for (int run = 0; run < 3; run++)
        free(logits[run]);
    close_case(&c);
}

/* The flag hand-off (a spinning CPU thread on mapped flags) computes the
 * same thing as the host nodes: bit-identical logits. */
TEST(cuda_hybrid_flag_handoff_matches_host_nodes)
{
    hy_case c;
    REQUIRE_CASE("qwen3moe-kq-q4_k_m", &c);
    const size_t n = (size_t)DECODE_TOKENS * c.r.n_vocab;
    float *logits[2] = {malloc(sizeof(float) * n), malloc(sizeof(float) * n)};
    CHECK(logits[0] != NULL && logits[1] != NULL);
    int32_t ids[2][DECODE_TOKENS];
    for (int mode = 0; mode < 2; mode++) {
        gpu_options o = options(true, 0.5, 0);
        o.handoff_flags = mode == 1;
        gpu_session *g = NULL;
        CHECK_OK(gpu_session_create(&g, &c.w, &o));
        CHECK_OK(greedy_decode(g, &c.r, ids[mode], logits[mode]));
        gpu_session_free(g);
    }
    if (memcmp(logits[0], logits[1], sizeof(float) * n) != 0)
        FAIL("logits with the flag hand-off differ from the host nodes'");
    free(logits[0]);
    free(logits[1]);
    close_case(&c);
}

/* A session through the prompt and the token `next` at the position after
 * it, the token's logits into row; stall: its first attempt runs with the
 * CPU side stalled and must fail naming the hand-off (else why says what
 * happened), then it runs again once the CPU side answers.  The session is
 * freed in every case, so a failure leaves no device memory to the tests
 * after it. */
static hydra_status prompt_then_token(hy_case *c, const gpu_options *o, int32_t next, bool stall, float *row,
                                      char *why, size_t cap)
{
    gpu_session *g = NULL;
    hydra_status st = gpu_session_create(&g, &c->w, o);
    if (st == HYDRA_OK)
        st = gpu_forward(g, 0, c->r.prompt, REF_PROMPT, false, row);
    if (st == HYDRA_OK && stall) {
        gpu_hybrid_stall_cpu_side(g, true);
        const hydra_status stalled = gpu_forward(g, REF_PROMPT, &next, 1, false, row);
        if (stalled == HYDRA_OK)
            snprintf(why, cap, "a step with a stalled CPU side succeeded");
        else if (strstr(hydra_last_error(), "did not answer") == NULL)
            snprintf(why, cap, "the stalled step's message does not name the hand-off: %s", hydra_last_error());
        gpu_hybrid_stall_cpu_side(g, false);
    }
    if (st == HYDRA_OK && why[0] == '\0')
        st = gpu_forward(g, REF_PROMPT, &next, 1, false, row);
    gpu_session_free(g);
    return st;
}

/* A CPU side that stops answering fails the step with a message naming
 * the hand-off, and does not poison the session: once it answers again,
 * the same token at the same position decodes to the logits of a session
 * that never stalled, bit for bit (hybrid decode is deterministic:
 * cuda_hybrid_bit_identical_across_3_runs). */
TEST(cuda_hybrid_stalled_cpu_side_fails_the_step_then_recovers)
{
    hy_case c;
    REQUIRE_CASE("qwen3moe-kq-q4_k_m", &c);
    gpu_options o = options(true, 0.5, 0);
    o.handoff_flags = true;
    o.handoff_bound_ns = 50000000; /* 50 ms a layer: the stalled step stays short */
    const int32_t next = c.r.prompt[REF_PROMPT - 1]; /* any token: both sessions decode the same */
    float *want = malloc(sizeof(float) * c.r.n_vocab), *got = malloc(sizeof(float) * c.r.n_vocab);
    char why[256] = "";
    hydra_status st = want != NULL && got != NULL ? HYDRA_OK : HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK)
        st = prompt_then_token(&c, &o, next, false, want, why, sizeof why);
    if (st == HYDRA_OK)
        st = prompt_then_token(&c, &o, next, true, got, why, sizeof why);
    if (st != HYDRA_OK)
        snprintf(why, sizeof why, "%s: %s", hydra_strerror(st), hydra_last_error());
    else if (why[0] == '\0' && memcmp(want, got, sizeof(float) * c.r.n_vocab) != 0)
        snprintf(why, sizeof why, "after the CPU side answered again, the token's logits differ from a session "
                 "that never stalled");
    free(want);
    free(got);
    close_case(&c);
    if (why[0] != '\0')
        FAIL("%s", why);
}

static void decode_counters(test_ctx *t_, double fraction, uint64_t admit, gpu_stats *st, gpu_hybrid_counters *hc)
{
    hy_case c;
    REQUIRE_CASE("qwen3moe-kq-q4_k_m", &c);
    const gpu_options o = options(true, fraction, admit);
    gpu_session *g = NULL;
    int32_t ids[DECODE_TOKENS];
    CHECK_OK(gpu_session_create(&g, &c.w, &o));
    CHECK_OK(greedy_decode(g, &c.r, ids, NULL));
    gpu_session_stats(g, st);
    gpu_hybrid_counters_get(g, hc);
    gpu_session_free(g);
    close_case(&c);
    printf("  hybrid %.0f%%: %llu decode tokens, hits %llu of %llu, H2D %llu bytes, admissions %llu, hand-off p50 "
           "%.1f us p99 %.1f us, CPU %.1f us per layer-step, exposed %.1f us, unsafe replays %llu, captures %llu "
           "replays %llu, registered %d\n", 100 * fraction, (unsigned long long)hc->decode_tokens,
           (unsigned long long)hc->hits, (unsigned long long)hc->lookups, (unsigned long long)hc->h2d_bytes,
           (unsigned long long)hc->admissions, hc->handoff_p50_ns / 1e3, hc->handoff_p99_ns / 1e3,
           hc->layer_steps ? hc->cpu_ns / 1e3 / (double)hc->layer_steps : 0.0,
           hc->layer_steps ? hc->exposed_ns / 1e3 / (double)hc->layer_steps : 0.0,
           (unsigned long long)hc->unsafe_replays, (unsigned long long)st->captures,
           (unsigned long long)st->replays, (int)hc->registered);
}

TEST(cuda_hybrid_full_slab_moves_no_bytes_and_replays)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    gpu_stats st;
    gpu_hybrid_counters hc;
    decode_counters(TEST_CTX, 1.0, 64 << 20, &st, &hc);
    CHECK(hc.engaged);
    CHECK_EQ_INT(hc.decode_tokens, DECODE_TOKENS);
    CHECK(hc.lookups > 0);
    CHECK_EQ_INT(hc.hits, hc.lookups);
    CHECK_EQ_INT(hc.h2d_bytes, 0);
    CHECK_EQ_INT(hc.admissions, 0);
    CHECK_EQ_INT(st.captures, 2); /* the prompt's structure and decode's */
    CHECK_EQ_INT(st.replays, DECODE_TOKENS - 1);
}

TEST(cuda_hybrid_engaged_counters)
{
    REQUIRE_GPU();
    REQUIRE_SHARED();
    gpu_stats st;
    gpu_hybrid_counters hc;
    decode_counters(TEST_CTX, 0.25, 64 << 20, &st, &hc);
    CHECK(hc.engaged);
    CHECK(hc.lookups > 0);
    CHECK(hc.hits < hc.lookups);
    CHECK(hc.cpu_ns > 0);
    CHECK(hc.handoff_p50_ns > 0);
    CHECK_EQ_INT(hc.unsafe_replays, 0);
    CHECK_EQ_INT(st.captures, 2);
}

/* Staged prefill (the stacks of each MoE layer copied into a double-buffered
 * device staging area a layer ahead): the prompt in one batch, forced to
 * stream, against the all-GPU session and the reference at 0% and 50%
 * resident; the same session's second prompt (its captured graph replayed
 * over the same staging buffers) gives the same bits; the counters show
 * both steps staged and no stale staging reference. */
static void staged_vs_all_gpu(test_ctx *t_, const char *name)
{
    hy_case c;
    REQUIRE_CASE(name, &c);
    const size_t n = (size_t)REF_PROMPT * c.r.n_vocab;
    float *all_gpu = malloc(sizeof(float) * n), *rows[2] = {malloc(sizeof(float) * n), malloc(sizeof(float) * n)};
    CHECK(all_gpu != NULL && rows[0] != NULL && rows[1] != NULL);
    const gpu_options plain = options(false, 1.0, 0);
    CHECK_OK(session_rows(&c, &plain, true, all_gpu));
    static const double fractions[2] = {0.0, 0.5};
    for (int f = 0; f < 2; f++) {
        gpu_options o = options(true, fractions[f], 0);
        o.stream_min_tokens = 9;
        gpu_session *g = NULL;
        CHECK_OK(gpu_session_create(&g, &c.w, &o));
        for (int run = 0; run < 2; run++)
            CHECK_OK(prompt_rows(g, &c.r, true, rows[run]));
        gpu_hybrid_counters hc;
        gpu_hybrid_counters_get(g, &hc);
        gpu_session_free(g);
        const ref_score vs_ref = ref_score_rows(c.ref, rows[0], REF_PROMPT, c.r.n_vocab);
        const ref_score vs_gpu = ref_score_rows(all_gpu, rows[0], REF_PROMPT, c.r.n_vocab);
        const bool same = memcmp(rows[0], all_gpu, sizeof(float) * n) == 0;
        printf("  staged prefill %-20s %3.0f%% resident: vs reference KL %.2e top1 %.3f | vs all-GPU KL %.2e top1 "
               "%.3f (%s) | %llu staged steps, %llu bytes staged, crossover %d (set), staging %.1f GB/s\n", name,
               100 * fractions[f], vs_ref.kl, vs_ref.top1, vs_gpu.kl, vs_gpu.top1,
               same ? "bit-identical" : "not bit-identical", (unsigned long long)hc.staged_steps,
               (unsigned long long)hc.stage_bytes, hc.stream_min_tokens, hc.stage_gbps);
        if (!ref_passes(&c.r, vs_ref) || !ref_passes(&c.r, vs_gpu))
            FAIL("%s, %.0f%% resident, staged: KL %.3g / %.3g (max %.3g), top-1 %.3f / %.3f (min %.3f)", name,
                 100 * fractions[f], vs_ref.kl, vs_gpu.kl, c.r.max_kl_mean, vs_ref.top1, vs_gpu.top1,
                 c.r.min_top1);
        if (memcmp(rows[0], rows[1], sizeof(float) * n) != 0)
            FAIL("%s, %.0f%% resident: the replayed staged prefill differs from the first", name, 100 * fractions[f]);
        CHECK_EQ_INT(hc.staged_steps, 2);
        CHECK(hc.stage_bytes > 0);
        CHECK_EQ_INT(hc.stale_stage_refs, 0);
        CHECK_EQ_INT(hc.stream_min_tokens, 9);
    }
    free(all_gpu);
    free(rows[0]);
    free(rows[1]);
    close_case(&c);
}

TEST(cuda_hybrid_staged_prefill_q4_k_m)
{
    staged_vs_all_gpu(TEST_CTX, "qwen3moe-kq-q4_k_m");
}

TEST(cuda_hybrid_staged_prefill_mixtral_q4_0)
{
    staged_vs_all_gpu(TEST_CTX, "mixtral-tiny-q4_0");
}

TEST(cuda_hybrid_open_close_returns_memory)
{
    hy_case c;
    REQUIRE_CASE("qwen3moe-kq-q4_k_m", &c);
    for (int cycle = 0; cycle < 5; cycle++) {
        const gpu_options o = options(true, 0.5, 64 << 20);
        gpu_session *g = NULL;
        CHECK_OK(gpu_session_create(&g, &c.w, &o));
        float *row = malloc(sizeof(float) * (size_t)c.r.n_vocab);
        CHECK(row != NULL);
        CHECK_OK(gpu_forward(g, 0, c.r.prompt, 16, false, row));
        CHECK_OK(gpu_forward(g, 16, c.r.prompt, 1, false, row));
        free(row);
        gpu_session_free(g);
        CHECK_NO_GPU_MEMORY_HELD(cycle);
    }
    close_case(&c);
}

/* --- through the public API */

static const char *const API_MODEL = "qwen3moe-kq-q4_k_m";

static hydra_session_params cuda_params(hydra_hybrid_mode hybrid)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = 512;
    p.n_batch = 256;
    p.n_threads = 2;
    p.backend = HYDRA_BACKEND_CUDA;
    p.hybrid = hybrid;
    return p;
}

TEST(hybrid_cuda_session_refused_without_a_device)
{
    if (hydra_cuda_available())
        SKIP("a CUDA device is present (cuda_hybrid_session_* run instead)");
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    if (util_open_shared_model(API_MODEL, &m) != HYDRA_OK)
        FAIL("%s: %s", API_MODEL, hydra_last_error());
    for (int b = 0; b < 2; b++) {
        hydra_session_params p = cuda_params(HYDRA_HYBRID_CUDA);
        p.backend = b ? HYDRA_BACKEND_CUDA : HYDRA_BACKEND_CPU;
        hydra_session *s = NULL;
        CHECK_EQ_INT(hydra_session_create(&s, m, &p), HYDRA_ERR_UNSUPPORTED);
        CHECK(s == NULL);
        const char *msg = hydra_last_error();
        if (strstr(msg, "hybrid mode cuda") == NULL || strstr(msg, "CUDA device") == NULL)
            FAIL("backend %d: unclear refusal: %s", b, msg);
    }
    hydra_model_close(m);
    char path[512], args[1200];
    util_shared_model_path(API_MODEL, path, sizeof path);
    snprintf(args, sizeof args, "-c 128 -n 4 --hybrid cuda --stats -p Hello -m %s", path);
    tool_run r;
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    const bool ok = r.status != 0 && r.err != NULL && strstr(r.err, "hybrid mode cuda") != NULL;
    if (!ok)
        printf("%s", r.err ? r.err : "");
    tool_run_free(&r);
    CHECK(ok);
}

/* The prompt in one batch, then DECODE_TOKENS tokens one by one: ids[i]
 * when given (feed), else the greedy choice, written to ids.  rows: the
 * logits of every decode step. */
static hydra_status api_decode(hydra_model *m, const hydra_session_params *p, const ref_case *r, bool feed,
                               int32_t *ids, float *rows, hydra_hybrid_stats *hs)
{
    hydra_session *s = NULL;
    hydra_status st = hydra_session_create(&s, m, p);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, r->prompt, REF_PROMPT, NULL);
    for (int i = 0; i < DECODE_TOKENS && st == HYDRA_OK; i++) {
        if (!feed)
            ids[i] = ref_argmax(hydra_session_logits(s), r->n_vocab);
        st = hydra_session_decode(s, ids[i]);
        if (st == HYDRA_OK)
            memcpy(rows + (size_t)i * r->n_vocab, hydra_session_logits(s), sizeof(float) * (size_t)r->n_vocab);
    }
    if (st == HYDRA_OK && hs != NULL)
        st = hydra_session_hybrid_stats(s, hs);
    hydra_session_free(s);
    return st;
}

typedef struct api_case {
    hydra_model *m;
    ref_case r;
    int32_t ids[DECODE_TOKENS];
    float *all_gpu, *rows; /* DECODE_TOKENS rows each */
} api_case;

static bool api_open(api_case *a, char *why, size_t len)
{
    memset(a, 0, sizeof *a);
    if (!ref_load(API_MODEL, &a->r) || util_open_shared_model(API_MODEL, &a->m) != HYDRA_OK) {
        snprintf(why, len, "%s: %s", API_MODEL, hydra_last_error());
        return false;
    }
    const size_t n = (size_t)DECODE_TOKENS * a->r.n_vocab;
    a->all_gpu = malloc(sizeof(float) * n);
    a->rows = malloc(sizeof(float) * n);
    const hydra_session_params plain = cuda_params(HYDRA_HYBRID_OFF);
    if (a->all_gpu == NULL || a->rows == NULL ||
        api_decode(a->m, &plain, &a->r, false, a->ids, a->all_gpu, NULL) != HYDRA_OK) {
        snprintf(why, len, "all-GPU session: %s", hydra_last_error());
        return false;
    }
    return true;
}

/* Skips without a CUDA device or ../shared, then opens the API case into
 * A; the test fails when it cannot. */
#define REQUIRE_API_CASE(a)                                                                                    \
    do {                                                                                                       \
        if (!hydra_cuda_available())                                                                           \
            SKIP("no CUDA device");                                                                            \
        REQUIRE_SHARED();                                                                                      \
        char why_[600];                                                                                        \
        if (!api_open(a, why_, sizeof why_))                                                                   \
            FAIL("%s", why_);                                                                                  \
    } while (0)

static void api_close(api_case *a)
{
    free(a->all_gpu);
    free(a->rows);
    hydra_model_close(a->m);
}

/* A hybrid session fed the all-GPU run's tokens, its logits within the
 * reference's bars of the all-GPU session's. */
static bool hybrid_matches(api_case *a, const hydra_session_params *p, hydra_hybrid_stats *hs, const char *what)
{
    if (api_decode(a->m, p, &a->r, true, a->ids, a->rows, hs) != HYDRA_OK) {
        printf("  %s: %s\n", what, hydra_last_error());
        return false;
    }
    const ref_score sc = ref_score_rows(a->all_gpu, a->rows, DECODE_TOKENS, a->r.n_vocab);
    printf("  hybrid session (%s): vs all-GPU KL %.2e top1 %.3f; %llu of %llu experts resident, decode hits %llu of "
           "%llu, H2D %.0f bytes/token, %llu re-pins\n", what, sc.kl, sc.top1, (unsigned long long)hs->n_resident,
           (unsigned long long)hs->n_experts, (unsigned long long)hs->hits, (unsigned long long)hs->lookups,
           hs->h2d_bytes_per_token, (unsigned long long)hs->repins);
    if (!ref_passes(&a->r, sc)) {
        printf("  %s: KL %.3g (max %.3g), top-1 %.3f (min %.3f)\n", what, sc.kl, a->r.max_kl_mean, sc.top1,
               a->r.min_top1);
        return false;
    }
    return true;
}

TEST(cuda_hybrid_session_api_vs_all_gpu)
{
    api_case a;
    REQUIRE_API_CASE(&a);
    hydra_session_params p = cuda_params(HYDRA_HYBRID_CPU_SPLIT);
    hydra_session *s = NULL;
    CHECK_EQ_INT(hydra_session_create(&s, a.m, &p), HYDRA_ERR_INVALID_ARG); /* cpu_split runs on the CPU */
    p = cuda_params(HYDRA_HYBRID_CUDA);
    p.backend = HYDRA_BACKEND_CPU;
    CHECK_EQ_INT(hydra_session_create(&s, a.m, &p), HYDRA_ERR_INVALID_ARG); /* cuda needs the CUDA backend */
    p = cuda_params(HYDRA_HYBRID_CUDA);
    p.resident_fraction = 0.25;
    hydra_hybrid_stats hs;
    CHECK(hybrid_matches(&a, &p, &hs, "25% resident"));
    CHECK_EQ_INT(hs.mode, HYDRA_HYBRID_CUDA);
    CHECK_EQ_INT(hs.decode_tokens, DECODE_TOKENS);
    CHECK(hs.n_slots > 0 && hs.n_slots < hs.n_experts);
    CHECK(hs.lookups > 0 && hs.hits > 0 && hs.hits < hs.lookups);
    CHECK(hs.prefill_lookups > 0 && hs.prefill_hits < hs.prefill_lookups); /* the streamed prompt's counts */
    CHECK(hs.miss_ns > 0);
    api_close(&a);
}

/* The layer counters, the reset, and hydra-run --hybrid cuda --stats. */
TEST(cuda_hybrid_session_layer_counters_and_cli)
{
    if (!hydra_cuda_available())
        SKIP("no CUDA device");
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    if (util_open_shared_model(API_MODEL, &m) != HYDRA_OK)
        FAIL("%s: %s", API_MODEL, hydra_last_error());
    hydra_session_params p = cuda_params(HYDRA_HYBRID_CUDA);
    hydra_session *s = NULL;
    CHECK_OK(hydra_session_create(&s, m, &p));
    static const int32_t prompt[4] = {1, 2, 3, 4};
    CHECK_OK(hydra_session_eval(s, prompt, 4, NULL));
    for (int i = 0; i < 8; i++)
        CHECK_OK(hydra_session_decode(s, prompt[i % 4]));
    hydra_hybrid_layer_stats ls;
    CHECK_OK(hydra_session_hybrid_layer_stats(s, 0, &ls));
    CHECK(ls.moe && ls.lookups > 0 && ls.n_handoff > 0 && ls.handoff_p50_ns > 0);
    hydra_session_hybrid_reset_stats(s);
    hydra_hybrid_stats hs;
    CHECK_OK(hydra_session_hybrid_stats(s, &hs));
    CHECK_EQ_INT(hs.lookups, 0);
    CHECK_EQ_INT(hs.decode_tokens, 0);
    hydra_session_free(s);
    hydra_model_close(m);
    char path[512], args[1200];
    util_shared_model_path(API_MODEL, path, sizeof path);
    snprintf(args, sizeof args, "-c 128 -t 2 -n 6 -s 1 --hybrid cuda --resident 0.5 --stats -p Hello -m %s", path);
    tool_run r;
    CHECK(util_run_tool(NULL, "hydra-run", args, NULL, &r));
    const bool ok = r.status == 0 && r.err != NULL && strstr(r.err, "of 16 experts resident (8 slots") != NULL &&
                    strstr(r.err, "decode hit rate") != NULL && strstr(r.err, "layer 1:") != NULL;
    if (!ok)
        printf("%s%s", r.out ? r.out : "", r.err ? r.err : "");
    tool_run_free(&r);
    CHECK(ok);
}

/* A pin file sets each layer's slots (its pins) and fills them; a
 * vram_budget sets them by placement_make's plan. */
TEST(cuda_hybrid_session_pin_file_and_budget)
{
    api_case a;
    REQUIRE_API_CASE(&a);
    const char *pins = util_scratch_path("cuda-hybrid-pins.txt");
    const char *text = "0 3 40\n0 1 30\n1 5 50\n1 6 50\n1 2 7\n";
    CHECK(util_write_file(pins, text, strlen(text)) == 0);
    hydra_session_params p = cuda_params(HYDRA_HYBRID_CUDA);
    p.pin_file = pins;
    hydra_hybrid_stats hs;
    CHECK(hybrid_matches(&a, &p, &hs, "pin file"));
    CHECK_EQ_INT(hs.n_slots, 5); /* 2 in layer 0, 3 in layer 1 */
    /* at most one admission per layer in flight, its victim already out */
    CHECK(hs.n_resident <= 5 && hs.n_resident + hs.n_moe_layers >= 5);

    /* the budget: the fixed part plus half the expert bytes */
    model_weights w;
    CHECK_OK(weights_bind(&w, a.m));
    placement_input in = {.w = &w, .budget = 1ull << 40, .n_ctx = p.n_ctx, .n_batch = p.n_batch, .kv_type = QT_F16};
    placement_plan plan = {0};
    CHECK_OK(placement_make(&plan, &in));
    in.budget = plan.nonexpert_bytes + plan.shared_bytes + plan.kv_bytes + plan.scratch_bytes + plan.expert_bytes / 2;
    placement_free(&plan);
    CHECK_OK(placement_make(&plan, &in));
    const int32_t planned = plan.n_slots_total;
    placement_free(&plan);
    weights_free(&w);
    p = cuda_params(HYDRA_HYBRID_CUDA);
    p.vram_budget = in.budget;
    CHECK(hybrid_matches(&a, &p, &hs, "vram budget"));
    CHECK_EQ_INT(hs.n_slots, planned);
    CHECK(planned > 0 && (uint64_t)planned < hs.n_experts);
    api_close(&a);
}
