/*
 * tail.cuh — work that the last block of a launch to finish does once
 * every block's output is written, so that a step needs no launch of its
 * own for it (decode is bound by the latency of dependent launches, not by
 * bytes: docs/PERFORMANCE.md, "CUDA backend"): the MoE gating and top-k of
 * the router logits (gk_topk_rows; the selection rule is shared with
 * moe.cu's general kernel).
 *
 * The last block is found by the usual fence-then-count pattern: every
 * thread fences its writes, one atomic per block counts the blocks done,
 * and the block that brings the count to the total is the last; it resets
 * the counter for the next launch (graph replays need nothing) and reads
 * the others' results through L2 (__ldcg), since its own L1 may hold lines
 * read before they were written.
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
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1u) == total - 1;
        if (last)
            atomicExch(counter, 0u);
    }
    __syncthreads();
    if (last)
        __threadfence();
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

enum { TK_PER_LANE = GK_TAIL_MAX_EXPERTS / GPU_WARP };

/* One token by one warp, lane l holding experts l + 32 j in registers: the
 * same probabilities (softmax sum in double, summed in that order), the
 * same choices and weights as k_moe_topk.  n_used <= GPU_WARP: lane k
 * keeps the weight of rank k. */
static inline __device__ void topk_warp(const gk_gating &g, const float *l, int t, gk_route *r)
{
    const int lane = threadIdx.x % GPU_WARP;
    float p[TK_PER_LANE];
#pragma unroll
    for (int j = 0; j < TK_PER_LANE; j++) {
        const int e = lane + GPU_WARP * j;
        p[j] = e < g.n_expert ? __ldcg(l + e) : -INFINITY;
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

#endif
