/*
 * moe.cu — the MoE layer's bookkeeping on the device, so no expert id ever
 * travels to the host inside a step:
 *   gk_moe_topk     gating (softmax | sigmoid) over all experts, top-k with
 *                   ties to the lower expert id, weights renormalised or not,
 *                   then scaled (the formulas of src/moe.c)
 *   gk_moe_group    routes grouped by expert into tiles for the grouped
 *                   matmul (prefill)
 *   gk_moe_combine  each token's weighted sum of its routes' outputs
 */
#include "common.cuh"
#include "row_norm.cuh"
#include "tail.cuh"
#include "cluster_async.cuh"
#include "stamp.cuh"

GK_STAMP_TU(moe)

enum { GR_THREADS = 1024, GR_MAX_EXPERTS = 4096, CB_MAX_USED = 256 };

/* One warp per token: every expert's probability in shared memory, then
 * n_used rounds of a warp-wide argmax over the unchosen ones.
 * Shared: probs[n_expert], chosen[n_expert]. */
__global__ void __launch_bounds__(GPU_WARP) k_moe_topk(gk_gating g, const float *logits, gk_route *routes)
{
    gpu_pdl_wait();
    extern __shared__ float probs[];
    unsigned char *chosen = (unsigned char *)(probs + g.n_expert);
    const int t = blockIdx.x, lane = threadIdx.x;
    const float *l = logits + (int64_t)t * g.n_expert;
    if (g.sigmoid) {
        for (int e = lane; e < g.n_expert; e += GPU_WARP)
            probs[e] = 1.0f / (1.0f + expf(-l[e]));
    } else {
        warp_softmax(l, probs, g.n_expert);
    }
    __shared__ float picked[CB_MAX_USED];
    for (int e = lane; e < g.n_expert; e += GPU_WARP)
        chosen[e] = 0;
    __syncwarp();
    gk_route *r = routes + (int64_t)t * g.n_used;
    float wsum = 0.0f;
    for (int k = 0; k < g.n_used; k++) {
        best b = {0.0f, -1};
        for (int e = lane; e < g.n_expert; e += GPU_WARP) {
            const best c = {probs[e], e};
            if (!chosen[e] && better(b, c))
                b = c;
        }
        b = warp_best(b);
        if (lane == 0) {
            chosen[b.i] = 1;
            picked[k] = b.v;
            r[k].token = t;
            r[k].expert = b.i;
        }
        wsum += b.v; /* in rank order, as moe_select */
        __syncwarp();
    }
    for (int k = lane; k < g.n_used; k += GPU_WARP) {
        float w = picked[k];
        if (g.renorm)
            w /= wsum;
        r[k].weight = w * g.scale;
    }
}

extern "C" int gk_moe_topk(gpuStream_t s, const gk_gating *g, const float *logits, int n_tok, gk_route *routes)
{
    if (n_tok == 0)
        return 0;
    if (g->n_expert > GR_MAX_EXPERTS || g->n_used > CB_MAX_USED)
        return (int)gpuErrorInvalidValue;
    const size_t smem = (sizeof(float) + 1) * (size_t)g->n_expert;
    return gk_launch(k_moe_topk, n_tok, GPU_WARP, smem, s, *g, logits, routes);
    
}

/* One block.  The place of a route among its expert's comes from an atomic
 * counter, so it varies from run to run; results do not, because every
 * output row depends on its own activation row only and the combine sums
 * each token's routes in rank order. */
__global__ void __launch_bounds__(GR_THREADS) k_moe_group(const gk_route *routes, int n_routes, int n_expert,
                                                          gk_groups g)
{
    gpu_pdl_wait();
    __shared__ int count[GR_MAX_EXPERTS], first[GR_MAX_EXPERTS];
    int32_t *order = (int32_t *)g.order, *slot_of = (int32_t *)g.slot_of, *tiles = (int32_t *)g.tiles;
    for (int e = threadIdx.x; e < n_expert; e += GR_THREADS)
        count[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n_routes; i += GR_THREADS)
        slot_of[i] = atomicAdd(&count[routes[i].expert], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int slot = 0, n_tiles = 0;
        for (int e = 0; e < n_expert; e++) {
            first[e] = slot;
            for (int s = 0; s < count[e]; s += GK_TILE_TOK, n_tiles++) {
                tiles[4 * n_tiles] = e;
                tiles[4 * n_tiles + 1] = slot + s;
                tiles[4 * n_tiles + 2] = min(GK_TILE_TOK, count[e] - s);
                tiles[4 * n_tiles + 3] = 0;
            }
            slot += count[e];
        }
        *(int32_t *)g.n_tiles = n_tiles;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_routes; i += GR_THREADS) {
        const int slot = first[routes[i].expert] + slot_of[i];
        slot_of[i] = slot;
        order[slot] = i;
    }
}

extern "C" int gk_moe_max_tiles(int n_routes, int n_expert)
{
    return (n_routes + GK_TILE_TOK - 1) / GK_TILE_TOK + n_expert;
}

