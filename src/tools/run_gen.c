/*
 * run_gen.c — the generation loop every mode shares: a session and a
 * sampler built from the flags, prompts fed with the longest already-held
 * prefix reused (a chat re-renders the whole conversation each turn), then
 * sample → print → decode until -n, an end-of-generation token, a stop
 * string, a full context or Ctrl-C.  Text streams through the streaming
 * detokenizer (whole UTF-8 characters only) and the stop-string filter.
 */
#include "run.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

enum { DEFAULT_N_CTX = 4096 };

double run_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ------------------------------------------------------------ Ctrl-C */

volatile sig_atomic_t run_interrupted;

/* The first Ctrl-C asks the loop to stop after the current token; a second
 * one, while the first is still pending (a long prompt evaluation), quits. */
static void on_sigint(int sig)
{
    (void)sig;
    if (run_interrupted)
        _exit(RUN_INTERRUPTED);
    run_interrupted = 1;
}

void run_catch_interrupts(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a read of the chat's input returns */
    sigaction(SIGINT, &sa, NULL);
}

/* ------------------------------------------------------------ setup */

/* -c: as given; unset, 4096 or the model's context_length when smaller. */
uint32_t gen_context_size(const run_opts *o, const hydra_model *m)
{
    if (o->n_ctx >= 0)
        return (uint32_t)o->n_ctx;
    char key[160];
    uint64_t train = 0;
    snprintf(key, sizeof key, "%s.context_length", hydra_model_arch(m));
    if (hydra_model_get_u64(m, key, &train) == HYDRA_OK && train > 0 && train < DEFAULT_N_CTX)
        return (uint32_t)train;
    return DEFAULT_N_CTX;
}

/* -s -1: a fresh seed, kept below 2^63 so that -s can repeat it. */
static uint64_t choose_seed(long long seed)
{
    if (seed >= 0)
        return (uint64_t)seed;
    uint64_t s;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s)
        s = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15u ^ (uint64_t)getpid();
    return s >> 1;
}

static int make_sampler(gen_ctx *g)
{
    const run_opts *o = g->o;
    hydra_sampler_params sp = o->sampling;
    sp.seed = choose_seed(o->seed);
    sp.penalty_last_n = o->repeat_last_n < 0 ? (int32_t)hydra_session_n_ctx(g->session) : o->repeat_last_n;
    hydra_status st = hydra_sampler_new(&sp, (int32_t)hydra_session_n_vocab(g->session), &g->sampler);
    if (st != HYDRA_OK) {
        run_error("%s", hydra_last_error());
        return RUN_ERROR;
    }
    g->sampling = sp;
    return RUN_OK;
}

int gen_open(gen_ctx *g, const run_opts *o, const hydra_model *m, size_t n_batch, double load_start)
{
    *g = (gen_ctx){.o = o, .model = m, .timing = {.load_start = load_start}};
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = gen_context_size(o, m);
    sp.n_threads = o->n_threads;
    sp.kv_type = o->kv_type;
    if (n_batch > sp.n_batch)
        sp.n_batch = (uint32_t)n_batch;
    run_hybrid_params(o, &sp);
    if (run_check_gpu_layers(o, m) != RUN_OK)
        return RUN_ERROR;
    hydra_status st = hydra_session_create(&g->session, m, &sp);
    if (st != HYDRA_OK) {
        run_error("cannot run the model (%s): %s", hydra_strerror(st), hydra_last_error());
        return RUN_ERROR;
    }
    if (o->profile_experts != NULL || o->trace_experts != NULL)
        st = hydra_session_set_expert_profile(g->session, true, o->trace_experts ? hydra_session_n_ctx(g->session) : 0);
    if (st != HYDRA_OK) {
        run_error("expert profile: %s", hydra_last_error());
        gen_close(g);
        return RUN_ERROR;
    }
    g->history = malloc(sizeof *g->history * hydra_session_n_ctx(g->session));
    if (g->history == NULL) {
        run_error("out of memory for a context of %u tokens", hydra_session_n_ctx(g->session));
        gen_close(g);
        return RUN_ERROR;
    }
    if (make_sampler(g) != RUN_OK || ((o->model_draft != NULL || o->spec_mtp) && gen_spec_open(g) != RUN_OK)) {
        gen_close(g);
        return RUN_ERROR;
    }
    g->timing.load_ms = run_now_ms() - load_start;
    return RUN_OK;
}

