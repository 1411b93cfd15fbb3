/*
 * Speculative decoding in hydra-serve (-md): the engine call that keeps
 * every row's logits of a verify pass beside other sessions' rows
 * (hydra_session_eval_batch_logits) against token-by-token evaluation,
 * and the server with a draft model: temperature-0 replies equal the
 * replies without one for several concurrent clients (a model drafting
 * for itself keeps every draft; a coarser quantisation of it is sometimes
 * rejected, so the rollback runs), streaming, max_tokens and stop strings
 * cut as without, the acceptance counters in timings and /metrics, one
 * verify width throughout when padded, and bad flags refused naming the
 * flag.  With --spec-mtp (the model's MTP block drafting) the replies equal
 * a plain server's too, over two rounds (cache reuse).
 */
#include "server/server_util.h"
#include "quant.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ engine */

enum { ROWS_CTX = 128, ROWS_BATCH = 32, ROWS_VERIFY = 5 };

static hydra_status open_synth(const char *preset, uint32_t type, const char *file, hydra_model **out)
{
    synth_params sp;
    hydra_status st = synth_preset(preset, &sp);
    if (type != 0)
        sp.type = type;
    return st == HYDRA_OK ? util_open_synth(&sp, file, out) : st;
}

static int32_t token_at(int seq, int k, int32_t n_vocab)
{
    return (int32_t)((3 + seq * 97 + k * 29) % n_vocab);
}

/* Session 0 verifies ROWS_VERIFY rows (every row's logits) beside a decode
 * row of session 1 and a prompt chunk of session 2, after a prefix; each
 * of session 0's rows must equal, bit for bit, the logits of a session
 * that evaluated the same tokens one at a time, and the other sessions'
 * last logits those of sessions evaluated alone. */
static void check_rows(test_ctx *t_, const char *preset)
{
    hydra_model *m = NULL;
    hydra_session *batched[3] = {0}, *alone[3] = {0};
    float *rows = NULL;
    char why[256] = "";
    char file[96];
    snprintf(file, sizeof file, "spec-rows-%s.gguf", preset);
    hydra_status st = open_synth(preset, 0, file, &m);
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = ROWS_CTX;
    p.n_batch = ROWS_BATCH;
    p.n_threads = 2;
    for (int i = 0; i < 3 && st == HYDRA_OK; i++) {
        st = hydra_session_create(&batched[i], m, &p);
        if (st == HYDRA_OK)
            st = hydra_session_create(&alone[i], m, &p);
    }
    const int32_t nv = st == HYDRA_OK ? (int32_t)hydra_session_n_vocab(alone[0]) : 1;
    if (st == HYDRA_OK && (rows = malloc(sizeof *rows * (size_t)nv * ROWS_VERIFY)) == NULL)
        st = HYDRA_ERR_NOMEM;
    /* a prefix of 6, 3 and 0 tokens, evaluated alone on both sides */
    const int prefix[3] = {6, 3, 0};
    int32_t toks[3][ROWS_BATCH];
    for (int i = 0; i < 3 && st == HYDRA_OK; i++)
        for (int k = 0; k < prefix[i] && st == HYDRA_OK; k++) {
            const int32_t tk = token_at(i, k, nv);
            st = hydra_session_decode(batched[i], tk);
            if (st == HYDRA_OK)
                st = hydra_session_decode(alone[i], tk);
        }
    const size_t n[3] = {ROWS_VERIFY, 1, 11};
    for (int i = 0; i < 3; i++)
        for (size_t k = 0; k < n[i]; k++)
            toks[i][k] = token_at(i, prefix[i] + (int)k, nv);
    const int32_t *tp[3] = {toks[0], toks[1], toks[2]};
    float *want[3] = {rows, NULL, NULL};
    if (st == HYDRA_OK)
        st = hydra_session_eval_batch_logits(batched, tp, n, 3, want);
    if (st != HYDRA_OK)
        snprintf(why, sizeof why, "%s", hydra_last_error());
    bool ok = st == HYDRA_OK;
    /* session 0 token by token: row k against its logits */
    for (size_t k = 0; ok && k < n[0]; k++) {
        ok = hydra_session_decode(alone[0], toks[0][k]) == HYDRA_OK;
        const float *ref = hydra_session_logits(alone[0]);
        for (int32_t v = 0; ok && v < nv; v++)
            if (memcmp(&ref[v], &rows[(size_t)k * nv + v], sizeof(float)) != 0) {
                snprintf(why, sizeof why, "row %zu, logit %d: %.9g batched vs %.9g token by token", k, (int)v,
                         (double)rows[(size_t)k * nv + v], (double)ref[v]);
                ok = false;
            }
    }
    /* its last logits are kept too; the others are as alone */
    if (ok && memcmp(hydra_session_logits(batched[0]), rows + (size_t)(n[0] - 1) * nv, sizeof(float) * nv) != 0) {
        snprintf(why, sizeof why, "session 0's kept logits are not its last row");
        ok = false;
    }
    for (int i = 1; ok && i < 3; i++) {
        ok = hydra_session_eval(alone[i], toks[i], n[i], NULL) == HYDRA_OK &&
             memcmp(hydra_session_logits(alone[i]), hydra_session_logits(batched[i]), sizeof(float) * nv) == 0 &&
             hydra_session_n_past(alone[i]) == hydra_session_n_past(batched[i]);
        if (!ok)
            snprintf(why, sizeof why, "session %d differs from evaluating it alone", i);
    }
    if (ok && hydra_session_n_past(batched[0]) != (uint32_t)(prefix[0] + ROWS_VERIFY)) {
        snprintf(why, sizeof why, "session 0 holds %u positions", hydra_session_n_past(batched[0]));
        ok = false;
    }
    for (int i = 0; i < 3; i++) {
        hydra_session_free(batched[i]);
        hydra_session_free(alone[i]);
    }
    free(rows);
    hydra_model_close(m);
    if (!ok)
        FAIL("%s: %s", preset, why);
}

