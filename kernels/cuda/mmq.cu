/*
 * mmq.cu — prefill for the quantised formats: W . X as 8-bit integer
 * tensor-core products (mma.cuh) of the weights' own small integers
 * (quant.cuh's chunks) and the activations' two-level 8-bit form
 * (quantize.cu: x = d a + d' a' per 32 values), the scales applied per
 * 32-value chunk in f32:
 *
 *   y[t][r] = sum over chunks c, levels of d_tc (s_rc dot(q_rc, a_tc) + m_rc sum(a_tc))
 *
 * per 16-value half for the formats with two scales per chunk.  Level 1
 * alone is the matvec kernels' sum; the second level makes prefill's
 * inputs finer than f16 (quantize.cu says why it is needed).
 *
 * A block computes MQ_BM weight rows x MQ_BN activation rows, MQ_KS values
 * a step.  Per step the activation bytes of both levels and their per-32
 * scales are copied to shared memory asynchronously (cp.async) while every
 * thread decodes one chunk of the weight tile into shared memory (8-bit
 * integers, and {s0, s1, m0, m1} per chunk); then each warp multiplies its 16 weight rows
 * by the tile's activation rows, 8 at a time, skipping the groups of 8
 * past the tile's valid rows (a grouped tile holds one expert's slots,
 * often fewer than MQ_BN).  The integer products are exact; each chunk's
 * 32-bit result goes to f32 once.
 *
 * The experts' gate and up matrices (a GLU pair) run as one launch with
 * two weight tiles over each activation tile, writing silu(gate) * up: the
 * activation tiles are loaded once, and the two float outputs and the
 * activation launch are saved.
 */
#include "mm_tile.cuh"
#include "mma.cuh"

enum { MQ_BM = 64, MQ_BN = 64, MQ_KS = 64, MQ_THREADS = 128 };
enum { MQ_CH = MQ_KS / 32, MQ_LD = MQ_KS + 16, MQ_SLD = MQ_CH + 1, MQ_GROUPS = MQ_BN / 8 };

/* MQ_LD: a row of MQ_KS bytes plus 16, so the 8 rows a fragment load reads
 * (row stride 20 words) start at 8 distinct multiples of 4 banks and its
 * 32 lanes hit 32 banks; also keeps rows 16-byte aligned for the vector
 * stores and cp.async.  MQ_SLD: per-row scale entries padded to 3 x 16
 * bytes, so the distinct rows one 16-byte load reads fall in distinct
 * banks.  Both levels and two weight tiles fit the 48 KiB of static
 * shared memory. */
static_assert(MQ_BM == 16 * (MQ_THREADS / GPU_WARP), "a warp owns 16 weight rows");
static_assert(MQ_LD % 16 == 0 && (MQ_LD / 4) % 8 == 4, "fragment rows on distinct banks");

/* A weight tile, decoded: 8-bit integers, and per row and chunk
 * {s0, s1, m0, m1}. */
struct mq_wtile {
    int8_t q[MQ_BM * MQ_LD];
    float4 sc[MQ_BM * MQ_SLD];
};

/* One level of the activation tile: 8-bit integers, and per row and
 * chunk {d bits, sum of q over 0..15, over 16..31, -}. */
struct mq_atile {
    int8_t q[MQ_BN * MQ_LD];
    int4 meta[MQ_BN * MQ_SLD];
};

/* NM weight tiles (2: gate and up of a GLU pair) over one activation tile
 * of two levels. */
template <int NM> struct mq_smem {
    mq_wtile w[NM];
    mq_atile a[2];
    int64_t act_row[MQ_BN], out_row[MQ_BN];
};

/* Activation rows past the tile read as zeros (their outputs are never
 * stored; zeros keep the arithmetic finite). */
