/*
 * mv_row.cuh — the pieces of a decode matvec that the one-launch MoE block
 * (moe_decode.cu) shares with matvec.cu, so that both compute the same
 * bits: a quantised row's dot with 8-bit activations (the per-chunk terms
 * and their order), the float router's 8-value groups, and the staging of
 * a float row into its 8-bit form in shared memory.
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

/* A warp's dot of a quantised row (and with GLU the up row row2) with
 * n_tok activation rows in 8-bit form (row t: x_n bytes from xq + t * x_n,
 * its meta int4 t * (x_n / 32) on from xm): lane l takes chunks l, l + 64,
 * ... and their neighbours 32 further, two chunks per step, both decoded
 * before either is used, so their loads are in flight together; a lane
 * without a second chunk decodes its first again and adds nothing for it.
 * acc[t] (acc2[t]) hold the lane's partial sums. */
template <int T, bool GLU, int NT>
static __device__ __forceinline__ void mv_dot_row(const uint8_t *row, const uint8_t *row2, int n_chunks, int n_tok,
                                                  const int8_t *xq, const int4 *xm, int64_t x_n, float *acc,
                                                  float *acc2)
{
    const int lane = threadIdx.x % GPU_WARP;
    for (int c = lane; c < n_chunks; c += 2 * GPU_WARP) {
        const bool two = c + GPU_WARP < n_chunks;
        const int c2 = two ? c + GPU_WARP : c;
        gq_chunk ch[2], chg[2];
        gq_decode<T>(row, c, &ch[0]);
        gq_decode<T>(row, c2, &ch[1]);
        if (GLU) {
            gq_decode<T>(row2, c, &chg[0]);
            gq_decode<T>(row2, c2, &chg[1]);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n_tok)
                break;
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int cu = u == 0 ? c : c2;
                int32_t a[8];
                mv_act_chunk(xq + t * x_n + 32 * cu, a);
                const int4 m = xm[t * (x_n / 32) + cu];
                const float d = u == 0 || two ? __int_as_float(m.x) : 0.0f;
                acc[t] += d * gq_chunk_dot<T>(&ch[u], a, m.y, m.z);
                if (GLU)
                    acc2[t] += d * gq_chunk_dot<T>(&chg[u], a, m.y, m.z);
            }
        }
    }
}

/* Eight consecutive values of a float-format row (i % 8 == 0). */
template <int T> static inline __device__ void float8(const uint8_t *row, int64_t i, float *w)
{
    if constexpr (T == GQ_F32) {
        const float4 a = *(const float4 *)(row + 4 * i), b = *(const float4 *)(row + 4 * i + 16);
        w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    } else {
        const int4 raw = *(const int4 *)(row + 2 * i);
        const uint32_t u[4] = {(uint32_t)raw.x, (uint32_t)raw.y, (uint32_t)raw.z, (uint32_t)raw.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint16_t lo = (uint16_t)(u[k] & 0xFFFF), hi = (uint16_t)(u[k] >> 16);
            w[2 * k] = T == GQ_F16 ? gpu_half_bits_to_float(lo) : bf16_bits_to_float(lo);
            w[2 * k + 1] = T == GQ_F16 ? gpu_half_bits_to_float(hi) : bf16_bits_to_float(hi);
        }
    }
}

template <int T> static inline __device__ float float_at(const uint8_t *row, int64_t i)
{
    if constexpr (T == GQ_F32)
        return ((const float *)row)[i];
    const uint16_t h = ((const uint16_t *)row)[i];
    return T == GQ_F16 ? gpu_half_bits_to_float(h) : bf16_bits_to_float(h);
}

/* acc[t] += w[0..7] . x[0..7] (and acc2 with the up row's w2), in
 * value order. */
template <bool GLU>
static inline __device__ void dot8(const float *wv, const float *wv2, const float *xp, float &acc, float &acc2)
{
    const float4 x0 = ((const float4 *)xp)[0], x1 = ((const float4 *)xp)[1];
    const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        acc = fmaf(wv[k], xv[k], acc);
        if (GLU)
            acc2 = fmaf(wv2[k], xv[k], acc2);
    }
}

/* Staging (staged launches, one activation row per block): the block
 * quantises its float row into shared memory itself, by quantize.cu's rule
 * (q8_warp_store), instead of reading the 8-bit form that a quantize
 * launch would have written: one launch fewer per step for the expert
 * down projection.  Shared: n bytes of q, then n / 32 int4 of meta.  Eight
 * values per thread are loaded before any is quantised, so a row of up to
 * 8 x 128 values costs one round trip, and their quantisations interleave
 * (q8_warp_store_k).  L2: the row was written by another block of the
 * same launch (moe_decode.cu), so it is read through L2 (__ldcg). */
enum { MV_STAGE_LOADS = 8 };

template <bool L2 = false> static inline __device__ void mv_stage_row(const float *xf, int64_t n, int4 *stage)
{
    int8_t *q = (int8_t *)stage;
    int32_t *meta = (int32_t *)(stage + n / 16);
    const int64_t step = blockDim.x, first = (threadIdx.x / GPU_WARP) * GPU_WARP;
    for (int64_t c0 = first; c0 < n; c0 += MV_STAGE_LOADS * step) {
        float v[MV_STAGE_LOADS];
#pragma unroll
        for (int u = 0; u < MV_STAGE_LOADS; u++)
            if (c0 + u * step < n) {
                const float *p = xf + c0 + u * step + threadIdx.x % GPU_WARP;
                v[u] = L2 ? __ldcg(p) : *p;
            } else {
                v[u] = 0.0f;
            }
        const int n_live = (int)((n - c0 + step - 1) / step); /* whole warps: n % 32 == 0 */
        q8_warp_store_n<MV_STAGE_LOADS>(v, n_live, q, meta, c0, step);
    }
}

#endif