TEST(spec_batch_rows_match_token_by_token_qwen3moe)
{
    check_rows(TEST_CTX, "qwen3moe-tiny");
}

TEST(spec_batch_rows_match_token_by_token_deepseek2_mla)
{
    check_rows(TEST_CTX, "deepseek2-tiny");
}

TEST(spec_batch_rows_match_token_by_token_gptoss_sliding)
{
    check_rows(TEST_CTX, "gptoss-tiny");
}

/* ------------------------------------------------------------ server */

enum { N_CLIENTS = 4, MAX_TOKENS = 40 };

static const char *const PROMPTS[N_CLIENTS] = {
    "The river runs past the old mill and under the stone bridge",
    "Once upon a time there was a lighthouse keeper who counted ships",
    "In the morning the market opens early and the baker sells",
    "A short note on the history of clocks: the first",
};

/* One reply: its text, finish reason, token count and spec timings. */
typedef struct reply {
    int port;
    char body[512];
    int status;
    char text[4096];
    char finish[16];
    int completion_tokens;
    int draft_n, draft_n_accepted; /* -1: absent from timings */
    char logprobs[8192];           /* choices[0].logprobs as JSON */
} reply;

static bool post(reply *r)
{
    ts_resp resp;
    if (!ts_request(r->port, "POST", "/v1/completions", NULL, r->body, &resp))
        return false;
    r->status = resp.status;
    cJSON *j = ts_json(&resp);
    ts_resp_free(&resp);
    const cJSON *choice = ts_first_choice(j, r->text, sizeof r->text, r->finish, sizeof r->finish);
    r->completion_tokens = ts_number(j, "usage", "completion_tokens");
    r->draft_n = ts_number(j, "timings", "draft_n");
    r->draft_n_accepted = ts_number(j, "timings", "draft_n_accepted");
    char *lp = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(choice, "logprobs"));
    snprintf(r->logprobs, sizeof r->logprobs, "%s", lp ? lp : "");
    free(lp);
    cJSON_Delete(j);
    return true;
}

