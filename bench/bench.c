/*
 * hydra-bench — kernel throughput beside the machine's memory bandwidth,
 * measured in the same process, in llama-bench's conventions (markdown
 * table, mean ± stddev over -r repetitions).
 *
 *   hydra-bench                       every computed type, synthetic matrix
 *   hydra-bench -T q4_k,q8_0 -t 2 -r 5 -s 512 -n 4096 -p 16
 *   hydra-bench -m model.gguf         the model's own 2-D+ tensors, by type
 *
 * Per type: matvec (one token, decode) with 1 thread and with -t threads,
 * as GB/s of weight bytes read and GFLOP/s (2 flops per weight); matmul
 * (-p tokens, prefill) with -t threads; and "matvec L2", one thread over
 * 256 KiB of the rows read again and again, the kernel's speed without
 * memory in the way.  The memory-read probe streams a
 * buffer of --probe-mib MiB with 32-byte loads into several independent
 * accumulators on -t threads (a plain summing loop measures the adder, not
 * the memory) and prints best and median.  On a shared machine the load
 * changes by the second, so every kernel repetition is paired with one
 * probe pass run just before it: each row shows the probe's median over its
 * own repetitions and the kernel's median as a share of it.
 *
 * Synthetic weights: 64 rows quantised by the reference quantiser, repeated
 * to fill -s MiB (speed does not depend on the values); the default 512 MiB
 * is far beyond any last-level cache.  Buffers ask for transparent huge
 * pages, probe and weights alike.
 *
 * Exit status: 0 done, 1 a run failed (memory, model), 2 bad arguments.
 */
#include "hydra.h"

#include "../kernels/cpu/cpu_features.h"
#include "../kernels/cpu/matmul.h"
#include "quant.h"
#include "threads.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { MAX_REPS = 1000, SEED_ROWS = 64 };

typedef struct options {
    int threads, reps, tokens;
    int64_t n;           /* values per row */
    int64_t size_mib;    /* synthetic matrix size */
    int64_t probe_mib;
    const char *model;
    bool want[QT_COUNT]; /* types to run */
} options;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- statistics ------------------------------------------------------- */

typedef struct stats {
    double mean, sd, median, best;
} stats;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static stats summarise(double *v, int n)
{
    stats s = {0};
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

/* ---- buffers ------------------------------------------------------------ */

static void *alloc_big(size_t bytes)
{
    const size_t huge = 2u << 20;
    size_t rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded);
    if (p != NULL)
        madvise(p, rounded, MADV_HUGEPAGE); /* a hint; failure only costs TLB misses */
    return p;
}

/* ---- memory-read probe ---------------------------------------------------- */

typedef struct probe_job {
    const uint8_t *buf;
    size_t bytes;
    _Atomic uint64_t sink; /* keeps the loads live */
} probe_job;

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

static void probe_task(void *ctx, int idx, int n_threads)
{
    probe_job *job = ctx;
    size_t per = job->bytes / (size_t)n_threads / 256 * 256;
    const uint8_t *p = job->buf + per * (size_t)idx;
    uint64_t v;
#if defined(__x86_64__)
    if (cpu_features_get()->avx2)
        v = probe_range_avx2(p, per);
    else
#endif
        v = probe_range_scalar(p, per);
    atomic_fetch_xor(&job->sink, v);
}

static double probe_pass(thread_pool *pool, probe_job *job)
{
    double t0 = now_s();
    pool_run(pool, probe_task, job);
    return (double)job->bytes / (now_s() - t0) / 1e9;
}

/* Allocates and touches the probe buffer, then measures it on its own. */
static bool setup_probe(thread_pool *pool, const options *o, probe_job *job, stats *out)
{
    job->bytes = (size_t)o->probe_mib << 20;
    uint8_t *buf = alloc_big(job->bytes);
    if (buf == NULL)
        return false;
    memset(buf, 1, job->bytes);
    job->buf = buf;
    double gbs[MAX_REPS];
    int reps = o->reps < 5 ? 5 : o->reps;
    probe_pass(pool, job); /* warm-up */
    for (int r = 0; r < reps; r++)
        gbs[r] = probe_pass(pool, job);
    *out = summarise(gbs, reps);
    return true;
}

