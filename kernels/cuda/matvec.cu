/*
 * matvec.cu — decode: W . x for a few activation rows.  One warp per
 * weight row; its lanes take the row's 32-value chunks in turn, decode each
 * once and dot it with every token's 8-bit activations by 4-byte integer
 * dot products (quant.cuh says how a chunk's scales and offsets enter).
 * Float weights (F32, F16, BF16) are dotted with the float activations.
 *
 * Routed launches (MoE experts) take one route per grid row: the route's
 * expert selects the matrix, its token (or its own index) the activation
 * row, so the same kernel runs over all of a layer's routes or any subset
 * of them, as the hybrid split needs.  GLU launches read a gate and an up
 * row together and write silu(gate . x) * (up . x).
 */
#include "common.cuh"

enum { MV_WARPS = 4, MV_MAX_TOK = GK_MATVEC_MAX_TOK };

struct mv_place {
    const uint8_t *w, *w2; /* this block's matrices */
    int64_t act0, out0;    /* first activation / output row */
    int n_tok;
};

static inline __device__ mv_place mv_where(const gk_mat &w, const gk_mat &w2, const gk_rows &rows, bool glu)
{
    mv_place p;
    if (rows.routes != NULL) {
        const gk_route rt = rows.routes[blockIdx.y];
        p.w = expert_matrix(w, rt.expert);
        p.w2 = glu ? expert_matrix(w2, rt.expert) : NULL;
        p.act0 = rows.act_by_token ? rt.token : (int64_t)blockIdx.y;
        p.out0 = blockIdx.y;
        p.n_tok = 1;
    } else {
        p.w = w.data;
        p.w2 = glu ? w2.data : NULL;
        p.act0 = 0;
        p.out0 = 0;
        p.n_tok = rows.n_tok;
    }
    return p;
}

/* Lane 0 of the warp holds the full sums after the reductions. */
static inline __device__ void mv_store(const gk_out &out, const mv_place &p, int64_t r, const float *acc,
                                       const float *acc2, bool glu)
{
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++) {
        if (t >= p.n_tok)
            break;
        float v = warp_sum(acc[t]);
        if (glu)
            v = silu(v) * warp_sum(acc2[t]);
        if (threadIdx.x % GPU_WARP != 0)
            continue;
        if (out.bias != NULL)
            v += out.bias[r];
        float *dst = out.y + (p.out0 + t) * out.y_stride + r;
        *dst = out.accumulate ? *dst + v : v;
    }
}

template <int T, bool GLU>
__global__ void __launch_bounds__(MV_WARPS *GPU_WARP) k_matvec_q(gk_mat w, gk_mat w2, gk_act x, gk_rows rows, gk_out out)
{
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + threadIdx.x / GPU_WARP;
    if (r >= w.n_rows)
        return;
    const int lane = threadIdx.x % GPU_WARP;
    const mv_place p = mv_where(w, w2, rows, GLU);
    const uint8_t *row = p.w + r * w.row_bytes;
    const uint8_t *row2 = GLU ? p.w2 + r * w2.row_bytes : NULL;
    const int n_chunks = (int)(w.n_cols / 32);
    float acc[MV_MAX_TOK], acc2[MV_MAX_TOK];
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++)
        acc[t] = acc2[t] = 0.0f;
    for (int c = lane; c < n_chunks; c += GPU_WARP) {
        gq_chunk ch, ch2;
        gq_decode<T>(row, c, &ch);
        if (GLU)
            gq_decode<T>(row2, c, &ch2);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= p.n_tok)
                break;
            const int64_t ar = p.act0 + t;
            const int4 *aq = (const int4 *)(x.q + ar * x.n + 32 * c);
            const int4 a0 = aq[0], a1 = aq[1];
            const int32_t a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const int4 m = ((const int4 *)x.meta)[ar * (x.n / 32) + c];
            const float d = __int_as_float(m.x);
            acc[t] += d * gq_chunk_dot<T>(&ch, a, m.y, m.z);
            if (GLU)
                acc2[t] += d * gq_chunk_dot<T>(&ch2, a, m.y, m.z);
        }
    }
    mv_store(out, p, r, acc, acc2, GLU);
}

