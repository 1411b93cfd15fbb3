/*
 * slot.h — the engine's inside: a slot (one KV cache and the request it
 * serves), the prompt cache over the slots' tokens, slot files, and the
 * outbox that carries output to the loop thread.  Engine thread only,
 * except the outbox.
 */
#ifndef HYDRA_SERVE_SLOT_H
#define HYDRA_SERVE_SLOT_H

#include "serve.h"
#include "task.h"
#include "tools/run.h" /* stop_filter: the CLI's stop-string filter (src/tools/run_stop.c) */

#include <pthread.h>
#include <uv.h>

/* ------------------------------------------------------------ outbox.c */

/* Output from the engine thread to the loop: tasks with something new, a
 * lock over their task_out, and an async handle that wakes the loop. */
typedef struct outbox {
    pthread_mutex_t lock;
    srv_task *ready;
    uv_async_t async;
} outbox;

/* Loop thread. */
int outbox_init(outbox *ob, uv_loop_t *loop);
void outbox_close(outbox *ob); /* closes the async handle; the outbox must live until its close callback */

/* Engine thread: text (and n_new generated tokens) for t. */
void outbox_text(outbox *ob, srv_task *t, const char *text, size_t len, int n_new);
/* Engine thread: the text of one generated token and, when asked for, its
 * logprobs record (NULL: none). */
void outbox_token(outbox *ob, srv_task *t, const char *text, size_t len, const logprob_entry *e);
/* Engine thread: t is finished; the last touch of t by the engine.
 * result: NULL, or the timings and slot results to hand over (its text,
 * error and flags are ignored). */
