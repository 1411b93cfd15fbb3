/*
 * experts.cu — one decode token's routed experts in one launch: every
 * route's gate/up rows with SwiGLU, then its down rows, with the same bits
 * as the two launches it replaces (matvec.cu's GLU k_matvec_q, then
 * k_matvec_staged over the hidden row): the same chunk decodes and dot
 * products (matvec_rows.cuh), added in the same order.
 *
 * Why one launch, and why this shape.  The two launches cost a decode
 * layer 8.1 + 6.2 us on the H200 for ~21 MB of weights that the copy probe
 * moves in 5 us (docs/PERFORMANCE.md, "what each launch costs in the
 * replayed step").  Earlier single launches lost because their blocks held
 * too few loads in flight (a persistent grid, session 7) or paid a global
 * fence and count per work item (session 12).  Here each route has
 * XT_BLOCKS blocks, one an SM; each block owns a slice of the route's
 * hidden row (its gate/up row pairs) and a slice of its output rows, and
 * asks for all of its weights at once by bulk copies into shared memory
 * (cp.async.bulk, compute capability 9.0: one instruction a run of rows,
 * no registers held while the bytes are in flight), so every SM's share
 * of the layer is in flight from the start.  The warps dot the gate/up
 * pairs as their pieces land; the route's blocks then exchange their
 * hidden values through L2 (a store, a fence, one count a block), stage
 * the hidden row in 8-bit form and dot their down rows.
 *
 * What it is bound by: the dots, not the bytes (docs/PERFORMANCE.md,
 * "CUDA decode, session 13").  The same ~9,000 chunk dots an SM as the two
 * launches, but done by one block after its bytes land, so the launch
 * runs 32 warps of 64 registers with one decoded chunk live at a time
 * (xt_pair_dots, xt_rows_dots): 16 warps with matvec_rows.cuh's
 * two-chunk dots (126 registers) were no faster than the two launches.
 * Routes by their words (gk_route_word, decode after the attention output
 * launch that routes): the blocks, resident while that launch's tail
 * ranks the experts, poll their route's word instead of waiting for the
 * launch to complete, so the bulk copies start as soon as the route
 * exists; the token's 8-bit row, which the router launch would write only
 * as it completes, each block norms itself from x and the handed scale
 * while its copies fly (tg128 526 -> 532 t/s on the H200; the first form,
 * which read the seq, the word and the routes one after another and
 * loaded x behind the copies, lost 12%: docs/PERFORMANCE.md, "CUDA decode,
 * session 15").
 *
 * Thread-block clusters would exchange the hidden values without L2, but
 * the H200 holds 7 clusters of 16 blocks at one block an SM, and a route
 * needs 16.  The route's blocks wait for each other, so the launch needs
 * all of its blocks resident at once (gk_experts_fits asks the occupancy):
 * it must not share the device with another such launch (hydra runs one
 * stream of decode steps a device; MPS clients could break that).
 */
#include "cluster_async.cuh"
#include "common.cuh"
#include "matvec_rows.cuh"
#include "row_norm.cuh"
#include "stamp.cuh"

#include <atomic>

GK_STAMP_TU(experts)

/* The type pairs (gate/up, down) of the launch: Q4_K_M's and Q5_K_M's
 * experts, and the uniform Q6_K and Q8_0 files. */
#define XT_PAIRS(X)                                                                                              \
    X(GQ_Q4_K, GQ_Q4_K) X(GQ_Q4_K, GQ_Q6_K) X(GQ_Q5_K, GQ_Q5_K) X(GQ_Q5_K, GQ_Q6_K) X(GQ_Q6_K, GQ_Q6_K)         \
        X(GQ_Q8_0, GQ_Q8_0)

enum {
    XT_WARPS = 32,
    XT_THREADS = XT_WARPS * GPU_WARP,
    XT_PIECE = 4,                /* gate/up row pairs a bulk copy: the warps start as the first ones land */
    XT_MAX_PAIRS = 64,           /* gate/up row pairs a block at most */
    XT_PIECES = XT_MAX_PAIRS / XT_PIECE,
    XT_MAX_BLOCKS = 16,          /* blocks a route at most */
    XT_DEVICES = 16,
};

