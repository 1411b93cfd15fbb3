/*
 * http.h — HTTP/1.1 over libuv with Debian's http_parser: connections,
 * requests, responses.  Everything here runs on the loop thread.
 *
 * A connection parses whatever arrives into a queue of requests
 * (pipelining); the handler sees one request at a time, in order, and
 * answers it with http_respond() or with http_stream_begin() ...
 * http_stream_end() (chunked transfer encoding, for server-sent events).
 * While it answers, the connection keeps reading, so a client that goes
 * away (EOF, reset) is noticed at once: the handler's on_abort runs (from
 * the loop, never from inside an http_ call) and the request is freed.
 *
 * Limits: header bytes (431), body bytes (413, decided from Content-Length
 * before any body is read), a deadline for a whole request to arrive (408),
 * idle keep-alive connections closed after the timeout, and a reader that
 * takes nothing of a response for the timeout is dropped.
 */
#ifndef HYDRA_SERVE_HTTP_H
#define HYDRA_SERVE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

typedef struct http_conn http_conn;
typedef struct http_request http_request;

/* The connection is gone before the handler answered: forget the request. */
typedef void (*http_abort_fn)(http_request *req);

struct http_request {
    http_request *next; /* the connection's queue */
    http_conn *conn;
    int method;         /* enum http_method */
    char *path;         /* without the query */
    char *query;        /* after '?', "" when none */
    char *body;         /* NUL-terminated; "" when none */
    size_t body_len;
    char *authorization; /* the header's value, NULL when absent */
    bool keep_alive;
    int error_status;    /* non-zero: the request could not be read (400, 408, 413, 431) */
    const char *error_message;
    double t_start;      /* when its first byte arrived (ms) */
    /* the handler's */
    void *handler_data;
    http_abort_fn on_abort;
    int status;          /* the status answered, for the log */
    bool streaming, done;
};

typedef void (*http_handler_fn)(http_request *req, void *user);

typedef struct http_limits {
    size_t max_header;  /* request line + header bytes */
    size_t max_body;
    double timeout_ms;  /* see above */
} http_limits;

typedef struct http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    http_limits limits;
    http_handler_fn handle;
    void *user;
    http_conn *conns; /* open connections, for shutdown */
    int n_conns;
    bool verbose;
    bool stopping;
} http_server;

/* Listens on host:port; 0 or a libuv error code (after a log line). */
int http_server_start(http_server *s, uv_loop_t *loop, const char *host, int port, const http_limits *limits,
                      http_handler_fn handle, void *user);

/* Closes the listener and every connection (aborting their requests). */
void http_server_stop(http_server *s);

/* A whole response.  extra_headers: "" or lines each ending in "\r\n". */
void http_respond(http_request *req, int status, const char *content_type, const char *extra_headers,
                  const char *body, size_t len);

/* A chunked response: the head now, then chunks, then the end. */
void http_stream_begin(http_request *req, int status, const char *content_type, const char *extra_headers);
void http_stream_write(http_request *req, const char *data, size_t len);
void http_stream_end(http_request *req);

/* Moves the body out of the request (malloc'd, NUL-terminated, never
 * NULL unless out of memory): for work that outlives the request. */
char *http_take_body(http_request *req, size_t *len);

/* The reason phrase of a status ("Not Found"). */
const char *http_reason(int status);

#endif
