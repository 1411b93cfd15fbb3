/*
 * spec.c — speculative decoding over a target and a draft session (the
 * contract is in hydra.h, the design in docs/SPECULATIVE.md).
 *
 * One step:
 *   1. the draft session catches up with the accepted tokens and proposes
 *      up to k tokens, one decode each, keeping each proposal's
 *      distribution q (drafting stops early below p_min);
 *   2. the target evaluates [pending, d_0 .. d_{k-1}] (padded to the fixed
 *      width) in one pass, every row's logits: row i is p for the token
 *      after d_{i-1};
 *   3. drafts are accepted in order by the rejection rule of Leviathan et
 *      al. and Chen et al. (2023): keep x with probability min(1, p(x)/q(x)),
 *      else draw from norm(max(0, p - q)) and stop; all kept: a bonus from
 *      the last row;
 *   4. both caches are truncated to the accepted positions.
 * Without a draft session the model's own MTP block drafts (src/mtp.c):
 * it catches up on the accepted tokens from the target's hidden states
 * (the prompt's, then each verify pass's) and chains itself for k > 1.
 * Steps 1 and 3-4 are hydra_spec_draft and hydra_spec_accept, so that a
 * caller can evaluate step 2 itself (a server batching its slots).
 * Everything the step needs is allocated by hydra_spec_new.
 */
#include "hydra.h"

#include "error.h"
#include "mtp.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SPEC_MAX_DRAFT = 256 };

/* One distribution as hydra_sampler_candidates gives it. */
typedef struct dist {
    hydra_token *ids;
    float *probs;
    size_t n;
} dist;

struct hydra_spec {
    hydra_session *target, *draft; /* draft NULL: mtp drafts */
    mtp_drafter *mtp;
    hydra_spec_params p;
    bool greedy;
    int32_t n_vocab;
    hydra_sampler *target_sampler; /* the caller's parameters and penalty window */
    hydra_sampler *draft_sampler;  /* the same without penalties: the draft never rolls a window back */
    uint64_t rng[4];               /* xoshiro256**: acceptance and residual draws */
    hydra_token *history;          /* accepted tokens; the last is pending (not in the target) */
    size_t n_history, cap_history;
    hydra_token *drafts;           /* [n_draft_max] */
    float *q_of_draft;             /* [n_draft_max] q(d_i) */
    dist *q;                       /* [n_draft_max] each with n_vocab room */
    dist pd;                       /* the target's distribution of one row */
    float *dense;                  /* [n_vocab] zeros but while a residual is formed */
    float *weights;                /* [n_vocab] the residual's */
    hydra_token *batch;            /* [n_draft_max + 1] the verify pass's tokens */
    float *rows;                   /* [(n_draft_max + 1) x n_vocab] its logits */
    bool *width_seen;              /* [n_draft_max + 2] */
    int32_t n_draft, width;        /* of the verify batch handed out; width 0: none */
    uint64_t captures0;            /* graphs captured by the sessions before hydra_spec_new */
    hydra_spec_stats stats;
};

/* ------------------------------------------------------------ setup */

HYDRA_API hydra_spec_params hydra_spec_default_params(void)
{
    /* llama.cpp's common_params_speculative: n_max 16, p_min 0.75 */
    return (hydra_spec_params){.n_draft_max = 16, .p_min = 0.75f, .fixed_width = true};
}

static const char *token_text(const hydra_model *m, size_t i, size_t *len)
{
    const char *s = NULL;
    if (hydra_model_get_arr_str(m, "tokenizer.ggml.tokens", i, &s, len) != HYDRA_OK) {
        *len = 0;
        return "";
    }
    return s;
}

HYDRA_API hydra_status hydra_spec_check_vocab(const hydra_model *target, const hydra_model *draft)
{
    if (target == NULL || draft == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_check_vocab: two models are required");
    hydra_value_type et, ed;
    size_t nt = 0, nd = 0;
    const bool has_t = hydra_model_get_arr(target, "tokenizer.ggml.tokens", &et, &nt) == HYDRA_OK;
    const bool has_d = hydra_model_get_arr(draft, "tokenizer.ggml.tokens", &ed, &nd) == HYDRA_OK;
    if (has_t != has_d || nt != nd)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "the draft model's vocabulary has %zu tokens, the target's %zu: "
                          "a draft model must share the target's vocabulary", nd, nt);
    for (size_t i = 0; i < nt; i++) {
        size_t lt, ld;
        const char *st = token_text(target, i, &lt), *sd = token_text(draft, i, &ld);
        if (lt != ld || memcmp(st, sd, lt) != 0)
            return hydra_fail(HYDRA_ERR_INVALID_ARG, "the draft model's token %zu is '%.*s', the target's '%.*s': a "
                              "draft model must share the target's vocabulary", i, (int)(ld > 64 ? 64 : ld), sd,
                              (int)(lt > 64 ? 64 : lt), st);
    }
    return HYDRA_OK;
}

