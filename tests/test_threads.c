/*
 * test_threads.c — the worker pool: every thread index runs exactly once per
 * region, regions do not overlap, results are visible to the caller when
 * pool_run returns, and the pool survives long idle gaps (workers asleep).
 */
#include "test.h"
#include "threads.h"

#include <stdatomic.h>
#include <time.h>

enum { MAX_THREADS = 8 };

typedef struct region_log {
    int hits[MAX_THREADS];      /* plain ints: pool_run must publish them */
    int seen_n_threads[MAX_THREADS];
    _Atomic int inside;         /* threads inside the region right now */
    _Atomic int overlap;        /* set if a thread saw a stale region */
    int round;                  /* the caller's round number */
    int last_round[MAX_THREADS];
} region_log;

static void record(void *ctx, int idx, int n_threads)
{
    region_log *log = ctx;
    atomic_fetch_add(&log->inside, 1);
    if (log->last_round[idx] != log->round - 1)
        atomic_store(&log->overlap, 1);
    log->last_round[idx] = log->round;
    log->hits[idx]++;
    log->seen_n_threads[idx] = n_threads;
    atomic_fetch_sub(&log->inside, 1);
}

static int run_rounds(thread_pool *pool, region_log *log, int rounds)
{
    for (int r = 0; r < rounds; r++) {
        log->round++;
        pool_run(pool, record, log);
        if (atomic_load(&log->inside) != 0)
            return -1;
    }
    return 0;
}

TEST(threads_every_index_once_per_region)
{
    for (int n = 1; n <= 4; n++) {
        thread_pool *pool;
        CHECK_OK(pool_create(&pool, n));
        CHECK_EQ_INT(pool_size(pool), n);
        region_log log = {0};
        int rounds = 20000;
        int rc = run_rounds(pool, &log, rounds);
        pool_destroy(pool);
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(atomic_load(&log.overlap), 0);
        for (int i = 0; i < n; i++) {
            CHECK_EQ_INT(log.hits[i], rounds);
            CHECK_EQ_INT(log.seen_n_threads[i], n);
        }
        for (int i = n; i < MAX_THREADS; i++)
            CHECK_EQ_INT(log.hits[i], 0);
    }
}

TEST(threads_wake_after_sleep)
{
    thread_pool *pool;
    CHECK_OK(pool_create(&pool, 3));
    region_log log = {0};
    for (int r = 0; r < 3; r++) {
        /* long enough that every worker has given up spinning and sleeps */
        struct timespec gap = {.tv_sec = 0, .tv_nsec = 30 * 1000 * 1000};
        nanosleep(&gap, NULL);
        log.round++;
        pool_run(pool, record, &log);
    }
    pool_destroy(pool);
    CHECK_EQ_INT(atomic_load(&log.overlap), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(log.hits[i], 3);
}

TEST(threads_null_pool_runs_on_caller)
{
    region_log log = {0};
    log.round = 1;
    pool_run(NULL, record, &log);
    CHECK_EQ_INT(pool_size(NULL), 1);
    CHECK_EQ_INT(log.hits[0], 1);
    CHECK_EQ_INT(log.seen_n_threads[0], 1);
    pool_destroy(NULL);
}

TEST(threads_reject_bad_size)
{
    thread_pool *pool = (thread_pool *)&pool;
    CHECK_EQ_INT(pool_create(&pool, 0), HYDRA_ERR_INVALID_ARG);
    CHECK(pool == NULL);
    CHECK_EQ_INT(pool_create(&pool, -3), HYDRA_ERR_INVALID_ARG);
}

TEST(threads_create_destroy_repeatedly)
{
    for (int i = 0; i < 50; i++) {
        thread_pool *pool;
        CHECK_OK(pool_create(&pool, 1 + i % 4));
        if (i % 2 == 0) {
            region_log log = {.round = 1};
            pool_run(pool, record, &log);
            CHECK_EQ_INT(log.hits[0], 1);
        }
        pool_destroy(pool);
    }
}
