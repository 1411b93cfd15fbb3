/*
 * attn_out_router.cu — the attention output projection and the MoE router
 * in one launch (attn_out_router.h says what it computes).  Why: a decode
 * layer is bound by its launches' fixed costs, not by bytes (the router's
 * launch was ~8.4 us serialised for 1 MB; docs/PERFORMANCE.md, "CUDA
 * decode, session 10: the router in the attention output").
 *
 * Blocks of GK_AOR_ROWS warps, a warp per row of x as k_matvec_q's one-token
 * launch (the same terms in the same order, so x has its bits), in clusters
 * of GK_AOR_CLUSTER.  Each thread holds the router columns of its block's
 * rows for its experts, loaded before the wait for the previous launch (they
 * do not depend on it).  A block's partials and its new x values go into
 * its cluster's first block by st.async (cluster_async.cuh: no cluster
 * barrier on the path), which sums them in rank order; the last first
 * block to finish (tail.cuh's fence-then-count) takes the tail.
 */
#include "attn_out_router.h"

#include "cluster_async.cuh"
#include "common.cuh"
#include "row_norm.cuh"
#include "tail.cuh"

/* The attention output types of the launch: Q4_K_M's and Q5_K_M's (Q4_K,
 * Q5_K, Q6_K) and Q8_0. */
#define AOR_TYPES(X) X(GQ_Q4_K) X(GQ_Q5_K) X(GQ_Q6_K) X(GQ_Q8_0)

enum {
    AOR_THREADS = GK_AOR_ROWS * GPU_WARP,
    AOR_MAX_CLUSTERS = GK_ROUTER_NORM_MAX / GK_AOR_SPAN,
    AOR_EXPERTS_PER = GK_TAIL_MAX_EXPERTS / AOR_THREADS, /* experts a thread */
    AOR_PER = GK_ROUTER_NORM_MAX / AOR_THREADS,          /* values of x a thread in the tail */
    /* gk_router_topk's normed cluster sums the squares over 512 threads, 4
     * values each (value t + 512 k), then its 16 warps in order: the tail
     * keeps that order (AOR_VIRT threads of it per thread), so xn, its 8-bit
     * form and the scale have the router's bits */
    AOR_ROUTER_THREADS = 512,
    AOR_VIRT = AOR_ROUTER_THREADS / AOR_THREADS,
    AOR_KEY_STRIDE = GK_TAIL_MAX_EXPERTS + 2, /* room for an odd count's zero */
};
static_assert(AOR_PER == AOR_VIRT * (GK_ROUTER_NORM_MAX / AOR_ROUTER_THREADS), "the router's norm order");
static_assert(GK_AOR_ROWS == 4, "a thread's router columns are one float4");

/* Row r of x's increment: wo's row r . att, as k_matvec_q<T, false, 1>
 * sums it (two chunks a lane a step, both decoded first; the warp's
 * butterfly), for every lane. */
template <int T>
static __device__ __forceinline__ float aor_row(const gk_mat &w, int64_t r, const int8_t *aq, const int32_t *ameta)
{
    const int lane = threadIdx.x % GPU_WARP, n_chunks = (int)(w.n_cols / 32);
    const uint8_t *row = w.data + r * w.row_bytes;
    float acc = 0.0f;
    for (int c = lane; c < n_chunks; c += 2 * GPU_WARP) {
        const bool two = c + GPU_WARP < n_chunks;
        const int c2 = two ? c + GPU_WARP : c;
        gq_chunk ch[2];
        gq_decode<T>(row, c, &ch[0]);
        gq_decode<T>(row, c2, &ch[1]);
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int cu = u == 0 ? c : c2;
            const int4 *q = (const int4 *)(aq + 32 * cu);
            const int4 a0 = q[0], a1 = q[1];
            const int32_t a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const int4 m = ((const int4 *)ameta)[cu];
            const float d = u == 0 || two ? __int_as_float(m.x) : 0.0f;
            acc += d * gq_chunk_dot<T>(&ch[u], a, m.y, m.z);
        }
    }
    return warp_sum(acc);
}