HYDRA_API void hydra_spec_free(hydra_spec *s)
{
    if (s == NULL)
        return;
    mtp_free(s->mtp);
    hydra_sampler_free(s->target_sampler);
    hydra_sampler_free(s->draft_sampler);
    for (int32_t i = 0; s->q != NULL && i < s->p.n_draft_max; i++) {
        free(s->q[i].ids);
        free(s->q[i].probs);
    }
    free(s->q);
    free(s->pd.ids);
    free(s->pd.probs);
    free(s->history);
    free(s->drafts);
    free(s->q_of_draft);
    free(s->dense);
    free(s->weights);
    free(s->batch);
    free(s->rows);
    free(s->width_seen);
    free(s);
}

static bool alloc_dist(dist *d, size_t n)
{
    d->ids = malloc(sizeof *d->ids * n);
    d->probs = malloc(sizeof *d->probs * n);
    return d->ids != NULL && d->probs != NULL;
}

static bool alloc_buffers(hydra_spec *s)
{
    const size_t nv = (size_t)s->n_vocab, k = (size_t)s->p.n_draft_max;
    s->cap_history = (size_t)hydra_session_n_ctx(s->target) + 1;
    s->history = malloc(sizeof *s->history * s->cap_history);
    s->drafts = malloc(sizeof *s->drafts * k);
    s->q_of_draft = malloc(sizeof *s->q_of_draft * k);
    s->q = calloc(k, sizeof *s->q);
    s->dense = calloc(nv, sizeof *s->dense);
    s->weights = malloc(sizeof *s->weights * nv);
    s->batch = malloc(sizeof *s->batch * (k + 1));
    s->rows = malloc(sizeof *s->rows * nv * (k + 1));
    s->width_seen = calloc(k + 2, sizeof *s->width_seen);
    bool ok = s->history && s->drafts && s->q_of_draft && s->q && s->dense && s->weights && s->batch && s->rows &&
              s->width_seen && alloc_dist(&s->pd, nv);
    for (size_t i = 0; ok && i < k; i++)
        ok = alloc_dist(&s->q[i], nv);
    return ok;
}

static hydra_status check_new(hydra_session *target, hydra_session *draft, const hydra_sampler_params *sampling,
                              const hydra_spec_params *p)
{
    if (target == NULL || sampling == NULL || p == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_new: a target session, sampling and params are required");
    if (draft == target)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_new: the draft must be a session of its own");
    if (draft != NULL && hydra_session_n_vocab(draft) != hydra_session_n_vocab(target))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "the draft model's output has %u tokens, the target's %u: a draft "
                          "model must share the target's vocabulary", hydra_session_n_vocab(draft),
                          hydra_session_n_vocab(target));
    if (p->n_draft_max < 1 || p->n_draft_max > SPEC_MAX_DRAFT)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "n_draft_max %d: must be in [1, %d]", (int)p->n_draft_max,
                          SPEC_MAX_DRAFT);
    if (!(p->p_min >= 0.0f && p->p_min <= 1.0f))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "p_min %g: must be in [0, 1]", (double)p->p_min);
    return HYDRA_OK;
}

/* The target's sampler (the caller's parameters and penalty window), the
 * draft's (the same without penalties: the draft never rolls a window
 * back) and the acceptance stream, all from sampling; on failure the old
 * ones stay. */
