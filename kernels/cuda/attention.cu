/*
 * attention.cu — causal GQA attention over the KV cache, flash-decoding
 * style: the positions a token sees are cut into chunks (at_chunk);
 * one block per (chunk, KV head, token) computes the softmax partials of
 * the query heads that share the KV head (max, sum of exponentials, and the
 * unnormalised weighted sum of V rows), so each cache row is read once for
 * all of them; a second kernel combines the chunks.  The grid covers
 * max_kv positions; blocks past a token's last position (pos0 + t, read
 * from device memory) leave at once, so one captured launch serves every
 * position up to max_kv.
 *
 * The same kernels serve decode (one token) and prefill (each token of the
 * batch sees the cache up to its own position; its K/V rows were stored
 * before this launch by gk_rope_store).
 */
#include "attn_kv.cuh"
#include "common.cuh"
#include "qk_rope.cuh"
#include "row_norm.cuh"

/* AT_V_LOADS: cache rows a thread of the V pass requests before it uses
 * any; one-token launches (ROPE) take twice as many (a decode chunk of 16
 * positions in one round trip), the others stay at 92-96 registers. */
enum { AT_THREADS = GK_ATTN_CHUNK, AT_WARPS = AT_THREADS / GPU_WARP, AT_V_LOADS = 8 };

static inline __host__ __device__ int at_chunks(int max_kv, int chunk)
{
    return (max_kv + chunk - 1) / chunk;
}

/* Positions per block: GK_ATTN_CHUNK, halved (down to 16) while the grid
 * would have fewer than two blocks per multiprocessor, so that decoding
 * one token over a short context still spreads over the GPU.  It depends
 * only on the launch's shape, so a captured graph and a direct launch cut
 * the same chunks. */
static int at_chunk(int n_tok, int n_head_kv, int max_kv)
{
    static int n_sm = 0;
    if (n_sm == 0 && gpuDeviceGetAttribute(&n_sm, gpuDevAttrMultiProcessorCount, 0) != gpuSuccess)
        n_sm = 1;
    int chunk = GK_ATTN_CHUNK;
    while (chunk > 16 && (int64_t)n_tok * n_head_kv * at_chunks(max_kv, chunk) < 2 * (int64_t)n_sm)
        chunk /= 2;
    return chunk;
}

template <bool F16> static inline __device__ float kv_value(const void *base, int64_t i)
{
    if constexpr (F16)
        return __half2float(((const half *)base)[i]);
    return ((const float *)base)[i];
}

/* ROPE (one token): the block norms and rotates its group's query heads
 * itself (qk_rope.cuh, as k_rope_store would), and the block whose chunk
 * holds the token's position also its K and V rows into the cache, before
 * any position is read: no other block reads that row, and
 * __syncthreads makes the block's own stores visible to it.  Saves the
 * rope launch in decode.  A warp loads all of its heads (and the norms'
 * gains) before it norms any, so they cost one round trip to memory, not
 * two per head. */
enum { AT_HEADS_PER_WARP = GK_ATTN_MAX_GROUP / AT_WARPS };

static inline __device__ void at_rope_heads(const gk_rope &r, const float *q, float *qs, int g, int pos,
                                            bool holds_pos)
{
    const int group = r.n_head / r.n_head_kv, dk = r.head_dim_k, warp = threadIdx.x / GPU_WARP;
    const bool k_here = holds_pos && warp == 0;
    __shared__ float kh[RS_MAX_DIM];
    float v[AT_HEADS_PER_WARP][QR_PER_LANE], vk[QR_PER_LANE], gq[QR_PER_LANE], gk[QR_PER_LANE];
#pragma unroll
    for (int j = 0; j < AT_HEADS_PER_WARP; j++)
        if (warp + j * AT_WARPS < group)
            qr_load(r, q + (warp + j * AT_WARPS) * dk, v[j]);
    qr_load(r, r.q_norm, gq);
    if (k_here) {
        qr_load(r, r.k + (int64_t)g * dk, vk);
        qr_load(r, r.k_norm, gk);
    }
    const qr_angles an = qr_angles_at(r, pos);
#pragma unroll
    for (int j = 0; j < AT_HEADS_PER_WARP; j++)
        if (warp + j * AT_WARPS < group)
            qk_head_finish(r, an, qs + (warp + j * AT_WARPS) * dk, v[j], gq, r.q_norm != NULL);
    if (k_here) {
        qk_head_finish(r, an, kh, vk, gk, r.k_norm != NULL);
        qr_store_row(r.k_cache, (int64_t)pos * r.n_head_kv * dk + (int64_t)g * dk, kh, dk, r.kv_f16);
    }
    if (holds_pos && warp == AT_WARPS - 1)
        qr_store_row(r.v_cache, (int64_t)pos * r.n_head_kv * r.head_dim_v + (int64_t)g * r.head_dim_v,
                     r.v + (int64_t)g * r.head_dim_v, r.head_dim_v, r.kv_f16);
}

