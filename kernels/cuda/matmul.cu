/*
 * matmul.cu — prefill for float weights: W . X for many activation rows, as
 * tiles of MM_BM weight rows x MM_BN activation rows, stepping MM_BK = 64
 * values (two chunks) at a time.  Every thread converts one chunk of the
 * weight tile and loads 16 values of the activation tile, the activation
 * loads issued first so both are in flight together.
 *
 *   f16 path  (F16 weights): both tiles in f16, products on the tensor
 *             cores (WMMA 16x16x16, f32 accumulation); F16 rounding of
 *             matmul inputs is what the CPU reference does for F16 weights.
 *   f32 path  (F32 and BF16 weights): f32 tiles, f32 FMA, 4x4 outputs per
 *             thread, so F32 models keep F32 arithmetic.
 *
 * Quantised weights go to mmq.cu (8-bit integer tensor-core products).
 * Grouped launches run the experts of a MoE layer: a gk_moe_group tile of
 * one expert's slots in GK_TILE_TOK / MM_BN grid rows (mm_tile.cuh),
 * activation rows gathered by token.
 */
#include "mm_tile.cuh"
#include "mma.cuh"

enum { MM_BM = 64, MM_BN = 32, MM_BK = GK_MATMUL_K, MM_THREADS = 128 };
enum { MM_LDH = MM_BK + 8, MM_LDF = MM_BK + 1, MM_LDC = MM_BN + 4 };

static_assert(MM_BN == 32 && MM_BM == 64 && MM_BK == 64 && MM_THREADS == 128, "tile loaders assume these sizes");

/* Loads 16 activation values of row n at column k0 + 16 part (zeros for an
 * unused row). */
static inline __device__ void mm_act16(const gk_act &x, const int32_t *act_row, int n, int part, int64_t k0, float *v)
{
    if (act_row[n] < 0) {
        for (int i = 0; i < 16; i++)
            v[i] = 0.0f;
        return;
    }
    const float4 *p = (const float4 *)(x.f + (int64_t)act_row[n] * x.n + k0 + 16 * part);
    for (int k = 0; k < 4; k++) {
        const float4 q = p[k];
        v[4 * k] = q.x;
        v[4 * k + 1] = q.y;
        v[4 * k + 2] = q.z;
        v[4 * k + 3] = q.w;
    }
}

/* Eight floats to eight halves in one 16-byte store (dst 16-byte aligned:
 * rows of MM_LDH halves are 144 bytes). */
static inline __device__ void store_half8(half *dst, const float *v)
{
    union {
        int4 raw;
        half2 h[4];
    } u;
    for (int k = 0; k < 4; k++)
        u.h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
    *(int4 *)dst = u.raw;
}

template <int T>
__global__ void __launch_bounds__(MM_THREADS) k_matmul_h(gk_mat w, gk_act x, int n_tok, gk_out out,
                                                         const gk_route *routes, gk_groups g, bool grouped, bool gather)
{
    gpu_pdl_wait();
    __shared__ __align__(32) half as[MM_BM * MM_LDH];
    __shared__ __align__(32) half bs[MM_BN * MM_LDH];
    __shared__ __align__(32) float cs[MM_BM * MM_LDC];
    __shared__ int32_t act_row[MM_BN], out_row[MM_BN];
    const mm_tile tile = mm_setup<MM_BN>(w, n_tok, routes, g, grouped, gather, act_row, out_row);
    if (tile.count <= 0)
        return;
    __syncthreads();
    const int tid = threadIdx.x, warp = tid / GPU_WARP;
    const int64_t row0 = (int64_t)blockIdx.x * MM_BM;
    gpu_wmma::fragment<gpu_wmma::accumulator, 16, 16, 16, float> acc[2];
    gpu_wmma::fill_fragment(acc[0], 0.0f);
    gpu_wmma::fill_fragment(acc[1], 0.0f);
    for (int64_t k0 = 0; k0 < w.n_cols; k0 += MM_BK) {
        const int n = tid / 4, part = tid % 4;          /* activation row, 16-value quarter */
        const int arow = tid % MM_BM, ahalf = tid / MM_BM; /* weight row, chunk of the step */
        float b[16], v[32];
        mm_act16(x, act_row, n, part, k0, b);
        if (row0 + arow < w.n_rows)
            chunk_floats<T>(tile.w + (row0 + arow) * w.row_bytes, (int)(k0 / 32) + ahalf, v);
        else
            for (int i = 0; i < 32; i++)
                v[i] = 0.0f;
        for (int k = 0; k < 4; k++)
            store_half8(as + arow * MM_LDH + 32 * ahalf + 8 * k, v + 8 * k);
        store_half8(bs + n * MM_LDH + 16 * part, b);
        store_half8(bs + n * MM_LDH + 16 * part + 8, b + 8);
        __syncthreads();
        for (int kk = 0; kk < MM_BK; kk += 16) {
            gpu_wmma::fragment<gpu_wmma::matrix_a, 16, 16, 16, half, gpu_wmma::row_major> a;
            gpu_wmma::load_matrix_sync(a, as + 16 * warp * MM_LDH + kk, MM_LDH);
            for (int j = 0; j < 2; j++) {
                gpu_wmma::fragment<gpu_wmma::matrix_b, 16, 16, 16, half, gpu_wmma::col_major> b;
                gpu_wmma::load_matrix_sync(b, bs + 16 * j * MM_LDH + kk, MM_LDH);
                gpu_wmma::mma_sync(acc[j], a, b, acc[j]);
            }
        }
        __syncthreads();
    }
    for (int j = 0; j < 2; j++)
        gpu_wmma::store_matrix_sync(cs + 16 * warp * MM_LDC + 16 * j, acc[j], MM_LDC, gpu_wmma::mem_row_major);
    __syncthreads();
    for (int idx = tid; idx < MM_BM * MM_BN; idx += MM_THREADS) {
        const int m = idx % MM_BM, n = idx / MM_BM;
        const int64_t r = row0 + m;
        if (r < w.n_rows && n < tile.count)
            mm_store(out, r, out_row[n], cs[m * MM_LDC + n]);
    }
}