static hydra_status set_sampling(hydra_spec *s, const hydra_sampler_params *sampling)
{
    hydra_sampler_params dp = *sampling;
    dp.penalty_last_n = 0;
    hydra_sampler *target = NULL, *draft = NULL;
    hydra_status st = hydra_sampler_new(sampling, s->n_vocab, &target);
    if (st == HYDRA_OK)
        st = hydra_sampler_new(&dp, s->n_vocab, &draft);
    if (st != HYDRA_OK) {
        hydra_sampler_free(target);
        return st;
    }
    hydra_sampler_free(s->target_sampler);
    hydra_sampler_free(s->draft_sampler);
    s->target_sampler = target;
    s->draft_sampler = draft;
    s->greedy = sampling->temperature <= 0.0f;
    rng_seed(s->rng, sampling->seed ^ 0x5bec5bec5bec5becu); /* not the sampler's own stream */
    return HYDRA_OK;
}

/* CUDA graphs captured so far by every session the decoder drives. */
static uint64_t captures(const hydra_spec *s)
{
    hydra_graph_stats t = {0}, d = {0};
    hydra_session_graph_stats(s->target, &t);
    if (s->draft != NULL)
        hydra_session_graph_stats(s->draft, &d);
    return t.captures + d.captures + mtp_graph_captures(s->mtp);
}

