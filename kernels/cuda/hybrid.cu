/*
 * hybrid.cu — the device half of a hybrid MoE layer (issue 10,
 * docs/HYBRID.md): the experts resident in the VRAM slab are computed by
 * the ordinary routed matvec kernels, the others by the CPU.
 *
 *   gk_hy_split    after top-k: every route looked up in the layer's device
 *                  slot table; hits keep their expert, misses get expert -1
 *                  (the matvec kernels skip such routes); the misses,
 *                  compacted in route order, and the layer's normed rows go
 *                  to mapped host memory for the CPU pass.  No host reads
 *                  anything back to decide.
 *   gk_hy_combine  x[t] += hits in rank order, then the CPU's partial sum
 *                  (mapped host memory), in that fixed order: bit-identical
 *                  run after run for the same inputs and slab.
 *   gk_hy_count    lookups per expert in prefill steps (the admission
 *                  policy's input)
 *   gk_hy_stamp    the GPU's global clock into mapped memory (the hand-off
 *                  and overlap counters)
 *
 * These kernels are launched without programmatic dependent launch: they
 * sit next to cross-stream joins of the hand-off, where a plain full
 * dependency is the simple, safe edge.
 */
#include "common.cuh"
#include "row_norm.cuh"

enum { HY_THREADS = 256, HY_MAX_USED = 256 };

static inline __device__ unsigned hy_ballot(bool p)
{
#if defined(HYDRA_HIP)
    return (unsigned)__ballot(p);
#else
    return __ballot_sync(0xffffffffu, p);
#endif
}

/* One block.  Routes in chunks of HY_THREADS; a chunk's misses find their
 * place by warp ballots, so the miss list keeps the route order (a
 * deterministic CPU pass needs a deterministic list). */
__global__ void __launch_bounds__(HY_THREADS) k_hy_split(gk_hy_split_args a)
{
    __shared__ int warp_n[HY_THREADS / GPU_WARP];
    __shared__ int base;
    const int n = a.n_tok * a.n_used, lane = threadIdx.x % GPU_WARP, warp = threadIdx.x / GPU_WARP;
    if (threadIdx.x == 0)
        base = 0;
    __syncthreads();
    for (int r0 = 0; r0 < n; r0 += HY_THREADS) {
        const int r = r0 + threadIdx.x;
        bool miss = false;
        gk_route rt = {0, -1, 0.0f};
        if (r < n) {
            rt = a.routes[r];
            miss = a.slot_of[rt.expert] < 0;
            gk_route h = rt;
            if (miss)
                h.expert = -1;
            a.hits[r] = h;
            if (a.counts != NULL)
                atomicAdd(&a.counts[rt.expert], 1u);
        }
        const unsigned ballot = hy_ballot(miss);
        if (lane == 0)
            warp_n[warp] = __popc(ballot);
        __syncthreads();
        int off = base;
        for (int w = 0; w < warp; w++)
            off += warp_n[w];
        off += __popc(ballot & ((1u << lane) - 1u));
        if (miss)
            a.miss[off] = rt;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int w = 0; w < HY_THREADS / GPU_WARP; w++)
                base += warp_n[w];
        __syncthreads();
    }
    const int n_miss = base;
    if (n_miss > 0) {
        const int64_t n4 = (int64_t)a.n_tok * a.n_embd / 4; /* n_embd % 32 == 0 */
        const float4 *src = (const float4 *)a.xn;
        float4 *dst = (float4 *)a.x_host;
        for (int64_t i = threadIdx.x; i < n4; i += HY_THREADS)
            dst[i] = src[i];
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
        *a.n_miss_dev = n_miss;
        *a.n_miss_host = n_miss;
        if (a.stamp != NULL)
            *a.stamp = gpu_clock_ns();
        __threadfence_system();
        if (a.seq != NULL) { /* the request, after everything it covers */
            const uint32_t seq = *a.seq + 1;
            *a.seq = seq;
            *(volatile int32_t *)a.layer_host = a.layer;
            __threadfence_system();
            *(volatile uint32_t *)a.req_host = seq;
            __threadfence_system();
        }
    }
}

extern "C" int gk_hy_split(gpuStream_t s, const gk_hy_split_args *a)
{
    if (a->n_tok <= 0 || a->n_embd % 32 != 0)
        return (int)gpuErrorInvalidValue;
    k_hy_split<<<1, HY_THREADS, 0, s>>>(*a);
    return (int)gpuGetLastError();
}

