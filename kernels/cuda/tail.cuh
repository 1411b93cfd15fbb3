/*
 * tail.cuh — work that the last block of a launch to finish does once
 * every block's output is written, so that a step needs no launch of its
 * own for it (decode is bound by the latency of dependent launches, not by
 * bytes: docs/PERFORMANCE.md, "CUDA backend"): the MoE gating and top-k of
 * the router logits (gk_topk_rows; the selection rule and the warp
 * softmax are shared with moe.cu's general kernel and router.cu).
 *
 * The last block is found by a count: after the block's barrier, one
 * acquire-release atomic per block counts the blocks done (releasing what
 * the block wrote, acquiring what the blocks before it released), and the
 * block that brings the count to the total is the last; it resets the
 * counter for the next launch (graph replays need nothing) and reads the
 * others' results through L2 (__ldcg), since its own L1 may hold lines
 * read before they were written.  (Each thread's __threadfence() before
 * the count, a fence.sc, cost tg128 ~1% on the H200: docs/PERFORMANCE.md,
 * "CUDA decode, session 15".)
 *
 * On Hopper and later a launch can instead be one thread-block cluster
 * (cl_* below): its blocks meet at a cluster barrier and read each other's
 * shared memory, which costs no fence, no atomic and no trip through L2
 * (the router, matvec.cu; the MoE combine, moe.cu).
 */
#ifndef HYDRA_CUDA_TAIL_CUH
#define HYDRA_CUDA_TAIL_CUH

#include "common.cuh"

/* Whether this block is the last of the total blocks counted on counter
 * to finish.  Every thread of each such block calls it once, after its
 * last write. */
static inline __device__ bool gk_last_block(unsigned int *counter, unsigned int total)
{
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        last = gpu_atom_add_acq_rel_u32(counter, 1u) == total - 1;
        if (last)
            atomicExch(counter, 0u);
    }
    __syncthreads();
    return last;
}

/* --- top-k: the selection rule of src/moe.c (larger probability first,
 * the lower expert id on a tie), shared with moe.cu's general kernel. */
struct best {
    float v;
    int i; /* -1: none */
};

/* b beats a: a real candidate, a larger value, or the lower id on a tie. */
static inline __device__ bool better(best a, best b)
{
    return b.i >= 0 && (a.i < 0 || b.v > a.v || (b.v == a.v && b.i < a.i));
}

static inline __device__ best warp_best(best x)
{
    for (int m = GPU_WARP / 2; m > 0; m /= 2) {
        best o;
        o.v = gpu_shfl_xor(x.v, m);
        o.i = gpu_shfl_xor(x.i, m);
        if (better(x, o))
            x = o;
    }
    return x;
}

/* A warp's softmax of l[0..n) into probs (lane l: experts l + 32 j), the
 * sum of exponentials in double as op_softmax; shared by moe.cu's general
 * top-k and router.cu's selection. */
static inline __device__ void warp_softmax(const float *l, float *probs, int n)
{
    double sum;
    warp_exp_shifted(l, probs, n, &sum);
    const float inv = (float)(1.0 / sum);
    for (int e = threadIdx.x % GPU_WARP; e < n; e += GPU_WARP)
        probs[e] *= inv;
}

enum { TK_PER_LANE = GK_TAIL_MAX_EXPERTS / GPU_WARP };

/* Lane l's probabilities of experts l + 32 j from logits l (through L2
 * with L2: another block of the launch wrote them). */
template <bool L2> static inline __device__ void topk_probs(const gk_gating &g, const float *l, float *p)
{
    const int lane = threadIdx.x % GPU_WARP;
#pragma unroll
    for (int j = 0; j < TK_PER_LANE; j++) {
        const int e = lane + GPU_WARP * j;
        p[j] = e < g.n_expert ? (L2 ? __ldcg(l + e) : l[e]) : -INFINITY;
    }
    if (g.sigmoid) {
#pragma unroll
        for (int j = 0; j < TK_PER_LANE; j++)
            p[j] = 1.0f / (1.0f + expf(-p[j]));
    } else {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < TK_PER_LANE; j++)
            mx = fmaxf(mx, p[j]);
        mx = warp_max(mx);
        double sum = 0.0;
#pragma unroll
        for (int j = 0; j < TK_PER_LANE; j++) {
            if (lane + GPU_WARP * j < g.n_expert) {
                p[j] = expf(p[j] - mx);
                sum += p[j];
            }
        }
        for (int m = GPU_WARP / 2; m > 0; m /= 2)
            sum += gpu_shfl_xor(sum, m);
        const float inv = (float)(1.0 / sum);
#pragma unroll
        for (int j = 0; j < TK_PER_LANE; j++)
            p[j] *= inv;
    }
}

