/*
 * Speculative decoding (src/spec.c): greedy output equals plain greedy
 * decoding token for token (a model drafting for itself accepts every
 * draft), the sampled first token follows the target's distribution (a
 * chi-square test against the sampler's own probabilities), the caches
 * after rejected drafts give the logits of a session that never saw them,
 * and vocabularies are checked.
 */
#include "gguf_write.h"
#include "hydra.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N_GEN = 24 };

static const hydra_token prompt[] = {1, 17, 200, 33, 512, 64, 7, 300};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

/* Plain greedy decoding: sample, decode, N_GEN times. */
static hydra_status plain_greedy(const hydra_model *m, hydra_token *out)
{
    hydra_session *s = NULL;
    hydra_status st = util_new_session(m, 256, 64, 2, &s);
    if (st == HYDRA_OK)
        st = util_greedy_decode(s, prompt, N_PROMPT, out, N_GEN);
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
    hydra_status st = util_new_session(tm, n_ctx, n_batch, 2, &r->target);
    if (st == HYDRA_OK)
        st = util_new_session(dm, n_ctx, n_batch, 2, &r->draft);
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
    CHECK_OK(util_open_shared_model(target, &tm));
    hydra_status st = util_open_shared_model(draft, &dm);
    hydra_token want[N_GEN], got[N_GEN];
    spec_run r = {0};
    const hydra_sampler_params sp = util_greedy_params();
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
    hydra_status st = util_new_session(m, 64, 16, 2, &s);
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
    CHECK_OK(util_open_shared_model("qwen3moe-kq-q4_k_m", &tm));
    hydra_status st = util_open_shared_model("qwen3moe-kq-iq2_xxs", &dm);
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
    CHECK_OK(util_open_shared_model(target, &tm));
    hydra_status st = util_open_shared_model(draft, &dm);
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
        st = util_new_session(tm, 512, 8, 2, &fresh);
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
    CHECK_OK(util_open_shared_model("qwen2moe-tiny-q8_0", &m));
    const hydra_sampler_params sp = util_greedy_params();
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
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-f32", &a));
    CHECK_OK(util_open_shared_model("gptoss-tiny-f32", &b));
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-q8_0", &c));
    const hydra_status mismatch = hydra_spec_check_vocab(a, b);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", hydra_last_error());
    const hydra_status same = hydra_spec_check_vocab(a, c);
    hydra_session *sa = NULL, *sb = NULL;
    hydra_spec *spec = NULL;
    hydra_status st_null = HYDRA_OK, st_k = HYDRA_OK, st_p = HYDRA_OK;
    const hydra_sampler_params sp = util_greedy_params();
    hydra_spec_params pp = hydra_spec_default_params();
    if (util_new_session(a, 64, 16, 2, &sa) == HYDRA_OK && util_new_session(b, 64, 16, 2, &sb) == HYDRA_OK) {
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

/* ------------------------------------------------------------ MTP / NextN blocks */

/* Copies a model's metadata value by value (the types the tiny files use). */
static hydra_status copy_key(const hydra_model *m, const char *key, hydra_value_type type, gguf_writer *w)
{
    int64_t i = 0;
    uint64_t u = 0;
    double f = 0;
    bool b = false;
    const char *s = NULL;
    hydra_value_type et;
    size_t n = 0;
    switch (type) {
    case HYDRA_VALUE_U32:
        return hydra_model_get_u64(m, key, &u) == HYDRA_OK ? gguf_writer_add_u32(w, key, (uint32_t)u) : HYDRA_ERR_TYPE;
    case HYDRA_VALUE_I32:
        return hydra_model_get_i64(m, key, &i) == HYDRA_OK ? gguf_writer_add_i32(w, key, (int32_t)i) : HYDRA_ERR_TYPE;
    case HYDRA_VALUE_U64:
        return hydra_model_get_u64(m, key, &u) == HYDRA_OK ? gguf_writer_add_u64(w, key, u) : HYDRA_ERR_TYPE;
    case HYDRA_VALUE_F32:
        return hydra_model_get_f64(m, key, &f) == HYDRA_OK ? gguf_writer_add_f32(w, key, (float)f) : HYDRA_ERR_TYPE;
    case HYDRA_VALUE_BOOL:
        return hydra_model_get_bool(m, key, &b) == HYDRA_OK ? gguf_writer_add_bool(w, key, b) : HYDRA_ERR_TYPE;
    case HYDRA_VALUE_STRING:
        return hydra_model_get_str(m, key, &s, NULL) == HYDRA_OK ? gguf_writer_add_str(w, key, s) : HYDRA_ERR_TYPE;
    case HYDRA_VALUE_ARRAY:
        break;
    default:
        return HYDRA_ERR_UNSUPPORTED;
    }
    if (hydra_model_get_arr(m, key, &et, &n) != HYDRA_OK)
        return HYDRA_ERR_TYPE;
    hydra_status st = HYDRA_OK;
    if (et == HYDRA_VALUE_STRING) {
        const char **v = malloc(sizeof *v * (n ? n : 1));
        for (size_t k = 0; v != NULL && st == HYDRA_OK && k < n; k++)
            st = hydra_model_get_arr_str(m, key, k, &v[k], NULL);
        st = v == NULL ? HYDRA_ERR_NOMEM : st == HYDRA_OK ? gguf_writer_add_arr_str(w, key, v, n) : st;
        free(v);
    } else if (et == HYDRA_VALUE_I32) {
        int32_t *v = malloc(sizeof *v * (n ? n : 1));
        for (size_t k = 0; v != NULL && st == HYDRA_OK && k < n; k++)
            st = hydra_model_get_arr_i64(m, key, k, &i), v[k] = (int32_t)i;
        st = v == NULL ? HYDRA_ERR_NOMEM : st == HYDRA_OK ? gguf_writer_add_arr_i32(w, key, v, n) : st;
        free(v);
    } else if (et == HYDRA_VALUE_F32) {
        float *v = malloc(sizeof *v * (n ? n : 1));
        for (size_t k = 0; v != NULL && st == HYDRA_OK && k < n; k++)
            st = hydra_model_get_arr_f64(m, key, k, &f), v[k] = (float)f;
        st = v == NULL ? HYDRA_ERR_NOMEM : st == HYDRA_OK ? gguf_writer_add_arr_f32(w, key, v, n) : st;
        free(v);
    } else {
        st = HYDRA_ERR_UNSUPPORTED;
    }
    return st;
}

/* Copies m's metadata into w but general.alignment (the writer sets its
 * own) and the keys named in drop (NULL-terminated; drop may be NULL),
 * deepseek2.block_count replaced when block_count > 0 (test_spec_mtp.c's
 * rewrites use it too). */
hydra_status spec_test_copy_meta(const hydra_model *m, uint32_t block_count, const char *const *drop, gguf_writer *w);

hydra_status spec_test_copy_meta(const hydra_model *m, uint32_t block_count, const char *const *drop, gguf_writer *w)
{
    hydra_status st = HYDRA_OK;
    for (size_t i = 0; st == HYDRA_OK && i < hydra_model_meta_count(m); i++) {
        const char *key;
        hydra_value_type type;
        st = hydra_model_meta_at(m, i, &key, &type);
        bool skip = st != HYDRA_OK || strcmp(key, "general.alignment") == 0;
        for (size_t d = 0; !skip && drop != NULL && drop[d] != NULL; d++)
            skip = strcmp(key, drop[d]) == 0;
        if (skip)
            continue;
        st = block_count > 0 && strcmp(key, "deepseek2.block_count") == 0 ? gguf_writer_add_u32(w, key, block_count)
                                                                            : copy_key(m, key, type, w);
    }
    return st;
}

/* The MTP tensors of llama.cpp's layout for block l, all F32 (their values
 * do not matter to the main pass): name suffix and ne[0] in units of n_embd. */
static const struct {
    const char *suffix;
    uint64_t ne0_embd, ne1_embd;
} nextn_tensors[] = {
    {"nextn.eh_proj.weight", 2, 1},
    {"nextn.enorm.weight", 1, 0},
    {"nextn.hnorm.weight", 1, 0},
    {"nextn.shared_head_norm.weight", 1, 0},
};

/* deepseek2-tiny-f32 (3 blocks) rewritten: block_count and
 * nextn_predict_layers as given; with_last false drops blk.2.*; with
 * nextn, blk.2 gets the MTP tensors too. */
static hydra_status write_variant(const hydra_model *m, const char *path, uint32_t block_count, uint32_t nextn,
                                  bool with_last)
{
    gguf_writer *w = NULL;
    hydra_status st = gguf_writer_open(&w, path);
    if (st == HYDRA_OK)
        st = spec_test_copy_meta(m, block_count, NULL, w);
    if (st == HYDRA_OK && nextn > 0)
        st = gguf_writer_add_u32(w, "deepseek2.nextn_predict_layers", nextn);
    const size_t n_tensors = hydra_model_tensor_count(m);
    const uint64_t n_embd = 64;
    for (size_t i = 0; st == HYDRA_OK && i < n_tensors; i++) {
        hydra_tensor_info ti;
        st = hydra_model_tensor_at(m, i, &ti);
        if (st == HYDRA_OK && (with_last || strncmp(ti.name, "blk.2.", 6) != 0))
            st = gguf_writer_add_tensor(w, ti.name, ti.type, ti.n_dims, ti.ne);
    }
    for (size_t j = 0; st == HYDRA_OK && nextn > 0 && j < sizeof nextn_tensors / sizeof nextn_tensors[0]; j++) {
        char name[96];
        snprintf(name, sizeof name, "blk.2.%s", nextn_tensors[j].suffix);
        const uint64_t ne[2] = {nextn_tensors[j].ne0_embd * n_embd, nextn_tensors[j].ne1_embd * n_embd};
        st = gguf_writer_add_tensor(w, name, 0 /* F32 */, ne[1] ? 2 : 1, ne);
    }
    for (size_t i = 0; st == HYDRA_OK && i < n_tensors; i++) {
        hydra_tensor_info ti;
        st = hydra_model_tensor_at(m, i, &ti);
        if (st == HYDRA_OK && (with_last || strncmp(ti.name, "blk.2.", 6) != 0))
            st = gguf_writer_write(w, ti.data, ti.n_bytes);
    }
    static const float one = 1.0f;
    for (size_t j = 0; st == HYDRA_OK && nextn > 0 && j < sizeof nextn_tensors / sizeof nextn_tensors[0]; j++) {
        const uint64_t n = nextn_tensors[j].ne0_embd * n_embd * (nextn_tensors[j].ne1_embd ? n_embd : 1);
        for (uint64_t k = 0; st == HYDRA_OK && k < n; k++)
            st = gguf_writer_write(w, &one, sizeof one);
    }
    return gguf_writer_finish(w, st);
}

/* The last prompt position's logits, at most cap of them (*n). */
static hydra_status last_logits(const char *path, float *out, size_t cap, size_t *n)
{
    hydra_model *m = NULL;
    hydra_session *s = NULL;
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    hydra_status st = hydra_model_open(&m, &mp);
    if (st == HYDRA_OK)
        st = util_new_session(m, 64, 16, 2, &s);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, prompt, N_PROMPT, NULL);
    *n = 0;
    if (st == HYDRA_OK) {
        *n = hydra_session_n_vocab(s) < cap ? hydra_session_n_vocab(s) : cap;
        memcpy(out, hydra_session_logits(s), sizeof(float) * *n);
    }
    hydra_session_free(s);
    hydra_model_close(m);
    return st;
}

/* A deepseek2 file whose last block is an MTP block (nextn_predict_layers
 * 1, with the nextn.* tensors) gives, bit for bit, the logits of the same
 * file without that block: the main pass does not run it.  A file whose
 * blocks would all be MTP is refused. */
TEST(spec_deepseek2_nextn_blocks_are_left_out_of_the_main_pass)
{
    REQUIRE_SHARED();
    hydra_model *m = NULL;
    CHECK_OK(util_open_shared_model("deepseek2-tiny-f32", &m));
    char with_mtp[512], without[512], all_mtp[512];
    snprintf(with_mtp, sizeof with_mtp, "%s", util_scratch_path("spec-ds2-nextn.gguf"));
    snprintf(without, sizeof without, "%s", util_scratch_path("spec-ds2-2blocks.gguf"));
    snprintf(all_mtp, sizeof all_mtp, "%s", util_scratch_path("spec-ds2-all-nextn.gguf"));
    hydra_status st = write_variant(m, with_mtp, 3, 1, true);
    if (st == HYDRA_OK)
        st = write_variant(m, without, 2, 0, false);
    if (st == HYDRA_OK)
        st = write_variant(m, all_mtp, 3, 2, true);
    hydra_model_close(m);
    if (st != HYDRA_OK)
        FAIL("writing the variants: %s", hydra_last_error());
    enum { N_VOCAB_MAX = 4096 };
    static float a[N_VOCAB_MAX], b[N_VOCAB_MAX];
    size_t na = 0, nb = 0;
    CHECK_OK(last_logits(with_mtp, a, N_VOCAB_MAX, &na));
    CHECK_OK(last_logits(without, b, N_VOCAB_MAX, &nb));
    CHECK(na == nb && na > 0);
    CHECK(memcmp(a, b, sizeof(float) * na) == 0);
    const hydra_status refused = last_logits(all_mtp, a, N_VOCAB_MAX, &na);
    CHECK_EQ_INT(refused, HYDRA_ERR_FORMAT);
    CHECK(strstr(hydra_last_error(), "nextn_predict_layers") != NULL);
}

/* hydra_spec_draft + the caller's own verify pass + hydra_spec_accept
 * give the tokens of hydra_spec_step; misuse is refused and undone. */
TEST(spec_two_phase_step_equals_step)
{
    REQUIRE_SHARED();
    hydra_model *m = NULL, *d = NULL;
    CHECK_OK(util_open_shared_model("mixtral-tiny-f16", &m));
    hydra_status st = util_open_shared_model("mixtral-tiny-q4_0", &d);
    const hydra_sampler_params sp = util_greedy_params();
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 3;
    pp.p_min = 0;
    spec_run one = {0}, two = {0};
    hydra_token want[N_GEN], got[N_GEN];
    if (st == HYDRA_OK)
        st = spec_open(&one, m, d, 128, 16, &sp, &pp);
    if (st == HYDRA_OK)
        st = spec_open(&two, m, d, 128, 16, &sp, &pp);
    if (st == HYDRA_OK)
        st = spec_generate(one.spec, want, N_GEN);
    if (st == HYDRA_OK)
        st = hydra_spec_start(two.spec, prompt, N_PROMPT);
    hydra_status early = HYDRA_OK, unevaluated = HYDRA_OK;
    size_t n = 0;
    float *rows = malloc(sizeof(float) * 4 * 1024 * 8);
    if (st == HYDRA_OK && rows == NULL)
        st = HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK) {
        early = hydra_spec_accept(two.spec, rows, got, &n); /* no batch yet */
        const hydra_token *batch;
        size_t width;
        st = hydra_spec_draft(two.spec, N_GEN, &batch, &width);
        if (st == HYDRA_OK)
            unevaluated = hydra_spec_accept(two.spec, rows, got, &n); /* target not advanced: undone */
    }
    for (size_t done = 0; st == HYDRA_OK && done < N_GEN; done += n) {
        const hydra_token *batch;
        size_t width;
        st = hydra_spec_draft(two.spec, N_GEN - done, &batch, &width);
        if (st == HYDRA_OK && hydra_session_n_vocab(two.target) * width > 4 * 1024 * 8)
            st = HYDRA_ERR_RANGE;
        if (st == HYDRA_OK)
            st = hydra_session_eval(two.target, batch, width, rows);
        if (st == HYDRA_OK)
            st = hydra_spec_accept(two.spec, rows, got + done, &n);
    }
    free(rows);
    spec_run_free(&one);
    spec_run_free(&two);
    hydra_model_close(d);
    hydra_model_close(m);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
    CHECK_EQ_INT(early, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(unevaluated, HYDRA_ERR_INVALID_ARG);
    CHECK(memcmp(want, got, sizeof want) == 0);
}

/* A two-thread session whose MoE layers go through the hybrid CPU split
 * with resident_fraction of each layer's experts in the slab. */
static hydra_session_params hybrid_split_params(int n_ctx, int n_batch, double resident_fraction)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.n_threads = 2;
    p.hybrid = HYDRA_HYBRID_CPU_SPLIT;
    p.resident_fraction = resident_fraction;
    return p;
}

