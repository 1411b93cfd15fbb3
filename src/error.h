/*
 * error.h — how internal code fails: set the thread's message, return the
 * status, in one expression:  return hydra_fail(HYDRA_ERR_IO, "open %s: %s", ...);
 */
#ifndef HYDRA_ERROR_H
#define HYDRA_ERROR_H

#include "hydra.h"

#if defined(__GNUC__)
#define HYDRA_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define HYDRA_PRINTF(a, b)
#endif

hydra_status hydra_fail(hydra_status status, const char *fmt, ...) HYDRA_PRINTF(2, 3);

#endif
