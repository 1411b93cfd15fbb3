/*
 * experts.cu — one decode token's routed experts in one launch: every
 * route's gate/up rows with SwiGLU, then its down rows, the same bits as
 * the two launches it replaces (matvec.cu's GLU k_matvec_q, then
 * k_matvec_staged over the hidden row), because it runs their row dots
 * (matvec_rows.cuh) on the same terms in the same order.
 *
 * Why one launch, and why this shape.  The two launches cost a decode
 * layer 8.1 + 6.2 us on the H200 for ~21 MB of weights that the copy probe
 * moves in 5 us (docs/PERFORMANCE.md, "what each launch costs in the
 * replayed step").  Earlier single launches lost because their blocks held
 * too few loads in flight (a persistent grid, session 7) or paid a global
 * fence and count per work item (session 12).  Here each route is a
 * thread-block cluster, each block owns a 1/n slice of the hidden row and
 * a 1/n slice of the output rows, and asks for all of its weights at once
 * by bulk copies into shared memory (cp.async.bulk, compute capability
 * 9.0: one instruction a run of rows, no registers held while they are in
 * flight), so the SM's whole share of the layer's bytes is in flight from
 * the start.  The hidden values go to the cluster's other blocks by
 * st.async (cluster_async.cuh), and the down rows wait only for their own
 * cluster: no global fence, no counter.
 *
 * A block: before the PDL wait, its mbarriers (one per piece of
 * XT_WARPS gate/up row pairs, one for the down rows, one for the hidden
 * row); after it, the route, then thread 0's bulk copies (gate/up pieces
 * first, the down rows last); each warp's gate/up pairs as their piece
 * lands; the hidden row staged in 8-bit form (mv_stage_row, the staged
 * launch's rule); the down rows, MVS_ROWS a warp at a time.
 */
#include "common.cuh"
#include "cluster_async.cuh"
#include "matvec_rows.cuh"
#include "tail.cuh"

#include <atomic>
#include <stdio.h>
#include <stdlib.h>

/* The type pairs (gate/up, down) of the launch: Q4_K_M's and Q5_K_M's
 * experts, and the uniform Q6_K and Q8_0 files. */
#define XT_PAIRS(X)                                                                                              \
    X(GQ_Q4_K, GQ_Q4_K) X(GQ_Q4_K, GQ_Q6_K) X(GQ_Q5_K, GQ_Q5_K) X(GQ_Q5_K, GQ_Q6_K) X(GQ_Q6_K, GQ_Q6_K)         \
        X(GQ_Q8_0, GQ_Q8_0)

#ifndef XT_PIECE_PAIRS
#define XT_PIECE_PAIRS 4
#endif
enum {
    XT_WARPS = 16,
    XT_THREADS = XT_WARPS * GPU_WARP,
    XT_PIECE = XT_PIECE_PAIRS,       /* gate/up row pairs a bulk piece */
    XT_PIECES = 64 / XT_PIECE_PAIRS, /* a block takes at most 64 pairs */
    XT_BIG = 16,    /* blocks a cluster where the device takes it (a non-portable size) */
    XT_SMALL = 8,   /* else */
    XT_DEVICES = 16,
};

struct xt_job {
    gk_mat gate, up, down;
    gk_act x;
    gk_rows rows;
    gk_out out;
    int mode;
    float *h_global;      /* GLOB: the routes' hidden rows */
    unsigned int *count;  /* GLOB: a counter a route, only growing */
};

/* A block's shared memory, in bytes from the start of the dynamic
 * window, for clusters of n blocks: its gate rows, its up rows, its down
 * rows, the route's hidden row (floats), and its 8-bit form with the
 * chunks' meta (mv_stage_row's layout).  Every offset is 16-byte aligned
 * (the bulk copies' rule; gk_experts_fits checks the row sizes). */
struct xt_layout {
    int pairs, rows; /* gate/up row pairs and down rows of a block */
    size_t gate, up, down, h, stage, xq, xm, total;
};

static __host__ __device__ inline size_t xt_align16(size_t v)
{
    return (v + 15) & ~(size_t)15;
}

