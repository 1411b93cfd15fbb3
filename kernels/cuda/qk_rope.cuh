/*
 * qk_rope.cuh — one attention head's QK-norm then RoPE, by one warp in
 * shared memory, with the formulas of kernels/cpu/ops.c (the norm's sum of
 * squares in double; rope.cuh's angles).  Shared by k_rope_store (ops.cu)
 * and the one-token attention that does it itself (attention.cu), so the
 * two give the same bits.
 */
#ifndef HYDRA_CUDA_QK_ROPE_CUH
#define HYDRA_CUDA_QK_ROPE_CUH

#include "common.cuh"
#include "rope.cuh"

enum { RS_MAX_DIM = 256, QR_PAIRS_PER_LANE = RS_MAX_DIM / 2 / GPU_WARP };

/* The cos and sin of the pairs i = lane + 32 m (i < n_rot / 2) at pos:
 * the same for every head of a position, so a warp computes them once.
 * The running product pos * theta_scale^i is rope_cos_sin's, multiply
 * by multiply, but a lane continues its chain from pair lane + 32 (m - 1)
 * to lane + 32 m (32 more products, unrolled) instead of starting each
 * pair from pos again: at most 32 QR_PAIRS_PER_LANE dependent products,
 * the same bits. */
typedef struct qr_angles {
    float c[QR_PAIRS_PER_LANE], s[QR_PAIRS_PER_LANE];
} qr_angles;

static inline __device__ qr_angles qr_angles_at(const gk_rope &r, int pos)
{
    const int lane = threadIdx.x % GPU_WARP, half_rot = r.n_rot / 2;
    qr_angles an;
    float theta = (float)pos;
#pragma unroll
    for (int k = 0; k < GPU_WARP; k++)
        if (k < lane)
            theta *= r.theta_scale;
#pragma unroll
    for (int m = 0; m < QR_PAIRS_PER_LANE; m++) {
        an.c[m] = an.s[m] = 0.0f;
        if (lane + GPU_WARP * m < half_rot)
            rope_cos_sin_of(r, theta, lane + GPU_WARP * m, &an.c[m], &an.s[m]);
        if (m + 1 < QR_PAIRS_PER_LANE && lane + GPU_WARP * (m + 1) < half_rot)
#pragma unroll
            for (int k = 0; k < GPU_WARP; k++)
                theta *= r.theta_scale;
    }
    return an;
}

enum { QR_PER_LANE = RS_MAX_DIM / GPU_WARP };

/* A head's values lane + 32 m (m < QR_PER_LANE; 0 past dk) from src, or
 * 1 where src is NULL (a norm without gain): loads that a warp can issue
 * for several heads before it uses any. */
static inline __device__ void qr_load(const gk_rope &r, const float *src, float *v)
{
    const int lane = threadIdx.x % GPU_WARP;
#pragma unroll
    for (int m = 0; m < QR_PER_LANE; m++) {
        const int i = lane + GPU_WARP * m;
        v[m] = src == NULL ? 1.0f : i < r.head_dim_k ? src[i] : 0.0f;
    }
}

/* hv (shared, dk values) = rope(rmsnorm(v) * g) of a head loaded by
 * qr_load (norm false: rope(v)); dk <= RS_MAX_DIM, n_rot <= dk.  Every
 * lane of the warp calls it; hv is complete for the warp on return. */
static inline __device__ void qk_head_finish(const gk_rope &r, const qr_angles &an, float *hv, float *v,
                                             const float *g, bool norm)
{
    const int lane = threadIdx.x % GPU_WARP, dk = r.head_dim_k;
    if (norm) {
        double sum = 0.0;
#pragma unroll
        for (int m = 0; m < QR_PER_LANE; m++)
            if (lane + GPU_WARP * m < dk)
                sum += (double)v[m] * v[m];
        for (int k = GPU_WARP / 2; k > 0; k /= 2)
            sum += gpu_shfl_xor(sum, k);
        const float scale = 1.0f / sqrtf((float)(sum / (double)dk) + r.eps);
#pragma unroll
        for (int m = 0; m < QR_PER_LANE; m++)
            v[m] = v[m] * scale * g[m];
    }
#pragma unroll
    for (int m = 0; m < QR_PER_LANE; m++)
        if (lane + GPU_WARP * m < dk)
            hv[lane + GPU_WARP * m] = v[m];
    __syncwarp();
    const int half_rot = r.n_rot / 2;
#pragma unroll
    for (int m = 0; m < QR_PAIRS_PER_LANE; m++) {
        const int i = lane + GPU_WARP * m;
        if (i >= half_rot)
            break;
        int ia, ib;
        rope_pair(r.neox, r.n_rot, i, &ia, &ib);
        const float x0 = hv[ia], x1 = hv[ib];
        hv[ia] = x0 * an.c[m] - x1 * an.s[m];
        hv[ib] = x0 * an.s[m] + x1 * an.c[m];
    }
    __syncwarp();
}

/* hv = rope(rmsnorm(src) * gain) (gain NULL: no norm), one head: its
 * values and gains are loaded together, one round trip. */
static inline __device__ void qk_head_warp(const gk_rope &r, const qr_angles &an, float *hv, const float *src,
                                           const float *gain)
{
    float v[QR_PER_LANE], g[QR_PER_LANE];
    qr_load(r, src, v);
    qr_load(r, gain, g);
    qk_head_finish(r, an, hv, v, g, gain != NULL);
}

/* n values of src to the cache row dst (F16 or F32), by one warp. */
static inline __device__ void qr_store_row(void *cache, int64_t dst, const float *src, int n, bool f16)
{
    for (int i = threadIdx.x % GPU_WARP; i < n; i += GPU_WARP) {
        if (f16)
            ((half *)cache)[dst + i] = __float2half_rn(src[i]);
        else
            ((float *)cache)[dst + i] = src[i];
    }
}

#endif
