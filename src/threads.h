/*
 * threads.h — a persistent pool of worker threads for the CPU kernels.
 * Workers are created once; a parallel region costs a wake-up and a
 * barrier, no allocation and no thread creation, so it can sit on the
 * decode hot path.
 */
#ifndef HYDRA_THREADS_H
#define HYDRA_THREADS_H

#include "hydra.h"

typedef struct thread_pool thread_pool;

/* fn runs once on each of the pool's n threads (the caller is thread 0). */
typedef void (*pool_task_fn)(void *ctx, int thread_idx, int n_threads);

/* n_threads >= 1; 1 means the caller alone, no workers. */
hydra_status pool_create(thread_pool **out, int n_threads);
void pool_destroy(thread_pool *pool); /* NULL allowed */
int pool_size(const thread_pool *pool);

/* Runs fn on every thread and returns when all have finished.  A NULL pool
 * runs fn on the caller alone. */
void pool_run(thread_pool *pool, pool_task_fn fn, void *ctx);

#endif
