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

/* The block's total of v (double), for every thread. */
static inline __device__ double block_sum_d(double v, double *red)
{
    for (int m = GPU_WARP / 2; m > 0; m /= 2)
        v += gpu_shfl_xor(v, m);
    if (threadIdx.x % GPU_WARP == 0)
        red[threadIdx.x / GPU_WARP] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < (int)(blockDim.x / GPU_WARP); w++)
        total += red[w];
    __syncthreads();
    return total;
}

/* The 8-bit form of 32 values held one per lane of a warp (value i of the
 * chunk in lane i), by the rule of quantize.cu: d = amax / 127, q =
 * round-half-even(v * 127 / amax) (0 when amax is 0), each half's sum of
 * q.  q8 / meta point at the chunk's first byte / its 4 meta words; every
 * lane of the warp calls it. */
static inline __device__ void q8_warp_store(float v, int8_t *q8, int32_t *meta)
{
    const int lane = threadIdx.x % GPU_WARP;
    const float amax = warp_max(fabsf(v));
    const int qi = __float2int_rn(v * (amax != 0.0f ? 127.0f / amax : 0.0f));
    q8[lane] = (int8_t)qi;
    int s = qi;
    for (int m = 8; m > 0; m /= 2)
        s += gpu_shfl_xor(s, m);
    const int s_hi = gpu_shfl(s, 16);
    if (lane == 0) {
        meta[0] = __float_as_int(amax / 127.0f);
        meta[1] = s;
        meta[2] = s_hi;
        meta[3] = 0;
    }
}

/* Row `row` of the output from xr (n values) and its sum of squares. */
static inline __device__ void row_norm_store(const float *xr, int64_t n, double sumsq, const gk_norm_out *o,
                                             int64_t row)
{
    const float scale = 1.0f / sqrtf((float)(sumsq / (double)n) + o->eps);
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
 * registers (value tid + k * blockDim.x in v[k]; n % 32 == 0, n <=
 * NR_PER_THREAD * blockDim.x).  The sum of squares: per thread in k order,
 * then the block (double, as op_rmsnorm). */
static inline __device__ float norm_regs_scale(const float *v, int64_t n, float eps, double *red)
{
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < NR_PER_THREAD; k++)
        sum += (double)v[k] * v[k];
    sum = block_sum_d(sum, red);
    return 1.0f / sqrtf((float)(sum / (double)n) + eps);
}

/* y = v * scale * gain (g[k]: the gain of v[k], 1 without gain, which
 * changes no bit) into v, then, with out, into row `row` of the output
 * (and its 8-bit form). */
static inline __device__ void norm_regs_apply(float *v, const float *g, int64_t n, float scale, const gk_norm_out *out,
                                              int64_t row)
{
#pragma unroll
    for (int k = 0; k < NR_PER_THREAD; k++) {
        const int64_t c0 = (int64_t)k * blockDim.x + (threadIdx.x / GPU_WARP) * GPU_WARP;
        if (c0 >= n) /* whole warps: n and blockDim.x are multiples of 32 */
            break;
        const int64_t i = c0 + threadIdx.x % GPU_WARP;
        v[k] = v[k] * scale * g[k];
        if (out == NULL)
            continue;
        out->y[row * n + i] = v[k];
        if (out->q != NULL)
            q8_warp_store(v[k], out->q + row * n + c0, out->meta + 4 * ((row * n + c0) / 32));
    }
}

/* This thread's values of row xr (through L2: in a launch's tail other
 * blocks wrote it) and their gains. */
static inline __device__ void norm_regs_load(const float *xr, int64_t n, const float *gain, float *v, float *g)
{
#pragma unroll
    for (int k = 0; k < NR_PER_THREAD; k++) {
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
    norm_regs_apply(v, g, n, scale, o, row);
}

static inline __device__ bool rmsnorm_row_fits(int64_t n)
{
    return n % GPU_WARP == 0 && n <= (int64_t)NR_PER_THREAD * blockDim.x;
}

#endif