static __host__ __device__ inline xt_layout xt_layout_of(const gk_mat &gate, const gk_mat &up, const gk_mat &down,
                                                         unsigned n)
{
    xt_layout L;
    L.pairs = (int)(gate.n_rows / n);
    L.rows = (int)(down.n_rows / n);
    L.gate = 0;
    L.up = L.gate + (size_t)L.pairs * gate.row_bytes;
    L.down = L.up + (size_t)L.pairs * up.row_bytes;
    L.h = xt_align16(L.down + (size_t)L.rows * down.row_bytes);
    L.stage = L.h + sizeof(float) * (size_t)gate.n_rows;
    L.xq = xt_align16(L.stage + (size_t)gate.n_rows + sizeof(int4) * (size_t)(gate.n_rows / 32));
    L.xm = xt_align16(L.xq + (size_t)gate.n_cols);
    L.total = L.xm + sizeof(int4) * (size_t)(gate.n_cols / 32);
    return L;
}

/* Row pairs in gate/up piece p. */
static __device__ inline int xt_piece_pairs(const xt_layout &L, int p)
{
    const int left = L.pairs - p * XT_PIECE;
    return left < XT_PIECE ? left : XT_PIECE;
}

/* bytes from global src into this block's shared dst, counted on bar. */
static __device__ inline void xt_bulk(void *dst, const void *src, size_t bytes, uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     cla_smem(dst)),
                 "l"(src), "r"((uint32_t)bytes), "r"(cla_smem(bar))
                 : "memory");
#else
    (void)dst, (void)src, (void)bytes, (void)bar;
#endif
}

/* Thread 0: the block's weights of expert e, gate/up piece by piece, then
 * the down rows. */
static __device__ void xt_ask(const xt_job &j, const xt_layout &L, int e, unsigned rank, uint8_t *sm,
                              uint64_t *bar_gu, uint64_t *bar_down, uint64_t *bar_x, int64_t act)
{
    xt_bulk(sm + L.xq, j.x.q + act * j.x.n, (size_t)j.x.n, bar_x);
    xt_bulk(sm + L.xm, j.x.meta + act * (j.x.n / 32) * 4, sizeof(int4) * (size_t)(j.x.n / 32), bar_x);
    const uint8_t *g = expert_matrix(j.gate, e) + (size_t)rank * L.pairs * j.gate.row_bytes;
    const uint8_t *u = expert_matrix(j.up, e) + (size_t)rank * L.pairs * j.up.row_bytes;
    const int n_pieces = (L.pairs + XT_PIECE - 1) / XT_PIECE;
    for (int p = 0; p < n_pieces; p++) {
        const size_t first = (size_t)p * XT_PIECE, n = (size_t)xt_piece_pairs(L, p);
        xt_bulk(sm + L.gate + first * j.gate.row_bytes, g + first * j.gate.row_bytes, n * j.gate.row_bytes,
                &bar_gu[p]);
        xt_bulk(sm + L.up + first * j.up.row_bytes, u + first * j.up.row_bytes, n * j.up.row_bytes, &bar_gu[p]);
    }
    const uint8_t *d = expert_matrix(j.down, e) + (size_t)rank * L.rows * j.down.row_bytes;
    xt_bulk(sm + L.down, d, (size_t)L.rows * j.down.row_bytes, bar_down);
}

/* A warp's gate/up row pairs (pair i of the block: warp i % XT_WARPS),
 * each h = silu(gate . x) * (up . x) as mv_store writes it, into this
 * block's hidden row and by st.async into the cluster's others (each
 * block's bar_h counts the values of every block but its own). */