int gen_save_profile(const gen_ctx *g)
{
    const char *paths[2] = {g->o->profile_experts, g->o->trace_experts};
    for (int trace = 0; trace < 2 && g->session != NULL; trace++)
        if (paths[trace] != NULL && hydra_session_save_expert_profile(g->session, paths[trace], trace) != HYDRA_OK) {
            run_error("%s", hydra_last_error());
            return RUN_ERROR;
        }
    return RUN_OK;
}

void gen_close(gen_ctx *g)
{
    if (g->o != NULL && g->o->stats && g->session != NULL) {
        run_print_hybrid_stats(g->session, stderr);
        run_print_graph_stats(g->session, stderr);
    }
    gen_spec_close(g);
    hydra_sampler_free(g->sampler);
    hydra_session_free(g->session);
    free(g->history);
    g->sampler = NULL;
    g->session = NULL;
    g->history = NULL;
}

/* ------------------------------------------------------------ prompt */

int gen_feed(gen_ctx *g, const hydra_token *tokens, size_t n, float *all_logits)
{
    const uint32_t n_ctx = hydra_session_n_ctx(g->session);
    if (n == 0 || n > n_ctx) {
        run_error(n == 0 ? "the prompt is empty" : "the prompt is %zu tokens, more than the context of %u (-c)", n,
                  n_ctx);
        return RUN_ERROR;
    }
    size_t keep = 0;
    while (all_logits == NULL && keep < n - 1 && keep < g->n_history && g->history[keep] == tokens[keep])
        keep++;
    /* A session that cannot rewind that far (a sliding-window cache keeps only
     * its window) starts over: evaluating at the wrong position is worse. */
    if (keep < g->n_history && hydra_session_truncate(g->session, (uint32_t)keep) != HYDRA_OK) {
        hydra_session_clear(g->session);
        keep = 0;
    }
    const double t0 = run_now_ms();
    /* speculative decoding evaluates the prompt but its last token itself */
    hydra_status st = g->spec ? hydra_spec_start(g->spec, tokens, n)
                              : hydra_session_eval(g->session, tokens + keep, n - keep, all_logits);
    g->timing.prompt_ms += run_now_ms() - t0;
    if (st != HYDRA_OK) {
        g->n_history = hydra_session_n_past(g->session);
        run_error("evaluating the prompt: %s", hydra_last_error());
        return RUN_ERROR;
    }
    g->timing.n_prompt += (long)(n - keep);
    memcpy(g->history + keep, tokens + keep, sizeof *tokens * (n - keep));
    g->n_history = n;
    for (size_t i = keep; i < n; i++)
        hydra_sampler_accept(g->sampler, tokens[i]); /* in range: the session took them */
    return RUN_OK;
}

/* ------------------------------------------------------------ output */

static bool keep_reply(gen_output *out, const char *text, size_t len)
{
    if (out->reply_len + len + 1 > out->reply_cap) {
        size_t cap = 2 * (out->reply_len + len + 1);
        char *r = realloc(out->reply, cap);
        if (r == NULL)
            return false;
        out->reply = r;
        out->reply_cap = cap;
    }
    memcpy(out->reply + out->reply_len, text, len);
    out->reply_len += len;
    out->reply[out->reply_len] = '\0';
    return true;
}

/* Text that passed the filter: to stdout, and to the reply when kept. */
static bool emit(gen_output *out, const char *text, size_t len)
{
    fwrite(text, 1, len, stdout);
    return !out->keep || keep_reply(out, text, len);
}

typedef struct text_stream {
    hydra_detokenizer *detok;
    stop_filter stop;
} text_stream;

