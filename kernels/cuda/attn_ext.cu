/*
 * attn_ext.cu — attention over the cache for what gk_attention does not
 * cover: attention sinks and sliding windows (gpt-oss), and MLA's one
 * latent KV head shared by every query head with V read from the K rows
 * (deepseek2).  Flash-decoding as attention.cu: the positions a token sees
 * are cut into chunks of GK_AX_CHUNK; one block per (chunk, query head,
 * token) writes its softmax partials (max, sum of exponentials, the
 * unnormalised weighted sum of V rows) to scratch, and a second kernel
 * combines a head's chunks, the sink joining the maximum and the
 * denominator as op_softmax_sink does.  The grid covers max_kv positions;
 * chunks outside a token's window [lo, p] leave at once, and the combine
 * reads exactly the chunks that overlap it, so one captured launch serves
 * every position up to max_kv.
 *
 * One query head per block keeps the kernel simple for any head count
 * (MLA: every head on one KV head); the K rows of a chunk are then read
 * once per head, mostly from L2.
 */
#include "common.cuh"
#include "kernels_arch.h"

enum { AX_THREADS = GK_AX_CHUNK, AX_WARPS = AX_THREADS / GPU_WARP };

static inline __host__ __device__ int ax_chunks(int max_kv)
{
    return (max_kv + GK_AX_CHUNK - 1) / GK_AX_CHUNK;
}

/* The first position token t of the launch sees, and its own. */
static inline __device__ int ax_first(const gk_attn_ext &x, int pos)
{
    return x.window > 0 && pos + 1 > x.window ? pos - x.window + 1 : 0;
}

static inline __device__ float ax_value(const void *base, int64_t i, bool f16)
{
    return f16 ? __half2float(((const half *)base)[i]) : ((const float *)base)[i];
}

/* The block's maximum (sum) of v, for every thread. */
static inline __device__ float ax_block_max(float v, float *red)
{
    v = warp_max(v);
    if (threadIdx.x % GPU_WARP == 0)
        red[threadIdx.x / GPU_WARP] = v;
    __syncthreads();
    float m = red[0];
    for (int w = 1; w < AX_WARPS; w++)
        m = fmaxf(m, red[w]);
    __syncthreads();
    return m;
}

static inline __device__ float ax_block_sum(float v, float *red)
{
    v = warp_sum(v);
    if (threadIdx.x % GPU_WARP == 0)
        red[threadIdx.x / GPU_WARP] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < AX_WARPS; w++)
        s += red[w];
    __syncthreads();
    return s;
}

/* Scratch: 2 floats (max, sum) per (token, head, chunk), then head_dim_v
 * floats per (token, head, chunk).  Shared: the query (head_dim_k floats). */
__global__ void __launch_bounds__(AX_THREADS) k_ax_partial(gk_attn a, gk_attn_ext x, const gk_step *step)
{
    gpu_pdl_wait();
    extern __shared__ float qs[];
    __shared__ float ps[GK_AX_CHUNK];
    __shared__ float red[AX_WARPS];
    const int ch = blockIdx.x, h = blockIdx.y, t = blockIdx.z, tid = threadIdx.x;
    const int pos = step->pos0 + a.tok0 + t;
    const int start = max(ch * GK_AX_CHUNK, ax_first(x, pos)), end = min((ch + 1) * GK_AX_CHUNK, pos + 1);
    if (start >= end)
        return;
    const int len = end - start;
    const int kvh = h / (a.n_head / a.n_head_kv), dk = a.head_dim_k, dv = a.head_dim_v;
    const float *q = a.q + ((int64_t)t * a.n_head + h) * dk;
    for (int i = tid; i < dk; i += AX_THREADS)
        qs[i] = q[i];
    __syncthreads();

    float score = -INFINITY;
    if (tid < len) {
        const int64_t krow = (int64_t)(start + tid) * a.k_row + (int64_t)kvh * dk;
        float s = 0.0f;
        for (int i = 0; i < dk; i++)
            s = fmaf(qs[i], ax_value(a.k, krow + i, a.kv_f16), s);
        score = a.scale * s;
    }
    const float mx = ax_block_max(score, red);
    const float e = tid < len ? expf(score - mx) : 0.0f;
    ps[tid] = e;
    const float sum = ax_block_sum(e, red); /* its barriers also publish ps */

    const int n_chunks = ax_chunks(a.max_kv);
    const int64_t item = ((int64_t)t * a.n_head + h) * n_chunks + ch;
    if (tid == 0) {
        a.scratch[2 * item] = mx;
        a.scratch[2 * item + 1] = sum;
    }
    float *acc = a.scratch + 2 * (int64_t)a.n_tok * a.n_head * n_chunks + item * dv;
    for (int d = tid; d < dv; d += AX_THREADS) {
        const int64_t col = (int64_t)kvh * dv + d;
        float o = 0.0f;
        for (int j = 0; j < len; j++)
            o = fmaf(ps[j], ax_value(a.v, (int64_t)(start + j) * a.v_row + col, a.kv_f16), o);
        acc[d] = o;
    }
}

