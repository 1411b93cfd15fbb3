/*
 * metrics.h — the server's counters and latency histograms, kept by the
 * engine thread and read by /metrics (Prometheus text format, "hydra:"
 * prefix).  One process has one set; every function is thread-safe.
 */
#ifndef HYDRA_SERVE_METRICS_H
#define HYDRA_SERVE_METRICS_H

#include "serve.h"
#include "task.h"

void metrics_prompt(int n_evaluated, int n_cached);
void metrics_first_token(double seconds); /* time to first token, from the request's arrival */
void metrics_next_token(double seconds);  /* time since the slot's previous token */
void metrics_finished(finish_kind finish);
/* One verify pass of a slot (-md): drafts, of them kept, its rows (padding included). */
void metrics_spec(int n_drafted, int n_accepted, int width);

typedef struct metrics_gauges {
    int running, waiting;
    long long kv_used, kv_total;
    int n_slots;
} metrics_gauges;

/* The whole exposition into *out. */
bool metrics_render(sbuf *out, const metrics_gauges *g);

#endif
