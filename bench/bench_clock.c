/*
 * bench_clock.c — the core-clock probe of hydra-bench --kernels: loops
 * whose speed depends only on the core, timed on one thread and on many
 * threads at once, each thread's rate as a share of the one-thread rate.
 *
 * Why: the IQ kernels run at about 0.65 of their one-thread speed per
 * thread once 16 or more vCPUs are busy, in cache as from DRAM
 * (docs/PERFORMANCE.md, "IQ kernels, session 6").  A dependent imul chain
 * (3 cycles per imul on Intel and AMD cores since Skylake and Zen) runs at
 * the clock and does not slow down beside a busy SMT sibling; independent
 * vector chains are bound by the vector ports, which SMT siblings share.
 * If the vector loops drop like the kernels while the imul chain holds,
 * the vCPUs share cores; if both drop, the clock falls with load.  Either
 * way it is outside hydra.
 */
#include "bench.h"

#include "../kernels/cpu/cpu_features.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__x86_64__)
#include <immintrin.h>

enum { CLOCK_MAX_THREADS = 1024, CLOCK_CHAINS = 12 };

/* 8 dependent imuls per iteration: 24 cycles at 3 cycles each. */
static uint64_t loop_imul(uint64_t iters, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (uint64_t i = 0; i < iters; i++)
        __asm__ volatile("imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
                         "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0"
                         : "+r"(x));
    return x;
}

/* CLOCK_CHAINS (12) independent chains of one vector op each per
 * iteration, more than latency x ports (5 x 2), so the ports bound it.
 * Written in asm: GCC kept the accumulator array in memory or added a
 * register copy per op.  The assembler takes the instructions whatever
 * the compiler's target; the caller checks the CPU. */
#define CLOCK_OP12(op)                                                                                        \
    op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
#define CLOCK_FOLD(k) "vpxor %%ymm" #k ", %%ymm12, %%ymm12\n\t"
#define CLOCK_COPY(k) "vmovdqa %%ymm12, %%ymm" #k "\n\t"
#define CLOCK_VECTOR_ASM(widen, body)                                                                          \
    __asm__ volatile("vmovq %1, %%xmm12\n\tvpbroadcastq %%xmm12, %%ymm12\n\t" CLOCK_OP12(CLOCK_COPY) widen    \
                     "1:\n\t" CLOCK_OP12(body) "dec %0\n\tjnz 1b\n\t" CLOCK_OP12(CLOCK_FOLD)                  \
                     "vmovq %%xmm12, %1\n\tvzeroupper"                                                        \
                     : "+r"(iters), "+r"(seed)                                                               \
                     :                                                                                       \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",        \
                       "xmm10", "xmm11", "xmm12", "xmm13", "cc")

#define CLOCK_MADDUBS(k) "vpmaddubsw %%ymm12, %%ymm" #k ", %%ymm" #k "\n\t"
static uint64_t loop_maddubs(uint64_t iters, uint64_t seed)
{
    CLOCK_VECTOR_ASM("", CLOCK_MADDUBS);
    return seed;
}

/* zmm12, zmm13: the operands, widened; the chains are zmm0..11. */
#define CLOCK_DPWSSD(k) "vpdpwssd %%zmm13, %%zmm12, %%zmm" #k "\n\t"
static uint64_t loop_dpwssd(uint64_t iters, uint64_t seed)
{
    CLOCK_VECTOR_ASM("vpbroadcastq %%xmm12, %%zmm13\n\tvpbroadcastq %%xmm12, %%zmm12\n\t", CLOCK_DPWSSD);
    return seed;
}

/* The imul chain with 12 vpdpwssd ymm beside each 8 imuls (6 cycles of
 * vector work at 2 a cycle under the chain's 24): the clock while heavy
 * 256-bit integer ops run, as in the IQ kernels (Intel cores may lower
 * the clock for them, and more so with many cores busy). */
#define CLOCK_DPWSSD_Y(k) "vpdpwssd %%ymm13, %%ymm12, %%ymm" #k "\n\t"
#define CLOCK_IMUL2 "imul %2, %2\n\timul %2, %2\n\t"
static uint64_t loop_imul_dpwssd(uint64_t iters, uint64_t seed)
{
    uint64_t x = seed | 1;
    __asm__ volatile("vmovq %1, %%xmm12\n\tvpbroadcastq %%xmm12, %%ymm12\n\t"
                     "vmovdqa %%ymm12, %%ymm13\n\t" CLOCK_OP12(CLOCK_COPY) "1:\n\t" CLOCK_DPWSSD_Y(0) CLOCK_DPWSSD_Y(1)
                     CLOCK_DPWSSD_Y(2) CLOCK_IMUL2 CLOCK_DPWSSD_Y(3) CLOCK_DPWSSD_Y(4) CLOCK_DPWSSD_Y(5) CLOCK_IMUL2
                     CLOCK_DPWSSD_Y(6) CLOCK_DPWSSD_Y(7) CLOCK_DPWSSD_Y(8) CLOCK_IMUL2 CLOCK_DPWSSD_Y(9)
                     CLOCK_DPWSSD_Y(10) CLOCK_DPWSSD_Y(11) CLOCK_IMUL2 "dec %0\n\tjnz 1b\n\t" CLOCK_OP12(CLOCK_FOLD)
                     "vmovq %%xmm12, %1\n\tvzeroupper"
                     : "+r"(iters), "+r"(seed), "+r"(x)
                     :
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm12", "xmm13", "cc");
    return seed ^ x;
}

static bool has_avx2(const cpu_features *f) { return f->avx2; }
static bool has_avx512vnni(const cpu_features *f) { return f->avx512f && f->avx512vnni; }
static bool has_avx512vl_vnni(const cpu_features *f) { return has_avx512vnni(f) && f->avx512vl; }
static bool has_any(const cpu_features *f) { return f != NULL; }

/* A loop, what one of its iterations is, and when the CPU can run it. */
static const struct clock_loop {
    const char *name;
    const char *unit; /* of the rate column */
    double per_iter;  /* units per iteration */
    uint64_t (*run)(uint64_t iters, uint64_t seed);
    bool (*available)(const cpu_features *f);
} clock_loops[] = {
    {"imul chain", "GHz (3 cycles/imul)", 24.0, loop_imul, has_any},
    {"vpmaddubsw ymm x12", "G ops/s", CLOCK_CHAINS, loop_maddubs, has_avx2},
    {"vpdpwssd zmm x12", "G ops/s", CLOCK_CHAINS, loop_dpwssd, has_avx512vnni},
    {"imul + vpdpwssd ymm", "GHz (3 cycles/imul)", 24.0, loop_imul_dpwssd, has_avx512vl_vnni},
};

typedef struct clock_share {
    const struct clock_loop *loop;
    uint64_t iters, result;
    atomic_int *go;
    double seconds; /* this thread's own time, barrier to end */
} clock_share;

static void *clock_thread(void *arg)
{
    clock_share *s = arg;
    while (!atomic_load_explicit(s->go, memory_order_acquire))
        _mm_pause();
    double t0 = bench_now();
    s->result = s->loop->run(s->iters, (uint64_t)(uintptr_t)s);
    s->seconds = bench_now() - t0;
    return NULL;
}

/* Runs loop on `threads` threads at once (the caller is one of them);
 * rate[i]: thread i's units per ns.  False when a thread did not start. */
static bool clock_run(const struct clock_loop *loop, uint64_t iters, int threads, double *rate)
{
    static clock_share share[CLOCK_MAX_THREADS];
    static pthread_t tid[CLOCK_MAX_THREADS];
    static volatile uint64_t sink;
    atomic_int go = 0;
    int started = 1;
    for (int i = 0; i < threads; i++)
        share[i] = (clock_share){loop, iters, 0, &go, 0.0};
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, clock_thread, &share[started]) != 0)
            break;
    bool ok = started == threads;
    atomic_store_explicit(&go, 1, memory_order_release); /* all start together */
    clock_thread(&share[0]);
    if (!ok)
        fprintf(stderr, "hydra-bench: clock probe: started %d of %d threads\n", started, threads);
    for (int i = 1; i < started; i++)
        pthread_join(tid[i], NULL);
    for (int i = 0; ok && i < threads; i++) {
        rate[i] = loop->per_iter * (double)iters / share[i].seconds / 1e9;
        sink ^= share[i].result;
    }
    return ok;
}

