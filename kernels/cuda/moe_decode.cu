/*
 * moe_decode.cu — one decode token's MoE block in one persistent launch.
 * The 4-launch path (router cluster, experts gate/up, experts down, the
 * combine cluster) spends its time in each launch's own latency chain and
 * wave quantisation, not in its bytes (docs/PERFORMANCE.md, "CUDA decode,
 * session 6: the MoE block"); here a grid of co-resident blocks
 * (gk_coresident_blocks) does the same work in phases that meet at grid
 * barriers (grid_sync.cuh):
 *
 *   1. every block norms x itself (the FFN RMSNorm: 2048 values are cheap)
 *      and dots its share of the router rows, a warp per row, the row's
 *      weights loaded before the wait for the previous launch; barrier.
 *   2. every block reads all logits (through L2) and ranks the top n_used
 *      itself, by the tail's rule (tail.cuh), so all agree with no other
 *      barrier (block 0 also writes routes); it asks L2 for its share of
 *      the down matrices, stages the normed row in 8-bit form and computes
 *      its share of the gate/up rows with SwiGLU into h; barrier.
 *   3. every block stages h in 8-bit form and takes a range of output
 *      rows for ALL routes, so it adds their weighted sum into x itself, in
 *      rank order; the last block to finish norms the new x for the next
 *      layer (f32 and the 8-bit form).
 *
 * The same bits as the 4-launch path for the logits, routes, h and x: the
 * router's per-lane 8-value groups (matvec.cu k_router_cluster, its norm
 * over blocks of the same 512 threads), the gate/up chunk loop
 * (mv_dot_row), the down rows' per-chunk terms in k_matvec_staged's order
 * and the combine's sum in rank order (moe.cu).  The next layer's norm
 * sums its squares in another order than the combine cluster (one block
 * over the row), so xn may differ in the last bits.
 */
#include "common.cuh"
#include "grid_sync.cuh"
#include "mma.cuh"
#include "mv_row.cuh"
#include "row_norm.cuh"
#include "tail.cuh"

enum {
    MD_THREADS = 512, MD_WARPS = MD_THREADS / GPU_WARP, MD_MAX_USED = GK_MOE_DECODE_MAX_USED,
    MD_NORM_PER = GK_ROUTER_NORM_MAX / MD_THREADS, /* values of the row per thread, as the router cluster's norm */
    MD_PRE = GK_ROUTER_NORM_MAX / (8 * GPU_WARP),  /* 8-value groups of a lane's router row */
    MD_MAX_STAGE = 40 * 1024,                      /* dynamic shared memory: the 8-bit rows */
    MD_LINE = 128,                                 /* bytes an L2 request covers */
};
static_assert(MD_NORM_PER * MD_THREADS == GK_ROUTER_NORM_MAX, "a row the norm holds in registers");

/* The weight pairs (gate/up type, down type) the kernel takes: the
 * K-quant mixes and Q8_0, so the instances stay few. */
#define MD_PAIRS(X)                                                                                              \
    X(GQ_Q4_K, GQ_Q4_K) X(GQ_Q4_K, GQ_Q6_K) X(GQ_Q5_K, GQ_Q5_K) X(GQ_Q5_K, GQ_Q6_K) X(GQ_Q6_K, GQ_Q6_K)         \
        X(GQ_Q8_0, GQ_Q8_0)

/* Bytes of an 8-bit row of n values in shared memory: q, then meta. */
static inline __host__ __device__ size_t md_stage_bytes(int64_t n)
{
    return (size_t)n + (size_t)n / 32 * sizeof(int4);
}

/* The router row's 8-value group at i of float type t (the router's type
 * is chosen at run time: three float types would triple the instances). */
static inline __device__ void md_float8(uint32_t t, const uint8_t *row, int64_t i, float *w)
{
    if (t == GQ_F32)
        float8<GQ_F32>(row, i, w);
    else if (t == GQ_F16)
        float8<GQ_F16>(row, i, w);
    else
        float8<GQ_BF16>(row, i, w);
}

/* Phase 1: the FFN norm of x into xs (every block), then this block's
 * router rows (warp w of block b: expert w * G + b, then + G * MD_WARPS)
 * into logits.  wpre: the warp's first row, loaded before the wait. */
