/*
 * slot.c — one slot serving one request: its session (the KV cache), and
 * for the request a sampler, a streaming detokenizer and the stop-string
 * filter.  After each evaluation the slot samples a token, turns it into
 * text (whole UTF-8 characters, stop strings held back and cut) and posts
 * it; the engine evaluates that token in its next step.  As in hydra-run,
 * the last token sampled is never evaluated: nothing reads its logits.
 * With a draft model (-md) the slot's decoder (hydra_spec) drafts after
 * the first token, the engine evaluates the verify rows in its step, and
 * the slot takes the accepted tokens one by one, exactly as sampled ones
 * (docs/SPECULATIVE.md, "hydra-serve").  With --spec-mtp the model's MTP
 * block drafts; it reads the session's hidden states, which last one step,
 * so it follows every prompt chunk (slot_followed_prefill).
 */
#include "slot.h"

#include "metrics.h"

#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

hydra_status slot_init(slot *s, int id, const hydra_model *m, const hydra_session_params *sp)
{
    *s = (slot){.id = id};
    hydra_status st = hydra_session_create(&s->session, m, sp);
    if (st != HYDRA_OK)
        return st;
    s->n_ctx = hydra_session_n_ctx(s->session);
    s->tokens = malloc(sizeof *s->tokens * s->n_ctx);
    s->hashes = malloc(sizeof *s->hashes * (s->n_ctx / CACHE_BLOCK + 1));
    if (s->tokens == NULL || s->hashes == NULL) {
        slot_free(s);
        return HYDRA_ERR_NOMEM;
    }
    return HYDRA_OK;
}

static void release(slot *s)
{
    hydra_sampler_free(s->sampler);
    hydra_detokenizer_free(s->detok);
    stop_filter_free(&s->stop);
    s->sampler = NULL;
    s->detok = NULL;
    s->task = NULL;
    s->state = SLOT_IDLE;
    s->last_used = serve_now_ms();
}

hydra_status slot_init_spec(slot *s, const hydra_model *draft_model, const hydra_session_params *dp,
                            const hydra_spec_params *sp)
{
    const hydra_sampler_params sampling = hydra_sampler_default_params(); /* each request sets its own */
    hydra_status st = draft_model != NULL ? hydra_session_create(&s->draft, draft_model, dp) : HYDRA_OK;
    if (st == HYDRA_OK)
        st = hydra_spec_new(s->session, s->draft, &sampling, sp, &s->spec);
    if (st == HYDRA_OK) {
        const size_t n = (size_t)(sp->n_draft_max + 1) * hydra_session_n_vocab(s->session);
        s->rows = malloc(sizeof *s->rows * n);
        if (s->rows == NULL)
            st = hydra_fail(HYDRA_ERR_NOMEM, "the verify rows' logits (%zu floats)", n);
    }
    return st;
}

void slot_free(slot *s)
{
    release(s);
    hydra_spec_free(s->spec);
    hydra_session_free(s->draft);
    free(s->rows);
    hydra_session_free(s->session);
    free(s->tokens);
    free(s->hashes);
    *s = (slot){0};
}