static bool stream_token(text_stream *ts, gen_output *out, hydra_token tok)
{
    const char *text, *pass;
    size_t len, pass_len;
    return hydra_detokenizer_push(ts->detok, tok, &text, &len) == HYDRA_OK &&
           stop_filter_push(&ts->stop, text, len, &pass, &pass_len) == HYDRA_OK && emit(out, pass, pass_len);
}

static bool stream_end(text_stream *ts, gen_output *out)
{
    const char *text, *pass;
    size_t len, pass_len;
    hydra_detokenizer_flush(ts->detok, &text, &len);
    bool ok = stop_filter_push(&ts->stop, text, len, &pass, &pass_len) == HYDRA_OK && emit(out, pass, pass_len);
    stop_filter_flush(&ts->stop, &pass, &pass_len);
    return ok && emit(out, pass, pass_len);
}

/* ------------------------------------------------------------ the loop */

/* One token: sampled, then printed (ids or text).  GEN_LENGTH to go on. */
static gen_end next_token(gen_ctx *g, text_stream *ts, gen_output *out, int remaining, bool first,
                          hydra_token *tok)
{
    const double t0 = run_now_ms();
    hydra_status st = g->spec ? gen_spec_next(g, remaining, tok)
                              : hydra_sampler_sample(g->sampler, hydra_session_logits(g->session), tok);
    if (g->spec == NULL) /* the decoder's steps count as evaluation (run_spec.c) */
        g->timing.sample_ms += run_now_ms() - t0;
    g->timing.n_sampled++;
    if (st != HYDRA_OK) {
        run_error("sampling: %s", hydra_last_error());
        return GEN_ERROR;
    }
    if (g->o->print_ids) {
        printf(first ? "%d" : " %d", (int)*tok);
    } else {
        if (!g->o->ignore_eos && hydra_token_is_eog(g->model, *tok))
            return GEN_EOG;
        if (!stream_token(ts, out, *tok)) {
            run_error("printing token %d: %s", (int)*tok, hydra_last_error());
            return GEN_ERROR;
        }
        if (ts->stop.stopped)
            return GEN_STOP;
    }
    fflush(stdout);
    return GEN_LENGTH;
}

static gen_end decode(gen_ctx *g, hydra_token tok)
{
    if (g->n_history == hydra_session_n_ctx(g->session))
        return GEN_CONTEXT;
    const double t0 = run_now_ms();
    hydra_status st = g->spec ? HYDRA_OK : hydra_session_decode(g->session, tok); /* the decoder evaluated it */
    g->timing.eval_ms += run_now_ms() - t0;
    if (st != HYDRA_OK) {
        run_error("evaluating token %d: %s", (int)tok, hydra_last_error());
        return GEN_ERROR;
    }
    g->timing.n_eval++;
    g->history[g->n_history++] = tok;
    return GEN_LENGTH;
}

gen_end gen_run(gen_ctx *g, int n_predict, gen_output *out)
{
    text_stream ts = {0};
    stop_filter_init(&ts.stop, g->o->stops, g->o->n_stops);
    if (hydra_detokenizer_new(g->model, g->o->special, out->text_start, &ts.detok) != HYDRA_OK) {
        run_error("%s", hydra_last_error());
        return GEN_ERROR;
    }
    gen_end end = GEN_LENGTH;
    for (int i = 0; end == GEN_LENGTH && (n_predict < 0 || i < n_predict); i++) {
        hydra_token tok;
        if (run_interrupted)
            end = GEN_INTERRUPTED;
        else if ((end = next_token(g, &ts, out, n_predict < 0 ? -1 : n_predict - i, i == 0, &tok)) == GEN_LENGTH &&
                 (n_predict < 0 || i + 1 < n_predict))
            end = decode(g, tok); /* the last token needs no evaluation */
    }
    if (g->o->print_ids)
        printf("\n");
    else if (end != GEN_ERROR && !stream_end(&ts, out))
        end = GEN_ERROR;
    fflush(stdout);
    hydra_detokenizer_free(ts.detok);
    stop_filter_free(&ts.stop);
    return end;
}

/* ------------------------------------------------------------ reports */

