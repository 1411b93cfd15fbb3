/*
 * act.h — an activation matrix (rows of floats) together with its
 * conversions to the activation formats of the weights that read it.  Q, K
 * and V read the same normed rows; the router, the experts and the shared
 * expert read the same FFN input: each conversion is made once per new
 * contents and reused by every matrix of that format.
 */
#ifndef HYDRA_ACT_H
#define HYDRA_ACT_H

#include "threads.h"
#include "weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { ACT_MAX_FORMATS = 4 };

typedef struct act_format {
    uint32_t type;    /* a vec_dot_type other than F32 */
    size_t row_bytes; /* one converted row */
    uint8_t *rows;    /* max_rows converted rows */
    bool ready;       /* rows hold the current contents */
} act_format;

typedef struct act_set {
    int64_t n;        /* values per row */
    int64_t max_rows;
    const float *x;   /* current contents: n_rows rows of n floats */
    int64_t n_rows;
    int n_formats;
    act_format format[ACT_MAX_FORMATS];
} act_set;

/* Prepares buffers for every activation format that a bound matrix with
 * rows of n values in w needs. */
hydra_status act_init(act_set *a, const model_weights *w, int64_t n, int64_t max_rows);
void act_free(act_set *a); /* safe on a zeroed set */

/* New contents (n_rows <= max_rows); drops the previous conversions. */
void act_bind(act_set *a, const float *x, int64_t n_rows);

/* The current rows in the format the weights of type wtype read, converting
 * them on first use; *stride receives the bytes between rows. */
const void *act_for(act_set *a, thread_pool *pool, uint32_t wtype, size_t *stride);

#endif