void slot_fail(slot *s, outbox *ob, int status, const char *fmt, ...)
{
    char message[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (status >= 500)
        serve_log("slot %d: %s", s->id, message);
    metrics_finished(FINISH_ERROR);
    outbox_fail(ob, s->task, status, "%s", message);
    release(s);
}

void slot_begin(slot *s, const hydra_model *m, srv_task *t, size_t n_cached, outbox *ob)
{
    s->task = t;
    s->t_begin = serve_now_ms();
    s->result = (task_out){.slot = s->id, .timings = {.n_prompt = (int)t->n_prompt, .n_cached = (int)n_cached}};
    hydra_status st = hydra_sampler_new(&t->gen.sampling, (int32_t)hydra_session_n_vocab(s->session), &s->sampler);
    if (st == HYDRA_OK)
        st = hydra_detokenizer_new(m, false, t->gen.text_start, &s->detok);
    if (st != HYDRA_OK) {
        slot_fail(s, ob, st == HYDRA_ERR_NOMEM ? 503 : 400, "%s", hydra_last_error());
        return;
    }
    /* the penalties look back over the prompt too, as in llama.cpp */
    for (size_t i = 0; i < t->n_prompt; i++)
        hydra_sampler_accept(s->sampler, t->prompt[i]);
    stop_filter_init(&s->stop, (const char *const *)t->gen.stops, t->gen.n_stops);
    s->state = SLOT_PREFILL;
    s->feed = t->prompt + n_cached;
    s->n_feed = t->n_prompt - n_cached;
}

/* Text of one token through the detokenizer and the stop filter, with its
 * logprobs (lp, or NULL). */
static bool emit_token(slot *s, hydra_token tok, const logprob_entry *lp, outbox *ob)
{
    const char *text, *pass;
    size_t len, pass_len;
    if (hydra_detokenizer_push(s->detok, tok, &text, &len) != HYDRA_OK ||
        stop_filter_push(&s->stop, text, len, &pass, &pass_len) != HYDRA_OK)
        return false;
    outbox_token(ob, s->task, pass, pass_len, lp);
    return true;
}

/* Takes one generated token: timings, its text and logprobs (from logits,
 * the row it was chosen from), and the end conditions.  n_held: the
 * positions the cache holds before the token (it still has to be
 * evaluated unless the request ends here).  True when the request goes on
 * (the token is s->next). */
static bool take_token(slot *s, const hydra_model *m, outbox *ob, hydra_token tok, const float *logits,
                       size_t n_held)
{
    srv_task *t = s->task;
    task_timings *tm = &s->result.timings;
    const double now = serve_now_ms();
    if (tm->n_predicted++ == 0) {
        s->t_first = now;
        metrics_first_token((now - t->t_submit) / 1e3);
    } else {
        metrics_next_token((now - s->t_last) / 1e3);
    }
    s->t_last = now;
    if (!t->gen.ignore_eos && hydra_token_is_eog(m, tok)) {
        outbox_text(ob, t, "", 0, 1);
        slot_end(s, FINISH_STOP, ob);
        return false;
    }
    logprob_entry lp;
    if (t->gen.n_logprobs >= 0)
        logprobs_of(logits, (int32_t)hydra_session_n_vocab(s->session), tok, t->gen.n_logprobs, &lp);
    if (!emit_token(s, tok, t->gen.n_logprobs >= 0 ? &lp : NULL, ob)) {
        slot_fail(s, ob, 500, "detokenizing token %d: %s", (int)tok, hydra_last_error());
        return false;
    }
    if (s->stop.stopped) {
        slot_end(s, FINISH_STOP, ob);
        return false;
    }
    if ((t->gen.n_predict >= 0 && tm->n_predicted >= t->gen.n_predict) || n_held >= s->n_ctx) {
        slot_end(s, FINISH_LENGTH, ob); /* max_tokens, or no room to evaluate the token */
        return false;
    }
    s->next = tok;
    return true;
}

/* The decoder takes over after the first token: the session holds the
 * cache's tokens, the sampled token is pending. */
static void spec_begin(slot *s, outbox *ob)
{
    s->tokens[s->n_tokens] = s->next; /* room: take_token went on, so n_tokens < n_ctx */
    if (hydra_spec_restart(s->spec, &s->task->gen.sampling, s->tokens, s->n_tokens + 1) != HYDRA_OK) {
        slot_fail(s, ob, 500, "starting speculative decoding: %s", hydra_last_error());
        return;
    }
    s->result.timings.speculative = true;
}

void slot_sampled_step(slot *s, const hydra_model *m, outbox *ob)
{
    task_timings *tm = &s->result.timings;
    if (s->state == SLOT_PREFILL) {
        s->state = SLOT_GENERATE;
        tm->prompt_ms = serve_now_ms() - s->t_begin;
        metrics_prompt(tm->n_prompt - tm->n_cached, tm->n_cached);
    }
    hydra_token tok;
    const float *logits = hydra_session_logits(s->session);
    if (hydra_sampler_sample(s->sampler, logits, &tok) != HYDRA_OK) {
        slot_fail(s, ob, 500, "sampling: %s", hydra_last_error());
        return;
    }
    if (take_token(s, m, ob, tok, logits, s->n_tokens) && s->spec != NULL)
        spec_begin(s, ob);
}

bool slot_followed_prefill(slot *s, outbox *ob)
{
    if (s->spec == NULL || hydra_spec_follow(s->spec, s->task->prompt, s->task->n_prompt) == HYDRA_OK)
        return true;
    slot_fail(s, ob, 500, "the MTP drafter following the prompt: %s", hydra_last_error());
    return false;
}

bool slot_draft(slot *s, outbox *ob)
{
    const int n_predict = s->task->gen.n_predict;
    /* tokens the request may still generate after the pending one (counted already) */
    const size_t left = n_predict >= 0 ? (size_t)(n_predict - s->result.timings.n_predicted) : s->n_ctx;
    if (hydra_spec_draft(s->spec, left, &s->verify, &s->n_verify) != HYDRA_OK) {
        slot_fail(s, ob, 500, "drafting: %s", hydra_last_error());
        return false;
    }
    return true;
}

void slot_verified_step(slot *s, const hydra_model *m, outbox *ob)
{
    hydra_spec_stats before, after;
    hydra_spec_get_stats(s->spec, &before);
    hydra_token out[s->n_verify]; /* a step gives at most the drafts and one token of its own */
    size_t n_out;
    if (hydra_spec_accept(s->spec, s->rows, out, &n_out) != HYDRA_OK) {
        slot_fail(s, ob, 500, "verifying: %s", hydra_last_error());
        return;
    }
    hydra_spec_get_stats(s->spec, &after);
    const int drafted = (int)(after.n_drafted - before.n_drafted), kept = (int)(after.n_accepted - before.n_accepted);
    s->result.timings.draft_n += drafted;
    s->result.timings.draft_n_accepted += kept;
    metrics_spec(drafted, kept, (int)s->n_verify);
    const size_t base = s->n_tokens;             /* the pending token's position */
    cache_append(s, s->verify, n_out);           /* the pending token and the kept drafts */
    const size_t n_vocab = hydra_session_n_vocab(s->session);
    for (size_t i = 0; i < n_out; i++)
        if (!take_token(s, m, ob, out[i], s->rows + i * n_vocab, base + 1 + i))
            return;
}

void slot_end(slot *s, finish_kind finish, outbox *ob)
{
    srv_task *t = s->task;
    if (finish == FINISH_STOP || finish == FINISH_LENGTH) {
        const char *text, *pass;
        size_t len, pass_len;
        hydra_detokenizer_flush(s->detok, &text, &len);
        if (stop_filter_push(&s->stop, text, len, &pass, &pass_len) == HYDRA_OK)
            outbox_text(ob, t, pass, pass_len, 0);
        stop_filter_flush(&s->stop, &pass, &pass_len);
        outbox_text(ob, t, pass, pass_len, 0);
        if (s->stop.stopped)
            finish = FINISH_STOP; /* the held tail completed a stop string */
    }
    if (s->result.timings.n_predicted > 0)
        s->result.timings.predicted_ms = s->t_last - s->t_first;
    metrics_finished(finish);
    outbox_done(ob, t, finish, &s->result);
    release(s);
}
