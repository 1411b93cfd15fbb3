/*
 * ops.cu — the element-wise and per-row steps of the forward pass, with
 * the formulas of kernels/cpu/ops.c: embedding rows, RMSNorm (sum of
 * squares in double), per-head QK-norm then RoPE with ggml's angle
 * recurrence (theta_i = pos * theta_scale^i as a running float product),
 * the K/V cache store, SwiGLU and residual adds.
 */
#include "common.cuh"
#include "qk_rope.cuh"
#include "row_norm.cuh"

#include <type_traits>

/* One thread per 32-value chunk of an embedding row. */
template <int T> __global__ void k_embed(gk_mat table, const int32_t *tokens, int n_tok, float *x)
{
    gpu_pdl_wait();
    const int64_t chunks = table.n_cols / 32;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n_tok * chunks)
        return;
    const int64_t t = i / chunks;
    const int c = (int)(i % chunks);
    float v[32];
    chunk_floats<T>(table.data + (int64_t)tokens[t] * table.row_bytes, c, v);
    float *dst = x + t * table.n_cols + 32 * c;
    for (int k = 0; k < 32; k++)
        dst[k] = v[k];
}

/* launch(std::integral_constant<int, T>()) for an embedding table of type
 * T, or an error for a type without a decoder. */
template <typename Launch> static int emb_by_type(uint32_t type, Launch launch)
{
    switch (type) {
#define EMB_CASE_(T)                                                                                             \
    case T:                                                                                                      \
        return launch(std::integral_constant<int, T>());
        GQ_FOR_EACH_QUANT(EMB_CASE_)
        GK_FOR_EACH_FLOAT(EMB_CASE_)
#undef EMB_CASE_
    default:
        return (int)gpuErrorInvalidValue;
    }
}

extern "C" int gk_embed(gpuStream_t s, const gk_mat *table, const int32_t *tokens, int n_tok, float *x)
{
    if (table->n_cols % 32 != 0)
        return (int)gpuErrorInvalidValue;
    const int64_t total = (int64_t)n_tok * (table->n_cols / 32);
    const unsigned blocks = (unsigned)((total + 127) / 128);
    if (total == 0)
        return 0;
    return emb_by_type(table->type, [&](auto type) {
        return gk_launch(k_embed<decltype(type)::value>, blocks, 128, 0, s, *table, tokens, n_tok, x);
    });
}

/* One block of GK_NORM_THREADS per token: the row as k_embed writes it,
 * then rmsnorm_row over it (read back through L2 after the barrier), so x
 * and the norm have the bits of gk_embed then gk_rmsnorm. */
template <int T>
__global__ void __launch_bounds__(GK_NORM_THREADS) k_embed_norm(gk_mat table, const int32_t *tokens, float *x,
                                                                gk_norm_out norm)
{
    gpu_pdl_wait();
    __shared__ double red[GK_NORM_THREADS / GPU_WARP];
    const int64_t n = table.n_cols, t = blockIdx.x;
    float *xr = x + t * n;
    const uint8_t *src = table.data + (int64_t)tokens[t] * table.row_bytes;
    for (int c = threadIdx.x; c < (int)(n / 32); c += GK_NORM_THREADS) {
        float v[32];
        chunk_floats<T>(src, c, v);
        for (int k = 0; k < 32; k++)
            xr[32 * c + k] = v[k];
    }
    __syncthreads();
    rmsnorm_row(xr, n, &norm, t, red);
}

extern "C" int gk_embed_norm(gpuStream_t s, const gk_mat *table, const int32_t *tokens, int n_tok, float *x,
                             const gk_norm_out *norm)
{
    const int64_t n = table->n_cols;
    if (n % 32 != 0 || n > (int64_t)NR_PER_THREAD * GK_NORM_THREADS) {
        const int e = gk_embed(s, table, tokens, n_tok, x);
        return e != 0 ? e : gk_rmsnorm(s, x, norm->gain, norm->eps, n_tok, n, norm->y, norm->q, norm->meta);
    }
    if (n_tok == 0)
        return 0;
    return emb_by_type(table->type, [&](auto type) {
        return gk_launch(k_embed_norm<decltype(type)::value>, n_tok, GK_NORM_THREADS, 0, s, *table, tokens, x, *norm);
    });
}

/* One block per row (row_norm.cuh). */
__global__ void __launch_bounds__(GK_NORM_THREADS) k_rmsnorm(const float *x, const float *gain, float eps, int64_t n,
                                                             float *y, int8_t *q, int32_t *meta)
{
    gpu_pdl_wait();
    __shared__ double red[GK_NORM_THREADS / GPU_WARP];
    const float *xr = x + blockIdx.x * n;
    const gk_norm_out out = {gain, eps, y, q, meta};
    if (rmsnorm_row_fits(n)) {
        rmsnorm_row(xr, n, &out, blockIdx.x, red);
        return;
    }
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += GK_NORM_THREADS)
        sum += (double)xr[i] * xr[i];
    row_norm_store(xr, n, block_sum_d(sum, red), &out, blockIdx.x);
}

