/*
 * engine.h — the engine thread: it loads the model, owns the slots (one
 * conversation's KV cache each) and steps every active slot together:
 * one step evaluates the next token of every generating slot and a chunk
 * of the prompts being read, as one batch (continuous batching), then
 * samples for each slot and posts the text to the loop thread.  New
 * requests wait in a bounded queue for a slot; a slot is chosen by the
 * longest cached prefix of the request's tokens (cache.c).
 */
#ifndef HYDRA_SERVE_ENGINE_H
#define HYDRA_SERVE_ENGINE_H

#include "serve.h"
#include "task.h"
#include "toolcall.h"

#include <uv.h>

typedef struct engine engine;

typedef enum engine_state { ENGINE_LOADING, ENGINE_READY, ENGINE_FAILED } engine_state;

/* Loop thread: the model finished loading (state READY or FAILED). */
typedef void (*engine_loaded_fn)(engine *e, void *user);

/* Starts the engine thread, which loads o->model_path.  0, or -1 after a
 * log line. */
int engine_start(engine **out, const serve_opts *o, uv_loop_t *loop, engine_loaded_fn on_loaded, void *user);

/* Cancels everything, joins the thread, frees the slots and the model.
 * Tasks in flight get no final post: their owners free them. */
void engine_stop(engine *e);

/* Any thread. */
engine_state engine_get_state(const engine *e);
const char *engine_error(const engine *e); /* why loading failed */

/* After READY; any thread. */
const hydra_model *engine_model(const engine *e);
uint32_t engine_slot_ctx(const engine *e); /* positions per slot */
int engine_n_slots(const engine *e);
/* The parsed chat template, or NULL with the reason in *why. */
const hydra_chat_template *engine_chat_template(const engine *e, const char **why);
/* A fingerprint of the model, for slot files. */
uint64_t engine_model_hash(const engine *e);
/* How the chat template's model writes tool calls (after loading). */
toolcall_format engine_tool_format(const engine *e);

/* Queues a task (loop thread).  -1 when the queue is full or memory is
 * short (nothing taken). */
int engine_submit(engine *e, srv_task *t);

/* The task should end: waiting, it leaves the queue; running, its slot is
 * freed at the next step.  It still gets its final post. */
void engine_cancel(engine *e, srv_task *t);

/* Moves the text posted so far into *text (appending) and copies the rest
 * of the output into *out (its text empty).  Loop thread. */
void engine_take(engine *e, srv_task *t, sbuf *text, task_out *out);

/* Slots and queue as JSON (GET /slots); malloc'd, NULL on no memory. */
char *engine_slots_json(engine *e);

/* Running and waiting requests, KV positions in use and in all (metrics). */
void engine_load(engine *e, int *running, int *waiting, long long *kv_used, long long *kv_total);

#endif
