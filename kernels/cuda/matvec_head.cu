/*
 * matvec_head.cu — one token's product with a large quantised matrix whose
 * rows are read once per step at the memory's pace: the output projection
 * (Qwen3-30B-A3B: 151936 Q6_K rows, 255 MB; docs/PERFORMANCE.md "CUDA
 * decode, session 7").  matvec.cu's kernel has each lane decode its chunks
 * straight from global memory (a Q6_K chunk is 20 loads spread over the
 * row), so its launch is bound by the L1's load throughput.
 *
 * Here a persistent grid (as many blocks as stay resident) walks tiles of
 * MVH_WARPS * R consecutive rows; each tile is copied into shared memory
 * MVH_STAGES - 1 tiles ahead of the one being decoded, so the memory
 * always has a block's next tiles in flight while the warps compute: by
 * one bulk copy a tile on compute capability 9.0 (cluster_async.cuh's
 * cla_bulk_once: evict-first in L2, counted on a stage's mbarrier), by
 * every thread's 16-byte asynchronous copies (cp.async) before it.  A warp
 * decodes its R rows from there with the chunk order of matvec.cu (lane l
 * takes chunks l, l + 32, ..., in pairs), so every row gets the same bits
 * as gk_matvec; the activation chunk a lane loads serves its R rows.
 *
 * With a norm, every block first applies the RMSNorm to the raw row itself
 * (row_norm.cuh's one-pass path on a block of GK_NORM_THREADS, so the same
 * bits as gk_rmsnorm) into shared memory: the output norm and the head are
 * one launch.
 */
#include "cluster_async.cuh"
#include "common.cuh"
#include "mma.cuh"
#include "row_norm.cuh"
#include "quant_words.cuh"
#include "stamp.cuh"

GK_STAMP_TU(matvec_head)

enum {
    MVH_THREADS = GK_NORM_THREADS, /* the norm's block: the same sums as gk_rmsnorm */
    MVH_WARPS = MVH_THREADS / GPU_WARP,
    MVH_STAGES = 3,                /* cp_async_wait_prior leaves the newest tile in flight */
    MVH_MAX_ROW_BYTES = 8192,
    MVH_PAIR_ROW_BYTES = 2048,     /* rows up to this long go two to a warp (R = 2) */
};

/* The types the launch takes (the usual output-projection types). */
#define MVH_TYPES(X) X(GQ_Q4_K) X(GQ_Q5_K) X(GQ_Q6_K) X(GQ_Q8_0)

/* Where a launch's shared memory goes: MVH_STAGES tiles, then the 8-bit
 * activation row (n bytes) and its meta (a 16-byte unit per chunk). */
