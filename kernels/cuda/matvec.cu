/*
 * matvec.cu — decode: W . x for a few activation rows.  One warp per
 * weight row; its lanes take the row's 32-value chunks in turn, decode each
 * once and dot it with every token's 8-bit activations by 4-byte integer
 * dot products (quant.cuh says how a chunk's scales and offsets enter).
 * Float weights (F32, F16, BF16) are dotted with the float activations.
 *
 * Routed launches (MoE experts) take one route per grid row: the route's
 * expert selects the matrix, its token (or its own index) the activation
 * row, so the same kernel runs over all of a layer's routes or any subset
 * of them, as the hybrid split needs.  GLU launches read a gate and an up
 * row together and write silu(gate . x) * (up . x).  A router launch
 * (float weights) may end with the MoE top-k in its last block (tail.cuh).
 */
#include "common.cuh"
#include "row_norm.cuh"
#include "tail.cuh"
#include "cluster_async.cuh"
#include "quant_words.cuh"
#include "matvec_rows.cuh"
#include "stamp.cuh"

#include <atomic>

GK_STAMP_TU(matvec)

enum { MV_WARPS = 4, MV_MAX_TOK = GK_MATVEC_MAX_TOK };

/* Blocks an SM that the one-token launches decoding Q6_K rows (k_matvec_q,
 * k_matvec_q_mixed) are compiled for: 48 registers, what the two-byte Q6_K
 * decode took.  The word decode (quant_words.cuh) holds a lane's two
 * chunks' 18 words each and took 60 without the bound: 8 blocks an SM,
 * two waves for Qwen3-30B-A3B's 1280 Q/K/V blocks on 132 SMs
 * (docs/PERFORMANCE.md, "CUDA decode, session 10: the Q6_K launches").
 * Other instances keep the compiler's choice (0: no minimum). */
enum { MV_Q6K_BLOCKS = 10 };

/* Dynamic shared memory a launch may take without the kernel's opt-in
 * (cudaFuncAttributeMaxDynamicSharedMemorySize): 48 KB (CUDA C++
 * Programming Guide, "Shared Memory"). */
enum { MV_SMEM_DEFAULT_MAX = 48 * 1024 };

/* One launch: dense launches may carry up to GK_MATVEC_MAX_MATS matrices
 * of one type reading the same activations (Q, K and V), grid row y
 * selecting the matrix; routed launches carry one (plus up for GLU). */
struct mv_job {
    gk_mat w[GK_MATVEC_MAX_MATS];
    gk_out out[GK_MATVEC_MAX_MATS];
    gk_mat up;
    gk_act x;
    gk_rows rows;
    int blk0[GK_MATVEC_MAX_MATS + 1]; /* dense quantised launches: matrix m's first block (a 1-D grid
                                         over the matrices' own rows, no idle blocks of the shorter ones) */
    int n_mats;
    gk_tail tail;     /* counter NULL: none */
    gk_norm_out norm; /* k_matvec_f<.., NORM>: x.f is the raw row; its RMSNorm (gain, eps) is
                         what the block dots, and block 0 writes it to y, q, meta */
};

/* A route with expert -1 is a hybrid miss (hybrid.cu): the CPU computes
 * it, this block has nothing to do. */
static inline __device__ bool mv_skipped(const gk_rows &rows)
{
    return rows.routes != NULL && rows.routes[blockIdx.y].expert < 0;
}

static inline __device__ mv_place mv_where(const gk_mat &w, const gk_mat &w2, const gk_rows &rows, bool glu)
{
    mv_place p;
    if (rows.routes != NULL) {
        const gk_route rt = rows.routes[blockIdx.y];
        p.w = expert_matrix(w, rt.expert);
        p.w2 = glu ? expert_matrix(w2, rt.expert) : NULL;
        p.act0 = rows.act_by_token ? rt.token : (int64_t)blockIdx.y;
        p.out0 = blockIdx.y;
        p.n_tok = 1;
    } else {
        p.w = w.data;
        p.w2 = glu ? w2.data : NULL;
        p.act0 = 0;
        p.out0 = 0;
        p.n_tok = rows.n_tok;
    }
    return p;
}

/* Lane 0 of the warp holds the full sums after the reductions. */
template <int NT>
static inline __device__ void mv_store(const gk_out &out, const mv_place &p, int64_t r, const float *acc,
                                       const float *acc2, bool glu)
{
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t >= p.n_tok)
            break;
        float v = warp_sum(acc[t]);
        if (glu)
            v = silu(v) * warp_sum(acc2[t]);
        if (threadIdx.x % GPU_WARP != 0)
            continue;
        if (out.bias != NULL)
            v += out.bias[r];
        float *dst = out.y + (p.out0 + t) * out.y_stride + r;
        *dst = out.accumulate ? *dst + v : v;
    }
}

/* The matrix of this block of a dense quantised launch (blk0). */
static inline __device__ int mv_mat_of(const mv_job &job, int blk)
{
    int mat = 0;
#pragma unroll
    for (int m = 1; m < GK_MATVEC_MAX_MATS; m++)
        mat += blk >= job.blk0[m];
    return mat;
}

/* A warp's row of a quantised launch.  NT: the most tokens of a launch
 * (1 for decode and routes, so that the accumulators of unused tokens take
 * no registers).  The one-token GLU launch (experts' gate/up) of Q4_K
 * reads by 16-byte loads where its rows allow. */
