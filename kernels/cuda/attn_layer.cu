/*
 * attn_layer.cu — the attention half of a one-token decode layer in one
 * persistent launch (kernels.h, gk_attn_layer).  It was three launches,
 * each bound by its own latency chain more than by its bytes (docs/
 * PERFORMANCE.md, "CUDA decode, session 6: attention and the head"):
 * Q/K/V (gk_matvec_multi, ~6 MB, 6.0-7.4 us), the attention (attn_decode.
 * cu, 8-11 us) and the output projection added into x (gk_matvec, 4.7 MB,
 * 5.7 us).  Here one grid of co-resident blocks runs them as phases that
 * meet at grid barriers (grid_sync.cuh):
 *
 *   before the wait  each warp asks L2 for the weight rows it will dot in
 *                    phases 1 and 3 (they do not depend on the previous
 *                    launch), so the output projection's rows arrive
 *                    while phases 1 and 2 run;
 *   phase 1          Q/K/V rows, a warp per row (mv_row.cuh: gk_matvec's
 *                    chunk order, the same bits), and the cache rows of
 *                    this block's phase-2 items asked of L2;
 *   phase 2          attn_decode.cu's items (attn_decode.cuh, the same
 *                    code): QK-norm, RoPE, KV store, chunk partials, the
 *                    last block of a head combining them (fence-then-
 *                    count), the output's 8-bit form;
 *   phase 3          x[r] += wo[r] . out (+ bias), reading out's 8-bit
 *                    form through L2 (other blocks wrote it).
 *
 * The weight types are chosen at run time per matrix (a uniform branch),
 * so every mix (Q4_K_M's Q6_K attn_v) is one instance.  Never signals the
 * dependent launch early: the barrier needs every block resident.
 *
 * Opt-in (HYDRA_ATTN_LAYER=1, or 2 with qkv false): the same bits as the
 * three launches, but slower on the H200 (one launch 26-30 us against
 * 21-22 us for the three kernels; tg128 322-343 against 389-393 t/s:
 * docs/PERFORMANCE.md, "CUDA decode, session 7"), which says what was
 * measured and what to try next.
 */
#include "attn_decode.cuh"
#include "grid_sync.cuh"
#include "mv_row.cuh"

/* AL_MIN_BLOCKS per SM: 128 registers a thread at most (unbounded, the
 * F32-cache instance took 150, one block an SM) */
enum {
    AL_THREADS = AD_THREADS, AL_WARPS = AL_THREADS / GPU_WARP, AL_MIN_BLOCKS = 2, AL_LINE = 128, AL_MAX_DEVICES = 64,
    AL_ROWS = 3, /* Q/K/V rows a warp dots at once: Qwen3-30B-A3B's 5120 in one pass of 2112 warps (132 SMs) */
};

/* The weight types the launch takes (the attention matrices of the
 * K-quant and Q8_0 files). */
#define AL_TYPES(X) X(GQ_Q4_K) X(GQ_Q5_K) X(GQ_Q6_K) X(GQ_Q8_0)

/* Asks L2 for the bytes [p, p + n), the lines spread over the callers
 * (index i of n_callers). */
static inline __device__ void al_prefetch(const void *p, size_t n, int i, int n_callers)
{
#if !defined(HYDRA_HIP)
    const uintptr_t end = (uintptr_t)p + n;
    for (uintptr_t a = ((uintptr_t)p & ~(uintptr_t)(AL_LINE - 1)) + (uintptr_t)i * AL_LINE; a < end;
         a += (uintptr_t)n_callers * AL_LINE)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
#endif
}

static inline __host__ __device__ int64_t al_units(int64_t n_rows)
{
    return (n_rows + AL_ROWS - 1) / AL_ROWS;
}

/* Unit i of phase 1: AL_ROWS consecutive rows (fewer at a matrix's end)
 * of Q, K or V stacked; its matrix (a copy: a pointer into the kernel's
 * parameters would move them to local memory), bias, output. */
struct al_unit {
    gk_mat w;
    const float *bias;
    float *y;
    int64_t r0;
};

static inline __device__ al_unit al_qkv_unit(const gk_attn_layer &l, int64_t i)
{
    const int64_t uq = al_units(l.wq.n_rows), uqk = uq + al_units(l.wk.n_rows);
    if (i < uq)
        return {l.wq, l.bq, l.rope.q, i * AL_ROWS};
    if (i < uqk)
        return {l.wk, l.bk, l.rope.k, (i - uq) * AL_ROWS};
    return {l.wv, l.bv, (float *)l.rope.v, (i - uqk) * AL_ROWS}; /* rope.v: what the attention reads, written here */
}