/* One block per (head, token): M = max(sink, m_c), out = sum_c e^(m_c - M)
 * acc_c / (e^(sink - M) + sum_c e^(m_c - M) l_c) over the chunks that
 * overlap the token's window. */
__global__ void k_ax_combine(gk_attn a, gk_attn_ext x, const gk_step *step)
{
    gpu_pdl_wait();
    const int h = blockIdx.x, t = blockIdx.y;
    const int pos = step->pos0 + a.tok0 + t;
    const int c0 = ax_first(x, pos) / GK_AX_CHUNK, c1 = pos / GK_AX_CHUNK;
    const int n_chunks = ax_chunks(a.max_kv), dv = a.head_dim_v;
    const int64_t base = ((int64_t)t * a.n_head + h) * n_chunks;
    const float *ml = a.scratch + 2 * base;
    const float *acc = a.scratch + 2 * (int64_t)a.n_tok * a.n_head * n_chunks + base * dv;
    const float sink = x.sinks != NULL ? x.sinks[h] : -INFINITY;
    float mx = sink;
    for (int c = c0; c <= c1; c++)
        mx = fmaxf(mx, ml[2 * c]);
    float l = x.sinks != NULL ? expf(sink - mx) : 0.0f;
    for (int c = c0; c <= c1; c++)
        l += expf(ml[2 * c] - mx) * ml[2 * c + 1];
    const float inv = 1.0f / l;
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        float o = 0.0f;
        for (int c = c0; c <= c1; c++)
            o += expf(ml[2 * c] - mx) * acc[(int64_t)c * dv + d];
        a.out[((int64_t)t * a.n_head + h) * dv + d] = o * inv;
    }
}

extern "C" size_t gk_attention_ext_scratch(int n_tok, int n_head, int head_dim_v, int max_kv)
{
    return GK_ATTN_COUNTERS + (size_t)n_tok * n_head * ax_chunks(max_kv) * (2 + (size_t)head_dim_v);
}

extern "C" int gk_attention_ext(gpuStream_t s, const gk_attn *a, const gk_attn_ext *x, const gk_step *step)
{
    if (a->n_tok == 0)
        return 0;
    if (a->n_head_kv < 1 || a->n_head % a->n_head_kv != 0 || a->head_dim_k > GK_AX_MAX_DK || x->window < 0)
        return (int)gpuErrorInvalidValue;
    gk_attn c = *a; /* the scratch's counters are attn_decode.cu's */
    c.scratch = a->scratch + GK_ATTN_COUNTERS;
    const dim3 grid((unsigned)ax_chunks(a->max_kv), (unsigned)a->n_head, (unsigned)a->n_tok);
    const int st = gk_launch(k_ax_partial, grid, AX_THREADS, sizeof(float) * (size_t)a->head_dim_k, s, c, *x, step);
    if (st != 0)
        return st;
    const int threads = a->head_dim_v < 32 ? 32 : a->head_dim_v > 256 ? 256 : (a->head_dim_v + 31) / 32 * 32;
    return gk_launch(k_ax_combine, dim3((unsigned)a->n_head, (unsigned)a->n_tok), threads, 0, s, c, *x, step);
}
