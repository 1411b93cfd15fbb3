/*
 * http.c — connections: libuv reads into http_parser, which fills a queue
 * of requests; the handler answers the queue's head; responses are written
 * in order.  See http.h for the contract and the limits.
 */
#include "http.h"

#include "serve.h"

#include <http_parser.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* MAX_QUEUED: parsed requests waiting behind the one being answered before
 * the connection stops reading; MAX_WRITE_QUEUE: response bytes the kernel
 * has not taken before the reader counts as stalled at once. */
enum { READ_BUF = 64 * 1024, MAX_CONNS = 1024, MAX_QUEUED = 64, MAX_WRITE_QUEUE = 64 << 20, FIELD_MAX = 32 };

/* A connection closed by the server first sends FIN and reads (and drops)
 * what the client still sends for this long: closing with unread bytes
 * would send a reset, which can destroy the last response before the
 * client reads it (a 413 while the client is still sending its body). */
enum { LINGER_MS = 2000 };

/* SO_SNDBUF of a connection (Linux doubles it): token streams need little,
 * and a small fixed buffer, instead of one autotuned to megabytes, means a
 * reader that stops reading is noticed after ~128 KiB, within seconds. */
enum { SEND_BUFFER = 64 * 1024 };

/* Headers the server reads; the rest are counted and skipped. */
typedef enum header_kind { HDR_OTHER, HDR_AUTHORIZATION, HDR_EXPECT } header_kind;

/* A request and the buffers its fields point into. */
typedef struct request_buf {
    http_request pub;
    sbuf url, auth, body;
    char *path_query; /* path and query, split at '?' */
    bool started;     /* handed to the handler */
    bool http10;      /* HTTP/1.0: no chunked encoding */
} request_buf;

struct http_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    http_server *server;
    http_conn *prev, *next;
    http_parser parser;
    request_buf *head, *tail; /* complete requests, in arrival order */
    int n_queued;
    request_buf *parsing;     /* the request being read */
    size_t header_bytes;
    char field[FIELD_MAX + 1];
    size_t field_len;
    bool field_too_long, in_value;
    header_kind header;
    sbuf expect;
    int error_status; /* set by a callback that refuses the request */
    const char *error_message;
    char error_text[160];
    int pending_writes;
    double last_progress; /* last write completion, or when bytes started waiting */
    double idle_since;
    uv_shutdown_t shutdown;
    double linger_until;  /* lingering: the write side is shut, reads are dropped */
    bool reading, read_closed, closing, close_after_write, lingering, dispatching;
    int closes_pending;
};

/* One read buffer for every connection: libuv calls on_alloc, reads and
 * calls on_read for one connection at a time on the loop thread, and
 * on_read copies what it keeps, so a connection costs no 64 KiB of its
 * own. */
static char read_buf[READ_BUF];

static http_parser_settings parser_settings;

static const struct {
    int status;
    const char *reason;
} reasons[] = {
    {100, "Continue"},          {200, "OK"},
    {204, "No Content"},        {400, "Bad Request"},
    {401, "Unauthorized"},      {404, "Not Found"},
    {405, "Method Not Allowed"}, {408, "Request Timeout"},
    {409, "Conflict"},          {413, "Payload Too Large"},
    {429, "Too Many Requests"}, {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"}, {501, "Not Implemented"},
    {503, "Service Unavailable"},
};

const char *http_reason(int status)
{
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].status == status)
            return reasons[i].reason;
    return "Unknown";
}

/* ------------------------------------------------------------ requests */

static void request_free(request_buf *r)
{
    if (r == NULL)
        return;
    sbuf_free(&r->url);
    sbuf_free(&r->auth);
    sbuf_free(&r->body);
    free(r->path_query);
    free(r);
}

static void queue_push(http_conn *c, request_buf *r)
{
    r->pub.next = NULL;
    if (c->tail != NULL)
        c->tail->pub.next = &r->pub;
    else
        c->head = r;
    c->tail = r;
    c->n_queued++;
}

static request_buf *queue_pop(http_conn *c)
{
    request_buf *r = c->head;
    if (r != NULL) {
        c->head = (request_buf *)r->pub.next;
        if (c->head == NULL)
            c->tail = NULL;
        c->n_queued--;
    }
    return r;
}

/* ------------------------------------------------------------ closing */

static void on_closed(uv_handle_t *h)
{
    http_conn *c = h->data;
    if (--c->closes_pending > 0)
        return;
    request_buf *r;
    while ((r = queue_pop(c)) != NULL) {
        if (r->started && !r->pub.done && r->pub.on_abort != NULL)
            r->pub.on_abort(&r->pub);
        request_free(r);
    }
    request_free(c->parsing);
    sbuf_free(&c->expect);
    http_server *s = c->server;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    s->n_conns--;
    free(c);
}