struct xt_job {
    gk_mat gate, up, down;
    gk_act x;
    gk_rows rows;
    gk_out out;
    float *h;              /* the routes' hidden rows (n_routes x gate.n_rows) */
    unsigned int *sync;    /* GK_EXPERTS_SYNC_WORDS: a route's arrivals, a set for each blocks-a-route count */
    gk_route_word ready;   /* words NULL: the routes and x's 8-bit row are final at the PDL wait */
    const float *x_raw, *gain;
};

/* A block's shared memory, byte offsets in the dynamic window, for n
 * blocks a route: its gate rows, its up rows, its down rows, the route's
 * hidden row in 8-bit form with the chunks' meta (mv_stage_row's layout),
 * the token's 8-bit row and meta.  Every offset
 * is 16-byte aligned (the bulk copies' rule; gk_experts_fits checks the
 * row sizes). */
struct xt_layout {
    int pairs, rows; /* gate/up row pairs and down rows of a block */
    uint32_t gate, up, down, stage, xq, xm, total;
};

static __host__ __device__ inline uint32_t xt_align16(size_t v)
{
    return (uint32_t)((v + 15) & ~(size_t)15);
}

static __host__ __device__ inline xt_layout xt_layout_of(const gk_mat &gate, const gk_mat &up, const gk_mat &down,
                                                         unsigned n)
{
    xt_layout L;
    L.pairs = (int)(gate.n_rows / n);
    L.rows = (int)(down.n_rows / n);
    L.gate = 0;
    L.up = (uint32_t)(L.gate + (size_t)L.pairs * gate.row_bytes);
    L.down = (uint32_t)(L.up + (size_t)L.pairs * up.row_bytes);
    L.stage = xt_align16(L.down + (size_t)L.rows * down.row_bytes);
    L.xq = xt_align16(L.stage + (size_t)gate.n_rows + sizeof(int4) * (size_t)(gate.n_rows / 32));
    L.xm = xt_align16(L.xq + (size_t)gate.n_cols);
    L.total = (uint32_t)(L.xm + sizeof(int4) * (size_t)(gate.n_cols / 32));
    return L;
}

/* Row pairs in gate/up piece p. */
static __device__ inline int xt_piece_pairs(const xt_layout &L, int p)
{
    const int left = L.pairs - p * XT_PIECE;
    return left < XT_PIECE ? left : XT_PIECE;
}

/* The block's barriers in shared memory. */
struct xt_bars {
    uint64_t x, down, gu[XT_PIECES];
};

/* Thread 0: the bytes each barrier waits for (before the PDL wait: they
 * depend on the shapes only). */
static __device__ void xt_expect_all(const xt_job &j, const xt_layout &L, xt_bars &b)
{
    if (j.ready.words == NULL)
        cla_expect(&b.x, (uint32_t)(j.x.n + sizeof(int4) * (size_t)(j.x.n / 32)));
    for (int p = 0; p * XT_PIECE < L.pairs; p++)
        cla_expect(&b.gu[p], (uint32_t)((size_t)xt_piece_pairs(L, p) * (j.gate.row_bytes + j.up.row_bytes)));
    cla_expect(&b.down, (uint32_t)((size_t)L.rows * j.down.row_bytes));
}

/* Thread 0: the token's 8-bit row first (unless the block norms it),
 * then expert e's gate/up rows of this block piece by piece, then its down
 * rows. */