/* ---- kernel runs -------------------------------------------------------- */

/* One weight matrix (or a model's tensors of one type) to multiply. */
typedef struct weights {
    uint32_t type;
    int n_parts;
    int passes;           /* passes per timed repetition (the in-cache row) */
    const uint8_t **data; /* part i: rows[i] rows of n[i] values */
    int64_t *rows, *n;
    int64_t one_rows;     /* storage for a one-part view's row count */
    uint64_t bytes, weights_total;
} weights;

typedef struct act_buffers {
    void *x_q;    /* tokens x act row, widest n */
    float *y;     /* tokens x rows, largest part */
    size_t x_stride;
} act_buffers;

static bool make_acts(const weights *w, int tokens, act_buffers *ab)
{
    int64_t max_n = 0, max_rows = 0;
    for (int i = 0; i < w->n_parts; i++) {
        max_n = w->n[i] > max_n ? w->n[i] : max_n;
        max_rows = w->rows[i] > max_rows ? w->rows[i] : max_rows;
    }
    ab->x_stride = matmul_act_bytes(w->type, max_n);
    ab->x_q = malloc(ab->x_stride * (size_t)tokens);
    ab->y = malloc((size_t)max_rows * (size_t)tokens * sizeof(float));
    float *x = malloc((size_t)max_n * sizeof(float));
    if (ab->x_q == NULL || ab->y == NULL || x == NULL) {
        free(x);
        return false;
    }
    for (int t = 0; t < tokens; t++) {
        for (int64_t i = 0; i < max_n; i++)
            x[i] = sinf((float)(i * 7 + t * 13)) * 0.5f;
        matmul_quantize_act(w->type, x, (uint8_t *)ab->x_q + ab->x_stride * (size_t)t, max_n);
    }
    free(x);
    return true;
}

/* The statistics of one table row: the kernel's GB/s and GFLOP/s and the
 * probe passes paired with its repetitions. */
typedef struct row_stats {
    stats gbs, gflops, probe;
} row_stats;

/* Times -r passes over every part, each after one probe pass on the
 * -t-thread pool. */
static void time_kernel(thread_pool *pool, thread_pool *probe_pool, probe_job *probe, const weights *w, int tokens,
                        const options *o, act_buffers *ab, row_stats *out)
{
    double gbs[MAX_REPS], gflops[MAX_REPS], probe_gbs[MAX_REPS];
    for (int r = -1; r < o->reps; r++) { /* r = -1: warm-up */
        if (r >= 0)
            probe_gbs[r] = probe_pass(probe_pool, probe);
        double t0 = now_s();
        for (int pass = 0; pass < w->passes; pass++)
            for (int i = 0; i < w->n_parts; i++) {
                const quant_traits *t = quant_traits_of(w->type);
                size_t stride = (size_t)(w->n[i] / t->block_size * t->type_size);
                if (tokens == 1)
                    matvec(pool, w->type, w->data[i], stride, w->rows[i], w->n[i], ab->x_q, ab->y);
                else
                    matmul(pool, w->type, w->data[i], stride, w->rows[i], w->n[i], ab->x_q, ab->x_stride, tokens,
                           ab->y, (size_t)w->rows[i]);
            }
        double dt = now_s() - t0;
        if (r >= 0) {
            gbs[r] = (double)w->bytes * w->passes / dt / 1e9;
            gflops[r] = 2.0 * (double)w->weights_total * tokens * w->passes / dt / 1e9;
        }
    }
    out->gbs = summarise(gbs, o->reps);
    out->gflops = summarise(gflops, o->reps);
    out->probe = summarise(probe_gbs, o->reps);
}