template <int T, bool GLU, int NT> static __device__ __forceinline__ void mv_row_q(const mv_job &job, int mat, int blk)
{
    const gk_mat &w = job.w[mat], &w2 = job.up;
    const gk_out &out = job.out[mat];
    const gk_act &x = job.x;
    const gk_rows &rows = job.rows;
    const int64_t r = (int64_t)(blk - job.blk0[mat]) * MV_WARPS + threadIdx.x / GPU_WARP;
    if (r >= w.n_rows)
        return;
    const mv_place p = mv_where(w, w2, rows, GLU);
    const uint8_t *row = p.w + r * w.row_bytes;
    const uint8_t *row2 = GLU ? p.w2 + r * w2.row_bytes : NULL;
    const int n_chunks = (int)(w.n_cols / 32);
    float acc[NT], acc2[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = acc2[t] = 0.0f;
    constexpr bool v16 = T == GQ_Q4_K && GLU && NT == 1;
    if (v16 && mv_rows_v16(row, w.row_bytes) && mv_rows_v16(row2, w2.row_bytes))
        mv_row_dots<T, GLU, NT, v16>(row, row2, n_chunks, x, p, acc, acc2);
    else
        mv_row_dots<T, GLU, NT, false>(row, row2, n_chunks, x, p, acc, acc2);
    gpu_pdl_trigger();
    mv_store<NT>(out, p, r, acc, acc2, GLU);
}

/* Before gpu_pdl_wait(), a dense launch's warp asks L2 for its row (and
 * the up row with GLU): a dense launch's matrices are the model's weights,
 * whose addresses are the launch's parameters, and a prefetch changes no
 * value in any case (common.cuh's warp_prefetch_l2).  The decode's Q/K/V
 * launch then has its rows' DRAM latency overlap the combine's tail (its
 * norm, after its trigger): tg128 503.4 -> 505.8 t/s on the H200.
 * Routed launches do not: the routes may come from the launch just before
 * (the experts' gate/up follows the router), unknown until the wait. */
template <bool GLU> static __device__ __forceinline__ void mv_prefetch_dense(const mv_job &job, int mat, int blk)
{
    const gk_mat &w = job.w[mat];
    const int64_t r = (int64_t)(blk - job.blk0[mat]) * MV_WARPS + threadIdx.x / GPU_WARP;
    if (r >= w.n_rows)
        return;
    warp_prefetch_l2(w.data + r * w.row_bytes, w.row_bytes);
    if (GLU)
        warp_prefetch_l2(job.up.data + r * job.up.row_bytes, job.up.row_bytes);
}

/* A dense launch of several matrices is the Q/K/V projection: it lets
 * the attention launch in at its start (common.cuh's gpu_pdl_trigger);
 * mv_row_q's call after the dots is then a no-op (the first call of a
 * block counts). */
static __device__ __forceinline__ void mv_qkv_trigger(const mv_job &job)
{
    if (job.rows.routes == NULL && job.n_mats > 1)
        gpu_pdl_trigger();
}

template <int T, bool GLU, int NT>
__global__ void __launch_bounds__(MV_WARPS *GPU_WARP, T == GQ_Q6_K && !GLU && NT == 1 ? MV_Q6K_BLOCKS : 0)
    k_matvec_q(const mv_job job)
{
    if (job.rows.routes == NULL)
        mv_prefetch_dense<GLU>(job, mv_mat_of(job, (int)blockIdx.x), (int)blockIdx.x);
    mv_qkv_trigger(job);
    gpu_params_warm(job);
    gpu_pdl_wait();
    if (mv_skipped(job.rows))
        return;
    const int blk = (int)blockIdx.x;
    mv_row_q<T, GLU, NT>(job, job.rows.routes != NULL ? 0 : mv_mat_of(job, blk), blk);
}

/* Dense one-token launches whose last matrix has another type (Q4_K_M's
 * and Q5_K_M's attn_v is Q6_K where Q and K are not): that matrix's grid
 * row decodes with its own type, so Q, K and V still take one launch.
 * Only the pairs below, so the instances stay few.  The last matrix's
 * blocks take the grid's first indices (blocks are placed in index order):
 * its rows are the slower ones (a Q6_K chunk's 20 loads against Q4_K's
 * 8 words and a few bytes), so they should start first, not last. */
#define MV_MIXED_PAIRS(X) X(GQ_Q4_K, GQ_Q6_K) X(GQ_Q5_K, GQ_Q6_K)

template <int T, int TL>
__global__ void __launch_bounds__(MV_WARPS *GPU_WARP, MV_Q6K_BLOCKS) k_matvec_q_mixed(const mv_job job)
{
    const int last0 = job.blk0[job.n_mats - 1], blk = ((int)blockIdx.x + last0) % job.blk0[job.n_mats];
    const int mat = mv_mat_of(job, blk);
    mv_prefetch_dense<false>(job, mat, blk);
    mv_qkv_trigger(job);
    gpu_params_warm(job);
    gpu_pdl_wait();
    GK_STAMP_IF(blockIdx.x == 0 && threadIdx.x == 0, GS_QKV_WAIT);
    if (mat == job.n_mats - 1)
        mv_row_q<TL, false, 1>(job, mat, blk);
    else
        mv_row_q<T, false, 1>(job, mat, blk);
    GK_STAMP_IF(blockIdx.x == 0 && threadIdx.x == 0, GS_QKV_DOTS);
}

/* The staged launch (expert down projections: rows of a few chunks, many
 * routes): each warp takes MVS_ROWS rows, a lane decoding chunk c of all
 * of them before their dots, so a lane has MVS_ROWS chunks' loads in
 * flight and the launch needs a quarter of the blocks (one wave instead
 * of several).  Blocks of MVS_WARPS warps: each block stages the row
 * once for 32 rows, and each warp quantises fewer of its chunks (tg128
 * 360.78 -> 373.64 t/s against 4 warps on the H200; docs/PERFORMANCE.md,
 * "CUDA decode, session 6: the MoE block").  The same per-chunk terms, in
 * the same order, as k_matvec_q, so the same bits as quantize + matvec. */
enum { MVS_WARPS = 8 };

/* The Q6_K and Q4_K instances are compiled for 4 blocks an SM (64
 * registers, no spills), as the two-byte Q6_K decode and the four-byte
 * Q4_K one were: the Q6_K word decode's 4 rows x 18 words took 73 without
 * the bound, the Q4_K 16-byte loads 74 (a 16-byte load fills an aligned
 * 4-register tuple): 3 blocks an SM, and the down launch's 512 blocks
 * (8 routes x 2048 rows) 1.29 waves. */
enum { MVS_MIN_BLOCKS = 4 };

/* The weights do not depend on the staged row, so before staging each
 * lane asks for one 128-byte line of its warp's MVS_ROWS rows (one
 * contiguous run: 1728 bytes on Q4_K, 2520 on Q6_K for 768 columns, within
 * the warp's 32 lines): their DRAM latency overlaps the row's loads,
 * quantisation and barrier (tg128 +0.5% on the H200; docs/PERFORMANCE.md,
 * "CUDA decode, session 7: the down launch's loads first").  A prefetch,
 * not loads into registers: decoded chunks held across the staging took
 * the launch from 64 to 94 (Q4_K) and 128 (Q6_K) registers, half the
 * blocks per SM.  The decode below is unchanged. */
static inline __device__ void mvs_prefetch(const uint8_t *w, const gk_mat &wm, int64_t r0)
{
    const int64_t r1 = r0 + MVS_ROWS < wm.n_rows ? r0 + MVS_ROWS : wm.n_rows;
    warp_prefetch_l2(w + r0 * wm.row_bytes, (size_t)(r1 - r0) * wm.row_bytes);
}

template <int T>
__global__ void __launch_bounds__(MVS_WARPS *GPU_WARP, T == GQ_Q6_K || T == GQ_Q4_K ? MVS_MIN_BLOCKS : 0) k_matvec_staged(const mv_job job)
{
    gpu_params_warm(job);
    gpu_pdl_wait();
    if (mv_skipped(job.rows))
        return;
    const gk_mat &w = job.w[0];
    const gk_out &out = job.out[0];
    const gk_act &x = job.x;
    const mv_place p = mv_where(w, w, job.rows, false);
    const int64_t r0 = ((int64_t)blockIdx.x * MVS_WARPS + threadIdx.x / GPU_WARP) * MVS_ROWS;
    if (r0 < w.n_rows)
        mvs_prefetch(p.w, w, r0);
    extern __shared__ int4 mv_stage[];
    mv_stage_row(x.f + p.act0 * x.n, x.n, mv_stage);
    const int8_t *xq = (const int8_t *)mv_stage;
    const int4 *xm = mv_stage + x.n / 16;
    __syncthreads();
    if (r0 >= w.n_rows)
        return;
    const int lane = threadIdx.x % GPU_WARP;
    float acc[MVS_ROWS];
    constexpr bool v16 = T == GQ_Q4_K;
    if (v16 && mv_rows_v16(p.w, w.row_bytes))
        mvs_dots<T, v16>(p.w, w, r0, xq, xm, acc);
    else
        mvs_dots<T, false>(p.w, w, r0, xq, xm, acc);
    gpu_pdl_trigger();
#pragma unroll
    for (int k = 0; k < MVS_ROWS; k++) {
        const float v = warp_sum(acc[k]) + (out.bias != NULL && r0 + k < w.n_rows ? out.bias[r0 + k] : 0.0f);
        if (lane != 0 || r0 + k >= w.n_rows)
            continue;
        float *dst = out.y + p.out0 * out.y_stride + r0 + k;
        *dst = out.accumulate ? *dst + v : v;
    }
}

/* Float weights: one block per row (the router and small float matrices
 * have few rows, so a warp per row would leave most of the GPU idle). */
enum { MVF_THREADS = 128 };
static_assert(GK_ROUTER_NORM_MAX == NR_PER_THREAD * MVF_THREADS, "a normed router row fits the block's registers");

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

/* NORM (one token, n <= NR_PER_THREAD * MVF_THREADS; the router): every
 * block norms the raw row itself into shared memory before its dot, and
 * block 0 also writes the normed row (and its 8-bit form) for the launches
 * after it, saving the RMSNorm launch.  The norm is rmsnorm_row's.  The
 * block's weight row is loaded before the norm (it does not depend on
 * it), so its loads overlap the row's instead of following the norm. */
enum { MVF_PRE = NR_PER_THREAD / 8 }; /* 8-value groups of a normed row per thread */

template <int T, bool GLU, bool NORM>
__global__ void __launch_bounds__(MVF_THREADS) k_matvec_f(const mv_job job)
{
    gpu_pdl_wait();
    if (mv_skipped(job.rows))
        return;
    const int mat = job.rows.routes != NULL ? 0 : blockIdx.y;
    const gk_mat &w = job.w[mat], &w2 = job.up;
    const gk_out &out = job.out[mat];
    const gk_act &x = job.x;
    const gk_rows &rows = job.rows;
    __shared__ float red[2][MVF_THREADS / GPU_WARP][MV_MAX_TOK];
    __shared__ __align__(16) float xs[NORM ? NR_PER_THREAD * MVF_THREADS : 1];
    const int64_t r = blockIdx.x;
    const mv_place p = mv_where(w, w2, rows, GLU);
    const uint8_t *row = p.w + r * w.row_bytes;
    const uint8_t *row2 = GLU ? p.w2 + r * w2.row_bytes : NULL;
    const int64_t n = w.n_cols, n8 = n % 8 == 0 ? n : 0; /* vector loads need 32-byte aligned rows */
    float acc[MV_MAX_TOK], acc2[MV_MAX_TOK];
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++)
        acc[t] = acc2[t] = 0.0f;
    if constexpr (NORM) { /* one matrix, r < w.n_rows; n % 32 == 0, so n8 == n */
        float wpre[MVF_PRE][8];
#pragma unroll
        for (int u = 0; u < MVF_PRE; u++)
            if (8 * (threadIdx.x + u * MVF_THREADS) < n8)
                float8<T>(row, 8 * (threadIdx.x + u * MVF_THREADS), wpre[u]);
        __shared__ double red_d[MVF_THREADS / GPU_WARP];
        float v[NR_PER_THREAD], g[NR_PER_THREAD];
        norm_regs_load(x.f + p.act0 * x.n, x.n, job.norm.gain, v, g);
        const float scale = norm_regs_scale(v, x.n, job.norm.eps, red_d);
        norm_regs_apply(v, g, x.n, scale, job.norm, blockIdx.x == 0 && blockIdx.y == 0, p.act0);
#pragma unroll
        for (int k = 0; k < NR_PER_THREAD; k++)
            if (threadIdx.x + k * MVF_THREADS < x.n)
                xs[threadIdx.x + k * MVF_THREADS] = v[k];
        __syncthreads();
#pragma unroll
        for (int u = 0; u < MVF_PRE; u++) /* the same values in the same order as the loop below */
            if (8 * (threadIdx.x + u * MVF_THREADS) < n8)
                dot8<false>(wpre[u], NULL, xs + 8 * (threadIdx.x + u * MVF_THREADS), acc[0], acc2[0]);
    }
    if (r >= w.n_rows) /* only in multi-matrix launches, which have no tail */
        return;
    for (int64_t i = 8 * threadIdx.x; !NORM && i < n8; i += 8 * MVF_THREADS) {
        float wv[8], wv2[8];
        float8<T>(row, i, wv);
        if (GLU)
            float8<T>(row2, i, wv2);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= p.n_tok)
                break;
            dot8<GLU>(wv, wv2, x.f + (p.act0 + t) * x.n + i, acc[t], acc2[t]);
        }
    }
    for (int64_t i = n8 + threadIdx.x; i < n; i += MVF_THREADS) {
        const float wv = float_at<T>(row, i), wv2 = GLU ? float_at<T>(row2, i) : 0.0f;
#pragma unroll /* constant indices: acc stays in registers, not local memory */
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= p.n_tok)
                break;
            const float xv = x.f[(p.act0 + t) * x.n + i];
            acc[t] = fmaf(wv, xv, acc[t]);
            acc2[t] = fmaf(wv2, xv, acc2[t]);
        }
    }
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++) {
        if (t >= p.n_tok)
            break;
        const float s = warp_sum(acc[t]), s2 = GLU ? warp_sum(acc2[t]) : 0.0f;
        if (lane == 0) {
            red[0][warp][t] = s;
            red[1][warp][t] = s2;
        }
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < p.n_tok) {
        float v = 0.0f, v2 = 0.0f;
        for (int k = 0; k < MVF_THREADS / GPU_WARP; k++) {
            v += red[0][k][t];
            v2 += red[1][k][t];
        }
        if (GLU)
            v = silu(v) * v2;
        if (out.bias != NULL)
            v += out.bias[r];
        float *dst = out.y + (p.out0 + t) * out.y_stride + r;
        *dst = out.accumulate ? *dst + v : v;
    }
    if (!GLU && job.tail.counter != NULL && gk_last_block(job.tail.counter, gridDim.x * gridDim.y))
        gk_topk_rows(job.tail.gating, out.y, out.y_stride, rows.n_tok, job.tail.routes);
}

