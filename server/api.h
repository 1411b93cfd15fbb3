/*
 * api.h — the HTTP API over the engine: the server's context, the routes
 * and their handlers, request validation and response shapes.  Loop thread
 * unless a comment says otherwise.
 */
#ifndef HYDRA_SERVE_API_H
#define HYDRA_SERVE_API_H

#include "engine.h"
#include "http.h"
#include "serve.h"
#include "task.h"

#include <cjson/cJSON.h>

typedef struct stream_link stream_link;

typedef struct server_ctx {
    const serve_opts *o;
    uv_loop_t *loop;
    engine *eng;
    http_server http;
    char model_name[256]; /* -a, or the model file's base name */
    long long started;    /* unix time at start-up: /v1/models' "created" */
    stream_link *streams; /* streaming responses, for pings */
    uv_timer_t ping_timer;
    uv_signal_t sigint, sigterm;
    int n_work;           /* requests on libuv's work threads: the model must outlive them */
    bool stopping;
    int exit_code;
} server_ctx;

/* main.c: around every uv_queue_work, so shutdown frees the model only
 * after the work threads are done with it. */
void api_work_begin(server_ctx *sc);
void api_work_end(server_ctx *sc);

/* Hands req to a work thread: work runs there, after on the loop (and
 * must call api_work_end).  data becomes req's handler_data and on_abort
 * its hook for a client that goes away.  0, or -1 when libuv cannot queue
 * the work: the hook is unset again and the caller frees data and answers. */
int api_queue_work(server_ctx *sc, http_request *req, uv_work_t *w, void *data, http_abort_fn on_abort,
                   uv_work_cb work, uv_after_work_cb after);

/* ------------------------------------------------------------ router.c */

/* The http_handler_fn: routes, checks the API key, answers. */
void api_handle(http_request *req, void *user);

/* An error in OpenAI's shape: {"error":{"message","type","code"}}. */
void api_error(http_request *req, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A JSON body (printed, freed). NULL json: 503 out of memory. */
void api_json(http_request *req, int status, cJSON *json);

/* ------------------------------------------------------------ endpoints.c */

void ep_health(server_ctx *sc, http_request *req);
void ep_models(server_ctx *sc, http_request *req);
void ep_metrics(server_ctx *sc, http_request *req);
void ep_tokenize(server_ctx *sc, http_request *req);
void ep_detokenize(server_ctx *sc, http_request *req);
void ep_embeddings(server_ctx *sc, http_request *req);
void ep_slots(server_ctx *sc, http_request *req);
void ep_slot_action(server_ctx *sc, http_request *req);

/* ------------------------------------------------------------ complete.c */

void ep_chat_completions(server_ctx *sc, http_request *req);
void ep_completions(server_ctx *sc, http_request *req);

/* Sends ": ping" to streams that have been quiet (the ping timer). */
void complete_ping(server_ctx *sc);

/* ------------------------------------------------------------ request.c */

typedef enum api_kind { API_CHAT, API_COMPLETION } api_kind;

/* A generation request, validated (any thread). */
typedef struct gen_request {
    api_kind kind;
    bool stream, include_usage;
    char *model;         /* as the client named it (owned), NULL: not given */
    gen_params gen;      /* stops owned until moved into a task */
    /* chat */
    char *messages_json; /* the messages, content parts joined into text (owned) */
    char *tools_json;    /* owned, NULL: none */
    bool want_tools;     /* tools offered (tool_choice not "none"): parse calls from the reply */
    char *extra_json;    /* chat_template_kwargs (owned), NULL: none */
    /* completion: text, or token ids */
    char *prompt_text;   /* owned */
    size_t prompt_len;
    hydra_token *prompt_ids; /* owned */
    size_t n_prompt_ids;
} gen_request;

/* Parses and validates body[0, len).  0, or -1 with a message naming the
 * field in err.  Defaults come from o. */
int request_parse(const char *body, size_t len, api_kind kind, const serve_opts *o, gen_request *out, char *err,
                  size_t err_len);
void request_free(gen_request *r);

/* A JSON object body: NULL with a message in err when it is not one. */
cJSON *request_object(const char *body, size_t len, char *err, size_t err_len);

/* ------------------------------------------------------------ prepare.c */

/* Text to tokens (any thread): special tokens recognised when
 * parse_special; add_bos: the model's BOS first when it wants one and the
 * text does not begin with it.  *out malloc'd. */
hydra_status prepare_tokenize(const hydra_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                              hydra_token **out, size_t *n);

/* The request's prompt as tokens (any thread; after the model loaded):
 * the chat rendered with the template, or the completion's text or ids
 * (moved out of r).  0, or the HTTP status with a message in err. */
int prepare_prompt(engine *e, gen_request *r, hydra_token **tokens, size_t *n, char *err, size_t err_len);

/* ------------------------------------------------------------ logprobs.c */

/* logprob_entry records (task_out.logprobs) as the choice's "logprobs"
 * object of kind's shape; *text_offset: the completion text's bytes before
 * the first record's token (advanced past the records).  NULL on failure. */
cJSON *logprobs_json(const hydra_model *m, api_kind kind, const sbuf *records, long long *text_offset);

/* ------------------------------------------------------------ shape.c */

/* What every object of one response shares. */
typedef struct shape_head {
    api_kind kind;
    const char *id;    /* "chatcmpl-..." / "cmpl-..." */
    long long created; /* unix seconds */
    const char *model;
} shape_head;

const char *shape_error_type(int status);
cJSON *shape_error(int status, const char *message);

/* What a choice carries besides its text, consumed by the call that takes
 * it: logprobs (logprobs_json) and chat tool calls (toolcall.c); NULL:
 * none.  Tool calls make the final finish_reason "tool_calls". */
typedef struct shape_extra {
    cJSON *logprobs;
    cJSON *tool_calls;
} shape_extra;

/* The non-streaming response. */
cJSON *shape_response(const shape_head *h, const char *text, size_t len, const task_out *out, shape_extra x);

/* Stream events, each "data: {...}\n\n" into *ev: a text delta (first: the
 * chat's opening delta with the role), the last chunk with the finish
 * reason (and timings), the usage chunk, the end. */
bool shape_delta(sbuf *ev, const shape_head *h, const char *text, size_t len, bool first, shape_extra x);
bool shape_finish(sbuf *ev, const shape_head *h, const task_out *out, bool tool_calls);
bool shape_usage(sbuf *ev, const shape_head *h, const task_out *out);
bool shape_event(sbuf *ev, cJSON *json); /* any object as one event (freed) */

/* A JSON string of text that may hold invalid UTF-8 or NUL bytes: each
 * such byte becomes U+FFFD. */
cJSON *shape_string(const char *text, size_t len);

#endif
