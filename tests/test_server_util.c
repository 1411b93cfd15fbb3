/*
 * test_server_util.c — the implementation of tests/server/server_util.h
 * (no tests of its own): a child hydra-serve process, and a small blocking
 * HTTP/1.1 client that reads exactly what the server wrote, so the tests
 * can check framing (Content-Length, chunked, keep-alive, close).
 */
#include "server/server_util.h"

#include "synth.h"
#include "test.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ process */

const char *ts_model(void)
{
    static char path[4096];
    if (path[0] == '\0') {
        synth_params p;
        snprintf(path, sizeof path, "%s", util_scratch_path("server-tiny.gguf"));
        if (synth_preset("tiny", &p) != HYDRA_OK || synth_write(path, &p) != HYDRA_OK)
            path[0] = '\0';
    }
    return path[0] ? path : NULL;
}

bool ts_sanitized(void)
{
    return strstr(test_build_dir(), "san") != NULL;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void exec_server(const test_server *s, const char *model, const char *args)
{
    char bin[4096], port[16], argbuf[4096];
    char *argv[64];
    int n = 0;
    snprintf(bin, sizeof bin, "%s/hydra-serve", test_build_dir());
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(argbuf, sizeof argbuf, "%s", args ? args : "");
    argv[n++] = bin;
    argv[n++] = "-m";
    argv[n++] = (char *)model;
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "-t";
    argv[n++] = "1";
    for (char *save, *a = strtok_r(argbuf, " ", &save); a != NULL && n < 62; a = strtok_r(NULL, " ", &save))
        argv[n++] = a;
    argv[n] = NULL;
    /* the server goes when the test process does, even when it crashes */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execv(bin, argv);
    _exit(127);
}

bool ts_start(test_server *s, const char *model, const char *args)
{
    static int counter;
    memset(s, 0, sizeof *s);
    model = model ? model : ts_model();
    s->port = free_port();
    char name[64];
    snprintf(name, sizeof name, "server-%d-%d.log", (int)getpid(), counter++);
    snprintf(s->log, sizeof s->log, "%s", util_scratch_path(name));
    if (model == NULL || s->port < 0)
        return false;
    s->pid = fork();
    if (s->pid < 0)
        return false;
    if (s->pid == 0)
        exec_server(s, model, args);
    for (int i = 0; i < 3000; i++) { /* up to 30 s: a sanitized start is slow */
        ts_resp r;
        if (ts_request(s->port, "GET", "/health", NULL, NULL, &r)) {
            const bool up = r.status == 200;
            ts_resp_free(&r);
            if (up)
                return true;
        }
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            return false;
        }
        sleep_ms(10);
    }
    ts_stop(s);
    return false;
}

int ts_stop(test_server *s)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 3000; i++) {
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        sleep_ms(10);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &status, 0);
    s->pid = 0;
    return -1;
}

const char *ts_log(const test_server *s)
{
    static char text[1500];
    size_t n = 0;
    uint8_t *data = util_read_file(s->log, &n);
    const size_t keep = n < sizeof text - 1 ? n : sizeof text - 1;
    memcpy(text, data ? (char *)data + (n - keep) : "", data ? keep : 0);
    text[data ? keep : 0] = '\0';
    free(data);
    return text;
}

long ts_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r"); /* proc files have no size: read them line by line */
    long kb = -1;
    while (f != NULL && kb < 0 && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f != NULL)
        fclose(f);
    return kb;
}

/* ------------------------------------------------------------ connections */

bool ts_open(ts_conn *c, int port, int timeout_ms)
{
    c->len = 0;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    const int one = 1;
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        return false;
    }
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return true;
}