/* The router as one thread-block cluster (compute capability 9.0 and
 * later; gk_router_topk) of 16 blocks where the device schedules a cluster
 * that large (a non-portable size: half the rows and bytes an SM of 8),
 * else 8: block b takes experts b * per .. (b + 1) * per - 1, a warp per
 * expert row, its first row's weights loaded before anything else (with
 * NORM every block norms the raw row itself).  Each logit goes straight
 * into block 0's shared memory (st.async), its bytes counted on block 0's
 * mbarrier: block 0 waits for the bytes, the others exit when their
 * logits are sent.  Block 0 turns the logits into probabilities
 * (topk_probs, a warp per token) and ranks them (topk_rank_block).  With
 * NORM the blocks other than 0 write the normed row and its 8-bit form, a
 * 32-value chunk a warp, after their dots: off block 0's path.  The same
 * choices as the last-block tail; a logit is the same terms summed in
 * another order.  (A cluster barrier instead of the mbarrier cost more: its
 * arrive is a MEMBAR.GPU, which waits for the block's global stores, and
 * block 0 read the others' logits one round trip later; docs/PERFORMANCE.md,
 * "CUDA decode, session 9: the router".) */
enum {
    RC_BLOCKS = 8, RC_BLOCKS_BIG = 16, RC_THREADS = 512, RC_WARPS = RC_THREADS / GPU_WARP,
    RC_PRE = GK_ROUTER_NORM_MAX / (8 * GPU_WARP), /* 8-value groups of a lane's first row loaded early */
    RC_NORM_PER = GK_ROUTER_NORM_MAX / RC_THREADS,
    RC_KEY_STRIDE = GK_TAIL_MAX_EXPERTS + 2, /* room for an odd count's zero; rows 16-byte aligned */
};
static_assert(RC_NORM_PER % Q8_GROUP == 0, "a normed row's chunks in whole groups");

