/*
 * matvec_rows.cuh — the one-token row dots that the decode launches share
 * (matvec.cu's k_matvec_q and k_matvec_staged, experts.cu's one-launch
 * experts): a chunk's decode, a warp's dot of one row (and its GLU pair)
 * with the 8-bit activations, a warp's MVS_ROWS rows against a staged
 * row, and the staging itself.  Every caller that takes these adds the
 * same terms in the same order, so their results have the same bits
 * whether the rows are read from global or from shared memory.
 */
#ifndef HYDRA_CUDA_MATVEC_ROWS_CUH
#define HYDRA_CUDA_MATVEC_ROWS_CUH

#include "common.cuh"
#include "quant_words.cuh"
#include "row_norm.cuh"

struct mv_place {
    const uint8_t *w, *w2; /* this block's matrices */
    int64_t act0, out0;    /* first activation / output row */
    int n_tok;
};

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

/* Q4_K chunk c with its 32 nibble bytes in two 16-byte loads, where
 * gq_decode<GQ_Q4_K> takes 8 four-byte loads.  A lane reads a 32-byte run
 * 32 bytes or more from its neighbours', so each four-byte load
 * instruction of a warp touched about as many sectors as a 16-byte one:
 * the gate/up launch asked L1 for 11 sectors a request and waited on the
 * load queue (lg_throttle) 2.4-2.9 cycles an instruction; with these
 * loads, half the sectors and 1.2-1.3 cycles.  The header (d, dmin, the
 * scales) stays gq_decode's byte loads: one 16-byte load of it took more
 * registers (a 4-register tuple a chunk), 84 against 72 in gate/up.
 * (docs/PERFORMANCE.md, "CUDA decode, session 11: the experts'
 * launches".)  Needs a 16-byte aligned row (144-byte blocks keep it so);
 * q, s and m are gq_decode<GQ_Q4_K>'s. */
static __device__ __forceinline__ void mv_decode_q4k_v16(const uint8_t *row, int c, gq_chunk *o)
{
    const uint8_t *b = row + (size_t)(c / 8) * 144;
    const int j = c % 8, shift = 4 * (j % 2);
    const uint4 n0 = *(const uint4 *)(b + 16 + 32 * (j / 2)), n1 = *(const uint4 *)(b + 32 + 32 * (j / 2));
    const uint32_t n[8] = {n0.x, n0.y, n0.z, n0.w, n1.x, n1.y, n1.z, n1.w};
#pragma unroll
    for (int k = 0; k < 8; k++)
        o->q[k] = (int32_t)((n[k] >> shift) & 0x0F0F0F0Fu);
    int s, m;
    gq_k4_scale_min(b + 4, j, &s, &m);
    gq_single(o, gq_f16(b) * (float)s, -(gq_f16(b + 2) * (float)m));
}

/* Chunk c of a row: by 16-byte loads (V16: Q4_K rows known to be 16-byte
 * aligned), else gq_decode_words. */
template <int T, bool V16> static __device__ __forceinline__ void mv_decode(const uint8_t *row, int c, gq_chunk *o)
{
    if constexpr (V16)
        mv_decode_q4k_v16(row, c, o);
    else
        gq_decode_words<T>(row, c, o);
}

/* Whether rows from p on, row_bytes apart, are all 16-byte aligned.  The
 * expert pointers (a GGUF's tensor data, the hybrid slab's slots) are not
 * promised to be, so the kernels ask and fall back to four-byte loads. */
static inline __device__ bool mv_rows_v16(const uint8_t *p, int64_t row_bytes)
{
    return (((uintptr_t)p | (uintptr_t)row_bytes) & 15) == 0;
}

/* A lane's part of a row's dots (and the up row's with GLU), into acc and
 * acc2: two chunks per lane per step, both decoded before either is used,
 * so their loads are in flight together; a lane without a second chunk
 * decodes its first again and adds nothing for it. */
template <int T, bool GLU, int NT, bool V16>
static __device__ __forceinline__ void mv_row_dots(const uint8_t *row, const uint8_t *row2, int n_chunks,
                                                   const gk_act &x, const mv_place &p, float *acc, float *acc2)
{
    const int lane = threadIdx.x % GPU_WARP;
    for (int c = lane; c < n_chunks; c += 2 * GPU_WARP) {
        const bool two = c + GPU_WARP < n_chunks;
        const int c2 = two ? c + GPU_WARP : c;
        gq_chunk ch[2], chg[2];
        mv_decode<T, V16>(row, c, &ch[0]);
        mv_decode<T, V16>(row, c2, &ch[1]);
        if (GLU) {
            mv_decode<T, V16>(row2, c, &chg[0]);
            mv_decode<T, V16>(row2, c2, &chg[1]);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= p.n_tok)
                break;
            const int64_t ar = p.act0 + t;
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int cu = u == 0 ? c : c2;
                const gq_act xa = gq_act_chunk(x.q + ar * x.n, (const int4 *)x.meta + ar * (x.n / 32), cu);
                const float d = u == 0 || two ? __int_as_float(xa.m.x) : 0.0f;
                acc[t] += d * gq_chunk_dot<T>(&ch[u], xa.a, xa.m.y, xa.m.z);
                if (GLU)
                    acc2[t] += d * gq_chunk_dot<T>(&chg[u], xa.a, xa.m.y, xa.m.z);
            }
        }
    }
}

/* Rows a warp of a staged launch takes (k_matvec_staged, experts.cu). */
enum { MVS_ROWS = 4 };

