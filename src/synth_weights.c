/*
 * synth_weights.c — synthetic tensor data (see synth_weights.h).  The
 * reference quantisers of the K and IQ formats cost ~200 ns a value, so a
 * 30 B-parameter file takes hours on one core; the pool's threads each
 * generate and quantise whole chunks of a batch, then the caller writes
 * the batch.  The fast style quantises a pool of rows per tensor in
 * parallel and copies them; the skewed router adds a shared direction to
 * the token embeddings and a ranked multiple of it to each router row.
 */
#include "synth_weights.h"

#include "error.h"
#include "rng.h"
#include "quant.h"
#include "threads.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    CHUNK_VALUES = 1 << 16,  /* values per chunk, at least one row (256 KiB of floats) */
    CHUNKS_PER_THREAD = 4,   /* a batch: a few chunks per thread between writes */
};

/* The skewed router's constants, measured on 48-layer, 128-expert files
 * (docs/HYBRID.md, "Policies"):
 *  - SKEW_EMBD_STD: token embeddings drawn with this std per value instead
 *    of 1/sqrt(n_embd).  Random blocks add a component shared by all
 *    tokens (attention averages over positions), which after a few layers
 *    routes every token to the same experts (top 25% of experts: 99% of
 *    lookups at skew 0 with the plain embeddings); an embedding of norm
 *    8 sqrt(n_embd) against sublayer outputs of norm ~sqrt(n_embd) keeps
 *    each token's identity through 48 layers, at any width.
 *  - SKEW_EMBD_SHARE: the shared direction's length relative to the token
 *    part (0.3: the normed state at ~17 degrees from the token part).
 *  - SKEW_ROUTER_GAIN: scales -S ln(1 + rank) so that S is close to the
 *    measured Zipf exponent of the head (S 1: ~0.9). */
static const float SKEW_EMBD_STD = 8.0f;
static const float SKEW_EMBD_SHARE = 0.3f;
static const float SKEW_ROUTER_GAIN = 2.0f;

struct synth_weights {
    thread_pool *pool;
    int n_threads;
    synth_weight_style style;
    float *dir;          /* the skew direction, unit norm */
    uint64_t dir_bytes;
    float *row_coef;     /* per row: the multiple of dir added */
    uint64_t coef_bytes;
    uint8_t *pool_rows;  /* fast style: the tensor's quantised pool */
    uint64_t pool_cap;
    float *values;       /* each thread's chunk before quantising */
    uint64_t values_bytes;
    uint8_t *bytes;      /* one batch, quantised */
    uint64_t bytes_cap;
};

hydra_status synth_weights_create(synth_weights **out, int n_threads, const synth_weight_style *style)
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
    if (style != NULL)
        w->style = *style;
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
    free(w->dir);
    free(w->row_coef);
    free(w->pool_rows);
    free(w);
}

/* ------------------------------------------------------------ values */

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
    bool norm = t->role == SR_NORM || t->role == SR_HEAD_NORM;
    float scale = norm ? 0.05f : t->role == SR_BIAS ? 0.02f : (float)(1.0 / sqrt((double)t->row_len));
    float offset = norm ? 1.0f : 0.0f;
    for (uint64_t i = 0; i < n; i++)
        v[i] = offset + scale * unit_normal(&state);
}

/* ------------------------------------------------------------ skew */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The tensors the skew touches, by their llama.cpp names: the token
 * embeddings and the MoE routers (not the shared expert's gate,
 * ffn_gate_inp_shexp). */
static bool is_embedding(const synth_weight_tensor *t) { return strcmp(t->name, "token_embd.weight") == 0; }
static bool is_router(const synth_weight_tensor *t) { return ends_with(t->name, "ffn_gate_inp.weight"); }

/* The shared unit direction, from the file's seed alone. */
static void skew_direction(float *dir, uint64_t n, uint64_t seed)
{
    uint64_t state = tensor_seed(seed, "hydra.router_skew.direction");
    double norm2 = 0;
    for (uint64_t i = 0; i < n; i++) {
        dir[i] = unit_normal(&state);
        norm2 += (double)dir[i] * dir[i];
    }
    float inv = norm2 > 0 ? (float)(1.0 / sqrt(norm2)) : 0.0f;
    for (uint64_t i = 0; i < n; i++)
        dir[i] *= inv;
}