/* acc[t] += row . x_t for the 8-value groups from i0 on (stride 8 lanes). */
template <int T>
static inline __device__ void rc_dot_rest(const uint8_t *row, int64_t i0, int64_t n, int64_t n8, const float *xf,
                                          int64_t x_stride, int n_tok, float *acc)
{
    const int lane = threadIdx.x % GPU_WARP;
    float unused = 0.0f;
    for (int64_t i = i0 + 8 * lane; i < n8; i += 8 * GPU_WARP) {
        float wv[8];
        float8<T>(row, i, wv);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++)
            if (t < n_tok)
                dot8<false>(wv, NULL, xf + t * x_stride + i, acc[t], unused);
    }
    for (int64_t i = n8 + lane; i < n; i += GPU_WARP) {
        const float wv = float_at<T>(row, i);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++)
            if (t < n_tok)
                acc[t] = fmaf(wv, xf[t * x_stride + i], acc[t]);
    }
}

/* The normed row xs (n values) and its 8-bit form into out, chunk c of 32
 * values by warp c / (blocks - 1) of block 1 + c % (blocks - 1) (block 0
 * alone in a cluster of one): the same values and, a chunk quantised on
 * its own, the same bytes as norm_regs_apply. */
static inline __device__ void rc_write_normed(const float *xs, int64_t n, const gk_norm_out &out, unsigned rank,
                                              unsigned n_blocks)
{
    const int others = n_blocks > 1 ? (int)n_blocks - 1 : 1, mine = n_blocks > 1 ? (int)rank - 1 : 0;
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    if (mine < 0)
        return;
    for (int64_t c = mine + (int64_t)others * warp; c < n / GPU_WARP; c += (int64_t)others * RC_WARPS) {
        const float v = xs[c * GPU_WARP + lane];
        out.y[c * GPU_WARP + lane] = v;
        if (out.q != NULL)
            q8_warp_store(v, out.q + c * GPU_WARP, out.meta + 4 * c);
    }
}