static __device__ void xt_ask(const xt_job &j, const xt_layout &L, int e, int64_t act, uint8_t *sm, xt_bars &b)
{
    const unsigned slice = blockIdx.x;
    if (j.ready.words == NULL) {
        cla_bulk(sm + L.xq, j.x.q + act * j.x.n, (uint32_t)j.x.n, &b.x);
        cla_bulk(sm + L.xm, j.x.meta + act * (j.x.n / 32) * 4, (uint32_t)(sizeof(int4) * (j.x.n / 32)), &b.x);
    }
    const uint8_t *g = expert_matrix(j.gate, e) + (size_t)slice * L.pairs * j.gate.row_bytes;
    const uint8_t *u = expert_matrix(j.up, e) + (size_t)slice * L.pairs * j.up.row_bytes;
    for (int p = 0; p * XT_PIECE < L.pairs; p++) {
        const size_t first = (size_t)p * XT_PIECE, n = (size_t)xt_piece_pairs(L, p);
        cla_bulk_once(sm + L.gate + first * j.gate.row_bytes, g + first * j.gate.row_bytes,
                      (uint32_t)(n * j.gate.row_bytes), &b.gu[p]);
        cla_bulk_once(sm + L.up + first * j.up.row_bytes, u + first * j.up.row_bytes,
                      (uint32_t)(n * j.up.row_bytes), &b.gu[p]);
    }
    const uint8_t *d = expert_matrix(j.down, e) + (size_t)slice * L.rows * j.down.row_bytes;
    cla_bulk_once(sm + L.down, d, (uint32_t)((size_t)L.rows * j.down.row_bytes), &b.down);
}

/* --- the dots, one decoded chunk live at a time */

/* A gate/up row pair's lane sums, mv_row_dots<T, GLU, 1>'s terms in its
 * order (two chunks a lane a step, acc then acc2 for each), against the
 * token's 8-bit row xq / xmeta in shared memory. */
template <int T, bool V16>
static __device__ __forceinline__ void xt_pair_dots(const uint8_t *g, const uint8_t *u, int n_chunks,
                                                    const int8_t *xq, const int32_t *xmeta, float *acc, float *acc2)
{
    const int lane = threadIdx.x % GPU_WARP;
    for (int c = lane; c < n_chunks; c += 2 * GPU_WARP) {
        const bool two = c + GPU_WARP < n_chunks;
        const int c2 = two ? c + GPU_WARP : c;
#pragma unroll 1
        for (int k = 0; k < 2; k++) {
            const int ck = k == 0 ? c : c2;
            const gq_act x = gq_act_chunk(xq, (const int4 *)xmeta, ck);
            const float d = k == 0 || two ? __int_as_float(x.m.x) : 0.0f;
            gq_chunk ch;
            mv_decode<T, V16>(g, ck, &ch);
            *acc += d * gq_chunk_dot<T>(&ch, x.a, x.m.y, x.m.z);
            mv_decode<T, V16>(u, ck, &ch);
            *acc2 += d * gq_chunk_dot<T>(&ch, x.a, x.m.y, x.m.z);
        }
    }
}

/* A warp's MVS_ROWS down rows from r0, mvs_dots' terms in its order: the
 * spread form's items shuffled to the chunk loop's lanes, or the chunk
 * loop. */
template <int T, bool V16>
static __device__ __forceinline__ void xt_rows_dots(const uint8_t *w, const gk_mat &wm, int64_t r0, const int8_t *xq,
                                                    const int4 *xm, float *acc)
{
    const int lane = threadIdx.x % GPU_WARP, n_chunks = (int)(wm.n_cols / 32);
    if (T != GQ_Q4_K && n_chunks > 0 && MVS_ROWS * n_chunks <= MVS_SPREAD * GPU_WARP) {
        const int n_items = MVS_ROWS * n_chunks;
        float term[MVS_SPREAD];
#pragma unroll
        for (int s = 0; s < MVS_SPREAD; s++) {
            const int i = min(s * GPU_WARP + lane, n_items - 1), k = i / n_chunks, cs = i - k * n_chunks;
            term[s] = 0.0f;
            if (s * GPU_WARP < n_items) {
                gq_chunk ch;
                mv_decode<T, V16>(mvs_row(w, wm, r0, k), cs, &ch);
                mvs_dot<T>(&ch, xq, xm, cs, &term[s]);
            }
        }
        mvs_spread_to_rows(term, n_chunks, acc);
        return;
    }
#pragma unroll
    for (int k = 0; k < MVS_ROWS; k++)
        acc[k] = 0.0f;
    for (int c = lane; c < n_chunks; c += GPU_WARP) {
#pragma unroll
        for (int k = 0; k < MVS_ROWS; k++) {
            gq_chunk ch;
            mv_decode<T, V16>(mvs_row(w, wm, r0, k), c, &ch);
            mvs_dot<T>(&ch, xq, xm, c, &acc[k]);
        }
    }
}

