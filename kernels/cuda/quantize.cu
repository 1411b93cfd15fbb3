/*
 * quantize.cu — activation rows to the 8-bit form the quantised matvec
 * reads: per 32 values d = amax / 127 and q = round-half-even(x * 127 /
 * amax) (0 when amax is 0), the rule of the CPU's Q8_0/Q8_K activations
 * (kernels/cpu/quant_ref.h), plus each half's sum of q for the formats'
 * offset terms.  One warp per 32 values.
 */
#include "common.cuh"

__global__ void k_quantize(const float *x, int64_t total, int8_t *q, int32_t *meta)
{
    gpu_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) /* total is a multiple of 32: whole warps leave */
        return;
    const float v = x[i];
    const float amax = warp_max(fabsf(v));
    const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int qi = __float2int_rn(v * iscale);
    q[i] = (int8_t)qi;
    /* half sums: lanes 0..15 and 16..31 reduce separately */
    int s = qi;
    for (int m = 8; m > 0; m /= 2)
        s += gpu_shfl_xor(s, m);
    const int s_hi = gpu_shfl(s, 16);
    if (threadIdx.x % GPU_WARP == 0) {
        int32_t *mt = meta + 4 * (i / 32);
        mt[0] = __float_as_int(amax / 127.0f);
        mt[1] = s;
        mt[2] = s_hi;
        mt[3] = 0;
    }
}

extern "C" int gk_quantize_rows(gpuStream_t s, const float *x, int64_t n_rows, int64_t n, int8_t *q, int32_t *meta)
{
    const int64_t total = n_rows * n;
    if (total == 0)
        return 0;
    const int threads = 256;
    return gk_launch(k_quantize, (unsigned)((total + threads - 1) / threads), threads, 0, s, x, total, q, meta);
}