void ts_close(ts_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

bool ts_send(ts_conn *c, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

bool ts_send_str(ts_conn *c, const char *s)
{
    return ts_send(c, s, strlen(s));
}

bool ts_send_request(ts_conn *c, const char *method, const char *path, const char *extra_headers, const char *body)
{
    char head[4096];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s", method, path,
                     extra_headers ? extra_headers : "");
    if (body != NULL)
        n += snprintf(head + n, sizeof head - (size_t)n, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                      strlen(body));
    snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    return ts_send_str(c, head) && (body == NULL || ts_send_str(c, body));
}

/* More bytes into the buffer; false on EOF, error or timeout. */
static bool fill(ts_conn *c)
{
    if (c->len == sizeof c->buf)
        return false;
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (n <= 0)
        return false;
    c->len += (size_t)n;
    return true;
}

static void consume(ts_conn *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

/* The buffer up to and including a "\r\n" (or "\r\n\r\n"), as a string. */
static char *take_until(ts_conn *c, const char *delim)
{
    for (;;) {
        char *at = memmem(c->buf, c->len, delim, strlen(delim));
        if (at != NULL) {
            const size_t n = (size_t)(at - c->buf) + strlen(delim);
            char *out = strndup(c->buf, n);
            consume(c, n);
            return out;
        }
        if (!fill(c))
            return NULL;
    }
}

static bool take_bytes(ts_conn *c, size_t n, char **body, size_t *len)
{
    char *grown = realloc(*body, *len + n + 1);
    if (grown == NULL)
        return false;
    *body = grown;
    while (n > 0) {
        if (c->len == 0 && !fill(c))
            return false;
        const size_t k = c->len < n ? c->len : n;
        memcpy(*body + *len, c->buf, k);
        *len += k;
        (*body)[*len] = '\0';
        consume(c, k);
        n -= k;
    }
    return true;
}

static bool read_chunked(ts_conn *c, ts_resp *r)
{
    for (;;) {
        char *line = take_until(c, "\r\n");
        if (line == NULL)
            return false;
        char *end;
        const unsigned long size = strtoul(line, &end, 16);
        const bool ok = end != line;
        free(line);
        if (!ok)
            return false;
        if (size == 0) {
            char *crlf = take_until(c, "\r\n");
            free(crlf);
            return crlf != NULL;
        }
        char *trailer = NULL;
        size_t tl = 0;
        if (!take_bytes(c, size, &r->body, &r->body_len) || !take_bytes(c, 2, &trailer, &tl)) {
            free(trailer);
            return false;
        }
        free(trailer);
    }
}

bool ts_read(ts_conn *c, ts_resp *r)
{
    memset(r, 0, sizeof *r);
    do { /* a 100 Continue comes before the response */
        free(r->head);
        r->head = take_until(c, "\r\n\r\n");
        if (r->head == NULL || sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1)
            return false;
    } while (r->status == 100);
    r->body = calloc(1, 1);
    const char *te = ts_header(r, "Transfer-Encoding");
    bool ok;
    if (te != NULL && strcasecmp(te, "chunked") == 0) {
        ok = read_chunked(c, r);
    } else {
        const char *cl = ts_header(r, "Content-Length");
        ok = cl != NULL ? take_bytes(c, strtoul(cl, NULL, 10), &r->body, &r->body_len) : true;
        if (cl == NULL) /* the body runs to the end of the connection */
            while (take_bytes(c, c->len ? c->len : 1, &r->body, &r->body_len))
                ;
    }
    const char *conn = ts_header(r, "Connection");
    r->closed = conn != NULL && strcasecmp(conn, "close") == 0;
    return ok;
}

void ts_resp_free(ts_resp *r)
{
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

bool ts_sees_eof(ts_conn *c, int timeout_ms)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    if (c->len > 0 || poll(&p, 1, timeout_ms) <= 0)
        return false;
    char b;
    return recv(c->fd, &b, 1, MSG_PEEK) == 0;
}

bool ts_request(int port, const char *method, const char *path, const char *extra_headers, const char *body,
                ts_resp *r)
{
    ts_conn c;
    memset(r, 0, sizeof *r);
    if (!ts_open(&c, port, 30000))
        return false;
    const bool ok = ts_send_request(&c, method, path, extra_headers, body) && ts_read(&c, r);
    ts_close(&c);
    return ok;
}

const char *ts_header(const ts_resp *r, const char *name)
{
    static _Thread_local char value[512]; /* the load test reads headers from 16 threads */
    const size_t n = strlen(name);
    for (const char *line = r->head ? strstr(r->head, "\r\n") : NULL; line != NULL; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            const char *end = strstr(v, "\r\n");
            snprintf(value, sizeof value, "%.*s", (int)(end ? end - v : (long)strlen(v)), v);
            return value;
        }
    }
    return NULL;
}

cJSON *ts_json(const ts_resp *r)
{
    return r->body ? cJSON_ParseWithLength(r->body, r->body_len) : NULL;
}

int ts_number(const cJSON *obj, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, a);
    if (b != NULL)
        v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

const cJSON *ts_first_choice(const cJSON *reply, char *text, size_t text_len, char *finish, size_t finish_len)
{
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(reply, "choices"), 0);
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(choice, "message");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(msg ? msg : choice, msg ? "content" : "text");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    snprintf(text, text_len, "%s", cJSON_IsString(t) ? t->valuestring : "");
    snprintf(finish, finish_len, "%s", cJSON_IsString(f) ? f->valuestring : "");
    return choice;
}