static void print_row(const char *type, const char *test, int threads, const weights *w, const row_stats *rs)
{
    printf("| %-7s | %-10s | %2d | %8.1f | %6.2f ± %5.2f | %6.2f | %7.2f ± %6.2f | %6.2f | %5.1f%% |\n", type, test,
           threads, (double)w->bytes / (1 << 20), rs->gbs.mean, rs->gbs.sd, rs->gbs.median, rs->gflops.mean,
           rs->gflops.sd, rs->probe.median, 100.0 * rs->gbs.median / rs->probe.median);
    fflush(stdout);
}

/* The first rows of the first part, IN_CACHE_BYTES of them, read
 * IN_CACHE_PASSES times per repetition: the kernel's own speed, with the
 * weights in L2, which says whether a type can keep up with memory. */
enum { IN_CACHE_BYTES = 256 << 10, IN_CACHE_PASSES = 64 };

static weights cache_view(const weights *w)
{
    const quant_traits *t = quant_traits_of(w->type);
    uint64_t row_bytes = (uint64_t)(w->n[0] / t->block_size * t->type_size);
    int64_t rows = (int64_t)(IN_CACHE_BYTES / row_bytes) / 4 * 4;
    if (rows < 1)
        rows = 1;
    if (rows > w->rows[0])
        rows = w->rows[0];
    weights v = *w;
    v.n_parts = 1;
    v.rows = &v.one_rows;
    v.one_rows = rows;
    v.passes = IN_CACHE_PASSES;
    v.bytes = (uint64_t)rows * row_bytes;
    v.weights_total = (uint64_t)rows * (uint64_t)w->n[0];
    return v;
}

static void run_type(thread_pool *one, thread_pool *all, probe_job *probe, const weights *w, const options *o)
{
    act_buffers ab = {0};
    const char *name = quant_traits_of(w->type)->name;
    if (!make_acts(w, o->tokens, &ab)) {
        fprintf(stderr, "hydra-bench: %s: out of memory for activations\n", name);
    } else {
        row_stats rs;
        char test[32];
        weights in_cache = cache_view(w);
        time_kernel(one, all, probe, &in_cache, 1, o, &ab, &rs);
        print_row(name, "matvec L2", 1, &in_cache, &rs);
        time_kernel(one, all, probe, w, 1, o, &ab, &rs);
        print_row(name, "matvec", 1, w, &rs);
        if (o->threads > 1) {
            time_kernel(all, all, probe, w, 1, o, &ab, &rs);
            print_row(name, "matvec", o->threads, w, &rs);
        }
        snprintf(test, sizeof test, "matmul p%d", o->tokens);
        time_kernel(all, all, probe, w, o->tokens, o, &ab, &rs);
        print_row(name, test, o->threads, w, &rs);
    }
    free(ab.x_q);
    free(ab.y);
}

/* ---- weight sources -------------------------------------------------------- */

/* A synthetic matrix: SEED_ROWS reference-quantised rows, repeated. */
static uint8_t *synth_matrix(uint32_t type, const options *o, weights *w)
{
    const quant_traits *t = quant_traits_of(type);
    uint64_t row_bytes = 0;
    if (!quant_row_bytes(type, (uint64_t)o->n, &row_bytes))
        return NULL;
    int64_t rows = (o->size_mib << 20) / (int64_t)row_bytes;
    rows = rows < SEED_ROWS ? SEED_ROWS : rows / SEED_ROWS * SEED_ROWS;
    uint8_t *data = alloc_big((size_t)(rows * (int64_t)row_bytes));
    float *x = malloc((size_t)o->n * sizeof(float));
    if (data == NULL || x == NULL) {
        free(data);
        free(x);
        return NULL;
    }
    for (int r = 0; r < SEED_ROWS; r++) {
        for (int64_t i = 0; i < o->n; i++)
            x[i] = sinf((float)(i * 31 + r * 17)) * (1.0f + (float)(i % 7));
        t->from_float(x, data + (size_t)r * row_bytes, o->n);
    }
    free(x);
    size_t seed_bytes = SEED_ROWS * (size_t)row_bytes;
    for (int64_t r = SEED_ROWS; r < rows; r += SEED_ROWS)
        memcpy(data + (size_t)r * row_bytes, data, seed_bytes);
    w->type = type;
    w->n_parts = 1;
    w->rows[0] = rows;
    w->n[0] = o->n;
    w->data[0] = data;
    w->bytes = (uint64_t)rows * row_bytes;
    w->weights_total = (uint64_t)rows * (uint64_t)o->n;
    return data;
}

