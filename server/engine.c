/*
 * engine.c — the engine thread: loads the model, then repeats
 *
 *   1. cancelled requests leave (queued ones at once, running ones free
 *      their slot);
 *   2. waiting requests take idle slots, in arrival order, each the slot
 *      whose cache shares the longest prefix with its prompt (cache.c);
 *   3. one step: the sampled token of every generating slot plus chunks of
 *      the prompts being read, oldest first, up to -b tokens in all,
 *      evaluated in one forward pass (hydra_session_eval_batch); then
 *      every slot that has new logits samples.  With a draft model (-md)
 *      a generating slot first drafts with its own draft session, and its
 *      verify rows (pending token + drafts) take its place in the same
 *      pass, every row's logits kept; then it accepts (slot.c).
 *
 * Slots are touched only by this thread.  The lock guards the waiting
 * queue, the stop flag and the snapshot that /slots and /metrics read.
 */
#include "engine.h"

#include "metrics.h"
#include "slot.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

enum { DEFAULT_SLOT_CTX = 4096 };

/* One slot's share of a step: tokens at its next positions; rows: NULL,
 * or where every row's logits go (a verify pass). */
typedef struct step_item {
    slot *s;
    const hydra_token *tokens;
    size_t n;
    float *rows;
} step_item;

typedef struct slot_view {
    slot_state state;
    long long n_tokens;
    int n_predicted;
} slot_view;

struct engine {
    /* settings */
    const serve_opts *o;
    uv_loop_t *loop;
    engine_loaded_fn on_loaded;
    void *user;
    uv_async_t loaded_async;
    outbox ob;
    int handles_open;
    pthread_t thread;
    bool thread_started;
    _Atomic int state;
    char error[512];
    /* after loading: read-only */
    hydra_model *model;
    hydra_model *draft_model; /* -md; NULL: none */
    hydra_chat_template *tmpl;
    char tmpl_why[512];
    toolcall_format tool_format;
    uint64_t model_hash;
    uint32_t slot_ctx;
    int n_slots;
    /* the engine thread's */
    slot *slots;
    step_item *items;
    /* under lock */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    srv_task *waiting, *waiting_tail;
    int n_waiting;
    bool stop;
    slot_view *view;
    long long kv_used;
};

/* ------------------------------------------------------------ tasks */

srv_task *task_new(task_kind kind)
{
    srv_task *t = calloc(1, sizeof *t);
    if (t != NULL) {
        t->kind = kind;
        t->slot_id = -1;
        atomic_init(&t->cancel, false);
    }
    return t;
}

void task_free(srv_task *t)
{
    if (t == NULL)
        return;
    free(t->prompt);
    free(t->hashes);
    for (int i = 0; i < t->gen.n_stops; i++)
        free(t->gen.stops[i]);
    free(t->slot_file);
    sbuf_free(&t->out.text);
    sbuf_free(&t->out.logprobs);
    free(t);
}

/* ------------------------------------------------------------ loading */

static bool keep_loading(float fraction, void *user)
{
    (void)fraction;
    engine *e = user;
    pthread_mutex_lock(&e->lock);
    const bool stop = e->stop;
    pthread_mutex_unlock(&e->lock);
    return !stop;
}

/* Positions per slot: -c split among the slots, or 4096 each (at most the
 * model's training context). */
static uint32_t slot_context(const engine *e)
{
    if (e->o->n_ctx > 0)
        return (uint32_t)(e->o->n_ctx / e->o->n_parallel);
    char key[160];
    uint64_t train = 0;
    snprintf(key, sizeof key, "%s.context_length", hydra_model_arch(e->model));
    if (hydra_model_get_u64(e->model, key, &train) == HYDRA_OK && train > 0 && train < DEFAULT_SLOT_CTX)
        return (uint32_t)train;
    return DEFAULT_SLOT_CTX;
}

/* The template: --chat-template when given (an error there is fatal), else
 * the model's own (when it has none or hydra cannot parse it, chat
 * requests are refused with the reason). */
