/*
 * mmq.cu — prefill for the quantised formats: W . X on the tensor cores in
 * f16 with f32 accumulation (mma.cuh).  Each weight chunk (quant.cuh:
 * value = s q + m per 16-value half) is decoded once per block into f16
 * values with its scales applied; the activations arrive as f16 rows
 * (gk_rows_to_f16).  Rounding both operands to f16 (2^-11 relative) is
 * what the session-3 f16 tiles did, which met every reference bar; the
 * 8-bit activations of the decode kernels (per 32 values, 1/254 of the
 * block's largest value) moved a greedy continuation of the Q4_K_M
 * reference model when prefill used them (docs/PERFORMANCE.md, session 4),
 * and with the scales folded into the weights the inner loop is tensor-core
 * products alone (no per-chunk scale arithmetic).
 *
 * A block computes MQ_BM weight rows x MQ_BN activation rows, MQ_KS values
 * a step.  The weight rows' raw blocks of the next step (coalesced 16-byte
 * pieces, asked of L2 MQ_AHEAD steps before) and its activation tile (two
 * buffers) are copied to shared memory asynchronously (cp.async) while the
 * warps multiply the current step's tiles; at the top of a step every
 * thread decodes one chunk from the staged bytes into the f16 weight tile
 * (a thread reading its own row's chunk from device memory made 16
 * scattered requests per load instruction, on the critical path).  Each
 * warp multiplies its 16 weight rows by the tile's activation rows, 8 at a
 * time, skipping the groups of 8 past the tile's valid rows (a grouped tile
 * holds one expert's slots, often fewer than MQ_BN).
 *
 * The experts' gate and up matrices (a GLU pair) run as one launch with
 * two weight tiles over each activation tile, writing silu(gate) * up: the
 * activation tiles are loaded once, and the two float outputs and the
 * activation launch are saved.
 *
 * A dense launch may stack up to MQ_MATS matrices of one row length over
 * the same activation rows (a layer's Q, K and V), grid.x running over
 * their row tiles in turn: a block's time is its steps' latency more than
 * its work (docs/PERFORMANCE.md, session 6: 2.3 us a step with one block
 * on a multiprocessor, 3.4 with four), so K's 64 blocks alone took 68% of
 * the time of Q's 512; stacked, the 640 blocks run as one wave (5 blocks a
 * multiprocessor).  The same launch runs a long-row matrix as its two
 * column halves (gk_matmul_split_pays), matrix m reading activation
 * columns x_col[m] on: twice the blocks at half the steps.
 */
#include "mm_tile.cuh"
#include "mma.cuh"

enum { MQ_BM = MQ_TILE_ROWS, MQ_BN = MQ_TILE_TOK, MQ_KS = 64, MQ_THREADS = 128 };
enum { MQ_CH = MQ_KS / 32, MQ_LD = MQ_KS + 8, MQ_GROUPS = MQ_BN / 8, MQ_AHEAD = 2, MQ_MATS = 3 };

/* MQ_LD: a row of MQ_KS halves plus 8, so a row is 36 words: the 8 rows a
 * fragment load reads start 4 banks apart and its 32 lanes hit 32 banks;
 * rows stay 16-byte aligned for the vector stores and cp.async. */
static_assert(MQ_BM == 16 * (MQ_THREADS / GPU_WARP), "a warp owns 16 weight rows");
static_assert(MQ_BM * MQ_CH == MQ_THREADS, "a thread decodes one weight chunk a step");
static_assert((MQ_LD / 2) % 32 == 4, "fragment rows on distinct banks");

/* NM weight tiles (2: gate and up of a GLU pair), two activation buffers
 * (the staged raw bytes follow in dynamic shared memory). */
template <int NM> struct mq_smem {
    half w[NM][MQ_BM * MQ_LD];
    half a[2][MQ_BN * MQ_LD];
    int32_t act_row[MQ_BN], out_row[MQ_BN];
};

/* Activation rows past the tile read as zeros (their outputs are never
 * stored; zeros keep the arithmetic finite). */
template <int NM> static inline __device__ void mq_zero_unused(mq_smem<NM> &sm, int count)
{
    for (int b = 0; b < 2; b++)
        for (int i = threadIdx.x; i < (MQ_BN - count) * (MQ_LD / 8); i += MQ_THREADS)
            ((int4 *)(sm.a[b] + count * MQ_LD))[i] = make_int4(0, 0, 0, 0);
}

