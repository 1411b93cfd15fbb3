/*
 * moe_decode.cu — the end of one decode token's MoE block in one launch:
 * the experts' down projection over every route, the combine into x and
 * the next layer's RMSNorm with its 8-bit form, which took two launches
 * (k_matvec_staged, then k_moe_combine_cl: ~9-12.5 us + 5.6 us on the
 * H200, each bound by its own latency chain; docs/PERFORMANCE.md, "CUDA
 * decode, session 6: the MoE block").
 *
 * Each block stages every route's hidden row h in 8-bit form (quantize.cu's
 * rule, mv_stage_row) and takes a range of output rows for ALL routes, so
 * it adds their weighted sum into x itself, in rank order; the last block
 * to finish (tail.cuh's gk_last_block: no grid barrier, any grid) norms
 * the new x for the next layer.
 *
 * Bits: each (row, route) dot has k_matvec_staged's per-chunk terms in its
 * order, and the combine's sum is moe.cu's (rank order, then added to x),
 * so x is the 4-launch path's bit for bit.  The next norm sums its squares
 * in another order than the combine cluster (one block over the row), so
 * xn may differ in its last bits.
 *
 * (The whole MoE block in one persistent launch — router, top-k and
 * gate/up too, phases meeting at grid barriers — was built and measured
 * slower than the 4 launches: docs/PERFORMANCE.md, "CUDA decode, session
 * 7".)
 */
#include "common.cuh"
#include "grid_sync.cuh"
#include "mv_row.cuh"
#include "row_norm.cuh"
#include "tail.cuh"

enum {
    MD_THREADS = 512, MD_WARPS = MD_THREADS / GPU_WARP,
    MD_NORM_PER = GK_ROUTER_NORM_MAX / MD_THREADS, /* values of the row per thread in the norm */
    MD_PART = 4,                /* routes a warp takes (8: spills at 128 registers) */
    MD_MAX_STAGE = 40 * 1024,   /* dynamic shared memory: the 8-bit rows */
};
static_assert(MD_NORM_PER * MD_THREADS == GK_ROUTER_NORM_MAX, "a row the norm holds in registers");
static_assert(GK_MOE_DC_MAX_USED % MD_PART == 0, "whole parts");

/* The down types the kernel takes (the K-quant mixes and Q8_0), so the
 * instances stay few. */
#define MD_TYPES(X) X(GQ_Q4_K) X(GQ_Q5_K) X(GQ_Q6_K) X(GQ_Q8_0)

/* Bytes of an 8-bit row of n values in shared memory: q, then meta. */
static inline size_t md_stage_bytes(int64_t n)
{
    return (size_t)n + (size_t)n / 32 * sizeof(int4);
}

/* This block's output rows: a range of ceil(n / G). */
static inline __device__ void md_rows_of(int64_t n, int64_t *r0, int64_t *r1)
{
    const int64_t per = (n + gridDim.x - 1) / gridDim.x;
    *r0 = min(n, (int64_t)blockIdx.x * per);
    *r1 = min(n, *r0 + per);
}

/* This block's output rows over every route, a warp taking MD_PART
 * routes of a row (k_matvec_staged's per-chunk terms and order for each),
 * then the combine's weighted sum in rank order added into x.  ys:
 * MD_WARPS x MD_PART floats. */
template <int TD>
static inline __device__ void md_down(const gk_moe_dc &b, const gk_route *rt, const int4 *stage, float *ys)
{
    const int64_t ff = b.down.n_cols;
    const int n_chunks = (int)(ff / 32), n_used = b.n_used, lane = threadIdx.x % GPU_WARP;
    const int warp = threadIdx.x / GPU_WARP, parts = (n_used + MD_PART - 1) / MD_PART;
    const int rows_per_pass = MD_WARPS / parts, part = warp % parts, k0 = part * MD_PART;
    const int8_t *hq = (const int8_t *)stage;
    const int4 *hm = stage + (int64_t)n_used * ff / 16;
    const uint8_t *mat[MD_PART];
#pragma unroll
    for (int k = 0; k < MD_PART; k++)
        mat[k] = expert_matrix(b.down, rt[k0 + k < n_used ? k0 + k : 0].expert);
    int64_t r0, r1;
    md_rows_of(b.down.n_rows, &r0, &r1);
    for (int64_t base = r0; base < r1; base += rows_per_pass) { /* the same trips for every warp: barriers */
        const int64_t r = base + warp / parts;
        const bool live = warp < rows_per_pass * parts && r < r1;
        float acc[MD_PART];
#pragma unroll
        for (int k = 0; k < MD_PART; k++)
            acc[k] = 0.0f;
        for (int c = lane; live && c < n_chunks; c += GPU_WARP) {
            gq_chunk ch[MD_PART];
#pragma unroll
            for (int k = 0; k < MD_PART; k++)
                if (k0 + k < n_used)
                    gq_decode<TD>(mat[k] + r * b.down.row_bytes, c, &ch[k]);
#pragma unroll
            for (int k = 0; k < MD_PART; k++) {
                if (k0 + k >= n_used)
                    break;
                int32_t a[8];
                mv_act_chunk(hq + (k0 + k) * ff + 32 * c, a);
                const int4 m = hm[(k0 + k) * n_chunks + c];
                acc[k] += __int_as_float(m.x) * gq_chunk_dot<TD>(&ch[k], a, m.y, m.z);
            }
        }
#pragma unroll
        for (int k = 0; k < MD_PART; k++) {
            const float y = warp_sum(acc[k]) + 0.0f; /* k_matvec_staged's "+ no bias" */
            if (lane == 0)
                ys[warp * MD_PART + k] = y;
        }
        __syncthreads();
        if (live && part == 0 && lane == 0) {
            float sub = 0.0f;
            for (int k = 0; k < n_used; k++)
                sub += rt[k].weight * ys[(warp + k / MD_PART) * MD_PART + k % MD_PART];
            b.x[r] = b.x[r] + sub;
        }
        __syncthreads();
    }
}

