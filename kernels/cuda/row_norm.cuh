/*
 * row_norm.cuh — the second half of RMSNorm, shared by the norm kernel and
 * the MoE combine that ends a layer (which norms the row it has just
 * summed, for the next layer): given a row's sum of squares, write
 * y = x / rms * gain and, with q, the 8-bit form of y by the rule of
 * quantize.cu (one warp per 32 values).  Blocks of any multiple of 32
 * threads up to 1024; the sum of squares in double, as op_rmsnorm.  The row
 * is read through L2 (__ldcg): in a launch's tail (tail.cuh) other blocks
 * wrote it.
 */
#ifndef HYDRA_CUDA_ROW_NORM_CUH
#define HYDRA_CUDA_ROW_NORM_CUH

#include "common.cuh"

/* The block's total of v (double), for every thread, where red is used
 * no more after it (no barrier after the reads). */
static inline __device__ double block_sum_d_last(double v, double *red)
{
    for (int m = GPU_WARP / 2; m > 0; m /= 2)
        v += gpu_shfl_xor(v, m);
    if (threadIdx.x % GPU_WARP == 0)
        red[threadIdx.x / GPU_WARP] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < (int)(blockDim.x / GPU_WARP); w++)
        total += red[w];
    return total;
}

/* The same where red may be used again: a barrier after the reads. */
static inline __device__ double block_sum_d(double v, double *red)
{
    const double total = block_sum_d_last(v, red);
    __syncthreads();
    return total;
}

/* The 8-bit form of up to K chunks of 32 values, chunk k held one per lane
 * of a warp in v[k] (value i of the chunk in lane i), by the rule of
 * quantize.cu: d = amax / 127, q = round-half-even(v * 127 / amax) (0 when
 * amax is 0), each half's sum of q.  Chunk k < n_live (the same for the
 * whole warp) starts at value c0 + k * stride: its bytes go to q8 from
 * there, its 4 meta words to meta + 4 * (start / 32); every lane of the
 * warp calls it.  The chunks' shuffle reductions are interleaved, so K
 * chunks cost about the latency of one: one after another, each waits out
 * ~10 dependent shuffles (a row of 64 chunks on 4 warps: 16 in a row,
 * microseconds of a decode kernel's critical path; docs/PERFORMANCE.md,
 * "CUDA decode, session 5"). */
enum { Q8_GROUP = 4 }; /* chunks interleaved at once: registers stay few */

template <int K>
static inline __device__ void q8_warp_store_k(const float *v, int n_live, int8_t *q8, int32_t *meta, int64_t c0,
                                              int64_t stride)
{
    const int lane = threadIdx.x % GPU_WARP;
    float amax[K];
    int s[K];
#pragma unroll
    for (int k = 0; k < K; k++)
        amax[k] = fabsf(v[k]);
    for (int m = GPU_WARP / 2; m > 0; m /= 2)
#pragma unroll
        for (int k = 0; k < K; k++)
            amax[k] = fmaxf(amax[k], gpu_shfl_xor(amax[k], m));
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int qi = __float2int_rn(v[k] * (amax[k] != 0.0f ? 127.0f / amax[k] : 0.0f));
        if (k < n_live)
            q8[c0 + k * stride + lane] = (int8_t)qi;
        s[k] = qi;
    }
    for (int m = 8; m > 0; m /= 2)
#pragma unroll
        for (int k = 0; k < K; k++)
            s[k] += gpu_shfl_xor(s[k], m);
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int s_hi = gpu_shfl(s[k], 16);
        if (lane == 0 && k < n_live) {
            int32_t *mk = meta + 4 * ((c0 + k * stride) / 32);
            mk[0] = __float_as_int(amax[k] / 127.0f);
            mk[1] = s[k];
            mk[2] = s_hi;
            mk[3] = 0;
        }
    }
}

/* N chunks (N a multiple of Q8_GROUP) in groups of Q8_GROUP; a group of
 * one live chunk (a row of one chunk a warp: the combine's slice, a staged
 * hidden row) alone, without the dead chunks' shuffles. */
template <int N>
static inline __device__ void q8_warp_store_n(const float *v, int n_live, int8_t *q8, int32_t *meta, int64_t c0,
                                              int64_t stride)
{
    static_assert(N % Q8_GROUP == 0, "whole groups");
#pragma unroll
    for (int k = 0; k < N; k += Q8_GROUP) {
        if (n_live - k == 1)
            q8_warp_store_k<1>(v + k, 1, q8, meta, c0 + k * stride, stride);
        else if (k < n_live)
            q8_warp_store_k<Q8_GROUP>(v + k, n_live - k, q8, meta, c0 + k * stride, stride);
    }
}

/* One chunk: q8 / meta point at the chunk's first byte / its 4 meta
 * words. */
static inline __device__ void q8_warp_store(float v, int8_t *q8, int32_t *meta)
{
    q8_warp_store_k<1>(&v, 1, q8, meta, 0, 0);
}

/* The RMSNorm scale of a row of n values from its sum of squares. */
static inline __device__ float norm_scale(double sumsq, int64_t n, float eps)
{
    return 1.0f / sqrtf((float)(sumsq / (double)n) + eps);
}

