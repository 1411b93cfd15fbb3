/*
 * The engine against llama.cpp's logits (../shared/ref, procedure in
 * ../shared/ref/README.md): for every qwen3moe, mixtral, qwen2moe,
 * deepseek2 and gpt-oss file, the 200-token prompt (longer than gpt-oss's
 * window of 128) evaluated in one batch (F32 and F16 cache), token by
 * token, and in batches of 7 must each reach mean KL(ref || hydra) <=
 * max_kl_mean and top-1 agreement >= min_top1; greedy continuation must
 * match the reference's first min_greedy_match tokens; truncating to 100
 * and re-evaluating must reproduce the first run's logits.  One line per
 * model reports the measured numbers.
 *
 * A file with a tensor type the type table cannot compute yet is skipped
 * with the type's name.  All of it takes a few seconds on the 2-core CI
 * machine, also under make SAN=1, so every pass runs on every file.
 */
#include "hydra.h"
#include "quant.h"
#include "refcheck.h"
#include "test.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>

enum { TRUNCATE_AT = 100 };

/* NULL when hydra can compute every tensor type of the file; else the
 * message naming the first type it cannot. */
static const char *missing_type(hydra_model *m)
{
    for (size_t i = 0; i < hydra_model_tensor_count(m); i++) {
        hydra_tensor_info ti;
        if (hydra_model_tensor_at(m, i, &ti) == HYDRA_OK && quant_require(ti.type, ti.name) != HYDRA_OK)
            return hydra_last_error();
    }
    return NULL;
}

static hydra_status new_session(hydra_model *m, hydra_kv_type kv, hydra_session **s)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = 512;
    p.kv_type = kv;
    return hydra_session_create(s, m, &p);
}

/* Evaluates the prompt in chunks of `chunk` tokens, collecting every row. */
static hydra_status eval_chunked(hydra_session *s, const ref_case *r, int chunk, float *rows)
{
    for (int i = 0; i < REF_PROMPT; i += chunk) {
        int n = REF_PROMPT - i < chunk ? REF_PROMPT - i : chunk;
        hydra_status st = hydra_session_eval(s, r->prompt + i, (size_t)n, rows + (size_t)i * r->n_vocab);
        if (st != HYDRA_OK)
            return st;
    }
    return HYDRA_OK;
}

/* Greedy continuation from a session that holds the prompt. */
static int greedy_match(hydra_session *s, const ref_case *r)
{
    int matched = 0;
    bool diverged = false;
    for (int i = 0; i < REF_GREEDY; i++) {
        const float *l = hydra_session_logits(s);
        if (l == NULL)
            break;
        int32_t tok = ref_argmax(l, r->n_vocab);
        diverged |= tok != r->greedy[i];
        matched += !diverged;
        if (diverged || hydra_session_decode(s, tok) != HYDRA_OK)
            break;
    }
    return matched;
}

#define CHECK_SCORE(what, sc)                                                                                     \
    do {                                                                                                           \
        if (!ref_passes(&r, sc))                                                                                   \
            FAIL("%s %s: KL %.3g (max %.3g), top-1 %.3f (min %.3f)", name, what, (sc).kl, r.max_kl_mean, (sc).top1, \
                 r.min_top1);                                                                                      \
    } while (0)

