/*
 * error.c — status names and the per-thread last-error message.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

static const char *const status_text[] = {
#define HYDRA_STATUS_TEXT_(name, text) [name] = text,
    HYDRA_STATUS_TABLE(HYDRA_STATUS_TEXT_)
#undef HYDRA_STATUS_TEXT_
};

HYDRA_API const char *hydra_strerror(hydra_status status)
{
    if ((unsigned)status >= HYDRA_STATUS_COUNT)
        return "unknown status";
    return status_text[status];
}

HYDRA_API const char *hydra_last_error(void)
{
    return last_error;
}

hydra_status hydra_fail(hydra_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}