/* The tail's shared memory (one block). */
struct aor_tail_smem {
    float y[GK_ROUTER_NORM_MAX]; /* the normed row */
    float prob[GK_TAIL_MAX_EXPERTS];
    unsigned long long key[AOR_KEY_STRIDE];
    int picked_e[GK_TAIL_MAX_USED];
    float picked_p[GK_TAIL_MAX_USED];
    double red[AOR_ROUTER_THREADS / GPU_WARP];
};

/* The RMSNorm's scale of x (v[k] holds value tid + AOR_THREADS k) in the
 * router's order: value t + 512 j's square summed by its thread (j in
 * order), its warp's butterfly, then the 16 warps in order. */
static __device__ float aor_scale(const float *v, int64_t n, float eps, double *red)
{
    constexpr int per = GK_ROUTER_NORM_MAX / AOR_ROUTER_THREADS;
    double s[AOR_VIRT];
#pragma unroll
    for (int j = 0; j < AOR_VIRT; j++) { /* virtual thread tid + AOR_THREADS j holds v[j + AOR_VIRT k] */
        s[j] = 0.0;
#pragma unroll
        for (int k = 0; k < per; k++)
            s[j] += (double)v[j + AOR_VIRT * k] * v[j + AOR_VIRT * k];
    }
    for (int m = GPU_WARP / 2; m > 0; m /= 2)
#pragma unroll
        for (int j = 0; j < AOR_VIRT; j++)
            s[j] += gpu_shfl_xor(s[j], m);
    if (threadIdx.x % GPU_WARP == 0)
#pragma unroll
        for (int j = 0; j < AOR_VIRT; j++)
            red[threadIdx.x / GPU_WARP + (AOR_THREADS / GPU_WARP) * j] = s[j];
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < AOR_ROUTER_THREADS / GPU_WARP; w++)
        total += red[w];
    return norm_scale(total, n, eps);
}

/* The sum of expert e's partials over the clusters, in cluster order,
 * their loads all in flight (through L2: other blocks wrote them). */
static __device__ float aor_partials(const float *partial, int n_clusters, int n_expert, int e)
{
    float p[AOR_MAX_CLUSTERS];
#pragma unroll
    for (int c = 0; c < AOR_MAX_CLUSTERS; c++)
        p[c] = c < n_clusters ? __ldcg(partial + (int64_t)c * n_expert + e) : 0.0f;
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < AOR_MAX_CLUSTERS; c++)
        if (c < n_clusters)
            s += p[c];
    return s;
}

/* Warps 1.. : the normed row's 8-bit form, Q8_GROUP chunks a warp at a
 * time (a chunk quantised on its own: the bytes of norm_regs_apply). */
static __device__ void aor_q8(const float *y, int64_t n, const gk_norm_out &norm)
{
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP, others = AOR_THREADS / GPU_WARP - 1;
    const int n_chunks = (int)(n / GPU_WARP), n_groups = (n_chunks + Q8_GROUP - 1) / Q8_GROUP;
    for (int gi = warp - 1; gi < n_groups; gi += others) {
        const int c0 = gi * Q8_GROUP, live = n_chunks - c0 < Q8_GROUP ? n_chunks - c0 : Q8_GROUP;
        float v[Q8_GROUP];
#pragma unroll
        for (int k = 0; k < Q8_GROUP; k++)
            v[k] = k < live ? y[(c0 + k) * GPU_WARP + lane] : 0.0f;
        q8_warp_store_k<Q8_GROUP>(v, live, norm.q, norm.meta, (int64_t)c0 * GPU_WARP, GPU_WARP);
    }
}