static void conn_close(http_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    c->closes_pending = 2;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->tcp, on_closed);
    uv_close((uv_handle_t *)&c->timer, on_closed);
}

/* ------------------------------------------------------------ timer */

static size_t write_queue(http_conn *c)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
}

static void on_timer(uv_timer_t *t);

/* Arms the timer for the nearest deadline: the request being read, the
 * idle keep-alive connection, the bytes a reader is not taking, the end
 * of a lingering close. */
static void update_timer(http_conn *c)
{
    if (c->closing)
        return;
    const double timeout = c->server->limits.timeout_ms;
    double due = INFINITY;
    if (c->parsing != NULL)
        due = fmin(due, c->parsing->pub.t_start + timeout);
    else if (c->head == NULL && c->pending_writes == 0)
        due = fmin(due, c->idle_since + timeout);
    if (write_queue(c) > 0)
        due = fmin(due, c->last_progress + timeout);
    if (c->lingering)
        due = fmin(due, c->linger_until);
    if (isinf(due)) {
        uv_timer_stop(&c->timer);
        return;
    }
    const double wait = due - serve_now_ms();
    uv_timer_start(&c->timer, on_timer, wait > 0 ? (uint64_t)wait + 1 : 0, 0);
}

/* ------------------------------------------------------------ writing */

typedef struct write_req {
    uv_write_t req;
    http_conn *conn;
    char data[];
} write_req;

static void on_shutdown(uv_shutdown_t *req, int status)
{
    http_conn *c = req->data;
    if (status < 0 || c->closing) {
        conn_close(c);
        return;
    }
    c->lingering = true;
    c->linger_until = serve_now_ms() + LINGER_MS;
    update_timer(c);
}

/* The last response is written: FIN, then linger (see LINGER_MS). */
static void finish_conn(http_conn *c)
{
    c->shutdown.data = c;
    if (c->closing || uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
        conn_close(c);
}

static void on_write(uv_write_t *req, int status)
{
    write_req *w = (write_req *)req;
    http_conn *c = w->conn;
    free(w);
    c->pending_writes--;
    c->last_progress = serve_now_ms();
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->close_after_write && c->pending_writes == 0) {
        finish_conn(c);
        return;
    }
    if (c->pending_writes == 0)
        c->idle_since = c->last_progress;
    update_timer(c);
}

/* Queues a followed by b (either may be empty) as one write. */
static void conn_write(http_conn *c, const char *a, size_t a_len, const char *b, size_t b_len)
{
    if (c->closing || a_len + b_len == 0)
        return;
    write_req *w = malloc(sizeof *w + a_len + b_len);
    if (w == NULL) {
        conn_close(c);
        return;
    }
    w->conn = c;
    memcpy(w->data, a, a_len);
    if (b_len > 0)
        memcpy(w->data + a_len, b, b_len);
    if (write_queue(c) == 0)
        c->last_progress = serve_now_ms();
    uv_buf_t buf = uv_buf_init(w->data, (unsigned)(a_len + b_len));
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write) < 0) {
        free(w);
        conn_close(c);
        return;
    }
    c->pending_writes++;
    if (write_queue(c) > MAX_WRITE_QUEUE)
        conn_close(c);
    else
        update_timer(c);
}

/* ------------------------------------------------------------ dispatch */

static void start_reading(http_conn *c);

/* Hands queued requests to the handler, one at a time: a handler that
 * answers at once makes the next one the head, and this loop (not a nested
 * call) takes it. */
static void dispatch(http_conn *c)
{
    if (c->dispatching)
        return;
    c->dispatching = true;
    while (!c->closing && c->head != NULL && !c->head->started) {
        c->head->started = true;
        c->server->handle(&c->head->pub, c->server->user);
    }
    c->dispatching = false;
}

static void log_request(http_conn *c, const request_buf *r)
{
    if (c->server->verbose)
        serve_log("%s %s -> %d (%.1f ms)", http_method_str((enum http_method)r->pub.method),
                  r->pub.path ? r->pub.path : "-", r->pub.status, serve_now_ms() - r->pub.t_start);
}