void outbox_done(outbox *ob, srv_task *t, finish_kind finish, const task_out *result);
/* Engine thread: finished with an error (status, message). */
void outbox_fail(outbox *ob, srv_task *t, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Loop thread: calls on_output of every task with something new (what the
 * async handle's callback does). */
void outbox_drain(outbox *ob);

/* Loop thread: see engine_take; out->logprobs is moved to the caller,
 * who frees it. */
void outbox_take(outbox *ob, srv_task *t, sbuf *text, task_out *out);

/* ------------------------------------------------------------ slot.c */

typedef enum slot_state { SLOT_IDLE, SLOT_PREFILL, SLOT_GENERATE } slot_state;

typedef struct slot {
    int id;
    hydra_session *session;
    uint32_t n_ctx;
    /* the cache: the tokens whose keys and values the session holds, and
     * the chained hashes of their whole blocks (cache.c) */
    hydra_token *tokens;
    size_t n_tokens;
    uint64_t *hashes;
    double last_used;
    /* the request being served */
    srv_task *task;
    slot_state state;
    const hydra_token *feed; /* prefill: what is left to evaluate */
    size_t n_feed;
    hydra_token next;        /* generating: the sampled token, evaluated next step */
    hydra_sampler *sampler;
    hydra_detokenizer *detok;
    stop_filter stop;
    task_out result;         /* timings so far, handed over at the end */
    double t_begin, t_first, t_last;
    /* speculative decoding (-md; NULL: off): the draft model's session,
     * the decoder over both sessions (kept between requests, so the draft
     * keeps its cached prefix too), and this step's verify pass: its
     * tokens (the decoder's) and every row's logits */
    hydra_session *draft;
    hydra_spec *spec;
    const hydra_token *verify;
    size_t n_verify;
    float *rows;             /* (n_draft_max + 1) x n_vocab */
} slot;

hydra_status slot_init(slot *s, int id, const hydra_model *m, const hydra_session_params *sp);
void slot_free(slot *s);

/* Gives the slot a draft session of draft_model (parameters dp; NULL: the
 * model's MTP block drafts) and a speculative decoder with sp; every request it serves then generates
 * through hydra_spec_draft / the engine's batched verify /
 * slot_verified_step. */
hydra_status slot_init_spec(slot *s, const hydra_model *draft_model, const hydra_session_params *dp,
                            const hydra_spec_params *sp);

/* After a step evaluated a chunk of the slot's prompt: an MTP drafter
 * computes its rows from the step's hidden states (hydra_spec_follow).  On
 * failure the request is finished with an error (false). */
bool slot_followed_prefill(slot *s, outbox *ob);

/* A generating slot with a decoder: drafts and sets s->verify, n_verify
 * for the step.  On failure the request is finished with an error (false). */
bool slot_draft(slot *s, outbox *ob);

/* After the step evaluated s->verify with every row's logits in s->rows:
 * accepts (hydra_spec_accept), rolls the caches back, and takes the
 * tokens one by one as slot_sampled_step takes one (text, stop strings,
 * max_tokens, logprobs of each token's own row). */
void slot_verified_step(slot *s, const hydra_model *m, outbox *ob);

/* Starts serving t; the slot's cache holds t's first n_cached prompt tokens
 * (cache_choose made it so).  On failure t is finished with an error. */
void slot_begin(slot *s, const hydra_model *m, srv_task *t, size_t n_cached, outbox *ob);

/* Tokens were evaluated: the prompt's last one, or the sampled one.  Samples
 * the next token, posts its text, finishes on an end, a stop string,
 * max_tokens or a full context. */
void slot_sampled_step(slot *s, const hydra_model *m, outbox *ob);

/* Ends the request (with its remaining text unless cancelled) and frees the slot. */
void slot_end(slot *s, finish_kind finish, outbox *ob);

/* Ends the request with an error (status, message) and frees the slot. */
void slot_fail(slot *s, outbox *ob, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ------------------------------------------------------------ logprobs.c */

/* tok's log-probability and the n_top most probable tokens' at logits
 * (the model's distribution: log-softmax of the raw logits). */
void logprobs_of(const float *logits, int32_t n_vocab, hydra_token tok, int n_top, logprob_entry *out);

/* ------------------------------------------------------------ cache.c */

/* Tokens per hashed block.  Small enough that a conversation's shared
 * prefix is found to within a few tokens; the rest is compared token by
 * token. */
enum { CACHE_BLOCK = 16 };

/* The chained XXH64 hashes of the whole blocks of t[0, n): n / CACHE_BLOCK
 * of them into out. */
size_t cache_hashes(const hydra_token *t, size_t n, uint64_t *out);

/* The slot's cache gains t[0, n) (evaluated at its next positions). */
void cache_append(slot *s, const hydra_token *t, size_t n);

/* The slot's cache keeps its first n tokens (the session too), or none
 * when the session cannot rewind there; returns how many it kept. */
size_t cache_truncate(slot *s, size_t n);

/* The idle slot whose cache shares the longest prefix with prompt[0, n)
 * (least recently used among equals), or NULL when none is idle.  *shared:
 * the tokens shared.  hashes: cache_hashes of the prompt. */
slot *cache_choose(slot *slots, int n_slots, const hydra_token *prompt, size_t n, const uint64_t *hashes,
                   size_t *shared);

/* ------------------------------------------------------------ slotfile.c */

/* Writes tokens[0, n) and the session's keys and values of those
 * positions (it must hold exactly n) to path (a new file, replaced
 * atomically); *bytes the file's size.  HYDRA_OK, or a status with a
 * message. */
hydra_status slotfile_save(const char *path, uint64_t model_hash, const hydra_token *tokens, size_t n,
                           const hydra_session *session, long long *bytes);

/* Where a slot file is read into. */
typedef struct slotfile_target {
    uint64_t model_hash;
    size_t max_tokens;
    int32_t n_vocab;
    hydra_session *session; /* receives the keys and values (a version 2 file) */
} slotfile_target;

typedef struct slotfile_loaded {
    hydra_token *tokens; /* malloc'd */
    size_t n;
    bool restored;       /* the session now holds the tokens' positions; false: evaluate them (version 1) */
    long long bytes;     /* the file's size */
} slotfile_loaded;

/* Reads a slot file if it is well-formed, its checksum holds (checked
 * before anything is changed), it was saved from this model and fits
 * max_tokens.  A failure while reading the keys and values leaves the
 * session cleared. */
hydra_status slotfile_load(const char *path, const slotfile_target *to, slotfile_loaded *out);

#endif