template <int NM> static inline __device__ void mq_zero_unused(mq_smem<NM> &sm, int count)
{
    for (int lv = 0; lv < 2; lv++) {
        for (int i = threadIdx.x; i < (MQ_BN - count) * (MQ_LD / 16); i += MQ_THREADS)
            ((int4 *)(sm.a[lv].q + count * MQ_LD))[i] = make_int4(0, 0, 0, 0);
        for (int i = threadIdx.x; i < (MQ_BN - count) * MQ_SLD; i += MQ_THREADS)
            sm.a[lv].meta[count * MQ_SLD + i] = make_int4(0, 0, 0, 0);
    }
}

/* Starts the copies of n_ch chunks of one level of every valid
 * activation row from column k0. */
static inline __device__ void mq_load_level(mq_atile &t, const int64_t *act_row, const int8_t *q, const int32_t *meta,
                                            int64_t n, int count, int64_t k0, int n_ch)
{
    enum { PIECES = MQ_KS / 16 };
    for (int i = threadIdx.x; i < count * PIECES; i += MQ_THREADS) {
        const int r = i / PIECES, p = i % PIECES;
        if (p < 2 * n_ch)
            cp_async16(t.q + r * MQ_LD + 16 * p, q + act_row[r] * n + k0 + 16 * p);
    }
    for (int i = threadIdx.x; i < count * MQ_CH; i += MQ_THREADS) {
        const int r = i / MQ_CH, c = i % MQ_CH;
        if (c < n_ch)
            cp_async16(&t.meta[r * MQ_SLD + c], meta + 4 * (act_row[r] * (n / 32) + k0 / 32 + c));
    }
}

template <int NM>
static inline __device__ void mq_load_act(mq_smem<NM> &sm, const gk_act &x, int count, int64_t k0, int n_ch)
{
    mq_load_level(sm.a[0], sm.act_row, x.q, x.meta, x.n, count, k0, n_ch);
    mq_load_level(sm.a[1], sm.act_row, x.q_lo, x.meta_lo, x.n, count, k0, n_ch);
    cp_async_commit();
}

/* Decodes n_ch chunks of the tile's weight rows from chunk c0 (rows past
 * the matrix as zeros). */
template <int T>
static inline __device__ void mq_load_weights(mq_wtile &t, const gk_mat &w, const uint8_t *base, int64_t row0, int c0,
                                              int n_ch)
{
    for (int i = threadIdx.x; i < MQ_BM * MQ_CH; i += MQ_THREADS) {
        const int r = i / MQ_CH, c = i % MQ_CH;
        if (c >= n_ch)
            continue;
        gq_chunk ch;
        if (row0 + r < w.n_rows) {
            gq_decode<T>(base + (row0 + r) * w.row_bytes, c0 + c, &ch);
        } else {
            for (int k = 0; k < 8; k++)
                ch.q[k] = 0;
            gq_single(&ch, 0.0f, 0.0f);
        }
        int4 *dst = (int4 *)(t.q + r * MQ_LD + 32 * c);
        dst[0] = make_int4(ch.q[0], ch.q[1], ch.q[2], ch.q[3]);
        dst[1] = make_int4(ch.q[4], ch.q[5], ch.q[6], ch.q[7]);
        t.sc[r * MQ_SLD + c] = make_float4(ch.s[0], ch.s[1], ch.m[0], ch.m[1]);
    }
}

static inline __device__ int mq_ld32(const int8_t *p)
{
    return *(const int *)p;
}

/* One chunk of one 8-row group into acc (mma.cuh's D layout): weight rows
 * g, g + 8 of the warp with scales w0, w1; activation rows 2t, 2t + 1 of
 * the group with meta m0, m1. */
