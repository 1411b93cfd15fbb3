/*
 * Speculative decoding (src/spec.c): greedy output equals plain greedy
 * decoding token for token (a model drafting for itself accepts every
 * draft), the sampled first token follows the target's distribution (a
 * chi-square test against the sampler's own probabilities), the caches
 * after rejected drafts give the logits of a session that never saw them,
 * and vocabularies are checked.
 */
#include "hydra.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N_GEN = 24 };

static hydra_status open_model(const char *name, hydra_model **m)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/%s.gguf", test_shared_dir(), name);
    hydra_model_params p = hydra_model_default_params();
    p.path = path;
    return hydra_model_open(m, &p);
}

static hydra_status make_session(const hydra_model *m, uint32_t n_ctx, uint32_t n_batch, hydra_session **s)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.n_threads = 2;
    return hydra_session_create(s, m, &p);
}

static hydra_sampler_params greedy_params(void)
{
    hydra_sampler_params sp = hydra_sampler_default_params();
    sp.temperature = 0;
    return sp;
}

static const hydra_token prompt[] = {1, 17, 200, 33, 512, 64, 7, 300};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

/* Plain greedy decoding: sample, decode, N_GEN times. */
static hydra_status plain_greedy(const hydra_model *m, hydra_token *out)
{
    hydra_session *s = NULL;
    hydra_sampler *sm = NULL;
    const hydra_sampler_params sp = greedy_params();
    hydra_status st = make_session(m, 256, 64, &s);
    if (st == HYDRA_OK)
        st = hydra_sampler_new(&sp, (int32_t)hydra_session_n_vocab(s), &sm);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, prompt, N_PROMPT, NULL);
    for (int i = 0; st == HYDRA_OK && i < N_GEN; i++) {
        st = hydra_sampler_sample(sm, hydra_session_logits(s), &out[i]);
        if (st == HYDRA_OK && i + 1 < N_GEN)
            st = hydra_session_decode(s, out[i]);
    }
    hydra_sampler_free(sm);
    hydra_session_free(s);
    return st;
}

/* Speculative decoding of N_GEN tokens with a draft model. */
typedef struct spec_run {
    hydra_session *target, *draft;
    hydra_spec *spec;
} spec_run;

static void spec_run_free(spec_run *r)
{
    hydra_spec_free(r->spec);
    hydra_session_free(r->target);
    hydra_session_free(r->draft);
    memset(r, 0, sizeof *r);
}

static hydra_status spec_open(spec_run *r, const hydra_model *tm, const hydra_model *dm, uint32_t n_ctx,
                              uint32_t n_batch, const hydra_sampler_params *sp, const hydra_spec_params *pp)
{
    memset(r, 0, sizeof *r);
    hydra_status st = make_session(tm, n_ctx, n_batch, &r->target);
    if (st == HYDRA_OK)
        st = make_session(dm, n_ctx, n_batch, &r->draft);
    if (st == HYDRA_OK)
        st = hydra_spec_new(r->target, r->draft, sp, pp, &r->spec);
    if (st != HYDRA_OK)
        spec_run_free(r);
    return st;
}

static hydra_status spec_generate(hydra_spec *spec, hydra_token *out, size_t n)
{
    hydra_status st = hydra_spec_start(spec, prompt, N_PROMPT);
    for (size_t done = 0, got = 0; st == HYDRA_OK && done < n; done += got)
        st = hydra_spec_step(spec, n - done, out + done, &got);
    return st;
}

/* Greedy with speculation == greedy without; *accept_rate the share kept. */
static void greedy_matches(test_ctx *t_, const char *target, const char *draft, hydra_spec_params pp,
                          double *accept_rate)
{
    hydra_model *tm = NULL, *dm = NULL;
    CHECK_OK(open_model(target, &tm));
    hydra_status st = open_model(draft, &dm);
    hydra_token want[N_GEN], got[N_GEN];
    spec_run r = {0};
    const hydra_sampler_params sp = greedy_params();
    if (st == HYDRA_OK)
        st = plain_greedy(tm, want);
    if (st == HYDRA_OK)
        st = spec_open(&r, tm, dm, 256, 64, &sp, &pp);
    if (st == HYDRA_OK)
        st = spec_generate(r.spec, got, N_GEN);
    hydra_spec_stats stats;
    hydra_spec_get_stats(r.spec, &stats);
    spec_run_free(&r);
    hydra_model_close(dm);
    hydra_model_close(tm);
    if (st != HYDRA_OK)
        FAIL("%s drafted by %s: %s", target, draft, hydra_last_error());
    for (int i = 0; i < N_GEN; i++)
        if (want[i] != got[i])
            FAIL("%s drafted by %s: token %d is %d, plain greedy gives %d", target, draft, i, (int)got[i],
                 (int)want[i]);
    CHECK(stats.n_generated == N_GEN);
    CHECK(stats.n_drafted > 0);
    *accept_rate = (double)stats.n_accepted / (double)stats.n_drafted;
}

