/*
 * attn_decode.cu — attention of one token over a short cache (max_kv <=
 * GK_ATTN_DECODE_MAX_KV), the decode step's case.  attention.cu's
 * flash-decoding put one block on each (chunk, KV head), the chunks' partials
 * combined by a second launch; at short contexts that is a few blocks, each
 * a long chain of dependent steps (Nsight, docs/PERFORMANCE.md "CUDA
 * decode, session 5": 4 blocks, 13.6 + 3.4 us a layer).  Here:
 *
 *   - one block per (chunk of AD_CHUNK positions, KV head, AD_QS of the
 *     KV head's query heads): with AD_QS = 1, 8x the blocks, each with an
 *     eighth of the work, for a GQA group of 8 (against AD_QS = 2, tg128
 *     381 -> 389 t/s on the H200, every CUDA test passing: docs/
 *     PERFORMANCE.md, "Final device runs of session 6");
 *   - every cache row of the chunk (K and V) is requested at the start,
 *     before the rope, so their loads overlap it (the token's own row,
 *     not yet in the cache, comes from shared memory, rounded as the cache
 *     holds it, so the scores are those of rope-then-attention);
 *   - the block that finishes a head's last chunk combines the chunks
 *     (tail.cuh's fence-then-count), and a head of one chunk needs no
 *     combine at all: no second launch.
 *
 * Scratch: GK_ATTN_COUNTERS words of counters (zero between launches),
 * then per (query head, chunk) two floats (max, sum of exponentials) and
 * the head_dim_v unnormalised sums, as attention.cu lays them out.
 */
#include "attn_kv.cuh"
#include "common.cuh"
#include "qk_rope.cuh"
#include "row_norm.cuh"
#include "tail.cuh"

/* AD_TPP threads share a position (8 values each of a head of at most
 * AD_MAX_DIM); AD_PASS positions a pass; the AD_LOADS passes of a chunk
 * are loaded at once. */
enum {
    AD_THREADS = 256, AD_WARPS = AD_THREADS / GPU_WARP, AD_TPP = 16, AD_PASS = AD_THREADS / AD_TPP, AD_LOADS = 4,
    AD_CHUNK = AD_PASS * AD_LOADS, AD_MAX_DIM = 8 * AD_TPP, AD_QS = 1,
};

static inline __host__ __device__ int ad_chunks(int n_kv)
{
    return (n_kv + AD_CHUNK - 1) / AD_CHUNK;
}

/* Query heads per block: AD_QS where the group divides, else 1. */
static inline __host__ __device__ int ad_qs(int group)
{
    return group % AD_QS == 0 ? AD_QS : 1;
}

/* This block's rows of the chunk (positions start + slot + AD_PASS u),
 * values 8 part .. 8 part + 7 of the head at col0; zero where there is no
 * row or value. */
template <bool F16>
static inline __device__ void ad_fetch(const void *cache, int64_t row, int64_t col0, int width, int start, int len,
                                       kv_raw<F16> *raw)
{
    const int part = threadIdx.x % AD_TPP, slot = threadIdx.x / AD_TPP;
#pragma unroll
    for (int u = 0; u < AD_LOADS; u++) {
        const int j = slot + AD_PASS * u;
        raw[u] = j < len && 8 * part < width ? kv_fetch<F16>(cache, (int64_t)(start + j) * row + col0 + 8 * part)
                                             : kv_zero<F16>();
    }
}

/* ROPE: the block's query heads normed and rotated into qsh (a warp
 * each), and, in the chunk holding the token, its K row (normed, rotated)
 * and V row into kh / vh as the cache holds them; the block of the first
 * head pair also stores them in the cache.  Else the query heads as they
 * are. */
