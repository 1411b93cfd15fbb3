/*
 * complete.c — /v1/chat/completions and /v1/completions.  A request goes
 *
 *   work thread   parse and validate the body, render, tokenize (prepare.c)
 *   loop          submit to the engine (503 when the queue is full); a
 *                 stream sends its head now, so pings can flow
 *   engine        posts text as it is generated
 *   loop          stream: one event per post; otherwise the text is kept
 *                 and the response sent when the engine is done
 *
 * The client may leave at any point: its request's on_abort forgets the
 * request and cancels the task; what remains is freed when the work thread
 * or the engine hands it back.
 */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* A quiet stream (a long prompt being read) gets a comment this often, so
 * proxies and clients with read timeouts keep it open. */
enum { PING_MS = 5000 };

struct stream_link {
    stream_link *prev, *next;
};

typedef struct completion {
    stream_link link; /* in sc->streams while streaming: first, so a link is its completion */
    server_ctx *sc;
    http_request *req; /* NULL once the client is gone */
    api_kind kind;
    uv_work_t work;
    char *body;
    size_t body_len;
    gen_request gr;
    srv_task *task;
    int status; /* prepare's verdict: 0, or the HTTP status of err */
    char err[1024];
    shape_head head;
    char id[48];
    sbuf text;  /* not streaming: the reply so far */
    sbuf probs; /* not streaming: the logprob_entry records so far */
    long long text_offset; /* completions' logprobs: bytes of the reply before the next record */
    bool tools; /* the reply is searched for tool calls (tc) */
    toolcall_filter tc;
    bool submitted, first_sent, linked;
    double last_write;
} completion;

static void unlink_stream(completion *c)
{
    if (!c->linked)
        return;
    server_ctx *sc = c->sc;
    if (c->link.prev != NULL)
        c->link.prev->next = c->link.next;
    else
        sc->streams = c->link.next;
    if (c->link.next != NULL)
        c->link.next->prev = c->link.prev;
    c->linked = false;
}

static void link_stream(completion *c)
{
    server_ctx *sc = c->sc;
    c->link.prev = NULL;
    c->link.next = sc->streams;
    if (sc->streams != NULL)
        sc->streams->prev = &c->link;
    sc->streams = &c->link;
    c->linked = true;
}

static void completion_free(completion *c)
{
    unlink_stream(c);
    if (c->req != NULL)
        c->req->on_abort = NULL;
    free(c->body);
    request_free(&c->gr);
    task_free(c->task);
    sbuf_free(&c->text);
    sbuf_free(&c->probs);
    toolcall_free(&c->tc);
    free(c);
}

static void on_abort(http_request *req)
{
    completion *c = req->handler_data;
    c->req = NULL;
    unlink_stream(c);
    if (c->submitted)
        engine_cancel(c->sc->eng, c->task);
}

/* ------------------------------------------------------------ output */

static void stream_send(completion *c, sbuf *ev)
{
    if (ev->len > 0)
        http_stream_write(c->req, ev->data, ev->len);
    c->last_write = serve_now_ms();
}

static cJSON *logprobs_of_records(completion *c, const sbuf *records)
{
    if (records->len == 0)
        return NULL;
    return logprobs_json(engine_model(c->sc->eng), c->kind, records, &c->text_offset);
}

/* A delta with new text (after the tool-call filter, when it runs), the
 * calls it completed and the logprobs of its tokens; the first token opens
 * the stream even when it has no text yet (held UTF-8, a control token),
 * so a client sees its time to first token. */
static void stream_text(completion *c, const sbuf *fresh, const sbuf *records, int n_new)
{
    const char *text = fresh->data ? fresh->data : "";
    size_t len = fresh->len;
    cJSON *calls = NULL;
    if (c->tools && !toolcall_push(&c->tc, text, len, &text, &len, &calls))
        len = 0; /* out of memory: this piece is lost */
    if (len == 0 && calls == NULL && records->len == 0 && (c->first_sent || n_new == 0))
        return;
    sbuf ev = {0};
    const shape_extra x = {logprobs_of_records(c, records), calls};
    if (shape_delta(&ev, &c->head, text, len, !c->first_sent, x))
        stream_send(c, &ev);
    c->first_sent = true;
    sbuf_free(&ev);
}