static const char *const tiny_models[] = {
    "qwen3moe-tiny-f32", "qwen3moe-tiny-q8_0", "qwen2moe-tiny-f32", "qwen2moe-tiny-q8_0", "mixtral-tiny-f16",
    "mixtral-tiny-q4_0", "deepseek2-tiny-f32", "deepseek2-tiny-q8_0", "gptoss-tiny-f32",  "gptoss-tiny-mxfp4",
};

TEST(spec_greedy_self_draft_equals_plain_and_accepts_all)
{
    REQUIRE_SHARED();
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 5;
    pp.p_min = 0;
    for (size_t i = 0; i < sizeof tiny_models / sizeof tiny_models[0]; i++) {
        double rate = 0;
        greedy_matches(t_, tiny_models[i], tiny_models[i], pp, &rate);
            if (t_->result != TEST_PASS)
                return;
        if (rate != 1.0)
            FAIL("%s drafting for itself kept %.3f of the drafts, not all", tiny_models[i], rate);
    }
}

TEST(spec_greedy_other_quant_draft_equals_plain)
{
    REQUIRE_SHARED();
    static const char *const pairs[][2] = {
        {"qwen3moe-tiny-f32", "qwen3moe-tiny-q8_0"}, {"deepseek2-tiny-f32", "deepseek2-tiny-q8_0"},
        {"gptoss-tiny-f32", "gptoss-tiny-mxfp4"},    {"mixtral-tiny-f16", "mixtral-tiny-q4_0"},
        {"qwen3moe-kq-q4_k_m", "qwen3moe-kq-iq2_xxs"}, {"qwen3moe-tiny-f32", "qwen3moe-kq-iq2_xxs"},
    };
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 4;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        double rate = 0;
        greedy_matches(t_, pairs[i][0], pairs[i][1], pp, &rate);
            if (t_->result != TEST_PASS)
                return;
        printf("    %s drafted by %s: %.0f%% of drafts kept\n", pairs[i][0], pairs[i][1], 100 * rate);
    }
    /* variable width and a low confidence bar give the same tokens */
    pp.fixed_width = false;
    pp.p_min = 0.3f;
    double rate = 0;
    greedy_matches(t_, "qwen2moe-tiny-f32", "qwen2moe-tiny-q8_0", pp, &rate);
        if (t_->result != TEST_PASS)
            return;
}

/* Upper critical value of chi-square with df degrees of freedom at the
 * normal quantile z (Wilson and Hilferty's approximation). */
static double chi2_critical(int df, double z)
{
    const double a = 2.0 / (9.0 * df);
    const double c = 1.0 - a + z * sqrt(a);
    return df * c * c * c;
}

/* The target's distribution of the first token after the prompt. */
static hydra_status first_token_dist(const hydra_model *m, const hydra_sampler_params *sp, hydra_token *ids,
                                     float *probs, size_t cap, size_t *n)
{
    hydra_session *s = NULL;
    hydra_sampler *sm = NULL;
    hydra_status st = make_session(m, 64, 16, &s);
    if (st == HYDRA_OK)
        st = hydra_sampler_new(sp, (int32_t)hydra_session_n_vocab(s), &sm);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, prompt, N_PROMPT, NULL);
    for (int i = 0; st == HYDRA_OK && i < N_PROMPT; i++)
        st = hydra_sampler_accept(sm, prompt[i]);
    if (st == HYDRA_OK)
        st = hydra_sampler_candidates(sm, hydra_session_logits(s), ids, probs, cap, n);
    hydra_sampler_free(sm);
    hydra_session_free(s);
    return st;
}

/* The first generated token over N_RUNS speculative runs against the
 * target's own probabilities, with a draft of the same weights at a much
 * coarser quantisation (IQ2_XXS for Q4_K_M) so that drafts are often
 * rejected and the residual draw is exercised.  Level 0.001 (z = 3.09). */