template <int TG, bool GLOB>
static __device__ void xt_gate_up(const xt_job &j, const xt_layout &L, const mv_place &p, unsigned rank,
                                  unsigned n_blocks, uint8_t *sm, uint64_t *bar_gu, uint64_t *bar_h, uint64_t *bar_x)
{
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    const int n_chunks = (int)(j.gate.n_cols / 32);
    float *hf = (float *)(sm + L.h);
    gk_act xs = j.x;
    if (!(j.mode & 8)) {
        xs.q = (const int8_t *)(sm + L.xq);
        xs.meta = (const int32_t *)(sm + L.xm);
        cla_wait(bar_x);
    }
    for (int i = warp; i < L.pairs; i += XT_WARPS) {
        if (!(j.mode & 4))
            cla_wait(&bar_gu[i / XT_PIECE]);
        const uint8_t *g = sm + L.gate + (size_t)i * j.gate.row_bytes, *u = sm + L.up + (size_t)i * j.up.row_bytes;
        float acc = 0.0f, acc2 = 0.0f;
        if (j.mode & 1) {
        } else if (TG == GQ_Q4_K && mv_rows_v16(g, j.gate.row_bytes) && mv_rows_v16(u, j.up.row_bytes))
            mv_row_dots<TG, true, 1, TG == GQ_Q4_K>(g, u, n_chunks, xs, p, &acc, &acc2);
        else
            mv_row_dots<TG, true, 1, false>(g, u, n_chunks, xs, p, &acc, &acc2);
        const float h = silu(warp_sum(acc)) * warp_sum(acc2);
        const int at = (int)rank * L.pairs + i;
        if (GLOB) {
            if (lane == 0)
                __stcg(j.h_global + (int64_t)blockIdx.y * j.gate.n_rows + at, h);
        } else if (lane == (int)rank)
            hf[at] = h;
        else if (lane < (int)n_blocks) /* lane b sends to block b (clusters of at most 32 blocks) */
            cla_send(cla_in_block(&hf[at], (unsigned)lane), h, cla_in_block(bar_h, (unsigned)lane));
    }
}

/* MVS_ROWS down rows from r0 of a warp's dots (acc), stored as
 * k_matvec_staged stores them: output row = the route's, rows offset by
 * the block's slice. */
static __device__ __forceinline__ void xt_store(const xt_job &j, const xt_layout &L, unsigned rank, int64_t r0,
                                                const float *acc)
{
    const int64_t base = (int64_t)rank * L.rows;
    float *y = j.out.y + (int64_t)blockIdx.y * j.out.y_stride + base;
#pragma unroll
    for (int k = 0; k < MVS_ROWS; k++) {
        const bool live = r0 + k < L.rows;
        const float v = warp_sum(acc[k]) + (j.out.bias != NULL && live ? j.out.bias[base + r0 + k] : 0.0f);
        if (threadIdx.x % GPU_WARP != 0 || !live)
            continue;
        y[r0 + k] = j.out.accumulate ? y[r0 + k] + v : v;
    }
}

/* A warp's down rows (MVS_ROWS at a time, from warp * MVS_ROWS) against
 * the staged hidden row; the first MVS_ROWS from `held` where they were
 * decoded ahead (ahead). */
template <int TD, bool V16>
static __device__ __forceinline__ void xt_down(const xt_job &j, const xt_layout &L, unsigned rank, const uint8_t *sm,
                                               const mvs_held &held, bool ahead)
{
    gk_mat dm = j.down;
    dm.data = sm + L.down;
    dm.n_rows = L.rows;
    const int n_chunks = (int)(dm.n_cols / 32);
    const int8_t *xq = (const int8_t *)(sm + L.stage);
    const int4 *xm = (const int4 *)(sm + L.stage + (size_t)j.gate.n_rows);
    int64_t r0 = (int64_t)(threadIdx.x / GPU_WARP) * MVS_ROWS;
    if (r0 >= L.rows)
        return;
    float acc[MVS_ROWS] = {0, 0, 0, 0};
    if (j.mode & 2) {
    } else if (ahead)
        mvs_dots_held<TD>(held, n_chunks, xq, xm, acc);
    else
        mvs_dots<TD, V16>(dm.data, dm, r0, xq, xm, acc);
    xt_store(j, L, rank, r0, acc);
    for (r0 += XT_WARPS * MVS_ROWS; r0 < L.rows; r0 += XT_WARPS * MVS_ROWS) {
        if (!(j.mode & 2))
            mvs_dots<TD, V16>(dm.data, dm, r0, xq, xm, acc);
        xt_store(j, L, rank, r0, acc);
    }
}