/* Row k of a warp's MVS_ROWS from r0; rows past the end are the last
 * again (decoded, never stored). */
static inline __device__ const uint8_t *mvs_row(const uint8_t *w, const gk_mat &wm, int64_t r0, int k)
{
    return w + (r0 + k < wm.n_rows ? r0 + k : wm.n_rows - 1) * wm.row_bytes;
}

/* The staged row's chunk c against a decoded chunk, added to *acc. */
template <int T>
static __device__ __forceinline__ void mvs_dot(const gq_chunk *ch, const int8_t *xq, const int4 *xm, int c, float *acc)
{
    const gq_act x = gq_act_chunk(xq, xm, c);
    *acc += __int_as_float(x.m.x) * gq_chunk_dot<T>(ch, x.a, x.m.y, x.m.z);
}

enum { MVS_SPREAD = 3 };

/* The spread form's terms (term[s]: item s * 32 + lane of the warp's
 * MVS_ROWS x n_chunks items) shuffled to the lanes that the chunk loop
 * gives them (chunk c of row k in lane c, acc[k]), so that the warp sums
 * add the same terms in the same order. */
static __device__ __forceinline__ void mvs_spread_to_rows(const float *term, int n_chunks, float *acc)
{
    const int lane = threadIdx.x % GPU_WARP;
#pragma unroll
    for (int k = 0; k < MVS_ROWS; k++) { /* a shuffle per slot: a uniform pick of term[] became local memory */
        const int i = k * n_chunks + lane;
        float v = 0.0f;
#pragma unroll
        for (int s = 0; s < MVS_SPREAD; s++) {
            const float t = gpu_shfl(term[s], i % GPU_WARP);
            v = i / GPU_WARP == s ? t : v;
        }
        acc[k] = lane < n_chunks ? v : 0.0f;
    }
}

/* Rows of up to MVS_SPREAD * GPU_WARP / MVS_ROWS chunks (768 values: the
 * experts' down rows of Qwen3-30B-A3B, 24 chunks) take the warp's
 * MVS_ROWS x n_chunks (row, chunk) items spread over all its lanes,
 * item i in lane i % 32: MVS_SPREAD decodes a lane instead of MVS_ROWS on
 * 24 of the 32 lanes, so fewer loads a lane and fewer registers held
 * (a Q6_K chunk's 18 words); mvs_spread_to_rows then gives each term the
 * chunk loop's lane.  The Q6_K down launch
 * went from 10.98 to 10.3 us (Nsight Compute, serialised;
 * docs/PERFORMANCE.md, "CUDA decode, session 11: the experts'
 * launches"). */
template <int T, bool V16>
static __device__ __forceinline__ void mvs_dots_spread(const uint8_t *w, const gk_mat &wm, int64_t r0, int n_chunks,
                                                       const int8_t *xq, const int4 *xm, float *acc)
{
    const int lane = threadIdx.x % GPU_WARP, n_items = MVS_ROWS * n_chunks;
    gq_chunk ch[MVS_SPREAD];
    int cs[MVS_SPREAD];
#pragma unroll
    for (int s = 0; s < MVS_SPREAD; s++) {
        const int i = min(s * GPU_WARP + lane, n_items - 1), k = i / n_chunks;
        cs[s] = i - k * n_chunks;
        if (s * GPU_WARP < n_items)
            mv_decode<T, V16>(mvs_row(w, wm, r0, k), cs[s], &ch[s]);
    }
    float term[MVS_SPREAD];
#pragma unroll
    for (int s = 0; s < MVS_SPREAD; s++) {
        term[s] = 0.0f;
        if (s * GPU_WARP < n_items)
            mvs_dot<T>(&ch[s], xq, xm, cs[s], &term[s]);
    }
    mvs_spread_to_rows(term, n_chunks, acc);
}

/* A lane's part of its warp's MVS_ROWS row dots: chunk c of every row in
 * lane c % 32, decoded for all rows before their dots.  The spread above
 * is for the types whose chunk takes many loads (Q6_K's 18 words); a Q4_K
 * chunk is two 16-byte loads and a few bytes, and its down launch was
 * faster in the chunk loop below: tg128 506.8 against 505.4 t/s, three
 * interleaved rounds in one call on the H200, although the bound of 4
 * blocks an SM then spills 4 bytes (docs/PERFORMANCE.md, "CUDA decode,
 * session 12: two one-line variants"). */
template <int T, bool V16>
static __device__ __forceinline__ void mvs_dots(const uint8_t *w, const gk_mat &wm, int64_t r0, const int8_t *xq,
                                                const int4 *xm, float *acc)
{
    const int lane = threadIdx.x % GPU_WARP, n_chunks = (int)(wm.n_cols / 32);
    if (T != GQ_Q4_K && n_chunks > 0 && MVS_ROWS * n_chunks <= MVS_SPREAD * GPU_WARP) {
        mvs_dots_spread<T, V16>(w, wm, r0, n_chunks, xq, xm, acc);
        return;
    }
#pragma unroll
    for (int k = 0; k < MVS_ROWS; k++)
        acc[k] = 0.0f;
    for (int c = lane; c < n_chunks; c += GPU_WARP) {
        gq_chunk ch[MVS_ROWS];
#pragma unroll
        for (int k = 0; k < MVS_ROWS; k++)
            mv_decode<T, V16>(mvs_row(w, wm, r0, k), c, &ch[k]);
#pragma unroll
        for (int k = 0; k < MVS_ROWS; k++)
            mvs_dot<T>(&ch[k], xq, xm, c, &acc[k]);
    }
}

#endif
