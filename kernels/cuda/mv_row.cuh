/*
 * mv_row.cuh — what the staged decode matvec (matvec.cu) and the MoE
 * block's down + combine launch (moe_decode.cu) share, so that both
 * compute the same bits: the staging of a float row into its 8-bit form in
 * shared memory, and a chunk's 32 activation bytes as 8 words.
 */
#ifndef HYDRA_CUDA_MV_ROW_CUH
#define HYDRA_CUDA_MV_ROW_CUH

#include "common.cuh"
#include "row_norm.cuh"

/* The 32 activation bytes of a chunk (16-byte aligned) as 8 words. */
static inline __device__ void mv_act_chunk(const int8_t *p, int32_t *a)
{
    const int4 a0 = ((const int4 *)p)[0], a1 = ((const int4 *)p)[1];
    a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w, a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
}

/* Staging (staged launches, one activation row per block): the block
 * quantises its float row into shared memory itself, by quantize.cu's rule
 * (q8_warp_store), instead of reading the 8-bit form that a quantize
 * launch would have written: one launch fewer per step for the expert
 * down projection.  Shared: n bytes of q, then n / 32 int4 of meta.  Eight
 * values per thread are loaded before any is quantised, so a row of up to
 * 8 x 128 values costs one round trip, and their quantisations interleave
 * (q8_warp_store_k). */
enum { MV_STAGE_LOADS = 8 };

static inline __device__ void mv_stage_row(const float *xf, int64_t n, int4 *stage)
{
    int8_t *q = (int8_t *)stage;
    int32_t *meta = (int32_t *)(stage + n / 16);
    const int64_t step = blockDim.x, first = (threadIdx.x / GPU_WARP) * GPU_WARP;
    for (int64_t c0 = first; c0 < n; c0 += MV_STAGE_LOADS * step) {
        float v[MV_STAGE_LOADS];
#pragma unroll
        for (int u = 0; u < MV_STAGE_LOADS; u++)
            v[u] = c0 + u * step < n ? xf[c0 + u * step + threadIdx.x % GPU_WARP] : 0.0f;
        const int n_live = (int)((n - c0 + step - 1) / step); /* whole warps: n % 32 == 0 */
        q8_warp_store_n<MV_STAGE_LOADS>(v, n_live, q, meta, c0, step);
    }
}

#endif