static bool load_template(engine *e)
{
    const char *text;
    hydra_status st = hydra_chat_model_template(e->model, e->o->chat_template, &text);
    if (st == HYDRA_OK)
        st = hydra_chat_template_new(text, &e->tmpl);
    if (st == HYDRA_OK) {
        e->tool_format = toolcall_format_of(text);
        return true;
    }
    if (e->o->chat_template != NULL) {
        snprintf(e->error, sizeof e->error, "--chat-template: %s", hydra_last_error());
        return false;
    }
    snprintf(e->tmpl_why, sizeof e->tmpl_why,
             "the model has no usable chat template (%s); start the server with --chat-template NAME (%s)",
             hydra_last_error(), hydra_chat_builtin_names());
    return true;
}

static uint64_t model_fingerprint(const hydra_model *m)
{
    const uint64_t facts[] = {hydra_model_n_params(m), hydra_model_n_bytes(m), hydra_model_file_size(m),
                              hydra_model_tensor_count(m), (uint64_t)hydra_vocab_size(m)};
    const char *arch = hydra_model_arch(m);
    return XXH64(facts, sizeof facts, XXH64(arch, strlen(arch), 0));
}

/* A step's worth of rows through the slot's session, then forgotten (as
 * llama-server warms up): the weights are paged in and the buffers a step
 * led by this session touches exist before the first request, whose time
 * to first token then measures serving, not page faults. */
static bool warm_up(engine *e, slot *s)
{
    const int n = e->n_slots < (int)s->n_ctx ? e->n_slots : (int)s->n_ctx;
    hydra_token rows[n];
    const hydra_token bos = hydra_token_bos(e->model);
    for (int i = 0; i < n; i++)
        rows[i] = bos >= 0 ? bos : 0;
    bool ok = hydra_session_eval(s->session, rows, (size_t)n, NULL) == HYDRA_OK;
    hydra_session_clear(s->session);
    if (ok && s->draft != NULL)
        ok = hydra_session_eval(s->draft, rows, (size_t)n, NULL) == HYDRA_OK;
    hydra_session_clear(s->draft);
    return ok;
}

/* -md: the draft model, which must share the model's vocabulary, and a
 * draft session and decoder per slot (same context and batch as the slot);
 * --spec-mtp: a decoder per slot over the model's MTP block. */
static bool load_draft(engine *e, const hydra_session_params *sp)
{
    const char *what = e->o->spec_mtp ? "--spec-mtp" : "-md";
    /* a step's rows must fit the leading session's batch, min(-b, its context) (flags.c checked -b) */
    const long long rows = (long long)e->n_slots * (e->o->spec_n_max + 1);
    if ((long long)e->slot_ctx < rows) {
        snprintf(e->error, sizeof e->error, "%s: a slot's context of %u positions is less than -np x "
                 "(--spec-draft-n-max + 1) = %lld, the rows of a step (raise -c or lower --spec-draft-n-max)", what,
                 e->slot_ctx, rows);
        return false;
    }
    hydra_status st = HYDRA_OK;
    if (!e->o->spec_mtp) {
        hydra_model_params mp = hydra_model_default_params();
        mp.path = e->o->draft_path;
        mp.progress = keep_loading;
        mp.progress_user = e;
        st = hydra_model_open(&e->draft_model, &mp);
        if (st == HYDRA_OK)
            st = hydra_spec_check_vocab(e->model, e->draft_model);
    }
    if (st != HYDRA_OK) {
        snprintf(e->error, sizeof e->error, "-md %s: %s", e->o->draft_path, hydra_last_error());
        return false;
    }
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = e->o->spec_n_max;
    pp.p_min = e->o->spec_p_min;
    pp.fixed_width = e->o->spec_fixed_width;
    for (int i = 0; i < e->n_slots; i++)
        if (slot_init_spec(&e->slots[i], e->draft_model, sp, &pp) != HYDRA_OK) {
            snprintf(e->error, sizeof e->error, "%s%s%s: slot %d: %s", what, e->o->spec_mtp ? "" : " ",
                     e->o->spec_mtp ? "" : e->o->draft_path, i, hydra_last_error());
            return false;
        }
    return true;
}