/* --- the phases of a block */

/* A warp's gate/up row pairs (pair i of the block: warp i % XT_WARPS),
 * each h = silu(gate . x) * (up . x) as mv_store writes it, into the
 * route's hidden row in global memory (L2). */
template <int TG>
static __device__ void xt_gate_up(const xt_job &j, const xt_layout &L, const uint8_t *sm, xt_bars &b)
{
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    const int n_chunks = (int)(j.gate.n_cols / 32);
    const int8_t *xq = (const int8_t *)(sm + L.xq);
    const int32_t *xmeta = (const int32_t *)(sm + L.xm);
    const bool v16 = mv_rows_v16(sm + L.gate, j.gate.row_bytes) && mv_rows_v16(sm + L.up, j.up.row_bytes);
    if (j.ready.words == NULL) /* else xt_norm_row staged it */
        cla_wait(&b.x);
    for (int i = warp; i < L.pairs; i += XT_WARPS) {
        cla_wait(&b.gu[i / XT_PIECE]);
        const uint8_t *g = sm + L.gate + (size_t)i * j.gate.row_bytes, *u = sm + L.up + (size_t)i * j.up.row_bytes;
        float acc = 0.0f, acc2 = 0.0f;
        if (TG == GQ_Q4_K && v16)
            xt_pair_dots<TG, TG == GQ_Q4_K>(g, u, n_chunks, xq, xmeta, &acc, &acc2);
        else
            xt_pair_dots<TG, false>(g, u, n_chunks, xq, xmeta, &acc, &acc2);
        const float h = silu(warp_sum(acc)) * warp_sum(acc2);
        if (lane == 0)
            __stcg(j.h + (int64_t)blockIdx.y * j.gate.n_rows + (int64_t)blockIdx.x * L.pairs + i, h);
    }
}

/* Every block of the route has stored its hidden values: a barrier over
 * the route's n = gridDim.x blocks (all resident: gk_experts_fits) on a
 * count that only grows, n a launch, so that no word needs a reset: a
 * block's arrival old waits for (old / n + 1) * n.  Each n has its own
 * set of counts, which therefore stay multiples of n between launches (n
 * is a power of two, so also across the 32-bit wrap).  A sense-reversing
 * barrier (the last to arrive zeroes the count and moves a generation on)
 * puts one more L2 round trip on the path: tg128 +1.9% over main with it,
 * +2.6-3.0% without, on the H200 (docs/PERFORMANCE.md, session 13).  Then
 * the hidden row, read back through L2, staged in 8-bit form: each warp
 * loads a chunk and quantises it at once (q8_warp_store, mv_stage_row's
 * rule, so the same bits), one block barrier after; the row first stored
 * as floats, a barrier, then mv_stage_row cost tg128 ~2% (551-555 against
 * 541-542 t/s on the H200, docs/PERFORMANCE.md, "CUDA decode, session 16"). */
