/*
 * row_norm.cuh — the second half of RMSNorm, shared by the norm kernel and
 * the MoE combine that ends a layer (which norms the row it has just
 * summed, for the next layer): given a row's sum of squares, write
 * y = x / rms * gain and, with q, the 8-bit form of y by the rule of
 * quantize.cu (one warp per 32 values).  Blocks of GK_NORM_THREADS threads;
 * the sum of squares in double, as op_rmsnorm.
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

/* Row `row` of the output from xr (n values) and its sum of squares. */
static inline __device__ void row_norm_store(const float *xr, int64_t n, double sumsq, const gk_norm_out *o,
                                             int64_t row)
{
    const float scale = 1.0f / sqrtf((float)(sumsq / (double)n) + o->eps);
    float *yr = o->y + row * n;
    if (o->q == NULL) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            yr[i] = o->gain != NULL ? xr[i] * scale * o->gain[i] : xr[i] * scale;
        return;
    }
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    for (int64_t c0 = (int64_t)warp * GPU_WARP; c0 < n; c0 += blockDim.x) {
        const int64_t i = c0 + lane;
        const float v = o->gain != NULL ? xr[i] * scale * o->gain[i] : xr[i] * scale;
        yr[i] = v;
        const float amax = warp_max(fabsf(v));
        const int qi = __float2int_rn(v * (amax != 0.0f ? 127.0f / amax : 0.0f));
        o->q[row * n + i] = (int8_t)qi;
        int s = qi;
        for (int m = 8; m > 0; m /= 2)
            s += gpu_shfl_xor(s, m);
        const int s_hi = gpu_shfl(s, 16);
        if (lane == 0) {
            int32_t *mt = o->meta + 4 * ((row * n + c0) / 32);
            mt[0] = __float_as_int(amax / 127.0f);
            mt[1] = s;
            mt[2] = s_hi;
            mt[3] = 0;
        }
    }
}

#endif
