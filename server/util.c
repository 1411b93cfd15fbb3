/*
 * util.c — the clock, the log line and the growable buffer the server's
 * parts share.
 */
#include "serve.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double serve_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void serve_log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* one write per line: the loop, engine and work threads all log */
    fprintf(stderr, "hydra-serve: %s\n", line);
}

static bool sbuf_reserve(sbuf *b, size_t more)
{
    if (more > SIZE_MAX / 2 - b->len)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (data == NULL)
        return false;
    b->data = data;
    b->cap = cap;
    return true;
}

bool sbuf_add(sbuf *b, const void *data, size_t len)
{
    if (!sbuf_reserve(b, len))
        return false;
    if (len > 0)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return true;
}

bool sbuf_addf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sbuf_reserve(b, (size_t)n))
        return false;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return true;
}

void sbuf_free(sbuf *b)
{
    free(b->data);
    *b = (sbuf){0};
}