static void *post_thread(void *arg)
{
    reply *r = arg;
    if (!post(r))
        r->status = -1;
    return NULL;
}

/* The N_CLIENTS prompts at once, greedy, MAX_TOKENS each (extra: more
 * JSON fields, "" for none). */
static bool post_all(int port, const char *extra, reply out[N_CLIENTS])
{
    pthread_t th[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        out[i] = (reply){.port = port};
        snprintf(out[i].body, sizeof out[i].body,
                 "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true%s}", PROMPTS[i],
                 MAX_TOKENS, extra);
        if (pthread_create(&th[i], NULL, post_thread, &out[i]) != 0)
            return false;
    }
    bool ok = true;
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        ok = ok && out[i].status == 200;
    }
    return ok;
}

/* A counter's value in a /metrics text (-1 when absent). */
static double metric(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(text, key);
    return p != NULL ? strtod(p + strlen(key), NULL) : -1;
}

/* The reference: the same requests to a server without a draft model. */
static bool plain_replies(reply out[N_CLIENTS], char *log, size_t len)
{
    test_server s;
    if (!ts_start(&s, NULL, "-np 4")) {
        snprintf(log, len, "%s", ts_log(&s));
        return false;
    }
    const bool ok = post_all(s.port, "", out);
    for (int i = 0; ok && i < N_CLIENTS; i++)
        if (out[i].draft_n != -1) {
            snprintf(log, len, "timings carry draft_n without -md");
            ts_stop(&s);
            return false;
        }
    return ts_stop(&s) == 0 && ok;
}

/* A tiny model of the server's vocabulary in another type (a draft that
 * is sometimes rejected). */
static const char *coarse_draft(void)
{
    static char path[4096];
    if (path[0] == '\0') {
        synth_params p;
        snprintf(path, sizeof path, "%s", util_scratch_path("server-tiny-q4_0.gguf"));
        if (synth_preset("tiny", &p) != HYDRA_OK)
            return NULL;
        p.type = QT_Q4_0;
        if (synth_write(path, &p) != HYDRA_OK)
            path[0] = '\0';
    }
    return path[0] ? path : NULL;
}

/* Starts a server with draft (and flags, whose --spec-draft-n-max is
 * n_max), sends the prompts at once and checks the replies against
 * plain[], the timings' counts against /metrics. */