/* acc[k]: the lane's part of row r0 + k of w . x (x's 8-bit form) for k <
 * R, by w's type; rows past the end repeat the last, unused. */
template <bool CG, int R>
static inline __device__ void al_dot(const gk_mat &w, int64_t r0, const int8_t *xq, const int32_t *meta, float *acc)
{
    const uint8_t *rows[R];
#pragma unroll
    for (int k = 0; k < R; k++)
        rows[k] = w.data + (r0 + k < w.n_rows ? r0 + k : w.n_rows - 1) * (int64_t)w.row_bytes;
    const int n_chunks = (int)(w.n_cols / 32);
    switch (w.type) {
#define AL_DOT_(T)                                                                                               \
    case T:                                                                                                      \
        mv_dot_rows<T, CG, R>(rows, xq, meta, n_chunks, acc);                                                    \
        return;
        AL_TYPES(AL_DOT_)
#undef AL_DOT_
    default:
#pragma unroll
        for (int k = 0; k < R; k++)
            acc[k] = 0.0f;
    }
}

/* y = dot + bias, or y += dot + bias: mv_store's order (matvec.cu). */
static inline __device__ void al_store(float *y, const float *bias, int64_t r, float lane_acc, bool accumulate)
{
    float v = warp_sum(lane_acc);
    if (threadIdx.x % GPU_WARP != 0)
        return;
    if (bias != NULL)
        v += bias[r];
    y[r] = accumulate ? y[r] + v : v;
}

/* The cache rows (K and V of the item's KV head) of this block's phase-2
 * items, a thread per position. */
static inline __device__ void al_prefetch_kv(const gk_attn &a, int pos, int used, int n_items)
{
    const int group = a.n_head / a.n_head_kv, pairs = group / ad_qs(group), elem = a.kv_f16 ? 2 : 4;
    for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
        const int start = item % used * AD_CHUNK, g = item / used / pairs, len = min(AD_CHUNK, pos + 1 - start);
        for (int j = threadIdx.x; j < len; j += AL_THREADS) {
            const int64_t p = start + j;
            al_prefetch((const uint8_t *)a.k + (p * a.k_row + (int64_t)g * a.head_dim_k) * elem,
                        (size_t)a.head_dim_k * elem, 0, 1);
            al_prefetch((const uint8_t *)a.v + (p * a.v_row + (int64_t)g * a.head_dim_v) * elem,
                        (size_t)a.head_dim_v * elem, 0, 1);
        }
    }
}

template <bool F16>
__global__ void __launch_bounds__(AL_THREADS, AL_MIN_BLOCKS) k_attn_layer(const gk_attn_layer l, const gk_step *step)
{
    const int lane = threadIdx.x % GPU_WARP;
    const int64_t first = (int64_t)blockIdx.x * AL_WARPS + threadIdx.x / GPU_WARP;
    const int64_t stride = (int64_t)gridDim.x * AL_WARPS;
    const int64_t n_units = l.qkv ? al_units(l.wq.n_rows) + al_units(l.wk.n_rows) + al_units(l.wv.n_rows) : 0;
    for (int64_t i = first; i < n_units; i += stride) {
        const al_unit u = al_qkv_unit(l, i);
        const int64_t n = u.w.n_rows - u.r0 < AL_ROWS ? u.w.n_rows - u.r0 : AL_ROWS;
        al_prefetch(u.w.data + u.r0 * (int64_t)u.w.row_bytes, (size_t)n * u.w.row_bytes, lane, GPU_WARP);
    }
    for (int64_t r = first; r < l.wo.n_rows; r += stride)
        al_prefetch(l.wo.data + r * (int64_t)l.wo.row_bytes, l.wo.row_bytes, lane, GPU_WARP);
    gpu_pdl_wait();

    const gk_attn &a = l.attn;
    const int pos = step->pos0, used = ad_chunks(pos + 1);
    const int n_items = used * (a.n_head / ad_qs(a.n_head / a.n_head_kv));
    for (int64_t i = first; i < n_units; i += stride) {
        const al_unit u = al_qkv_unit(l, i);
        float acc[AL_ROWS];
        al_dot<false, AL_ROWS>(u.w, u.r0, l.xn.q, l.xn.meta, acc);
#pragma unroll
        for (int k = 0; k < AL_ROWS; k++)
            if (u.r0 + k < u.w.n_rows) /* the same for the whole warp */
                al_store(u.y, u.bias, u.r0 + k, acc[k], false);
    }
    al_prefetch_kv(a, pos, used, n_items);
    if (l.qkv)
        gk_grid_barrier(l.bar, gridDim.x);

    for (int item = blockIdx.x; item < n_items; item += gridDim.x) {
        ad_item<F16, true>(a, l.rope, pos, item % used, item / used);
        __syncthreads(); /* the next item reuses the item's shared memory */
    }
    gk_grid_barrier(l.bar, gridDim.x);

    for (int64_t r = first; r < l.wo.n_rows; r += stride) {
        float acc;
        al_dot<true, 1>(l.wo, r, a.out_q, a.out_meta, &acc);
        al_store(l.x, l.bo, r, acc, true);
    }
}