template <bool TWO>
static inline __device__ void mq_chunk(float acc[4], const int a[4], const int b[2], float4 w0, float4 w1, int4 m0,
                                       int4 m1)
{
    const float d0 = __int_as_float(m0.x), d1 = __int_as_float(m1.x);
    if constexpr (!TWO) {
        int p[4];
        mma_s8_16832(p, a, b);
        const float s0 = d0 * (float)(m0.y + m0.z), s1 = d1 * (float)(m1.y + m1.z);
        acc[0] += w0.x * d0 * (float)p[0] + w0.z * s0;
        acc[1] += w0.x * d1 * (float)p[1] + w0.z * s1;
        acc[2] += w1.x * d0 * (float)p[2] + w1.z * s0;
        acc[3] += w1.x * d1 * (float)p[3] + w1.z * s1;
    } else {
        int lo[4], hi[4];
        mma_s8_16816(lo, a[0], a[1], b[0]);
        mma_s8_16816(hi, a[2], a[3], b[1]);
        const float l0 = (float)m0.y, h0 = (float)m0.z, l1 = (float)m1.y, h1 = (float)m1.z;
        acc[0] += d0 * (w0.x * (float)lo[0] + w0.y * (float)hi[0] + w0.z * l0 + w0.w * h0);
        acc[1] += d1 * (w0.x * (float)lo[1] + w0.y * (float)hi[1] + w0.z * l1 + w0.w * h1);
        acc[2] += d0 * (w1.x * (float)lo[2] + w1.y * (float)hi[2] + w1.z * l0 + w1.w * h0);
        acc[3] += d1 * (w1.x * (float)lo[3] + w1.y * (float)hi[3] + w1.z * l1 + w1.w * h1);
    }
}

/* This warp's 16 rows of each weight tile times the tile's first n_groups
 * groups of 8 activation rows, over n_ch chunks. */
template <bool TWO, int NM>
static inline __device__ void mq_multiply(const mq_smem<NM> &sm, int n_ch, int n_groups, float acc[NM][MQ_GROUPS][4])
{
    const int lane = threadIdx.x % GPU_WARP, g = lane / 4, t = lane % 4;
    const int ra = 16 * ((int)threadIdx.x / GPU_WARP) + g;
    for (int c = 0; c < n_ch; c++) {
        int a[NM][4];
        float4 w0[NM], w1[NM];
#pragma unroll
        for (int m = 0; m < NM; m++) {
            const int8_t *pa = sm.w[m].q + ra * MQ_LD + 32 * c + 4 * t;
            a[m][0] = mq_ld32(pa);
            a[m][1] = mq_ld32(pa + 8 * MQ_LD);
            a[m][2] = mq_ld32(pa + 16);
            a[m][3] = mq_ld32(pa + 8 * MQ_LD + 16);
            w0[m] = sm.w[m].sc[ra * MQ_SLD + c];
            w1[m] = sm.w[m].sc[(ra + 8) * MQ_SLD + c];
        }
#pragma unroll
        for (int j = 0; j < MQ_GROUPS; j++) {
            if (j >= n_groups)
                break;
            const int n0 = 8 * j + 2 * t;
#pragma unroll
            for (int lv = 0; lv < 2; lv++) {
                const int8_t *pb = sm.a[lv].q + (8 * j + g) * MQ_LD + 32 * c + 4 * t;
                const int b[2] = {mq_ld32(pb), mq_ld32(pb + 16)};
                const int4 m0 = sm.a[lv].meta[n0 * MQ_SLD + c], m1 = sm.a[lv].meta[(n0 + 1) * MQ_SLD + c];
#pragma unroll
                for (int m = 0; m < NM; m++)
                    mq_chunk<TWO>(acc[m][j], a[m], b, w0[m], w1[m], m0, m1);
            }
        }
    }
}

/* NM == 2: w2 is the up matrix of a GLU pair (same type and shape as w),
 * and the output is silu(W . x) * (W2 . x), as gk_glu_act's plain SwiGLU. */