HYDRA_API hydra_status hydra_spec_new(hydra_session *target, hydra_session *draft,
                                      const hydra_sampler_params *sampling, const hydra_spec_params *params,
                                      hydra_spec **out)
{
    if (out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_new: out is required");
    *out = NULL;
    hydra_status st = check_new(target, draft, sampling, params);
    if (st != HYDRA_OK)
        return st;
    hydra_spec *s = calloc(1, sizeof *s);
    if (s == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "speculative decoder");
    *s = (hydra_spec){.target = target, .draft = draft, .p = *params, .n_vocab = (int32_t)hydra_session_n_vocab(target)};
    st = set_sampling(s, sampling);
    if (st == HYDRA_OK && draft == NULL)
        st = mtp_new(target, &s->mtp);
    /* the drafter reads the verify rows' hidden states, kept for one step */
    if (st == HYDRA_OK && s->mtp != NULL && mtp_n_batch(s->mtp) < (int64_t)params->n_draft_max + 1)
        st = hydra_fail(HYDRA_ERR_INVALID_ARG, "MTP drafting: the target's n_batch %lld must be at least "
                        "n_draft_max + 1 = %d (a verify pass is one step)", (long long)mtp_n_batch(s->mtp),
                        (int)params->n_draft_max + 1);
    if (st == HYDRA_OK && s->mtp != NULL && params->fixed_width)
        st = mtp_set_width(s->mtp, (int64_t)params->n_draft_max + 1); /* its catch-ups too: one graph */
    if (st == HYDRA_OK && !alloc_buffers(s))
        st = hydra_fail(HYDRA_ERR_NOMEM, "speculative decoder: %d drafts over %d tokens", (int)params->n_draft_max,
                        (int)s->n_vocab);
    if (st != HYDRA_OK) {
        hydra_spec_free(s);
        return st;
    }
    s->captures0 = captures(s);
    *out = s;
    return HYDRA_OK;
}

HYDRA_API void hydra_spec_get_stats(const hydra_spec *s, hydra_spec_stats *out)
{
    if (out == NULL)
        return;
    *out = s != NULL ? s->stats : (hydra_spec_stats){0};
    if (s != NULL)
        out->n_captures = captures(s) - s->captures0;
}

/* ------------------------------------------------------------ start */

/* Tokens tokens[0, n) shares with the history, the pending token included. */
static size_t shared_with_history(const hydra_spec *s, const hydra_token *tokens, size_t n)
{
    size_t same = 0;
    while (same < n && same < s->n_history && s->history[same] == tokens[same])
        same++;
    return same;
}

/* Keeps the first keep positions of a session, or clears it when its
 * cache cannot rewind that far (a sliding window); what it keeps. */
static size_t rewind_to(hydra_session *sess, size_t keep)
{
    if (keep > hydra_session_n_past(sess))
        keep = hydra_session_n_past(sess);
    if (hydra_session_truncate(sess, (uint32_t)keep) == HYDRA_OK)
        return keep;
    hydra_session_clear(sess);
    return 0;
}

/* The target evaluates the prompt but its last token, reusing its first
 * `same` positions; so does the draft session. */
static hydra_status start_draft(hydra_spec *s, const hydra_token *prompt, size_t n, size_t same)
{
    const size_t keep = rewind_to(s->target, same);
    rewind_to(s->draft, same);
    return n - 1 > keep ? hydra_session_eval(s->target, prompt + keep, n - 1 - keep, NULL) : HYDRA_OK;
}

/* As start_draft, and the MTP drafter follows the target step by step,
 * since each of its rows reads the target's hidden state of that position
 * (kept for the last step only).  MTP row i reads token i + 1, so `same`
 * prompt tokens leave same - 1 rows valid; the target goes back as far,
 * so that it hands out the states of every row still to compute. */
static hydra_status start_mtp(hydra_spec *s, const hydra_token *prompt, size_t n, size_t same)
{
    size_t keep = same > 0 ? same - 1 : 0;
    if ((int64_t)keep > mtp_n_rows(s->mtp))
        keep = (size_t)mtp_n_rows(s->mtp);
    keep = rewind_to(s->target, keep);
    mtp_truncate(s->mtp, (int64_t)keep);
    const size_t step = (size_t)mtp_n_batch(s->mtp);
    hydra_status st = HYDRA_OK;
    for (size_t done = keep; st == HYDRA_OK && done < n - 1;) {
        const size_t len = n - 1 - done < step ? n - 1 - done : step;
        st = hydra_session_eval(s->target, prompt + done, len, NULL);
        done += len;
        if (st == HYDRA_OK)
            st = mtp_sync(s->mtp, prompt, (int64_t)done);
    }
    return st;
}

HYDRA_API hydra_status hydra_spec_start(hydra_spec *s, const hydra_token *prompt, size_t n)
{
    if (s == NULL || prompt == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_start: a decoder and a prompt are required");
    if (n == 0 || n > hydra_session_n_ctx(s->target))
        return hydra_fail(HYDRA_ERR_RANGE, "hydra_spec_start: a prompt of %zu tokens (the context holds %u)", n,
                          hydra_session_n_ctx(s->target));
    size_t same = shared_with_history(s, prompt, n - 1);
    s->n_history = 0; /* nothing is trusted until the prompt is in */
    hydra_status st = s->mtp ? start_mtp(s, prompt, n, same) : start_draft(s, prompt, n, same);
    if (st != HYDRA_OK)
        return st;
    memcpy(s->history, prompt, sizeof *prompt * n);
    s->n_history = n;
    hydra_sampler_reset(s->target_sampler);
    for (size_t i = 0; i < n && st == HYDRA_OK; i++)
        st = hydra_sampler_accept(s->target_sampler, prompt[i]);
    return st;
}

HYDRA_API hydra_status hydra_spec_restart(hydra_spec *s, const hydra_sampler_params *sampling,
                                          const hydra_token *tokens, size_t n)
{
    if (s == NULL || tokens == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_restart: a decoder and tokens are required");
    if (n == 0 || n > hydra_session_n_ctx(s->target))
        return hydra_fail(HYDRA_ERR_RANGE, "hydra_spec_restart: %zu tokens (the context holds %u)", n,
                          hydra_session_n_ctx(s->target));
    if (hydra_session_n_past(s->target) != n - 1)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_restart: the target holds %u positions, not the %zu "
                          "tokens before the pending one", hydra_session_n_past(s->target), n - 1);
    hydra_status st = sampling != NULL ? set_sampling(s, sampling) : HYDRA_OK;
    if (st != HYDRA_OK)
        return st;
    /* the draft holds a prefix of the old history: keep what it shares */
    size_t same = shared_with_history(s, tokens, n - 1);
    rewind_to(s->draft, same);
    mtp_truncate(s->mtp, same > 0 ? (int64_t)same - 1 : 0); /* rows it can't recompute fail the next draft */
    s->width = 0;
    memcpy(s->history, tokens, sizeof *tokens * n);
    s->n_history = n;
    hydra_sampler_reset(s->target_sampler);
    for (size_t i = 0; i < n && st == HYDRA_OK; i++)
        st = hydra_sampler_accept(s->target_sampler, tokens[i]);
    if (st != HYDRA_OK)
        s->n_history = 0;
    return st;
}

/* MTP row i reads token i + 1: rows below same - 1 hold for tokens. */
HYDRA_API size_t hydra_spec_reusable(const hydra_spec *s, const hydra_token *tokens, size_t n)
{
    if (s == NULL || s->mtp == NULL || tokens == NULL)
        return n;
    const size_t same = shared_with_history(s, tokens, n), valid = same > 0 ? same - 1 : 0;
    const size_t rows = (size_t)mtp_n_rows(s->mtp);
    return rows < valid ? rows : valid;
}

HYDRA_API hydra_status hydra_spec_follow(hydra_spec *s, const hydra_token *tokens, size_t n)
{
    if (s == NULL || tokens == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_follow: a decoder and tokens are required");
    if (s->mtp == NULL)
        return HYDRA_OK;
    const size_t past = hydra_session_n_past(s->target);
    if (n == 0 || n < past || n > s->cap_history)
        return hydra_fail(HYDRA_ERR_RANGE, "hydra_spec_follow: %zu tokens, the target holds %zu positions of %zu", n,
                          past, s->cap_history - 1);
    const size_t same = shared_with_history(s, tokens, n);
    mtp_truncate(s->mtp, same > 0 ? (int64_t)same - 1 : 0);
    memcpy(s->history, tokens, sizeof *tokens * n); /* what the rows read; hydra_spec_restart keeps them */
    s->n_history = n;
    s->width = 0;
    const size_t rows = past < n ? past : n - 1; /* rows whose next token is known */
    /* fewer: the first draft computes the rest (this step's states are kept) */
    return (int64_t)rows > mtp_n_rows(s->mtp) ? mtp_sync(s->mtp, tokens, (int64_t)rows) : HYDRA_OK;
}

/* ------------------------------------------------------------ drafting */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The largest probability of the softmax of logits: the draft's confidence. */
static double top_prob(const float *logits, int32_t n)
{
    float max = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > max)
            max = logits[i];
    double z = 0;
    for (int32_t i = 0; i < n; i++)
        z += exp((double)(logits[i] - max));
    return z > 0 ? 1.0 / z : 0.0;
}

/* Index of a draw from weights w[0, n) (not normalised, sum total). */
static size_t draw_index(uint64_t rng[4], const float *w, size_t n, double total)
{
    const double u = uniform01(rng) * total;
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += w[i];
        if (u < acc)
            return i;
    }
    size_t last = n - 1; /* rounding: the last token with weight */
    while (last > 0 && w[last] <= 0)
        last--;
    return last;
}

static hydra_status candidates(hydra_sampler *sm, const float *logits, int32_t n_vocab, dist *d)
{
    return hydra_sampler_candidates(sm, logits, d->ids, d->probs, (size_t)n_vocab, &d->n);
}

/* The drafter's distribution of the next draft, after it caught up with
 * every accepted token (pending included); NULL: no prediction (an MTP
 * drafter before the target holds a position). */
static hydra_status catch_up(hydra_spec *s, const float **logits)
{
    hydra_status st;
    if (s->mtp != NULL) {
        st = mtp_sync(s->mtp, s->history, (int64_t)s->n_history - 1);
        *logits = mtp_logits(s->mtp);
        return st;
    }
    const size_t have = hydra_session_n_past(s->draft);
    st = hydra_session_eval(s->draft, s->history + have, s->n_history - have, NULL);
    *logits = hydra_session_logits(s->draft);
    return st;
}

/* The drafter takes draft t, for the distribution of the next one. */
static hydra_status advance(hydra_spec *s, hydra_token t, const float **logits)
{
    hydra_status st = s->mtp ? mtp_chain(s->mtp, t) : hydra_session_decode(s->draft, t);
    *logits = s->mtp ? mtp_logits(s->mtp) : hydra_session_logits(s->draft);
    return st;
}

/* Brings the drafter up to every accepted token, then proposes up to k
 * tokens; the number proposed. */
static hydra_status draft_tokens(hydra_spec *s, int32_t k, int32_t *n_draft)
{
    *n_draft = 0;
    if (k == 0)
        return HYDRA_OK;
    const float *logits = NULL;
    hydra_status st = catch_up(s, &logits);
    for (int32_t i = 0; st == HYDRA_OK && logits != NULL && i < k; i++) {
        if (s->p.p_min > 0 && top_prob(logits, s->n_vocab) < (double)s->p.p_min)
            break;
        dist *q = &s->q[i];
        st = candidates(s->draft_sampler, logits, s->n_vocab, q);
        if (st != HYDRA_OK)
            break;
        const size_t pick = s->greedy ? 0 : draw_index(s->rng, q->probs, q->n, 1.0);
        s->drafts[i] = q->ids[pick];
        s->q_of_draft[i] = q->probs[pick];
        *n_draft = i + 1;
        if (i + 1 < k)
            st = advance(s, s->drafts[i], &logits);
    }
    return st;
}

/* ------------------------------------------------------------ verifying */

static float prob_of(const dist *d, hydra_token t)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->ids[i] == t)
            return d->probs[i];
    return 0.0f;
}