static inline __device__ void md_router(const gk_moe_block &b, float (*wpre)[8], float *xs, double *red)
{
    const gk_mat &w = b.router;
    const int n_expert = b.gating.n_expert, lane = threadIdx.x % GPU_WARP;
    const int64_t n = w.n_cols;
    {
        float v[MD_NORM_PER], g[MD_NORM_PER];
        const gk_norm_out none = {};
        norm_regs_load<MD_NORM_PER>(b.x, n, b.ffn_gain, v, g);
        const float scale = norm_regs_scale<MD_NORM_PER>(v, n, b.eps, red);
        norm_regs_apply<MD_NORM_PER>(v, g, n, scale, none, false, 0);
#pragma unroll
        for (int k = 0; k < MD_NORM_PER; k++)
            if (threadIdx.x + k * MD_THREADS < n)
                xs[threadIdx.x + k * MD_THREADS] = v[k];
        __syncthreads();
    }
    const int stride = (int)gridDim.x * MD_WARPS;
    for (int e = (int)(threadIdx.x / GPU_WARP) * (int)gridDim.x + (int)blockIdx.x; e < n_expert; e += stride) {
        const uint8_t *row = w.data + (int64_t)e * w.row_bytes;
        float acc = 0.0f, unused = 0.0f;
        const bool first = e < (int)gridDim.x * MD_WARPS;
#pragma unroll
        for (int u = 0; u < MD_PRE; u++) {
            const int64_t i = 8 * (lane + u * GPU_WARP);
            if (i >= n)
                break;
            if (first) { /* two calls, not a pointer to either array: wpre stays in registers */
                dot8<false>(wpre[u], NULL, xs + i, acc, unused);
            } else {
                float wv[8];
                md_float8(w.type, row, i, wv);
                dot8<false>(wv, NULL, xs + i, acc, unused);
            }
        }
        const float v = warp_sum(acc) + 0.0f; /* the router cluster's "+ no bias" */
        if (lane == 0)
            b.logits[e] = v;
    }
}

/* Phase 2's ranking: every block the same routes, from the logits every
 * block wrote (topk_probs through L2, topk_rank_block, topk_write_routes:
 * the router cluster's choice and weights). */
static inline __device__ void md_rank(const gk_moe_block &b, float *prob, int *picked_e, float *picked_p,
                                      gk_route *rt)
{
    const gk_gating &g = b.gating;
    const int lane = threadIdx.x % GPU_WARP;
    if (threadIdx.x < GPU_WARP) {
        float p[TK_PER_LANE];
        topk_probs<true>(g, b.logits, p);
#pragma unroll
        for (int j = 0; j < TK_PER_LANE; j++)
            if (lane + GPU_WARP * j < g.n_expert)
                prob[lane + GPU_WARP * j] = p[j];
    }
    __syncthreads();
    topk_rank_block(prob, GK_TAIL_MAX_EXPERTS, 1, g.n_expert, g.n_used, picked_e, picked_p, MD_MAX_USED);
    __syncthreads();
    topk_write_routes(g, 1, picked_e, picked_p, MD_MAX_USED, rt);
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x < g.n_used)
        b.routes[threadIdx.x] = rt[threadIdx.x];
}

/* The output rows of block `blk` in phase 3: a range of ceil(n / G). */
static inline __device__ void md_rows_of(int64_t n, int64_t *r0, int64_t *r1)
{
    const int64_t per = (n + gridDim.x - 1) / gridDim.x;
    *r0 = min(n, (int64_t)blockIdx.x * per);
    *r1 = min(n, *r0 + per);
}

/* Asks L2 for this block's rows of every route's down matrix, so their
 * DRAM latency passes during gate/up. */
static inline __device__ void md_prefetch_down(const gk_moe_block &b, const gk_route *rt)
{
    int64_t r0, r1;
    md_rows_of(b.down.n_rows, &r0, &r1);
    const int64_t bytes = (r1 - r0) * (int64_t)b.down.row_bytes;
    for (int k = 0; k < b.gating.n_used; k++) {
        const uint8_t *base = expert_matrix(b.down, rt[k].expert) + r0 * (int64_t)b.down.row_bytes;
        for (int64_t off = (int64_t)threadIdx.x * MD_LINE; off < bytes; off += (int64_t)MD_THREADS * MD_LINE)
            prefetch_l2(base + off);
    }
}

/* Phase 2's expert rows: (route k, row r) pairs over every warp of the
 * grid, gate and up rows dotted with the staged normed row, SwiGLU into
 * h (mv_store's formula). */