template <int T, bool NORM>
__global__ void __launch_bounds__(RC_THREADS, 1) k_router_cluster(const mv_job job)
{
    const gk_mat &w = job.w[0];
    const gk_out &out = job.out[0];
    const gk_act &x = job.x;
    const gk_gating &g = job.tail.gating;
    const unsigned rank = cl_rank(), n_blocks = cl_size();
    const int n_tok = job.rows.n_tok, n_expert = g.n_expert, per = (n_expert + (int)n_blocks - 1) / (int)n_blocks;
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    const int64_t n = w.n_cols, n8 = n % 8 == 0 ? n : 0; /* vector loads need 32-byte aligned rows */
    __shared__ __align__(16) float xs[NORM ? GK_ROUTER_NORM_MAX : 1];
    __shared__ __align__(16) float prob[MV_MAX_TOK][GK_TAIL_MAX_EXPERTS]; /* block 0: logits, then probabilities */
    __shared__ __align__(16) unsigned long long key[MV_MAX_TOK][RC_KEY_STRIDE]; /* block 0: the rank order */
    __shared__ int picked_e[MV_MAX_TOK][GK_TAIL_MAX_USED];
    __shared__ float picked_p[MV_MAX_TOK][GK_TAIL_MAX_USED];
    __shared__ __align__(8) uint64_t landed; /* block 0: the other blocks' logits are in prob */
    if (rank == 0 && threadIdx.x == 0)
        cla_expect(&landed, (uint32_t)(sizeof(float) * n_tok * (n_expert - min(per, n_expert))));
    cla_cluster_started(); /* before the wait: it overlaps the previous launch */
    gpu_pdl_wait();
    const int e_first = (int)rank * per + warp;
    const bool has_row = warp < per && e_first < n_expert;
    constexpr int pre = NORM ? RC_PRE : 0; /* several tokens' accumulators leave no registers for it */
    float wpre[NORM ? RC_PRE : 1][8];
#pragma unroll
    for (int u = 0; u < pre; u++)
        if (has_row && 8 * (lane + u * GPU_WARP) < n8)
            float8<T>(w.data + (int64_t)e_first * w.row_bytes, 8 * (lane + u * GPU_WARP), wpre[u]);
    const float *xf = x.f;
    int64_t x_stride = x.n;
    if constexpr (NORM) { /* one token, n % 32 == 0 */
        __shared__ double red_d[RC_WARPS];
        float v[RC_NORM_PER], gn[RC_NORM_PER];
        norm_regs_load<RC_NORM_PER>(x.f, x.n, job.norm.gain, v, gn);
        const float scale = norm_regs_scale<RC_NORM_PER>(v, x.n, job.norm.eps, red_d);
        norm_regs_apply<RC_NORM_PER>(v, gn, x.n, scale, job.norm, false, 0);
#pragma unroll
        for (int k = 0; k < RC_NORM_PER; k++)
            if (threadIdx.x + k * RC_THREADS < x.n)
                xs[threadIdx.x + k * RC_THREADS] = v[k];
        __syncthreads();
        xf = xs;
        x_stride = 0;
    }
    const uint32_t landed_at = cla_in_block(&landed, 0);
    for (int le = warp; le < per && (int)rank * per + le < n_expert; le += RC_WARPS) {
        const int e = (int)rank * per + le;
        const uint8_t *row = w.data + (int64_t)e * w.row_bytes;
        float acc[MV_MAX_TOK], unused = 0.0f;
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++)
            acc[t] = 0.0f;
        int64_t i0 = 0;
        if (le == warp) { /* the row loaded early */
#pragma unroll
            for (int u = 0; u < pre; u++)
#pragma unroll
                for (int t = 0; t < MV_MAX_TOK; t++)
                    if (t < n_tok && 8 * (lane + u * GPU_WARP) < n8)
                        dot8<false>(wpre[u], NULL, xf + t * x_stride + 8 * (lane + u * GPU_WARP), acc[t], unused);
            i0 = 8 * pre * GPU_WARP;
        }
        rc_dot_rest<T>(row, i0, n, n8, xf, x_stride, n_tok, acc);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= n_tok)
                break;
            const float v = warp_sum(acc[t]) + (out.bias != NULL ? out.bias[e] : 0.0f);
            if (lane == 0) {
                if (rank == 0)
                    prob[t][e] = v;
                else
                    cla_send(cla_in_block(&prob[t][e], 0), v, landed_at);
                out.y[t * out.y_stride + e] = v;
            }
        }
    }
    gpu_pdl_trigger(); /* left: the normed row's stores and the top-k in block 0 */
    if constexpr (NORM)
        rc_write_normed(xs, x.n, job.norm, rank, n_blocks);
    if (rank != 0)
        return;
    __syncthreads(); /* this block's logits */
    if (warp < n_tok) {
        cla_wait(&landed); /* the others' */
        float p[TK_PER_LANE];
        topk_probs<false>(g, prob[warp], p);
#pragma unroll
        for (int j = 0; j < TK_PER_LANE; j++) {
            const int e = lane + GPU_WARP * j;
            if (e < n_expert) {
                prob[warp][e] = p[j];
                key[warp][e] = tk_key64(p[j], e);
            }
        }
        if (lane == 0)
            key[warp][n_expert] = 0; /* an odd count's pair */
    }
    __syncthreads();
    topk_rank_block(&key[0][0], RC_KEY_STRIDE, &prob[0][0], GK_TAIL_MAX_EXPERTS, n_tok, n_expert, g.n_used,
                    &picked_e[0][0], &picked_p[0][0], GK_TAIL_MAX_USED);
    __syncthreads();
    topk_write_routes(g, n_tok, &picked_e[0][0], &picked_p[0][0], GK_TAIL_MAX_USED, job.tail.routes);
}