/* The last cluster's first block: the norm, the logits, the top-k. */
static __device__ void aor_tail(const gk_aor &a, int n_clusters)
{
    __shared__ __align__(16) aor_tail_smem sm;
    const gk_gating &g = a.tail.gating;
    const int64_t n = a.router.n_cols;
    const int n_expert = g.n_expert, warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    float v[AOR_PER], gn[AOR_PER];
    norm_regs_load<AOR_PER>(a.x, n, a.norm.gain, v, gn);
    float raw[AOR_EXPERTS_PER];
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        const int e = (int)threadIdx.x + AOR_THREADS * j;
        raw[j] = e < n_expert ? aor_partials(a.partial, n_clusters, n_expert, e) : 0.0f;
    }
    const float scale = aor_scale(v, n, a.norm.eps, sm.red);
#pragma unroll
    for (int k = 0; k < AOR_PER; k++) {
        const int64_t i = threadIdx.x + (int64_t)AOR_THREADS * k;
        if (i < n) {
            const float y = v[k] * scale * gn[k];
            a.norm.y[i] = y;
            sm.y[i] = y;
        }
    }
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        const int e = (int)threadIdx.x + AOR_THREADS * j;
        if (e < n_expert) {
            const float l = raw[j] * scale + (a.router_bias != NULL ? a.router_bias[e] : 0.0f);
            a.logits[e] = l;
            sm.prob[e] = l;
        }
    }
    __syncthreads();
    if (warp == 0) {
        float p[TK_PER_LANE];
        topk_probs<false>(g, sm.prob, p);
#pragma unroll
        for (int j = 0; j < TK_PER_LANE; j++) {
            const int e = lane + GPU_WARP * j;
            if (e < n_expert) {
                sm.prob[e] = p[j];
                sm.key[e] = tk_key64(p[j], e);
            }
        }
        if (lane == 0)
            sm.key[n_expert] = 0; /* an odd count's pair */
    } else {
        aor_q8(sm.y, n, a.norm);
    }
    __syncthreads();
    topk_rank_block(sm.key, AOR_KEY_STRIDE, sm.prob, GK_TAIL_MAX_EXPERTS, 1, n_expert, g.n_used, sm.picked_e,
                    sm.picked_p, GK_TAIL_MAX_USED);
    __syncthreads();
    topk_write_routes(g, 1, sm.picked_e, sm.picked_p, GK_TAIL_MAX_USED, a.tail.routes);
}