bool ts_is_error(const ts_resp *r, int status, const char *type, const char *message_part)
{
    cJSON *j = ts_json(r);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(err, "message");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(err, "type");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
    const bool ok = r->status == status && cJSON_IsString(m) && cJSON_IsString(t) && strcmp(t->valuestring, type) == 0 &&
                    cJSON_IsNumber(code) && code->valueint == status &&
                    (message_part == NULL || strstr(m->valuestring, message_part) != NULL);
    cJSON_Delete(j);
    return ok;
}

/* ------------------------------------------------------------ SSE */

static void stream_event(ts_stream *s, const char *data)
{
    cJSON *j = cJSON_Parse(data);
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    if (!cJSON_IsObject(j) || !cJSON_IsArray(choices) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "id"))) {
        if (s->error[0] == '\0')
            snprintf(s->error, sizeof s->error, "event %d is not a chunk: %.120s", s->n_events, data);
        s->well_formed = false;
        cJSON_Delete(j);
        return;
    }
    if (cJSON_GetArraySize(choices) == 0) {
        s->usage_choices_empty = true;
        cJSON_Delete(s->usage);
        s->usage = cJSON_DetachItemFromObjectCaseSensitive(j, "usage");
    }
    const cJSON *c = choices->child;
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(c, "delta");
    const cJSON *piece = delta ? cJSON_GetObjectItemCaseSensitive(delta, "content")
                               : cJSON_GetObjectItemCaseSensitive(c, "text");
    if (s->n_events == 0 && delta != NULL)
        s->role_first = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(delta, "role"));
    if (cJSON_IsString(piece)) {
        const size_t old = strlen(s->text), add = strlen(piece->valuestring);
        char *t = realloc(s->text, old + add + 1);
        if (t != NULL) {
            memcpy(t + old, piece->valuestring, add + 1);
            s->text = t;
        }
    }
    const cJSON *fin = cJSON_GetObjectItemCaseSensitive(c, "finish_reason");
    if (cJSON_IsString(fin))
        snprintf(s->finish, sizeof s->finish, "%s", fin->valuestring);
    cJSON_Delete(j);
}

void ts_parse_stream(const char *body, size_t len, ts_stream *s)
{
    memset(s, 0, sizeof *s);
    s->text = calloc(1, 1);
    s->well_formed = true;
    const char *end = body + len;
    for (const char *p = body; p < end;) {
        const char *stop = memmem(p, (size_t)(end - p), "\n\n", 2);
        if (stop == NULL) {
            s->well_formed = false;
            snprintf(s->error, sizeof s->error, "an event without its blank line at byte %ld", (long)(p - body));
            return;
        }
        char *ev = strndup(p, (size_t)(stop - p));
        p = stop + 2;
        if (ev[0] == ':') { /* a comment (ping) */
            free(ev);
            continue;
        }
        if (strncmp(ev, "data: ", 6) != 0 || s->done) {
            s->well_formed = false;
            if (s->error[0] == '\0')
                snprintf(s->error, sizeof s->error, "unexpected event: %.120s", ev);
        } else if (strcmp(ev + 6, "[DONE]") == 0) {
            s->done = true;
        } else {
            stream_event(s, ev + 6);
            s->n_events++;
        }
        free(ev);
    }
}

void ts_stream_free(ts_stream *s)
{
    free(s->text);
    cJSON_Delete(s->usage);
    memset(s, 0, sizeof *s);
}