template <int TG> static inline __device__ void md_gate_up(const gk_moe_block &b, const gk_route *rt, const int4 *stage)
{
    const int64_t ff = b.gate.n_rows, n = b.gate.n_cols;
    const int n_tasks = b.gating.n_used * (int)ff, n_chunks = (int)(n / 32);
    const int stride = (int)gridDim.x * MD_WARPS;
    const int8_t *xq = (const int8_t *)stage;
    const int4 *xm = stage + n / 16;
    for (int task = (int)(threadIdx.x / GPU_WARP) * (int)gridDim.x + (int)blockIdx.x; task < n_tasks;
         task += stride) {
        const int k = task / (int)ff;
        const int64_t r = task % ff;
        const uint8_t *row = expert_matrix(b.gate, rt[k].expert) + r * b.gate.row_bytes;
        const uint8_t *row2 = expert_matrix(b.up, rt[k].expert) + r * b.up.row_bytes;
        float acc = 0.0f, acc2 = 0.0f;
        mv_dot_row<TG, true, 1>(row, row2, n_chunks, 1, xq, xm, n, &acc, &acc2);
        const float v = silu(warp_sum(acc)) * warp_sum(acc2);
        if (threadIdx.x % GPU_WARP == 0)
            b.h[k * ff + r] = v;
    }
}

/* Phase 3: this block's output rows, a warp per row over every route
 * (k_matvec_staged's per-chunk terms and order for each), then the
 * combine's weighted sum in rank order added into x. */
template <int TD> static inline __device__ void md_down(const gk_moe_block &b, const gk_route *rt, const int4 *stage)
{
    const int64_t ff = b.down.n_cols;
    const int n_chunks = (int)(ff / 32), n_used = b.gating.n_used, lane = threadIdx.x % GPU_WARP;
    const int8_t *hq = (const int8_t *)stage;
    const int4 *hm = stage + (int64_t)n_used * ff / 16;
    const uint8_t *mat[MD_MAX_USED];
#pragma unroll
    for (int k = 0; k < MD_MAX_USED; k++)
        mat[k] = expert_matrix(b.down, rt[k < n_used ? k : 0].expert);
    int64_t r0, r1;
    md_rows_of(b.down.n_rows, &r0, &r1);
    for (int64_t r = r0 + threadIdx.x / GPU_WARP; r < r1; r += MD_WARPS) {
        float acc[MD_MAX_USED];
#pragma unroll
        for (int k = 0; k < MD_MAX_USED; k++)
            acc[k] = 0.0f;
        for (int c = lane; c < n_chunks; c += GPU_WARP) {
            gq_chunk ch[MD_MAX_USED];
#pragma unroll
            for (int k = 0; k < MD_MAX_USED; k++)
                if (k < n_used)
                    gq_decode<TD>(mat[k] + r * b.down.row_bytes, c, &ch[k]);
#pragma unroll
            for (int k = 0; k < MD_MAX_USED; k++) {
                if (k >= n_used)
                    break;
                int32_t a[8];
                mv_act_chunk(hq + k * ff + 32 * c, a);
                const int4 m = hm[k * n_chunks + c];
                const float d = __int_as_float(m.x);
                acc[k] += d * gq_chunk_dot<TD>(&ch[k], a, m.y, m.z);
            }
        }
        float sub = 0.0f;
#pragma unroll
        for (int k = 0; k < MD_MAX_USED; k++) {
            if (k >= n_used)
                break;
            const float y = warp_sum(acc[k]) + 0.0f; /* k_matvec_staged's "+ no bias" */
            sub += rt[k].weight * y;
        }
        if (lane == 0)
            b.x[r] = b.x[r] + sub;
    }
}

