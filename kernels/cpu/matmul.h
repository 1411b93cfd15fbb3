/*
 * matmul.h — matrix-vector (decode) and matrix-matrix (prefill) drivers over
 * the thread pool.  A weight matrix is n_rows rows of n values of one tensor
 * type, row_stride bytes apart (expert tensors: one expert is a contiguous
 * slice).  Activations are converted once to the type's vec_dot_type
 * (matmul_quantize_act) and reused for every matrix that reads the same
 * vector.  Rows are split across threads.
 */
#ifndef HYDRA_MATMUL_H
#define HYDRA_MATMUL_H

#include "threads.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes of one activation row of n values in wtype's vec_dot_type. */
size_t matmul_act_bytes(uint32_t wtype, int64_t n);

/* x (n floats) -> x_q in wtype's vec_dot_type. */
void matmul_quantize_act(uint32_t wtype, const float *x, void *x_q, int64_t n);

/* y[r] = W[r] . x for r in [0, n_rows). */
void matvec(thread_pool *pool, uint32_t wtype, const void *w, size_t row_stride, int64_t n_rows, int64_t n,
            const void *x_q, float *y);

/* One product of a batch: Y[t][r] = W[r] . X[t] for r < n_rows and
 * t < n_tok (as matmul; n_tok 1 is a matrix-vector product, x_stride and
 * y_stride then unused). */
typedef struct matmul_item {
    uint32_t wtype;
    const void *w;
    size_t row_stride;
    int64_t n_rows, n;
    const void *x_q;  /* n_tok rows in wtype's vec_dot_type, x_stride bytes apart */
    size_t x_stride;
    int64_t n_tok;
    float *y;         /* n_tok rows of n_rows, y_stride floats apart */
    size_t y_stride;
} matmul_item;

/* The independent products items[0..n_items) in one parallel region: the
 * row chunks of all items are claimed from one counter, so the threads
 * stream one matrix after another with no barrier between them (decode's
 * Q/K/V, or the gate and up matrices of every selected expert, whatever
 * the number of rows that chose each).  Even threads work from the first
 * item on, odd threads from the last item back (matmul.c says why: put
 * multi-token items first).  No item's output may be another's input.
 * Each output is bit-identical to matvec's or matmul's of its item. */
void matmul_batch(thread_pool *pool, const matmul_item *items, int n_items);

/* Y[t][r] = W[r] . X[t] for t in [0, n_tok); X rows x_stride bytes apart (in
 * vec_dot_type), Y rows y_stride floats apart. */
void matmul(thread_pool *pool, uint32_t wtype, const void *w, size_t row_stride, int64_t n_rows, int64_t n,
            const void *x_q, size_t x_stride, int64_t n_tok, float *y, size_t y_stride);

#endif