static bool load(engine *e)
{
    hydra_model_params mp = hydra_model_default_params();
    mp.path = e->o->model_path;
    mp.progress = keep_loading;
    mp.progress_user = e;
    if (hydra_model_open(&e->model, &mp) != HYDRA_OK || hydra_tokenizer_load(e->model) != HYDRA_OK) {
        snprintf(e->error, sizeof e->error, "%s: %s", e->o->model_path, hydra_last_error());
        return false;
    }
    if (!load_template(e))
        return false;
    e->model_hash = model_fingerprint(e->model);
    e->slot_ctx = slot_context(e);
    if (e->slot_ctx == 0) {
        snprintf(e->error, sizeof e->error, "-c %d: less than one position for each of %d slots", e->o->n_ctx,
                 e->o->n_parallel);
        return false;
    }
    const int n_slots = e->o->n_parallel;
    e->slots = calloc((size_t)n_slots, sizeof *e->slots);
    e->items = calloc((size_t)n_slots, sizeof *e->items);
    e->view = calloc((size_t)n_slots, sizeof *e->view);
    if (e->slots == NULL || e->items == NULL || e->view == NULL) {
        snprintf(e->error, sizeof e->error, "out of memory for %d slots", n_slots);
        return false;
    }
    e->n_slots = n_slots;
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = e->slot_ctx;
    sp.n_batch = (uint32_t)e->o->n_batch;
    sp.n_threads = e->o->n_threads;
    for (int i = 0; i < e->n_slots; i++)
        if (slot_init(&e->slots[i], i, e->model, &sp) != HYDRA_OK) {
            snprintf(e->error, sizeof e->error, "slot %d of %u positions: %s", i, e->slot_ctx, hydra_last_error());
            return false;
        }
    if ((e->o->draft_path != NULL || e->o->spec_mtp) && !load_draft(e, &sp))
        return false;
    for (int i = 0; i < e->n_slots; i++)
        if (!warm_up(e, &e->slots[i])) {
            snprintf(e->error, sizeof e->error, "slot %d of %u positions: %s", i, e->slot_ctx, hydra_last_error());
            return false;
        }
    return true;
}

/* ------------------------------------------------------------ the queue */

static bool any_active(const engine *e)
{
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i].state != SLOT_IDLE)
            return true;
    return false;
}

static bool any_idle(const engine *e)
{
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i].state == SLOT_IDLE)
            return true;
    return false;
}

/* Under the lock: unlinks t, whose predecessor is prev (NULL: the head). */
static void unlink_waiting(engine *e, srv_task *prev, srv_task *t)
{
    if (prev != NULL)
        prev->next = t->next;
    else
        e->waiting = t->next;
    if (e->waiting_tail == t)
        e->waiting_tail = prev;
    e->n_waiting--;
}

/* Under the lock: the first waiting task that may start now (a slot action
 * waits for its slot to be idle), or a cancelled one, unlinked. */