extern "C" int gk_rmsnorm(gpuStream_t s, const float *x, const float *gain, float eps, int n_rows, int64_t n, float *y,
                          int8_t *q, int32_t *meta)
{
    if (n_rows == 0)
        return 0;
    if (q != NULL && n % 32 != 0)
        return (int)gpuErrorInvalidValue;
    return gk_launch(k_rmsnorm, n_rows, GK_NORM_THREADS, 0, s, x, gain, eps, n, y, q, meta);
    
}

/* One warp per head of one token: blockIdx.x < n_head are Q heads, then
 * n_head_kv K heads, then n_head_kv V heads (copied to the cache); the
 * norm and rotation are qk_rope.cuh's. */
__global__ void k_rope_store(gk_rope r, const gk_step *step)
{
    gpu_pdl_wait();
    __shared__ float hv[RS_MAX_DIM];
    const int t = blockIdx.y, lane = threadIdx.x;
    const int head = blockIdx.x;
    const int pos = step->pos0 + t;
    const int dk = r.head_dim_k, dv = r.head_dim_v;
    if (head >= r.n_head + r.n_head_kv) { /* V head: to the cache as it is */
        const int hh = head - r.n_head - r.n_head_kv;
        const float *src = r.v + ((int64_t)t * r.n_head_kv + hh) * dv;
        qr_store_row(r.v_cache, (int64_t)pos * r.n_head_kv * dv + (int64_t)hh * dv, src, dv, r.kv_f16);
        return;
    }
    const bool is_q = head < r.n_head;
    const int hh = is_q ? head : head - r.n_head;
    float *x = is_q ? r.q + ((int64_t)t * r.n_head + hh) * dk : r.k + ((int64_t)t * r.n_head_kv + hh) * dk;
    qk_head_warp(r, qr_angles_at(r, pos), hv, x, is_q ? r.q_norm : r.k_norm);
    for (int i = lane; i < dk; i += GPU_WARP)
        x[i] = hv[i];
    if (!is_q)
        qr_store_row(r.k_cache, (int64_t)pos * r.n_head_kv * dk + (int64_t)hh * dk, hv, dk, r.kv_f16);
}

extern "C" int gk_rope_store(gpuStream_t s, const gk_rope *r, const gk_step *step)
{
    if (r->n_tok == 0)
        return 0;
    if (r->head_dim_k > RS_MAX_DIM || r->n_rot > r->head_dim_k)
        return (int)gpuErrorInvalidValue;
    const dim3 grid((unsigned)(r->n_head + 2 * r->n_head_kv), (unsigned)r->n_tok);
    return gk_launch(k_rope_store, grid, GPU_WARP, 0, s, *r, step);
    
}

__global__ void k_swiglu(const float *g, const float *u, int64_t n, float *h)
{
    gpu_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        h[i] = silu(g[i]) * u[i];
}

extern "C" int gk_swiglu(gpuStream_t s, const float *g, const float *u, int64_t n, float *h)
{
    if (n == 0)
        return 0;
    return gk_launch(k_swiglu, (unsigned)((n + 255) / 256), 256, 0, s, g, u, n, h);
    
}

__global__ void k_add_rows(float *x, const float *y, const float *gate, int64_t n)
{
    gpu_pdl_wait();
    const int t = blockIdx.y;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float sc = gate != NULL ? 1.0f / (1.0f + expf(-gate[t])) : 1.0f;
    x[(int64_t)t * n + i] += sc * y[(int64_t)t * n + i];
}

extern "C" int gk_add_rows(gpuStream_t s, float *x, const float *y, const float *gate, int n_tok, int64_t n)
{
    if (n_tok == 0 || n == 0)
        return 0;
    return gk_launch(k_add_rows, dim3((unsigned)((n + 255) / 256), (unsigned)n_tok), 256, 0, s, x, y, gate, n);
    
}

/* ---- host-side checks of the block decoders ---- */

template <int T> static void host_decode(const void *row, int c, float *out)
{
    gq_chunk ch;
    gq_decode<T>((const uint8_t *)row, c, &ch);
    for (int i = 0; i < 32; i++)
        out[i] = gq_value(&ch, i);
}

template <int T> static float host_dot(const void *row, int c, const int8_t *a)
{
    gq_chunk ch;
    gq_decode<T>((const uint8_t *)row, c, &ch);
    int32_t packed[8];
    __builtin_memcpy(packed, a, 32);
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 16; i++) {
        s0 += a[i];
        s1 += a[16 + i];
    }
    return gq_chunk_dot<T>(&ch, packed, s0, s1);
}

extern "C" bool gk_host_decode_chunk(uint32_t type, const void *row, int c, float out[32])
{
    switch (type) {
#define HD_CASE_(T)                                                                                              \
    case T:                                                                                                      \
        host_decode<T>(row, c, out);                                                                             \
        return true;
        GQ_FOR_EACH_QUANT(HD_CASE_)
#undef HD_CASE_
    default:
        return false;
    }
}

extern "C" bool gk_host_chunk_dot(uint32_t type, const void *row, int c, const int8_t a[32], float *out)
{
    switch (type) {
#define HC_CASE_(T)                                                                                              \
    case T:                                                                                                      \
        *out = host_dot<T>(row, c, a);                                                                           \
        return true;
        GQ_FOR_EACH_QUANT(HC_CASE_)
#undef HC_CASE_
    default:
        return false;
    }
}