static int run_synthetic(thread_pool *one, thread_pool *all, probe_job *probe, const options *o)
{
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        if (!o->want[type])
            continue;
        const uint8_t *part;
        int64_t rows, n;
        weights w = {.data = &part, .rows = &rows, .n = &n, .passes = 1};
        uint8_t *data = synth_matrix(type, o, &w);
        if (data == NULL) {
            fprintf(stderr, "hydra-bench: %s: cannot build a %lld MiB matrix of rows of %lld\n",
                    quant_traits_of(type)->name, (long long)o->size_mib, (long long)o->n);
            return 1;
        }
        run_type(one, all, probe, &w, o);
        free(data);
    }
    return 0;
}

/* A model's tensors of each type, each 2-D+ tensor as ne[0]-long rows. */
static int run_model(thread_pool *one, thread_pool *all, probe_job *probe, const options *o)
{
    hydra_model_params mp = hydra_model_default_params();
    mp.path = o->model;
    hydra_model *model;
    if (hydra_model_open(&model, &mp) != HYDRA_OK) {
        fprintf(stderr, "hydra-bench: %s\n", hydra_last_error());
        return 1;
    }
    size_t count = hydra_model_tensor_count(model);
    const uint8_t **data = calloc(count, sizeof *data);
    int64_t *rows = calloc(count, sizeof *rows), *n = calloc(count, sizeof *n);
    int rc = data && rows && n ? 0 : 1;
    for (uint32_t type = 0; type < QT_COUNT && rc == 0; type++) {
        const quant_traits *t = quant_traits_of(type);
        if (!o->want[type] || t == NULL || t->vec_dot == NULL)
            continue;
        weights w = {.type = type, .data = data, .rows = rows, .n = n, .passes = 1};
        for (size_t i = 0; i < count; i++) {
            hydra_tensor_info ti;
            if (hydra_model_tensor_at(model, i, &ti) != HYDRA_OK || ti.type != type || ti.n_dims < 2)
                continue;
            data[w.n_parts] = ti.data;
            n[w.n_parts] = (int64_t)ti.ne[0];
            rows[w.n_parts] = (int64_t)(ti.n_elements / ti.ne[0]);
            w.bytes += ti.n_bytes;
            w.weights_total += ti.n_elements;
            w.n_parts++;
        }
        if (w.n_parts > 0)
            run_type(one, all, probe, &w, o);
    }
    free(data);
    free(rows);
    free(n);
    hydra_model_close(model);
    return rc;
}