static srv_task *next_startable(engine *e)
{
    const bool idle = any_idle(e);
    for (srv_task *prev = NULL, *t = e->waiting; t != NULL; prev = t, t = t->next) {
        const bool ready = atomic_load(&t->cancel) ||
                           (t->kind == TASK_GENERATE ? idle : e->slots[t->slot_id].state == SLOT_IDLE);
        if (ready) {
            unlink_waiting(e, prev, t);
            return t;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ starting */

static int status_of(hydra_status st)
{
    switch (st) {
    case HYDRA_ERR_NOT_FOUND: return 404;
    case HYDRA_ERR_NOMEM: return 503;
    case HYDRA_ERR_IO: return 500;
    default: return 400;
    }
}

static void start_generate(engine *e, srv_task *t)
{
    size_t shared;
    slot *s = cache_choose(e->slots, e->n_slots, t->prompt, t->n_prompt, t->hashes, &shared);
    if (t->n_prompt == 0 || t->n_prompt > s->n_ctx) { /* prepare.c refused these already */
        outbox_fail(&e->ob, t, 400, "the prompt is %zu tokens; a slot holds 1 to %u", t->n_prompt, s->n_ctx);
        return;
    }
    /* at least the last prompt token is evaluated: its logits are needed;
     * an MTP drafter's first missing row must be among the evaluated ones */
    size_t keep = shared < t->n_prompt ? shared : t->n_prompt - 1;
    const size_t drafter = hydra_spec_reusable(s->spec, t->prompt, t->n_prompt);
    keep = cache_truncate(s, keep < drafter ? keep : drafter);
    slot_begin(s, e->model, t, keep, &e->ob);
}

/* A slot file into the slot: a version 2 file's keys and values are read
 * back (nothing evaluated); a version 1 file's tokens are evaluated again,
 * as a prefill with no reply, except the prefix the slot holds already. */
static void start_restore(engine *e, slot *s, srv_task *t, task_out *r)
{
    const slotfile_target to = {e->model_hash, s->n_ctx, hydra_vocab_size(e->model), s->session};
    slotfile_loaded in;
    const double t0 = serve_now_ms();
    hydra_status st = slotfile_load(t->slot_file, &to, &in);
    if (hydra_session_n_past(s->session) < s->n_tokens)
        s->n_tokens = hydra_session_n_past(s->session); /* a state that failed half way cleared the session */
    if (st != HYDRA_OK) {
        outbox_fail(&e->ob, t, status_of(st), "slot %d: %s", s->id, hydra_last_error());
        return;
    }
    free(t->prompt);
    t->prompt = in.tokens;
    t->n_prompt = in.n;
    r->n_tokens = (long long)in.n;
    r->n_bytes = in.bytes;
    if (in.restored) {
        s->n_tokens = 0;
        cache_append(s, in.tokens, in.n);
        r->action_ms = serve_now_ms() - t0;
        outbox_done(&e->ob, t, FINISH_STOP, r);
        return;
    }
    size_t shared = 0;
    while (shared < in.n && shared < s->n_tokens && s->tokens[shared] == in.tokens[shared])
        shared++;
    shared = cache_truncate(s, shared);
    if (shared == in.n) { /* the slot holds it already */
        outbox_done(&e->ob, t, FINISH_STOP, r);
        return;
    }
    s->task = t;
    s->t_begin = t0;
    s->state = SLOT_PREFILL;
    s->feed = in.tokens + shared;
    s->n_feed = in.n - shared;
    r->n_evaluated = (long long)s->n_feed;
    s->result = *r;
}

static void start_slot_action(engine *e, srv_task *t)
{
    slot *s = &e->slots[t->slot_id];
    task_out r = {.slot = s->id};
    const double t0 = serve_now_ms();
    hydra_status st = HYDRA_OK;
    switch (t->kind) {
    case TASK_SLOT_SAVE:
        r.n_tokens = (long long)s->n_tokens;
        st = slotfile_save(t->slot_file, e->model_hash, s->tokens, s->n_tokens, s->session, &r.n_bytes);
        break;
    case TASK_SLOT_ERASE:
        r.n_tokens = (long long)s->n_tokens;
        cache_truncate(s, 0);
        break;
    case TASK_SLOT_RESTORE:
        r.action_ms = 0;
        start_restore(e, s, t, &r);
        return;
    case TASK_GENERATE:
        break;
    }
    r.action_ms = serve_now_ms() - t0;
    if (st != HYDRA_OK)
        outbox_fail(&e->ob, t, status_of(st), "slot %d: %s", s->id, hydra_last_error());
    else
        outbox_done(&e->ob, t, FINISH_STOP, &r);
}

/* Starts (or cancels) waiting tasks while slots allow. */
static void admit(engine *e)
{
    for (;;) {
        pthread_mutex_lock(&e->lock);
        srv_task *t = next_startable(e);
        pthread_mutex_unlock(&e->lock);
        if (t == NULL)
            return;
        if (atomic_load(&t->cancel)) {
            metrics_finished(FINISH_CANCELLED);
            outbox_done(&e->ob, t, FINISH_CANCELLED, NULL);
        } else if (t->kind == TASK_GENERATE) {
            start_generate(e, t);
        } else {
            start_slot_action(e, t);
        }
    }
}

/* ------------------------------------------------------------ a step */

static void cancel_running(engine *e)
{
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != SLOT_IDLE && atomic_load(&s->task->cancel))
            slot_end(s, FINISH_CANCELLED, &e->ob);
    }
}

/* The prefilling slot that began first among those not yet in the step. */
static slot *oldest_prefill(engine *e, const bool *taken)
{
    slot *best = NULL;
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state == SLOT_PREFILL && !taken[i] && (best == NULL || s->t_begin < best->t_begin))
            best = s;
    }
    return best;
}