template <int TG, int TD>
__global__ void __launch_bounds__(MD_THREADS, 1) k_moe_decode(const gk_moe_block b, const gk_norm_out next)
{
    __shared__ __align__(16) float xs[GK_ROUTER_NORM_MAX];
    __shared__ double red[MD_WARPS];
    __shared__ float prob[GK_TAIL_MAX_EXPERTS];
    __shared__ int picked_e[MD_MAX_USED];
    __shared__ float picked_p[MD_MAX_USED];
    __shared__ gk_route rt[MD_MAX_USED];
    extern __shared__ int4 md_stage[];
    const int lane = threadIdx.x % GPU_WARP;
    {
        /* the warp's first router row: weights, not written by the launch
         * before, so loaded before the wait for it */
        float wpre[MD_PRE][8];
        const int e = (int)(threadIdx.x / GPU_WARP) * (int)gridDim.x + (int)blockIdx.x;
#pragma unroll
        for (int u = 0; u < MD_PRE; u++)
            if (e < b.gating.n_expert && 8 * (lane + u * GPU_WARP) < b.router.n_cols)
                md_float8(b.router.type, b.router.data + (int64_t)e * b.router.row_bytes, 8 * (lane + u * GPU_WARP),
                          wpre[u]);
        gpu_pdl_wait();
        md_router(b, wpre, xs, red);
    }
    gk_grid_barrier(b.bar, gridDim.x);
    md_rank(b, prob, picked_e, picked_p, rt);
    md_prefetch_down(b, rt);
    mv_stage_row(xs, b.gate.n_cols, md_stage);
    __syncthreads();
    md_gate_up<TG>(b, rt, md_stage);
    gk_grid_barrier(b.bar, gridDim.x);
    mv_stage_row<true>(b.h, (int64_t)b.gating.n_used * b.down.n_cols, md_stage);
    __syncthreads();
    md_down<TD>(b, rt, md_stage);
    if (next.y == NULL || !gk_last_block(b.bar, gridDim.x))
        return;
    /* the last block: every row of x is written; the next layer's norm */
    float v[MD_NORM_PER], g[MD_NORM_PER];
    const int64_t n = b.down.n_rows;
    norm_regs_load<MD_NORM_PER>(b.x, n, next.gain, v, g);
    const float scale = norm_regs_scale<MD_NORM_PER>(v, n, next.eps, red);
    norm_regs_apply<MD_NORM_PER>(v, g, n, scale, next, true, 0);
}

static bool md_pair(uint32_t tg, uint32_t td)
{
#define MD_PAIR_(A, B) if (tg == A && td == B) return true;
    MD_PAIRS(MD_PAIR_)
#undef MD_PAIR_
    return false;
}

static size_t md_smem(const gk_moe_block *b)
{
    const size_t x = md_stage_bytes(b->gate.n_cols), h = md_stage_bytes((int64_t)b->gating.n_used * b->down.n_cols);
    return x > h ? x : h;
}

extern "C" bool gk_moe_decode_fits(const gk_moe_block *b)
{
    const int64_t n = b->router.n_cols, ff = b->gate.n_rows;
    const gk_gating *g = &b->gating;
    return gk_clusters_supported() && gk_is_float_type(b->router.type) && b->router.n_rows == g->n_expert &&
           g->n_expert <= GK_TAIL_MAX_EXPERTS && g->n_used >= 1 && g->n_used <= MD_MAX_USED && g->n_used <= g->n_expert &&
           n % 32 == 0 && n <= GK_ROUTER_NORM_MAX && ff % 32 == 0 && b->gate.n_cols == n && b->up.type == b->gate.type &&
           b->up.n_rows == ff && b->up.n_cols == n && b->up.row_bytes == b->gate.row_bytes && b->down.n_rows == n &&
           b->down.n_cols == ff && md_pair(b->gate.type, b->down.type) && md_smem(b) <= MD_MAX_STAGE;
}

template <int TG, int TD> static int md_launch(gpuStream_t s, const gk_moe_block *b, const gk_norm_out *next)
{
    const size_t smem = md_smem(b);
    const int blocks = gk_coresident_blocks(k_moe_decode<TG, TD>, MD_THREADS, smem);
    if (blocks < 1)
        return (int)gpuErrorInvalidValue;
    return gk_launch(k_moe_decode<TG, TD>, dim3((unsigned)blocks), MD_THREADS, smem, s, *b, *next);
}

extern "C" int gk_moe_decode(gpuStream_t s, const gk_moe_block *b, const gk_norm_out *next)
{
    if (!gk_moe_decode_fits(b) || (next != NULL && next->q != NULL && next->meta == NULL))
        return (int)gpuErrorInvalidValue;
    const gk_norm_out none = {};
    const gk_norm_out *nx = next != NULL ? next : &none;
#define MD_LAUNCH_(A, B)                                                                                         \
    if (b->gate.type == A && b->down.type == B)                                                                  \
        return md_launch<A, B>(s, b, nx);
    MD_PAIRS(MD_LAUNCH_)
#undef MD_LAUNCH_
    return (int)gpuErrorInvalidValue;
}