/* GLOB: the route's blocks exchange their hidden values through global
 * memory and a counter (no cluster). */
static __device__ void xt_exchange_global(const xt_job &j, const xt_layout &L, unsigned n_blocks, uint8_t *sm)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned int *c = j.count + blockIdx.y;
        const unsigned old = atomicAdd(c, 1u), target = (old / n_blocks + 1) * n_blocks;
        while ((int)(*(volatile unsigned int *)c - target) < 0)
            ;
        __threadfence();
    }
    __syncthreads();
    float *hf = (float *)(sm + L.h);
    const float *src = j.h_global + (int64_t)blockIdx.y * j.gate.n_rows;
    for (int64_t i = threadIdx.x; i < j.gate.n_rows; i += blockDim.x)
        hf[i] = __ldcg(src + i);
    __syncthreads();
}

/* After a block's gate/up pairs: its first down rows decoded ahead once
 * they have landed, the route's hidden row gathered and staged, the down
 * rows. */
template <int TD, bool V16, bool GLOB>
static __device__ __forceinline__ void xt_finish(const xt_job &j, const xt_layout &L, unsigned rank, unsigned n_blocks, uint8_t *sm,
                                 uint64_t *bar_down, uint64_t *bar_h)
{
    gk_mat dm = j.down;
    dm.data = sm + L.down;
    dm.n_rows = L.rows;
    const bool ahead = false;
    if (!(j.mode & 4))
        cla_wait(bar_down);
    mvs_held held;
    if (GLOB) {
        xt_exchange_global(j, L, n_blocks, sm);
    } else {
        cla_wait(bar_h);
        __syncthreads(); /* this block's own values, written directly */
    }
    mv_stage_row((const float *)(sm + L.h), j.gate.n_rows, (int4 *)(sm + L.stage));
    __syncthreads();
    xt_down<TD, V16>(j, L, rank, sm, held, ahead);
}

template <int TG, int TD, bool GLOB> __global__ void __launch_bounds__(XT_THREADS, 1) k_experts(const xt_job j)
{
    __shared__ __align__(8) uint64_t bar_gu[XT_PIECES], bar_down, bar_h, bar_x;
    extern __shared__ __align__(16) uint8_t xt_smem[];
    const unsigned rank = GLOB ? blockIdx.x : cl_rank(), n_blocks = GLOB ? gridDim.x : cl_size();
    const xt_layout L = xt_layout_of(j.gate, j.up, j.down, n_blocks);
    if (threadIdx.x == 0) {
        const int n_pieces = (L.pairs + XT_PIECE - 1) / XT_PIECE;
        for (int p = 0; p < n_pieces; p++)
            cla_expect(&bar_gu[p], (uint32_t)((size_t)xt_piece_pairs(L, p) * (j.gate.row_bytes + j.up.row_bytes)));
        cla_expect(&bar_down, (uint32_t)((size_t)L.rows * j.down.row_bytes));
        cla_expect(&bar_h, (uint32_t)(sizeof(float) * (size_t)(j.gate.n_rows - L.pairs)));
        cla_expect(&bar_x, (uint32_t)(j.gate.n_cols + sizeof(int4) * (size_t)(j.gate.n_cols / 32)));
    }
    if (GLOB)
        __syncthreads();
    else
        cla_cluster_started(); /* every mbarrier initialised before any block sends; overlaps the previous launch */
    gpu_pdl_wait();
    const gk_route rt = j.rows.routes[blockIdx.y];
    if (rt.expert < 0) /* a hybrid miss: the whole cluster leaves, nothing was sent */
        return;
    if (threadIdx.x == 0 && !(j.mode & 4))
        xt_ask(j, L, rt.expert, rank, xt_smem, bar_gu, &bar_down, &bar_x,
               j.rows.act_by_token ? rt.token : (int64_t)blockIdx.y);
    mv_place p = {};
    p.act0 = j.mode & 8 ? (j.rows.act_by_token ? rt.token : (int64_t)blockIdx.y) : 0;
    p.out0 = blockIdx.y;
    p.n_tok = 1;
    xt_gate_up<TG, GLOB>(j, L, p, rank, n_blocks, xt_smem, bar_gu, &bar_h, &bar_x);
    if (TD == GQ_Q4_K && mv_rows_v16(xt_smem + L.down, j.down.row_bytes))
        xt_finish<TD, TD == GQ_Q4_K, GLOB>(j, L, rank, n_blocks, xt_smem, &bar_down, &bar_h);
    else
        xt_finish<TD, false, GLOB>(j, L, rank, n_blocks, xt_smem, &bar_down, &bar_h);
    gpu_pdl_trigger();
}