/* Iterations that take about `seconds` on one thread. */
static uint64_t clock_calibrate(const struct clock_loop *loop, double seconds)
{
    uint64_t iters = 1u << 12;
    double rate;
    for (;;) {
        if (!clock_run(loop, iters, 1, &rate))
            return 0;
        double took = loop->per_iter * (double)iters / rate / 1e9;
        if (took > 0.02)
            return (uint64_t)((double)iters * seconds / took) + 1;
        iters *= 4;
    }
}

/* Prints one row: loop on `threads` threads at once, against one thread's
 * rate one (0: this is the one-thread row; *one receives its median). */
static void clock_row(const struct clock_loop *loop, uint64_t iters, int threads, double *one)
{
    static double rate[CLOCK_MAX_THREADS];
    if (!clock_run(loop, iters, threads, rate))
        return;
    double total = 0.0;
    for (int i = 0; i < threads; i++)
        total += rate[i];
    bench_stats s = bench_summarise(rate, threads);
    if (threads == 1)
        *one = s.median;
    printf("| %-19s | %2d | %6.3f / %6.3f / %6.3f | %5.3f / %5.3f / %5.3f | %8.2f | %s\n", loop->name, threads,
           rate[0], s.median, s.best, rate[0] / *one, s.median / *one, s.best / *one, total, loop->unit);
}

enum { CLOCK_MS = 200 }; /* per row: many kernel repetitions' worth */

void bench_clock_probe(int threads)
{
    const cpu_features *f = cpu_features_get();
    int counts[3] = {1, threads / 2, threads};
    if (threads > CLOCK_MAX_THREADS)
        return;
    printf("Core-clock probe: fixed loops, each thread's rate (its own wall time, ~%d ms) min / median / max,\n"
           "and as a share of the one-thread rate; 'all': the sum over threads.\n\n",
           CLOCK_MS);
    printf("| loop                |  t | per thread min / med / max | of 1 thread min/med/max | all      | unit\n");
    printf("| ------------------- | -: | -------------------------: | ----------------------: | -------: | ----\n");
    for (size_t l = 0; l < sizeof clock_loops / sizeof clock_loops[0]; l++) {
        const struct clock_loop *loop = &clock_loops[l];
        if (!loop->available(f))
            continue;
        uint64_t iters = clock_calibrate(loop, CLOCK_MS * 1e-3);
        double one = 0.0;
        if (iters == 0)
            continue;
        clock_row(loop, iters, 1, &one);
        for (int c = 1; c < 3; c++)
            if (one > 0.0 && counts[c] > 1 && counts[c] != counts[c - 1])
                clock_row(loop, iters, counts[c], &one);
    }
    printf("\n");
}
#else
void bench_clock_probe(int threads)
{
    (void)threads;
}
#endif