/* The router's cluster size on the current device: 16 where the kernel
 * may take a non-portable size and one such cluster fits, else 8.  Asked of
 * the runtime once per kernel and device (an attribute set on a kernel is
 * the kernel's: each instance asks for itself). */
enum { RC_DEVICES = 16 };
template <int T, bool NORM> static unsigned rc_blocks(void)
{
#if defined(HYDRA_HIP)
    return RC_BLOCKS;
#else
    static std::atomic<unsigned> known[RC_DEVICES]; /* 0: not asked yet */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return RC_BLOCKS;
    if (dev < RC_DEVICES && known[dev].load() != 0)
        return known[dev].load();
    const bool big = cudaFuncSetAttribute(k_router_cluster<T, NORM>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                          1) == cudaSuccess &&
                     gk_max_clusters(k_router_cluster<T, NORM>, RC_BLOCKS_BIG, RC_THREADS) >= 1;
    if (!big)
        (void)cudaGetLastError(); /* the refusal is an answer, not the next call's error */
    const unsigned nb = big ? RC_BLOCKS_BIG : RC_BLOCKS;
    if (dev < RC_DEVICES)
        known[dev].store(nb);
    return nb;
#endif
}

template <int T, bool NORM> static int launch_router_nb(gpuStream_t s, const mv_job *job)
{
    const unsigned nb = rc_blocks<T, NORM>();
    return gk_launch_cluster(k_router_cluster<T, NORM>, dim3(nb), RC_THREADS, 0, s, nb, *job);
}

template <int T> static int launch_router_cluster(gpuStream_t s, const mv_job *job, bool norm)
{
    return norm ? launch_router_nb<T, true>(s, job) : launch_router_nb<T, false>(s, job);
}

/* How a launch reads its activations: the 8-bit form, staged from the
 * float row (quantised launches), or normed from the raw row (float). */
enum mv_input { MV_PLAIN, MV_STAGE, MV_NORM };

/* Blocks per SM of a one-wave launch.  A decode launch is placed under
 * programmatic dependent launch while the launch before it still runs, and
 * its blocks may then pile up on the SMs that are free first, as many as
 * the kernel's occupancy lets in, leaving other SMs without work: the
 * attention output (512 blocks of 4 warps on 132 SMs, 10 an SM allowed)
 * measured tg128 +1.0% capped at its even share, 4 an SM, on the H200, and
 * 1.4% slower when 12 an SM fitted instead of 10 (docs/PERFORMANCE.md,
 * "CUDA decode, session 9: blocks per SM").  The cap is dynamic shared
 * memory (the kernel's own need, or more) sized so that one block more
 * than the share does not fit an SM; the kernels read only the bytes they
 * need, so the results are the same bits.  Launches of more than one wave
 * are left alone (gate/up capped at whole waves, 6 an SM of 8: -0.5%).  Host
 * queries of the runtime, no synchronisation: a captured graph asks once, at
 * capture.  Returns the dynamic shared memory to launch with. */