template <bool ROPE>
static inline __device__ void at_queries(const gk_attn &a, const gk_rope &r, const float *q, float *qs, int g,
                                         int pos, bool holds_pos)
{
    if constexpr (ROPE) {
        at_rope_heads(r, q, qs, g, pos, holds_pos);
    } else {
        for (int i = threadIdx.x; i < a.n_head / a.n_head_kv * a.head_dim_k; i += AT_THREADS)
            qs[i] = q[i];
    }
    __syncthreads();
}

/* Scratch: per (token, head, chunk) two floats (max, sum), then dv floats.
 * Shared memory: the group's queries, their scores over the chunk, and the
 * per-split partial sums of the V pass. */
template <bool F16, bool ROPE>
__global__ void __launch_bounds__(AT_THREADS) k_attn_partial(gk_attn a, gk_rope r, const gk_step *step)
{
    gpu_pdl_wait();
    extern __shared__ float smem[];
    const int ch = blockIdx.x, g = blockIdx.y, t = blockIdx.z;
    const int n_kv = step->pos0 + a.tok0 + t + 1;
    const int start = ch * a.chunk;
    if (start >= n_kv)
        return;
    const int len = min(a.chunk, n_kv - start);
    const int group = a.n_head / a.n_head_kv, dk = a.head_dim_k, dv = a.head_dim_v;
    const int n_chunks = at_chunks(a.max_kv, a.chunk);
    float *qs = smem;                  /* group x dk */
    float *ps = qs + group * dk;       /* group x GK_ATTN_CHUNK */
    float *red = ps + group * GK_ATTN_CHUNK; /* splits x group x min(dv, AT_THREADS) */
    const int tid = threadIdx.x, warp = tid / GPU_WARP, lane = tid % GPU_WARP;
    const float *q = a.q + ((int64_t)t * a.n_head + (int64_t)g * group) * dk;
    at_queries<ROPE>(a, r, q, qs, g, n_kv - 1, n_kv <= start + a.chunk);

    /* scores: tpp threads per position (the block's threads over the
     * chunk's positions), each over every tpp-th 8 values of the row, for
     * every query head of the group; then summed across the tpp lanes */
    {
        const int tpp = AT_THREADS / a.chunk, j = tid / tpp, part = tid % tpp;
        const bool live = j < len;
        const int64_t krow = (int64_t)(start + j) * a.k_row + (int64_t)g * dk;
        float acc[GK_ATTN_MAX_GROUP];
#pragma unroll
        for (int h = 0; h < GK_ATTN_MAX_GROUP; h++)
            acc[h] = 0.0f;
        for (int i = 8 * part; live && i < dk; i += 8 * tpp) {
            float kv[8];
            kv_load8<F16>(a.k, krow + i, kv);
#pragma unroll
            for (int h = 0; h < GK_ATTN_MAX_GROUP; h++) {
                if (h >= group)
                    break;
                const float *qh = qs + h * dk + i;
                float s = acc[h];
#pragma unroll
                for (int k = 0; k < 8; k++)
                    s = fmaf(qh[k], kv[k], s);
                acc[h] = s;
            }
        }
        for (int m = 1; m < tpp; m *= 2) /* tpp divides the warp: whole groups of lanes */
#pragma unroll
            for (int h = 0; h < GK_ATTN_MAX_GROUP; h++) {
                if (h >= group) /* the same for every lane */
                    break;
                acc[h] += gpu_shfl_xor(acc[h], m);
            }
#pragma unroll
        for (int h = 0; h < GK_ATTN_MAX_GROUP; h++)
            if (h < group && live && part == 0)
                ps[h * GK_ATTN_CHUNK + j] = a.scale * acc[h];
    }
    __syncthreads();

    /* softmax partials per head: one warp per head */
    const int64_t base = ((int64_t)t * a.n_head + (int64_t)g * group) * n_chunks + ch;
    for (int h = warp; h < group; h += AT_WARPS) {
        const float2 ms = kv_softmax_partial(ps + h * GK_ATTN_CHUNK, len);
        if (lane == 0) {
            float *ml = a.scratch + 2 * (base + (int64_t)h * n_chunks);
            ml[0] = ms.x;
            ml[1] = ms.y;
        }
    }
    __syncthreads();

    /* weighted V rows: a thread per column (coalesced rows), the positions
     * split among the threads left over when dv < AT_THREADS */
    const int cols = dv < AT_THREADS ? dv : AT_THREADS, splits = AT_THREADS / cols;
    const int split = tid / cols, c0 = tid % cols;
    const int64_t n_ml = 2 * (int64_t)a.n_tok * a.n_head * n_chunks;
    for (int d = c0; d < dv && split < splits; d += cols) {
        float acc[GK_ATTN_MAX_GROUP];
#pragma unroll
        for (int h = 0; h < GK_ATTN_MAX_GROUP; h++)
            acc[h] = 0.0f;
        const int64_t col = (int64_t)g * dv + d;
        /* v_loads rows' loads in flight before their products */
        constexpr int v_loads = ROPE ? 2 * AT_V_LOADS : AT_V_LOADS;
        for (int j0 = split; j0 < len; j0 += v_loads * splits) {
            float v[v_loads];
#pragma unroll
            for (int u = 0; u < v_loads; u++) {
                const int j = j0 + u * splits;
                v[u] = j < len ? kv_value<F16>(a.v, (int64_t)(start + j) * a.v_row + col) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < v_loads; u++) {
                const int j = j0 + u * splits;
                if (j >= len)
                    break;
#pragma unroll
                for (int h = 0; h < GK_ATTN_MAX_GROUP; h++)
                    if (h < group)
                        acc[h] = fmaf(ps[h * GK_ATTN_CHUNK + j], v[u], acc[h]);
            }
        }
        for (int h = 0; h < group; h++) {
            if (splits == 1)
                a.scratch[n_ml + (base + (int64_t)h * n_chunks) * dv + d] = acc[h];
            else
                red[(split * group + h) * cols + c0] = acc[h];
        }
    }
    if (splits == 1)
        return;
    __syncthreads();
    for (int idx = tid; idx < group * dv; idx += AT_THREADS) {
        const int h = idx / dv, d = idx % dv;
        float sum = 0.0f;
        for (int s2 = 0; s2 < splits; s2++)
            sum += red[(s2 * group + h) * cols + d];
        a.scratch[n_ml + (base + (int64_t)h * n_chunks) * dv + d] = sum;
    }
}