/* Row `row` of the output from xr (n values) and its sum of squares. */
static inline __device__ void row_norm_store(const float *xr, int64_t n, double sumsq, const gk_norm_out *o,
                                             int64_t row)
{
    const float scale = norm_scale(sumsq, n, o->eps);
    float *yr = o->y + row * n;
    if (o->q == NULL) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            yr[i] = o->gain != NULL ? __ldcg(xr + i) * scale * o->gain[i] : __ldcg(xr + i) * scale;
        return;
    }
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    for (int64_t c0 = (int64_t)warp * GPU_WARP; c0 < n; c0 += blockDim.x) {
        const int64_t i = c0 + lane;
        const float v = o->gain != NULL ? __ldcg(xr + i) * scale * o->gain[i] : __ldcg(xr + i) * scale;
        yr[i] = v;
        q8_warp_store(v, o->q + row * n + c0, o->meta + 4 * ((row * n + c0) / 32));
    }
}


/* Values per thread that rmsnorm_row keeps in registers. */
enum { NR_PER_THREAD = 16 };

/* The one-pass RMSNorm's pieces, for a row whose values a block holds in
 * registers (value tid + k * blockDim.x in v[k]; n % 32 == 0, n <= N *
 * blockDim.x; N a multiple of Q8_GROUP).  The sum of squares: per thread
 * in k order, then the block (double, as op_rmsnorm). */
template <int N = NR_PER_THREAD> static inline __device__ double norm_regs_sumsq(const float *v)
{
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < N; k++)
        sum += (double)v[k] * v[k];
    return sum;
}

template <int N = NR_PER_THREAD>
static inline __device__ float norm_regs_scale(const float *v, int64_t n, float eps, double *red)
{
    return norm_scale(block_sum_d(norm_regs_sumsq<N>(v), red), n, eps);
}

/* y = v * scale * gain (g[k]: the gain of v[k], 1 without gain, which
 * changes no bit) into v, then, with write, into out from value `base` on
 * (a span of len values; and its 8-bit form, Q8_GROUP chunks of the warp
 * at a time).  out by reference and a flag, not a pointer that may be
 * NULL: a kernel parameter whose address is chosen at run time is copied
 * to local memory first. */
template <int N = NR_PER_THREAD>
static inline __device__ void norm_regs_apply_at(float *v, const float *g, int64_t len, float scale,
                                                 const gk_norm_out &out, bool write, int64_t base)
{
    /* whole warps: len and blockDim.x are multiples of 32; chunk k of the
     * warp starts at first + k * blockDim.x */
    const int64_t first = (threadIdx.x / GPU_WARP) * GPU_WARP;
    const int n_live = first < len ? (int)((len - first + blockDim.x - 1) / blockDim.x) : 0;
#pragma unroll
    for (int k = 0; k < N; k++) {
        v[k] = k < n_live ? v[k] * scale * g[k] : 0.0f;
        if (write && k < n_live)
            out.y[base + first + (int64_t)k * blockDim.x + threadIdx.x % GPU_WARP] = v[k];
    }
    if (write && out.q != NULL)
        q8_warp_store_n<N>(v, n_live, out.q, out.meta, base + first, blockDim.x);
}

/* The same for the whole row `row` of n values. */
template <int N = NR_PER_THREAD>
static inline __device__ void norm_regs_apply(float *v, const float *g, int64_t n, float scale, const gk_norm_out &out,
                                              bool write, int64_t row)
{
    norm_regs_apply_at<N>(v, g, n, scale, out, write, row * n);
}

/* This thread's values of row xr (through L2: in a launch's tail other
 * blocks wrote it) and their gains. */
template <int N = NR_PER_THREAD>
static inline __device__ void norm_regs_load(const float *xr, int64_t n, const float *gain, float *v, float *g)
{
#pragma unroll
    for (int k = 0; k < N; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        v[k] = i < n ? __ldcg(xr + i) : 0.0f;
        g[k] = i < n && gain != NULL ? gain[i] : 1.0f;
    }
}

/* The whole RMSNorm of row `row` (n values, n % 32 == 0, n <= NR_PER_THREAD
 * * blockDim.x) by the block in one pass: every thread loads its values
 * (tid + k * blockDim.x) and gains at once, so the row costs one round trip
 * to memory instead of one per value (a norm is latency-bound).  The same
 * sum order and formulas as the two-pass path. */
static inline __device__ void rmsnorm_row(const float *xr, int64_t n, const gk_norm_out *o, int64_t row, double *red)
{
    float v[NR_PER_THREAD], g[NR_PER_THREAD];
    norm_regs_load(xr, n, o->gain, v, g);
    const float scale = norm_regs_scale(v, n, o->eps, red);
    norm_regs_apply(v, g, n, scale, *o, true, row);
}

static inline __device__ bool rmsnorm_row_fits(int64_t n)
{
    return n % GPU_WARP == 0 && n <= (int64_t)NR_PER_THREAD * blockDim.x;
}

#endif