template <bool ROPE>
static inline __device__ void ad_queries(const gk_attn &a, const gk_rope &r, const float *q, int qs, int g, int pos,
                                         bool holds, bool store, float *qsh, float *kh, float *vh)
{
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP, dk = a.head_dim_k, dv = a.head_dim_v;
    if constexpr (!ROPE) {
        for (int i = threadIdx.x; i < qs * dk; i += AD_THREADS)
            qsh[i] = q[i];
        return;
    }
    if (warp < qs || (warp == qs && holds)) {
        const bool is_k = warp == qs;
        float v[QR_PER_LANE], gain[QR_PER_LANE];
        qr_load(r, is_k ? r.k + (int64_t)g * dk : q + warp * dk, v);
        qr_load(r, is_k ? r.k_norm : r.q_norm, gain);
        const qr_angles an = qr_angles_at(r, pos);
        float *hv = is_k ? kh : qsh + warp * dk;
        qk_head_finish(r, an, hv, v, gain, (is_k ? r.k_norm : r.q_norm) != NULL);
        if (!is_k)
            return;
        if (store)
            qr_store_row(r.k_cache, (int64_t)pos * r.n_head_kv * dk + (int64_t)g * dk, kh, dk, r.kv_f16);
        for (int i = lane; i < dk; i += GPU_WARP) /* the lane's own values, after its stores */
            kh[i] = kv_as_cached(kh[i], r.kv_f16);
    } else if (warp == qs + 1 && holds) {
        const float *v = r.v + (int64_t)g * dv;
        for (int i = lane; i < dv; i += GPU_WARP)
            vh[i] = kv_as_cached(v[i], r.kv_f16);
        if (store)
            qr_store_row(r.v_cache, (int64_t)pos * r.n_head_kv * dv + (int64_t)g * dv, v, dv, r.kv_f16);
    }
}

/* The scores of the chunk's positions for the block's heads into ps
 * (AD_CHUNK per head), scaled. */
template <bool F16, bool ROPE>
static inline __device__ void ad_scores(const gk_attn &a, const kv_raw<F16> *kr, int qs, int len, bool own_row,
                                        const float *qsh, const float *kh, float *ps)
{
    const int part = threadIdx.x % AD_TPP, slot = threadIdx.x / AD_TPP, dk = a.head_dim_k;
    const bool live = 8 * part < dk;
#pragma unroll
    for (int u = 0; u < AD_LOADS; u++) {
        const int j = slot + AD_PASS * u;
        float kv[8];
        if (ROPE && own_row && j == len - 1) {
#pragma unroll
            for (int k = 0; k < 8; k++)
                kv[k] = live ? kh[8 * part + k] : 0.0f;
        } else {
            kv_floats<F16>(kr[u], kv);
        }
        float acc[AD_QS];
#pragma unroll
        for (int h = 0; h < AD_QS; h++) {
            acc[h] = 0.0f;
            if (h < qs && live)
#pragma unroll
                for (int k = 0; k < 8; k++)
                    acc[h] = fmaf(qsh[h * dk + 8 * part + k], kv[k], acc[h]);
        }
#pragma unroll
        for (int m = 1; m < AD_TPP; m *= 2)
#pragma unroll
            for (int h = 0; h < AD_QS; h++)
                acc[h] += gpu_shfl_xor(acc[h], m);
#pragma unroll
        for (int h = 0; h < AD_QS; h++) /* constant indices: acc stays in registers */
            if (h < qs && part == 0 && j < len)
                ps[h * AD_CHUNK + j] = a.scale * acc[h];
    }
}

/* Softmax partials of head `warp` over the chunk: ps becomes e^(s - max);
 * ml gets (max, sum). */
static inline __device__ void ad_softmax(int qs, int len, float *ps, float (*ml)[2])
{
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    if (warp >= qs)
        return;
    const float2 ms = kv_softmax_partial(ps + warp * AD_CHUNK, len);
    if (lane == 0) {
        ml[warp][0] = ms.x;
        ml[warp][1] = ms.y;
    }
}

/* The weighted V rows: thread (slot, part) sums its positions for values
 * 8 part .. + 7, then the slots are summed (the two of a warp by a
 * shuffle, the warps in order through red); returns value t % dv of head
 * t / dv for threads t < qs dv. */