/* One block per (head, token): out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c.
 * With out_q the block also writes the 8-bit form of its row (one warp
 * per 32 values), saving the output projection's quantize launch. */
__global__ void k_attn_combine(gk_attn a, const gk_step *step)
{
    gpu_pdl_wait();
    const int h = blockIdx.x, t = blockIdx.y;
    const int n_kv = step->pos0 + a.tok0 + t + 1;
    const int n_chunks = at_chunks(a.max_kv, a.chunk), used = at_chunks(n_kv, a.chunk);
    const int dv = a.head_dim_v;
    const int64_t base = ((int64_t)t * a.n_head + h) * n_chunks;
    const float *ml = a.scratch + 2 * base;
    const float *acc = a.scratch + 2 * (int64_t)a.n_tok * a.n_head * n_chunks + base * dv;
    float mx = -INFINITY;
    for (int c = 0; c < used; c++)
        mx = fmaxf(mx, ml[2 * c]);
    float l = 0.0f;
    for (int c = 0; c < used; c++)
        l += expf(ml[2 * c] - mx) * ml[2 * c + 1];
    const float inv = 1.0f / l;
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        float o = 0.0f;
        for (int c = 0; c < used; c++)
            o += expf(ml[2 * c] - mx) * acc[(int64_t)c * dv + d];
        const int64_t i = ((int64_t)t * a.n_head + h) * dv + d;
        a.out[i] = o * inv;
        if (a.out_q != NULL) /* dv % 32 == 0 and one pass: whole warps */
            q8_warp_store(o * inv, a.out_q + (i - threadIdx.x % GPU_WARP),
                          a.out_meta + 4 * ((i - threadIdx.x % GPU_WARP) / 32));
    }
}