extern "C" int gk_moe_group(gpuStream_t s, const gk_route *routes, int n_routes, int n_expert, const gk_groups *g)
{
    if (n_expert > GR_MAX_EXPERTS)
        return (int)gpuErrorInvalidValue;
    return gk_launch(k_moe_group, 1, GR_THREADS, 0, s, routes, n_routes, n_expert, *g);
    
}

/* One block per token: sub = sum_k w_k y_k in rank order, x += sub; with
 * a norm, then the next layer's input from the new row.  The routes'
 * weights and rows are staged in shared memory first.  In decode (a few
 * tokens, so a few blocks: latency-bound) rows that fit (n % 32 == 0, n <=
 * NR_PER_THREAD * GK_NORM_THREADS) stay in registers (cb_regs): every
 * thread's loads of 4 routes are issued together and the norm needs no
 * second pass over x.  (Every thread reading the route weights itself, 8
 * routes' loads at once, was slower on the H200: 17.0 against 14.4 us per
 * launch; docs/PERFORMANCE.md, "CUDA decode, session 5".)  Prefill's many
 * blocks hide latency better with the loop below (the register form took
 * 2.3 ms instead of 1.1 ms for 512 tokens). */
static inline __device__ int64_t cb_row(const int32_t *slot_of, int r, int64_t n)
{
    return (int64_t)(slot_of != NULL ? slot_of[r] : r) * n;
}

static inline __device__ void cb_regs(const float *w, const int64_t *row, const float *y, int n_used,
                                      int64_t n, float *xr, const gk_norm_out &norm, double *red)
{
    const int t = blockIdx.x;
    float v[NR_PER_THREAD], g[NR_PER_THREAD], sub[NR_PER_THREAD];
    norm_regs_load(xr, n, norm.gain, v, g);
#pragma unroll
    for (int k = 0; k < NR_PER_THREAD; k++)
        sub[k] = 0.0f;
#pragma unroll 4
    for (int r = 0; r < n_used; r++) {
        const float wr = w[r];
        const float *yr = y + row[r];
#pragma unroll
        for (int k = 0; k < NR_PER_THREAD; k++) {
            const int64_t d = threadIdx.x + (int64_t)k * GK_NORM_THREADS;
            if (d < n)
                sub[k] += wr * yr[d];
        }
    }
#pragma unroll
    for (int k = 0; k < NR_PER_THREAD; k++) {
        const int64_t d = threadIdx.x + (int64_t)k * GK_NORM_THREADS;
        v[k] += sub[k];
        if (d < n)
            xr[d] = v[k];
    }
    if (norm.y == NULL)
        return;
    const float scale = norm_regs_scale(v, n, norm.eps, red);
    norm_regs_apply(v, g, n, scale, norm, true, t);
}

__global__ void __launch_bounds__(GK_NORM_THREADS) k_moe_combine(const gk_route *routes, const int32_t *slot_of,
                                                                 const float *y, int n_used, int64_t n, float *x,
                                                                 gk_norm_out norm)
{
    gpu_pdl_wait();
    __shared__ float w[CB_MAX_USED];
    __shared__ int64_t row[CB_MAX_USED];
    __shared__ double red[GK_NORM_THREADS / GPU_WARP];
    const int t = blockIdx.x;
    float *xr = x + (int64_t)t * n;
    for (int k = threadIdx.x; k < n_used; k += GK_NORM_THREADS) {
        w[k] = routes[t * n_used + k].weight;
        row[k] = cb_row(slot_of, t * n_used + k, n);
    }
    __syncthreads();
    if (gridDim.x <= GK_MATVEC_MAX_TOK && rmsnorm_row_fits(n)) {
        cb_regs(w, row, y, n_used, n, xr, norm, red);
        return;
    }
    double sumsq = 0.0;
    for (int64_t d = threadIdx.x; d < n; d += GK_NORM_THREADS) {
        float sub = 0.0f;
        for (int k = 0; k < n_used; k++)
            sub += w[k] * y[row[k] + d];
        const float v = xr[d] + sub;
        xr[d] = v;
        sumsq += (double)v * v;
    }
    if (norm.y == NULL)
        return;
    sumsq = block_sum_d(sumsq, red); /* its barrier also orders the row's writes before the reads below */
    row_norm_store(xr, n, sumsq, &norm, t);
}

/* Decode on Hopper and later: a thread-block cluster of CBC_BLOCKS blocks
 * per token, block b taking the b-th slice of the row (up to CBC_PER
 * values per thread), so that a thread's loads are a value of each route,
 * all issued at once, on 8 SMs instead of one (the one-block kernel above
 * stalls on its loads two thirds of its time; docs/PERFORMANCE.md, "CUDA
 * decode, session 5").  x gets the same bits as k_moe_combine (the same
 * sum per value).  Each block sends its slice's sum of squares into slot
 * [rank] of every other block's shared memory (st.async, counted on the
 * receiver's mbarrier: cluster_async.cuh, no cluster barrier and so no
 * wait for x's stores) and adds the slots in rank order, so every block
 * norms with the same scale. */
