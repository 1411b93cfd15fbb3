/*
 * attn_kv.cuh — what the attention kernels share: eight consecutive
 * values of a KV cache row (F16 or F32) as they read them, fetched raw (one 16-byte load, or
 * two), converted to floats only when used, so a kernel can have many rows'
 * loads in flight before it needs any value (head sizes are multiples of
 * 8, so the eight values are 16-byte aligned); a chunk's softmax partials.
 */
#ifndef HYDRA_CUDA_ATTN_KV_CUH
#define HYDRA_CUDA_ATTN_KV_CUH

#include "common.cuh"

template <bool F16> struct kv_raw;
template <> struct kv_raw<true> {
    int4 h;
};
template <> struct kv_raw<false> {
    float4 a, b;
};

template <bool F16> static inline __device__ kv_raw<F16> kv_fetch(const void *base, int64_t i)
{
    kv_raw<F16> r;
    if constexpr (F16) {
        r.h = *(const int4 *)((const half *)base + i);
    } else {
        r.a = *(const float4 *)((const float *)base + i);
        r.b = *(const float4 *)((const float *)base + i + 4);
    }
    return r;
}

template <bool F16> static inline __device__ kv_raw<F16> kv_zero(void)
{
    kv_raw<F16> r;
    if constexpr (F16)
        r.h = make_int4(0, 0, 0, 0);
    else
        r.a = r.b = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return r;
}

template <bool F16> static inline __device__ void kv_floats(const kv_raw<F16> &r, float *v)
{
    if constexpr (F16) {
        const half2 *h = (const half2 *)&r.h;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 f = __half22float2(h[k]);
            v[2 * k] = f.x;
            v[2 * k + 1] = f.y;
        }
    } else {
        v[0] = r.a.x, v[1] = r.a.y, v[2] = r.a.z, v[3] = r.a.w, v[4] = r.b.x, v[5] = r.b.y, v[6] = r.b.z,
        v[7] = r.b.w;
    }
}

template <bool F16> static inline __device__ void kv_load8(const void *base, int64_t i, float *v)
{
    kv_floats<F16>(kv_fetch<F16>(base, i), v);
}

/* A value as the cache holds it: rounded to f16 in an F16 cache. */
static inline __device__ float kv_as_cached(float x, bool f16)
{
    return f16 ? __half2float(__float2half_rn(x)) : x;
}

/* One head's softmax partials over the scores p[0..len), by one warp: p
 * becomes e^(p - max); returns (max, sum of the exponentials) on every
 * lane. */
static inline __device__ float2 kv_softmax_partial(float *p, int len)
{
    float sum;
    const float mx = warp_exp_shifted(p, p, len, &sum);
    return make_float2(mx, sum);
}

#endif