/* Every generating slot with a decoder drafts its verify rows (a slot
 * whose drafting fails is finished with an error and leaves the step). */
static void draft_all(engine *e)
{
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state == SLOT_GENERATE && s->spec != NULL)
            slot_draft(s, &e->ob);
    }
}

/* Rows of a generating slot in the step: its verify pass, or its token. */
static size_t generate_rows(const slot *s)
{
    return s->spec != NULL ? s->n_verify : 1;
}

/* The step's items: the rows of every generating slot, then what is left
 * of the -b budget in prompt chunks, oldest prompt first.  Items are in
 * slot order, so the lowest active slot leads the batch (its threads and
 * buffers run it): a steady leader keeps one session's buffers warm. */
static int gather(engine *e)
{
    size_t take[e->n_slots];
    bool taken[e->n_slots];
    /* a session's n_batch is -b or its context, whichever is smaller */
    size_t budget = (size_t)e->o->n_batch < e->slot_ctx ? (size_t)e->o->n_batch : e->slot_ctx;
    for (int i = 0; i < e->n_slots; i++) {
        taken[i] = e->slots[i].state == SLOT_GENERATE;
        take[i] = taken[i] ? generate_rows(&e->slots[i]) : 0;
        budget -= take[i]; /* -b >= -np x rows per slot (flags.c), a context >= the rows: never below zero */
    }
    slot *s;
    while (budget > 0 && (s = oldest_prefill(e, taken)) != NULL) {
        take[s->id] = s->n_feed < budget ? s->n_feed : budget;
        taken[s->id] = true;
        budget -= take[s->id];
    }
    int n = 0;
    for (int i = 0; i < e->n_slots; i++) {
        s = &e->slots[i];
        const bool verify = s->state == SLOT_GENERATE && s->spec != NULL;
        if (take[i] > 0)
            e->items[n++] = (step_item){s, verify ? s->verify : s->state == SLOT_GENERATE ? &s->next : s->feed,
                                        take[i], verify ? s->rows : NULL};
    }
    return n;
}

/* Evaluates every item at its slot's next positions, all in one forward
 * pass (hydra_session_eval_batch_logits: each weight matrix is read once
 * for the step; verify passes get every row's logits); the status is the
 * batch's. */
static hydra_status evaluate(engine *e, int n)
{
    hydra_session *sessions[n];
    const int32_t *tokens[n];
    size_t counts[n];
    float *rows[n];
    for (int i = 0; i < n; i++) {
        sessions[i] = e->items[i].s->session;
        tokens[i] = e->items[i].tokens;
        counts[i] = e->items[i].n;
        rows[i] = e->items[i].rows;
    }
    return hydra_session_eval_batch_logits(sessions, tokens, counts, (size_t)n, rows);
}