/* attn_decode.cu's layout (chunks of 64) is never larger than this one's
 * (chunks of 16 or more). */
extern "C" size_t gk_attention_scratch(int n_tok, int n_head, int n_head_kv, int head_dim_v, int max_kv)
{
    return GK_ATTN_COUNTERS + (size_t)n_tok * n_head * at_chunks(max_kv, at_chunk(n_tok, n_head_kv, max_kv)) * (2 + (size_t)head_dim_v);
}

extern "C" size_t gk_attention_smem(int group, int head_dim_k)
{
    return sizeof(float) * (size_t)group * (head_dim_k + 2 * GK_ATTN_CHUNK);
}

/* Both launches; rope (one token) fuses gk_rope_store into the partials. */
static int attention_launch(gpuStream_t s, const gk_attn *a, const gk_rope *rope, const gk_step *step)
{
    if (a->n_tok == 0)
        return 0;
    const int group = a->n_head / a->n_head_kv;
    const size_t smem = gk_attention_smem(group, a->head_dim_k);
    if (a->head_dim_k % 8 != 0 || a->n_head % a->n_head_kv != 0 || group > GK_ATTN_MAX_GROUP || smem > 48 * 1024 ||
        (a->out_q != NULL && (a->head_dim_v % GPU_WARP != 0 || a->head_dim_v > 1024)))
        return (int)gpuErrorInvalidValue;
    if (rope != NULL && (a->n_tok != 1 || a->tok0 != 0 || rope->n_tok != 1 || rope->n_head != a->n_head ||
                         rope->n_head_kv != a->n_head_kv || rope->head_dim_k != a->head_dim_k ||
                         rope->head_dim_v != a->head_dim_v || a->head_dim_k > RS_MAX_DIM ||
                         rope->n_rot > a->head_dim_k || a->k_row != (int64_t)a->n_head_kv * a->head_dim_k ||
                         a->v_row != (int64_t)a->n_head_kv * a->head_dim_v))
        return (int)gpuErrorInvalidValue;
    if (gk_attention_decode_fits(a))
        return gk_attention_decode(s, a, rope, step);
    gk_attn c = *a;
    c.chunk = at_chunk(a->n_tok, a->n_head_kv, a->max_kv);
    c.scratch = a->scratch + GK_ATTN_COUNTERS;
    const gk_rope r = rope != NULL ? *rope : gk_rope{};
    const dim3 grid((unsigned)at_chunks(a->max_kv, c.chunk), (unsigned)a->n_head_kv, (unsigned)a->n_tok);
    int st;
    if (rope != NULL)
        st = a->kv_f16 ? gk_launch(k_attn_partial<true, true>, grid, AT_THREADS, smem, s, c, r, step)
                       : gk_launch(k_attn_partial<false, true>, grid, AT_THREADS, smem, s, c, r, step);
    else
        st = a->kv_f16 ? gk_launch(k_attn_partial<true, false>, grid, AT_THREADS, smem, s, c, r, step)
                       : gk_launch(k_attn_partial<false, false>, grid, AT_THREADS, smem, s, c, r, step);
    if (st != 0)
        return st;
    const int threads = a->head_dim_v < 32 ? 32 : (a->head_dim_v + 31) / 32 * 32;
    return gk_launch(k_attn_combine, dim3((unsigned)a->n_head, (unsigned)a->n_tok), threads, 0, s, c, step);
}

extern "C" int gk_attention(gpuStream_t s, const gk_attn *a, const gk_step *step)
{
    return attention_launch(s, a, NULL, step);
}

extern "C" int gk_attention_rope(gpuStream_t s, const gk_attn *a, const gk_rope *r, const gk_step *step)
{
    return attention_launch(s, a, r, step);
}
