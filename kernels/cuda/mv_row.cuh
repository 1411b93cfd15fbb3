/*
 * mv_row.cuh — one warp's dot of a quantised weight row with one token's
 * 8-bit activations (gk_act's q and meta), the per-lane sum before the
 * warp's reduction: matvec.cu's chunk order for one token (lane c takes
 * chunks c, c + 32, ...; two per step, both decoded before either is
 * used, so their loads are in flight together; a lane without a second
 * chunk decodes its first again and adds 0 times it), so the same bits as
 * gk_matvec, for attn_layer.cu (activations written by other blocks of
 * the same launch: CG reads them through L2, grid_sync.cuh).
 */
#ifndef HYDRA_CUDA_MV_ROW_CUH
#define HYDRA_CUDA_MV_ROW_CUH

#include "common.cuh"

template <bool CG> static inline __device__ int4 mv_act16(const int4 *p)
{
    if constexpr (CG)
        return __ldcg(p);
    return *p;
}

/* acc[k] = the lane's part of rows[k] . x for k < R: each row's terms in
 * mv_dot1's order, the R rows' chunks decoded together so that a lane has
 * 2 R chunks' loads in flight (rows of one type and length). */
template <int T, bool CG, int R>
static inline __device__ void mv_dot_rows(const uint8_t *const *rows, const int8_t *xq, const int32_t *xmeta,
                                          int n_chunks, float *acc)
{
    const int lane = threadIdx.x % GPU_WARP;
#pragma unroll
    for (int k = 0; k < R; k++)
        acc[k] = 0.0f;
    for (int c = lane; c < n_chunks; c += 2 * GPU_WARP) {
        const bool two = c + GPU_WARP < n_chunks;
        const int c2 = two ? c + GPU_WARP : c;
        gq_chunk ch[R][2];
#pragma unroll
        for (int k = 0; k < R; k++) {
            gq_decode<T>(rows[k], c, &ch[k][0]);
            gq_decode<T>(rows[k], c2, &ch[k][1]);
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int cu = u == 0 ? c : c2;
            const int4 *aq = (const int4 *)(xq + 32 * cu);
            const int4 a0 = mv_act16<CG>(aq), a1 = mv_act16<CG>(aq + 1);
            const int32_t a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const int4 m = mv_act16<CG>((const int4 *)xmeta + cu);
            const float d = u == 0 || two ? __int_as_float(m.x) : 0.0f;
#pragma unroll
            for (int k = 0; k < R; k++)
                acc[k] += d * gq_chunk_dot<T>(&ch[k][u], a, m.y, m.z);
        }
    }
}

/* One row: the lane's part of row . x. */
template <int T, bool CG>
static inline __device__ float mv_dot1(const uint8_t *row, const int8_t *xq, const int32_t *xmeta, int n_chunks)
{
    float acc;
    mv_dot_rows<T, CG, 1>(&row, xq, xmeta, n_chunks, &acc);
    return acc;
}

#endif