/* The head's response is fully queued: free it, go on with the next. */
static void request_done(http_request *req)
{
    http_conn *c = req->conn;
    request_buf *r = (request_buf *)req;
    req->done = true;
    log_request(c, r);
    if (c->head != r) /* answered twice: a bug in a handler; keep the queue intact */
        return;
    const bool keep = req->keep_alive && !c->read_closed;
    request_free(queue_pop(c));
    if (!keep && !c->closing) {
        /* Connection: close, or after an unreadable request: what was
         * pipelined behind it is never answered. */
        c->close_after_write = c->read_closed = true;
        while ((r = queue_pop(c)) != NULL)
            request_free(r);
        if (!c->reading)
            start_reading(c); /* to see the client's EOF while lingering */
        if (c->pending_writes == 0)
            finish_conn(c);
        return;
    }
    if (c->head == NULL)
        c->idle_since = serve_now_ms();
    if (!c->reading && !c->read_closed && c->n_queued < MAX_QUEUED)
        start_reading(c);
    dispatch(c);
    update_timer(c);
}

/* ------------------------------------------------------------ responses */

static void head_text(sbuf *h, const http_request *req, int status, const char *ctype, const char *extra,
                      long long content_length)
{
    sbuf_addf(h, "HTTP/1.1 %d %s\r\nServer: hydra-serve\r\nAccess-Control-Allow-Origin: *\r\n", status,
              http_reason(status));
    if (ctype != NULL)
        sbuf_addf(h, "Content-Type: %s\r\n", ctype);
    if (content_length >= 0)
        sbuf_addf(h, "Content-Length: %lld\r\n", content_length);
    else if (!((const request_buf *)req)->http10)
        sbuf_addf(h, "Transfer-Encoding: chunked\r\n");
    sbuf_addf(h, "Connection: %s\r\n%s\r\n", req->keep_alive ? "keep-alive" : "close", extra ? extra : "");
}

void http_respond(http_request *req, int status, const char *ctype, const char *extra, const char *body, size_t len)
{
    sbuf h = {0};
    req->status = status;
    head_text(&h, req, status, ctype, extra, (long long)len);
    if (h.data == NULL)
        conn_close(req->conn);
    else
        conn_write(req->conn, h.data, h.len, body, len);
    sbuf_free(&h);
    request_done(req);
}

void http_stream_begin(http_request *req, int status, const char *ctype, const char *extra)
{
    request_buf *r = (request_buf *)req;
    sbuf h = {0};
    req->status = status;
    req->streaming = true;
    if (r->http10)
        req->keep_alive = false; /* the end of the body is the end of the connection */
    head_text(&h, req, status, ctype, extra, -1);
    if (h.data == NULL)
        conn_close(req->conn);
    else
        conn_write(req->conn, h.data, h.len, NULL, 0);
    sbuf_free(&h);
}

void http_stream_write(http_request *req, const char *data, size_t len)
{
    if (len == 0) /* an empty chunk would end the body */
        return;
    if (((request_buf *)req)->http10) {
        conn_write(req->conn, data, len, NULL, 0);
        return;
    }
    char size_line[32];
    int n = snprintf(size_line, sizeof size_line, "%zx\r\n", len);
    sbuf chunk = {0};
    if (sbuf_add(&chunk, size_line, (size_t)n) && sbuf_add(&chunk, data, len) && sbuf_add(&chunk, "\r\n", 2))
        conn_write(req->conn, chunk.data, chunk.len, NULL, 0);
    else
        conn_close(req->conn);
    sbuf_free(&chunk);
}

void http_stream_end(http_request *req)
{
    if (!((request_buf *)req)->http10)
        conn_write(req->conn, "0\r\n\r\n", 5, NULL, 0);
    request_done(req);
}

char *http_take_body(http_request *req, size_t *len)
{
    request_buf *r = (request_buf *)req;
    char *body = r->body.data ? r->body.data : strdup("");
    *len = r->body.len;
    r->body = (sbuf){0};
    req->body = "";
    req->body_len = 0;
    return body;
}

/* ------------------------------------------------------------ parsing */

static http_conn *conn_of(http_parser *p)
{
    return p->data;
}

/* Refuses the request being read with status and a message. */
static int refuse(http_conn *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(http_conn *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error_text, sizeof c->error_text, fmt, ap);
    va_end(ap);
    c->error_status = status;
    c->error_message = c->error_text;
    return -1;
}

static int count_header(http_conn *c, size_t len)
{
    c->header_bytes += len;
    if (c->header_bytes > c->server->limits.max_header)
        return refuse(c, 431, "request line and headers exceed %zu bytes", c->server->limits.max_header);
    return 0;
}