/* Starts the copies of the valid activation rows' values k0 .. k0 + MQ_KS
 * (one commit group). */
static inline __device__ void mq_load_act(half *t, const uint16_t *xh, const int32_t *act_row, int64_t n, int count,
                                          int64_t k0)
{
    enum { PIECES = MQ_KS / 8 };
    for (int i = threadIdx.x; i < count * PIECES; i += MQ_THREADS) {
        const int r = i / PIECES, p = i % PIECES;
        cp_async16(t + r * MQ_LD + 8 * p, xh + (int64_t)act_row[r] * n + k0 + 8 * p);
    }
    cp_async_commit();
}

/* The 4 bytes of decoded word q (signed, as gq_value reads them) as two
 * f16 pairs s b + m: byte b + 128 under the exponent bits 0x64 is the f16
 * 1152 + b exactly, one subtraction leaves b (exact: |b| <= 128), and one
 * fused multiply-add per pair rounds once.  Three instructions a pair
 * where converting each value through f32 took eight; s and m are rounded
 * to f16 first (2^-11 relative, as the values themselves). */
static inline __device__ void mq_word(int32_t q, half2 s, half2 m, int out[2])
{
    const uint32_t u = (uint32_t)q ^ 0x80808080u;
    const uint32_t lo = __byte_perm(u, 0x64646464u, 0x5140), hi = __byte_perm(u, 0x64646464u, 0x7362);
    const half2 off = __float2half2_rn(1152.0f);
    const half2 a = __hfma2(__hsub2(*(const half2 *)&lo, off), s, m);
    const half2 b = __hfma2(__hsub2(*(const half2 *)&hi, off), s, m);
    out[0] = *(const int *)&a;
    out[1] = *(const int *)&b;
}

/* The raw bytes of one weight row and step in shared memory: the blocks
 * that hold the step's MQ_CH chunks (one K-quant super-block, or MQ_CH
 * 32-value blocks), from the 16-byte boundary below the first block, so
 * the copies are aligned 16-byte pieces and the staged block keeps its
 * address modulo 16 (the decoders' 2- and 4-byte loads stay aligned).
 * Blocks of a multiple of 16 bytes (Q4_K, Q5_K) start on the boundary
 * (mmq_launch checks the matrix; tensors, slab slots and staging parts are
 * 256-byte aligned, rows whole blocks), so their rows take no slack: the
 * 2 KiB this saves lets the GLU pair's blocks run 4 to a multiprocessor
 * instead of 3. */
template <int T> struct mq_raw {
    enum {
        per_block = gq_traits<T>::block / 32,
        blocks = per_block >= MQ_CH ? 1 : MQ_CH / per_block,
        span = blocks * gq_traits<T>::bytes,
        aligned = gq_traits<T>::bytes % 16 == 0,
        ld = (span + 15 + (aligned ? 0 : 15)) / 16 * 16,
    };
    static_assert(per_block % MQ_CH == 0 || MQ_CH % per_block == 0, "a step holds whole blocks or one block");
};

/* Where the step's first staged block of row r starts in device memory. */
template <int T>
static inline __device__ const uint8_t *mq_first_block(const gk_mat &w, const uint8_t *base, int64_t row, int c0)
{
    return base + row * w.row_bytes + (int64_t)(c0 / mq_raw<T>::per_block) * gq_traits<T>::bytes;
}

/* The 16-byte pieces of a staged super-block that one step's two chunks
 * read, where that is fewer than all: the first `head` pieces (d, dmin
 * and scales; Q5_K's high bits too) and the two pieces of nibbles at
 * piece qs + 2 (j / 2) that chunks j and j + 1 share.  A super-block
 * spans four steps, so copying it whole moved every byte four times
 * (ncu, session 6: the L2 at 79% of its throughput in the GLU launch, the
 * device memory at 10%).  The pieces not copied keep older bytes, which
 * the step's chunks do not read (gq_decode). */
template <int T> struct mq_slice {
    enum { head = 0, qs = 0 }; /* head 0: the whole span */
};
template <> struct mq_slice<GQ_Q4_K> { /* {d, dmin, scales[12]}, qs[128] */
    enum { head = 1, qs = 1 };
};
template <> struct mq_slice<GQ_Q5_K> { /* {d, dmin, scales[12]}, qh[32], qs[128] */
    enum { head = 3, qs = 3 };
};