template <typename Kernel> static size_t mv_spread_smem(Kernel kernel, int threads, dim3 grid, size_t need)
{
#if defined(HYDRA_HIP)
    (void)kernel, (void)threads, (void)grid;
    return need;
#else
    int dev = 0, n_sm = 0, sm_smem = 0, reserved = 0, optin = 0, fit = 0, capped = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, threads, need) != cudaSuccess || n_sm < 1) {
        (void)cudaGetLastError(); /* no cap is an answer, not the next call's error */
        return need;
    }
    const long share = ((long)grid.x * grid.y * grid.z + n_sm - 1) / n_sm;
    if (share >= fit)
        return need;
    const long smem = (long)sm_smem / (share + 1) + 1 - reserved; /* share + 1 blocks overflow the SM */
    if (smem <= (long)need || smem > optin)
        return need;
    if ((smem > MV_SMEM_DEFAULT_MAX &&
         cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&capped, kernel, threads, (size_t)smem) != cudaSuccess ||
        capped != share) {
        (void)cudaGetLastError();
        return need;
    }
    return (size_t)smem;
#endif
}

template <int T, int NT> static int launch_q_nt(gpuStream_t s, dim3 grid, const mv_job *job, bool glu)
{
    const int threads = MV_WARPS * GPU_WARP;
    if (glu) {
        const size_t smem = NT == 1 ? mv_spread_smem(k_matvec_q<T, true, NT>, threads, grid, 0) : 0;
        return gk_launch(k_matvec_q<T, true, NT>, grid, threads, smem, s, *job);
    }
    const size_t smem = NT == 1 ? mv_spread_smem(k_matvec_q<T, false, NT>, threads, grid, 0) : 0;
    return gk_launch(k_matvec_q<T, false, NT>, grid, threads, smem, s, *job);
}

template <int T> static int launch_q(gpuStream_t s, dim3 grid, const mv_job *job, bool glu, mv_input in)
{
    if (in == MV_STAGE) {
        const size_t smem = (size_t)job->x.n + (size_t)job->x.n / 32 * sizeof(int4);
        const dim3 grid_s((unsigned)((job->w[0].n_rows + MVS_WARPS * MVS_ROWS - 1) / (MVS_WARPS * MVS_ROWS)), grid.y);
        return gk_launch(k_matvec_staged<T>, grid_s, MVS_WARPS * GPU_WARP,
                         mv_spread_smem(k_matvec_staged<T>, MVS_WARPS * GPU_WARP, grid_s, smem), s, *job);
    }
    const bool one = job->rows.routes != NULL || job->rows.n_tok == 1;
    return one ? launch_q_nt<T, 1>(s, grid, job, glu) : launch_q_nt<T, MV_MAX_TOK>(s, grid, job, glu);
}

template <int T> static int launch_f(gpuStream_t s, dim3 grid, const mv_job *job, bool glu, mv_input in)
{
    if (in == MV_NORM)
        return gk_launch(k_matvec_f<T, false, true>, grid, MVF_THREADS, 0, s, *job);
    if (glu)
        return gk_launch(k_matvec_f<T, true, false>, grid, MVF_THREADS, 0, s, *job);
    return gk_launch(k_matvec_f<T, false, false>, grid, MVF_THREADS, 0, s, *job);
}

extern "C" bool gk_matvec_mixed(uint32_t type, uint32_t last)
{
#define MV_MIXED_(A, B) if (type == A && last == B) return true;
    MV_MIXED_PAIRS(MV_MIXED_)
#undef MV_MIXED_
    return false;
}

static int launch_mixed(gpuStream_t s, dim3 grid, const mv_job *job, uint32_t type, uint32_t last)
{
#define MV_MIXED_(A, B)                                                                                          \
    if (type == A && last == B)                                                                                  \
        return gk_launch(k_matvec_q_mixed<A, B>, grid, MV_WARPS * GPU_WARP,                                   \
                         mv_spread_smem(k_matvec_q_mixed<A, B>, MV_WARPS * GPU_WARP, grid, 0), s, *job);
    MV_MIXED_PAIRS(MV_MIXED_)
#undef MV_MIXED_
    return (int)gpuErrorInvalidValue;
}

extern "C" bool gk_type_supported(uint32_t type)
{
    return gk_is_float_type(type) || gk_is_quant_type(type);
}