static __device__ void xt_gather_hidden(const xt_job &j, const xt_layout &L, uint8_t *sm)
{
    __syncthreads(); /* the block's values stored */
    GK_STAMP_IF(blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_XT_GATEUP);
    if (threadIdx.x == 0) {
        const unsigned n = gridDim.x;
        unsigned int *count = j.sync + (__ffs((int)n) - 1) * GK_EXPERTS_MAX_ROUTES + blockIdx.y;
        /* the block's values released by the count, the others' acquired
         * by the polls (no fence.sc: __threadfence()) */
        const unsigned target = (gpu_atom_add_acq_rel_u32(count, 1u) / n + 1) * n;
        while ((int)(gpu_ld_acquire_u32(count) - target) < 0)
            ;
    }
    __syncthreads();
    const float *src = j.h + (int64_t)blockIdx.y * j.gate.n_rows;
    int8_t *q = (int8_t *)(sm + L.stage);
    int32_t *meta = (int32_t *)(q + j.gate.n_rows);
    for (int64_t c = threadIdx.x / GPU_WARP; c * 32 < j.gate.n_rows; c += XT_WARPS)
        q8_warp_store(__ldcg(src + c * 32 + threadIdx.x % GPU_WARP), q + c * 32, meta + 4 * c);
    __syncthreads();
}

/* A warp's down rows (MVS_ROWS at a time) against the staged hidden row,
 * stored as k_matvec_staged stores them: output row = the route's, rows
 * offset by the block's slice. */
template <int TD, bool V16>
static __device__ __forceinline__ void xt_down(const xt_job &j, const xt_layout &L, const uint8_t *sm)
{
    gk_mat dm = j.down;
    dm.data = sm + L.down;
    dm.n_rows = L.rows;
    const int8_t *xq = (const int8_t *)(sm + L.stage);
    const int4 *xm = (const int4 *)(sm + L.stage + (size_t)j.gate.n_rows);
    const int64_t base = (int64_t)blockIdx.x * L.rows;
    float *y = j.out.y + (int64_t)blockIdx.y * j.out.y_stride + base;
    for (int64_t r0 = (int64_t)(threadIdx.x / GPU_WARP) * MVS_ROWS; r0 < L.rows; r0 += XT_WARPS * MVS_ROWS) {
        float acc[MVS_ROWS];
        xt_rows_dots<TD, V16>(dm.data, dm, r0, xq, xm, acc);
#pragma unroll
        for (int k = 0; k < MVS_ROWS; k++) {
            const bool live = r0 + k < L.rows;
            const float v = warp_sum(acc[k]) + (j.out.bias != NULL && live ? j.out.bias[base + r0 + k] : 0.0f);
            if (threadIdx.x % GPU_WARP != 0 || !live)
                continue;
            y[r0 + k] = j.out.accumulate ? y[r0 + k] + v : v;
        }
    }
}

/* --- routes handed over by their words (gk_route_word) */

/* A thread's values of the token's row for the block's own 8-bit form.
 * Warp 0 asks for the block's weights (its thread 0 issues every bulk
 * copy), so the other warps norm the row: chunk c is warp 1 + c %
 * XT_NORM_WARPS's (the row has at most GK_ROUTER_NORM_MAX values, as the
 * attention output launch that hands it over), and they meet at a named
 * barrier without warp 0, which waits for them only before its own dots
 * (a block barrier held every warp's dots until the copies were issued:
 * tg128 478 -> 487 t/s on the H200). */
enum {
    XT_NORM_WARPS = XT_WARPS - 1,
    XT_NORM_CHUNKS = (GK_ROUTER_NORM_MAX / 32 + XT_NORM_WARPS - 1) / XT_NORM_WARPS,
    XT_BAR_NORMERS = 1, /* the norming warps meet */
    XT_BAR_NORMED = 2,  /* ... and let warp 0 on */
};
struct xt_xrow {
    float x[XT_NORM_CHUNKS], gain[XT_NORM_CHUNKS], scale;
};

static __device__ inline int64_t xt_xrow_at(int k)
{
    return (int64_t)(threadIdx.x / GPU_WARP - 1 + k * XT_NORM_WARPS) * 32 + threadIdx.x % GPU_WARP;
}

static __device__ inline void xt_named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

static __device__ inline void xt_named_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* The gains (weights: asked for before the routes exist) */
static __device__ void xt_xrow_gains(const xt_job &j, xt_xrow &r)
{
    if (threadIdx.x < GPU_WARP)
        return;
#pragma unroll
    for (int k = 0; k < XT_NORM_CHUNKS; k++)
        r.gain[k] = j.gain != NULL && xt_xrow_at(k) < j.x.n ? j.gain[xt_xrow_at(k)] : 1.0f;
}