/* Whether draft i survives the target's row (s->pd). */
static bool accept_draft(hydra_spec *s, int32_t i)
{
    if (s->greedy)
        return s->pd.ids[0] == s->drafts[i];
    const double ratio = (double)prob_of(&s->pd, s->drafts[i]) / (double)s->q_of_draft[i];
    return uniform01(s->rng) < ratio;
}

/* After draft i was rejected: a token from norm(max(0, p - q_i)). */
static hydra_token residual_token(hydra_spec *s, int32_t i)
{
    const dist *p = &s->pd, *q = &s->q[i];
    if (s->greedy)
        return p->ids[0];
    for (size_t j = 0; j < q->n; j++)
        s->dense[q->ids[j]] = q->probs[j];
    double total = 0;
    for (size_t j = 0; j < p->n; j++) {
        const float r = p->probs[j] - s->dense[p->ids[j]];
        s->weights[j] = r > 0 ? r : 0;
        total += s->weights[j];
    }
    for (size_t j = 0; j < q->n; j++)
        s->dense[q->ids[j]] = 0;
    /* p <= q everywhere cannot reject; rounding may still get here */
    const float *w = total > 0 ? s->weights : p->probs;
    return p->ids[draw_index(s->rng, w, p->n, total > 0 ? total : 1.0)];
}

