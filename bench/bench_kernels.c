/*
 * bench_kernels.c — hydra-bench --kernels: per tensor type, matrix-vector
 * (one token, decode) with 1 thread and with -t threads as GB/s of weight
 * bytes read and GFLOP/s (2 flops per weight); matrix-matrix (-p tokens,
 * prefill) with -t threads; and "matvec L2", one thread over 256 KiB of
 * the rows read again and again, the kernel's speed without memory in the
 * way, and the same with -t threads over 256 KiB each (whether all threads
 * together are bound by memory or by the cores).  Every repetition is paired with one probe pass run just before it:
 * each row shows the probe's median over its own repetitions and the
 * kernel's median as a share of it.
 *
 * Weights: a synthetic matrix (SEED_ROWS rows quantised by the reference
 * quantiser, repeated to fill -s MiB: speed does not depend on the values;
 * the default 512 MiB is far beyond any last-level cache), or with -m a
 * model's own 2-D+ tensors, grouped by type.
 */
#include "bench.h"

#include "../kernels/cpu/matmul.h"
#include "hydra.h"
#include "quant.h"
#include "threads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SEED_ROWS = 64 };

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
    bench_stats gbs, gflops, probe;
} row_stats;

/* Times -r passes over every part, each after one probe pass on the
 * -t-thread pool. */
static void time_kernel(thread_pool *pool, bench_probe *probe, const weights *w, int tokens, const bench_options *o,
                        act_buffers *ab, row_stats *out)
{
    double gbs[BENCH_MAX_REPS], gflops[BENCH_MAX_REPS], probe_gbs[BENCH_MAX_REPS];
    for (int r = -1; r < o->reps; r++) { /* r = -1: warm-up */
        if (r >= 0)
            probe_gbs[r] = bench_probe_pass(probe);
        double t0 = bench_now();
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
        double dt = bench_now() - t0;
        if (r >= 0) {
            gbs[r] = (double)w->bytes * w->passes / dt / 1e9;
            gflops[r] = 2.0 * (double)w->weights_total * tokens * w->passes / dt / 1e9;
        }
    }
    out->gbs = bench_summarise(gbs, o->reps);
    out->gflops = bench_summarise(gflops, o->reps);
    out->probe = bench_summarise(probe_gbs, o->reps);
}

static void print_row(const char *type, const char *test, int threads, const weights *w, const row_stats *rs)
{
    printf("| %-7s | %-10s | %2d | %8.1f | %6.2f ± %5.2f | %6.2f | %7.2f ± %6.2f | %6.2f | %5.1f%% |\n", type, test,
           threads, (double)w->bytes / (1 << 20), rs->gbs.mean, rs->gbs.sd, rs->gbs.median, rs->gflops.mean,
           rs->gflops.sd, rs->probe.median, 100.0 * rs->gbs.median / rs->probe.median);
    fflush(stdout);
}

/* The first rows of the first part, IN_CACHE_BYTES per thread of them,
 * read IN_CACHE_PASSES times per repetition: the kernel's own speed, with
 * the weights in L2 (or, as threads claim chunks anew each pass, in the
 * last-level cache), which says whether a type can keep up with memory. */
enum { IN_CACHE_BYTES = 256 << 10, IN_CACHE_PASSES = 64 };

static void cache_view(const weights *w, int threads, weights *v)
{
    const quant_traits *t = quant_traits_of(w->type);
    uint64_t row_bytes = (uint64_t)(w->n[0] / t->block_size * t->type_size);
    int64_t rows = (int64_t)((uint64_t)IN_CACHE_BYTES * (uint64_t)threads / row_bytes) / 4 * 4;
    if (rows < 1)
        rows = 1;
    if (rows > w->rows[0])
        rows = w->rows[0];
    *v = *w;
    v->n_parts = 1;
    v->rows = &v->one_rows; /* v's own: a returned copy would point at a dead one */
    v->one_rows = rows;
    v->passes = IN_CACHE_PASSES;
    v->bytes = (uint64_t)rows * row_bytes;
    v->weights_total = (uint64_t)rows * (uint64_t)w->n[0];
}