/* The filter's held text (a call never closed) as the stream's last delta. */
static bool stream_held(completion *c, sbuf *ev)
{
    const char *text;
    size_t len;
    if (!c->tools || !toolcall_flush(&c->tc, &text, &len) || len == 0)
        return true;
    const bool ok = shape_delta(ev, &c->head, text, len, !c->first_sent, (shape_extra){0});
    c->first_sent = true;
    return ok;
}

static void stream_finish(completion *c, const task_out *out)
{
    sbuf ev = {0};
    bool ok = true;
    if (out->finish == FINISH_ERROR) {
        ok = shape_event(&ev, shape_error(out->error_status, out->error));
    } else if (out->finish != FINISH_CANCELLED) {
        ok = stream_held(c, &ev);
        if (ok && !c->first_sent && c->kind == API_CHAT) /* the opening delta, even for an empty reply */
            ok = shape_delta(&ev, &c->head, "", 0, true, (shape_extra){0});
        ok = ok && shape_finish(&ev, &c->head, out, c->tc.n_calls > 0);
        if (ok && c->gr.include_usage)
            ok = shape_usage(&ev, &c->head, out);
        ok = ok && sbuf_addf(&ev, "data: [DONE]\n\n");
    }
    if (ok)
        stream_send(c, &ev);
    sbuf_free(&ev);
    http_stream_end(c->req);
}

/* The whole reply through the tool-call filter: its text into *content,
 * its calls (NULL: none). */
static cJSON *split_calls(completion *c, sbuf *content)
{
    const char *text;
    size_t len;
    cJSON *calls = NULL;
    bool ok = toolcall_push(&c->tc, c->text.data ? c->text.data : "", c->text.len, &text, &len, &calls) &&
              sbuf_add(content, text, len) && toolcall_flush(&c->tc, &text, &len) && sbuf_add(content, text, len);
    if (!ok) { /* out of memory: the reply as it came */
        cJSON_Delete(calls);
        content->len = 0;
        sbuf_add(content, c->text.data ? c->text.data : "", c->text.len);
        return NULL;
    }
    return calls;
}

static void respond_final(completion *c, const task_out *out)
{
    if (out->finish == FINISH_ERROR) {
        api_error(c->req, out->error_status, "%s", out->error);
    } else if (out->finish == FINISH_CANCELLED) {
        api_error(c->req, 503, "the server is shutting down");
    } else {
        sbuf content = {0};
        cJSON *calls = c->tools ? split_calls(c, &content) : NULL;
        const sbuf *reply = c->tools ? &content : &c->text;
        const shape_extra x = {logprobs_of_records(c, &c->probs), calls};
        api_json(c->req, 200, shape_response(&c->head, reply->data ? reply->data : "", reply->len, out, x));
        sbuf_free(&content);
    }
}

static void on_output(srv_task *t)
{
    completion *c = t->user;
    sbuf fresh = {0};
    task_out out;
    const bool streaming = c->gr.stream;
    engine_take(c->sc->eng, t, streaming ? &fresh : &c->text, &out);
    if (c->req != NULL && streaming)
        stream_text(c, &fresh, &out.logprobs, out.n_new);
    else if (out.logprobs.len > 0)
        sbuf_add(&c->probs, out.logprobs.data, out.logprobs.len);
    sbuf_free(&out.logprobs);
    sbuf_free(&fresh);
    if (!out.done)
        return;
    if (c->req != NULL) {
        if (streaming)
            stream_finish(c, &out);
        else
            respond_final(c, &out);
        c->req = NULL; /* answered: the request is gone */
    }
    completion_free(c);
}