/* ... and x, asked for as soon as the route is known and before the
 * weights' bulk copies are issued: behind those 21 MB an L2 round trip
 * takes microseconds (tg128 461 -> 478 t/s).  Written in this launch's
 * lifetime, so through L2 (__ldcg): an SM's L1 may hold older lines.  The
 * scale came in the route's word. */
static __device__ void xt_xrow_load(const xt_job &j, float scale, xt_xrow &r)
{
    if (threadIdx.x < GPU_WARP)
        return;
    r.scale = scale;
#pragma unroll
    for (int k = 0; k < XT_NORM_CHUNKS; k++)
        r.x[k] = xt_xrow_at(k) < j.x.n ? __ldcg(j.x_raw + xt_xrow_at(k)) : 0.0f;
}

/* The token's normed row in 8-bit form into shared memory: the attention
 * output launch's aor_chunk_normed expression and quantisation, so the
 * same bits as the row it writes without a hand-off. */
static __device__ void xt_norm_row(const xt_job &j, const xt_layout &L, const xt_xrow &r, uint8_t *sm)
{
    if (threadIdx.x < GPU_WARP) {
        xt_named_sync(XT_BAR_NORMED, XT_THREADS);
        return;
    }
    /* the warp's chunks quantised together (their shuffles interleaved) */
    const int64_t c0 = xt_xrow_at(0) - threadIdx.x % GPU_WARP, stride = (int64_t)XT_NORM_WARPS * 32;
    const int n_live = c0 < j.x.n ? (int)((j.x.n - c0 + stride - 1) / stride) : 0;
    float y[XT_NORM_CHUNKS];
#pragma unroll
    for (int k = 0; k < XT_NORM_CHUNKS; k++)
        y[k] = r.x[k] * r.scale * r.gain[k];
    if (n_live > 0)
        q8_warp_store_k<XT_NORM_CHUNKS>(y, n_live, (int8_t *)(sm + L.xq), (int32_t *)(sm + L.xm), c0, stride);
    xt_named_sync(XT_BAR_NORMERS, XT_THREADS - GPU_WARP);
    xt_named_arrive(XT_BAR_NORMED, XT_THREADS);
}

/* Route blockIdx.y's word: thread 0 polls it (acquire) until it carries
 * this step's seq (the router launch is running: this launch's blocks
 * start at its trigger, so the word comes), the barrier gives the block
 * what the word publishes.  The expert and the norm's scale ride in the
 * word itself, so no load follows the poll.  The bulk copies wait for the
 * barrier: asked for before the other warps' loads of x, they put those
 * loads behind 21 MB (tg128 on the H200 551-555 -> 499 t/s;
 * docs/PERFORMANCE.md, "CUDA decode, session 16"). */
static __device__ unsigned long long xt_await_word(const xt_job &j, unsigned seq)
{
    __shared__ unsigned long long word;
    if (threadIdx.x == 0) {
        unsigned long long w;
        do
            w = gpu_ld_acquire_u64(j.ready.words + blockIdx.y);
        while (!gk_route_word_is(w, seq));
        word = w;
    }
    __syncthreads();
    return word;
}

/* Grid (blocks a route, routes); one block an SM (64 registers x 1024
 * threads).  With route words the blocks start on their word, not on the
 * PDL wait, and wait for the router launch's completion only before they
 * signal their own successor (which then finds both complete). */