enum { CBC_BLOCKS = 8, CBC_PER = Q8_GROUP, CBC_THREADS = GK_NORM_THREADS };
static_assert(CBC_BLOCKS <= GPU_WARP, "a lane of warp 0 per receiving block");

__global__ void __launch_bounds__(CBC_THREADS) k_moe_combine_cl(const gk_route *routes, const float *y, int n_used,
                                                                int64_t n, float *x, gk_norm_out norm)
{
    __shared__ double red[CBC_THREADS / GPU_WARP];
    __shared__ double part[CBC_BLOCKS]; /* the other blocks' sums of squares, by rank */
    __shared__ __align__(8) uint64_t landed; /* they are in part */
    const unsigned rank = cl_rank();
    if (norm.y != NULL) {
        if (threadIdx.x == 0)
            cla_expect(&landed, (uint32_t)(sizeof(double) * (CBC_BLOCKS - 1)));
        cla_cluster_started(); /* before the wait: it overlaps the previous launch */
    }
    gpu_params_warm(routes);
    gpu_params_warm(norm);
    gpu_pdl_wait();
    GK_STAMP_IF(rank == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_CB_WAIT);
    const int t = blockIdx.y;
    const int64_t len = n / CBC_BLOCKS, col0 = (int64_t)rank * len;
    float *xr = x + t * n + col0;
    const gk_route *rt = routes + (int64_t)t * n_used;
    const float *yt = y + (int64_t)t * n_used * n + col0;
    float v[CBC_PER], g[CBC_PER], sub[CBC_PER];
    norm_regs_load<CBC_PER>(xr, len, norm.gain != NULL ? norm.gain + col0 : NULL, v, g);
#pragma unroll
    for (int k = 0; k < CBC_PER; k++)
        sub[k] = 0.0f;
#pragma unroll 8
    for (int r = 0; r < n_used; r++) {
        const float wr = rt[r].weight;
        const float *yr = yt + (int64_t)r * n;
#pragma unroll
        for (int k = 0; k < CBC_PER; k++) {
            const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            if (i < len)
                sub[k] += wr * yr[i];
        }
    }
#pragma unroll
    for (int k = 0; k < CBC_PER; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        v[k] += sub[k];
        if (i < len)
            xr[i] = v[k];
    }
    gpu_pdl_trigger(); /* left: the next layer's norm */
    GK_STAMP_IF(rank == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_CB_X);
    if (norm.y == NULL)
        return;
    const double mine = block_sum_d_last(norm_regs_sumsq<CBC_PER>(v), red);
    if (threadIdx.x < CBC_BLOCKS && threadIdx.x != rank)
        cla_send(cla_in_block(&part[rank], threadIdx.x), mine, cla_in_block(&landed, threadIdx.x));
    cla_wait(&landed); /* every slot but ours; nothing is sent into this block after this */
    double sumsq = 0.0;
    for (unsigned b = 0; b < CBC_BLOCKS; b++)
        sumsq += b == rank ? mine : part[b];
    norm_regs_apply_at<CBC_PER>(v, g, len, norm_scale(sumsq, n, norm.eps), norm, true, t * n + col0);
    GK_STAMP_IF(rank == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_CB_NORM);
}

static bool combine_on_cluster(const int32_t *slot_of, int n_tok, int64_t n)
{
    return slot_of == NULL && n_tok <= GK_MATVEC_MAX_TOK && n % (GPU_WARP * CBC_BLOCKS) == 0 &&
           n <= (int64_t)CBC_BLOCKS * CBC_PER * CBC_THREADS && gk_clusters_supported();
}

extern "C" int gk_moe_combine(gpuStream_t s, const gk_route *routes, const int32_t *slot_of, const float *y, int n_tok,
                              int n_used, int64_t n_embd, float *x, const gk_norm_out *norm)
{
    if (n_tok == 0)
        return 0;
    const gk_norm_out none = {NULL, 0.0f, NULL, NULL, NULL};
    if (n_used > CB_MAX_USED || (norm != NULL && norm->q != NULL && n_embd % 32 != 0))
        return (int)gpuErrorInvalidValue;
    if (combine_on_cluster(slot_of, n_tok, n_embd)) {
        const int64_t len = n_embd / CBC_BLOCKS;
        const unsigned threads = (unsigned)(len < CBC_THREADS ? len : CBC_THREADS);
        return gk_launch_cluster(k_moe_combine_cl, dim3(CBC_BLOCKS, (unsigned)n_tok), threads, 0, s, CBC_BLOCKS,
                                 routes, y, n_used, n_embd, x, norm ? *norm : none);
    }
    return gk_launch(k_moe_combine, n_tok, GK_NORM_THREADS, 0, s, routes, slot_of, y, n_used, n_embd, x,
                     norm ? *norm : none);
}
