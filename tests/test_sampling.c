/*
 * The sampler, one behaviour per test: greedy and top-k 1 are the first
 * maximum; seeds reproduce; top-k, top-p and min-p cut exactly the tails
 * hydra.h defines (in llama.cpp's order: top-p's softmax is over what
 * top-k kept); penalties change the chosen token in constructed cases;
 * many draws follow the expected probabilities; bad parameters and
 * hostile logits fail with a status.  Expected sets come from the
 * definitions, written here independently (a sort and a softmax in double).
 */
#include "hydra.h"
#include "test.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

enum { MAX_VOCAB = 64 };

/* Greedy-free params with every cut off: temperature 1, plain softmax. */
static hydra_sampler_params plain_params(void)
{
    hydra_sampler_params p = hydra_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

/* Logits whose softmax is probs[] (log p). */
static void logits_of(const double *probs, int n, float *logits)
{
    for (int i = 0; i < n; i++)
        logits[i] = (float)log(probs[i]);
}

/* The candidates of one call, as ids and probabilities. */
typedef struct cands {
    hydra_token ids[MAX_VOCAB];
    float probs[MAX_VOCAB];
    size_t n;
} cands;

static hydra_status candidates_of(const hydra_sampler_params *p, const float *logits, int n_vocab, cands *c)
{
    hydra_sampler *s;
    hydra_status st = hydra_sampler_new(p, n_vocab, &s);
    if (st == HYDRA_OK)
        st = hydra_sampler_candidates(s, logits, c->ids, c->probs, MAX_VOCAB, &c->n);
    hydra_sampler_free(s);
    return st;
}

/* n draws from a fresh sampler into out[]. */
static hydra_status draw(const hydra_sampler_params *p, const float *logits, int n_vocab, hydra_token *out, int n)
{
    hydra_sampler *s;
    hydra_status st = hydra_sampler_new(p, n_vocab, &s);
    for (int i = 0; st == HYDRA_OK && i < n; i++)
        st = hydra_sampler_sample(s, logits, &out[i]);
    hydra_sampler_free(s);
    return st;
}

/* ------------------------------------------------------------ greedy */

TEST(sampler_temperature_0_is_the_first_maximum)
{
    const float logits[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
    hydra_sampler_params p = hydra_sampler_default_params();
    p.temperature = 0.0f;
    hydra_token tok[20];
    CHECK_OK(draw(&p, logits, 6, tok, 20));
    for (int i = 0; i < 20; i++)
        CHECK_EQ_INT(tok[i], 1);
    cands c;
    CHECK_OK(candidates_of(&p, logits, 6, &c));
    CHECK_EQ_INT(c.n, 1);
    CHECK_EQ_INT(c.ids[0], 1);
    CHECK(c.probs[0] == 1.0f);
}

TEST(sampler_top_k_1_is_the_first_maximum_at_any_temperature)
{
    float logits[MAX_VOCAB];
    srand(7);
    for (int i = 0; i < MAX_VOCAB; i++)
        logits[i] = (float)(rand() % 1000) / 100.0f;
    logits[17] = logits[40] = 20.0f;
    hydra_sampler_params p = plain_params();
    p.top_k = 1;
    p.temperature = 5.0f;
    hydra_token tok[200];
    CHECK_OK(draw(&p, logits, MAX_VOCAB, tok, 200));
    for (int i = 0; i < 200; i++)
        CHECK_EQ_INT(tok[i], 17);
}

/* ------------------------------------------------------------ seeds */

TEST(sampler_same_seed_same_tokens_other_seed_other_tokens)
{
    float logits[32];
    for (int i = 0; i < 32; i++)
        logits[i] = (float)(i % 5) * 0.1f; /* nearly flat: every draw matters */
    hydra_sampler_params p = plain_params();
    hydra_token a[100], b[100], c[100];
    p.seed = 42;
    CHECK_OK(draw(&p, logits, 32, a, 100));
    CHECK_OK(draw(&p, logits, 32, b, 100));
    p.seed = 43;
    CHECK_OK(draw(&p, logits, 32, c, 100));
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 100; i++)
        same_ab += a[i] == b[i], same_ac += a[i] == c[i];
    CHECK_EQ_INT(same_ab, 100);
    CHECK(same_ac < 20); /* chance agreement is ~1/32 per draw */
}

TEST(sampler_reset_restarts_the_stream_and_empties_the_window)
{
    float logits[16] = {0};
    hydra_sampler_params p = plain_params();
    p.repeat_penalty = 1.5f;
    p.seed = 9;
    hydra_sampler *s;
    CHECK_OK(hydra_sampler_new(&p, 16, &s));
    hydra_token first[50], again[50];
    for (int i = 0; i < 50; i++)
        CHECK_OK(hydra_sampler_sample(s, logits, &first[i]));
    hydra_sampler_reset(s);
    for (int i = 0; i < 50; i++)
        CHECK_OK(hydra_sampler_sample(s, logits, &again[i]));
    hydra_sampler_free(s);
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(first[i], again[i]);
}

/* ------------------------------------------------------------ cuts */

/* Ids are shuffled against rank so that a cut by id order would show. */
static const int rank_to_id[5] = {3, 0, 4, 1, 2};

static void ranked_logits(const double *probs_by_rank, float *logits)
{
    double probs[5];
    for (int r = 0; r < 5; r++)
        probs[rank_to_id[r]] = probs_by_rank[r];
    logits_of(probs, 5, logits);
}

/* The candidates are the first n_keep ranks with probabilities renormalised. */
static bool keeps_ranks(const cands *c, const double *probs_by_rank, size_t n_keep)
{
    double z = 0;
    for (size_t r = 0; r < n_keep; r++)
        z += probs_by_rank[r];
    if (c->n != n_keep)
        return false;
    for (size_t r = 0; r < n_keep; r++)
        if (c->ids[r] != rank_to_id[r] || fabs(c->probs[r] - probs_by_rank[r] / z) > 1e-6)
            return false;
    return true;
}

/* Cases that each set one parameter (top_p or min_p) and must keep the
 * `keep` most probable of five tokens, renormalised. */
typedef struct cut_case {
    float value;
    size_t keep;
} cut_case;

static void check_cuts(test_ctx *t_, const double *probs, size_t field, const char *name, const cut_case *cases,
                       size_t n_cases)
{
    float logits[5];
    ranked_logits(probs, logits);
    for (size_t i = 0; i < n_cases; i++) {
        hydra_sampler_params p = plain_params();
        *(float *)((char *)&p + field) = cases[i].value;
        cands c;
        CHECK_OK(candidates_of(&p, logits, 5, &c));
        if (!keeps_ranks(&c, probs, cases[i].keep))
            FAIL("%s %g: kept %zu tokens, want the %zu most probable", name, (double)cases[i].value, c.n,
                 cases[i].keep);
    }
}

TEST(sampler_top_p_keeps_the_shortest_run_reaching_p)
{
    static const double probs[5] = {0.4, 0.3, 0.15, 0.1, 0.05};
    static const cut_case cases[] = {{0.0f, 1}, {0.35f, 1}, {0.45f, 2}, {0.69f, 2},
                                     {0.71f, 3}, {0.9f, 4},  {0.97f, 5}, {1.0f, 5}};
    check_cuts(t_, probs, offsetof(hydra_sampler_params, top_p), "top_p", cases, sizeof cases / sizeof cases[0]);
}

TEST(sampler_min_p_keeps_tokens_above_a_fraction_of_the_largest)
{
    static const double probs[5] = {0.5, 0.3, 0.12, 0.06, 0.02};
    static const cut_case cases[] = {{0.0f, 5}, {0.03f, 5}, {0.05f, 4},  {0.2f, 3},
                                     {0.25f, 2}, {0.59f, 2}, {0.61f, 1}, {1.0f, 1}};
    check_cuts(t_, probs, offsetof(hydra_sampler_params, min_p), "min_p", cases, sizeof cases / sizeof cases[0]);
}

TEST(sampler_top_p_measures_what_top_k_kept)
{
    /* Alone, top-p 0.5 needs 0.3 + 0.25.  After top-k 2 the first token
     * holds 0.3 / 0.55 = 0.545 >= 0.5 by itself. */
    static const double probs[5] = {0.3, 0.25, 0.2, 0.15, 0.1};
    float logits[5];
    ranked_logits(probs, logits);
    hydra_sampler_params p = plain_params();
    p.top_p = 0.5f;
    cands c;
    CHECK_OK(candidates_of(&p, logits, 5, &c));
    CHECK(keeps_ranks(&c, probs, 2));
    p.top_k = 2;
    CHECK_OK(candidates_of(&p, logits, 5, &c));
    CHECK(keeps_ranks(&c, probs, 1));
    p.top_p = 1.0f;
    p.top_k = 3;
    CHECK_OK(candidates_of(&p, logits, 5, &c));
    CHECK(keeps_ranks(&c, probs, 3));
}

/* ------------------------------------------------------------ penalties */

/* Greedy choice after accepting `history`. */
static hydra_status greedy_after(hydra_sampler_params p, const float *logits, int n_vocab, const hydra_token *history,
                                 int n_history, hydra_token *out)
{
    hydra_sampler *s;
    p.temperature = 0.0f;
    hydra_status st = hydra_sampler_new(&p, n_vocab, &s);
    for (int i = 0; st == HYDRA_OK && i < n_history; i++)
        st = hydra_sampler_accept(s, history[i]);
    if (st == HYDRA_OK)
        st = hydra_sampler_sample(s, logits, out);
    hydra_sampler_free(s);
    return st;
}

TEST(sampler_repeat_penalty_divides_positive_and_multiplies_negative_logits)
{
    const float positive[3] = {2.0f, 1.9f, 0.0f};  /* 2.0 / 1.1 = 1.82 < 1.9 */
    const float negative[3] = {-1.0f, -1.05f, -9.0f}; /* -1.0 x 1.1 = -1.1 < -1.05 */
    hydra_sampler_params p = hydra_sampler_default_params();
    const hydra_token seen[1] = {0};
    hydra_token tok;
    CHECK_OK(greedy_after(p, positive, 3, seen, 1, &tok));
    CHECK_EQ_INT(tok, 0); /* penalty 1: off */
    p.repeat_penalty = 1.1f;
    CHECK_OK(greedy_after(p, positive, 3, seen, 1, &tok));
    CHECK_EQ_INT(tok, 1);
    CHECK_OK(greedy_after(p, negative, 3, seen, 1, &tok));
    CHECK_EQ_INT(tok, 1);
    CHECK_OK(greedy_after(p, positive, 3, NULL, 0, &tok));
    CHECK_EQ_INT(tok, 0);
}

TEST(sampler_presence_and_frequency_penalties_subtract)
{
    const float logits[3] = {2.0f, 1.9f, 0.0f};
    const hydra_token once[1] = {0}, thrice[4] = {0, 2, 0, 0};
    hydra_sampler_params p = hydra_sampler_default_params();
    hydra_token tok;
    p.presence_penalty = 0.15f; /* 2.0 - 0.15 < 1.9, however often */
    CHECK_OK(greedy_after(p, logits, 3, once, 1, &tok));
    CHECK_EQ_INT(tok, 1);
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.05f; /* once: 1.95 > 1.9; three times: 1.85 < 1.9 */
    CHECK_OK(greedy_after(p, logits, 3, once, 1, &tok));
    CHECK_EQ_INT(tok, 0);
    CHECK_OK(greedy_after(p, logits, 3, thrice, 4, &tok));
    CHECK_EQ_INT(tok, 1);
}

TEST(sampler_penalties_apply_once_per_token_however_often_it_repeats)
{
    /* Applied once: 2.0 / 1.2 = 1.67 and 2.0 - 0.2 = 1.8 stay above 1.5;
     * applied per occurrence (three) they would fall below it. */
    const float logits[2] = {2.0f, 1.5f};
    const hydra_token thrice[3] = {0, 0, 0};
    hydra_sampler_params p = hydra_sampler_default_params();
    hydra_token tok;
    p.repeat_penalty = 1.2f;
    CHECK_OK(greedy_after(p, logits, 2, thrice, 3, &tok));
    CHECK_EQ_INT(tok, 0);
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.2f;
    CHECK_OK(greedy_after(p, logits, 2, thrice, 3, &tok));
    CHECK_EQ_INT(tok, 0);
}

TEST(sampler_penalties_see_only_the_last_n_tokens)
{
    const float logits[8] = {2.0f, 1.9f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const hydra_token old[3] = {0, 5, 6}, recent[3] = {5, 0, 6};
    hydra_sampler_params p = hydra_sampler_default_params();
    p.repeat_penalty = 1.5f;
    p.penalty_last_n = 2;
    hydra_token tok;
    CHECK_OK(greedy_after(p, logits, 8, old, 3, &tok));
    CHECK_EQ_INT(tok, 0); /* 0 has left the window */
    CHECK_OK(greedy_after(p, logits, 8, recent, 3, &tok));
    CHECK_EQ_INT(tok, 1);
    p.penalty_last_n = 0;
    CHECK_OK(greedy_after(p, logits, 8, recent, 3, &tok));
    CHECK_EQ_INT(tok, 0);
}

TEST(sampler_sample_accepts_its_own_choice)
{
    /* With a strong repeat penalty, greedy alternates between two near-equal tokens. */
    const float logits[3] = {2.0f, 1.9f, 0.0f};
    hydra_sampler_params p = hydra_sampler_default_params();
    p.temperature = 0.0f;
    p.repeat_penalty = 1.2f;
    p.penalty_last_n = 1;
    hydra_token tok[4];
    CHECK_OK(draw(&p, logits, 3, tok, 4));
    CHECK_EQ_INT(tok[0], 0);
    CHECK_EQ_INT(tok[1], 1);
    CHECK_EQ_INT(tok[2], 0);
    CHECK_EQ_INT(tok[3], 1);
}

/* ------------------------------------------------------------ distributions */

/* Frequencies of n draws against expected probabilities: every token within
 * 5 standard deviations of n p (a false alarm is < 1e-5 per token). */
static bool frequencies_match(const hydra_token *tok, int n, const double *expect, int n_vocab, char *why,
                              size_t why_len)
{
    int count[MAX_VOCAB] = {0};
    for (int i = 0; i < n; i++)
        count[tok[i]]++;
    for (int v = 0; v < n_vocab; v++) {
        const double mean = n * expect[v], sd = sqrt(n * expect[v] * (1 - expect[v]));
        if (fabs(count[v] - mean) > 5 * sd + (expect[v] == 0 ? 0 : 1)) {
            snprintf(why, why_len, "token %d drawn %d times in %d, expected %.1f +- %.1f", v, count[v], n, mean, sd);
            return false;
        }
    }
    return true;
}

enum { N_DRAWS = 100000 };

/* N_DRAWS draws with p; *ok: whether their frequencies match expect (if
 * not, the reason in why). */
static hydra_status draws_match(const hydra_sampler_params *p, const float *logits, int n_vocab,
                                const double *expect, bool *ok, char *why, size_t why_len)
{
    hydra_token *tok = malloc(sizeof *tok * N_DRAWS);
    if (tok == NULL)
        return HYDRA_ERR_NOMEM;
    hydra_status st = draw(p, logits, n_vocab, tok, N_DRAWS);
    *ok = st == HYDRA_OK && frequencies_match(tok, N_DRAWS, expect, n_vocab, why, why_len);
    free(tok);
    return st;
}

TEST(sampler_draws_follow_the_tempered_softmax)
{
    static const float logits[5] = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f};
    const double t = 0.7;
    double expect[5], z = 0;
    for (int v = 0; v < 5; v++)
        z += expect[v] = exp(logits[v] / t);
    for (int v = 0; v < 5; v++)
        expect[v] /= z;
    hydra_sampler_params p = plain_params();
    p.temperature = (float)t;
    p.seed = 1234;
    bool ok;
    char why[200] = "";
    CHECK_OK(draws_match(&p, logits, 5, expect, &ok, why, sizeof why));
    if (!ok)
        FAIL("%s", why);
}

TEST(sampler_draws_follow_the_truncated_distribution)
{
    /* Defaults: top-k 40 (no cut here), top-p 0.95, min-p 0.05, temperature 0.8. */
    static const double probs[10] = {0.5, 0.25, 0.12, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.01};
    float logits[10];
    logits_of(probs, 10, logits);
    /* min-p 0.05 x 0.5 = 0.025 keeps three tokens, fewer than top-p 0.95 would */
    double expect[10] = {0}, z = 0;
    for (int v = 0; v < 3; v++)
        z += expect[v] = pow(probs[v], 1 / 0.8);
    for (int v = 0; v < 3; v++)
        expect[v] /= z;
    hydra_sampler_params p = hydra_sampler_default_params();
    p.seed = 77;
    bool ok;
    char why[200] = "";
    CHECK_OK(draws_match(&p, logits, 10, expect, &ok, why, sizeof why));
    if (!ok)
        FAIL("%s", why);
}

/* ------------------------------------------------------------ against the definitions */

typedef struct ranked {
    double logit;
    int id;
} ranked;

static int by_rank(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* The definitions of hydra.h, in double, over a full sort: how many ranks survive. */
static size_t reference_keep(const float *logits, int n, const hydra_sampler_params *p, ranked *r)
{
    for (int i = 0; i < n; i++)
        r[i] = (ranked){logits[i], i};
    qsort(r, (size_t)n, sizeof *r, by_rank);
    size_t keep = p->top_k > 0 && p->top_k < n ? (size_t)p->top_k : (size_t)n;
    double z = 0, cum = 0;
    for (size_t i = 0; i < keep; i++)
        z += exp(r[i].logit - r[0].logit);
    for (size_t i = 0; i < keep; i++) {
        cum += exp(r[i].logit - r[0].logit) / z;
        if (cum >= p->top_p) {
            keep = i + 1;
            break;
        }
    }
    size_t above = 1;
    while (above < keep && exp(r[above].logit - r[0].logit) >= p->min_p)
        above++;
    return above;
}

TEST(sampler_candidates_match_the_definitions_on_random_cases)
{
    float logits[MAX_VOCAB];
    ranked r[MAX_VOCAB];
    srand(2024);
    for (int trial = 0; trial < 300; trial++) {
        const int n = 2 + rand() % (MAX_VOCAB - 1);
        for (int i = 0; i < n; i++)
            logits[i] = (float)(rand() % 4000 - 2000) / 300.0f;
        hydra_sampler_params p = hydra_sampler_default_params();
        p.top_k = rand() % 3 == 0 ? 0 : 1 + rand() % n;
        p.top_p = rand() % 3 == 0 ? 1.0f : (float)(rand() % 1000) / 1000.0f;
        p.min_p = rand() % 3 == 0 ? 0.0f : (float)(rand() % 500) / 1000.0f;
        p.temperature = 0.2f + (float)(rand() % 200) / 100.0f;
        size_t keep = reference_keep(logits, n, &p, r);
        cands c;
        CHECK_OK(candidates_of(&p, logits, n, &c));
        double z = 0;
        for (size_t i = 0; i < keep; i++)
            z += exp((r[i].logit - r[0].logit) / p.temperature);
        bool ok = c.n == keep;
        for (size_t i = 0; ok && i < keep; i++)
            ok = c.ids[i] == r[i].id && fabs(c.probs[i] - exp((r[i].logit - r[0].logit) / p.temperature) / z) < 1e-5;
        if (!ok)
            FAIL("trial %d (n %d, top_k %d, top_p %g, min_p %g): %zu candidates, the definitions keep %zu", trial,
                 n, (int)p.top_k, (double)p.top_p, (double)p.min_p, c.n, keep);
    }
}

/* ------------------------------------------------------------ errors */

TEST(sampler_rejects_parameters_outside_their_range)
{
    hydra_sampler *s = NULL;
    hydra_sampler_params p = hydra_sampler_default_params();
    CHECK_EQ_INT(hydra_sampler_new(&p, 0, &s), HYDRA_ERR_INVALID_ARG);
    static const struct {
        int field;
        float value;
        const char *says;
    } bad[] = {{0, NAN, "temperature"}, {1, 1.5f, "top_p"},         {1, -0.1f, "top_p"},
               {2, 2.0f, "min_p"},      {3, 0.0f, "repeat_penalty"}, {4, INFINITY, "presence_penalty"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = hydra_sampler_default_params();
        float *fields[] = {&p.temperature, &p.top_p, &p.min_p, &p.repeat_penalty, &p.presence_penalty};
        *fields[bad[i].field] = bad[i].value;
        CHECK_EQ_INT(hydra_sampler_new(&p, 10, &s), HYDRA_ERR_INVALID_ARG);
        CHECK(s == NULL);
        CHECK(strstr(hydra_last_error(), bad[i].says) != NULL);
    }
    p = hydra_sampler_default_params();
    p.penalty_last_n = -1;
    CHECK_EQ_INT(hydra_sampler_new(&p, 10, &s), HYDRA_ERR_INVALID_ARG);
    CHECK_OK(hydra_sampler_new(NULL, 10, &s));
    CHECK_EQ_INT(hydra_sampler_accept(s, 10), HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(hydra_sampler_accept(s, -1), HYDRA_ERR_INVALID_ARG);
    hydra_sampler_free(s);
}

TEST(sampler_survives_nan_and_infinite_logits)
{
    const float some_nan[4] = {NAN, 1.0f, -INFINITY, NAN};
    const float none_finite[3] = {-INFINITY, NAN, -INFINITY};
    hydra_sampler_params p = hydra_sampler_default_params();
    hydra_token tok[50];
    CHECK_OK(draw(&p, some_nan, 4, tok, 50));
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(tok[i], 1);
    CHECK_EQ_INT(draw(&p, none_finite, 3, tok, 1), HYDRA_ERR_RANGE);
    p.temperature = 0.0f;
    CHECK_EQ_INT(draw(&p, none_finite, 3, tok, 1), HYDRA_ERR_RANGE);
    cands c;
    p = plain_params();
    CHECK_OK(candidates_of(&p, some_nan, 4, &c));
    CHECK_EQ_INT(c.n, 4);
    CHECK_EQ_INT(c.ids[0], 1);
    CHECK(c.probs[0] == 1.0f && c.probs[1] == 0.0f);
}

TEST(sampler_candidates_report_the_room_they_need)
{
    const float logits[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    hydra_sampler *s;
    hydra_token ids[2];
    float probs[2];
    size_t n = 0;
    hydra_sampler_params p = plain_params();
    CHECK_OK(hydra_sampler_new(&p, 4, &s));
    hydra_status st = hydra_sampler_candidates(s, logits, ids, probs, 2, &n);
    hydra_sampler_free(s);
    CHECK_EQ_INT(st, HYDRA_ERR_RANGE);
    CHECK_EQ_INT(n, 4);
}
