/*
 * server_util.h — tooling for the hydra-serve tests (tests/test_server_*.c):
 * start the built server on 127.0.0.1 with a free port against the tiny
 * synthetic model, talk raw HTTP/1.1 to it (keep-alive, pipelining,
 * chunked bodies), read server-sent events, read its RSS.
 */
#ifndef HYDRA_TEST_SERVER_UTIL_H
#define HYDRA_TEST_SERVER_UTIL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct test_server {
    pid_t pid;
    int port;
    char log[4096]; /* its stderr */
} test_server;

/* The tiny model (written once per run into the scratch folder). */
const char *ts_model(void);

/* Starts hydra-serve -m MODEL --port P -t 1 ARGS (space-separated, no
 * quoting) and waits until /health answers 200.  model: NULL for the tiny
 * one. */
bool ts_start(test_server *s, const char *model, const char *args);

/* SIGTERM and wait; the exit status (-1 if killed by a signal or stuck). */
int ts_stop(test_server *s);

/* The server's stderr so far (static buffer), for failure messages. */
const char *ts_log(const test_server *s);

/* In a TEST (test.h): start the server or fail with its log; check a
 * condition, stopping the server before failing. */
#define TS_START(s, model, args)                                              \
    do {                                                                      \
        if (!ts_start(&(s), (model), (args)))                                 \
            FAIL("hydra-serve did not start: %s", ts_log(&(s)));              \
    } while (0)

#define TS_CHECK(s, cond)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            ts_stop(&(s));                                                    \
            FAIL("CHECK(%s) failed; server log: %s", #cond, ts_log(&(s)));    \
        }                                                                     \
    } while (0)

/* Whether this is the sanitizer build (tests shrink their loads). */
bool ts_sanitized(void);

/* ------------------------------------------------------------ HTTP */

typedef struct ts_conn {
    int fd;
    char buf[65536];
    size_t len;
} ts_conn;

typedef struct ts_resp {
    int status;
    char *head;   /* status line and headers */
    char *body;   /* de-chunked, NUL-terminated */
    size_t body_len;
    bool closed;  /* the server closed the connection after it */
} ts_resp;

/* A connection with a receive timeout of timeout_ms; false when refused. */
bool ts_open(ts_conn *c, int port, int timeout_ms);
void ts_close(ts_conn *c);
bool ts_send(ts_conn *c, const void *data, size_t len);
bool ts_send_str(ts_conn *c, const char *s);
/* Sends one request (Content-Length set when body is not NULL). */
bool ts_send_request(ts_conn *c, const char *method, const char *path, const char *extra_headers, const char *body);
/* Reads one response; false on a timeout, a close before it or garbage. */
bool ts_read(ts_conn *c, ts_resp *r);
void ts_resp_free(ts_resp *r);
/* Whether the server closed the connection (reads EOF within timeout_ms). */
bool ts_sees_eof(ts_conn *c, int timeout_ms);

/* One request on a new connection. */
bool ts_request(int port, const char *method, const char *path, const char *extra_headers, const char *body,
                ts_resp *r);

/* A header's value in r->head (a buffer per thread), NULL when absent. */
const char *ts_header(const ts_resp *r, const char *name);

/* The body as JSON (NULL when it is not). */
cJSON *ts_json(const ts_resp *r);

/* A number at obj.a (obj.a.b when b is not NULL); -1 when absent. */
int ts_number(const cJSON *obj, const char *a, const char *b);

/* choices[0] of a completion or chat reply: its text (the message's
 * content for chat) and finish_reason into text and finish, "" when
 * absent; returns choices[0] (NULL when there is none). */
const cJSON *ts_first_choice(const cJSON *reply, char *text, size_t text_len, char *finish, size_t finish_len);

/* The error object's message and type when the body is one. */
bool ts_is_error(const ts_resp *r, int status, const char *type, const char *message_part);

/* ------------------------------------------------------------ SSE */

typedef struct ts_stream {
    int n_events;
    bool done;            /* ended with data: [DONE] */
    bool well_formed;     /* every event a JSON object (or [DONE] last) */
    char *text;           /* deltas joined (chat content or completion text) */
    char finish[16];      /* the finish_reason seen */
    bool role_first;      /* chat: the first delta carried the role */
    cJSON *usage;         /* the usage chunk's usage, NULL if none */
    bool usage_choices_empty;
    char error[256];      /* first problem noticed */
} ts_stream;

/* Parses an event-stream body. */
void ts_parse_stream(const char *body, size_t len, ts_stream *s);
void ts_stream_free(ts_stream *s);

/* /proc/PID/status VmRSS in KiB (-1 on failure). */
long ts_rss_kb(pid_t pid);

#endif
