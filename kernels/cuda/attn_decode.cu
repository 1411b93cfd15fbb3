/*
 * attn_decode.cu — attention of one token over a short cache (max_kv <=
 * GK_ATTN_DECODE_MAX_KV), the decode step's case.  attention.cu's
 * flash-decoding put one block on each (chunk, KV head), the chunks' partials
 * combined by a second launch; at short contexts that is a few blocks, each
 * a long chain of dependent steps (Nsight, docs/PERFORMANCE.md "CUDA
 * decode, session 5": 4 blocks, 13.6 + 3.4 us a layer).  Here:
 *
 *   - one block per (chunk, KV head, AD_QS of the KV head's query
 *     heads): with AD_QS = 1, 8x the blocks, each with an eighth of the
 *     work, for a GQA group of 8 (against AD_QS = 2, tg128 381 -> 389 t/s
 *     on the H200: docs/PERFORMANCE.md, "Final device runs of session 6");
 *     a chunk is 128 positions over an F16 cache (ad_loads), so a decode
 *     of up to 128 positions needs no merge;
 *   - every cache row of the chunk (K and V) is requested at the start,
 *     with rope before the launch's wait (k_attn_decode), so their loads
 *     overlap the wait and the rope (the token's own row, not yet in the
 *     cache, comes from shared memory, rounded as the cache holds it, so
 *     the scores are those of rope-then-attention);
 *   - the softmax partials are the slots' own, merged as chunks are
 *     (ad_attend): two block barriers in all, no pass of one warp over
 *     the scores;
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
#include "stamp.cuh"
#include "tail.cuh"

GK_STAMP_TU(attn_decode)

/* AD_TPP threads share a position (8 values each of a head of at most
 * AD_MAX_DIM); AD_PASS positions a pass; the ad_loads passes of a chunk
 * are loaded at once. */
enum {
    AD_THREADS = 256, AD_WARPS = AD_THREADS / GPU_WARP, AD_TPP = 16, AD_PASS = AD_THREADS / AD_TPP,
    AD_MAX_DIM = 8 * AD_TPP, AD_QS = 1,
};

/* Passes a chunk: an F16 row part is 4 registers, so 8 passes of K and V
 * rows hold 64 a thread and a chunk covers 128 positions (the whole of
 * tg128: no merge); an F32 part is 8, so 4 passes (64 positions). */
static inline __host__ __device__ constexpr int ad_loads(bool f16)
{
    return f16 ? 8 : 4;
}

static inline __host__ __device__ int ad_chunks(int n_kv, bool f16)
{
    const int chunk = AD_PASS * ad_loads(f16);
    return (n_kv + chunk - 1) / chunk;
}

/* Query heads per block: AD_QS where the group divides, else 1. */
static inline __host__ __device__ int ad_qs(int group)
{
    return group % AD_QS == 0 ? AD_QS : 1;
}

/* This block's rows of the chunk (positions start + slot + AD_PASS u),
 * values 8 part .. 8 part + 7 of the head at col0, of the first n rows;
 * zero past them and past the head. */
template <bool F16, int LOADS>
static inline __device__ void ad_fetch(const void *cache, int64_t row, int64_t col0, int width, int start, int n,
                                       kv_raw<F16> *raw)
{
    const int part = threadIdx.x % AD_TPP, slot = threadIdx.x / AD_TPP;
#pragma unroll
    for (int u = 0; u < LOADS; u++) {
        const int j = slot + AD_PASS * u;
        raw[u] = j < n && 8 * part < width ? kv_fetch<F16>(cache, (int64_t)(start + j) * row + col0 + 8 * part)
                                           : kv_zero<F16>();
    }
}

/* What a rope warp needs that no launch of the step writes: its head's
 * norm gains (weights) and the angles at pos. */
struct ad_rot {
    float gain[QR_PER_LANE];
    qr_angles an;
};

static inline __device__ bool ad_ropes(int qs, bool holds)
{
    const int warp = threadIdx.x / GPU_WARP;
    return warp < qs || (warp == qs && holds);
}

static inline __device__ void ad_rot_prepare(const gk_rope &r, int qs, int pos, bool holds, ad_rot *rot)
{
    if (!ad_ropes(qs, holds))
        return;
    qr_load(r, threadIdx.x / GPU_WARP == qs ? r.k_norm : r.q_norm, rot->gain);
    rot->an = qr_angles_at(r, pos);
}