/* Router rows: b_e / sqrt(n_embd) with b_e = -S ln(1 + rank_e), centred,
 * rank_e from a Fisher-Yates permutation seeded by the tensor (so every
 * layer ranks its experts differently).  coef is scratch for the ranks. */
static void router_coefs(float *coef, uint64_t n_rows, uint64_t row_len, float skew, uint64_t tensor_state)
{
    uint64_t state = tensor_state ^ 0x5ca1ab1e5ca1ab1eu;
    for (uint64_t r = 0; r < n_rows; r++)
        coef[r] = (float)r;
    for (uint64_t r = n_rows; r > 1; r--) {
        uint64_t j = splitmix64(&state) % r;
        float tmp = coef[r - 1];
        coef[r - 1] = coef[j], coef[j] = tmp;
    }
    double mean = 0;
    for (uint64_t r = 0; r < n_rows; r++)
        mean += log1p((double)coef[r]);
    mean /= (double)n_rows;
    for (uint64_t r = 0; r < n_rows; r++)
        coef[r] = (float)(-(double)skew * SKEW_ROUTER_GAIN * (log1p((double)coef[r]) - mean) / sqrt((double)row_len));
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
    const float *dir;               /* NULL: no skew in this tensor */
    const float *row_coef;          /* per row multiple of dir; NULL: SKEW_EMBD_SHARE for every row */
    float gain;                     /* the drawn values' multiplier (skewed embeddings: SKEW_EMBD_GAIN) */
    const uint8_t *pool;            /* fast style: pool_rows quantised rows; NULL: quantise every row */
    uint64_t pool_rows;
    bool zero;                      /* every value 0 (a head norm with zero_head_norms) */
} batch;

/* Adds the skew direction to rows row0 .. row0 + rows - 1 held in v. */
static void add_direction(const batch *b, float *v, uint64_t row0, uint64_t rows)
{
    if (b->dir == NULL)
        return;
    for (uint64_t r = 0; r < rows; r++) {
        float coef = b->row_coef ? b->row_coef[row0 + r] : SKEW_EMBD_SHARE * b->gain;
        for (uint64_t i = 0; i < b->t->row_len; i++)
            v[r * b->t->row_len + i] += coef * b->dir[i];
    }
}

static uint64_t chunk_rows_of(const batch *b, uint64_t chunk)
{
    uint64_t row0 = chunk * b->chunk_rows;
    return b->t->n_rows - row0 < b->chunk_rows ? b->t->n_rows - row0 : b->chunk_rows;
}

/* Quantises the rows of one chunk from their seeded values. */
static void quantise_chunk(const batch *b, float *v, uint64_t chunk, uint8_t *out)
{
    uint64_t rows = chunk_rows_of(b, chunk), n = rows * b->t->row_len;
    if (b->zero) /* +0.0f: all-zero bytes in F32 (head norms are F32; no skew touches them) */
        memset(v, 0, n * sizeof *v);
    else
        fill_values(v, n, b->t, chunk_seed(b->tensor_state, chunk));
    for (uint64_t i = 0; b->gain != 1.0f && i < n; i++)
        v[i] *= b->gain;
    add_direction(b, v, chunk * b->chunk_rows, rows);
    b->qt->from_float(v, out, (int64_t)n);
}

/* Fills one chunk with pool rows, each pick drawn from the chunk's seed
 * (a stream apart from the pool's own seeds, which are chunk_seed of the
 * pool row index with the tensor state's complement). */
static void copy_chunk(const batch *b, uint64_t chunk, uint8_t *out)
{
    uint64_t state = chunk_seed(b->tensor_state, chunk);
    for (uint64_t r = 0, rows = chunk_rows_of(b, chunk); r < rows; r++)
        memcpy(out + r * b->row_bytes, b->pool + (splitmix64(&state) % b->pool_rows) * b->row_bytes, b->row_bytes);
}

