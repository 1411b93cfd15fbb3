/*
 * matmul.c — matrix-vector and matrix-matrix drivers (matmul.h).
 *
 * Every driver is a batch of independent products (matmul_batch; matvec
 * and matmul are batches of one) in one parallel region.  Work is handed
 * out in chunks of consecutive rows from an atomic counter, so a thread
 * slowed by a noisy neighbour takes fewer chunks instead of holding
 * everyone at the barrier; a chunk is contiguous, so the hardware
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

/* The kernels of one weight type. */
typedef struct row_kernels {
    quant_vec_dot_fn vec_dot;
    quant_vec_dot_rows_fn vec_dot_rows; /* SIMD_ROWS rows at once, or NULL */
    quant_gemm_fn gemm;                 /* SIMD_GEMM_TOKENS tokens at once, or NULL */
} row_kernels;

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

/* y[r0 .. r1) of W (rows of n values, row_stride apart) for one token:
 * groups of SIMD_ROWS rows share the activation loads where the type has
 * such a kernel; the rest go one by one.  Both give the same bits per row
 * (simd.h). */
static void dot_range(const row_kernels *k, int64_t n, const uint8_t *w, size_t row_stride, int64_t r0, int64_t r1,
                      const uint8_t *x, float *y)
{
    int64_t r = r0;
    if (k->vec_dot_rows != NULL)
        for (; r + SIMD_ROWS <= r1; r += SIMD_ROWS)
            k->vec_dot_rows(n, &y[r], w + (size_t)r * row_stride, row_stride, x);
    for (; r < r1; r++)
        k->vec_dot(n, &y[r], w + (size_t)r * row_stride, x);
}

/* Rows r0 .. r1 of one item for every token.  With a gemm kernel,
 * SIMD_GEMM_TOKENS tokens per call: each weight block is decoded once per
 * call and dotted with all its tokens.  Without one, blocks of
 * TOKENS_PER_BLOCK tokens over groups of SIMD_ROWS rows, so a group's rows
 * stay in L1 across the block's tokens. */
static void item_rows(const row_kernels *k, const matmul_item *it, int64_t r0, int64_t r1)
{
    const uint8_t *w = it->w, *x = it->x_q;
    if (it->n_tok == 1) {
        dot_range(k, it->n, w, it->row_stride, r0, r1, x, it->y);
        return;
    }
    if (k->gemm != NULL) {
        for (int64_t t0 = 0; t0 < it->n_tok; t0 += SIMD_GEMM_TOKENS)
            k->gemm(it->n, w + (size_t)r0 * it->row_stride, it->row_stride, (int)(r1 - r0), x + (size_t)t0 * it->x_stride,
                    it->x_stride, (int)min64(SIMD_GEMM_TOKENS, it->n_tok - t0), it->y + (size_t)t0 * it->y_stride + r0,
                    it->y_stride);
        return;
    }
    for (int64_t t0 = 0; t0 < it->n_tok; t0 += TOKENS_PER_BLOCK)
        for (int64_t g = r0; g < r1; g += SIMD_ROWS)
            for (int64_t t = t0; t < min64(t0 + TOKENS_PER_BLOCK, it->n_tok); t++)
                dot_range(k, it->n, w, it->row_stride, g, min64(g + SIMD_ROWS, r1), x + (size_t)t * it->x_stride,
                          it->y + (size_t)t * it->y_stride);
}

/* --- independent products in one region */

/* Items one region takes at most (the plan lives on the caller's stack). */
enum { BATCH_MAX_ITEMS = 128 };

typedef struct batch_plan {
    row_kernels k;
    int64_t chunk_rows;
    int64_t first_chunk; /* chunks of the items before this one */
} batch_plan;

/* Chunks are claimed from both ends of the batch's chunk list: even threads
 * take the next from the front, odd threads the next from the back.  One
 * 64-bit counter holds both counts (front in the low half, back in the
 * high), so a claim is one fetch-add and it succeeds exactly when fewer
 * than `total` claims came before it: the fronts and backs handed out never
 * meet.  Why both ends: when two threads share one core's vector units
 * (SMT siblings; the development machine's two vCPUs behave so: two AVX2
 * loops run at half speed each), a caller that puts its compute-bound
 * multi-token items first and its memory-bound one-token items last gets
 * one thread streaming weights while the other multiplies, instead of
 * both waiting on memory and then both fighting over the vector units. */
