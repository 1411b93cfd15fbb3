/*
 * matmul.c — matrix-vector and matrix-matrix drivers (matmul.h).
 *
 * Work is handed out in chunks of consecutive rows from an atomic counter,
 * so a thread slowed by a noisy neighbour takes fewer chunks instead of
 * holding everyone at the barrier; a chunk is contiguous, so the hardware
 * prefetcher still sees one sequential stream per thread.
 *
 * matmul tiles rows x tokens: a tile's weight rows come from memory once,
 * then every token block re-reads them from L2 (and each single row from L1
 * across the tokens of a block), so weight traffic is once per tile, not
 * once per token.
 */
#include "matmul.h"

#include "simd.h"

#include <stdatomic.h>

/* Chunks per thread a matvec aims for: enough to balance a noisy machine,
 * few enough that a chunk is many rows of sequential reads. */
enum { CHUNKS_PER_THREAD = 8, MIN_CHUNK_ROWS = 4 };
/* Weight bytes of one matmul tile: well inside a 512 KiB - 1 MiB L2 next to
 * the activations of a token block. */
enum { TILE_WEIGHT_BYTES = 128 * 1024 };
/* Tokens per block: their activation rows (a few KiB each) stay in L1 while
 * one weight row is dotted with all of them. */
enum { TOKENS_PER_BLOCK = 8 };

size_t matmul_act_bytes(uint32_t wtype, int64_t n)
{
    const quant_traits *w = quant_traits_of(wtype);
    uint64_t bytes = 0;
    if (w == NULL || n < 0 || !quant_row_bytes(w->vec_dot_type, (uint64_t)n, &bytes))
        return 0;
    return (size_t)bytes;
}

void matmul_quantize_act(uint32_t wtype, const float *x, void *x_q, int64_t n)
{
    uint32_t act_type = quant_traits_of(wtype)->vec_dot_type;
    quant_from_float_fn quantize = quant_cpu_act_quantizer(act_type);
    if (quantize == NULL)
        quantize = quant_traits_of(act_type)->from_float;
    quantize(x, x_q, n);
}

typedef struct matmul_job {
    quant_vec_dot_fn vec_dot;
    quant_vec_dot_rows_fn vec_dot_rows; /* SIMD_ROWS rows at once, or NULL */
    quant_gemm_fn gemm;                 /* SIMD_GEMM_TOKENS tokens at once, or NULL */
    const uint8_t *w;
    size_t row_stride;
    int64_t n_rows, n;
    const uint8_t *x;
    size_t x_stride;
    int64_t n_tok;
    float *y;
    size_t y_stride;
    int64_t chunk_rows;
    _Atomic int64_t next_chunk;
} matmul_job;

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Rows per chunk: a multiple of SIMD_ROWS, so groups never straddle chunks. */
static int64_t chunk_rows_for(int64_t n_rows, int64_t max_rows, int n_threads)
{
    int64_t rows = (n_rows + (int64_t)n_threads * CHUNKS_PER_THREAD - 1) / ((int64_t)n_threads * CHUNKS_PER_THREAD);
    if (rows < MIN_CHUNK_ROWS)
        rows = MIN_CHUNK_ROWS;
    if (rows > max_rows)
        rows = max_rows;
    return rows < SIMD_ROWS ? rows : rows / SIMD_ROWS * SIMD_ROWS;
}

/* Claims the next chunk; false when none is left. */
static int claim(matmul_job *job, int64_t *r0, int64_t *r1)
{
    int64_t c = atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed);
    *r0 = c * job->chunk_rows;
    if (*r0 >= job->n_rows)
        return 0;
    *r1 = min64(*r0 + job->chunk_rows, job->n_rows);
    return 1;
}

/* The kernels of one weight type. */
typedef struct row_kernels {
    quant_vec_dot_fn vec_dot;
    quant_vec_dot_rows_fn vec_dot_rows; /* SIMD_ROWS rows at once, or NULL */
} row_kernels;

/* y[r0 .. r1) of W (rows of n values, row_stride apart) for one token:
 * groups of SIMD_ROWS rows share the activation loads where the type has
 * such a kernel; the rest go one by one.  Both give the same bits per row
 * (simd.h). */
static void dot_range(row_kernels k, int64_t n, const uint8_t *w, size_t row_stride, int64_t r0, int64_t r1,
                      const uint8_t *x, float *y)
{
    int64_t r = r0;
    if (k.vec_dot_rows != NULL)
        for (; r + SIMD_ROWS <= r1; r += SIMD_ROWS)
            k.vec_dot_rows(n, &y[r], w + (size_t)r * row_stride, row_stride, x);
    for (; r < r1; r++)
        k.vec_dot(n, &y[r], w + (size_t)r * row_stride, x);
}

static void dot_rows(const matmul_job *job, int64_t r0, int64_t r1, const uint8_t *x, float *y)
{
    dot_range((row_kernels){job->vec_dot, job->vec_dot_rows}, job->n, job->w, job->row_stride, r0, r1, x, y);
}

static void matvec_task(void *ctx, int thread_idx, int n_threads)
{
    (void)thread_idx;
    (void)n_threads;
    matmul_job *job = ctx;
    int64_t r0, r1;
    while (claim(job, &r0, &r1))
        dot_rows(job, r0, r1, job->x, job->y);
}

/* Rows r0 .. r1 for every token, SIMD_GEMM_TOKENS tokens per call: each
 * weight block is decoded once per call and dotted with all its tokens. */