template <bool F16, bool ROPE>
static inline __device__ float ad_values(const gk_attn &a, const kv_raw<F16> *vr, int qs, int len, bool own_row,
                                         const float *vh, const float *ps, float (*red)[AD_QS * AD_MAX_DIM])
{
    const int part = threadIdx.x % AD_TPP, slot = threadIdx.x / AD_TPP, dv = a.head_dim_v;
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    float acc[AD_QS][8];
#pragma unroll
    for (int h = 0; h < AD_QS; h++)
#pragma unroll
        for (int k = 0; k < 8; k++)
            acc[h][k] = 0.0f;
#pragma unroll
    for (int u = 0; u < AD_LOADS; u++) {
        const int j = slot + AD_PASS * u;
        if (j >= len)
            break;
        float v[8];
        if (ROPE && own_row && j == len - 1) {
#pragma unroll
            for (int k = 0; k < 8; k++)
                v[k] = 8 * part < dv ? vh[8 * part + k] : 0.0f;
        } else {
            kv_floats<F16>(vr[u], v);
        }
#pragma unroll
        for (int h = 0; h < AD_QS; h++) {
            const float p = h < qs ? ps[h * AD_CHUNK + j] : 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[h][k] = fmaf(p, v[k], acc[h][k]);
        }
    }
#pragma unroll
    for (int h = 0; h < AD_QS; h++)
#pragma unroll
        for (int k = 0; k < 8; k++)
            acc[h][k] += gpu_shfl_xor(acc[h][k], AD_TPP);
#pragma unroll
    for (int h = 0; h < AD_QS; h++)
        if (h < qs && lane < AD_TPP && 8 * part < dv)
#pragma unroll
            for (int k = 0; k < 8; k++)
                red[warp][h * dv + 8 * part + k] = acc[h][k];
    __syncthreads();
    const int t = threadIdx.x;
    float o = 0.0f;
    if (t < qs * dv)
        for (int w = 0; w < AD_WARPS; w++)
            o += red[w][t];
    return o;
}

/* out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c over `used`
 * chunks (M their maximum), as attention.cu's combine. */
template <class ML, class ACC> static inline __device__ float ad_merge(int used, ML ml, ACC acc)
{
    float mx = -INFINITY;
    for (int c = 0; c < used; c++)
        mx = fmaxf(mx, ml(c, 0));
    float l = 0.0f;
    for (int c = 0; c < used; c++)
        l += expf(ml(c, 0) - mx) * ml(c, 1);
    float o = 0.0f;
    for (int c = 0; c < used; c++)
        o += expf(ml(c, 0) - mx) * acc(c);
    return o * (1.0f / l);
}

/* Value t of the block's heads to out (and its 8-bit form: whole warps,
 * dv % 32 == 0). */
static inline __device__ void ad_store(const gk_attn &a, int64_t head0, float v)
{
    const int64_t i = head0 * a.head_dim_v + threadIdx.x;
    a.out[i] = v;
    if (a.out_q != NULL)
        q8_warp_store(v, a.out_q + (i - threadIdx.x % GPU_WARP), a.out_meta + 4 * ((i - threadIdx.x % GPU_WARP) / 32));
}