/* Runs the rule over the verify rows; out gets the kept drafts and the
 * target's own token; *n_accepted the drafts kept. */
static hydra_status judge(hydra_spec *s, int32_t n_draft, const float *rows, hydra_token *out, int32_t *n_accepted)
{
    const size_t nv = (size_t)s->n_vocab;
    int32_t a = 0;
    hydra_token own = -1;
    for (int32_t i = 0; i <= n_draft && own < 0; i++) {
        hydra_status st = candidates(s->target_sampler, rows + (size_t)i * nv, s->n_vocab, &s->pd);
        if (st != HYDRA_OK)
            return st;
        if (i < n_draft && accept_draft(s, i)) {
            out[a++] = s->drafts[i];
            st = hydra_sampler_accept(s->target_sampler, s->drafts[i]);
        } else {
            own = i < n_draft ? residual_token(s, i)
                              : s->pd.ids[s->greedy ? 0 : draw_index(s->rng, s->pd.probs, s->pd.n, 1.0)];
            st = hydra_sampler_accept(s->target_sampler, own);
        }
        if (st != HYDRA_OK)
            return st;
    }
    out[a] = own;
    *n_accepted = a;
    return HYDRA_OK;
}

static int32_t min_i32(int64_t a, int64_t b) { return (int32_t)(a < b ? a : b); }

/* The verify batch: the pending token and n_draft drafts, padded to width
 * by repeating the last token (the padded rows are never read). */
static void build_batch(hydra_spec *s, int32_t n_draft, int32_t width)
{
    s->batch[0] = s->history[s->n_history - 1];
    for (int32_t i = 0; i < width - 1; i++)
        s->batch[i + 1] = i < n_draft ? s->drafts[i] : s->batch[i];
    if (!s->width_seen[width]) {
        s->width_seen[width] = true;
        s->stats.n_widths++;
    }
    s->stats.n_verify_rows += (uint64_t)width;
}

/* Both caches back to the accepted tokens (pending excluded). */
static hydra_status roll_back(hydra_spec *s, size_t n_kept)
{
    hydra_status st = hydra_session_truncate(s->target, (uint32_t)n_kept);
    if (st != HYDRA_OK)
        return hydra_fail(st, "rolling back the verify pass: %s (the target's n_batch must be at least "
                          "n_draft_max + 1 = %d)", hydra_last_error(), (int)s->p.n_draft_max + 1);
    /* the MTP drafter drops its chained rows itself (mtp_sync) */
    if (s->draft != NULL && hydra_session_n_past(s->draft) > n_kept)
        st = hydra_session_truncate(s->draft, (uint32_t)n_kept);
    if (st != HYDRA_OK)
        hydra_session_clear(s->draft); /* catches up from the history next step */
    return HYDRA_OK;
}

