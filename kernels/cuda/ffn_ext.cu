/*
 * ffn_ext.cu — the FFN steps gpt-oss adds to the plain SwiGLU path: the
 * gate and up products' per-expert biases, the clamped SwiGLU
 * (op_swiglu_oai: g = min(gate, limit), u = clamp(up, -limit, limit),
 * g * sigmoid(alpha g) * (u + 1)), and the down product's per-expert bias.
 * A row of a launch is a route (decode) or a slot of the grouped order
 * (prefill: order[slot] is its route), which names the expert whose bias
 * row applies; a route of expert -1 (the hybrid split's misses, which the
 * matvec kernels skip) gets no bias.
 */
#include "common.cuh"
#include "kernels_arch.h"

static inline __device__ int ffx_expert(const gk_route *routes, const int32_t *order, int64_t r)
{
    return routes[order != NULL ? order[r] : r].expert;
}

__global__ void k_glu_act(gk_glu a)
{
    gpu_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.n_rows * a.ff)
        return;
    const int64_t r = i / a.ff, c = i % a.ff;
    float g = a.gate[i], u = a.up[i];
    const int e = a.gate_bias != NULL || a.up_bias != NULL ? ffx_expert(a.routes, a.order, r) : -1;
    if (e >= 0) {
        const int64_t b = (int64_t)e * a.ff + c;
        g += a.gate_bias != NULL ? a.gate_bias[b] : 0.0f;
        u += a.up_bias != NULL ? a.up_bias[b] : 0.0f;
    }
    if (a.oai) {
        g = fminf(g, a.limit);
        u = fminf(fmaxf(u, -a.limit), a.limit);
        a.h[i] = g / (1.0f + expf(-a.alpha * g)) * (u + 1.0f);
    } else {
        a.h[i] = silu(g) * u;
    }
}

extern "C" int gk_glu_act(gpuStream_t s, const gk_glu *a)
{
    const int64_t total = a->n_rows * a->ff;
    if (total == 0)
        return 0;
    if ((a->gate_bias != NULL || a->up_bias != NULL) && a->routes == NULL)
        return (int)gpuErrorInvalidValue;
    return gk_launch(k_glu_act, (unsigned)((total + 255) / 256), 256, 0, s, *a);
}

__global__ void k_route_bias(float *y, int64_t n_rows, int64_t width, const float *bias, const gk_route *routes,
                             const int32_t *order)
{
    gpu_pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * width)
        return;
    const int e = ffx_expert(routes, order, i / width);
    if (e >= 0)
        y[i] += bias[(int64_t)e * width + i % width];
}

extern "C" int gk_route_bias(gpuStream_t s, float *y, int64_t n_rows, int64_t width, const float *bias,
                             const gk_route *routes, const int32_t *order)
{
    const int64_t total = n_rows * width;
    if (total == 0)
        return 0;
    return gk_launch(k_route_bias, (unsigned)((total + 255) / 256), 256, 0, s, y, n_rows, width, bias, routes, order);
}