template <int TG, int TD> __global__ void __launch_bounds__(XT_THREADS, 1) k_experts(const xt_job j)
{
    __shared__ __align__(8) xt_bars bars;
    extern __shared__ __align__(16) uint8_t xt_smem[];
    const xt_layout L = xt_layout_of(j.gate, j.up, j.down, gridDim.x);
    const bool handed = j.ready.words != NULL;
    gpu_params_warm(j);
    if (threadIdx.x == 0)
        xt_expect_all(j, L, bars);
    xt_xrow xr;
    unsigned seq = 0;
    if (handed) {
        xt_xrow_gains(j, xr);
        seq = j.ready.step->seq; /* copied before the step's first launch */
    }
    __syncthreads();
    if (!handed)
        gpu_pdl_wait();
    const unsigned long long word = handed ? xt_await_word(j, seq) : 0;
    const gk_route rt = handed ? gk_route{0, gk_route_word_expert(word), 0.0f} : j.rows.routes[blockIdx.y];
    if (handed)
        xt_xrow_load(j, gk_route_word_scale(word), xr);
    if (rt.expert < 0) /* a hybrid miss: every block of the route leaves, none counts */
        return;
    GK_STAMP_IF(blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_XT_ROUTE);
    if (threadIdx.x == 0)
        xt_ask(j, L, rt.expert, j.rows.act_by_token ? rt.token : (int64_t)blockIdx.y, xt_smem, bars);
    if (handed)
        xt_norm_row(j, L, xr, xt_smem);
    xt_gate_up<TG>(j, L, xt_smem, bars);
    xt_gather_hidden(j, L, xt_smem);
    GK_STAMP_IF(blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_XT_HIDDEN);
    cla_wait(&bars.down);
    if (TD == GQ_Q4_K && mv_rows_v16(xt_smem + L.down, j.down.row_bytes))
        xt_down<TD, TD == GQ_Q4_K>(j, L, xt_smem);
    else
        xt_down<TD, false>(j, L, xt_smem);
    GK_STAMP_IF(blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_XT_DOWN);
    if (handed)
        gpu_pdl_wait();
    gpu_pdl_trigger();
}

/* --- host side */

/* The dynamic shared memory instance (TG, TD) may take on the current
 * device (the opt-in less its static barriers; the attribute set), asked
 * once per instance and device; -1: it cannot be launched there. */
template <int TG, int TD> static int xt_smem_max(void)
{
    static std::atomic<int> known[XT_DEVICES]; /* 0: not asked yet */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev >= XT_DEVICES) {
        (void)cudaGetLastError();
        return -1;
    }
    if (known[dev].load() == 0) {
        int optin = 0;
        cudaFuncAttributes fa = {};
        bool ok = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
                  cudaFuncGetAttributes(&fa, k_experts<TG, TD>) == cudaSuccess && optin > (int)fa.sharedSizeBytes;
        const int dyn = ok ? optin - (int)fa.sharedSizeBytes : 0;
        ok = ok && cudaFuncSetAttribute(k_experts<TG, TD>, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn) ==
                       cudaSuccess;
        (void)cudaGetLastError(); /* a refusal is an answer, not the next call's error */
        known[dev].store(ok ? dyn : -1);
    }
    return known[dev].load();
}

/* Whether n blocks a route take the shapes: whole slices, whole 16-byte
 * runs for the bulk copies, pieces that fit, shared memory the device
 * gives, and every block of n_routes routes resident at once (the hidden
 * row's barrier waits for the route's other blocks). */
template <int TG, int TD>
static bool xt_blocks_take(const gk_mat *gate, const gk_mat *up, const gk_mat *down, unsigned n, int n_routes)
{
    if (gate->n_rows % n != 0 || down->n_rows % n != 0)
        return false;
    const xt_layout L = xt_layout_of(*gate, *up, *down, n);
    const int smem = xt_smem_max<TG, TD>();
    return L.pairs >= 1 && L.rows >= 1 && L.pairs <= XT_MAX_PAIRS && gate->row_bytes % 16 == 0 &&
           up->row_bytes % 16 == 0 && ((size_t)L.rows * down->row_bytes) % 16 == 0 && smem > 0 &&
           L.total <= (uint32_t)smem && gk_coresident_blocks(k_experts<TG, TD>, XT_THREADS, L.total) >= (int)n * n_routes;
}

static_assert(XT_MAX_BLOCKS == 16, "a set of route counts for 16, 8, 4, 2, 1 blocks (GK_EXPERTS_SYNC_WORDS)");