static int on_message_begin(http_parser *p)
{
    http_conn *c = conn_of(p);
    request_buf *r = calloc(1, sizeof *r);
    if (r == NULL)
        return refuse(c, 503, "out of memory for a request");
    r->pub.conn = c;
    r->pub.t_start = serve_now_ms();
    c->parsing = r;
    c->header_bytes = 0;
    c->field_len = 0;
    c->in_value = false;
    c->expect.len = 0;
    update_timer(c);
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    if (count_header(c, len) != 0)
        return -1;
    return sbuf_add(&c->parsing->url, at, len) ? 0 : refuse(c, 503, "out of memory");
}

static header_kind header_of(const http_conn *c)
{
    if (c->field_too_long)
        return HDR_OTHER;
    if (strcasecmp(c->field, "authorization") == 0)
        return HDR_AUTHORIZATION;
    if (strcasecmp(c->field, "expect") == 0)
        return HDR_EXPECT;
    return HDR_OTHER;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    if (count_header(c, len) != 0)
        return -1;
    if (c->in_value) { /* a new field begins */
        c->in_value = false;
        c->field_len = 0;
        c->field_too_long = false;
    }
    if (c->field_len + len > FIELD_MAX) {
        c->field_too_long = true;
        return 0;
    }
    memcpy(c->field + c->field_len, at, len);
    c->field_len += len;
    c->field[c->field_len] = '\0';
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    if (count_header(c, len) != 0)
        return -1;
    if (!c->in_value) {
        c->in_value = true;
        c->header = header_of(c);
        if (c->header == HDR_AUTHORIZATION)
            c->parsing->auth.len = 0; /* a repeated header: the last one counts */
    }
    sbuf *target = c->header == HDR_AUTHORIZATION ? &c->parsing->auth : c->header == HDR_EXPECT ? &c->expect : NULL;
    if (target != NULL && !sbuf_add(target, at, len))
        return refuse(c, 503, "out of memory");
    return 0;
}

/* Splits the URL into path and query. */
static int split_url(http_conn *c, request_buf *r)
{
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (r->url.data == NULL || http_parser_parse_url(r->url.data, r->url.len, 0, &u) != 0 ||
        !(u.field_set & (1 << UF_PATH)))
        return refuse(c, 400, "the request target is not a valid path");
    const size_t path_len = u.field_data[UF_PATH].len;
    const size_t query_len = u.field_set & (1 << UF_QUERY) ? u.field_data[UF_QUERY].len : 0;
    r->path_query = malloc(path_len + query_len + 2);
    if (r->path_query == NULL)
        return refuse(c, 503, "out of memory");
    memcpy(r->path_query, r->url.data + u.field_data[UF_PATH].off, path_len);
    r->path_query[path_len] = '\0';
    char *query = r->path_query + path_len + 1;
    if (query_len > 0)
        memcpy(query, r->url.data + u.field_data[UF_QUERY].off, query_len);
    query[query_len] = '\0';
    r->pub.path = r->path_query;
    r->pub.query = query;
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    http_conn *c = conn_of(p);
    request_buf *r = c->parsing;
    const size_t max_body = c->server->limits.max_body;
    /* content_length is ULLONG_MAX when the header is absent */
    if (p->content_length != ULLONG_MAX && p->content_length > max_body)
        return refuse(c, 413, "the request body of %llu bytes exceeds the limit of %zu bytes",
                      (unsigned long long)p->content_length, max_body);
    if (split_url(c, r) != 0)
        return -1;
    r->pub.method = p->method;
    r->pub.keep_alive = http_should_keep_alive(p) != 0;
    r->http10 = p->http_major == 1 && p->http_minor == 0;
    r->pub.authorization = r->auth.data;
    /* Clients that wait for "100 Continue" before a body (curl does, for
     * bodies over 1 KiB) get it, unless it would overtake a response. */
    if (c->expect.data != NULL && strcasecmp(c->expect.data, "100-continue") == 0 && c->head == NULL)
        conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, NULL, 0);
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    http_conn *c = conn_of(p);
    request_buf *r = c->parsing;
    const size_t max_body = c->server->limits.max_body;
    if (r->body.len + len > max_body) /* a chunked body has no length up front */
        return refuse(c, 413, "the request body exceeds the limit of %zu bytes", max_body);
    return sbuf_add(&r->body, at, len) ? 0 : refuse(c, 503, "out of memory");
}

static int on_message_complete(http_parser *p)
{
    http_conn *c = conn_of(p);
    request_buf *r = c->parsing;
    c->parsing = NULL;
    r->pub.body = r->body.data ? r->body.data : "";
    r->pub.body_len = r->body.len;
    queue_push(c, r);
    return 0;
}

/* The request being read cannot be: it is answered with an error (after
 * those before it) and the connection closes after that answer. */
