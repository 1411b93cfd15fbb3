/*
 * quantize.cu — activation rows to the 8-bit form the quantised matvec
 * reads: per 32 values d = amax / 127 and q = round-half-even(x * 127 /
 * amax) (0 when amax is 0), the rule of the CPU's Q8_0/Q8_K activations
 * (kernels/cpu/quant_ref.h), plus each half's sum of q for the formats'
 * offset terms.  One warp per 32 values.
 *
 * The two-level form (prefill's tile matmul, mmq.cu) adds the residual
 * r = x - d q quantised by the same rule into q_lo / meta_lo, so x = d q +
 * d_lo q_lo to within d_lo / 2 <= amax / 2 / 127 / 254: about 15 bits per
 * block instead of 8, for two integer products.  Prefill then rounds its
 * inputs less than f16 tiles did (an 8-bit-only prefill moved a greedy
 * continuation of the Q4_K_M reference model off the reference at a step
 * with a 0.29 logit margin); level 1 stays the matvec's form bit for bit.
 */
#include "common.cuh"

/* Quantises this lane's value v of a warp's 32 into q[i] and the block's
 * meta (d, half sums); returns the scale d. */
static inline __device__ float quantize_lane(float v, int64_t i, int8_t *q, int32_t *meta)
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
    return d * (float)qi;
}

template <bool TWO_LEVEL>
__global__ void k_quantize(const float *x, int64_t total, int8_t *q, int32_t *meta, int8_t *q_lo, int32_t *meta_lo)
{
    gpu_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) /* total is a multiple of 32: whole warps leave */
        return;
    const float v = x[i];
    const float hi = quantize_lane(v, i, q, meta);
    if constexpr (TWO_LEVEL)
        quantize_lane(v - hi, i, q_lo, meta_lo);
}

static int quantize_launch(gpuStream_t s, const float *x, int64_t n_rows, int64_t n, int8_t *q, int32_t *meta,
                           int8_t *q_lo, int32_t *meta_lo)
{
    const int64_t total = n_rows * n;
    if (total == 0)
        return 0;
    const int threads = 256;
    const unsigned blocks = (unsigned)((total + threads - 1) / threads);
    if (q_lo == NULL)
        return gk_launch(k_quantize<false>, blocks, threads, 0, s, x, total, q, meta, q_lo, meta_lo);
    return gk_launch(k_quantize<true>, blocks, threads, 0, s, x, total, q, meta, q_lo, meta_lo);
}

extern "C" int gk_quantize_rows(gpuStream_t s, const float *x, int64_t n_rows, int64_t n, int8_t *q, int32_t *meta)
{
    return quantize_launch(s, x, n_rows, n, q, meta, NULL, NULL);
}

extern "C" int gk_quantize_rows_2level(gpuStream_t s, const float *x, int64_t n_rows, int64_t n, int8_t *q,
                                       int32_t *meta, int8_t *q_lo, int32_t *meta_lo)
{
    if (q_lo == NULL || meta_lo == NULL)
        return (int)gpuErrorInvalidValue;
    return quantize_launch(s, x, n_rows, n, q, meta, q_lo, meta_lo);
}