TEST(spec_sampling_first_token_follows_target_distribution)
{
    REQUIRE_SHARED();
    enum { N_RUNS = 3000, CAP = 64 };
    hydra_model *tm = NULL, *dm = NULL;
    CHECK_OK(open_model("qwen3moe-kq-q4_k_m", &tm));
    hydra_status st = open_model("qwen3moe-kq-iq2_xxs", &dm);
    hydra_sampler_params sp = hydra_sampler_default_params();
    sp.temperature = 1.5f;
    sp.top_k = 8;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    sp.repeat_penalty = 1.1f; /* the target's window is the prompt's */
    sp.seed = 1234;
    hydra_token ids[CAP];
    float probs[CAP];
    size_t n = 0;
    if (st == HYDRA_OK)
        st = first_token_dist(tm, &sp, ids, probs, CAP, &n);
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 1;
    pp.p_min = 0;
    spec_run r = {0};
    if (st == HYDRA_OK)
        st = spec_open(&r, tm, dm, 64, 16, &sp, &pp);
    double count[CAP] = {0};
    for (int run = 0; st == HYDRA_OK && run < N_RUNS; run++) {
        hydra_token out[2];
        size_t got = 0;
        st = hydra_spec_start(r.spec, prompt, N_PROMPT);
        if (st == HYDRA_OK)
            st = hydra_spec_step(r.spec, 2, out, &got);
        size_t j = 0;
        while (st == HYDRA_OK && j < n && ids[j] != out[0])
            j++;
        if (st == HYDRA_OK && j == n)
            FAIL("run %d: token %d is outside the target's candidates", run, (int)out[0]);
        count[j] += 1;
    }
    hydra_spec_stats stats;
    hydra_spec_get_stats(r.spec, &stats);
    spec_run_free(&r);
    hydra_model_close(dm);
    hydra_model_close(tm);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
    /* cells with fewer than 5 expected runs are pooled */
    double chi2 = 0, pool_obs = 0, pool_exp = 0;
    int cells = 0;
    for (size_t j = 0; j < n; j++) {
        const double e = probs[j] * N_RUNS;
        if (e < 5) {
            pool_obs += count[j];
            pool_exp += e;
            continue;
        }
        chi2 += (count[j] - e) * (count[j] - e) / e;
        cells++;
    }
    if (pool_exp > 0) {
        chi2 += (pool_obs - pool_exp) * (pool_obs - pool_exp) / pool_exp;
        cells++;
    }
    const double crit = chi2_critical(cells - 1, 3.09);
    printf("    chi2 %.2f over %d cells (critical %.2f at 0.001), %.0f%% of drafts kept\n", chi2, cells, crit,
           100.0 * (double)stats.n_accepted / (double)stats.n_drafted);
    CHECK(cells >= 3);
    CHECK(stats.n_accepted < stats.n_drafted); /* the residual draw ran */
    CHECK(stats.n_accepted > 0);
    CHECK(chi2 < crit);
}

/* After steps with rejected drafts, the target's logits for the next
 * token equal, bit for bit, those of a session that evaluated only the
 * accepted tokens. */
static void rollback_exact(test_ctx *t_, const char *target, const char *draft, int n_tokens)
{
    hydra_model *tm = NULL, *dm = NULL;
    CHECK_OK(open_model(target, &tm));
    hydra_status st = open_model(draft, &dm);
    hydra_sampler_params sp = hydra_sampler_default_params();
    sp.seed = 7;
    sp.temperature = 1.5f;
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 4;
    pp.p_min = 0;
    spec_run r = {0};
    hydra_token *gen = malloc(sizeof *gen * (size_t)(N_PROMPT + n_tokens));
    if (st == HYDRA_OK && gen == NULL)
        st = HYDRA_ERR_NOMEM;
    /* n_batch 8: a sliding layer's ring is its window plus 7 rows, so it wraps */
    if (st == HYDRA_OK)
        st = spec_open(&r, tm, dm, 512, 8, &sp, &pp);
    if (st == HYDRA_OK) {
        memcpy(gen, prompt, sizeof prompt);
        st = spec_generate(r.spec, gen + N_PROMPT, (size_t)n_tokens);
    }
    hydra_spec_stats stats = {0};
    hydra_spec_get_stats(r.spec, &stats);
    const size_t n_all = N_PROMPT + (size_t)n_tokens;
    hydra_session *fresh = NULL;
    bool same = false;
    if (st == HYDRA_OK && hydra_session_n_past(r.target) != n_all - 1)
        FAIL("%s: the target holds %u positions, %zu accepted", target, hydra_session_n_past(r.target), n_all - 1);
    if (st == HYDRA_OK)
        st = hydra_session_eval(r.target, gen + n_all - 1, 1, NULL);
    if (st == HYDRA_OK)
        st = make_session(tm, 512, 8, &fresh);
    if (st == HYDRA_OK)
        st = hydra_session_eval(fresh, gen, n_all, NULL);
    if (st == HYDRA_OK)
        same = memcmp(hydra_session_logits(r.target), hydra_session_logits(fresh),
                      sizeof(float) * hydra_session_n_vocab(fresh)) == 0;
    hydra_session_free(fresh);
    spec_run_free(&r);
    free(gen);
    hydra_model_close(dm);
    hydra_model_close(tm);
    if (st != HYDRA_OK)
        FAIL("%s: %s", target, hydra_last_error());
    printf("    %s drafted by %s: %llu of %llu drafts kept over %llu steps\n", target, draft,
           (unsigned long long)stats.n_accepted, (unsigned long long)stats.n_drafted,
           (unsigned long long)stats.n_steps);
    CHECK(stats.n_accepted < stats.n_drafted);
    if (!same)
        FAIL("%s: logits after rolled-back drafts differ from a session that never saw them", target);
}

