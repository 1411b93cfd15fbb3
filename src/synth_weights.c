/*
 * synth_weights.c — synthetic tensor data (see synth_weights.h).  The
 * reference quantisers of the K and IQ formats cost ~200 ns a value, so a
 * 30 B-parameter file takes hours on one core; the pool's threads each
 * generate and quantise whole chunks of a batch, then the caller writes
 * the batch.
 */
#include "synth_weights.h"

#include "error.h"
#include "quant.h"
#include "threads.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

enum {
    CHUNK_VALUES = 1 << 16,  /* values per chunk, at least one row (256 KiB of floats) */
    CHUNKS_PER_THREAD = 4,   /* a batch: a few chunks per thread between writes */
};

struct synth_weights {
    thread_pool *pool;
    int n_threads;
    float *values;       /* each thread's chunk before quantising */
    uint64_t values_bytes;
    uint8_t *bytes;      /* one batch, quantised */
    uint64_t bytes_cap;
};

hydra_status synth_weights_create(synth_weights **out, int n_threads)
{
    *out = NULL;
    if (n_threads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = online > 0 ? (int)online : 1;
    }
    synth_weights *w = calloc(1, sizeof *w);
    if (w == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "synthetic weights: out of memory");
    w->n_threads = n_threads;
    hydra_status st = pool_create(&w->pool, n_threads);
    if (st != HYDRA_OK) {
        free(w);
        return st;
    }
    *out = w;
    return HYDRA_OK;
}

void synth_weights_free(synth_weights *w)
{
    if (w == NULL)
        return;
    pool_destroy(w->pool);
    free(w->values);
    free(w->bytes);
    free(w);
}

/* ------------------------------------------------------------ values */

/* splitmix64 (Steele, Lea, Flood 2014): a full-period 64-bit generator. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Approximately N(0, 1): Irwin-Hall, the sum of four uniform 16-bit
 * integers from one draw, centred (mean 4 x 32767.5) and divided by its
 * standard deviation 2 x sqrt((65536^2 - 1) / 12) = 37837.23.  Integer
 * arithmetic keeps files bit-identical across C libraries, which a
 * Box-Muller transform (log, cos) would not guarantee. */
static float unit_normal(uint64_t *state)
{
    uint64_t r = splitmix64(state);
    int64_t sum = (int64_t)(r & 0xffff) + (int64_t)((r >> 16) & 0xffff) + (int64_t)((r >> 32) & 0xffff) +
                  (int64_t)(r >> 48) - 2 * 65535;
    return (float)sum * (1.0f / 37837.23f);
}

static uint64_t tensor_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
    for (const char *c = name; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3u;
    uint64_t state = seed ^ h;
    return splitmix64(&state);
}

static uint64_t chunk_seed(uint64_t tensor, uint64_t chunk)
{
    uint64_t state = tensor ^ (chunk * 0xd1342543de82ef95u);
    return splitmix64(&state);
}

/* Weights and routers: std 1/sqrt(fan_in) (fan_in = the row length), so
 * activations keep their scale.  Norm gains near 1, biases near 0. */
static void fill_values(float *v, uint64_t n, const synth_weight_tensor *t, uint64_t state)
{
    float scale = t->role == SR_NORM ? 0.05f : t->role == SR_BIAS ? 0.02f : (float)(1.0 / sqrt((double)t->row_len));
    float offset = t->role == SR_NORM ? 1.0f : 0.0f;
    for (uint64_t i = 0; i < n; i++)
        v[i] = offset + scale * unit_normal(&state);
}

/* ------------------------------------------------------------ batches */

typedef struct batch {
    const synth_weight_tensor *t;
    const quant_traits *qt;
    uint64_t tensor_state;
    uint64_t chunk_rows, row_bytes;
    uint64_t first_chunk, n_chunks; /* this batch */
    float *values;                  /* per thread: values_stride floats */
    uint64_t values_stride;
    uint8_t *bytes;
} batch;

static void batch_task(void *ctx, int thread, int n_threads)
{
    const batch *b = ctx;
    float *v = b->values + (uint64_t)thread * b->values_stride;
    for (uint64_t c = (uint64_t)thread; c < b->n_chunks; c += (uint64_t)n_threads) {
        uint64_t chunk = b->first_chunk + c, row0 = chunk * b->chunk_rows;
        uint64_t rows = b->t->n_rows - row0 < b->chunk_rows ? b->t->n_rows - row0 : b->chunk_rows;
        uint64_t n = rows * b->t->row_len;
        fill_values(v, n, b->t, chunk_seed(b->tensor_state, chunk));
        b->qt->from_float(v, b->bytes + c * b->chunk_rows * b->row_bytes, (int64_t)n);
    }
}

static hydra_status grow(void **buf, uint64_t *cap, uint64_t need)
{
    if (need <= *cap)
        return HYDRA_OK;
    void *p = need <= SIZE_MAX ? realloc(*buf, (size_t)need) : NULL;
    if (p == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "synthetic weights: out of memory for %" PRIu64 " bytes", need);
    *buf = p, *cap = need;
    return HYDRA_OK;
}

/* Sizes the buffers for a tensor's chunks and batches. */
static hydra_status prepare(synth_weights *w, batch *b, uint64_t chunks_per_batch)
{
    uint64_t chunk_values = b->chunk_rows * b->t->row_len;
    hydra_status st = grow((void **)&w->values, &w->values_bytes, w->n_threads * chunk_values * sizeof(float));
    if (st == HYDRA_OK)
        st = grow((void **)&w->bytes, &w->bytes_cap, chunks_per_batch * b->chunk_rows * b->row_bytes);
    b->values = w->values, b->values_stride = chunk_values, b->bytes = w->bytes;
    return st;
}

hydra_status synth_weights_stream(synth_weights *w, const synth_weight_tensor *t, uint64_t seed, synth_sink_fn sink,
                                  void *user)
{
    batch b = {.t = t, .qt = quant_traits_of(t->type), .tensor_state = tensor_seed(seed, t->name)};
    if (b.qt == NULL || b.qt->from_float == NULL || t->row_len == 0 || !quant_row_bytes(t->type, t->row_len, &b.row_bytes))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "synthetic weights: %s: cannot quantise rows of %" PRIu64 " values",
                          t->name, t->row_len);
    b.chunk_rows = t->row_len >= CHUNK_VALUES ? 1 : CHUNK_VALUES / t->row_len;
    uint64_t n_chunks = (t->n_rows + b.chunk_rows - 1) / b.chunk_rows;
    uint64_t per_batch = (uint64_t)w->n_threads * CHUNKS_PER_THREAD;
    hydra_status st = prepare(w, &b, per_batch);
    for (uint64_t c = 0; c < n_chunks && st == HYDRA_OK; c += per_batch) {
        b.first_chunk = c;
        b.n_chunks = n_chunks - c < per_batch ? n_chunks - c : per_batch;
        pool_run(w->pool, batch_task, &b);
        uint64_t rows = c * b.chunk_rows + b.n_chunks * b.chunk_rows > t->n_rows ? t->n_rows - c * b.chunk_rows
                                                                                  : b.n_chunks * b.chunk_rows;
        st = sink(b.bytes, (size_t)(rows * b.row_bytes), user);
    }
    return st;
}