static void run_type(thread_pool *one, thread_pool *all, bench_probe *probe, const weights *w, const bench_options *o)
{
    act_buffers ab = {0};
    const char *name = quant_traits_of(w->type)->name;
    if (!make_acts(w, o->prompt, &ab)) {
        fprintf(stderr, "hydra-bench: %s: out of memory for activations\n", name);
    } else {
        row_stats rs;
        char test[32];
        weights in_cache, in_caches;
        cache_view(w, 1, &in_cache);
        time_kernel(one, probe, &in_cache, 1, o, &ab, &rs);
        print_row(name, "matvec L2", 1, &in_cache, &rs);
        time_kernel(one, probe, w, 1, o, &ab, &rs);
        print_row(name, "matvec", 1, w, &rs);
        if (o->threads > 1) {
            time_kernel(all, probe, w, 1, o, &ab, &rs);
            print_row(name, "matvec", o->threads, w, &rs);
            cache_view(w, o->threads, &in_caches);
            time_kernel(all, probe, &in_caches, 1, o, &ab, &rs);
            print_row(name, "matvec L2", o->threads, &in_caches, &rs);
        }
        snprintf(test, sizeof test, "matmul p%d", o->prompt);
        time_kernel(all, probe, w, o->prompt, o, &ab, &rs);
        print_row(name, test, o->threads, w, &rs);
    }
    free(ab.x_q);
    free(ab.y);
}

/* ---- weight sources -------------------------------------------------------- */

/* A synthetic matrix: SEED_ROWS reference-quantised rows, repeated. */
static uint8_t *synth_matrix(uint32_t type, const bench_options *o, weights *w)
{
    const quant_traits *t = quant_traits_of(type);
    uint64_t row_bytes = 0;
    if (!quant_row_bytes(type, (uint64_t)o->cols, &row_bytes))
        return NULL;
    int64_t rows = (o->size_mib << 20) / (int64_t)row_bytes;
    rows = rows < SEED_ROWS ? SEED_ROWS : rows / SEED_ROWS * SEED_ROWS;
    uint8_t *data = bench_alloc_big((size_t)(rows * (int64_t)row_bytes));
    float *x = malloc((size_t)o->cols * sizeof(float));
    if (data == NULL || x == NULL) {
        free(data);
        free(x);
        return NULL;
    }
    for (int r = 0; r < SEED_ROWS; r++) {
        for (int64_t i = 0; i < o->cols; i++)
            x[i] = sinf((float)(i * 31 + r * 17)) * (1.0f + (float)(i % 7));
        t->from_float(x, data + (size_t)r * row_bytes, o->cols);
    }
    free(x);
    size_t seed_bytes = SEED_ROWS * (size_t)row_bytes;
    for (int64_t r = SEED_ROWS; r < rows; r += SEED_ROWS)
        memcpy(data + (size_t)r * row_bytes, data, seed_bytes);
    w->type = type;
    w->n_parts = 1;
    w->rows[0] = rows;
    w->n[0] = o->cols;
    w->data[0] = data;
    w->bytes = (uint64_t)rows * row_bytes;
    w->weights_total = (uint64_t)rows * (uint64_t)o->cols;
    return data;
}

static int run_synthetic(thread_pool *one, thread_pool *all, bench_probe *probe, const bench_options *o)
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
                    quant_traits_of(type)->name, (long long)o->size_mib, (long long)o->cols);
            return 1;
        }
        run_type(one, all, probe, &w, o);
        free(data);
    }
    return 0;
}

/* A model's tensors of each type, each 2-D+ tensor as ne[0]-long rows. */
static int run_tensors(thread_pool *one, thread_pool *all, bench_probe *probe, const bench_options *o)
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

int bench_kernels(const bench_options *o, bench_probe *probe)
{
    thread_pool *all = NULL;
    if (pool_create(&all, o->threads) != HYDRA_OK) {
        fprintf(stderr, "hydra-bench: %s\n", hydra_last_error());
        return 1;
    }
    bench_clock_probe(o->threads);
    printf("GB/s: weight bytes read per second, mean ± sd and median; probe: median of the probe passes run\n"
           "before each repetition of the row; of probe: median GB/s / probe median.\n\n");
    printf("| type    | test       |  t | size MiB |      GB/s      | median | GFLOP/s          |  probe | of probe |\n");
    printf("| ------- | ---------- | -: | -------: | -------------: | -----: | ---------------: | -----: | -------: |\n");
    int rc = o->model ? run_tensors(NULL, all, probe, o) : run_synthetic(NULL, all, probe, o);
    pool_destroy(all);
    return rc;
}