template <int T>
__global__ void __launch_bounds__(MM_THREADS) k_matmul_f(gk_mat w, gk_act x, int n_tok, gk_out out,
                                                         const gk_route *routes, gk_groups g, bool grouped, bool gather)
{
    gpu_pdl_wait();
    __shared__ float as[MM_BM * MM_LDF];
    __shared__ float bs[MM_BN * MM_LDF];
    __shared__ int32_t act_row[MM_BN], out_row[MM_BN];
    const mm_tile tile = mm_setup<MM_BN>(w, n_tok, routes, g, grouped, gather, act_row, out_row);
    if (tile.count <= 0)
        return;
    __syncthreads();
    const int tid = threadIdx.x;
    const int tm = tid % 16, tn = tid / 16; /* rows tm + 16 i, columns tn + 8 j */
    const int64_t row0 = (int64_t)blockIdx.x * MM_BM;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < w.n_cols; k0 += MM_BK) {
        const int n = tid / 4, part = tid % 4;
        const int arow = tid % MM_BM, ahalf = tid / MM_BM;
        float b16[16], v[32];
        mm_act16(x, act_row, n, part, k0, b16);
        if (row0 + arow < w.n_rows)
            chunk_floats<T>(tile.w + (row0 + arow) * w.row_bytes, (int)(k0 / 32) + ahalf, v);
        else
            for (int i = 0; i < 32; i++)
                v[i] = 0.0f;
        for (int i = 0; i < 32; i++)
            as[arow * MM_LDF + 32 * ahalf + i] = v[i];
        for (int i = 0; i < 16; i++)
            bs[n * MM_LDF + 16 * part + i] = b16[i];
        __syncthreads();
        for (int k = 0; k < MM_BK; k++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++)
                a[i] = as[(tm + 16 * i) * MM_LDF + k];
            for (int j = 0; j < 4; j++)
                b[j] = bs[(tn + 8 * j) * MM_LDF + k];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            const int64_t r = row0 + tm + 16 * i;
            const int n = tn + 8 * j;
            if (r < w.n_rows && n < tile.count)
                mm_store(out, r, out_row[n], acc[i][j]);
        }
}

/* F32 weights, dense (a MoE router: 128 rows x 512 tokens took 32 blocks
 * of k_matmul_f on 132 multiprocessors, 90 us a layer).  A block takes
 * MF_ROWS rows x MF_TOK tokens, lane = token, each warp a quarter of every
 * MF_BK-value step for all MF_ROWS rows (the weights read as broadcasts,
 * the lane's activations as 16-byte loads), then the four warps' sums
 * added in warp order: a fixed order, so the same bits every run and with
 * or without graphs.  Steps staged by cp.async, MF_STAGES deep. */
enum { MF_ROWS = 16, MF_TOK = 32, MF_BK = 64, MF_STAGES = 3, MF_LD = MF_BK + 4 };
enum { MF_WARPS = MM_THREADS / GPU_WARP, MF_PART = MF_BK / MF_WARPS };
static_assert(MF_TOK == GPU_WARP && MF_PART % 4 == 0, "lane = token; 16-byte loads");
static_assert((MF_LD / 4) % 2 == 1, "8 lanes' 16-byte loads on distinct banks");

struct mf_stage {
    float w[MF_ROWS * MF_LD];
    float x[MF_TOK * MF_LD];
};
static_assert(sizeof(mf_stage) >= sizeof(float) * MF_WARPS * MF_ROWS * MF_TOK, "the sums fit a stage");