/* Starts the copies of the raw blocks of every valid weight row for the
 * step from chunk c0 (no commit: they join the activation tile's group). */
template <int T>
static inline __device__ void mq_stage_raw(uint8_t *raw, const gk_mat &w, const uint8_t *base, int64_t row0, int c0)
{
    enum { LD = mq_raw<T>::ld, HEAD = mq_slice<T>::head, PIECES = HEAD > 0 ? HEAD + 2 : LD / 16 };
    static_assert(HEAD == 0 || (mq_raw<T>::aligned && mq_raw<T>::blocks == 1 && MQ_CH == 2), "a sliced step");
    const int qs_piece = mq_slice<T>::qs + 2 * (c0 % mq_raw<T>::per_block / 2) - HEAD;
    for (int i = threadIdx.x; i < MQ_BM * PIECES; i += MQ_THREADS) {
        const int r = i / PIECES, k = i % PIECES, p = HEAD == 0 || k < HEAD ? k : qs_piece + k;
        if (row0 + r >= w.n_rows)
            continue;
        const uint8_t *first = mq_first_block<T>(w, base, row0 + r, c0);
        const uint8_t *src = (const uint8_t *)((uintptr_t)first & ~(uintptr_t)15) + 16 * p;
        const int64_t left = first + mq_raw<T>::span - src; /* never read past the last block */
        if (left > 0)
            cp_async16_part(raw + r * LD + 16 * p, src, left < 16 ? (int)left : 16);
    }
}

/* This thread's chunk of the weight tile, decoded from the staged bytes
 * of chunk c0 + its own (rows past the matrix as zeros). */
template <int T>
static inline __device__ void mq_load_weights(half *t, const gk_mat &w, const uint8_t *raw, const uint8_t *base,
                                              int64_t row0, int c0)
{
    const int r = (int)threadIdx.x / MQ_CH, c = (int)threadIdx.x % MQ_CH;
    int v[16];
    if (row0 + r < w.n_rows) {
        const uintptr_t mis = (uintptr_t)mq_first_block<T>(w, base, row0 + r, c0) & 15;
        gq_chunk ch;
        gq_decode<T>(raw + r * mq_raw<T>::ld + mis, c0 % mq_raw<T>::per_block + c, &ch);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const half2 sh = __float2half2_rn(ch.s[h]), mh = __float2half2_rn(ch.m[h]);
#pragma unroll
            for (int k = 4 * h; k < 4 * h + 4; k++)
                mq_word(ch.q[k], sh, mh, v + 2 * k);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 16; k++)
            v[k] = 0;
    }
    int4 *dst = (int4 *)(t + r * MQ_LD + 32 * c);
#pragma unroll
    for (int k = 0; k < 4; k++)
        dst[k] = make_int4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
}

/* Asks L2 for the block holding chunk c0 + MQ_CH r_part of this thread's
 * row (first, middle and last byte: a block of up to 210 bytes spans at
 * most three 128-byte lines), so that the staging copies MQ_AHEAD steps
 * later wait on L2, not on device memory: once a block, by its row's
 * first thread, in the step that reaches it (a super-block holds four
 * steps). */
template <int T>
static inline __device__ void mq_prefetch(const gk_mat &w, const uint8_t *base, int64_t row0, int c0)
{
    enum { PER = mq_raw<T>::per_block };
    const int r = (int)threadIdx.x / MQ_CH, c = c0 + (int)threadIdx.x % MQ_CH;
    if (row0 + r >= w.n_rows || c >= w.n_cols / 32 || c % PER != 0)
        return;
    const uint8_t *blk = base + (row0 + r) * w.row_bytes + (int64_t)(c / PER) * gq_traits<T>::bytes;
    prefetch_l2(blk);
    prefetch_l2(blk + gq_traits<T>::bytes / 2);
    prefetch_l2(blk + gq_traits<T>::bytes - 1);
}

static inline __device__ int mq_ld32(const half *p)
{
    return *(const int *)p;
}

/* This warp's 16 rows of each weight tile times the activation buffer's
 * first n_groups groups of 8 rows, over the step's MQ_KS values. */