static void check_same_replies(test_ctx *t_, const reply plain[N_CLIENTS], const char *draft, const char *flags,
                               int n_max, bool all_kept)
{
    test_server s;
    char args[1024];
    snprintf(args, sizeof args, "-np 4 -md %s %s --metrics", draft, flags);
    TS_START(s, NULL, args);
    reply got[N_CLIENTS];
    TS_CHECK(s, post_all(s.port, "", got));
    int drafted = 0, kept = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        if (strcmp(got[i].text, plain[i].text) != 0) {
            ts_stop(&s);
            FAIL("client %d, %s: speculative '%s' vs plain '%s'", i, args, got[i].text, plain[i].text);
        }
        TS_CHECK(s, got[i].completion_tokens == MAX_TOKENS && strcmp(got[i].finish, "length") == 0);
        TS_CHECK(s, got[i].draft_n >= got[i].draft_n_accepted && got[i].draft_n_accepted >= 0);
        drafted += got[i].draft_n;
        kept += got[i].draft_n_accepted;
    }
    TS_CHECK(s, drafted > 0);
    if (all_kept)
        TS_CHECK(s, kept == drafted);
    else
        TS_CHECK(s, kept < drafted); /* the rollback ran */
    ts_resp r;
    TS_CHECK(s, ts_request(s.port, "GET", "/metrics", NULL, NULL, &r) && r.status == 200);
    const double m_drafted = metric(r.body, "hydra:spec_draft_tokens_total");
    const double m_kept = metric(r.body, "hydra:spec_accepted_tokens_total");
    const double passes = metric(r.body, "hydra:spec_verify_passes_total");
    const double rows = metric(r.body, "hydra:spec_verify_rows_total");
    const double widths = metric(r.body, "hydra:spec_verify_widths");
    ts_resp_free(&r);
    TS_CHECK(s, m_drafted == drafted && m_kept == kept);
    /* padded: one verify width throughout, so one graph would serve every
     * pass; else each pass is its drafts + 1 rows */
    const bool fixed = strstr(flags, "--spec-fixed-width") != NULL;
    if (passes <= 0 || (fixed && (widths != 1 || rows != passes * (n_max + 1))) ||
        (!fixed && (widths < 1 || rows != passes + drafted))) {
        ts_stop(&s);
        FAIL("%s: %g verify widths, %g passes, %g rows, %d drafted", flags, widths, passes, rows, drafted);
    }
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_spec_greedy_equals_plain_for_concurrent_clients)
{
    char log[4096] = "";
    reply plain[N_CLIENTS];
    if (!plain_replies(plain, log, sizeof log))
        FAIL("the plain server: %s", log);
    const char *self = ts_model(), *coarse = coarse_draft();
    CHECK(self != NULL && coarse != NULL);
    /* drafting for itself: every draft kept */
    check_same_replies(TEST_CTX, plain, self, "--spec-draft-n-max 4 --spec-draft-p-min 0 --spec-fixed-width", 4, true);
    /* a Q4_0 copy drafting: some rejected and rolled back; exact widths, then padded */
    check_same_replies(TEST_CTX, plain, coarse, "--spec-draft-n-max 5 --spec-draft-p-min 0", 5, false);
    check_same_replies(TEST_CTX, plain, coarse, "--spec-draft-n-max 3 --spec-draft-p-min 0 --spec-fixed-width", 3,
                       false);
    /* two slots (requests queue), the other spellings, a p-min (drafting may stop early) */
    check_same_replies(TEST_CTX, plain, self, "--draft-max 16 --draft-p-min 0.05 -np 2", 16, true);
}

/* deepseek2-mtp-tiny (one MTP block) as a server model. */
static const char *mtp_model_path(void)
{
    static char path[4096];
    if (path[0] == '\0') {
        synth_params p;
        snprintf(path, sizeof path, "%s", util_scratch_path("server-mtp-tiny.gguf"));
        if (synth_preset("deepseek2-mtp-tiny", &p) != HYDRA_OK || synth_write(path, &p) != HYDRA_OK)
            path[0] = '\0';
    }
    return path[0] ? path : NULL;
}

/* --spec-mtp: every slot drafts with the model's MTP block.  Two rounds of
 * the same prompts (the second reuses each slot's cache, so the drafter
 * resumes from the rows it kept), greedy replies equal to a plain server's,
 * drafts counted in timings and /metrics. */
TEST(server_spec_mtp_greedy_equals_plain)
{
    const char *model = mtp_model_path();
    CHECK(model != NULL);
    test_server plain, spec;
    reply want[N_CLIENTS], got[N_CLIENTS];
    TS_START(plain, model, "-np 4");
    TS_CHECK(plain, post_all(plain.port, "", want));
    CHECK_EQ_INT(ts_stop(&plain), 0);
    TS_START(spec, model, "-np 4 --spec-mtp --spec-draft-n-max 3 --spec-draft-p-min 0 --metrics");
    int drafted = 0;
    for (int round = 0; round < 2; round++) {
        TS_CHECK(spec, post_all(spec.port, "", got));
        for (int i = 0; i < N_CLIENTS; i++) {
            if (strcmp(got[i].text, want[i].text) != 0) {
                ts_stop(&spec);
                FAIL("round %d, client %d: MTP-speculative '%s' vs plain '%s'", round, i, got[i].text, want[i].text);
            }
            TS_CHECK(spec, got[i].completion_tokens == MAX_TOKENS && got[i].draft_n > 0 &&
                               got[i].draft_n >= got[i].draft_n_accepted && got[i].draft_n_accepted >= 0);
            drafted += got[i].draft_n;
        }
    }
    ts_resp r;
    TS_CHECK(spec, ts_request(spec.port, "GET", "/metrics", NULL, NULL, &r) && r.status == 200);
    const double m_drafted = metric(r.body, "hydra:spec_draft_tokens_total");
    ts_resp_free(&r);
    TS_CHECK(spec, m_drafted == drafted);
    CHECK_EQ_INT(ts_stop(&spec), 0);
}