template <int T>
__global__ void __launch_bounds__(AOR_THREADS) k_attn_out_router(const gk_aor a, const int8_t *aq, const int32_t *ameta)
{
    __shared__ __align__(16) float got[GK_AOR_CLUSTER][GK_TAIL_MAX_EXPERTS]; /* first block: each block's partials */
    __shared__ float got_x[GK_AOR_CLUSTER][GK_AOR_ROWS];                      /* ... and its values of x */
    __shared__ float xs[GK_AOR_ROWS];
    __shared__ __align__(8) uint64_t landed;
    const unsigned rank = cl_rank(), n_blocks = cl_size();
    const int n_expert = a.tail.gating.n_expert, warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    const int64_t r0 = (int64_t)blockIdx.x * GK_AOR_ROWS;
    if (rank == 0 && threadIdx.x == 0)
        cla_expect(&landed, (uint32_t)(sizeof(float) * (n_blocks - 1) * (n_expert + GK_AOR_ROWS)));
    float4 wr[AOR_EXPERTS_PER];
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        const int e = (int)threadIdx.x + AOR_THREADS * j;
        wr[j] = e < n_expert ? *(const float4 *)(a.router.data + (int64_t)e * a.router.row_bytes + 4 * r0)
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float gain[GK_AOR_ROWS]; /* scalar loads: a gain vector's alignment is not known */
#pragma unroll
    for (int k = 0; k < GK_AOR_ROWS; k++)
        gain[k] = a.norm.gain != NULL ? a.norm.gain[r0 + k] : 1.0f;
    cla_cluster_started(); /* before the wait: it overlaps the previous launch */
    gpu_pdl_wait();
    const float v = aor_row<T>(a.wo, r0 + warp, aq, ameta);
    gpu_pdl_trigger(); /* left: the partials, the sums, the tail */
    if (lane == 0) {
        const float inc = a.wo_bias != NULL ? v + a.wo_bias[r0 + warp] : v;
        xs[warp] = a.x[r0 + warp] + inc;
    }
    __syncthreads();
    const float gx[GK_AOR_ROWS] = {gain[0] * xs[0], gain[1] * xs[1], gain[2] * xs[2], gain[3] * xs[3]};
    const uint32_t bar = cla_in_block(&landed, 0);
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        const int e = (int)threadIdx.x + AOR_THREADS * j;
        if (e >= n_expert)
            continue;
        const float p = fmaf(wr[j].w, gx[3], fmaf(wr[j].z, gx[2], fmaf(wr[j].y, gx[1], wr[j].x * gx[0])));
        if (rank == 0)
            got[0][e] = p;
        else
            cla_send(cla_in_block(&got[rank][e], 0), p, bar);
    }
    if (threadIdx.x < GK_AOR_ROWS) {
        if (rank == 0)
            got_x[0][threadIdx.x] = xs[threadIdx.x];
        else
            cla_send(cla_in_block(&got_x[rank][threadIdx.x], 0), xs[threadIdx.x], bar);
    }
    if (rank != 0)
        return;
    __syncthreads(); /* this block's own */
    cla_wait(&landed);
    const int cluster = (int)(blockIdx.x / n_blocks);
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        const int e = (int)threadIdx.x + AOR_THREADS * j;
        if (e >= n_expert)
            continue;
        float s = 0.0f;
        for (unsigned b = 0; b < n_blocks; b++)
            s += got[b][e];
        a.partial[(int64_t)cluster * n_expert + e] = s;
    }
    if (threadIdx.x < n_blocks * GK_AOR_ROWS)
        a.x[(int64_t)cluster * n_blocks * GK_AOR_ROWS + threadIdx.x] =
            got_x[threadIdx.x / GK_AOR_ROWS][threadIdx.x % GK_AOR_ROWS];
    if (gk_last_block(a.tail.counter, gridDim.x / n_blocks))
        aor_tail(a, (int)(gridDim.x / n_blocks));
}

static bool aor_typed(uint32_t type)
{
#define AOR_IS_(T) if (type == T) return true;
    AOR_TYPES(AOR_IS_)
#undef AOR_IS_
    return false;
}

extern "C" bool gk_attn_out_router_fits(const gk_mat *wo, const gk_mat *router, const gk_gating *g)
{
    const int64_t n = router->n_cols;
    return gk_clusters_supported() && aor_typed(wo->type) && wo->n_rows == n && wo->n_cols % 32 == 0 &&
           router->type == GQ_F32 && router->n_rows == g->n_expert && router->row_bytes % 16 == 0 &&
           (uintptr_t)router->data % 16 == 0 && n % GK_AOR_SPAN == 0 && n <= GK_ROUTER_NORM_MAX &&
           g->n_expert >= 1 && g->n_expert <= GK_TAIL_MAX_EXPERTS && g->n_used >= 1 &&
           g->n_used <= GK_TAIL_MAX_USED && g->n_used <= g->n_expert;
}

extern "C" int gk_attn_out_router(gpuStream_t s, const gk_aor *a, const gk_act *att)
{
    if (!gk_attn_out_router_fits(&a->wo, &a->router, &a->tail.gating) || a->tail.counter == NULL ||
        a->norm.q == NULL || a->norm.meta == NULL || att->n != a->wo.n_cols)
        return (int)gpuErrorInvalidValue;
    const dim3 grid((unsigned)(a->wo.n_rows / GK_AOR_ROWS));
    switch (a->wo.type) {
#define AOR_CASE_(T)                                                                                             \
    case T:                                                                                                      \
        return gk_launch_cluster(k_attn_out_router<T>, grid, AOR_THREADS, 0, s, GK_AOR_CLUSTER, *a, att->q,       \
                                 att->meta);
        AOR_TYPES(AOR_CASE_)
#undef AOR_CASE_
    default:
        return (int)gpuErrorInvalidValue;
    }
}