/* With next: the last block to finish (every row of x written) norms x
 * for the next layer, f32 and 8-bit form (512 threads, 4 values each;
 * norm_regs_load reads x through L2). */
static inline __device__ void md_next_norm(const gk_moe_dc &b, const gk_norm_out &next, double *red)
{
    if (next.y == NULL || !gk_last_block(b.counter, gridDim.x))
        return;
    float v[MD_NORM_PER], g[MD_NORM_PER];
    const int64_t n = b.down.n_rows;
    norm_regs_load<MD_NORM_PER>(b.x, n, next.gain, v, g);
    const float scale = norm_regs_scale<MD_NORM_PER>(v, n, next.eps, red);
    norm_regs_apply<MD_NORM_PER>(v, g, n, scale, next, true, 0);
}

template <int TD>
__global__ void __launch_bounds__(MD_THREADS, 1) k_moe_down_combine(const gk_moe_dc b, const gk_norm_out next)
{
    __shared__ double red[MD_WARPS];
    __shared__ gk_route rt[GK_MOE_DC_MAX_USED];
    __shared__ float ys[MD_WARPS * MD_PART];
    extern __shared__ int4 md_stage[];
    gpu_pdl_wait();
    if (threadIdx.x < b.n_used)
        rt[threadIdx.x] = b.routes[threadIdx.x];
    mv_stage_row(b.h, (int64_t)b.n_used * b.down.n_cols, md_stage);
    __syncthreads();
    md_down<TD>(b, rt, md_stage, ys);
    md_next_norm(b, next, red);
}

static bool md_type(uint32_t t)
{
#define MD_TYPE_(T) if (t == T) return true;
    MD_TYPES(MD_TYPE_)
#undef MD_TYPE_
    return false;
}

extern "C" bool gk_moe_down_combine_fits(const gk_moe_dc *b)
{
    const int64_t n = b->down.n_rows, ff = b->down.n_cols;
    return gk_clusters_supported() && b->n_used >= 1 && b->n_used <= GK_MOE_DC_MAX_USED && n % 32 == 0 &&
           n <= GK_ROUTER_NORM_MAX && ff % 32 == 0 && md_type(b->down.type) &&
           md_stage_bytes((int64_t)b->n_used * ff) <= MD_MAX_STAGE;
}

template <int TD> static int md_launch(gpuStream_t s, const gk_moe_dc *b, const gk_norm_out *next)
{
    const size_t smem = md_stage_bytes((int64_t)b->n_used * b->down.n_cols);
    const int parts = (b->n_used + MD_PART - 1) / MD_PART, rows = MD_WARPS / parts;
    /* one wave: a block holds a multiprocessor's registers, so fewer,
     * longer blocks (each stages all of h once) */
    const int64_t wanted = (b->down.n_rows + rows - 1) / rows;
    const int resident = gk_coresident_blocks(k_moe_down_combine<TD>, MD_THREADS, smem);
    const unsigned blocks = (unsigned)(resident > 0 && resident < wanted ? resident : wanted);
    return gk_launch(k_moe_down_combine<TD>, dim3(blocks), MD_THREADS, smem, s, *b, *next);
}

extern "C" int gk_moe_down_combine(gpuStream_t s, const gk_moe_dc *b, const gk_norm_out *next)
{
    if (!gk_moe_down_combine_fits(b) || (next != NULL && next->q != NULL && next->meta == NULL))
        return (int)gpuErrorInvalidValue;
    const gk_norm_out none = {};
    const gk_norm_out *nx = next != NULL ? next : &none;
    switch (b->down.type) {
#define MD_CASE_(T)                                                                                              \
    case T:                                                                                                      \
        return md_launch<T>(s, b, nx);
        MD_TYPES(MD_CASE_)
#undef MD_CASE_
    default:
        return (int)gpuErrorInvalidValue;
    }
}