/* Streams a completion and returns the joined text. */
static bool stream_text(int port, const char *body, ts_stream *st)
{
    ts_resp r;
    if (!ts_request(port, "POST", "/v1/completions", NULL, body, &r) || r.status != 200) {
        ts_resp_free(&r);
        return false;
    }
    ts_parse_stream(r.body, r.body_len, st);
    ts_resp_free(&r);
    return st->done && st->well_formed;
}

TEST(server_spec_stream_max_tokens_stop_logprobs_and_sampling)
{
    test_server plain, spec;
    TS_START(plain, NULL, "-np 2");
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true}",
             PROMPTS[0], MAX_TOKENS);
    reply ref = {.port = plain.port};
    snprintf(ref.body, sizeof ref.body, "%s", body);
    TS_CHECK(plain, post(&ref) && ref.status == 200 && strlen(ref.text) > 8);
    /* a stop string from the middle of the reply; max_tokens that ends inside a verify pass */
    char stop[8];
    const size_t mid = strlen(ref.text) / 2;
    snprintf(stop, sizeof stop, "%.3s", ref.text + mid);
    char stop_body[1024], short_body[1024];
    snprintf(stop_body, sizeof stop_body,
             "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stop\":[\"%s\"]}",
             PROMPTS[0], MAX_TOKENS, stop);
    /* logprobs: each accepted token's from its own verify row */
    snprintf(short_body, sizeof short_body,
             "{\"prompt\":\"%s\",\"max_tokens\":7,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":2}", PROMPTS[0]);
    const bool quotable = strchr(stop, '"') == NULL && strchr(stop, '\\') == NULL;
    reply plain_stop = {.port = plain.port}, plain_short = {.port = plain.port};
    snprintf(plain_stop.body, sizeof plain_stop.body, "%s", stop_body);
    snprintf(plain_short.body, sizeof plain_short.body, "%s", short_body);
    TS_CHECK(plain, !quotable || (post(&plain_stop) && plain_stop.status == 200));
    TS_CHECK(plain, post(&plain_short) && plain_short.status == 200 && plain_short.completion_tokens == 7);
    CHECK_EQ_INT(ts_stop(&plain), 0);

    char args[1024];
    snprintf(args, sizeof args, "-np 2 -md %s --spec-draft-n-max 4 --spec-draft-p-min 0", ts_model());
    TS_START(spec, NULL, args);
    ts_stream st = {0};
    char stream_body[1100];
    snprintf(stream_body, sizeof stream_body, "%.*s,\"stream\":true}", (int)strlen(body) - 1, body);
    TS_CHECK(spec, stream_text(spec.port, stream_body, &st) && strcmp(st.text, ref.text) == 0 &&
                     strcmp(st.finish, "length") == 0 && st.n_events >= 2);
    ts_stream_free(&st);
    reply got = {.port = spec.port};
    snprintf(got.body, sizeof got.body, "%s", short_body);
    TS_CHECK(spec, post(&got) && strcmp(got.text, plain_short.text) == 0 && got.completion_tokens == 7 &&
                     strcmp(got.finish, "length") == 0);
    TS_CHECK(spec, strlen(plain_short.logprobs) > 20 && strcmp(got.logprobs, plain_short.logprobs) == 0);
    /* sampling: the rejection rule keeps every draft when the draft's
     * distribution is the target's (itself, no penalties); a seed repeats */
    reply hot[2];
    for (int i = 0; i < 2; i++) {
        hot[i] = (reply){.port = spec.port};
        snprintf(hot[i].body, sizeof hot[i].body,
                 "{\"prompt\":\"%s\",\"max_tokens\":24,\"temperature\":1.0,\"seed\":5,\"ignore_eos\":true}",
                 PROMPTS[1]);
        TS_CHECK(spec, post(&hot[i]) && hot[i].status == 200 && hot[i].completion_tokens == 24);
    }
    TS_CHECK(spec, strcmp(hot[0].text, hot[1].text) == 0 && hot[0].draft_n > 0 &&
                     hot[0].draft_n_accepted == hot[0].draft_n);
    if (quotable) {
        snprintf(got.body, sizeof got.body, "%s", stop_body);
        TS_CHECK(spec, post(&got) && strcmp(got.text, plain_stop.text) == 0 && strcmp(got.finish, "stop") == 0);
    }
    CHECK_EQ_INT(ts_stop(&spec), 0);
}