/* ROPE: the block's query heads normed and rotated into qsh (a warp
 * each), and, in the chunk holding the token, its K row (normed, rotated)
 * and V row into kh / vh as the cache holds them; the block of the first
 * head pair also stores them in the cache.  Else the query heads as they
 * are. */
template <bool ROPE>
static inline __device__ void ad_queries(const gk_attn &a, const gk_rope &r, const ad_rot &rot, const float *q, int qs,
                                         int g, int pos, bool holds, bool store, float *qsh, float *kh, float *vh)
{
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP, dk = a.head_dim_k, dv = a.head_dim_v;
    if constexpr (!ROPE) {
        for (int i = threadIdx.x; i < qs * dk; i += AD_THREADS)
            qsh[i] = q[i];
        return;
    }
    if (ad_ropes(qs, holds)) {
        const bool is_k = warp == qs;
        float v[QR_PER_LANE];
        qr_load(r, is_k ? r.k + (int64_t)g * dk : q + warp * dk, v);
        float *hv = is_k ? kh : qsh + warp * dk;
        qk_head_finish(r, rot.an, hv, v, rot.gain, (is_k ? r.k_norm : r.q_norm) != NULL);
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

/* Eight values from 16-byte-aligned shared memory (zero where !live). */
static inline __device__ void ad_shared8(const float *src, bool live, float *v)
{
    const float4 a = live ? ((const float4 *)src)[0] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 b = live ? ((const float4 *)src)[1] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

/* Row j's eight values of the thread: the token's own row (ROPE, last of
 * the chunk) from shared memory, the others from the fetched parts. */
template <bool F16, bool ROPE>
static inline __device__ void ad_row8(const kv_raw<F16> &raw, bool own, const float *sh, bool live, float *v)
{
    if (ROPE && own)
        ad_shared8(sh, live, v);
    else
        kv_floats<F16>(raw, v);
}

/* The scaled scores of the thread's positions (-inf past len), every
 * thread of a slot holding its slot's: 8 products a thread, summed over
 * the slot's AD_TPP threads by shuffles; only the passes that hold rows,
 * so a short context costs what a short chunk does. */
template <bool F16, bool ROPE, int LOADS>
static inline __device__ void ad_scores(const gk_attn &a, const kv_raw<F16> *kr, int qs, int len, bool own_row,
                                        const float *qsh, const float *kh, float (*s)[LOADS])
{
    const int part = threadIdx.x % AD_TPP, slot = threadIdx.x / AD_TPP, dk = a.head_dim_k;
    const bool live = 8 * part < dk;
    float qv[AD_QS][8];
#pragma unroll
    for (int h = 0; h < AD_QS; h++)
        ad_shared8(qsh + h * dk + 8 * part, live && h < qs, qv[h]);
#pragma unroll
    for (int u = 0; u < LOADS; u++)
#pragma unroll
        for (int h = 0; h < AD_QS; h++)
            s[h][u] = -INFINITY;
#pragma unroll
    for (int u = 0; u < LOADS; u++) {
        if (AD_PASS * u >= len) /* no row left in the chunk: the same pass for every thread */
            break;
        const int j = slot + AD_PASS * u;
        float kv[8];
        ad_row8<F16, ROPE>(kr[u], own_row && j == len - 1, kh + 8 * part, live, kv);
        float acc[AD_QS];
#pragma unroll
        for (int h = 0; h < AD_QS; h++) {
            acc[h] = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[h] = fmaf(qv[h][k], kv[k], acc[h]);
        }
#pragma unroll
        for (int m = 1; m < AD_TPP; m *= 2)
#pragma unroll
            for (int h = 0; h < AD_QS; h++)
                acc[h] += gpu_shfl_xor(acc[h], m);
#pragma unroll
        for (int h = 0; h < AD_QS; h++)
            s[h][u] = j < len ? a.scale * acc[h] : -INFINITY;
    }
}

/* e^(x - m), 0 where x is -inf (a slot or warp without positions). */
static inline __device__ float ad_rescale(float x, float m)
{
    return x == -INFINITY ? 0.0f : expf(x - m);
}

/* The chunk's softmax partials without a block-wide pass over the
 * scores: each slot takes the max of its own positions' scores, weights
 * its V rows by e^(s - its max), and the slots are merged as chunks are
 * (rescaled to the larger max): the warp's two by shuffles, the warps
 * through red / wml in warp order.  Returns the unnormalised sum's value
 * t % dv of head t / dv for threads t < qs dv, and that head's (max, sum
 * of exponentials) in *ml. */
template <bool F16, bool ROPE, int LOADS>
static inline __device__ float ad_attend(const gk_attn &a, const kv_raw<F16> *kr, const kv_raw<F16> *vr, int qs,
                                         int len, bool own_row, const float *qsh, const float *kh, const float *vh,
                                         float (*red)[AD_QS * AD_MAX_DIM], float (*wml)[AD_QS][2], float2 *ml)
{
    const int part = threadIdx.x % AD_TPP, slot = threadIdx.x / AD_TPP, dv = a.head_dim_v;
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    const bool live = 8 * part < dv;
    float s[AD_QS][LOADS];
    ad_scores<F16, ROPE, LOADS>(a, kr, qs, len, own_row, qsh, kh, s);
    float mx[AD_QS], sum[AD_QS], acc[AD_QS][8];
#pragma unroll
    for (int h = 0; h < AD_QS; h++) {
        mx[h] = -INFINITY;
        sum[h] = 0.0f;
#pragma unroll
        for (int u = 0; u < LOADS; u++)
            mx[h] = fmaxf(mx[h], s[h][u]);
#pragma unroll
        for (int k = 0; k < 8; k++)
            acc[h][k] = 0.0f;
    }
#pragma unroll
    for (int u = 0; u < LOADS; u++) {
        const int j = slot + AD_PASS * u;
        if (j >= len)
            break;
        float v[8];
        ad_row8<F16, ROPE>(vr[u], own_row && j == len - 1, vh + 8 * part, live, v);
#pragma unroll
        for (int h = 0; h < AD_QS; h++) {
            const float p = expf(s[h][u] - mx[h]);
            sum[h] += p;
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc[h][k] = fmaf(p, v[k], acc[h][k]);
        }
    }
#pragma unroll
    for (int h = 0; h < AD_QS; h++) {
        const float m_o = gpu_shfl_xor(mx[h], AD_TPP), s_o = gpu_shfl_xor(sum[h], AD_TPP);
        const float m = fmaxf(mx[h], m_o), f = ad_rescale(mx[h], m), f_o = ad_rescale(m_o, m);
        sum[h] = sum[h] * f + s_o * f_o;
#pragma unroll
        for (int k = 0; k < 8; k++)
            acc[h][k] = acc[h][k] * f + gpu_shfl_xor(acc[h][k], AD_TPP) * f_o;
        mx[h] = m;
    }
#pragma unroll
    for (int h = 0; h < AD_QS; h++)
        if (h < qs && lane < AD_TPP) {
            if (live) {
                float4 *dst = (float4 *)(red[warp] + h * dv + 8 * part);
                dst[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
                dst[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
            }
            if (lane == 0) {
                wml[warp][h][0] = mx[h];
                wml[warp][h][1] = sum[h];
            }
        }
    gpu_pdl_trigger(); /* left: the warps' merge, the chunks' merge and the stores */
    GK_STAMP_IF(blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_ATT_ATTEND);
    __syncthreads();
    const int t = threadIdx.x, h = t < qs * dv ? t / dv : 0;
    float m = -INFINITY;
    for (int w = 0; w < AD_WARPS; w++)
        m = fmaxf(m, wml[w][h][0]);
    float l = 0.0f, o = 0.0f;
    for (int w = 0; w < AD_WARPS; w++) {
        const float f = ad_rescale(wml[w][h][0], m);
        l += f * wml[w][h][1];
        if (t < qs * dv)
            o += f * red[w][t];
    }
    *ml = make_float2(m, l);
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

/* With ROPE, what does not depend on the launch before (the Q/K/V
 * projection) happens before gpu_pdl_wait(): the step's position (copied
 * from the host before the step's first launch), the cache rows before
 * it (written by earlier steps), the norm gains and the rope angles.
 * Every launch of a step waits for its predecessor before it signals
 * (common.cuh), so when this launch starts every launch before the one
 * it waits on has completed.  The token's own row is never read from the
 * cache (kh / vh hold it).  Without rope the token's row is in the cache,
 * written by the launch before: everything after the wait. */
template <bool F16, bool ROPE>
__global__ void __launch_bounds__(AD_THREADS) k_attn_decode(gk_attn a, gk_rope r, const gk_step *step)
{
    constexpr int LOADS = ad_loads(F16), CHUNK = AD_PASS * LOADS;
    gpu_params_warm(a);
    gpu_params_warm(r);
    if constexpr (!ROPE)
        gpu_pdl_wait();
    __shared__ __align__(16) float qsh[AD_QS * AD_MAX_DIM];
    __shared__ __align__(16) float kh[AD_MAX_DIM];
    __shared__ __align__(16) float vh[AD_MAX_DIM];
    __shared__ __align__(16) float red[AD_WARPS][AD_QS * AD_MAX_DIM];
    __shared__ float wml[AD_WARPS][AD_QS][2];
    const int group = a.n_head / a.n_head_kv, qs = ad_qs(group), pairs = group / qs;
    const int ch = blockIdx.x, g = blockIdx.y / pairs, pair = blockIdx.y % pairs;
    const int pos = step->pos0, n_kv = pos + 1, start = ch * CHUNK;
    if (start >= n_kv)
        return;
    const int len = min(CHUNK, n_kv - start), dk = a.head_dim_k, dv = a.head_dim_v;
    const bool own_row = pos < start + CHUNK;
    const int64_t head0 = (int64_t)g * group + (int64_t)pair * qs;
    const int cached = ROPE && own_row ? len - 1 : len;
    kv_raw<F16> kr[LOADS], vr[LOADS];
    ad_fetch<F16, LOADS>(a.k, a.k_row, (int64_t)g * dk, dk, start, cached, kr);
    ad_fetch<F16, LOADS>(a.v, a.v_row, (int64_t)g * dv, dv, start, cached, vr);
    ad_rot rot;
    if constexpr (ROPE) {
        ad_rot_prepare(r, qs, pos, own_row, &rot);
        gpu_pdl_wait();
    }
    GK_STAMP_IF(blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_ATT_WAIT);
    ad_queries<ROPE>(a, r, rot, a.q + head0 * dk, qs, g, pos, own_row, pair == 0, qsh, kh, vh);
    __syncthreads();
    float2 cml;
    const float o = ad_attend<F16, ROPE, LOADS>(a, kr, vr, qs, len, own_row, qsh, kh, vh, red, wml, &cml);
    const int t = threadIdx.x, h = t / dv, used = ad_chunks(n_kv, F16);
    const bool mine = t < qs * dv; /* whole warps where out_q is written (dv % 32 == 0) */
    if (used == 1) {
        if (mine)
            ad_store(a, head0, ad_merge(1, [&](int, int k) { return k == 0 ? cml.x : cml.y; }, [&](int) { return o; }));
        GK_STAMP_IF(blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0, GS_ATT_STORE);
        return;
    }
    const int n_chunks = ad_chunks(a.max_kv, F16);
    float *part = a.scratch + GK_ATTN_COUNTERS;
    const int64_t base = (head0 + h) * n_chunks; /* this thread's head's first chunk */
    float *accs = part + 2 * (int64_t)a.n_head * n_chunks;
    if (mine) {
        accs[(base + ch) * dv + t % dv] = o;
        if (t % dv == 0) {
            part[2 * (base + ch)] = cml.x;
            part[2 * (base + ch) + 1] = cml.y;
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
    const dim3 grid((unsigned)ad_chunks(a->max_kv, a->kv_f16), (unsigned)(a->n_head / ad_qs(a->n_head / a->n_head_kv)));
    const gk_rope r = rope != NULL ? *rope : gk_rope{};
    if (rope != NULL)
        return a->kv_f16 ? gk_launch(k_attn_decode<true, true>, grid, AD_THREADS, 0, s, *a, r, step)
                         : gk_launch(k_attn_decode<false, true>, grid, AD_THREADS, 0, s, *a, r, step);
    return a->kv_f16 ? gk_launch(k_attn_decode<true, false>, grid, AD_THREADS, 0, s, *a, r, step)
                     : gk_launch(k_attn_decode<false, false>, grid, AD_THREADS, 0, s, *a, r, step);
}