/* One token by one warp, lane l holding experts l + 32 j in registers: the
 * same probabilities (softmax sum in double, summed in that order), the
 * same choices and weights as k_moe_topk.  n_used <= GPU_WARP: lane k
 * keeps the weight of rank k. */
static inline __device__ void topk_warp(const gk_gating &g, const float *l, int t, gk_route *r)
{
    const int lane = threadIdx.x % GPU_WARP;
    float p[TK_PER_LANE];
    topk_probs<true>(g, l, p);
    unsigned int chosen = 0;
    float wsum = 0.0f, mine = 0.0f;
    for (int k = 0; k < g.n_used; k++) {
        best b = {0.0f, -1};
#pragma unroll
        for (int j = 0; j < TK_PER_LANE; j++) {
            const best c = {p[j], lane + GPU_WARP * j};
            if (c.i < g.n_expert && !(chosen >> j & 1u) && better(b, c))
                b = c;
        }
        b = warp_best(b);
        if (b.i >= 0 && b.i % GPU_WARP == lane)
            chosen |= 1u << (b.i / GPU_WARP);
        if (lane == k)
            mine = b.v;
        if (lane == 0) {
            r[k].token = t;
            r[k].expert = b.i;
        }
        wsum += b.v; /* in rank order, as moe_select */
    }
    if (lane < g.n_used)
        r[lane].weight = (g.renorm ? mine / wsum : mine) * g.scale;
}

/* Routes of n_tok tokens from their logits rows (stride values apart), a
 * warp per token. */
static inline __device__ void gk_topk_rows(const gk_gating &g, const float *logits, int64_t stride, int n_tok,
                                           gk_route *routes)
{
    const int n_warps = (int)(blockDim.x / GPU_WARP);
    for (int t = (int)(threadIdx.x / GPU_WARP); t < n_tok; t += n_warps)
        topk_warp(g, logits + t * stride, t, routes + (int64_t)t * g.n_used);
}

/* --- thread-block clusters (compute capability 9.0 and later; the
 * launchers check gk_clusters_supported first).  Code compiled for older
 * architectures sees a cluster of one block, so the kernels still build
 * there; they are never launched with more. */
static inline __device__ unsigned cl_rank(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return __clusterRelativeBlockRank();
#else
    return 0;
#endif
}

static inline __device__ unsigned cl_size(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return __clusterSizeInBlocks();
#else
    return 1;
#endif
}

/* Whether launches may take clusters: compute capability 9.0 or later
 * (the device gpu_pdl_supported asks about), never on HIP. */
static inline bool gk_clusters_supported(void)
{
#if defined(HYDRA_HIP)
    return false;
#else
    return gpu_pdl_supported();
#endif
}

/* gk_launch with grid.x cut into clusters of cluster_x blocks. */
template <typename... Params, typename... Args>
static inline int gk_launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, gpuStream_t s,
                                    unsigned cluster_x, Args... args)
{
#if defined(HYDRA_HIP)
    (void)kernel, (void)grid, (void)block, (void)smem, (void)s, (void)cluster_x;
    return (int)gpuErrorInvalidValue;
#else
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster_x;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = s != 0 ? 2 : 1; /* no programmatic launch on the legacy default stream */
    return (int)cudaLaunchKernelEx(&cfg, kernel, args...);
#endif
}

/* The most clusters of cluster_x blocks of `threads` (no dynamic shared
 * memory) of kernel that the current device holds at once: 0 where it
 * holds none or the runtime cannot say (its refusal cleared, so that it is
 * not the next call's error).  A host query, no synchronisation. */
template <typename Kernel> static inline int gk_max_clusters(Kernel kernel, unsigned cluster_x, int threads)
{
#if defined(HYDRA_HIP)
    (void)kernel, (void)cluster_x, (void)threads;
    return 0;
#else
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster_x;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(cluster_x);
    cfg.blockDim = dim3(threads);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return fit;
#endif
}