struct mvh_smem {
    uint8_t *stage;
    int8_t *act_q;
    int4 *act_meta;
    int64_t tile_bytes;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(HYDRA_HIP)
#define MVH_BULK 1
#else
#define MVH_BULK 0
#endif

/* Tile t (rows t * rows_per_tile ..) into dst, counted on bar (bulk) or as
 * the calling threads' next copy group (empty past the last tile, so that
 * mvh_landed's count holds).  After the first tiles, called behind a block
 * barrier that ends every read of dst. */
static inline __device__ void mvh_fetch(const gk_mat &w, int64_t t, int rows_per_tile, uint8_t *dst, uint64_t *bar)
{
    const int64_t row0 = t * rows_per_tile;
    const int64_t rows = w.n_rows - row0 < rows_per_tile ? w.n_rows - row0 : rows_per_tile;
    const uint8_t *src = w.data + row0 * (int64_t)w.row_bytes;
#if MVH_BULK
    if (threadIdx.x == 0 && rows > 0) {
        const uint32_t bytes = (uint32_t)(rows * (int64_t)w.row_bytes);
        cla_async_fence();
        cla_arm(bar, bytes);
        cla_bulk_once(dst, src, bytes, bar);
    }
#else
    (void)bar;
    const int n16 = rows > 0 ? (int)(rows * (int64_t)w.row_bytes / 16) : 0;
    for (int i = threadIdx.x; i < n16; i += MVH_THREADS)
        cp_async16(dst + 16 * (int64_t)i, (const int4 *)src + i);
    cp_async_commit();
#endif
}

/* Until tile i of the block (stage i % MVH_STAGES, its i / MVH_STAGES-th
 * use) has landed for this thread. */
static inline __device__ void mvh_landed(uint64_t *bars, int64_t i)
{
#if MVH_BULK
    cla_wait_parity(&bars[i % MVH_STAGES], (uint32_t)(i / MVH_STAGES) & 1u);
#else
    (void)bars, (void)i;
    cp_async_wait_prior(); /* the newest group may still fly */
#endif
}

/* The activation row's 8-bit form into shared memory: with self_norm the
 * RMSNorm of the raw row x.f, written as gk_rmsnorm writes it (its float
 * output goes to scratch, which nothing reads); else a copy of x.q and
 * x.meta. */
static inline __device__ void mvh_activation(const gk_act &x, const gk_norm_out &norm, bool self_norm,
                                             const mvh_smem &sm, float *scratch, double *red)
{
    if (self_norm) {
        float v[NR_PER_THREAD], g[NR_PER_THREAD];
        norm_regs_load(x.f, x.n, norm.gain, v, g);
        const float scale = norm_regs_scale(v, x.n, norm.eps, red);
        const gk_norm_out into = {norm.gain, norm.eps, scratch, sm.act_q, (int32_t *)sm.act_meta};
        norm_regs_apply(v, g, x.n, scale, into, true, 0);
        return;
    }
    for (int64_t i = threadIdx.x; i < x.n / 16; i += MVH_THREADS)
        ((int4 *)sm.act_q)[i] = ((const int4 *)x.q)[i];
    for (int64_t i = threadIdx.x; i < x.n / 32; i += MVH_THREADS)
        sm.act_meta[i] = ((const int4 *)x.meta)[i];
}

/* The warp's R rows of the tile at rows (row r0 + u at rows + u *
 * row_bytes): matvec.cu's mv_row_q for one token, row by row, their sums
 * into res (the tile's results, this warp's R from res + warp * R). */
template <int T, int R>
static inline __device__ void mvh_rows(const gk_mat &w, const uint8_t *rows, const mvh_smem &sm, float *res)
{
    const int lane = threadIdx.x % GPU_WARP;
    const int n_chunks = (int)(w.n_cols / 32);
    float acc[R];
#pragma unroll
    for (int u = 0; u < R; u++)
        acc[u] = 0.0f;
    for (int c = lane; c < n_chunks; c += 2 * GPU_WARP) {
        const bool two = c + GPU_WARP < n_chunks;
        const int c2 = two ? c + GPU_WARP : c;
        gq_chunk ch[2][R];
#pragma unroll
        for (int u = 0; u < R; u++) {
            gq_decode_words<T>(rows + u * w.row_bytes, c, &ch[0][u]);
            gq_decode_words<T>(rows + u * w.row_bytes, c2, &ch[1][u]);
        }
#pragma unroll
        for (int p = 0; p < 2; p++) {
            const int cp = p == 0 ? c : c2;
            const gq_act x = gq_act_chunk(sm.act_q, sm.act_meta, cp);
            const float d = p == 0 || two ? __int_as_float(x.m.x) : 0.0f;
#pragma unroll
            for (int u = 0; u < R; u++)
                acc[u] += d * gq_chunk_dot<T>(&ch[p][u], x.a, x.m.y, x.m.z);
        }
    }
#pragma unroll
    for (int u = 0; u < R; u++) {
        const float v = warp_sum(acc[u]);
        if (lane == 0)
            res[(threadIdx.x / GPU_WARP) * R + u] = v;
    }
}

/* A tile's results (rows row0 ..) stored as one run by its first threads:
 * out may be the session's pinned logits row, written across the bus
 * during the launch (gpu_head_to_row), where a 4-byte store a row would
 * be a bus transaction each. */
static inline __device__ void mvh_store(const gk_mat &w, const gk_out &out, const float *res, int64_t row0,
                                        int rows_per_tile)
{
    const int64_t r = row0 + threadIdx.x;
    if ((int)threadIdx.x >= rows_per_tile || r >= w.n_rows)
        return;
    float v = res[threadIdx.x];
    if (out.bias != NULL)
        v += out.bias[r];
    out.y[r] = out.accumulate ? out.y[r] + v : v;
}

/* Row r of w . x (x normed first with self_norm), for one token: out.y[r]
 * = (accumulate ? out.y[r] : 0) + dot + bias[r].  Block b takes tiles b,
 * b + gridDim.x, ...; the copies of its first tiles start before the wait
 * for the previous kernel: the weights are never written during a step. */
template <int T, int R>
__global__ void __launch_bounds__(MVH_THREADS, 2) k_matvec_head(gk_mat w, gk_act x, gk_out out, gk_norm_out norm,
                                                             bool self_norm)
{
    extern __shared__ int4 mvh_buf[];
    __shared__ __align__(8) uint64_t bars[MVH_STAGES];
    __shared__ double red[MVH_WARPS];
    __shared__ float res[2][MVH_WARPS * 2]; /* two tiles' results: one stored while the next is summed */
    const int rows_per_tile = MVH_WARPS * R;
    const int64_t n_tiles = (w.n_rows + rows_per_tile - 1) / rows_per_tile;
    mvh_smem sm;
    sm.tile_bytes = (int64_t)rows_per_tile * w.row_bytes;
    sm.stage = (uint8_t *)mvh_buf;
    sm.act_q = (int8_t *)(sm.stage + MVH_STAGES * sm.tile_bytes);
    sm.act_meta = (int4 *)(sm.act_q + x.n);
    if (MVH_BULK && threadIdx.x == 0)
        for (int s = 0; s < MVH_STAGES; s++)
            cla_init(&bars[s]);
    for (int s = 0; s < MVH_STAGES - 1; s++)
        mvh_fetch(w, blockIdx.x + (int64_t)s * gridDim.x, rows_per_tile, sm.stage + s * sm.tile_bytes, &bars[s]);
    __syncthreads(); /* the mbarriers initialised before anyone waits */
    gpu_params_warm(x);
    gpu_params_warm(out);
    gpu_params_warm(norm);
    gpu_pdl_wait();
    GK_STAMP_IF(blockIdx.x == 0 && threadIdx.x == 0, GS_HEAD_WAIT);
    /* the last stage is free until the loop's first fetch: the norm's
     * unread float output goes there (the launcher checks it fits) */
    mvh_activation(x, norm, self_norm, sm, (float *)(sm.stage + (MVH_STAGES - 1) * sm.tile_bytes), red);
    static_assert(MVH_WARPS * 2 <= GPU_WARP, "a tile's results are stored by warp 0");
    const int warp = threadIdx.x / GPU_WARP;
    int64_t i = 0, t = blockIdx.x;
    for (; t < n_tiles; i++, t += gridDim.x) {
        mvh_landed(bars, i); /* tile t, as this thread sees it */
        __syncthreads();     /* everyone's; every warp is done with the stage refilled next; the last results in */
        const int64_t next = (i + MVH_STAGES - 1) % MVH_STAGES;
        mvh_fetch(w, t + (int64_t)(MVH_STAGES - 1) * gridDim.x, rows_per_tile, sm.stage + next * sm.tile_bytes,
                  &bars[next]);
        if (i > 0)
            mvh_store(w, out, res[(i - 1) % 2], (t - gridDim.x) * rows_per_tile, rows_per_tile);
        if (t * rows_per_tile + warp * R < w.n_rows)
            mvh_rows<T, R>(w, sm.stage + (i % MVH_STAGES) * sm.tile_bytes + (int64_t)warp * R * w.row_bytes, sm,
                           res[i % 2]);
    }
    __syncthreads();
    if (i > 0)
        mvh_store(w, out, res[(i - 1) % 2], (t - gridDim.x) * rows_per_tile, rows_per_tile);
    GK_STAMP_IF(blockIdx.x == 0 && threadIdx.x == 0, GS_HEAD_DONE);
}

extern "C" bool gk_matvec_head_fits(const gk_mat *w)
{
    bool typed = false;
#define MVH_IS_(T) typed = typed || w->type == T;
    MVH_TYPES(MVH_IS_)
#undef MVH_IS_
    return typed && w->row_bytes % 16 == 0 && w->row_bytes <= MVH_MAX_ROW_BYTES && (uintptr_t)w->data % 16 == 0 &&
           w->n_cols % 32 == 0 && w->expert_data == NULL;
}

/* Sizes the persistent grid (every block resident) and launches. */
template <int T, int R>
static int mvh_launch(gpuStream_t s, const gk_mat *w, const gk_act *x, const gk_out *out, const gk_norm_out *norm,
                      bool self_norm)
{
    const int64_t rows_per_tile = MVH_WARPS * R;
    const int64_t tile_bytes = rows_per_tile * (int64_t)w->row_bytes;
    const size_t smem = (size_t)(MVH_STAGES * tile_bytes + x->n + x->n / 2);
    const int e = smem > 48 * 1024 ? gpu_allow_smem((const void *)k_matvec_head<T, R>, (int)smem) : 0;
    if (e != 0)
        return e;
    const int64_t n_tiles = (w->n_rows + rows_per_tile - 1) / rows_per_tile;
    const int resident = gk_coresident_blocks(k_matvec_head<T, R>, MVH_THREADS, smem);
    if (resident <= 0)
        return (int)gpuErrorInvalidValue;
    const unsigned grid = (unsigned)(n_tiles < resident ? n_tiles : resident);
    return gk_launch(k_matvec_head<T, R>, grid, MVH_THREADS, smem, s, *w, *x, *out, *norm, self_norm);
}

extern "C" int gk_matvec_head(gpuStream_t s, const gk_mat *w, const gk_act *x, const gk_out *out,
                              const gk_norm_out *norm)
{
    if (!gk_matvec_head_fits(w) || x->n != w->n_cols)
        return (int)gpuErrorInvalidValue;
    const bool pair = w->row_bytes <= MVH_PAIR_ROW_BYTES;
    /* The launch norms the row itself where a block holds it in registers
     * (rmsnorm_row_fits for a block of GK_NORM_THREADS) and a tile has room
     * for its float output; else gk_rmsnorm first, into norm's buffers. */
    const int64_t tile_bytes = (int64_t)MVH_WARPS * (pair ? 2 : 1) * (int64_t)w->row_bytes;
    const bool self_norm = norm != NULL && x->n <= (int64_t)NR_PER_THREAD * MVH_THREADS &&
                           (int64_t)sizeof(float) * x->n <= tile_bytes;
    gk_act xa = *x;
    if (norm != NULL && !self_norm) {
        const int e = gk_rmsnorm(s, x->f, norm->gain, norm->eps, 1, x->n, norm->y, norm->q, norm->meta);
        if (e != 0)
            return e;
        xa.q = norm->q;
        xa.meta = norm->meta;
    }
    if (w->n_rows == 0)
        return 0;
    const gk_norm_out none = {};
    const gk_norm_out *no = self_norm ? norm : &none;
#define MVH_LAUNCH_(T)                                                                                           \
    if (w->type == T)                                                                                            \
        return pair ? mvh_launch<T, 2>(s, w, &xa, out, no, self_norm) : mvh_launch<T, 1>(s, w, &xa, out, no, self_norm);
    MVH_TYPES(MVH_LAUNCH_)
#undef MVH_LAUNCH_
    return (int)gpuErrorInvalidValue;
}