template <int NM>
static inline __device__ void mq_multiply(const mq_smem<NM> &sm, const half *act, int n_groups,
                                          float acc[NM][MQ_GROUPS][4])
{
    const int lane = threadIdx.x % GPU_WARP, g = lane / 4, t = lane % 4;
    const int ra = 16 * ((int)threadIdx.x / GPU_WARP) + g;
#pragma unroll
    for (int kk = 0; kk < MQ_KS; kk += 16) {
        int a[NM][4];
#pragma unroll
        for (int m = 0; m < NM; m++) {
            const half *pa = sm.w[m] + ra * MQ_LD + kk + 2 * t;
            a[m][0] = mq_ld32(pa);
            a[m][1] = mq_ld32(pa + 8 * MQ_LD);
            a[m][2] = mq_ld32(pa + 8);
            a[m][3] = mq_ld32(pa + 8 * MQ_LD + 8);
        }
#pragma unroll
        for (int j = 0; j < MQ_GROUPS; j++) {
            if (j >= n_groups)
                break;
            const half *pb = act + (8 * j + g) * MQ_LD + kk + 2 * t;
            const int b[2] = {mq_ld32(pb), mq_ld32(pb + 8)};
#pragma unroll
            for (int m = 0; m < NM; m++)
                mma_f16_16816(acc[m][j], a[m], b);
        }
    }
}

/* Block tile `tile` of grid.x over w's rows.  NM == 2: w2 is the up
 * matrix of a GLU pair (same type and shape as w), and the output is
 * silu(W . x) * (W2 . x), as gk_glu_act's plain SwiGLU. */
