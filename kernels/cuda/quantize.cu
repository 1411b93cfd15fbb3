/*
 * quantize.cu — activation rows to the 8-bit form the quantised matvec
 * reads: per 32 values d = amax / 127 and q = round-half-even(x * 127 /
 * amax) (0 when amax is 0), the rule of the CPU's Q8_0/Q8_K activations
 * (kernels/cpu/quant_ref.h), plus each half's sum of q for the formats'
 * offset terms.  One warp per 32 values.
 *
 * Prefill's tile matmul of quantised weights (mmq.cu) reads the rows as
 * f16 instead (gk_rows_to_f16): mmq.cu says why.
 */
#include "common.cuh"

/* Quantises this lane's value v of a warp's 32 into q[i] and the block's
 * meta (d, half sums). */
static inline __device__ void quantize_lane(float v, int64_t i, int8_t *q, int32_t *meta)
{
    const float amax = warp_max(fabsf(v));
    const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int qi = __float2int_rn(v * iscale);
    q[i] = (int8_t)qi;
    /* half sums: lanes 0..15 and 16..31 reduce separately */
    int s = qi;
    for (int m = 8; m > 0; m /= 2)
        s += gpu_shfl_xor(s, m);
    const int s_hi = gpu_shfl(s, 16);
    const float d = amax / 127.0f;
    if (threadIdx.x % GPU_WARP == 0) {
        int32_t *mt = meta + 4 * (i / 32);
        mt[0] = __float_as_int(d);
        mt[1] = s;
        mt[2] = s_hi;
        mt[3] = 0;
    }
}

__global__ void k_quantize(const float *x, int64_t total, int8_t *q, int32_t *meta)
{
    gpu_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) /* total is a multiple of 32: whole warps leave */
        return;
    quantize_lane(x[i], i, q, meta);
}

/* Four floats a thread, rounded to nearest f16. */
__global__ void k_to_f16(const float4 *x, int64_t n4, uint2 *h)
{
    gpu_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4)
        return;
    const float4 v = x[i];
    const half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
    h[i] = make_uint2(*(const unsigned *)&lo, *(const unsigned *)&hi);
}

enum { QZ_THREADS = 256 };

extern "C" int gk_quantize_rows(gpuStream_t s, const float *x, int64_t n_rows, int64_t n, int8_t *q, int32_t *meta)
{
    const int64_t total = n_rows * n;
    if (total == 0)
        return 0;
    const unsigned blocks = (unsigned)((total + QZ_THREADS - 1) / QZ_THREADS);
    return gk_launch(k_quantize, blocks, QZ_THREADS, 0, s, x, total, q, meta);
}

extern "C" int gk_rows_to_f16(gpuStream_t s, const float *x, int64_t n_rows, int64_t n, uint16_t *h)
{
    const int64_t n4 = n_rows * n / 4;
    if (n % 4 != 0)
        return (int)gpuErrorInvalidValue;
    if (n4 == 0)
        return 0;
    const unsigned blocks = (unsigned)((n4 + QZ_THREADS - 1) / QZ_THREADS);
    return gk_launch(k_to_f16, blocks, QZ_THREADS, 0, s, (const float4 *)x, n4, (uint2 *)h);
}