/* --- host side */

/* What the current device holds of instance (TG, TD): its opt-in shared
 * memory per block (after the attributes are set) and whether clusters of
 * XT_BIG may be launched; asked once per instance and device. */
struct xt_device {
    int optin;  /* 0: not asked yet; -1: the instance cannot be launched here */
    bool big;
};

template <int TG, int TD> static xt_device xt_device_of(void)
{
    static std::atomic<int> optin[XT_DEVICES];
    static std::atomic<bool> big[XT_DEVICES];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev >= XT_DEVICES) {
        (void)cudaGetLastError();
        return {-1, false};
    }
    if (optin[dev].load() == 0) {
        int bytes = 0;
        cudaFuncAttributes fa = {};
        bool ok = cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
                  cudaFuncGetAttributes(&fa, k_experts<TG, TD, false>) == cudaSuccess &&
                  bytes > (int)fa.sharedSizeBytes;
        const int dyn = ok ? bytes - (int)fa.sharedSizeBytes : 0; /* the opt-in less the static mbarriers */
        ok = ok && cudaFuncSetAttribute(k_experts<TG, TD, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn) ==
                       cudaSuccess;
        const bool b = ok && cudaFuncSetAttribute(k_experts<TG, TD, false>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                                  1) == cudaSuccess;
        (void)cudaGetLastError(); /* a refusal is an answer, not the next call's error */
        if (ok) {
            (void)cudaFuncSetAttribute(k_experts<TG, TD, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn);
            (void)cudaGetLastError();
        }
        big[dev].store(b);
        optin[dev].store(ok ? dyn : -1);
    }
    return {optin[dev].load(), big[dev].load()};
}

/* The clusters of n blocks with smem bytes each that the device holds at
 * once (0: none, or the runtime cannot say). */
template <int TG, int TD> static int xt_clusters_fit(unsigned n, size_t smem)
{
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = n;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(n);
    cfg.blockDim = dim3(XT_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, k_experts<TG, TD, false>, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return fit;
}

/* Whether clusters of n blocks take the shapes: whole slices, whole
 * 16-byte runs for the bulk copies, pieces that fit, shared memory the
 * device gives. */
static bool xt_shapes_take(const gk_mat *gate, const gk_mat *up, const gk_mat *down, unsigned n, int optin)
{
    if (gate->n_rows % n != 0 || down->n_rows % n != 0)
        return false;
    const xt_layout L = xt_layout_of(*gate, *up, *down, n);
    return L.pairs >= 1 && L.rows >= 1 && L.pairs <= XT_PIECES * XT_PIECE && gate->row_bytes % 16 == 0 &&
           up->row_bytes % 16 == 0 && ((size_t)L.rows * down->row_bytes) % 16 == 0 && L.total <= (size_t)optin;
}

/* The cluster size for n_routes routes of these shapes on the current
 * device (0: the launch does not take them): XT_BIG where every route's
 * cluster is resident at once, else XT_SMALL where they are.  A host
 * query (no synchronisation); a captured graph asks it once. */
template <int TG, int TD>
static unsigned xt_cluster_size(const gk_mat *gate, const gk_mat *up, const gk_mat *down, int n_routes)
{
    const xt_device d = xt_device_of<TG, TD>();
    if (d.optin <= 0)
        return 0;
    static const unsigned sizes[2] = {XT_BIG, XT_SMALL};
    static bool said = false;
    if (getenv("HYDRA_XT_DEBUG") != NULL && !said) {
        said = true;
        fprintf(stderr, "xt: optin %d big %d\n", d.optin, (int)d.big);
        const unsigned cs[5] = {16, 14, 12, 8, 4};
        const size_t kb[6] = {16, 64, 112, 170, 196, 224};
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 6; b++)
                fprintf(stderr, "xt: cluster %u smem %zu KB: %d clusters fit\n", cs[a], kb[b],
                        xt_clusters_fit<TG, TD>(cs[a], kb[b] * 1024));
        for (int k = 0; k < 2; k++)
            fprintf(stderr, "xt: size %u takes %d smem %zu\n", sizes[k],
                    (int)xt_shapes_take(gate, up, down, sizes[k], d.optin), xt_layout_of(*gate, *up, *down, sizes[k]).total);
    }
    if ((getenv("HYDRA_XT_FORCE") != NULL || getenv("HYDRA_XT_GLOBAL") != NULL) && d.big &&
        xt_shapes_take(gate, up, down, XT_BIG, d.optin))
        return XT_BIG;
    for (int k = 0; k < 2; k++) {
        const unsigned n = sizes[k];
        if ((n == XT_BIG && !d.big) || !xt_shapes_take(gate, up, down, n, d.optin))
            continue;
        if (xt_clusters_fit<TG, TD>(n, xt_layout_of(*gate, *up, *down, n).total) >= n_routes)
            return n;
    }
    return 0;
}

