/*
 * run_stop.c — stop strings over streamed text.  Text is released as soon
 * as it can no longer be the beginning of a stop string: the filter holds
 * only the longest tail that is a proper prefix of one, so with stop
 * strings of at most L bytes it holds fewer than L bytes between pushes.
 */
#include "run.h"

#include "error.h"

#include <stdlib.h>
#include <string.h>

void stop_filter_init(stop_filter *f, const char *const *stops, int n_stops)
{
    *f = (stop_filter){.stops = stops, .n_stops = n_stops};
}

void stop_filter_free(stop_filter *f)
{
    free(f->held);
    f->held = NULL;
}

/* The longest tail of text[0, len) that is a proper prefix of stop. */
static size_t tail_prefix(const char *text, size_t len, const char *stop)
{
    size_t stop_len = strlen(stop);
    for (size_t k = stop_len - 1 < len ? stop_len - 1 : len; k > 0; k--)
        if (memcmp(text + len - k, stop, k) == 0)
            return k;
    return 0;
}

/* Forgets what the last call handed out; room for len more bytes. */
static hydra_status make_room(stop_filter *f, size_t len)
{
    if (f->released > 0) {
        memmove(f->held, f->held + f->released, f->held_len - f->released);
        f->held_len -= f->released;
        f->released = 0;
    }
    if (f->held_len + len <= f->held_cap)
        return HYDRA_OK;
    size_t cap = 2 * (f->held_len + len);
    char *held = realloc(f->held, cap);
    if (held == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "stop filter: %zu bytes", cap);
    f->held = held;
    f->held_cap = cap;
    return HYDRA_OK;
}

hydra_status stop_filter_push(stop_filter *f, const char *text, size_t len, const char **out, size_t *out_len)
{
    *out = "";
    *out_len = 0;
    if (f->stopped || len == 0)
        return HYDRA_OK;
    hydra_status st = make_room(f, len);
    if (st != HYDRA_OK)
        return st;
    memcpy(f->held + f->held_len, text, len);
    f->held_len += len;
    size_t release = f->held_len, keep = 0;
    for (int i = 0; i < f->n_stops; i++) {
        const char *at = memmem(f->held, f->held_len, f->stops[i], strlen(f->stops[i]));
        if (at != NULL && (size_t)(at - f->held) < release) {
            release = (size_t)(at - f->held);
            f->stopped = true;
        }
    }
    for (int i = 0; i < f->n_stops && !f->stopped; i++) {
        size_t k = tail_prefix(f->held, f->held_len, f->stops[i]);
        keep = k > keep ? k : keep;
    }
    if (!f->stopped)
        release -= keep;
    *out = f->held;
    *out_len = f->released = release;
    return HYDRA_OK;
}

void stop_filter_flush(stop_filter *f, const char **out, size_t *out_len)
{
    *out = "";
    *out_len = 0;
    if (f->held == NULL || f->stopped)
        return;
    *out = f->held + f->released;
    *out_len = f->held_len - f->released;
    f->released = f->held_len;
}