/* Blocks a route: the most of XT_MAX_BLOCKS, 8, 4, 2, 1 that take the
 * shapes (0: none does).  A host query; a captured graph asks it once. */
template <int TG, int TD>
static unsigned xt_blocks(const gk_mat *gate, const gk_mat *up, const gk_mat *down, int n_routes)
{
    for (unsigned n = XT_MAX_BLOCKS; n >= 1; n /= 2)
        if (xt_blocks_take<TG, TD>(gate, up, down, n, n_routes))
            return n;
    return 0;
}

static unsigned xt_blocks_of(const gk_mat *gate, const gk_mat *up, const gk_mat *down, int n_routes)
{
#define XT_BLOCKS_(A, B)                                                                                         \
    if (gate->type == A && down->type == B)                                                                      \
        return xt_blocks<A, B>(gate, up, down, n_routes);
    XT_PAIRS(XT_BLOCKS_)
#undef XT_BLOCKS_
    return 0;
}

static bool xt_mats_take(const gk_mat *gate, const gk_mat *up, const gk_mat *down)
{
    const gk_mat *m[3] = {gate, up, down};
    for (int k = 0; k < 3; k++)
        if (m[k]->expert_data != NULL || (uintptr_t)m[k]->data % 16 != 0 || m[k]->mat_bytes % 16 != 0)
            return false;
    return gate->type == up->type && gate->n_rows == up->n_rows && gate->n_cols == up->n_cols &&
           gate->row_bytes == up->row_bytes && down->n_cols == gate->n_rows && gate->n_rows % 32 == 0 &&
           gate->n_cols % 32 == 0;
}

/* Blocks a route of the launch for these matrices and routes, 0 where it
 * does not take them. */
static unsigned xt_launch_blocks(const gk_mat *gate, const gk_mat *up, const gk_mat *down, int n_routes)
{
#if defined(HYDRA_HIP)
    (void)gate, (void)up, (void)down, (void)n_routes;
    return 0;
#else
    if (!gpu_pdl_supported() || n_routes < 1 || n_routes > GK_EXPERTS_MAX_ROUTES || !xt_mats_take(gate, up, down))
        return 0;
    return xt_blocks_of(gate, up, down, n_routes);
#endif
}

extern "C" bool gk_experts_fits(const gk_mat *gate, const gk_mat *up, const gk_mat *down, int n_routes)
{
    return xt_launch_blocks(gate, up, down, n_routes) != 0;
}

extern "C" int gk_experts(gpuStream_t s, const gk_experts_job *e)
{
#if defined(HYDRA_HIP)
    (void)s, (void)e;
    return (int)gpuErrorInvalidValue;
#else
    const gk_rows *rows = &e->rows;
    const unsigned n = xt_launch_blocks(&e->gate, &e->up, &e->down, rows->n_routes);
    const bool x_in = e->ready.words != NULL ? e->ready.step != NULL && e->x_raw != NULL &&
                                                   e->x.n <= GK_ROUTER_NORM_MAX
                                             : e->x.q != NULL && e->x.meta != NULL;
    if (n == 0 || rows->routes == NULL || e->h == NULL || e->sync == NULL || e->x.n != e->gate.n_cols || !x_in)
        return (int)gpuErrorInvalidValue;
    const xt_job j = {e->gate, e->up, e->down, e->x, e->rows, e->out, e->h, e->sync, e->ready, e->x_raw, e->gain};
    const size_t smem = xt_layout_of(e->gate, e->up, e->down, n).total;
    const dim3 grid(n, (unsigned)rows->n_routes);
#define XT_LAUNCH_(A, B)                                                                                         \
    if (e->gate.type == A && e->down.type == B)                                                                  \
        return gk_launch(k_experts<A, B>, grid, XT_THREADS, smem, s, j);
    XT_PAIRS(XT_LAUNCH_)
#undef XT_LAUNCH_
    return (int)gpuErrorInvalidValue;
#endif
}
