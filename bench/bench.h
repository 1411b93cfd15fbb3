/*
 * bench.h — the parts of hydra-bench: statistics, the memory-read probe
 * (bench_probe.c), the kernel tables (bench_kernels.c) and the whole-model
 * run in llama-bench's conventions (bench_model.c).
 */
#ifndef HYDRA_BENCH_H
#define HYDRA_BENCH_H

#include "quant.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { BENCH_MAX_REPS = 1000 };

typedef struct bench_options {
    int threads, reps;
    int prompt;          /* -p: prompt tokens (model) or matmul tokens (kernels) */
    int gen;             /* -n: generated tokens (model) */
    int64_t cols;        /* --cols: values per row of the synthetic matrix */
    int64_t size_mib;    /* -s: synthetic matrix size */
    int64_t probe_mib;
    const char *model;
    bool kernels;        /* kernel tables rather than the whole model */
    bool want[QT_COUNT]; /* kernel types to run */
} bench_options;

typedef struct bench_stats {
    double mean, sd, median, best;
} bench_stats;

/* Mean, sample standard deviation, median and best of v[0..n) (sorts v). */
bench_stats bench_summarise(double *v, int n);
double bench_now(void);
/* A buffer on 2 MiB boundaries with transparent huge pages asked for;
 * free with free(). */
void *bench_alloc_big(size_t bytes);

/* The memory-read probe: `threads` threads stream a buffer with 32-byte
 * loads into eight independent accumulators (a plain summing loop measures
 * the adder, not the memory).  Each pass starts its threads and joins
 * them, so no probe thread lingers beside what it is paired with. */
typedef struct bench_probe {
    uint8_t *buf;
    size_t bytes;
    int threads;
} bench_probe;

bool bench_probe_init(bench_probe *p, int64_t mib, int threads);
void bench_probe_free(bench_probe *p);
/* One pass over the buffer: GB/s read. */
double bench_probe_pass(bench_probe *p);
/* Warm-up, then max(reps, 5) passes. */
bench_stats bench_probe_alone(bench_probe *p, int reps);

/* The two modes; their return is the exit status. */
int bench_kernels(const bench_options *o, bench_probe *probe);

/* The core-clock probe (bench_clock.c): fixed ALU and vector loops on 1,
 * threads / 2 and threads threads at once, each thread's rate against one
 * thread's; prints a table (nothing off x86-64). */
void bench_clock_probe(int threads);
int bench_model(const bench_options *o, bench_probe *probe);

/* hydra-bench --slab-sim (bench_slab.c): argv[0] is "--slab-sim". */
int bench_slab_sim(int argc, char **argv);

#endif
