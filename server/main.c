/*
 * hydra-serve — an OpenAI-compatible HTTP server for one model
 * (docs/SERVER.md).  The loop thread does all network I/O; the engine
 * thread runs the model; libuv's work threads validate, render and
 * tokenize requests.  The server listens at once and answers /health with
 * 503 until the model is loaded.  SIGINT or SIGTERM shut it down: clients
 * are disconnected, generation stops, everything is freed; exit status 0
 * (1 when the model could not be loaded or the address not bound).
 */
#include "api.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { MAX_HEADER_BYTES = 32 * 1024, PING_TICK_MS = 1000 };

static void stop_engine_when_idle(server_ctx *sc)
{
    if (sc->stopping && sc->n_work == 0 && sc->eng != NULL) {
        engine_stop(sc->eng);
        sc->eng = NULL;
    }
}

void api_work_begin(server_ctx *sc)
{
    sc->n_work++;
}

void api_work_end(server_ctx *sc)
{
    sc->n_work--;
    stop_engine_when_idle(sc);
}

int api_queue_work(server_ctx *sc, http_request *req, uv_work_t *w, void *data, http_abort_fn on_abort,
                   uv_work_cb work, uv_after_work_cb after)
{
    w->data = data;
    req->handler_data = data;
    req->on_abort = on_abort;
    if (uv_queue_work(sc->loop, w, work, after) != 0) {
        req->on_abort = NULL;
        return -1;
    }
    api_work_begin(sc);
    return 0;
}

static void shut_down(server_ctx *sc)
{
    if (sc->stopping)
        return;
    sc->stopping = true;
    http_server_stop(&sc->http);
    uv_close((uv_handle_t *)&sc->ping_timer, NULL);
    uv_close((uv_handle_t *)&sc->sigint, NULL);
    uv_close((uv_handle_t *)&sc->sigterm, NULL);
    stop_engine_when_idle(sc);
}

static void on_signal(uv_signal_t *h, int signum)
{
    server_ctx *sc = h->data;
    serve_log("%s: shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    shut_down(sc);
}

static void on_ping(uv_timer_t *t)
{
    complete_ping(t->data);
}

static void on_loaded(engine *e, void *user)
{
    server_ctx *sc = user;
    if (engine_get_state(e) == ENGINE_READY) {
        serve_log("model loaded: %s, %d slots of %u positions", sc->model_name, engine_n_slots(e), engine_slot_ctx(e));
        return;
    }
    serve_log("cannot load the model: %s", engine_error(e));
    sc->exit_code = 1;
    shut_down(sc);
}

/* The file's base name without ".gguf". */
static void default_name(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0)
        n -= 5;
    snprintf(out, cap, "%.*s", (int)n, base);
}

static int check_slot_dir(const char *dir)
{
    struct stat st;
    if (dir != NULL && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        serve_log("--slot-save-path %s: not a folder", dir);
        return -1;
    }
    return 0;
}

static int start(server_ctx *sc, uv_loop_t *loop)
{
    const serve_opts *o = sc->o;
    const http_limits limits = {.max_header = MAX_HEADER_BYTES, .max_body = (size_t)o->max_body,
                                .timeout_ms = o->timeout_s * 1e3};
    sc->http.verbose = o->verbose;
    if (http_server_start(&sc->http, loop, o->host, o->port, &limits, api_handle, sc) != 0)
        return -1;
    struct sockaddr_storage addr;
    int len = sizeof addr;
    int port = o->port;
    if (uv_tcp_getsockname(&sc->http.listener, (struct sockaddr *)&addr, &len) == 0)
        port = ntohs(((struct sockaddr_in *)&addr)->sin_port); /* sin6_port sits at the same offset */
    serve_log("listening on http://%s:%d", o->host, port);
    if (engine_start(&sc->eng, o, loop, on_loaded, sc) != 0) {
        http_server_stop(&sc->http);
        return -1;
    }
    uv_timer_init(loop, &sc->ping_timer);
    sc->ping_timer.data = sc;
    uv_timer_start(&sc->ping_timer, on_ping, PING_TICK_MS, PING_TICK_MS);
    uv_signal_init(loop, &sc->sigint);
    uv_signal_init(loop, &sc->sigterm);
    sc->sigint.data = sc->sigterm.data = sc;
    uv_signal_start(&sc->sigint, on_signal, SIGINT);
    uv_signal_start(&sc->sigterm, on_signal, SIGTERM);
    return 0;
}

int main(int argc, char **argv)
{
    serve_opts o;
    serve_opts_init(&o);
    if (serve_parse_args(argc, argv, &o) != 0) {
        serve_opts_free(&o);
        return 2;
    }
    if (o.help) {
        serve_usage();
        serve_opts_free(&o);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN); /* a closed socket is an error from write, not a signal */
    server_ctx sc = {.o = &o, .started = (long long)time(NULL)};
    if (o.alias != NULL)
        snprintf(sc.model_name, sizeof sc.model_name, "%s", o.alias);
    else
        default_name(o.model_path, sc.model_name, sizeof sc.model_name);
    uv_loop_t *loop = uv_default_loop();
    sc.loop = loop;
    const int rc = check_slot_dir(o.slot_save_path) == 0 && start(&sc, loop) == 0 ? 0 : 1;
    uv_run(loop, UV_RUN_DEFAULT); /* after a failed start: lets the closed handles finish */
    uv_loop_close(loop);
    serve_opts_free(&o);
    return rc != 0 ? rc : sc.exit_code;
}