/* After a failed step nothing of it is kept: the target holds the
 * accepted tokens again, the draft catches up next time. */
static void undo_step(hydra_spec *s)
{
    const uint32_t past = (uint32_t)(s->n_history - 1);
    if (hydra_session_n_past(s->target) > past)
        hydra_session_truncate(s->target, past);
    hydra_session_clear(s->draft);
    mtp_truncate(s->mtp, (int64_t)past);
    s->width = 0;
}

HYDRA_API hydra_status hydra_spec_draft(hydra_spec *s, size_t max_tokens, const hydra_token **tokens, size_t *width)
{
    if (s == NULL || tokens == NULL || width == NULL || max_tokens == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_draft: a decoder and room for a token are required");
    *tokens = NULL;
    *width = 0;
    if (s->n_history == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_draft: no prompt (call hydra_spec_start first)");
    const int64_t past = (int64_t)s->n_history - 1;
    if (hydra_session_n_past(s->target) != (uint32_t)past)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_draft: the target holds %u positions, the decoder "
                          "expects %lld (evaluated by someone else?)", hydra_session_n_past(s->target),
                          (long long)past);
    const int64_t room = (int64_t)hydra_session_n_ctx(s->target) - past;
    if (room < 1)
        return hydra_fail(HYDRA_ERR_RANGE, "the context of %u positions is full", hydra_session_n_ctx(s->target));
    const hydra_session *drafter = s->draft ? s->draft : s->target; /* MTP: a cache as long as the target's */
    const int64_t draft_room = (int64_t)hydra_session_n_ctx(drafter) - (int64_t)s->n_history + 1;
    int32_t k = min_i32(s->p.n_draft_max, (int64_t)max_tokens - 1);
    k = min_i32(k, room - 1);
    k = min_i32(k, draft_room > 0 ? draft_room : 0);
    const double t0 = now_ms();
    hydra_status st = draft_tokens(s, k, &s->n_draft);
    s->stats.draft_ms += now_ms() - t0;
    if (st != HYDRA_OK) {
        undo_step(s);
        return st;
    }
    s->width = s->p.fixed_width ? min_i32(s->p.n_draft_max + 1, room) : s->n_draft + 1;
    build_batch(s, s->n_draft, s->width);
    *tokens = s->batch;
    *width = (size_t)s->width;
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_spec_accept(hydra_spec *s, const float *rows, hydra_token *out, size_t *n_out)
{
    if (s == NULL || rows == NULL || out == NULL || n_out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_accept: a decoder, the rows and room are required");
    *n_out = 0;
    if (s->width == 0)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_accept: no verify batch (call hydra_spec_draft first)");
    const size_t past = s->n_history - 1;
    if (hydra_session_n_past(s->target) != past + (size_t)s->width) {
        undo_step(s);
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_accept: the target holds %u positions, not the %zu "
                          "of the verify batch", hydra_session_n_past(s->target), past + (size_t)s->width);
    }
    int32_t a = 0;
    hydra_status st = judge(s, s->n_draft, rows, out, &a);
    if (st == HYDRA_OK)
        st = roll_back(s, past + 1 + (size_t)a);
    if (st != HYDRA_OK) {
        undo_step(s);
        return st;
    }
    memcpy(s->history + s->n_history, out, sizeof *out * (size_t)(a + 1));
    s->n_history += (size_t)a + 1;
    *n_out = (size_t)a + 1;
    s->stats.n_steps++;
    s->stats.n_drafted += (uint64_t)s->n_draft;
    s->stats.n_accepted += (uint64_t)a;
    s->stats.n_generated += (uint64_t)a + 1;
    s->width = 0;
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_spec_step(hydra_spec *s, size_t max_tokens, hydra_token *out, size_t *n_out)
{
    if (s == NULL || out == NULL || n_out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_spec_step: a decoder and room for a token are required");
    *n_out = 0;
    const hydra_token *batch;
    size_t width;
    hydra_status st = hydra_spec_draft(s, max_tokens, &batch, &width);
    if (st != HYDRA_OK)
        return st;
    const double t0 = now_ms();
    st = hydra_session_eval(s->target, batch, width, s->rows);
    s->stats.verify_ms += now_ms() - t0;
    if (st != HYDRA_OK) {
        undo_step(s);
        return st;
    }
    return hydra_spec_accept(s, s->rows, out, n_out);
}
