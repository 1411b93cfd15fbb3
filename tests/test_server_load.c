/*
 * hydra-serve under load: 16 clients x 8 streaming chat requests each
 * against -np 4 (so requests queue and slots are reused all the time).
 * Every response must be complete and well-formed, none may fail, the
 * server's RSS after the run must be within 10% of its RSS after every
 * client's first WARM_UP requests (by then every slot, connection buffer
 * and thread has been used and each thread's malloc arena exists, so what
 * grows later is what requests leak), and the whole run is bounded in
 * time (about a second here, under the sanitizers too).  Under the
 * sanitizers RSS is not compared (ASan's quarantine holds freed memory on
 * purpose); the sanitized server's exit status covers leaks there
 * (LeakSanitizer).
 */
#include "server/server_util.h"
#include "test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N_CLIENTS = 16, N_REQUESTS = 8, WARM_UP = 2 };

typedef struct client {
    int port, id;
    pthread_barrier_t *first_done; /* every client's first request is done */
    int ok;
    char error[4096];
} client;

static bool one_request(client *c, int k)
{
    char body[512];
    /* distinct prompts, a few shared prefixes: the prompt cache is exercised too */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"client %d asks about the river, question %d\"}],"
             "\"max_tokens\":%d,\"stream\":true,\"stream_options\":{\"include_usage\":%s},\"seed\":%d}",
             c->id % 4, k, 8 + (c->id + k) % 9, k % 2 ? "true" : "false", c->id * 100 + k);
    ts_resp r;
    if (!ts_request(c->port, "POST", "/v1/chat/completions", NULL, body, &r) || r.status != 200) {
        snprintf(c->error, sizeof c->error, "request %d: status %d %.200s", k, r.status, r.body ? r.body : "");
        ts_resp_free(&r);
        return false;
    }
    ts_stream st;
    ts_parse_stream(r.body, r.body_len, &st);
    const bool ok = st.well_formed && st.done && st.role_first &&
                    (strcmp(st.finish, "stop") == 0 || strcmp(st.finish, "length") == 0) &&
                    (k % 2 == 0 || (st.usage != NULL && st.usage_choices_empty));
    if (!ok)
        snprintf(c->error, sizeof c->error, "request %d: malformed stream (%s) finish '%s' done %d role %d usage %d: %s",
                 k, st.error, st.finish, st.done, st.role_first, st.usage != NULL, r.body);
    ts_stream_free(&st);
    ts_resp_free(&r);
    return ok;
}

static void *run_client(void *arg)
{
    client *c = arg;
    bool failed = false;
    for (int k = 0; k < N_REQUESTS; k++) {
        if (!failed && one_request(c, k))
            c->ok++;
        else
            failed = true;
        if (k == WARM_UP - 1) /* twice: around the measurement after the warm-up */
            for (int i = 0; i < 2; i++)
                pthread_barrier_wait(c->first_done);
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

TEST(server_16_clients_x_8_streams_no_errors_no_leak)
{
    test_server s;
    if (!ts_start(&s, NULL, "-np 4 --max-queue 64"))
        FAIL("hydra-serve did not start: %s", ts_log(&s));
    pthread_barrier_t first_done;
    pthread_barrier_init(&first_done, NULL, N_CLIENTS + 1);
    client clients[N_CLIENTS];
    pthread_t threads[N_CLIENTS];
    const double t0 = now_s();
    for (int i = 0; i < N_CLIENTS; i++) {
        clients[i] = (client){.port = s.port, .id = i, .first_done = &first_done};
        pthread_create(&threads[i], NULL, run_client, &clients[i]);
    }
    pthread_barrier_wait(&first_done);
    const long rss_first = ts_rss_kb(s.pid);
    pthread_barrier_wait(&first_done);
    for (int i = 0; i < N_CLIENTS; i++)
        pthread_join(threads[i], NULL);
    const double elapsed = now_s() - t0;
    const long rss_after = ts_rss_kb(s.pid);
    const int status = ts_stop(&s);
    pthread_barrier_destroy(&first_done);
    for (int i = 0; i < N_CLIENTS; i++)
        if (clients[i].ok != N_REQUESTS)
            FAIL("client %d: %d of %d requests well-formed; %s; server log: %s", i, clients[i].ok, N_REQUESTS,
                 clients[i].error, ts_log(&s));
    printf("  %d x %d streams in %.2f s; RSS %ld KiB after the warm-up, %ld KiB after the run\n", N_CLIENTS,
           N_REQUESTS, elapsed, rss_first, rss_after);
    CHECK(rss_first > 0 && rss_after > 0);
    if (!ts_sanitized() && rss_after > rss_first + rss_first / 10)
        FAIL("RSS grew from %ld KiB to %ld KiB (more than 10%%)", rss_first, rss_after);
    if (elapsed > 60)
        FAIL("the run took %.1f s (bound: 60 s)", elapsed);
    CHECK_EQ_INT(status, 0);
}