/* Runs hydra-serve with args; its exit status and whether stderr says part. */
static bool refused(const char *args, int status, const char *part, char *why, size_t len)
{
    tool_run r;
    if (!util_run_tool(NULL, "hydra-serve", args, NULL, &r))
        return false;
    const bool ok = r.status == status && strstr(r.err, part) != NULL;
    if (!ok)
        snprintf(why, len, "'%s': status %d, stderr '%s'", args, r.status, r.err);
    tool_run_free(&r);
    return ok;
}

#define REFUSED(args, status, part)                                           \
    do {                                                                      \
        if (!refused((args), (status), (part), why, sizeof why))              \
            FAIL("not refused as expected: %s", why);                         \
    } while (0)

TEST(server_spec_bad_flags_are_refused_naming_them)
{
    char why[1024] = "", args[4096];
    const char *m = ts_model();
    hydra_model *other = NULL;
    CHECK(m != NULL);
    /* a model of another vocabulary as the draft */
    CHECK_OK(open_synth("gptoss-tiny", 0, "spec-other-vocab.gguf", &other));
    hydra_model_close(other);
    char other_path[4096];
    snprintf(other_path, sizeof other_path, "%s", util_scratch_path("spec-other-vocab.gguf"));
    snprintf(args, sizeof args, "-m %s --port 0 -md %s --spec-draft-n-max 0", m, m);
    REFUSED(args, 2, "--spec-draft-n-max 0: must be an integer from 1 to 256");
    snprintf(args, sizeof args, "-m %s --port 0 -md %s --spec-draft-p-min 1.5", m, m);
    REFUSED(args, 2, "--spec-draft-p-min 1.5: must be a number from 0 to 1");
    snprintf(args, sizeof args, "-m %s --port 0 -md %s -np 4 -b 40", m, m);
    REFUSED(args, 2, "-b 40: with -md, at least -np x (--spec-draft-n-max + 1) = 4 x 17 = 68");
    snprintf(args, sizeof args, "-m %s --port 0 -md %s -c 32 -np 2 --spec-draft-n-max 15", m, m);
    REFUSED(args, 1, "-md: a slot's context of 16 positions is less than -np x (--spec-draft-n-max + 1) = 32");
    snprintf(args, sizeof args, "-m %s --port 0 -md %s", m, util_scratch_path("no-such-draft.gguf"));
    REFUSED(args, 1, "-md ");
    snprintf(args, sizeof args, "-m %s --port 0 -md %s", m, other_path);
    REFUSED(args, 1, "a draft model must share the target's vocabulary");
    snprintf(args, sizeof args, "-m %s --port 0 -md %s --spec-mtp", m, m);
    REFUSED(args, 2, "-md and --spec-mtp: give one drafter");
    snprintf(args, sizeof args, "-m %s --port 0 --spec-mtp", m); /* the tiny model has no MTP block */
    REFUSED(args, 1, "--spec-mtp: slot 0: ");
}