static void after_eval(engine *e, const step_item *it)
{
    slot *s = it->s;
    if (it->rows != NULL) {
        slot_verified_step(s, e->model, &e->ob); /* appends what it keeps to the cache */
        return;
    }
    cache_append(s, it->tokens, it->n);
    if (s->state == SLOT_PREFILL) {
        s->feed += it->n;
        s->n_feed -= it->n;
        if (!slot_followed_prefill(s, &e->ob))
            return;
        if (s->n_feed > 0)
            return;
        if (s->task->kind == TASK_SLOT_RESTORE) {
            s->result.action_ms = serve_now_ms() - s->t_begin;
            outbox_done(&e->ob, s->task, FINISH_STOP, &s->result);
            s->task = NULL;
            s->state = SLOT_IDLE;
            s->last_used = serve_now_ms();
            return;
        }
    }
    slot_sampled_step(s, e->model, &e->ob);
}

static void step(engine *e)
{
    draft_all(e);
    const int n = gather(e);
    if (n == 0)
        return;
    const hydra_status st = evaluate(e, n);
    for (int i = 0; i < n; i++) {
        const step_item *it = &e->items[i];
        if (st == HYDRA_OK)
            after_eval(e, it);
        else
            slot_fail(it->s, &e->ob, 500, "evaluating a step of %d requests: %s", n, hydra_last_error());
    }
}

static void update_view(engine *e)
{
    pthread_mutex_lock(&e->lock);
    e->kv_used = 0;
    for (int i = 0; i < e->n_slots; i++) {
        const slot *s = &e->slots[i];
        e->view[i] = (slot_view){s->state, (long long)s->n_tokens, s->task ? s->result.timings.n_predicted : 0};
        e->kv_used += (long long)s->n_tokens;
    }
    pthread_mutex_unlock(&e->lock);
}

/* ------------------------------------------------------------ the thread */

static void *engine_main(void *arg)
{
    engine *e = arg;
    const bool ok = load(e);
    atomic_store(&e->state, ok ? ENGINE_READY : ENGINE_FAILED);
    uv_async_send(&e->loaded_async);
    if (!ok)
        return NULL;
    for (;;) {
        pthread_mutex_lock(&e->lock);
        while (!e->stop && e->waiting == NULL && !any_active(e))
            pthread_cond_wait(&e->wake, &e->lock);
        const bool stop = e->stop;
        pthread_mutex_unlock(&e->lock);
        if (stop)
            return NULL;
        cancel_running(e);
        admit(e);
        if (any_active(e))
            step(e);
        update_view(e);
    }
}

static void on_loaded(uv_async_t *a)
{
    engine *e = a->data;
    e->on_loaded(e, e->user);
}

int engine_start(engine **out, const serve_opts *o, uv_loop_t *loop, engine_loaded_fn loaded, void *user)
{
    engine *e = calloc(1, sizeof *e);
    if (e == NULL) {
        serve_log("out of memory");
        return -1;
    }
    e->o = o;
    e->loop = loop;
    e->on_loaded = loaded;
    e->user = user;
    atomic_init(&e->state, ENGINE_LOADING);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    e->loaded_async.data = e;
    if (uv_async_init(loop, &e->loaded_async, on_loaded) != 0 || outbox_init(&e->ob, loop) != 0) {
        serve_log("cannot set up the engine's wake-ups");
        free(e);
        return -1;
    }
    e->handles_open = 2;
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        serve_log("cannot start the engine thread");
        engine_stop(e);
        return -1;
    }
    e->thread_started = true;
    *out = e;
    return 0;
}

static void on_handle_closed(uv_handle_t *h)
{
    engine *e = h->data;
    if (--e->handles_open == 0) {
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->wake);
        free(e);
    }
}