/* Starts the copies of step k0's valid weight rows and token rows (one
 * commit group). */
static inline __device__ void mf_load(mf_stage &st, const gk_mat &w, const gk_act &x, int64_t row0, int tok0,
                                      int rows, int toks, int64_t k0)
{
    enum { PIECES = MF_BK / 4 };
    for (int i = threadIdx.x; i < (MF_ROWS + MF_TOK) * PIECES; i += MM_THREADS) {
        const int r = i / PIECES, p = i % PIECES;
        if (r < MF_ROWS && r < rows)
            cp_async16(st.w + r * MF_LD + 4 * p, (const float *)(w.data + (row0 + r) * w.row_bytes) + k0 + 4 * p);
        else if (r >= MF_ROWS && r - MF_ROWS < toks)
            cp_async16(st.x + (r - MF_ROWS) * MF_LD + 4 * p, x.f + (int64_t)(tok0 + r - MF_ROWS) * x.n + k0 + 4 * p);
    }
    cp_async_commit();
}

/* Rows and tokens past the matrix or the launch as zeros in every stage
 * (never copied over). */
static inline __device__ void mf_zero_unused(mf_stage *st, int rows, int toks)
{
    for (int b = 0; b < MF_STAGES; b++) {
        for (int i = rows * MF_LD + threadIdx.x; i < MF_ROWS * MF_LD; i += MM_THREADS)
            st[b].w[i] = 0.0f;
        for (int i = toks * MF_LD + threadIdx.x; i < MF_TOK * MF_LD; i += MM_THREADS)
            st[b].x[i] = 0.0f;
    }
}

__global__ void __launch_bounds__(MM_THREADS) k_matmul_f32(gk_mat w, gk_act x, int n_tok, gk_out out)
{
    gpu_pdl_wait();
    __shared__ __align__(16) mf_stage st[MF_STAGES];
    const int64_t row0 = (int64_t)blockIdx.x * MF_ROWS;
    const int tok0 = (int)blockIdx.y * MF_TOK;
    const int rows = (int)min((int64_t)MF_ROWS, w.n_rows - row0), toks = min(MF_TOK, n_tok - tok0);
    const int warp = (int)threadIdx.x / GPU_WARP, lane = (int)threadIdx.x % GPU_WARP;
    const int n_steps = (int)(w.n_cols / MF_BK);
    mf_zero_unused(st, rows, toks);
    for (int s = 0; s < MF_STAGES - 1; s++) {
        if (s < n_steps)
            mf_load(st[s], w, x, row0, tok0, rows, toks, (int64_t)s * MF_BK);
        else
            cp_async_commit(); /* an empty group keeps the count the wait below relies on */
    }
    float acc[MF_ROWS] = {};
    for (int s = 0; s < n_steps; s++) {
        cp_async_wait_prior(); /* step s has landed (only the newest group may fly) */
        __syncthreads();       /* ... for every thread, and stage s - 1 is free */
        const int next = s + MF_STAGES - 1;
        if (next < n_steps)
            mf_load(st[next % MF_STAGES], w, x, row0, tok0, rows, toks, (int64_t)next * MF_BK);
        else
            cp_async_commit();
        const mf_stage &c = st[s % MF_STAGES];
#pragma unroll
        for (int k = MF_PART * warp; k < MF_PART * (warp + 1); k += 4) {
            const float4 b = *(const float4 *)(c.x + lane * MF_LD + k);
#pragma unroll
            for (int r = 0; r < MF_ROWS; r++) {
                const float4 a = *(const float4 *)(c.w + r * MF_LD + k);
                acc[r] = fmaf(a.x, b.x, acc[r]);
                acc[r] = fmaf(a.y, b.y, acc[r]);
                acc[r] = fmaf(a.z, b.z, acc[r]);
                acc[r] = fmaf(a.w, b.w, acc[r]);
            }
        }
    }
    cp_async_wait_all();
    __syncthreads();
    float *sums = (float *)&st[0]; /* [warp][row][token] */
#pragma unroll
    for (int r = 0; r < MF_ROWS; r++)
        sums[(warp * MF_ROWS + r) * MF_TOK + lane] = acc[r];
    __syncthreads();
    for (int i = threadIdx.x; i < MF_ROWS * MF_TOK; i += MM_THREADS) {
        const int r = i / MF_TOK, t = i % MF_TOK;
        if (r >= rows || t >= toks)
            continue;
        float v = sums[i];
        for (int wp = 1; wp < MF_WARPS; wp++)
            v += sums[wp * MF_ROWS * MF_TOK + i];
        mm_store(out, row0 + r, tok0 + t, v);
    }
}

/* Whether a dense launch takes k_matmul_f32: its 16-byte copies need
 * aligned rows. */
