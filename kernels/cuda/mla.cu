/*
 * mla.cu — multi-head latent attention's per-token step before attending
 * (model/mla.c's latent_rows): the latent's RMSNorm (sum of squares in
 * double, as op_rmsnorm) and the shared key's RoPE make the cache row;
 * each query head's nope part goes to q_nope (k_b maps it into latent
 * space next) and its roped part to the tail of its latent-space query.
 * One block per (head, token), the last block of a token makes the cache
 * row.
 */
#include "common.cuh"
#include "kernels_arch.h"
#include "rope.cuh"
#include "row_norm.cuh"

enum { MLA_THREADS = 128 };

static inline __device__ void mla_store(const gk_mla &m, int64_t i, float v)
{
    if (m.kv_f16)
        ((half *)m.k_cache)[i] = __float2half_rn(v);
    else
        ((float *)m.k_cache)[i] = v;
}

/* The n_rot values of src rotated into dst, or into the cache at element
 * cache_at when that is not negative. */
static inline __device__ void mla_rope(const gk_mla &m, int pos, const float *src, float *dst, int64_t cache_at)
{
    for (int i = threadIdx.x; i < m.n_rot / 2; i += MLA_THREADS) {
        float c, s;
        int ia, ib;
        rope_cos_sin(m, pos, i, &c, &s);
        rope_pair(m.neox, m.n_rot, i, &ia, &ib);
        const float x0 = src[ia], x1 = src[ib];
        const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
        if (cache_at >= 0) {
            mla_store(m, cache_at + ia, y0);
            mla_store(m, cache_at + ib, y1);
        } else {
            dst[ia] = y0;
            dst[ib] = y1;
        }
    }
}

__global__ void __launch_bounds__(MLA_THREADS) k_mla_prepare(gk_mla m, const gk_step *step)
{
    gpu_pdl_wait();
    __shared__ double red[MLA_THREADS / GPU_WARP];
    const int h = blockIdx.x, t = blockIdx.y;
    const int pos = step->pos0 + t;
    const int row = m.kv_lora + m.n_rot;
    if (h < m.n_head) {
        const float *qh = m.q + ((int64_t)t * m.n_head + h) * (m.nope + m.n_rot);
        float *nope = m.q_nope + ((int64_t)t * m.n_head + h) * m.nope;
        for (int i = threadIdx.x; i < m.nope; i += MLA_THREADS)
            nope[i] = qh[i];
        mla_rope(m, pos, qh + m.nope, m.q_lat + ((int64_t)t * m.n_head + h) * row + m.kv_lora, -1);
        return;
    }
    const float *lat = m.latent + (int64_t)t * row;
    double sum = 0.0;
    for (int i = threadIdx.x; i < m.kv_lora; i += MLA_THREADS)
        sum += (double)lat[i] * lat[i];
    sum = block_sum_d(sum, red);
    const float scale = 1.0f / sqrtf((float)(sum / (double)m.kv_lora) + m.eps);
    const int64_t cache_row = (int64_t)pos * row;
    for (int i = threadIdx.x; i < m.kv_lora; i += MLA_THREADS)
        mla_store(m, cache_row + i, lat[i] * scale * m.kv_norm[i]);
    mla_rope(m, pos, lat + m.kv_lora, NULL, cache_row + m.kv_lora);
}

extern "C" int gk_mla_prepare(gpuStream_t s, const gk_mla *m, const gk_step *step)
{
    if (m->n_tok == 0)
        return 0;
    if (m->n_rot % 2 != 0)
        return (int)gpuErrorInvalidValue;
    const dim3 grid((unsigned)(m->n_head + 1), (unsigned)m->n_tok);
    return gk_launch(k_mla_prepare, grid, MLA_THREADS, 0, s, *m, step);
}
