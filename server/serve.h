/*
 * serve.h — hydra-serve's options and the small helpers every part of the
 * server shares.  The parts:
 *
 *   main.c       start-up, signals, shutdown
 *   flags.c      the command line (one table of flags)
 *   http.c       connections: reading, http_parser, limits, timeouts,
 *                pipelining, writing whole and chunked (SSE) responses
 *   router.c     method + path -> handler; API key; CORS; 404/405
 *   request.c    the JSON body of a generation request, validated
 *   prepare.c    off the loop: validate, render the chat template, tokenize
 *   complete.c   /v1/chat/completions and /v1/completions over the engine
 *   shape.c      OpenAI response objects, stream chunks, error bodies
 *   endpoints.c  the small endpoints: models, health, metrics, tokenize...
 *   engine.c     the engine thread: slots, queue, continuous batching
 *   slot.c       one slot's request: sampling, text, stop strings, timings
 *   cache.c      prompt cache: hashed token blocks, longest prefix
 *   slotfile.c   slot save/restore files
 *   metrics.c    counters and histograms, Prometheus text
 *   util.c       clock, log line, growable buffer
 */
#ifndef HYDRA_SERVE_H
#define HYDRA_SERVE_H

#include "hydra.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { SERVE_MAX_API_KEYS = 64 };

typedef struct serve_opts {
    const char *model_path;     /* -m */
    const char *alias;          /* -a: the model's name in responses; default: the file's base name */
    const char *host;           /* --host */
    int port;                   /* --port */
    int n_parallel;             /* -np: slots */
    int n_ctx;                  /* -c: the context of all slots together; 0: 4096 per slot */
    int n_threads;              /* -t; 0: physical cores */
    int n_batch;                /* -b: most tokens one engine step evaluates */
    int n_predict;              /* -n: tokens a request may generate by default; -1: until the end */
    int timeout_s;              /* --timeout: read timeout, stalled-reader timeout, idle keep-alive */
    int max_queue;              /* --max-queue: requests waiting for a slot before 503 */
    long long max_body;         /* --max-body: request body bytes before 413 */
    const char *chat_template;  /* --chat-template */
    const char *slot_save_path; /* --slot-save-path */
    const char *api_keys[SERVE_MAX_API_KEYS]; /* --api-key, --api-key-file: pointers into keys_owned */
    int n_api_keys;
    char *keys_owned[SERVE_MAX_API_KEYS];
    int n_keys_owned;
    bool metrics;               /* --metrics: /metrics answers */
    bool verbose;               /* -v: one line per request on stderr */
    bool help;
    const char *draft_path;     /* -md: a draft model for speculative decoding; NULL: none */
    bool spec_mtp;              /* --spec-mtp: the model's own MTP block drafts instead */
    int spec_n_max;             /* --spec-draft-n-max: most drafts per step */
    float spec_p_min;           /* --spec-draft-p-min: drafting stops below this confidence */
    bool spec_fixed_width;      /* --spec-fixed-width: every verify pass padded to spec_n_max + 1 rows */
    hydra_sampler_params sampling; /* request defaults */
    long long seed;             /* -s; -1: a fresh seed per request */
} serve_opts;

/* flags.c */
void serve_opts_init(serve_opts *o);
void serve_opts_free(serve_opts *o);
/* 0, or -1 after one line on stderr naming the flag. */
int serve_parse_args(int argc, char **argv, serve_opts *o);
void serve_usage(void);

/* util.c: one line on stderr, "hydra-serve: ...". */
void serve_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic clock in milliseconds. */
double serve_now_ms(void);

/* A growable byte buffer (always NUL-terminated when data != NULL). */
typedef struct sbuf {
    char *data;
    size_t len, cap;
} sbuf;

bool sbuf_add(sbuf *b, const void *data, size_t len);
bool sbuf_addf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_free(sbuf *b);

#endif