/* One block per token: the hits' weighted outputs in rank order, then the
 * CPU's partial sum when the layer had a miss, added to x; then the next
 * layer's input norm, as gk_moe_combine. */
__global__ void __launch_bounds__(GK_NORM_THREADS) k_hy_combine(gk_hy_combine_args c, gk_norm_out norm)
{
    __shared__ float w[HY_MAX_USED];
    __shared__ int64_t row[HY_MAX_USED];
    __shared__ int n_hit;
    __shared__ double red[GK_NORM_THREADS / GPU_WARP];
    const int t = blockIdx.x;
    const int64_t n = c.n_embd;
    if (threadIdx.x == 0) {
        if (t == 0 && c.stamp != NULL)
            *c.stamp = gpu_clock_ns();
        int k_hit = 0;
        for (int k = 0; k < c.n_used; k++) {
            const gk_route h = c.hits[t * c.n_used + k];
            if (h.expert >= 0) {
                w[k_hit] = h.weight;
                row[k_hit++] = (int64_t)(t * c.n_used + k) * n;
            }
        }
        n_hit = k_hit;
    }
    __syncthreads();
    const bool cpu = *c.n_miss > 0;
    float *xr = c.x + (int64_t)t * n;
    const float *pr = c.part + (int64_t)t * n;
    double sumsq = 0.0;
    for (int64_t d = threadIdx.x; d < n; d += GK_NORM_THREADS) {
        float sub = 0.0f;
        for (int k = 0; k < n_hit; k++)
            sub += w[k] * c.y[row[k] + d];
        if (cpu)
            sub += pr[d];
        const float v = xr[d] + sub;
        xr[d] = v;
        sumsq += (double)v * v;
    }
    if (norm.y == NULL)
        return;
    sumsq = block_sum_d(sumsq, red);
    row_norm_store(xr, n, sumsq, &norm, t);
}

extern "C" int gk_hy_combine(gpuStream_t s, const gk_hy_combine_args *c, const gk_norm_out *norm)
{
    const gk_norm_out none = {NULL, 0.0f, NULL, NULL, NULL};
    if (c->n_tok <= 0 || c->n_used > HY_MAX_USED || c->n_embd % 32 != 0)
        return (int)gpuErrorInvalidValue;
    k_hy_combine<<<c->n_tok, GK_NORM_THREADS, 0, s>>>(*c, norm != NULL ? *norm : none);
    return (int)gpuGetLastError();
}

__global__ void k_hy_count(const gk_route *routes, int n, uint32_t *counts)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < n)
        atomicAdd(&counts[routes[r].expert], 1u);
}

extern "C" int gk_hy_count(gpuStream_t s, const gk_route *routes, int n_routes, uint32_t *counts)
{
    if (n_routes <= 0)
        return 0;
    k_hy_count<<<(n_routes + 255) / 256, 256, 0, s>>>(routes, n_routes, counts);
    return (int)gpuGetLastError();
}

/* Numbers wrap: "reached" is a signed difference. */
__global__ void k_hy_wait(const uint32_t *seq, const uint32_t *done_host, int32_t *err_host,
                          unsigned long long timeout_ns)
{
    const uint32_t want = *seq;
    const unsigned long long t0 = gpu_clock_ns();
    while ((int32_t)(*(volatile const uint32_t *)done_host - want) < 0) {
        if (gpu_clock_ns() - t0 > timeout_ns) {
            *(volatile int32_t *)err_host = 1;
            break;
        }
    }
    __threadfence_system();
}

extern "C" int gk_hy_wait(gpuStream_t s, const uint32_t *seq, const uint32_t *done_host, int32_t *err_host,
                          unsigned long long timeout_ns)
{
    k_hy_wait<<<1, 1, 0, s>>>(seq, done_host, err_host, timeout_ns);
    return (int)gpuGetLastError();
}

__global__ void k_hy_stamp(unsigned long long *stamp)
{
    *stamp = gpu_clock_ns();
}

extern "C" int gk_hy_stamp(gpuStream_t s, unsigned long long *stamp)
{
    k_hy_stamp<<<1, 1, 0, s>>>(stamp);
    return (int)gpuGetLastError();
}