static int mv_launch(gpuStream_t s, mv_job *job, int n_mats, bool glu, mv_input in)
{
    const gk_rows *rows = &job->rows;
    const unsigned n_y = rows->routes != NULL ? (unsigned)rows->n_routes : (unsigned)n_mats;
    int64_t max_rows = 0;
    for (int m = 0; m < n_mats; m++)
        max_rows = job->w[m].n_rows > max_rows ? job->w[m].n_rows : max_rows;
    if (max_rows == 0 || n_y == 0 || (rows->routes == NULL && rows->n_tok == 0))
        return 0;
    if (rows->routes == NULL && rows->n_tok > MV_MAX_TOK)
        return (int)gpuErrorInvalidValue;
    /* staged and normed launches: one activation row per block, whole warps */
    const bool quant = gk_is_quant_type(job->w[0].type);
    if (in != MV_PLAIN && (glu || (rows->routes == NULL && rows->n_tok != 1) || job->x.n % 32 != 0 ||
                           (in == MV_STAGE && (!quant || job->x.n > 32768)) ||
                           (in == MV_NORM && (quant || job->x.n > GK_ROUTER_NORM_MAX || job->w[0].n_cols != job->x.n))))
        return (int)gpuErrorInvalidValue;
    dim3 grid((unsigned)((max_rows + MV_WARPS - 1) / MV_WARPS), n_y);
    const dim3 grid_f((unsigned)max_rows, n_y);
    job->n_mats = n_mats;
    if (rows->routes == NULL) { /* quantised: one block row over every matrix's own rows */
        job->blk0[0] = 0;
        for (int m = 0; m < GK_MATVEC_MAX_MATS; m++)
            job->blk0[m + 1] = job->blk0[m] + (m < n_mats ? (int)((job->w[m].n_rows + MV_WARPS - 1) / MV_WARPS) : 0);
        grid = dim3((unsigned)job->blk0[GK_MATVEC_MAX_MATS], 1);
    }
    const uint32_t last = job->w[n_mats - 1].type;
    if (last != job->w[0].type) /* gk_matvec_multi checked the mix */
        return launch_mixed(s, grid, job, job->w[0].type, last);
    switch (job->w[0].type) {
#define MV_QCASE_(T)                                                                                             \
    case T:                                                                                                      \
        return launch_q<T>(s, grid, job, glu, in);
        GQ_FOR_EACH_QUANT(MV_QCASE_)
#undef MV_QCASE_
#define MV_FCASE_(T)                                                                                             \
    case T:                                                                                                      \
        return launch_f<T>(s, grid_f, job, glu, in);
        GK_FOR_EACH_FLOAT(MV_FCASE_)
#undef MV_FCASE_
    default:
        return (int)gpuErrorInvalidValue;
    }
}

extern "C" int gk_matvec(gpuStream_t s, const gk_mat *w, const gk_mat *w2_glu, const gk_act *x, const gk_rows *rows,
                         const gk_out *out)
{
    mv_job job = {};
    job.w[0] = *w;
    job.out[0] = *out;
    job.up = w2_glu != NULL ? *w2_glu : *w;
    job.x = *x;
    job.rows = *rows;
    return mv_launch(s, &job, 1, w2_glu != NULL, MV_PLAIN);
}

extern "C" int gk_matvec_staged(gpuStream_t s, const gk_mat *w, const gk_act *x, const gk_rows *rows,
                                const gk_out *out)
{
    mv_job job = {};
    job.w[0] = *w;
    job.out[0] = *out;
    job.up = *w;
    job.x = *x;
    job.rows = *rows;
    return mv_launch(s, &job, 1, false, MV_STAGE);
}

extern "C" int gk_matvec_multi(gpuStream_t s, const gk_mat *const *w, const gk_out *out, int n_mats, const gk_act *x,
                               int n_tok)
{
    if (n_mats < 1 || n_mats > GK_MATVEC_MAX_MATS)
        return (int)gpuErrorInvalidValue;
    mv_job job = {};
    const uint32_t last = w[n_mats - 1]->type;
    if (last != w[0]->type && (n_tok != 1 || !gk_matvec_mixed(w[0]->type, last)))
        return (int)gpuErrorInvalidValue;
    for (int m = 0; m < n_mats; m++) {
        if ((m < n_mats - 1 && w[m]->type != w[0]->type) || w[m]->n_cols != w[0]->n_cols)
            return (int)gpuErrorInvalidValue;
        job.w[m] = *w[m];
        job.out[m] = out[m];
    }
    job.up = *w[0];
    job.x = *x;
    job.rows.n_tok = n_tok;
    return mv_launch(s, &job, n_mats, false, MV_PLAIN);
}

extern "C" int gk_router_topk(gpuStream_t s, const gk_mat *w, const gk_act *x, int n_tok, const gk_out *out,
                              const gk_tail *tail, const gk_norm_out *norm)
{
    if (tail->counter == NULL || n_tok < 1 || !gk_is_float_type(w->type) ||
        tail->gating.n_expert != w->n_rows || tail->gating.n_expert > GK_TAIL_MAX_EXPERTS ||
        tail->gating.n_used > GK_TAIL_MAX_USED)
        return (int)gpuErrorInvalidValue;
    mv_job job = {};
    job.w[0] = *w;
    job.out[0] = *out;
    job.up = *w;
    job.x = *x;
    job.rows.n_tok = n_tok;
    job.tail = *tail;
    if (norm != NULL)
        job.norm = *norm;
    const bool norm_fits = n_tok == 1 && x->n % 32 == 0 && x->n <= GK_ROUTER_NORM_MAX && w->n_cols == x->n;
    if (gk_clusters_supported() && !out->accumulate && n_tok <= MV_MAX_TOK && (norm == NULL || norm_fits)) {
        switch (w->type) {
#define MV_RCASE_(T)                                                                                             \
    case T:                                                                                                      \
        return launch_router_cluster<T>(s, &job, norm != NULL);
            GK_FOR_EACH_FLOAT(MV_RCASE_)
#undef MV_RCASE_
        default:
            return (int)gpuErrorInvalidValue;
        }
    }
    return mv_launch(s, &job, 1, false, norm != NULL ? MV_NORM : MV_PLAIN);
}