template <int T, int NM>
static inline __device__ void mq_tile(const gk_mat &w, const gk_mat &w2, const gk_act &x, int n_tok,
                                      const gk_out &out, const gk_route *routes, const gk_groups &g, bool grouped,
                                      bool gather, int tile_x)
{
    extern __shared__ __align__(16) uint8_t mq_dyn[];
    mq_smem<NM> &sm = *reinterpret_cast<mq_smem<NM> *>(mq_dyn);
    uint8_t *raw = mq_dyn + sizeof(mq_smem<NM>); /* NM x MQ_BM rows of mq_raw<T>::ld bytes */
    enum { RAW_BYTES = MQ_BM * mq_raw<T>::ld };
    const mm_tile tile = mm_setup<MQ_BN>(w, n_tok, routes, g, grouped, gather, sm.act_row, sm.out_row);
    if (tile.count <= 0)
        return;
    const uint8_t *base[2] = {tile.w, NM == 1 ? NULL : tile.expert >= 0 ? expert_matrix(w2, tile.expert) : w2.data};
    mq_zero_unused(sm, tile.count);
    __syncthreads();
    const int64_t row0 = (int64_t)tile_x * MQ_BM;
    const int n_groups = (tile.count + 7) / 8, n_steps = (int)(w.n_cols / MQ_KS);
    float acc[NM][MQ_GROUPS][4] = {};
#pragma unroll
    for (int m = 0; m < NM; m++) {
        for (int s = 1; s <= MQ_AHEAD; s++)
            mq_prefetch<T>(w, base[m], row0, s * MQ_CH);
        mq_stage_raw<T>(raw + m * RAW_BYTES, w, base[m], row0, 0);
    }
    mq_load_act(sm.a[0], x.h, sm.act_row, x.n, tile.count, 0);
    cp_async_wait_all();
    __syncthreads();
    for (int s = 0; s < n_steps; s++) {
#pragma unroll
        for (int m = 0; m < NM; m++) {
            mq_prefetch<T>(w, base[m], row0, (s + 1 + MQ_AHEAD) * MQ_CH);
            mq_load_weights<T>(sm.w[m], w, raw + m * RAW_BYTES, base[m], row0, s * MQ_CH);
        }
        __syncthreads(); /* the raw bytes are free, the weight tile is ready */
        if (s + 1 < n_steps) { /* the next step's bytes fly during this step's products */
#pragma unroll
            for (int m = 0; m < NM; m++)
                mq_stage_raw<T>(raw + m * RAW_BYTES, w, base[m], row0, (s + 1) * MQ_CH);
            mq_load_act(sm.a[(s + 1) % 2], x.h, sm.act_row, x.n, tile.count, (int64_t)(s + 1) * MQ_KS);
        }
        mq_multiply<NM>(sm, sm.a[s % 2], n_groups, acc);
        cp_async_wait_all();
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

/* What a launch multiplies: n_mats matrices (more than one: dense, one
 * row length, the same activation rows), matrix m's row tiles ending
 * before grid.x tile ends[m], reading activation columns x_col[m] on; all
 * of type T but the last, of type TL.  glu: up is the GLU pair's second
 * matrix (NM == 2, one matrix). */
struct mq_job {
    gk_mat w[MQ_MATS];
    gk_out out[MQ_MATS];
    int64_t x_col[MQ_MATS];
    int ends[MQ_MATS];
    int n_mats;
    bool glu;
    gk_mat up;
};

/* Five blocks a multiprocessor for the single-matrix kernels (96
 * registers; the stacked Q, K, V launch's 640 blocks then fit one wave),
 * four for the GLU pair's (128). */
template <int T, int NM, int TL>
__global__ void __launch_bounds__(MQ_THREADS, NM == 1 ? 5 : 4)
    k_mmq(const __grid_constant__ mq_job job, gk_act x, int n_tok, const gk_route *routes, gk_groups g, bool grouped,
          bool gather)
{
    gpu_pdl_wait();
    if constexpr (NM == 2) {
        mq_tile<T, NM>(job.w[0], job.up, x, n_tok, job.out[0], routes, g, grouped, gather, (int)blockIdx.x);
        return;
    }
    int m = 0;
    while (m + 1 < job.n_mats && (int)blockIdx.x >= job.ends[m])
        m++;
    const int tile_x = (int)blockIdx.x - (m > 0 ? job.ends[m - 1] : 0);
    gk_act xm = x;
    xm.h += job.x_col[m];
    if (TL != T && m == job.n_mats - 1)
        mq_tile<TL, NM>(job.w[m], job.up, xm, n_tok, job.out[m], routes, g, grouped, gather, tile_x);
    else
        mq_tile<T, NM>(job.w[m], job.up, xm, n_tok, job.out[m], routes, g, grouped, gather, tile_x);
}

/* Shared memory of a block: the tiles and NM weight rows' staged bytes
 * (over the 48 KiB a block gets unless its limit is raised). */
template <int T, int NM, int TL>
static int mmq_go(gpuStream_t s, dim3 grid, const mq_job *job, const gk_act *x, int n_tok, const gk_route *routes,
                  const gk_groups *g, bool grouped, bool gather)
{
    const int ld_t = mq_raw<T>::ld, ld_tl = mq_raw<TL>::ld, ld = ld_t > ld_tl ? ld_t : ld_tl;
    const size_t smem = sizeof(mq_smem<NM>) + (size_t)NM * MQ_BM * ld;
    const int e = (int)gpu_allow_smem((const void *)k_mmq<T, NM, TL>, (int)smem);
    if (e != 0)
        return e;
    return gk_launch(k_mmq<T, NM, TL>, grid, MQ_THREADS, smem, s, *job, *x, n_tok, routes, *g, grouped, gather);
}

/* The stacked launch's type pairs (the last matrix another type): the
 * Q4_K_M and Q5_K_M mixes' attn_v in Q6_K under Q4_K / Q5_K Q and K, as
 * the decode's mixed launch (matvec.cu). */
#define MQ_MIXED_PAIRS(X) X(GQ_Q4_K, GQ_Q6_K) X(GQ_Q5_K, GQ_Q6_K)

template <int T>
static int mmq_start(gpuStream_t s, dim3 grid, const mq_job *job, const gk_act *x, int n_tok,
                     const gk_route *routes, const gk_groups *g, bool grouped, bool gather)
{
    const uint32_t last = job->w[job->n_mats - 1].type;
    if (job->glu)
        return mmq_go<T, 2, T>(s, grid, job, x, n_tok, routes, g, grouped, gather);
    if (last == T)
        return mmq_go<T, 1, T>(s, grid, job, x, n_tok, routes, g, grouped, gather);
#define MQ_MIXED_(A, B)                                                                                          \
    if constexpr (T == A)                                                                                        \
        if (last == B)                                                                                           \
            return mmq_go<A, 1, B>(s, grid, job, x, n_tok, routes, g, grouped, gather);
    MQ_MIXED_PAIRS(MQ_MIXED_)
#undef MQ_MIXED_
    return (int)gpuErrorInvalidValue;
}

static bool mq_mixed(uint32_t type, uint32_t last)
{
#define MQ_MIXED_(A, B)                                                                                          \
    if (type == A && last == B)                                                                                  \
        return true;
    MQ_MIXED_PAIRS(MQ_MIXED_)
#undef MQ_MIXED_
    return false;
}

/* Whether w's rows start on 16-byte boundaries where mq_raw stages them
 * without slack (the device table of a hybrid slab holds aligned slots;
 * such rows are whole blocks of a multiple of 16 bytes). */
static bool mq_aligned(const gk_mat *w)
{
    bool tight = false;
    switch (w->type) {
#define MQ_TIGHT_(T)                                                                                             \
    case T:                                                                                                      \
        tight = mq_raw<T>::aligned;                                                                              \
        break;
        GQ_FOR_EACH_QUANT(MQ_TIGHT_)
#undef MQ_TIGHT_
    default:
        break;
    }
    return !tight || w->expert_data != NULL || (uintptr_t)w->data % 16 == 0;
}

static int mmq_run(gpuStream_t s, const mq_job *job, const gk_act *x, int n_tok, const gk_route *routes,
                   const gk_groups *g, bool grouped, bool gather)
{
    const gk_mat *w = &job->w[0];
    const dim3 grid((unsigned)job->ends[job->n_mats - 1], mm_grid_rows<MQ_BN>(n_tok, g, grouped));
    if (grid.x == 0 || grid.y == 0)
        return 0;
    switch (w->type) {
#define MQ_CASE_(T)                                                                                              \
    case T:                                                                                                      \
        return mmq_start<T>(s, grid, job, x, n_tok, routes, g, grouped, gather);
        GQ_FOR_EACH_QUANT(MQ_CASE_)
#undef MQ_CASE_
    default:
        return (int)gpuErrorInvalidValue;
    }
}

/* Adds w's row tiles to the job, or says why not (0: added). */
static int mq_add(mq_job *job, const gk_mat *w, const gk_out *out, int64_t x_col)
{
    if (job->n_mats == MQ_MATS || w->n_cols % MQ_KS != 0 || !gk_is_quant_type(w->type) || !mq_aligned(w) ||
        (job->n_mats > 0 && w->n_cols != job->w[0].n_cols))
        return (int)gpuErrorInvalidValue;
    const int first = job->n_mats > 0 ? job->ends[job->n_mats - 1] : 0;
    job->w[job->n_mats] = *w;
    job->out[job->n_mats] = *out;
    job->x_col[job->n_mats] = x_col;
    job->ends[job->n_mats++] = first + (int)((w->n_rows + MQ_BM - 1) / MQ_BM);
    return 0;
}

int mmq_launch(gpuStream_t s, const gk_mat *w, const gk_mat *w2, const gk_act *x, int n_tok, const gk_out *out,
               const gk_route *routes, const gk_groups *g, bool grouped, bool gather)
{
    mq_job job = {};
    const int e = mq_add(&job, w, out, 0);
    if (e != 0 || x->h == NULL ||
        (w2 != NULL && (w2->type != w->type || w2->n_rows != w->n_rows || w2->n_cols != w->n_cols ||
                        w2->row_bytes != w->row_bytes || !mq_aligned(w2))))
        return e != 0 ? e : (int)gpuErrorInvalidValue;
    job.glu = w2 != NULL;
    if (job.glu)
        job.up = *w2;
    return mmq_run(s, &job, x, n_tok, routes, g, grouped, gather);
}

bool mmq_stacks(const gk_mat *const *w, int n_mats)
{
    mq_job job = {};
    const gk_out none = {};
    for (int m = 0; m < n_mats; m++)
        if (mq_add(&job, w[m], &none, 0) != 0 ||
            (m > 0 && w[m]->type != w[0]->type && (m < n_mats - 1 || !mq_mixed(w[0]->type, w[m]->type))))
            return false;
    return n_mats > 0;
}

int mmq_launch_stack(gpuStream_t s, const gk_mat *const *w, const gk_out *out, int n_mats, const gk_act *x,
                     const int64_t *x_col, int n_tok)
{
    if (!mmq_stacks(w, n_mats) || x->h == NULL)
        return (int)gpuErrorInvalidValue;
    mq_job job = {};
    for (int m = 0; m < n_mats; m++)
        mq_add(&job, w[m], &out[m], x_col != NULL ? x_col[m] : 0);
    const gk_groups none = {NULL, NULL, NULL, NULL, 0};
    return mmq_run(s, &job, x, n_tok, NULL, &none, false, false);
}