/* The verify pass through the hybrid CPU split (issue 10: half the experts
 * "resident", the rest computed as misses, for all k + 1 rows at once)
 * gives plain greedy decoding's tokens, and the split saw the verify rows. */
TEST(spec_greedy_through_the_hybrid_cpu_split)
{
    REQUIRE_SHARED();
    hydra_model *m = NULL, *d = NULL;
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-f32", &m));
    hydra_status st = util_open_shared_model("qwen3moe-tiny-q8_0", &d);
    hydra_token want[N_GEN], got[N_GEN];
    if (st == HYDRA_OK)
        st = plain_greedy(m, want);
    hydra_session_params p = hybrid_split_params(256, 64, 0.5);
    spec_run r = {0};
    const hydra_sampler_params sp = util_greedy_params();
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 4;
    pp.p_min = 0;
    if (st == HYDRA_OK)
        st = hydra_session_create(&r.target, m, &p);
    if (st == HYDRA_OK)
        st = util_new_session(d, 256, 64, 2, &r.draft);
    if (st == HYDRA_OK)
        st = hydra_spec_new(r.target, r.draft, &sp, &pp, &r.spec);
    if (st == HYDRA_OK)
        st = spec_generate(r.spec, got, N_GEN);
    hydra_hybrid_stats hs = {0};
    if (st == HYDRA_OK)
        st = hydra_session_hybrid_stats(r.target, &hs);
    spec_run_free(&r);
    hydra_model_close(d);
    hydra_model_close(m);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
    CHECK(memcmp(want, got, sizeof want) == 0);
    CHECK(hs.prefill_lookups > 0); /* verify passes have several rows */
    CHECK(hs.prefill_hits > 0 && hs.prefill_hits < hs.prefill_lookups);
}

