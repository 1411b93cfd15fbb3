/*
 * bench_probe.c — statistics, big buffers and the memory-read probe of
 * hydra-bench (bench.h).
 */
#include "bench.h"

#include "../kernels/cpu/cpu_features.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

bench_stats bench_summarise(double *v, int n)
{
    bench_stats s = {0};
    for (int i = 0; i < n; i++)
        s.mean += v[i] / n;
    for (int i = 0; i < n; i++)
        s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    s.best = v[n - 1];
    return s;
}

void *bench_alloc_big(size_t bytes)
{
    const size_t huge = 2u << 20;
    size_t rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded);
    if (p != NULL)
        madvise(p, rounded, MADV_HUGEPAGE); /* a hint; failure only costs TLB misses */
    return p;
}

#if defined(__x86_64__)
/* Eight independent 32-byte load streams per iteration, combined by XOR:
 * no dependency chain longer than one instruction per load. */
__attribute__((target("avx2"))) static uint64_t probe_range_avx2(const uint8_t *p, size_t bytes)
{
    __m256i acc[8];
    for (int k = 0; k < 8; k++)
        acc[k] = _mm256_setzero_si256();
    for (size_t i = 0; i + 256 <= bytes; i += 256)
        for (int k = 0; k < 8; k++)
            acc[k] = _mm256_xor_si256(acc[k], _mm256_load_si256((const __m256i *)(p + i + 32 * k)));
    for (int k = 1; k < 8; k++)
        acc[0] = _mm256_xor_si256(acc[0], acc[k]);
    return (uint64_t)_mm256_extract_epi64(acc[0], 0) ^ (uint64_t)_mm256_extract_epi64(acc[0], 3);
}
#endif

static uint64_t probe_range_scalar(const uint8_t *p, size_t bytes)
{
    uint64_t acc[8] = {0};
    for (size_t i = 0; i + 64 <= bytes; i += 64)
        for (int k = 0; k < 8; k++) {
            uint64_t v;
            memcpy(&v, p + i + 8 * k, 8);
            acc[k] ^= v;
        }
    return acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
}

typedef struct probe_share {
    const uint8_t *p;
    size_t bytes;
    uint64_t result; /* keeps the loads live */
} probe_share;

static void *probe_thread(void *arg)
{
    probe_share *s = arg;
#if defined(__x86_64__)
    if (cpu_features_get()->avx2) {
        s->result = probe_range_avx2(s->p, s->bytes);
        return NULL;
    }
#endif
    s->result = probe_range_scalar(s->p, s->bytes);
    return NULL;
}

enum { PROBE_MAX_THREADS = 1024 };

bool bench_probe_init(bench_probe *p, int64_t mib, int threads)
{
    p->bytes = (size_t)mib << 20;
    p->threads = threads < PROBE_MAX_THREADS ? threads : PROBE_MAX_THREADS;
    p->buf = bench_alloc_big(p->bytes);
    if (p->buf == NULL)
        return false;
    memset(p->buf, 1, p->bytes);
    return true;
}

void bench_probe_free(bench_probe *p)
{
    free(p->buf);
    p->buf = NULL;
}

double bench_probe_pass(bench_probe *p)
{
    static _Atomic uint64_t sink;
    probe_share share[PROBE_MAX_THREADS];
    pthread_t tid[PROBE_MAX_THREADS];
    bool started[PROBE_MAX_THREADS];
    size_t per = p->bytes / (size_t)p->threads / 256 * 256;
    double t0 = bench_now();
    for (int i = 0; i < p->threads; i++) {
        share[i] = (probe_share){p->buf + per * (size_t)i, per, 0};
        started[i] = i > 0 && pthread_create(&tid[i], NULL, probe_thread, &share[i]) == 0;
    }
    /* the caller reads part 0, and any part whose thread did not start */
    for (int i = 0; i < p->threads; i++)
        if (!started[i])
            probe_thread(&share[i]);
    for (int i = 0; i < p->threads; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        atomic_fetch_xor(&sink, share[i].result);
    }
    double dt = bench_now() - t0;
    return (double)(per * (size_t)p->threads) / dt / 1e9;
}

bench_stats bench_probe_alone(bench_probe *p, int reps)
{
    double gbs[BENCH_MAX_REPS];
    int n = reps < 5 ? 5 : reps;
    bench_probe_pass(p); /* warm-up */
    for (int r = 0; r < n; r++)
        gbs[r] = bench_probe_pass(p);
    return bench_summarise(gbs, n);
}
