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
 * the same for every head of a position, so a warp computes them once. */
typedef struct qr_angles {
    float c[QR_PAIRS_PER_LANE], s[QR_PAIRS_PER_LANE];
} qr_angles;

static inline __device__ qr_angles qr_angles_at(const gk_rope &r, int pos)
{
    const int lane = threadIdx.x % GPU_WARP, half_rot = r.n_rot / 2;
    qr_angles an;
#pragma unroll
    for (int m = 0; m < QR_PAIRS_PER_LANE; m++) {
        an.c[m] = an.s[m] = 0.0f;
        if (lane + GPU_WARP * m < half_rot)
            rope_cos_sin(r, pos, lane + GPU_WARP * m, &an.c[m], &an.s[m]);
    }
    return an;
}

/* hv (shared, dk values) = rope(rmsnorm(src) * gain) (gain NULL: no
 * norm); dk <= RS_MAX_DIM, n_rot <= dk.  Every lane of the warp calls it;
 * hv is complete for the warp on return. */
static inline __device__ void qk_head_warp(const gk_rope &r, const qr_angles &an, float *hv, const float *src,
                                           const float *gain)
{
    const int lane = threadIdx.x % GPU_WARP, dk = r.head_dim_k;
    for (int i = lane; i < dk; i += GPU_WARP)
        hv[i] = src[i];
    __syncwarp();
    if (gain != NULL) {
        double sum = 0.0;
        for (int i = lane; i < dk; i += GPU_WARP)
            sum += (double)hv[i] * hv[i];
        for (int m = GPU_WARP / 2; m > 0; m /= 2)
            sum += gpu_shfl_xor(sum, m);
        const float scale = 1.0f / sqrtf((float)(sum / (double)dk) + r.eps);
        for (int i = lane; i < dk; i += GPU_WARP)
            hv[i] = hv[i] * scale * gain[i];
        __syncwarp();
    }
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