void engine_stop(engine *e)
{
    pthread_mutex_lock(&e->lock);
    e->stop = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    if (e->thread_started)
        pthread_join(e->thread, NULL);
    /* the thread is gone: this (the loop) thread ends what it left */
    for (srv_task *t; (t = e->waiting) != NULL;) {
        unlink_waiting(e, NULL, t);
        outbox_done(&e->ob, t, FINISH_CANCELLED, NULL);
    }
    for (int i = 0; i < e->n_slots; i++) {
        if (e->slots[i].state != SLOT_IDLE)
            slot_end(&e->slots[i], FINISH_CANCELLED, &e->ob);
        slot_free(&e->slots[i]);
    }
    outbox_drain(&e->ob);
    free(e->slots);
    free(e->items);
    free(e->view);
    hydra_chat_template_free(e->tmpl);
    hydra_model_close(e->draft_model);
    hydra_model_close(e->model);
    uv_close((uv_handle_t *)&e->loaded_async, on_handle_closed);
    e->ob.async.data = e;
    uv_close((uv_handle_t *)&e->ob.async, on_handle_closed);
}

/* ------------------------------------------------------------ queries */

engine_state engine_get_state(const engine *e)
{
    return (engine_state)atomic_load(&((engine *)e)->state);
}

const char *engine_error(const engine *e)
{
    return e->error;
}

const hydra_model *engine_model(const engine *e)
{
    return e->model;
}

uint32_t engine_slot_ctx(const engine *e)
{
    return e->slot_ctx;
}

int engine_n_slots(const engine *e)
{
    return e->n_slots;
}

const hydra_chat_template *engine_chat_template(const engine *e, const char **why)
{
    *why = e->tmpl_why;
    return e->tmpl;
}

toolcall_format engine_tool_format(const engine *e)
{
    return e->tool_format;
}

uint64_t engine_model_hash(const engine *e)
{
    return e->model_hash;
}

int engine_submit(engine *e, srv_task *t)
{
    if (t->kind == TASK_GENERATE && t->hashes == NULL) {
        t->hashes = malloc(sizeof *t->hashes * (t->n_prompt / CACHE_BLOCK + 1));
        if (t->hashes == NULL)
            return -1;
        cache_hashes(t->prompt, t->n_prompt, t->hashes);
    }
    pthread_mutex_lock(&e->lock);
    const bool full = e->n_waiting >= e->o->max_queue || e->stop;
    if (!full) {
        t->next = NULL;
        if (e->waiting_tail != NULL)
            e->waiting_tail->next = t;
        else
            e->waiting = t;
        e->waiting_tail = t;
        e->n_waiting++;
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
    return full ? -1 : 0;
}

void engine_cancel(engine *e, srv_task *t)
{
    atomic_store(&t->cancel, true);
    pthread_mutex_lock(&e->lock);
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

void engine_take(engine *e, srv_task *t, sbuf *text, task_out *out)
{
    outbox_take(&e->ob, t, text, out);
}

static const char *const state_names[] = {[SLOT_IDLE] = "idle", [SLOT_PREFILL] = "prompt", [SLOT_GENERATE] = "generating"};

char *engine_slots_json(engine *e)
{
    sbuf b = {0};
    bool ok = sbuf_add(&b, "[", 1);
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_slots && ok; i++)
        ok = sbuf_addf(&b, "%s{\"id\":%d,\"n_ctx\":%u,\"state\":\"%s\",\"is_processing\":%s,\"n_cached\":%lld,"
                           "\"n_decoded\":%d}",
                       i ? "," : "", i, e->slot_ctx, state_names[e->view[i].state],
                       e->view[i].state != SLOT_IDLE ? "true" : "false", e->view[i].n_tokens,
                       e->view[i].n_predicted);
    pthread_mutex_unlock(&e->lock);
    if (!ok || !sbuf_add(&b, "]", 1)) {
        sbuf_free(&b);
        return NULL;
    }
    return b.data;
}

void engine_load(engine *e, int *running, int *waiting, long long *kv_used, long long *kv_total)
{
    pthread_mutex_lock(&e->lock);
    *running = 0;
    for (int i = 0; i < e->n_slots; i++)
        *running += e->view != NULL && e->view[i].state != SLOT_IDLE;
    *waiting = e->n_waiting;
    *kv_used = e->kv_used;
    *kv_total = (long long)e->slot_ctx * e->n_slots;
    pthread_mutex_unlock(&e->lock);
}