static void gemm_rows(const matmul_job *job, int64_t r0, int64_t r1)
{
    for (int64_t t0 = 0; t0 < job->n_tok; t0 += SIMD_GEMM_TOKENS) {
        int toks = (int)min64(SIMD_GEMM_TOKENS, job->n_tok - t0);
        job->gemm(job->n, job->w + (size_t)r0 * job->row_stride, job->row_stride, (int)(r1 - r0),
                  job->x + (size_t)t0 * job->x_stride, job->x_stride, toks, job->y + (size_t)t0 * job->y_stride + r0,
                  job->y_stride);
    }
}

static void matmul_task(void *ctx, int thread_idx, int n_threads)
{
    (void)thread_idx;
    (void)n_threads;
    matmul_job *job = ctx;
    int64_t r0, r1;
    if (job->gemm != NULL) {
        while (claim(job, &r0, &r1))
            gemm_rows(job, r0, r1);
        return;
    }
    while (claim(job, &r0, &r1)) {
        for (int64_t t0 = 0; t0 < job->n_tok; t0 += TOKENS_PER_BLOCK) {
            int64_t t1 = min64(t0 + TOKENS_PER_BLOCK, job->n_tok);
            for (int64_t g = r0; g < r1; g += SIMD_ROWS) {
                int64_t g1 = min64(g + SIMD_ROWS, r1);
                for (int64_t t = t0; t < t1; t++)
                    dot_rows(job, g, g1, job->x + (size_t)t * job->x_stride, job->y + (size_t)t * job->y_stride);
            }
        }
    }
}

void matvec(thread_pool *pool, uint32_t wtype, const void *w, size_t row_stride, int64_t n_rows, int64_t n,
            const void *x_q, float *y)
{
    matmul_job job = {
        .vec_dot = quant_traits_of(wtype)->vec_dot,
        .vec_dot_rows = quant_cpu_vec_dot_rows(wtype),
        .w = w, .row_stride = row_stride, .n_rows = n_rows, .n = n,
        .x = x_q, .y = y,
        .chunk_rows = chunk_rows_for(n_rows, n_rows, pool_size(pool)),
    };
    atomic_init(&job.next_chunk, 0);
    pool_run(pool, matvec_task, &job);
}

void matmul(thread_pool *pool, uint32_t wtype, const void *w, size_t row_stride, int64_t n_rows, int64_t n,
            const void *x_q, size_t x_stride, int64_t n_tok, float *y, size_t y_stride)
{
    if (n_tok == 1) {
        matvec(pool, wtype, w, row_stride, n_rows, n, x_q, y);
        return;
    }
    int64_t tile_rows = (int64_t)(TILE_WEIGHT_BYTES / (row_stride > 0 ? row_stride : 1));
    matmul_job job = {
        .vec_dot = quant_traits_of(wtype)->vec_dot,
        .vec_dot_rows = quant_cpu_vec_dot_rows(wtype),
        .gemm = quant_cpu_gemm(wtype),
        .w = w, .row_stride = row_stride, .n_rows = n_rows, .n = n,
        .x = x_q, .x_stride = x_stride, .n_tok = n_tok,
        .y = y, .y_stride = y_stride,
        .chunk_rows = chunk_rows_for(n_rows, tile_rows > 0 ? tile_rows : 1, pool_size(pool)),
    };
    atomic_init(&job.next_chunk, 0);
    pool_run(pool, matmul_task, &job);
}

/* --- several independent matrix-vector products in one region */

enum { BATCH_MAX_ITEMS = 64 };

typedef struct batch_plan {
    row_kernels k;
    int64_t chunk_rows;
    int64_t first_chunk; /* chunks of the items before this one */
} batch_plan;

typedef struct batch_job {
    const matvec_item *items;
    batch_plan plan[BATCH_MAX_ITEMS + 1]; /* plan[n].first_chunk: the total */
    int n_items;
    _Atomic int64_t next_chunk;
} batch_job;

static void batch_task(void *ctx, int thread_idx, int n_threads)
{
    (void)thread_idx;
    (void)n_threads;
    batch_job *job = ctx;
    const int64_t total = job->plan[job->n_items].first_chunk;
    int i = 0; /* a thread's chunks only increase, so its item only moves on */
    for (int64_t c; (c = atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed)) < total;) {
        while (c >= job->plan[i + 1].first_chunk)
            i++;
        const matvec_item *it = &job->items[i];
        const batch_plan *p = &job->plan[i];
        int64_t r0 = (c - p->first_chunk) * p->chunk_rows;
        dot_range(p->k, it->n, it->w, it->row_stride, r0, min64(r0 + p->chunk_rows, it->n_rows), it->x_q, it->y);
    }
}

void matvec_batch(thread_pool *pool, const matvec_item *items, int n_items)
{
    for (int done = 0; done < n_items; done += BATCH_MAX_ITEMS) {
        batch_job job = {.items = items + done, .n_items = (int)min64(n_items - done, BATCH_MAX_ITEMS)};
        int64_t chunks = 0;
        for (int i = 0; i < job.n_items; i++) {
            const matvec_item *it = &job.items[i];
            batch_plan *p = &job.plan[i];
            p->k = (row_kernels){quant_traits_of(it->wtype)->vec_dot, quant_cpu_vec_dot_rows(it->wtype)};
            p->chunk_rows = chunk_rows_for(it->n_rows, it->n_rows, pool_size(pool));
            p->first_chunk = chunks;
            chunks += p->chunk_rows > 0 ? (it->n_rows + p->chunk_rows - 1) / p->chunk_rows : 0;
        }
        job.plan[job.n_items].first_chunk = chunks;
        atomic_init(&job.next_chunk, 0);
        pool_run(pool, batch_task, &job);
    }
}