static void fail_request(http_conn *c, int status, const char *message)
{
    request_buf *r = c->parsing;
    c->parsing = NULL;
    if (r == NULL && (r = calloc(1, sizeof *r)) == NULL) {
        conn_close(c);
        return;
    }
    r->pub.conn = c;
    if (r->pub.t_start == 0)
        r->pub.t_start = serve_now_ms();
    r->pub.error_status = status;
    r->pub.error_message = message;
    r->pub.keep_alive = false;
    queue_push(c, r);
    c->read_closed = true; /* what follows is read and dropped */
}

static void parse_failed(http_conn *c)
{
    const enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (c->error_status != 0)
        fail_request(c, c->error_status, c->error_message);
    else if (e == HPE_HEADER_OVERFLOW)
        fail_request(c, 431, "the request headers are too large");
    else
        fail_request(c, 400, e == HPE_OK ? "protocol upgrades are not supported" : http_errno_description(e));
}

/* ------------------------------------------------------------ reading */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested, (void)h;
    *buf = uv_buf_init(read_buf, sizeof read_buf);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    http_conn *c = stream->data;
    if (nread < 0) { /* EOF or reset: whatever it asked for is cancelled */
        conn_close(c);
        return;
    }
    if (nread == 0 || c->read_closed || c->closing) /* dropped: after an error, or lingering */
        return;
    http_parser_execute(&c->parser, &parser_settings, buf->base, (size_t)nread);
    if (HTTP_PARSER_ERRNO(&c->parser) != HPE_OK || c->parser.upgrade)
        parse_failed(c);
    else if (c->n_queued >= MAX_QUEUED) {
        uv_read_stop(stream);
        c->reading = false;
    }
    dispatch(c);
    update_timer(c);
}

static void start_reading(http_conn *c)
{
    c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
}

static void on_timer(uv_timer_t *t)
{
    http_conn *c = t->data;
    const double now = serve_now_ms(), timeout = c->server->limits.timeout_ms;
    if (c->lingering && now >= c->linger_until) {
        conn_close(c);
        return;
    }
    if (write_queue(c) > 0 && now >= c->last_progress + timeout) {
        if (c->server->verbose)
            serve_log("dropping a client that took no response bytes for %.0f s", timeout / 1e3);
        conn_close(c);
        return;
    }
    if (c->parsing != NULL && now >= c->parsing->pub.t_start + timeout) {
        fail_request(c, 408, "the request did not arrive within the timeout");
        dispatch(c);
    } else if (c->parsing == NULL && c->head == NULL && c->pending_writes == 0 && now >= c->idle_since + timeout) {
        conn_close(c);
        return;
    }
    update_timer(c);
}

/* ------------------------------------------------------------ server */

static void free_handle(uv_handle_t *h)
{
    free(h);
}

static void on_connection(uv_stream_t *listener, int status)
{
    http_server *s = listener->data;
    if (status < 0)
        return;
    http_conn *c = calloc(1, sizeof *c);
    if (c == NULL) { /* take the connection off the backlog and drop it */
        uv_tcp_t *t = malloc(sizeof *t);
        if (t != NULL && uv_tcp_init(s->loop, t) == 0) {
            uv_accept(listener, (uv_stream_t *)t);
            uv_close((uv_handle_t *)t, free_handle);
        } else {
            free(t);
        }
        return;
    }
    c->server = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0 || s->n_conns > MAX_CONNS || s->stopping) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    int sndbuf = SEND_BUFFER;
    uv_send_buffer_size((uv_handle_t *)&c->tcp, &sndbuf);
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    c->idle_since = serve_now_ms();
    start_reading(c);
    update_timer(c);
}

int http_server_start(http_server *s, uv_loop_t *loop, const char *host, int port, const http_limits *limits,
                      http_handler_fn handle, void *user)
{
    parser_settings = (http_parser_settings){
        .on_message_begin = on_message_begin,
        .on_url = on_url,
        .on_header_field = on_header_field,
        .on_header_value = on_header_value,
        .on_headers_complete = on_headers_complete,
        .on_body = on_body,
        .on_message_complete = on_message_complete,
    };
    s->loop = loop;
    s->limits = *limits;
    s->handle = handle;
    s->user = user;
    struct sockaddr_storage addr;
    int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc != 0)
        rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    if (rc != 0) {
        serve_log("--host %s: not an IPv4 or IPv6 address", host);
        return rc;
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (rc != 0) {
        serve_log("cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        uv_close((uv_handle_t *)&s->listener, NULL);
        return rc;
    }
    return 0;
}

void http_server_stop(http_server *s)
{
    s->stopping = true;
    if (!uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, NULL);
    for (http_conn *c = s->conns; c != NULL; c = c->next)
        conn_close(c);
}