static bool al_type_ok(const gk_mat *w)
{
    bool typed = false;
#define AL_IS_(T) typed = typed || w->type == T;
    AL_TYPES(AL_IS_)
#undef AL_IS_
    return typed && w->expert_data == NULL && w->data != NULL && w->n_cols % 32 == 0;
}

extern "C" bool gk_attn_layer_fits(const gk_attn_layer *l)
{
#if defined(HYDRA_HIP)
    (void)l;
    return false;
#else
    const gk_attn *a = &l->attn;
    const gk_rope *r = &l->rope;
    int dev = 0, major = 0;
    if (gpuGetDevice(&dev) != gpuSuccess ||
        gpuDeviceGetAttribute(&major, GPU_ENUM(DevAttrComputeCapabilityMajor), dev) != gpuSuccess || major < 9)
        return false;
    const int64_t n = l->xn.n, dk = a->head_dim_k, dv = a->head_dim_v;
    const bool qkv_ok = al_type_ok(&l->wq) && al_type_ok(&l->wk) && al_type_ok(&l->wv) && l->wq.n_cols == n &&
                        l->wk.n_cols == n && l->wv.n_cols == n && l->wq.n_rows == a->n_head * dk &&
                        l->wk.n_rows == a->n_head_kv * dk && l->wv.n_rows == a->n_head_kv * dv;
    return (!l->qkv || qkv_ok) && al_type_ok(&l->wo) && l->wo.n_cols == a->n_head * dv && gk_attention_decode_fits(a) && a->out_q != NULL &&
           a->out_meta != NULL && r->q == a->q && r->n_tok == 1 && r->n_head == a->n_head &&
           r->n_head_kv == a->n_head_kv && r->head_dim_k == dk && r->head_dim_v == dv && r->n_rot <= dk &&
           r->kv_f16 == a->kv_f16 && r->k_cache == a->k && r->v_cache == a->v && l->x != NULL && l->bar != NULL;
#endif
}

/* The grid: every block resident at once (the barrier's condition),
 * asked once per device, and no more blocks than the largest phase has
 * warps' or items' work for. */
template <bool F16> static int al_launch(gpuStream_t s, const gk_attn_layer *l, const gk_step *step)
{
    static int resident[AL_MAX_DEVICES]; /* 0: not asked yet; the same answer whoever writes it */
    int dev = 0;
    if (gpuGetDevice(&dev) != gpuSuccess || dev < 0 || dev >= AL_MAX_DEVICES)
        return (int)gpuErrorInvalidValue;
    if (resident[dev] == 0)
        resident[dev] = gk_coresident_blocks(k_attn_layer<F16>, AL_THREADS, 0);
    const gk_attn *a = &l->attn;
    const int64_t units = l->qkv ? al_units(l->wq.n_rows) + al_units(l->wk.n_rows) + al_units(l->wv.n_rows) : 0;
    const int64_t items = (int64_t)ad_chunks(a->max_kv) * (a->n_head / ad_qs(a->n_head / a->n_head_kv));
    int64_t work = (units + AL_WARPS - 1) / AL_WARPS;
    work = work > items ? work : items;
    work = work > (l->wo.n_rows + AL_WARPS - 1) / AL_WARPS ? work : (l->wo.n_rows + AL_WARPS - 1) / AL_WARPS;
    const int blocks = (int)(work < resident[dev] ? work : resident[dev]);
    if (blocks < 1)
        return (int)gpuErrorInvalidValue;
    return gk_launch(k_attn_layer<F16>, dim3((unsigned)blocks), AL_THREADS, 0, s, *l, step);
}

extern "C" int gk_attn_layer_run(gpuStream_t s, const gk_attn_layer *l, const gk_step *step)
{
    if (!gk_attn_layer_fits(l))
        return (int)gpuErrorInvalidValue;
    return l->attn.kv_f16 ? al_launch<true>(s, l, step) : al_launch<false>(s, l, step);
}