TEST(spec_rollback_leaves_the_cache_of_the_accepted_tokens)
{
    REQUIRE_SHARED();
    /* generic GQA (a draft of another quantisation), MLA's latent cache, and gpt-oss's sliding window of 128
     * (160 positions: the ring of 135 rows wraps) */
    rollback_exact(t_, "qwen3moe-kq-q4_k_m", "qwen3moe-kq-iq2_xxs", 40);
        if (t_->result != TEST_PASS)
            return;
    rollback_exact(t_, "deepseek2-tiny-f32", "deepseek2-tiny-q8_0", 40);
        if (t_->result != TEST_PASS)
            return;
    rollback_exact(t_, "gptoss-tiny-f32", "gptoss-tiny-mxfp4", 160);
        if (t_->result != TEST_PASS)
            return;
}

TEST(spec_fixed_width_pads_and_counts_widths)
{
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    CHECK_OK(open_model("qwen2moe-tiny-q8_0", &m));
    const hydra_sampler_params sp = greedy_params();
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 6;
    pp.p_min = 0.99f; /* stops drafting early, so most steps pad */
    spec_run r = {0};
    hydra_token out[N_GEN];
    hydra_status st = spec_open(&r, m, m, 256, 16, &sp, &pp);
    if (st == HYDRA_OK)
        st = spec_generate(r.spec, out, N_GEN);
    hydra_spec_stats stats = {0};
    hydra_spec_get_stats(r.spec, &stats);
    spec_run_free(&r);
    hydra_model_close(m);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
    CHECK_EQ_INT((int)stats.n_widths, 1);
    CHECK_EQ_U64(stats.n_verify_rows, stats.n_steps * 7);
    CHECK(stats.n_drafted < stats.n_steps * 6);
}

TEST(spec_rejects_another_vocabulary_and_bad_params)
{
    REQUIRE_SHARED();
    hydra_model *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(open_model("qwen3moe-tiny-f32", &a));
    CHECK_OK(open_model("gptoss-tiny-f32", &b));
    CHECK_OK(open_model("qwen3moe-tiny-q8_0", &c));
    const hydra_status mismatch = hydra_spec_check_vocab(a, b);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", hydra_last_error());
    const hydra_status same = hydra_spec_check_vocab(a, c);
    hydra_session *sa = NULL, *sb = NULL;
    hydra_spec *spec = NULL;
    hydra_status st_null = HYDRA_OK, st_k = HYDRA_OK, st_p = HYDRA_OK;
    const hydra_sampler_params sp = greedy_params();
    hydra_spec_params pp = hydra_spec_default_params();
    if (make_session(a, 64, 16, &sa) == HYDRA_OK && make_session(b, 64, 16, &sb) == HYDRA_OK) {
        st_null = hydra_spec_new(sa, NULL, &sp, &pp, &spec);
        pp.n_draft_max = 0;
        st_k = hydra_spec_new(sa, sa, &sp, &pp, &spec);
        pp.n_draft_max = 4;
        pp.p_min = 2;
        st_p = hydra_spec_new(sa, sb, &sp, &pp, &spec);
    }
    hydra_session_free(sa);
    hydra_session_free(sb);
    hydra_model_close(a);
    hydra_model_close(b);
    hydra_model_close(c);
    CHECK_EQ_INT(mismatch, HYDRA_ERR_INVALID_ARG);
    CHECK(strstr(msg, "vocabulary") != NULL);
    printf("    %s\n", msg);
    CHECK_EQ_INT(same, HYDRA_OK);
    CHECK_EQ_INT(st_null, HYDRA_ERR_UNSUPPORTED);
    CHECK_EQ_INT(st_k, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(st_p, HYDRA_ERR_INVALID_ARG);
    CHECK(spec == NULL);
}