/* A verify pass through the hybrid CPU split computes each missed expert
 * once for all the rows that chose it: with no expert resident, 8 rows of
 * qwen3moe-tiny (8 experts, top-2, 2 MoE layers) miss 8 x 2 x 2 = 32
 * routes, which at most 8 experts per layer compute; one-row steps compute
 * one expert per route. */
TEST(spec_hybrid_verify_misses_are_a_union_of_the_rows)
{
    synth_params sp;
    const char *path = util_scratch_path("spec-union-qwen3moe-tiny.gguf");
    CHECK_OK(synth_preset("qwen3moe-tiny", &sp));
    CHECK_OK(synth_write(path, &sp));
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    hydra_model *m = NULL;
    CHECK_OK(hydra_model_open(&m, &mp));
    hydra_session_params p = hybrid_split_params(64, 16, 0);
    hydra_session *s = NULL;
    static const hydra_token rows[8] = {1, 17, 200, 33, 250, 64, 7, 140};
    hydra_hybrid_stats verify = {0}, decode = {0};
    hydra_status st = hydra_session_create(&s, m, &p);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, rows, 8, NULL);
    if (st == HYDRA_OK)
        st = hydra_session_hybrid_stats(s, &verify);
    for (int i = 0; i < 3 && st == HYDRA_OK; i++)
        st = hydra_session_decode(s, rows[i]);
    if (st == HYDRA_OK)
        st = hydra_session_hybrid_stats(s, &decode);
    hydra_session_free(s);
    hydra_model_close(m);
    if (st != HYDRA_OK)
        FAIL("%s", hydra_last_error());
    printf("    8 rows: %llu missed routes computed as %llu expert runs\n", (unsigned long long)verify.miss_routes,
           (unsigned long long)verify.miss_experts);
    CHECK_EQ_U64(verify.miss_routes, 8 * 2 * 2);
    CHECK(verify.miss_experts >= 2 * 2 && verify.miss_experts <= 8 * 2);
    CHECK_EQ_U64(decode.miss_routes - verify.miss_routes, 3 * 2 * 2);
    CHECK_EQ_U64(decode.miss_experts - verify.miss_experts, 3 * 2 * 2);
}