static bool mf_fits(const gk_mat *w, const gk_act *x)
{
    return w->type == GQ_F32 && (uintptr_t)w->data % 16 == 0 && w->row_bytes % 16 == 0 && (uintptr_t)x->f % 16 == 0 &&
           x->n % 4 == 0;
}

template <int T>
static int mm_launch(gpuStream_t s, dim3 grid, const gk_mat *w, const gk_act *x, int n_tok, const gk_out *out,
                     const gk_route *routes, const gk_groups *g, bool grouped, bool gather)
{
    if constexpr (T == GQ_F16)
        return gk_launch(k_matmul_h<T>, grid, MM_THREADS, 0, s, *w, *x, n_tok, *out, routes, *g, grouped, gather);
    else
        return gk_launch(k_matmul_f<T>, grid, MM_THREADS, 0, s, *w, *x, n_tok, *out, routes, *g, grouped, gather);
}

/* Quantised weights take the 8-bit integer kernel (mmq.cu), float weights
 * the tiles here. */
static int mm_dispatch(gpuStream_t s, const gk_mat *w, const gk_act *x, int n_tok, const gk_out *out,
                       const gk_route *routes, const gk_groups *g, bool grouped, bool gather)
{
    if (w->n_cols % MM_BK != 0)
        return (int)gpuErrorInvalidValue;
    if (w->n_rows == 0)
        return 0;
    if (gk_is_quant_type(w->type))
        return mmq_launch(s, w, NULL, x, n_tok, out, routes, g, grouped, gather);
    if (!grouped && mf_fits(w, x)) {
        const dim3 grid((unsigned)((w->n_rows + MF_ROWS - 1) / MF_ROWS), (unsigned)((n_tok + MF_TOK - 1) / MF_TOK));
        return grid.y == 0 ? 0 : gk_launch(k_matmul_f32, grid, MM_THREADS, 0, s, *w, *x, n_tok, *out);
    }
    const dim3 grid((unsigned)((w->n_rows + MM_BM - 1) / MM_BM), mm_grid_rows<MM_BN>(n_tok, g, grouped));
    if (grid.y == 0)
        return 0;
    switch (w->type) {
#define MM_CASE_(T)                                                                                              \
    case T:                                                                                                      \
        return mm_launch<T>(s, grid, w, x, n_tok, out, routes, g, grouped, gather);
        GK_FOR_EACH_FLOAT(MM_CASE_)
#undef MM_CASE_
    default:
        return (int)gpuErrorInvalidValue;
    }
}

extern "C" int gk_matmul(gpuStream_t s, const gk_mat *w, const gk_act *x, int n_tok, const gk_out *out)
{
    const gk_groups none = {NULL, NULL, NULL, NULL, 0};
    return mm_dispatch(s, w, x, n_tok, out, NULL, &none, false, false);
}

extern "C" bool gk_matmul_stacks(const gk_mat *const *w, int n_mats)
{
    return mmq_stacks(w, n_mats);
}

extern "C" int gk_matmul_multi(gpuStream_t s, const gk_mat *const *w, const gk_out *out, int n_mats, const gk_act *x,
                               const int64_t *x_col, int n_tok)
{
    return mmq_launch_stack(s, w, out, n_mats, x, x_col, n_tok);
}

/* A block's time is its steps' latency more than its work (mmq.cu), so a
 * launch of fewer blocks than two a multiprocessor finishes sooner as two
 * column halves of half the steps each. */
extern "C" bool gk_matmul_split_pays(const gk_mat *w, int n_tok)
{
    static int n_sm = 0;
    if (n_sm == 0 && gpuDeviceGetAttribute(&n_sm, gpuDevAttrMultiProcessorCount, 0) != gpuSuccess)
        n_sm = 1;
    const int64_t blocks = (w->n_rows + MQ_TILE_ROWS - 1) / MQ_TILE_ROWS * ((n_tok + MQ_TILE_TOK - 1) / MQ_TILE_TOK);
    return gk_is_quant_type(w->type) && w->n_cols % (2 * GK_MATMUL_K) == 0 && blocks <= 2 * (int64_t)n_sm;
}

extern "C" int gk_matmul_grouped(gpuStream_t s, const gk_mat *w, const gk_act *x, const gk_route *routes,
                                 const gk_groups *g, bool gather, const gk_out *out)
{
    return mm_dispatch(s, w, x, 0, out, routes, g, true, gather);
}

extern "C" int gk_matmul_grouped_glu(gpuStream_t s, const gk_mat *gate, const gk_mat *up, const gk_act *x,
                                     const gk_route *routes, const gk_groups *g, bool gather, const gk_out *out)
{
    if (!gk_is_quant_type(gate->type) || gate->n_cols % MM_BK != 0)
        return (int)gpuErrorInvalidValue;
    return mmq_launch(s, gate, up, x, 0, out, routes, g, true, gather);
}