static void run_reference(test_ctx *t_, const char *name)
{
    REQUIRE_SHARED();
    ref_case r = {0};
    float *want = NULL;
    char why[600];
    hydra_model *m = NULL;
    hydra_session *s = NULL;
    float *rows = NULL;
    bool loaded = ref_load_with_logits(name, &r, &want, why, sizeof why);
    hydra_status st = loaded ? util_open_shared_model(name, &m) : HYDRA_ERR_IO;
    const char *missing = st == HYDRA_OK ? missing_type(m) : NULL;
    if (loaded && st == HYDRA_OK && missing != NULL)
        snprintf(why, sizeof why, "%s", missing);
    rows = malloc(sizeof(float) * REF_PROMPT * (size_t)(r.n_vocab > 0 ? r.n_vocab : 1));
    ref_score batch32 = {0}, batch16 = {0}, tbt = {0}, b7 = {0};
    int greedy = -1;
    double trunc_diff = -1;
    if (loaded && st == HYDRA_OK && missing == NULL && rows != NULL) {
        /* one batch, F32 cache: the reference's own settings */
        st = new_session(m, HYDRA_KV_F32, &s);
        if (st == HYDRA_OK && (st = hydra_session_eval(s, r.prompt, REF_PROMPT, rows)) == HYDRA_OK)
            batch32 = ref_score_rows(want, rows, REF_PROMPT, r.n_vocab);
        hydra_session_free(s);
        s = NULL;
        /* one batch, default F16 cache; then greedy, then truncation */
        if (st == HYDRA_OK)
            st = new_session(m, HYDRA_KV_F16, &s);
        if (st == HYDRA_OK && (st = hydra_session_eval(s, r.prompt, REF_PROMPT, rows)) == HYDRA_OK) {
            batch16 = ref_score_rows(want, rows, REF_PROMPT, r.n_vocab);
            greedy = greedy_match(s, &r);
            float *again = malloc(sizeof(float) * (REF_PROMPT - TRUNCATE_AT) * (size_t)r.n_vocab);
            if (again != NULL && hydra_session_truncate(s, TRUNCATE_AT) == HYDRA_OK &&
                hydra_session_eval(s, r.prompt + TRUNCATE_AT, REF_PROMPT - TRUNCATE_AT, again) == HYDRA_OK) {
                trunc_diff = 0;
                for (size_t i = 0; i < (size_t)(REF_PROMPT - TRUNCATE_AT) * r.n_vocab; i++)
                    trunc_diff = fmax(trunc_diff, fabs(again[i] - rows[(size_t)TRUNCATE_AT * r.n_vocab + i]));
            }
            free(again);
        }
        /* token by token and batches of 7 (F16 cache) */
        if (st == HYDRA_OK) {
            hydra_session_clear(s);
            if ((st = eval_chunked(s, &r, 1, rows)) == HYDRA_OK)
                tbt = ref_score_rows(want, rows, REF_PROMPT, r.n_vocab);
            hydra_session_clear(s);
            if (st == HYDRA_OK && (st = eval_chunked(s, &r, 7, rows)) == HYDRA_OK)
                b7 = ref_score_rows(want, rows, REF_PROMPT, r.n_vocab);
        }
        hydra_session_free(s);
        if (st != HYDRA_OK)
            snprintf(why, sizeof why, "%s: %s: %s", name, hydra_strerror(st), hydra_last_error());
    }
    hydra_model_close(m);
    free(want);
    free(rows);
    if (!loaded)
        FAIL("%s", why);
    if (missing != NULL)
        SKIP("%s: %s", name, why);
    if (st != HYDRA_OK)
        FAIL("%s", why);
    printf("  %-20s batch(f32 kv) KL %.2e top1 %.3f | batch KL %.2e top1 %.3f | tokenwise KL %.2e top1 %.3f | "
           "by 7 KL %.2e top1 %.3f", name, batch32.kl, batch32.top1, batch16.kl, batch16.top1, tbt.kl, tbt.top1,
           b7.kl, b7.top1);
    printf(" | greedy %d/%d | truncate max|d| %.1e  (bars: KL %.2g, top1 %.3f)\n", greedy, REF_GREEDY, trunc_diff,
           r.max_kl_mean, r.min_top1);
    CHECK_SCORE("one batch, F32 cache", batch32);
    CHECK_SCORE("one batch, F16 cache", batch16);
    CHECK_SCORE("token by token", tbt);
    CHECK_SCORE("batches of 7", b7);
    if (greedy < r.min_greedy_match)
        FAIL("%s: greedy continuation matches %d tokens, need %d", name, greedy, r.min_greedy_match);
    /* The same positions computed again must give the same logits: rows of
     * a batch are computed independently, so this is exact. */
    if (trunc_diff != 0)
        FAIL("%s: after truncating to %d, re-evaluation differs by %g (negative: it failed)", name, TRUNCATE_AT,
             trunc_diff);
}

#define REFERENCE_TEST(id, file)                                              \
    TEST(engine_ref_##id)                                                     \
    {                                                                         \
        run_reference(TEST_CTX, file);                                        \
    }

REFERENCE_TEST(qwen3moe_tiny_f32, "qwen3moe-tiny-f32")
REFERENCE_TEST(qwen3moe_tiny_q8_0, "qwen3moe-tiny-q8_0")
REFERENCE_TEST(qwen3moe_kq_q4_k_m, "qwen3moe-kq-q4_k_m")
REFERENCE_TEST(qwen3moe_kq_iq4_xs, "qwen3moe-kq-iq4_xs")
REFERENCE_TEST(qwen3moe_kq_iq2_xxs, "qwen3moe-kq-iq2_xxs")
REFERENCE_TEST(qwen3moe_kq_iq3_xxs, "qwen3moe-kq-iq3_xxs")
REFERENCE_TEST(mixtral_tiny_f16, "mixtral-tiny-f16")
REFERENCE_TEST(mixtral_tiny_q4_0, "mixtral-tiny-q4_0")
REFERENCE_TEST(qwen2moe_tiny_f32, "qwen2moe-tiny-f32")
REFERENCE_TEST(qwen2moe_tiny_q8_0, "qwen2moe-tiny-q8_0")
REFERENCE_TEST(deepseek2_tiny_f32, "deepseek2-tiny-f32")
REFERENCE_TEST(deepseek2_tiny_q8_0, "deepseek2-tiny-q8_0")
REFERENCE_TEST(gptoss_tiny_f32, "gptoss-tiny-f32")
REFERENCE_TEST(gptoss_tiny_mxfp4, "gptoss-tiny-mxfp4")