static void batch_task(void *ctx, int thread, int n_threads)
{
    const batch *b = ctx;
    float *v = b->values + (uint64_t)thread * b->values_stride;
    for (uint64_t c = (uint64_t)thread; c < b->n_chunks; c += (uint64_t)n_threads) {
        uint8_t *out = b->bytes + c * b->chunk_rows * b->row_bytes;
        if (b->pool != NULL)
            copy_chunk(b, b->first_chunk + c, out);
        else
            quantise_chunk(b, v, b->first_chunk + c, out);
    }
}

/* The fast style's pool: row i drawn as a one-row chunk of its own seed. */
static void pool_task(void *ctx, int thread, int n_threads)
{
    const batch *b = ctx;
    float *v = b->values + (uint64_t)thread * b->values_stride;
    batch one = *b;
    one.chunk_rows = 1, one.tensor_state = ~b->tensor_state, one.row_coef = NULL;
    for (uint64_t i = (uint64_t)thread; i < b->pool_rows; i += (uint64_t)n_threads)
        quantise_chunk(&one, v, i, (uint8_t *)b->pool + i * b->row_bytes);
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

/* The skew's buffers for an embedding or router tensor. */
static hydra_status prepare_skew(synth_weights *w, batch *b, uint64_t seed)
{
    const synth_weight_tensor *t = b->t;
    bool router = is_router(t);
    if (w->style.router_skew <= 0 || !(router || is_embedding(t)))
        return HYDRA_OK;
    hydra_status st = grow((void **)&w->dir, &w->dir_bytes, t->row_len * sizeof(float));
    if (st == HYDRA_OK && router)
        st = grow((void **)&w->row_coef, &w->coef_bytes, t->n_rows * sizeof(float));
    if (st != HYDRA_OK)
        return st;
    skew_direction(w->dir, t->row_len, seed);
    if (router)
        router_coefs(w->row_coef, t->n_rows, t->row_len, w->style.router_skew, b->tensor_state);
    b->dir = w->dir, b->row_coef = router ? w->row_coef : NULL;
    b->gain = router ? 1.0f : SKEW_EMBD_STD * (float)sqrt((double)t->row_len);
    return HYDRA_OK;
}

/* The fast style's pool for a weight matrix with more rows than the pool. */
static hydra_status prepare_pool(synth_weights *w, batch *b)
{
    if (!w->style.fast || b->t->role != SR_WEIGHT || b->t->n_rows <= SYNTH_FAST_POOL_ROWS)
        return HYDRA_OK;
    hydra_status st = grow((void **)&w->pool_rows, &w->pool_cap, SYNTH_FAST_POOL_ROWS * b->row_bytes);
    if (st != HYDRA_OK)
        return st;
    b->pool = w->pool_rows, b->pool_rows = SYNTH_FAST_POOL_ROWS;
    pool_run(w->pool, pool_task, b);
    return HYDRA_OK;
}

hydra_status synth_weights_stream(synth_weights *w, const synth_weight_tensor *t, uint64_t seed, synth_sink_fn sink,
                                  void *user)
{
    batch b = {.t = t, .qt = quant_traits_of(t->type), .tensor_state = tensor_seed(seed, t->name), .gain = 1.0f,
               .zero = t->role == SR_HEAD_NORM && w->style.zero_head_norms};
    if (b.qt == NULL || b.qt->from_float == NULL || t->row_len == 0 || !quant_row_bytes(t->type, t->row_len, &b.row_bytes))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "synthetic weights: %s: cannot quantise rows of %" PRIu64 " values",
                          t->name, t->row_len);
    b.chunk_rows = t->row_len >= CHUNK_VALUES ? 1 : CHUNK_VALUES / t->row_len;
    uint64_t n_chunks = (t->n_rows + b.chunk_rows - 1) / b.chunk_rows;
    uint64_t per_batch = (uint64_t)w->n_threads * CHUNKS_PER_THREAD;
    hydra_status st = prepare(w, &b, per_batch);
    if (st == HYDRA_OK)
        st = prepare_skew(w, &b, seed);
    if (st == HYDRA_OK)
        st = prepare_pool(w, &b);
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