static unsigned xt_size_of(const gk_mat *gate, const gk_mat *up, const gk_mat *down, int n_routes)
{
#define XT_SIZE_(A, B)                                                                                           \
    if (gate->type == A && down->type == B)                                                                      \
        return xt_cluster_size<A, B>(gate, up, down, n_routes);
    XT_PAIRS(XT_SIZE_)
#undef XT_SIZE_
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

extern "C" bool gk_experts_fits(const gk_mat *gate, const gk_mat *up, const gk_mat *down, int n_routes)
{
#if defined(HYDRA_HIP)
    (void)gate, (void)up, (void)down, (void)n_routes;
    return false;
#else
    return gk_clusters_supported() && n_routes >= 1 && xt_mats_take(gate, up, down) &&
           xt_size_of(gate, up, down, n_routes) != 0;
#endif
}

extern "C" int gk_experts(gpuStream_t s, const gk_mat *gate, const gk_mat *up, const gk_mat *down, const gk_act *x,
                          const gk_rows *rows, const gk_out *out, float *h, unsigned int *count)
{
#if defined(HYDRA_HIP)
    (void)s, (void)gate, (void)up, (void)down, (void)x, (void)rows, (void)out;
    return (int)gpuErrorInvalidValue;
#else
    if (rows->routes == NULL || !gk_experts_fits(gate, up, down, rows->n_routes) || x->n != gate->n_cols ||
        x->q == NULL || x->meta == NULL)
        return (int)gpuErrorInvalidValue;
    const unsigned n = xt_size_of(gate, up, down, rows->n_routes);
    const xt_job j = {*gate, *up, *down, *x, *rows, *out, getenv("HYDRA_XT_MODE") ? atoi(getenv("HYDRA_XT_MODE")) : 0,
                      h, count};
    const bool glob = getenv("HYDRA_XT_GLOBAL") != NULL && h != NULL && count != NULL;
    const size_t smem = xt_layout_of(*gate, *up, *down, n).total;
    const int lim = getenv("HYDRA_XT_ROUTES") ? atoi(getenv("HYDRA_XT_ROUTES")) : rows->n_routes;
    const dim3 grid(n, (unsigned)(lim < rows->n_routes ? lim : rows->n_routes));
#define XT_LAUNCH_(A, B)                                                                                         \
    if (gate->type == A && down->type == B)                                                                      \
        return glob ? gk_launch(k_experts<A, B, true>, grid, XT_THREADS, smem, s, j)                            \
                    : gk_launch_cluster(k_experts<A, B, false>, grid, XT_THREADS, smem, s, n, j);
    XT_PAIRS(XT_LAUNCH_)
#undef XT_LAUNCH_
    return (int)gpuErrorInvalidValue;
#endif
}