/* --- top-k by rank, for a block: every (token, expert) pair counts the
 * experts that come before it (a larger probability, or an equal one and
 * a lower id), TK_SPLIT threads of a warp a share each; the pairs of rank
 * < n_used are the choice, in rank order.  One pass instead of n_used
 * rounds of a warp argmax, and the same choice: the rule is a strict total
 * order, so the argmax rounds pick the ranks 0, 1, ... in turn.  A NaN
 * probability ranks below every number (the argmax rounds' choice there
 * depended on the scan order). */
enum { TK_SPLIT = 4 };

static inline __device__ float tk_key(float p)
{
    return p == p ? p : -INFINITY;
}

/* The rank order as one number: a larger probability first, then the
 * lower expert id, a NaN as tk_key reads it.  The float's bits made
 * monotone (a positive's sign bit set, a negative's bits flipped; -0 read
 * as +0, which it equals), the id below them in 8 bits: distinct experts
 * have distinct keys, so an expert's rank is the count of larger keys, one
 * 64-bit compare a pair instead of tk_key and a compound test. */
static_assert(GK_TAIL_MAX_EXPERTS <= 256, "an expert id in 8 bits");
static inline __device__ unsigned long long tk_key64(float p, int e)
{
    const unsigned b = __float_as_uint(tk_key(p) + 0.0f);
    const unsigned mono = (b & 0x80000000u) != 0 ? ~b : b | 0x80000000u;
    return (unsigned long long)mono << 8 | (unsigned)(GK_TAIL_MAX_EXPERTS - 1 - e);
}

/* keys: n_tok rows of key_stride (even) keys (tk_key64), 16-byte aligned,
 * row t's key n_expert zero (below every key) where n_expert is odd; prob:
 * their probabilities, rows of stride.  Writes picked_e / picked_p (rows
 * of n_used) for the pairs of rank < n_used.  Every thread of the block
 * calls it; the caller syncs before reading the picks.  A thread's share
 * is every TK_SPLIT-th pair of keys, one 16-byte load: the TK_SPLIT threads
 * of a pair read adjacent bytes, which the warp's other pairs (the same
 * token) read too, so a load is one shared-memory wavefront.  (Float
 * probabilities compared by tk_key took ~14 instructions a compare, 1.7 us
 * of the router's critical path for 128 experts; docs/PERFORMANCE.md,
 * "CUDA decode, session 9: the router".) */
static inline __device__ void topk_rank_block(const unsigned long long *keys, int key_stride, const float *prob,
                                              int stride, int n_tok, int n_expert, int n_used, int *picked_e,
                                              float *picked_p, int picked_stride)
{
    const int lane = threadIdx.x % GPU_WARP, warp = threadIdx.x / GPU_WARP;
    const int pairs_per_warp = GPU_WARP / TK_SPLIT, n_warps = blockDim.x / GPU_WARP;
    const int part = lane % TK_SPLIT;
    for (int base = warp * pairs_per_warp; base < n_tok * n_expert; base += n_warps * pairs_per_warp) {
        const int i = base + lane / TK_SPLIT;
        const bool live = i < n_tok * n_expert;
        const int t = live ? i / n_expert : 0, e = live ? i % n_expert : 0;
        const unsigned long long *row = keys + t * key_stride, mine = row[e];
        int before = 0;
        for (int f = 2 * part; f < n_expert; f += 2 * TK_SPLIT) {
            const ulonglong2 q = *(const ulonglong2 *)(row + f);
            before += (q.x > mine) + (q.y > mine);
        }
        for (int m = 1; m < TK_SPLIT; m *= 2)
            before += gpu_shfl_xor(before, m);
        if (live && part == 0 && before < n_used) {
            picked_e[t * picked_stride + before] = e;
            picked_p[t * picked_stride + before] = prob[t * stride + e];
        }
    }
}

/* The routes of n_tok tokens from their picks (after topk_rank_block and a
 * barrier): the weight sum in rank order, as moe_select. */
static inline __device__ void topk_write_routes(const gk_gating &g, int n_tok, const int *picked_e,
                                                const float *picked_p, int picked_stride, gk_route *routes)
{
    for (int i = threadIdx.x; i < n_tok * g.n_used; i += blockDim.x) {
        const int t = i / g.n_used, k = i % g.n_used;
        const float *pp = picked_p + t * picked_stride;
        float wsum = 0.0f;
        for (int j = 0; j < g.n_used; j++)
            wsum += pp[j];
        routes[i].token = t;
        routes[i].expert = picked_e[t * picked_stride + k];
        routes[i].weight = (g.renorm ? pp[k] / wsum : pp[k]) * g.scale;
    }
}

#endif
