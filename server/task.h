/*
 * task.h — a unit of work for the engine thread and the channel its
 * results come back through.
 *
 * Ownership: the loop thread makes a task and owns it, except between
 * engine_submit() and the engine's final post (out.done): then the engine
 * owns everything but `cancel` (an atomic the loop may set at any time)
 * and the loop-side fields at the end.  Output is posted under the
 * engine's output lock and taken with engine_take(); once the loop has
 * taken a done task it is the loop's again, to free with task_free().
 */
#ifndef HYDRA_SERVE_TASK_H
#define HYDRA_SERVE_TASK_H

#include "serve.h"

#include <stdatomic.h>

typedef enum task_kind {
    TASK_GENERATE,     /* prompt in, tokens out */
    TASK_SLOT_SAVE,    /* a slot's tokens and cache to a file */
    TASK_SLOT_RESTORE, /* a file into a slot */
    TASK_SLOT_ERASE,   /* forget a slot's cache */
} task_kind;

typedef enum finish_kind {
    FINISH_NONE,
    FINISH_STOP,      /* an end-of-generation token or a stop string */
    FINISH_LENGTH,    /* max_tokens, or the context is full */
    FINISH_CANCELLED, /* the client went away */
    FINISH_ERROR,     /* out.error says why; out.error_status is the HTTP status */
} finish_kind;

enum { TASK_MAX_STOPS = 16 };

/* Most alternatives a token's logprobs list (OpenAI's top_logprobs limit). */
enum { LOGPROBS_MAX_TOP = 20 };

/* One generated token's log-probability and its most probable
 * alternatives' (logprobs.c), most probable first. */
typedef struct logprob_entry {
    hydra_token id;
    float logprob;
    int n_top;
    hydra_token top_id[LOGPROBS_MAX_TOP];
    float top_logprob[LOGPROBS_MAX_TOP];
} logprob_entry;

/* What a generation request asked for, validated. */
typedef struct gen_params {
    hydra_sampler_params sampling; /* seed chosen */
    int n_predict;                 /* -1: until the end of generation or of the context */
    bool text_start;               /* the reply begins a text (chat) rather than continuing the prompt's */
    bool ignore_eos;               /* end-of-generation tokens do not end it (llama-server's ignore_eos) */
    int n_logprobs;                /* -1: none; else alternatives per token reported (0..LOGPROBS_MAX_TOP) */
    char *stops[TASK_MAX_STOPS];   /* owned */
    int n_stops;
} gen_params;

typedef struct task_timings {
    int n_prompt;       /* prompt tokens of the request */
    int n_cached;       /* of them, found in the slot's cache */
    int n_predicted;    /* tokens generated */
    double prompt_ms;   /* evaluating the uncached prompt tokens */
    double predicted_ms; /* from the first to the last generated token */
    bool speculative;   /* the slot drafted (-md): the two counts below are reported */
    int draft_n;        /* tokens drafted for the request */
    int draft_n_accepted; /* of them, kept by the verify passes */
} task_timings;

/* Written by the engine, read by the loop: both under the output lock. */
typedef struct task_out {
    sbuf text;          /* generated text not yet taken */
    sbuf logprobs;      /* logprob_entry records of tokens not yet taken (n_logprobs >= 0) */
    int n_new;          /* tokens generated since the last take */
    bool done;
    finish_kind finish;
    int error_status;
    char error[256];
    task_timings timings;
    int slot;           /* the slot that served it */
    long long n_bytes;  /* slot files: bytes written or read */
    long long n_tokens; /* slot files: tokens saved or restored; erase: tokens erased */
    long long n_evaluated; /* restore: tokens evaluated again (a version 1 file); 0 when keys and values were read */
    double action_ms;   /* slot files: how long it took */
} task_out;

typedef struct srv_task srv_task;

/* Loop thread: the task has output (or is done) to take. */
typedef void (*task_output_fn)(srv_task *t);

struct srv_task {
    /* input: written by the loop before submit, read-only afterwards */
    task_kind kind;
    hydra_token *prompt; /* owned */
    size_t n_prompt;
    uint64_t *hashes;    /* cache_hashes of the prompt (owned) */
    gen_params gen;
    int slot_id;         /* slot actions: the slot; generation: -1 */
    char *slot_file;     /* slot actions: the file's full path (owned) */
    double t_submit;
    /* set by the loop at any time */
    _Atomic bool cancel;
    /* the engine's: its queue, and the output channel (under the output lock) */
    srv_task *next;
    task_out out;
    bool out_queued;
    srv_task *out_next;
    /* the loop's */
    task_output_fn on_output;
    void *user;
};

srv_task *task_new(task_kind kind);
void task_free(srv_task *t); /* NULL allowed */

#endif