/* ---- command line ----------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: hydra-bench [-m FILE] [-T TYPES] [-t THREADS] [-r REPS] [-n COLS] [-s MIB] [-p TOKENS]\n"
            "                   [--probe-mib MIB]\n"
            "  -m FILE     benchmark a GGUF's own tensors, grouped by type\n"
            "  -T TYPES    comma-separated types (default: every type hydra computes)\n"
            "  -t THREADS  threads for the multi-threaded rows and the probe (default: online CPUs)\n"
            "  -r REPS     repetitions (default 5)\n"
            "  -n COLS     values per row of the synthetic matrix (default 4096)\n"
            "  -s MIB      size of the synthetic matrix (default 512)\n"
            "  -p TOKENS   tokens of the matmul row (default 16)\n"
            "  --probe-mib MIB  memory probe buffer (default 1024)\n");
}

static bool parse_types(const char *list, bool *want)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (uint32_t t = 0; t < QT_COUNT; t++) {
            const quant_traits *tr = quant_traits_of(t);
            if (tr != NULL && tr->vec_dot != NULL && strcasecmp(tr->name, tok) == 0)
                want[t] = found = true;
        }
        if (!found) {
            fprintf(stderr, "hydra-bench: unknown or uncomputed type '%s'\n", tok);
            return false;
        }
    }
    return true;
}

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static int parse_args(int argc, char **argv, options *o)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (options){.threads = cpus > 0 ? (int)cpus : 1, .reps = 5, .tokens = 16, .n = 4096, .size_mib = 512,
                   .probe_mib = 1024};
    bool any_type = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        if (v == NULL) {
            usage();
            return 2;
        }
        if (strcmp(a, "-m") == 0)
            o->model = v;
        else if (strcmp(a, "-T") == 0 && parse_types(v, o->want))
            any_type = true;
        else if (strcmp(a, "-t") == 0 && parse_int(v, 1, 1024, &x))
            o->threads = (int)x;
        else if (strcmp(a, "-r") == 0 && parse_int(v, 1, MAX_REPS, &x))
            o->reps = (int)x;
        else if (strcmp(a, "-n") == 0 && parse_int(v, 256, 1 << 20, &x) && x % 256 == 0)
            o->n = x;
        else if (strcmp(a, "-s") == 0 && parse_int(v, 1, 1 << 20, &x))
            o->size_mib = x;
        else if (strcmp(a, "-p") == 0 && parse_int(v, 2, 4096, &x))
            o->tokens = (int)x;
        else if (strcmp(a, "--probe-mib") == 0 && parse_int(v, 64, 1 << 20, &x))
            o->probe_mib = x;
        else {
            usage();
            return 2;
        }
        i++;
    }
    if (!any_type)
        for (uint32_t t = 0; t < QT_COUNT; t++) {
            const quant_traits *tr = quant_traits_of(t);
            o->want[t] = tr != NULL && tr->vec_dot_ref != NULL;
        }
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    thread_pool *one = NULL, *all = NULL;
    if (pool_create(&all, o.threads) != HYDRA_OK) {
        fprintf(stderr, "hydra-bench: %s\n", hydra_last_error());
        return 1;
    }
    char features[256];
    cpu_features_describe(cpu_features_get(), features, sizeof features);
    stats probe;
    probe_job job = {0};
    if (!setup_probe(all, &o, &job, &probe)) {
        fprintf(stderr, "hydra-bench: cannot allocate the %lld MiB probe buffer\n", (long long)o.probe_mib);
        pool_destroy(all);
        return 1;
    }
    printf("cpu features: %s; threads %d; reps %d\n\n", features, o.threads, o.reps);
    printf("memory read probe (%d threads, %lld MiB, 32-byte loads, 8 accumulators): best %.2f GB/s, median "
           "%.2f GB/s, mean %.2f ± %.2f\n\n",
           o.threads, (long long)o.probe_mib, probe.best, probe.median, probe.mean, probe.sd);
    printf("GB/s: weight bytes read per second, mean ± sd and median; probe: median of the probe passes run\n"
           "before each repetition of the row; of probe: median GB/s / probe median.\n\n");
    printf("| type    | test       |  t | size MiB |      GB/s      | median | GFLOP/s          |  probe | of probe |\n");
    printf("| ------- | ---------- | -: | -------: | -------------: | -----: | ---------------: | -----: | -------: |\n");
    rc = o.model ? run_model(one, all, &job, &o) : run_synthetic(one, all, &job, &o);
    free((void *)job.buf);
    pool_destroy(all);
    return rc;
}