template <bool F16, bool ROPE>
__global__ void __launch_bounds__(AD_THREADS) k_attn_decode(gk_attn a, gk_rope r, const gk_step *step)
{
    gpu_pdl_wait();
    __shared__ float qsh[AD_QS * AD_MAX_DIM], kh[AD_MAX_DIM], vh[AD_MAX_DIM], ps[AD_QS * AD_CHUNK];
    __shared__ float red[AD_WARPS][AD_QS * AD_MAX_DIM];
    __shared__ float ml[AD_QS][2];
    const int group = a.n_head / a.n_head_kv, qs = ad_qs(group), pairs = group / qs;
    const int ch = blockIdx.x, g = blockIdx.y / pairs, pair = blockIdx.y % pairs;
    const int pos = step->pos0, n_kv = pos + 1, start = ch * AD_CHUNK;
    if (start >= n_kv)
        return;
    const int len = min(AD_CHUNK, n_kv - start), dk = a.head_dim_k, dv = a.head_dim_v;
    const bool own_row = pos < start + AD_CHUNK;
    const int64_t head0 = (int64_t)g * group + (int64_t)pair * qs;
    kv_raw<F16> kr[AD_LOADS], vr[AD_LOADS];
    ad_fetch<F16>(a.k, a.k_row, (int64_t)g * dk, dk, start, len, kr);
    ad_fetch<F16>(a.v, a.v_row, (int64_t)g * dv, dv, start, len, vr);
    ad_queries<ROPE>(a, r, a.q + head0 * dk, qs, g, pos, own_row, pair == 0, qsh, kh, vh);
    __syncthreads();
    ad_scores<F16, ROPE>(a, kr, qs, len, own_row, qsh, kh, ps);
    gpu_pdl_trigger(); /* left: the softmax, the values and the chunks' merge */
    __syncthreads();
    ad_softmax(qs, len, ps, ml);
    __syncthreads();
    const float o = ad_values<F16, ROPE>(a, vr, qs, len, own_row, vh, ps, red);
    const int t = threadIdx.x, h = t / dv, used = ad_chunks(n_kv);
    const bool mine = t < qs * dv; /* whole warps where out_q is written (dv % 32 == 0) */
    if (used == 1) {
        if (mine)
            ad_store(a, head0, ad_merge(1, [&](int, int k) { return ml[h][k]; }, [&](int) { return o; }));
        return;
    }
    const int n_chunks = ad_chunks(a.max_kv);
    float *part = a.scratch + GK_ATTN_COUNTERS;
    const int64_t base = (head0 + h) * n_chunks; /* this thread's head's first chunk */
    float *accs = part + 2 * (int64_t)a.n_head * n_chunks;
    if (mine) {
        accs[(base + ch) * dv + t % dv] = o;
        if (t % dv == 0) {
            part[2 * (base + ch)] = ml[h][0];
            part[2 * (base + ch) + 1] = ml[h][1];
        }
    }
    if (!gk_last_block((unsigned int *)a.scratch + blockIdx.y, (unsigned)used) || !mine)
        return;
    const float v = ad_merge(
        used, [&](int c, int k) { return __ldcg(part + 2 * (base + c) + k); },
        [&](int c) { return __ldcg(accs + (base + c) * dv + t % dv); });
    ad_store(a, head0, v);
}

extern "C" bool gk_attention_decode_fits(const gk_attn *a)
{
    const int group = a->n_head_kv > 0 ? a->n_head / a->n_head_kv : 0;
    return a->n_tok == 1 && a->tok0 == 0 && a->max_kv <= GK_ATTN_DECODE_MAX_KV && group >= 1 &&
           a->n_head % a->n_head_kv == 0 && a->n_head / ad_qs(group) <= GK_ATTN_COUNTERS &&
           a->head_dim_k % 8 == 0 && a->head_dim_k <= AD_MAX_DIM && a->head_dim_v % 8 == 0 &&
           a->head_dim_v <= AD_MAX_DIM && a->k_row % 8 == 0 && a->v_row % 8 == 0 &&
           (a->out_q == NULL || a->head_dim_v % GPU_WARP == 0);
}

/* rope NULL: the queries and the token's K, V row are in place already. */
extern "C" int gk_attention_decode(gpuStream_t s, const gk_attn *a, const gk_rope *rope, const gk_step *step)
{
    if (!gk_attention_decode_fits(a))
        return (int)gpuErrorInvalidValue;
    const dim3 grid((unsigned)ad_chunks(a->max_kv), (unsigned)(a->n_head / ad_qs(a->n_head / a->n_head_kv)));
    const gk_rope r = rope != NULL ? *rope : gk_rope{};
    if (rope != NULL)
        return a->kv_f16 ? gk_launch(k_attn_decode<true, true>, grid, AD_THREADS, 0, s, *a, r, step)
                         : gk_launch(k_attn_decode<false, true>, grid, AD_THREADS, 0, s, *a, r, step);
    return a->kv_f16 ? gk_launch(k_attn_decode<true, false>, grid, AD_THREADS, 0, s, *a, r, step)
                     : gk_launch(k_attn_decode<false, false>, grid, AD_THREADS, 0, s, *a, r, step);
}
