/*
 * metrics.c — counters and histograms behind one mutex (updated a few
 * times per generated token: no contention worth avoiding), rendered in
 * the Prometheus text exposition format 0.0.4: "# HELP", "# TYPE", then
 * samples; a histogram as cumulative _bucket{le="..."} lines ending in
 * le="+Inf", then _sum and _count.
 */
#include "metrics.h"

#include <pthread.h>

/* Upper bounds in seconds; TTFT spans queueing and long prompts, the
 * inter-token latency one decode step of a batch. */
static const double ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double itl_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
enum { MAX_BOUNDS = 16 };
enum { SPEC_MAX_WIDTH = 257 }; /* --spec-draft-n-max 256, plus the pending token */

typedef struct histogram {
    const char *name, *help;
    const double *bounds;
    int n_bounds;
    unsigned long long counts[MAX_BOUNDS + 1]; /* per bucket, not cumulative; the last is +Inf */
    double sum;
    unsigned long long count;
} histogram;

static const char *const finish_names[] = {
    [FINISH_NONE] = "none", [FINISH_STOP] = "stop", [FINISH_LENGTH] = "length",
    [FINISH_CANCELLED] = "cancelled", [FINISH_ERROR] = "error",
};
enum { N_FINISH = sizeof finish_names / sizeof finish_names[0] };

static struct {
    pthread_mutex_t lock;
    unsigned long long prompt_tokens, cached_tokens, cache_hits, generated;
    unsigned long long drafted, accepted, verify_passes, verify_rows;
    bool width_seen[SPEC_MAX_WIDTH + 1]; /* verify widths used: one CUDA graph each where graphs apply */
    int n_widths;
    unsigned long long finished[N_FINISH];
    histogram ttft, itl;
} m = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .ttft = {"hydra:time_to_first_token_seconds", "Time from a request's arrival to its first generated token.",
             ttft_bounds, sizeof ttft_bounds / sizeof ttft_bounds[0], {0}, 0, 0},
    .itl = {"hydra:inter_token_latency_seconds", "Time between two generated tokens of one request.", itl_bounds,
            sizeof itl_bounds / sizeof itl_bounds[0], {0}, 0, 0},
};

static void observe(histogram *h, double v)
{
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void metrics_prompt(int n_evaluated, int n_cached)
{
    pthread_mutex_lock(&m.lock);
    m.prompt_tokens += (unsigned long long)n_evaluated;
    m.cached_tokens += (unsigned long long)n_cached;
    m.cache_hits += n_cached > 0;
    pthread_mutex_unlock(&m.lock);
}

void metrics_first_token(double seconds)
{
    pthread_mutex_lock(&m.lock);
    observe(&m.ttft, seconds);
    m.generated++;
    pthread_mutex_unlock(&m.lock);
}

void metrics_next_token(double seconds)
{
    pthread_mutex_lock(&m.lock);
    observe(&m.itl, seconds);
    m.generated++;
    pthread_mutex_unlock(&m.lock);
}

void metrics_finished(finish_kind finish)
{
    pthread_mutex_lock(&m.lock);
    if ((unsigned)finish < N_FINISH)
        m.finished[finish]++;
    pthread_mutex_unlock(&m.lock);
}

void metrics_spec(int n_drafted, int n_accepted, int width)
{
    pthread_mutex_lock(&m.lock);
    m.drafted += (unsigned long long)n_drafted;
    m.accepted += (unsigned long long)n_accepted;
    m.verify_passes++;
    m.verify_rows += (unsigned long long)width;
    if (width >= 0 && width <= SPEC_MAX_WIDTH && !m.width_seen[width]) {
        m.width_seen[width] = true;
        m.n_widths++;
    }
    pthread_mutex_unlock(&m.lock);
}

static bool family(sbuf *out, const char *name, const char *type, const char *help)
{
    return sbuf_addf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static bool scalar(sbuf *out, const char *name, const char *type, const char *help, double v)
{
    return family(out, name, type, help) && sbuf_addf(out, "%s %.17g\n", name, v);
}

static bool render_histogram(sbuf *out, const histogram *h)
{
    bool ok = family(out, h->name, "histogram", h->help);
    unsigned long long cumulative = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cumulative += h->counts[i];
        ok = ok && sbuf_addf(out, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[i], cumulative);
    }
    return ok && sbuf_addf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", h->name, h->count,
                           h->name, h->sum, h->name, h->count);
}

bool metrics_render(sbuf *out, const metrics_gauges *g)
{
    pthread_mutex_lock(&m.lock);
    bool ok = scalar(out, "hydra:requests_running", "gauge", "Requests holding a slot.", g->running) &&
              scalar(out, "hydra:requests_waiting", "gauge", "Requests waiting for a slot.", g->waiting) &&
              scalar(out, "hydra:slots", "gauge", "Slots (-np).", g->n_slots) &&
              scalar(out, "hydra:kv_cache_used_positions", "gauge", "KV cache positions holding tokens, all slots.",
                     (double)g->kv_used) &&
              scalar(out, "hydra:kv_cache_usage_ratio", "gauge", "Share of the KV cache holding tokens.",
                     g->kv_total > 0 ? (double)g->kv_used / (double)g->kv_total : 0) &&
              scalar(out, "hydra:prompt_tokens_total", "counter", "Prompt tokens evaluated (not cached).",
                     (double)m.prompt_tokens) &&
              scalar(out, "hydra:prompt_tokens_cached_total", "counter", "Prompt tokens found in a slot's cache.",
                     (double)m.cached_tokens) &&
              scalar(out, "hydra:prompt_cache_hits_total", "counter", "Requests that reused a cached prefix.",
                     (double)m.cache_hits) &&
              scalar(out, "hydra:tokens_generated_total", "counter", "Tokens generated.", (double)m.generated) &&
              scalar(out, "hydra:spec_draft_tokens_total", "counter", "Tokens drafted by the draft model (-md).",
                     (double)m.drafted) &&
              scalar(out, "hydra:spec_accepted_tokens_total", "counter", "Drafted tokens the verify passes kept.",
                     (double)m.accepted) &&
              scalar(out, "hydra:spec_verify_passes_total", "counter", "Speculative verify passes (one per slot "
                     "and step).", (double)m.verify_passes) &&
              scalar(out, "hydra:spec_verify_rows_total", "counter", "Rows of the verify passes, padding included.",
                     (double)m.verify_rows) &&
              scalar(out, "hydra:spec_verify_widths", "gauge", "Distinct verify widths used since the start (1 with "
                     "--spec-fixed-width).", m.n_widths) &&
              family(out, "hydra:requests_finished_total", "counter", "Generation requests finished, by reason.");
    for (int f = FINISH_STOP; f < N_FINISH && ok; f++)
        ok = sbuf_addf(out, "hydra:requests_finished_total{reason=\"%s\"} %llu\n", finish_names[f], m.finished[f]);
    ok = ok && render_histogram(out, &m.ttft) && render_histogram(out, &m.itl);
    pthread_mutex_unlock(&m.lock);
    return ok;
}