void gen_print_sampling(const gen_ctx *g)
{
    const hydra_sampler_params *sp = &g->sampling;
    fprintf(stderr,
            "hydra-run: sampling: temp %.2f, top-k %d, top-p %.3f, min-p %.3f, repeat-penalty %.3f (last %d), "
            "presence %.3f, frequency %.3f, seed %" PRIu64 "\n",
            (double)sp->temperature, (int)sp->top_k, (double)sp->top_p, (double)sp->min_p,
            (double)sp->repeat_penalty, (int)sp->penalty_last_n, (double)sp->presence_penalty,
            (double)sp->frequency_penalty, sp->seed);
}

static void print_rate(const char *label, double ms, long n)
{
    fprintf(stderr, "hydra-run: %-16s = %10.2f ms / %5ld tokens", label, ms, n);
    if (n > 0 && ms > 0)
        fprintf(stderr, " (%8.2f ms per token, %9.2f tokens per second)", ms / (double)n, 1e3 * (double)n / ms);
    fputc('\n', stderr);
}

void gen_print_timing(const gen_ctx *g)
{
    const run_timing *t = &g->timing;
    fprintf(stderr, "\nhydra-run: %-16s = %10.2f ms\n", "load time", t->load_ms);
    print_rate("prompt eval time", t->prompt_ms, t->n_prompt);
    print_rate("eval time", t->eval_ms, t->n_eval);
    print_rate("sampling time", t->sample_ms, t->n_sampled);
    gen_spec_print(g);
    fprintf(stderr, "hydra-run: %-16s = %10.2f ms\n", "total time", run_now_ms() - t->load_start);
}

/* ------------------------------------------------------------ tokens */

/* Whether tokenizing with add_special puts a BOS first for this model. */
static bool model_adds_bos(const hydra_model *m)
{
    hydra_token ids[4];
    size_t n = 0;
    return hydra_token_bos(m) >= 0 && hydra_tokenize(m, "", 0, true, false, ids, 4, &n) == HYDRA_OK && n > 0 &&
           ids[0] == hydra_token_bos(m);
}

int run_tokenize_text(const hydra_model *m, const char *text, size_t len, bool add_bos, hydra_token **out, size_t *n)
{
    const bool bos = add_bos && model_adds_bos(m);
    size_t cap = len + 8, got = 0;
    hydra_token *ids = malloc(sizeof *ids * cap);
    hydra_status st = ids ? hydra_tokenize(m, text, len, false, true, ids + bos, cap - bos, &got) : HYDRA_ERR_NOMEM;
    if (st == HYDRA_ERR_RANGE) {
        hydra_token *more = realloc(ids, sizeof *ids * (got + 1));
        st = more ? hydra_tokenize(m, text, len, false, true, (ids = more) + bos, got, &got) : HYDRA_ERR_NOMEM;
    }
    if (st != HYDRA_OK) {
        run_error("cannot tokenize the prompt (%s): %s", hydra_strerror(st), hydra_last_error());
        free(ids);
        return RUN_ERROR;
    }
    const bool add = bos && (got == 0 || ids[bos] != hydra_token_bos(m));
    if (add)
        ids[0] = hydra_token_bos(m);
    else if (bos)
        memmove(ids, ids + 1, sizeof *ids * got);
    *out = ids;
    *n = got + add;
    return RUN_OK;
}

void run_print_tokens(const hydra_model *m, const hydra_token *tokens, size_t n)
{
    fprintf(stderr, "hydra-run: the prompt is %zu tokens:\n", n);
    for (size_t i = 0; i < n; i++) {
        char piece[256];
        size_t len = 0;
        if (hydra_token_to_piece(m, tokens[i], true, piece, sizeof piece, &len) != HYDRA_OK)
            len = 0;
        fprintf(stderr, "%8d -> '", (int)tokens[i]);
        for (size_t k = 0; k < len; k++)
            if (piece[k] == '\n' || piece[k] == '\t')
                fputs(piece[k] == '\n' ? "\\n" : "\\t", stderr);
            else
                fputc(piece[k], stderr);
        fprintf(stderr, "'\n");
    }
}
