/*
 * matvec_head.cu — one token's product with a large quantised matrix whose
 * rows are read once per step at the memory's pace: the output projection
 * (Qwen3-30B-A3B: 151936 Q6_K rows, 255 MB; docs/PERFORMANCE.md "CUDA
 * decode, session 6").  matvec.cu's kernel has each lane decode its
 * chunks straight from global memory: a Q6_K chunk is 16 two-byte loads
 * of low bits and 16 of high bits, 64 bytes requested for 24 used, spread
 * over the row, so the launch is bound by the L1's load throughput (1.8
 * TB/s), not by the memory.  Here a warp first copies its row into shared
 * memory with 16-byte loads (every byte requested once, coalesced), then
 * decodes the chunks from there exactly as matvec.cu does: the same chunk
 * terms in the same order, so the same bits as gk_matvec.
 */
#include "common.cuh"
#include "mv_row.cuh"

enum { MVH_WARPS = 4, MVH_MAX_ROW_BYTES = 8192 };

/* The types the launch takes (the usual output-projection types). */
#define MVH_TYPES(X) X(GQ_Q4_K) X(GQ_Q5_K) X(GQ_Q6_K) X(GQ_Q8_0)

/* Row r (one per warp) of w . x, for one token: out.y[r] = (accumulate ?
 * out.y[r] : 0) + dot + bias[r].  Shared: MVH_WARPS rows of row_bytes. */
template <int T> __global__ void __launch_bounds__(MVH_WARPS *GPU_WARP) k_matvec_head(gk_mat w, gk_act x, gk_out out)
{
    gpu_pdl_wait();
    extern __shared__ int4 mvh_rows[];
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    const int64_t r = (int64_t)blockIdx.x * MVH_WARPS + warp;
    if (r >= w.n_rows)
        return;
    const int n16 = (int)(w.row_bytes / 16);
    int4 *row16 = mvh_rows + (int64_t)warp * n16;
    const int4 *src = (const int4 *)(w.data + r * w.row_bytes);
    for (int i = lane; i < n16; i += GPU_WARP)
        row16[i] = src[i];
    __syncwarp();
    const uint8_t *row = (const uint8_t *)row16;
    const int n_chunks = (int)(w.n_cols / 32);
    float v = warp_sum(mv_dot1<T, false>(row, x.q, x.meta, n_chunks)); /* matvec.cu's order (mv_row.cuh) */
    if (lane != 0)
        return;
    if (out.bias != NULL)
        v += out.bias[r];
    out.y[r] = out.accumulate ? out.y[r] + v : v;
}

extern "C" bool gk_matvec_head_fits(const gk_mat *w)
{
    bool typed = false;
#define MVH_IS_(T) typed = typed || w->type == T;
    MVH_TYPES(MVH_IS_)
#undef MVH_IS_
    return typed && w->row_bytes % 16 == 0 && w->row_bytes <= MVH_MAX_ROW_BYTES && (uintptr_t)w->data % 16 == 0 &&
           w->n_cols % 32 == 0 && w->expert_data == NULL;
}

extern "C" int gk_matvec_head(gpuStream_t s, const gk_mat *w, const gk_act *x, const gk_out *out)
{
    if (!gk_matvec_head_fits(w) || x->n != w->n_cols)
        return (int)gpuErrorInvalidValue;
    if (w->n_rows == 0)
        return 0;
    const dim3 grid((unsigned)((w->n_rows + MVH_WARPS - 1) / MVH_WARPS));
    const size_t smem = MVH_WARPS * w->row_bytes;
#define MVH_LAUNCH_(T)                                                                                           \
    if (w->type == T)                                                                                            \
        return gk_launch(k_matvec_head<T>, grid, MVH_WARPS * GPU_WARP, smem, s, *w, *x, *out);
    MVH_TYPES(MVH_LAUNCH_)
#undef MVH_LAUNCH_
    return (int)gpuErrorInvalidValue;
}