template <int T, int NM>
__global__ void __launch_bounds__(MQ_THREADS) k_mmq(gk_mat w, gk_mat w2, gk_act x, int n_tok, gk_out out,
                                                    const gk_route *routes, gk_groups g, bool grouped, bool gather)
{
    gpu_pdl_wait();
    __shared__ __align__(16) mq_smem<NM> sm;
    const mm_tile tile = mm_setup<MQ_BN>(w, n_tok, routes, g, grouped, gather, sm.act_row, sm.out_row);
    if (tile.count <= 0)
        return;
    const uint8_t *base[2] = {tile.w, NM == 1 ? NULL : tile.expert >= 0 ? expert_matrix(w2, tile.expert) : w2.data};
    mq_zero_unused(sm, tile.count);
    __syncthreads();
    const int64_t row0 = (int64_t)blockIdx.x * MQ_BM;
    const int n_groups = (tile.count + 7) / 8;
    float acc[NM][MQ_GROUPS][4] = {};
    for (int64_t k0 = 0; k0 < w.n_cols; k0 += MQ_KS) {
        const int n_ch = (int)min((int64_t)MQ_CH, (w.n_cols - k0) / 32);
        mq_load_act(sm, x, tile.count, k0, n_ch);
#pragma unroll
        for (int m = 0; m < NM; m++)
            mq_load_weights<T>(sm.w[m], w, base[m], row0, (int)(k0 / 32), n_ch);
        cp_async_wait_all();
        __syncthreads();
        mq_multiply<gq_traits<T>::two_scales != 0>(sm, n_ch, n_groups, acc);
        __syncthreads();
    }
    const int lane = threadIdx.x % GPU_WARP;
    const int64_t r = row0 + 16 * ((int)threadIdx.x / GPU_WARP) + lane / 4;
#pragma unroll
    for (int j = 0; j < MQ_GROUPS; j++)
        for (int e = 0; e < 4; e++) {
            const int n = 8 * j + 2 * (lane % 4) + (e & 1);
            const int64_t re = r + 8 * (e / 2);
            if (n < tile.count && re < w.n_rows)
                mm_store(out, re, sm.out_row[n], NM == 1 ? acc[0][j][e] : silu(acc[0][j][e]) * acc[NM - 1][j][e]);
        }
}

template <int T>
static int mmq_start(gpuStream_t s, dim3 grid, const gk_mat *w, const gk_mat *w2, const gk_act *x, int n_tok,
                     const gk_out *out, const gk_route *routes, const gk_groups *g, bool grouped, bool gather)
{
    if (w2 == NULL)
        return gk_launch(k_mmq<T, 1>, grid, MQ_THREADS, 0, s, *w, *w, *x, n_tok, *out, routes, *g, grouped, gather);
    return gk_launch(k_mmq<T, 2>, grid, MQ_THREADS, 0, s, *w, *w2, *x, n_tok, *out, routes, *g, grouped, gather);
}

int mmq_launch(gpuStream_t s, const gk_mat *w, const gk_mat *w2, const gk_act *x, int n_tok, const gk_out *out,
               const gk_route *routes, const gk_groups *g, bool grouped, bool gather)
{
    if (w->n_cols % 32 != 0 || x->q == NULL || x->meta == NULL || x->q_lo == NULL || x->meta_lo == NULL ||
        (w2 != NULL && (w2->type != w->type || w2->n_rows != w->n_rows || w2->n_cols != w->n_cols ||
                        w2->row_bytes != w->row_bytes)))
        return (int)gpuErrorInvalidValue;
    const dim3 grid((unsigned)((w->n_rows + MQ_BM - 1) / MQ_BM), mm_grid_rows<MQ_BN>(n_tok, g, grouped));
    if (grid.x == 0 || grid.y == 0)
        return 0;
    switch (w->type) {
#define MQ_CASE_(T)                                                                                              \
    case T:                                                                                                      \
        return mmq_start<T>(s, grid, w, w2, x, n_tok, out, routes, g, grouped, gather);
        GQ_FOR_EACH_QUANT(MQ_CASE_)
#undef MQ_CASE_
    default:
        return (int)gpuErrorInvalidValue;
    }
}