typedef struct batch_job {
    const matmul_item *items;
    batch_plan plan[BATCH_MAX_ITEMS + 1]; /* plan[n_items].first_chunk: the total */
    int n_items;
    _Atomic uint64_t claims;
} batch_job;

enum { BACK_SHIFT = 32 };

/* The next chunk for this thread; false when none is left. */
static bool claim(batch_job *job, bool from_back, int64_t *chunk)
{
    const uint64_t total = (uint64_t)job->plan[job->n_items].first_chunk;
    const uint64_t old = atomic_fetch_add_explicit(&job->claims, from_back ? (uint64_t)1 << BACK_SHIFT : 1,
                                                   memory_order_relaxed);
    const uint64_t front = old & 0xffffffffu, back = old >> BACK_SHIFT;
    if (front + back >= total)
        return false;
    *chunk = from_back ? (int64_t)(total - 1 - back) : (int64_t)front;
    return true;
}

static void batch_task(void *ctx, int thread_idx, int n_threads)
{
    (void)n_threads;
    batch_job *job = ctx;
    const bool from_back = thread_idx % 2 == 1;
    int i = from_back ? job->n_items - 1 : 0; /* a thread's chunks move one way, so its item does too */
    for (int64_t c; claim(job, from_back, &c);) {
        while (c < job->plan[i].first_chunk)
            i--;
        while (c >= job->plan[i + 1].first_chunk)
            i++;
        const matmul_item *it = &job->items[i];
        const batch_plan *p = &job->plan[i];
        const int64_t r0 = (c - p->first_chunk) * p->chunk_rows;
        item_rows(&p->k, it, r0, min64(r0 + p->chunk_rows, it->n_rows));
    }
}

/* How item `it` is split: one-token items in CHUNKS_PER_THREAD chunks per
 * thread; multi-token items also in tiles whose weights fit in L2 next to
 * the activations. */
static void plan_item(batch_plan *p, const matmul_item *it, int n_threads)
{
    const quant_traits *t = quant_traits_of(it->wtype);
    p->k = (row_kernels){t->vec_dot, quant_cpu_vec_dot_rows(it->wtype), quant_cpu_gemm(it->wtype)};
    int64_t max_rows = it->n_rows;
    if (it->n_tok > 1) {
        const int64_t tile_rows = (int64_t)(TILE_WEIGHT_BYTES / (it->row_stride > 0 ? it->row_stride : 1));
        max_rows = tile_rows > 0 ? tile_rows : 1;
    }
    p->chunk_rows = chunk_rows_for(it->n_rows, max_rows, n_threads);
}

void matmul_batch(thread_pool *pool, const matmul_item *items, int n_items)
{
    for (int done = 0; done < n_items; done += BATCH_MAX_ITEMS) {
        batch_job job = {.items = items + done, .n_items = (int)min64(n_items - done, BATCH_MAX_ITEMS)};
        int64_t chunks = 0;
        for (int i = 0; i < job.n_items; i++) {
            batch_plan *p = &job.plan[i];
            plan_item(p, &job.items[i], pool_size(pool));
            p->first_chunk = chunks;
            if (job.items[i].n_tok > 0)
                chunks += p->chunk_rows > 0 ? (job.items[i].n_rows + p->chunk_rows - 1) / p->chunk_rows : 0;
        }
        job.plan[job.n_items].first_chunk = chunks;
        atomic_init(&job.claims, 0);
        pool_run(pool, batch_task, &job);
    }
}

void matvec(thread_pool *pool, uint32_t wtype, const void *w, size_t row_stride, int64_t n_rows, int64_t n,
            const void *x_q, float *y)
{
    const matmul_item it = {wtype, w, row_stride, n_rows, n, x_q, 0, 1, y, 0};
    matmul_batch(pool, &it, 1);
}

void matmul(thread_pool *pool, uint32_t wtype, const void *w, size_t row_stride, int64_t n_rows, int64_t n,
            const void *x_q, size_t x_stride, int64_t n_tok, float *y, size_t y_stride)
{
    const matmul_item it = {wtype, w, row_stride, n_rows, n, x_q, x_stride, n_tok, y, y_stride};
    matmul_batch(pool, &it, 1);
}
