/*
 * Hybrid decode on the CUDA backend (issue 10, src/gpu/gpu_hybrid.c): the
 * slab holds a share of each MoE layer's experts, the CPU computes the
 * misses.  Against llama.cpp's logits (../shared/ref) and against the
 * all-GPU session, at 0%, 50% and 100% resident: the prompt token by token
 * (the split) and in one batch (prefill), within the reference's bars.
 * Then: bit-identical logits across 3 sessions (static slab); a full slab
 * moves no bytes host->device per decoded token and its decode graph is
 * captured once; an engaged run shows hits, misses, hand-off samples and
 * no replay against a slot being rewritten; open/close gives the memory
 * back.  Skips without a CUDA device.
 */
#include "gpu/gpu.h"
#include "hydra.h"
#include "quant.h"
#include "refcheck.h"
#include "test.h"

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
    char path[512];
    if (!ref_load(name, &c->r)) {
        snprintf(why, len, "cannot read the reference of %s", name);
        return false;
    }
    c->ref = ref_read_logits(ref_logits_path(name, path, sizeof path), c->r.n_vocab, NULL);
    snprintf(path, sizeof path, "%s/models/%s.gguf", test_shared_dir(), name);
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    if (c->ref == NULL || hydra_model_open(&c->m, &mp) != HYDRA_OK || weights_bind(&c->w, c->m) != HYDRA_OK) {
        snprintf(why, len, "%s: %s", name, hydra_last_error());
        return false;
    }
    return true;
}

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
    const char *why_gpu;
    if (!gpu_available(&why_gpu))
        SKIP("%s", why_gpu);
    REQUIRE_SHARED();
    hy_case c;
    char why[600];
    if (!open_case(name, &c, why, sizeof why))
        FAIL("%s", why);
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
    const char *why_gpu;
    if (!gpu_available(&why_gpu))
        SKIP("%s", why_gpu);
    REQUIRE_SHARED();
    hy_case c;
    char why[600];
    if (!open_case("qwen3moe-kq-q4_k_m", &c, why, sizeof why))
        FAIL("%s", why);
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
    const char *why_gpu;
    if (!gpu_available(&why_gpu))
        SKIP("%s", why_gpu);
    REQUIRE_SHARED();
    hy_case c;
    char why[600];
    if (!open_case("qwen3moe-kq-q4_k_m", &c, why, sizeof why))
        FAIL("%s", why);
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

static void decode_counters(test_ctx *t_, double fraction, uint64_t admit, gpu_stats *st, gpu_hybrid_counters *hc)
{
    hy_case c;
    char why[600];
    if (!open_case("qwen3moe-kq-q4_k_m", &c, why, sizeof why))
        FAIL("%s", why);
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
    const char *why_gpu;
    if (!gpu_available(&why_gpu))
        SKIP("%s", why_gpu);
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
    const char *why_gpu;
    if (!gpu_available(&why_gpu))
        SKIP("%s", why_gpu);
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

TEST(cuda_hybrid_open_close_returns_memory)
{
    const char *why_gpu;
    if (!gpu_available(&why_gpu))
        SKIP("%s", why_gpu);
    REQUIRE_SHARED();
    hy_case c;
    char why[600];
    if (!open_case("qwen3moe-kq-q4_k_m", &c, why, sizeof why))
        FAIL("%s", why);
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
        uint64_t held[GPU_MEM_COUNT];
        gpu_mem_usage(held);
        for (int p = 0; p < GPU_MEM_COUNT; p++)
            if (held[p] != 0)
                FAIL("cycle %d: %llu bytes of %s still held", cycle, (unsigned long long)held[p],
                     gpu_purpose_name((gpu_purpose)p));
    }
    close_case(&c);
}