void complete_ping(server_ctx *sc)
{
    const double now = serve_now_ms();
    for (stream_link *l = sc->streams; l != NULL; l = l->next) {
        completion *c = (completion *)l;
        if (now - c->last_write >= PING_MS) {
            http_stream_write(c->req, ": ping\n\n", 8);
            c->last_write = now;
        }
    }
}

/* ------------------------------------------------------------ preparing */

/* Work thread: everything up to a task ready to submit. */
static void prepare(uv_work_t *w)
{
    completion *c = w->data;
    server_ctx *sc = c->sc;
    if (request_parse(c->body, c->body_len, c->kind, sc->o, &c->gr, c->err, sizeof c->err) != 0) {
        c->status = 400;
        return;
    }
    hydra_token *tokens = NULL;
    size_t n = 0;
    if ((c->status = prepare_prompt(sc->eng, &c->gr, &tokens, &n, c->err, sizeof c->err)) != 0)
        return;
    srv_task *t = task_new(TASK_GENERATE);
    if (t == NULL) {
        free(tokens);
        c->status = 503;
        snprintf(c->err, sizeof c->err, "out of memory");
        return;
    }
    t->prompt = tokens;
    t->n_prompt = n;
    t->gen = c->gr.gen; /* the stop strings move to the task */
    c->gr.gen.n_stops = 0;
    t->on_output = on_output;
    t->user = c;
    c->task = t;
}

static void make_head(completion *c)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = (uint64_t)serve_now_ms() ^ (uint64_t)(uintptr_t)c;
    snprintf(c->id, sizeof c->id, "%s-%016llx", c->kind == API_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)r);
    c->head = (shape_head){.kind = c->kind, .id = c->id, .created = (long long)time(NULL),
                           .model = c->gr.model ? c->gr.model : c->sc->model_name};
    c->tools = c->kind == API_CHAT && c->gr.want_tools && engine_tool_format(c->sc->eng) == TOOLCALL_TAGGED;
    toolcall_init(&c->tc, c->gr.stream, r);
}

/* Loop: submit, or answer the error. */
static void prepared(uv_work_t *w, int status)
{
    completion *c = w->data;
    server_ctx *sc = c->sc;
    free(c->body);
    c->body = NULL;
    if (c->req == NULL) { /* the client left while it was prepared */
        completion_free(c);
        api_work_end(sc);
        return;
    }
    if (status != 0 || sc->stopping) {
        api_error(c->req, 503, "the server is shutting down");
    } else if (c->status != 0) {
        api_error(c->req, c->status, "%s", c->err);
    } else {
        make_head(c);
        c->task->t_submit = serve_now_ms();
        if (engine_submit(sc->eng, c->task) != 0) {
            api_error(c->req, 503, "the server is busy: the queue of waiting requests is full (--max-queue %d)",
                      sc->o->max_queue);
        } else {
            c->submitted = true;
            if (c->gr.stream) {
                http_stream_begin(c->req, 200, "text/event-stream",
                                  "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
                c->last_write = serve_now_ms();
                link_stream(c);
            }
            api_work_end(sc);
            return;
        }
    }
    c->req = NULL; /* answered */
    completion_free(c);
    api_work_end(sc);
}

static void start(server_ctx *sc, http_request *req, api_kind kind)
{
    completion *c = calloc(1, sizeof *c);
    if (c == NULL || (c->body = http_take_body(req, &c->body_len)) == NULL) {
        free(c);
        api_error(req, 503, "out of memory");
        return;
    }
    c->sc = sc;
    c->req = req;
    c->kind = kind;
    if (api_queue_work(sc, req, &c->work, c, on_abort, prepare, prepared) != 0) {
        c->req = NULL;
        completion_free(c);
        api_error(req, 503, "cannot queue the request");
    }
}

void ep_chat_completions(server_ctx *sc, http_request *req)
{
    start(sc, req, API_CHAT);
}

void ep_completions(server_ctx *sc, http_request *req)
{
    start(sc, req, API_COMPLETION);
}