template <int T, bool GLU>
__global__ void __launch_bounds__(MV_WARPS *GPU_WARP) k_matvec_f(gk_mat w, gk_mat w2, gk_act x, gk_rows rows, gk_out out)
{
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + threadIdx.x / GPU_WARP;
    if (r >= w.n_rows)
        return;
    const int lane = threadIdx.x % GPU_WARP;
    const mv_place p = mv_where(w, w2, rows, GLU);
    const uint8_t *row = p.w + r * w.row_bytes;
    const uint8_t *row2 = GLU ? p.w2 + r * w2.row_bytes : NULL;
    float acc[MV_MAX_TOK], acc2[MV_MAX_TOK];
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++)
        acc[t] = acc2[t] = 0.0f;
    for (int64_t i = 2 * lane; i < w.n_cols; i += 2 * GPU_WARP) {
        const float2 wv = float_pair<T>(row, i);
        float2 wv2 = make_float2(0.0f, 0.0f);
        if (GLU)
            wv2 = float_pair<T>(row2, i);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= p.n_tok)
                break;
            const float2 xv = *(const float2 *)(x.f + (p.act0 + t) * x.n + i);
            acc[t] += wv.x * xv.x + wv.y * xv.y;
            if (GLU)
                acc2[t] += wv2.x * xv.x + wv2.y * xv.y;
        }
    }
    mv_store(out, p, r, acc, acc2, GLU);
}

template <int T>
static int launch_q(gpuStream_t s, dim3 grid, const gk_mat *w, const gk_mat *w2, const gk_act *x, const gk_rows *rows,
                    const gk_out *out)
{
    if (w2 != NULL)
        k_matvec_q<T, true><<<grid, MV_WARPS * GPU_WARP, 0, s>>>(*w, *w2, *x, *rows, *out);
    else
        k_matvec_q<T, false><<<grid, MV_WARPS * GPU_WARP, 0, s>>>(*w, *w, *x, *rows, *out);
    return launch_status();
}

template <int T>
static int launch_f(gpuStream_t s, dim3 grid, const gk_mat *w, const gk_mat *w2, const gk_act *x, const gk_rows *rows,
                    const gk_out *out)
{
    if (w2 != NULL)
        k_matvec_f<T, true><<<grid, MV_WARPS * GPU_WARP, 0, s>>>(*w, *w2, *x, *rows, *out);
    else
        k_matvec_f<T, false><<<grid, MV_WARPS * GPU_WARP, 0, s>>>(*w, *w, *x, *rows, *out);
    return launch_status();
}

extern "C" bool gk_type_supported(uint32_t type)
{
    return gk_is_float_type(type) || gk_is_quant_type(type);
}

extern "C" int gk_matvec(gpuStream_t s, const gk_mat *w, const gk_mat *w2_glu, const gk_act *x, const gk_rows *rows,
                         const gk_out *out)
{
    const unsigned n_y = rows->routes != NULL ? (unsigned)rows->n_routes : 1u;
    if (w->n_rows == 0 || n_y == 0 || (rows->routes == NULL && rows->n_tok == 0))
        return 0;
    if (rows->routes == NULL && rows->n_tok > MV_MAX_TOK)
        return (int)gpuErrorInvalidValue;
    const dim3 grid((unsigned)((w->n_rows + MV_WARPS - 1) / MV_WARPS), n_y);
    switch (w->type) {
#define MV_QCASE_(T)                                                                                             \
    case T:                                                                                                      \
        return launch_q<T>(s, grid, w, w2_glu, x, rows, out);
        GQ_FOR_EACH_QUANT(MV_QCASE_)
#undef MV_QCASE_
#define MV_FCASE_(T)                                                                                             \
    case T:                                                                                                      \
        return launch_f<T>(s, grid, w, w2_glu, x, rows, out);
        GK_FOR_EACH_FLOAT(MV_FCASE_)
#undef MV_FCASE_
    default:
        return (int)gpuErrorInvalidValue;
    }
}
