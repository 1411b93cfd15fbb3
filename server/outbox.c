/*
 * outbox.c — the channel from the engine thread to the loop.  The engine
 * appends to a task's task_out under the lock and puts the task on the
 * ready list once (out_queued); uv_async_send wakes the loop, which takes
 * tasks off the list one at a time (the engine may queue a task again as
 * soon as it is off) and calls their on_output.  uv_async_send coalesces:
 * one wake-up may carry many posts, which is why the list, not the wake-up,
 * says what is ready.
 */
#include "slot.h"

#include <stdarg.h>
#include <stdio.h>

void outbox_drain(outbox *ob)
{
    for (;;) {
        pthread_mutex_lock(&ob->lock);
        srv_task *t = ob->ready;
        if (t != NULL) {
            ob->ready = t->out_next;
            t->out_queued = false;
        }
        pthread_mutex_unlock(&ob->lock);
        if (t == NULL)
            return;
        t->on_output(t);
    }
}

static void on_async(uv_async_t *a)
{
    outbox_drain(a->data);
}

int outbox_init(outbox *ob, uv_loop_t *loop)
{
    pthread_mutex_init(&ob->lock, NULL);
    ob->ready = NULL;
    ob->async.data = ob;
    return uv_async_init(loop, &ob->async, on_async);
}

void outbox_close(outbox *ob)
{
    uv_close((uv_handle_t *)&ob->async, NULL);
}

/* Under the lock. */
static void make_ready(outbox *ob, srv_task *t)
{
    if (!t->out_queued) {
        t->out_queued = true;
        t->out_next = NULL;
        srv_task **end = &ob->ready; /* append: tasks are served in the order they became ready */
        while (*end != NULL)
            end = &(*end)->out_next;
        *end = t;
    }
}

void outbox_text(outbox *ob, srv_task *t, const char *text, size_t len, int n_new)
{
    if (len == 0 && n_new == 0)
        return;
    pthread_mutex_lock(&ob->lock);
    sbuf_add(&t->out.text, text, len); /* out of memory: the text is lost, the count is not */
    t->out.n_new += n_new;
    make_ready(ob, t);
    pthread_mutex_unlock(&ob->lock);
    uv_async_send(&ob->async);
}

void outbox_token(outbox *ob, srv_task *t, const char *text, size_t len, const logprob_entry *e)
{
    pthread_mutex_lock(&ob->lock);
    sbuf_add(&t->out.text, text, len); /* out of memory: the text is lost, the count is not */
    if (e != NULL)
        sbuf_add(&t->out.logprobs, e, sizeof *e);
    t->out.n_new += 1;
    make_ready(ob, t);
    pthread_mutex_unlock(&ob->lock);
    uv_async_send(&ob->async);
}

void outbox_done(outbox *ob, srv_task *t, finish_kind finish, const task_out *result)
{
    pthread_mutex_lock(&ob->lock);
    if (result != NULL) {
        t->out.timings = result->timings;
        t->out.slot = result->slot;
        t->out.n_bytes = result->n_bytes;
        t->out.n_tokens = result->n_tokens;
        t->out.action_ms = result->action_ms;
    }
    t->out.finish = finish;
    t->out.done = true;
    make_ready(ob, t);
    pthread_mutex_unlock(&ob->lock);
    uv_async_send(&ob->async);
}

void outbox_fail(outbox *ob, srv_task *t, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&ob->lock);
    vsnprintf(t->out.error, sizeof t->out.error, fmt, ap);
    t->out.error_status = status;
    pthread_mutex_unlock(&ob->lock);
    va_end(ap);
    outbox_done(ob, t, FINISH_ERROR, NULL);
}

void outbox_take(outbox *ob, srv_task *t, sbuf *text, task_out *out)
{
    pthread_mutex_lock(&ob->lock);
    /* Everything posted so far is taken now, so t leaves the ready list:
     * the engine may have queued it again after outbox_drain took it off,
     * and a done task is freed by its taker. */
    if (t->out_queued) {
        srv_task **p = &ob->ready;
        while (*p != t)
            p = &(*p)->out_next;
        *p = t->out_next;
        t->out_queued = false;
    }
    if (t->out.text.len > 0)
        sbuf_add(text, t->out.text.data, t->out.text.len);
    t->out.text.len = 0;
    *out = t->out;
    out->text = (sbuf){0};
    t->out.logprobs = (sbuf){0}; /* moved to out: the taker frees it */
    t->out.n_new = 0;
    pthread_mutex_unlock(&ob->lock);
}
