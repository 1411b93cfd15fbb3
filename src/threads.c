/*
 * threads.c — the persistent worker pool behind threads.h.
 *
 * A parallel region is published by bumping `generation`.  Workers spin on
 * it for a short while (a decode step issues hundreds of regions per token,
 * microseconds apart, so a sleeping worker would cost a wake-up each time),
 * then fall asleep on a condition variable.  Completion is a spin barrier:
 * the caller runs its own share (thread 0), then spins until the count of
 * workers still running reaches zero.
 *
 * Sleeping without a lost wake-up: a worker announces itself in `sleepers`
 * and re-checks `generation` under the mutex; pool_run stores the new
 * generation and then reads `sleepers`.  Both are sequentially consistent,
 * so at least one side sees the other (Dekker): either the worker sees the
 * new generation and does not wait, or pool_run sees the sleeper and
 * broadcasts under the same mutex.
 */
#include "threads.h"

#include "error.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* Pause iterations a worker spins before sleeping: a pause is ~10-140
 * cycles depending on the core, so this is tens to hundreds of
 * microseconds — longer than the gap between two matvecs of one layer. */
enum { SPIN_BEFORE_SLEEP = 1 << 14 };
/* Spinners (workers awaiting a region, the caller awaiting stragglers) yield
 * the core now and then: on an oversubscribed machine the thread they wait
 * for may need this very core. */
enum { SPIN_BEFORE_YIELD = 16 };

typedef struct worker {
    thread_pool *pool;
    int idx;
} worker;

struct thread_pool {
    int n_threads;
    pthread_t *threads;  /* n_threads - 1 workers */
    worker *workers;

    pool_task_fn fn;     /* the current region; written before generation */
    void *ctx;
    _Atomic uint32_t generation;
    _Atomic int running; /* workers that have not finished the region */
    _Atomic bool stop;

    _Atomic int sleepers;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
};

/* Waits until the generation differs from `seen`; returns the new one. */
static uint32_t wait_for_region(thread_pool *pool, uint32_t seen)
{
    for (int i = 0; i < SPIN_BEFORE_SLEEP; i++) {
        uint32_t g = atomic_load_explicit(&pool->generation, memory_order_acquire);
        if (g != seen)
            return g;
        if ((i + 1) % SPIN_BEFORE_YIELD == 0)
            sched_yield();
        else
            cpu_relax();
    }
    pthread_mutex_lock(&pool->mutex);
    atomic_fetch_add(&pool->sleepers, 1);
    uint32_t g;
    while ((g = atomic_load(&pool->generation)) == seen)
        pthread_cond_wait(&pool->wake, &pool->mutex);
    atomic_fetch_sub(&pool->sleepers, 1);
    pthread_mutex_unlock(&pool->mutex);
    return g;
}

static void *worker_main(void *arg)
{
    worker *self = arg;
    thread_pool *pool = self->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_region(pool, seen);
        if (atomic_load_explicit(&pool->stop, memory_order_acquire))
            return NULL;
        pool->fn(pool->ctx, self->idx, pool->n_threads);
        atomic_fetch_sub_explicit(&pool->running, 1, memory_order_release);
    }
}

/* Publishes a new generation and wakes sleeping workers. */
static void publish(thread_pool *pool)
{
    atomic_fetch_add(&pool->generation, 1);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mutex);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mutex);
    }
}

static void stop_workers(thread_pool *pool, int n_started)
{
    atomic_store(&pool->stop, true);
    publish(pool);
    for (int i = 0; i < n_started; i++)
        pthread_join(pool->threads[i], NULL);
}

static void free_pool(thread_pool *pool)
{
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mutex);
    free(pool->workers);
    free(pool->threads);
    free(pool);
}

hydra_status pool_create(thread_pool **out, int n_threads)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 4096)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "pool_create: %d threads (want 1..4096)", n_threads);
    thread_pool *pool = calloc(1, sizeof *pool);
    if (pool == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "pool_create: pool of %d threads", n_threads);
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    int n_workers = n_threads - 1;
    if (n_workers > 0) {
        pool->threads = calloc((size_t)n_workers, sizeof *pool->threads);
        pool->workers = calloc((size_t)n_workers, sizeof *pool->workers);
        if (pool->threads == NULL || pool->workers == NULL) {
            free_pool(pool);
            return hydra_fail(HYDRA_ERR_NOMEM, "pool_create: bookkeeping for %d workers", n_workers);
        }
    }
    for (int i = 0; i < n_workers; i++) {
        pool->workers[i] = (worker){.pool = pool, .idx = i + 1};
        if (pthread_create(&pool->threads[i], NULL, worker_main, &pool->workers[i]) != 0) {
            stop_workers(pool, i);
            free_pool(pool);
            return hydra_fail(HYDRA_ERR_NOMEM, "pool_create: starting worker %d of %d", i + 1, n_workers);
        }
    }
    *out = pool;
    return HYDRA_OK;
}

void pool_destroy(thread_pool *pool)
{
    if (pool == NULL)
        return;
    stop_workers(pool, pool->n_threads - 1);
    free_pool(pool);
}

int pool_size(const thread_pool *pool)
{
    return pool == NULL ? 1 : pool->n_threads;
}

void pool_run(thread_pool *pool, pool_task_fn fn, void *ctx)
{
    if (pool == NULL || pool->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->running, pool->n_threads - 1, memory_order_relaxed);
    publish(pool);
    fn(ctx, 0, pool->n_threads);
    for (uint32_t spins = 1; atomic_load_explicit(&pool->running, memory_order_acquire) > 0; spins++) {
        if (spins % SPIN_BEFORE_YIELD == 0)
            sched_yield();
        else
            cpu_relax();
    }
}
