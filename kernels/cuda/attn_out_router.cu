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
 * barrier on the path), which sums them in rank order and writes them,
 * its cluster's values of x and their sum of squares.  The last first block
 * to finish (tail.cuh's fence-then-count) sums the clusters' partials, the
 * norm's scale, the logits and the top-k, the probabilities over all its
 * warps.  Every first block computes the scale itself once the count is
 * back at zero and writes its cluster's values of the normed row: spread,
 * their stores cost little (one block storing the whole row and its 8-bit
 * form held the tail up by ~9 us), and nothing is published on the tail's
 * path.  tg128 on the H200 448 -> 461 t/s for the launch, 460 -> 475 for
 * its tail's second form (docs/PERFORMANCE.md, "CUDA decode, session 10:
 * the router launch's tail").  Where the experts' one launch follows, the
 * tail hands the routes and the scale over by route words instead
 * (kernels.h's gk_route_word) and no normed row is written at all: the
 * experts' blocks norm x themselves (session 15).
 */
#include "attn_out_router.h"

#include "cluster_async.cuh"
#include "common.cuh"
#include "row_norm.cuh"
#include "stamp.cuh"
#include "tail.cuh"

#include <atomic>

GK_STAMP_TU(attn_out_router)

/* The attention output types of the launch: Q4_K_M's and Q5_K_M's (Q4_K,
 * Q5_K, Q6_K) and Q8_0. */
#define AOR_TYPES(X) X(GQ_Q4_K) X(GQ_Q5_K) X(GQ_Q6_K) X(GQ_Q8_0)

enum {
    AOR_THREADS = GK_AOR_ROWS * GPU_WARP,
    AOR_MAX_CLUSTERS = GK_ROUTER_NORM_MAX / GK_AOR_SPAN,
    AOR_EXPERTS_PER = GK_TAIL_MAX_EXPERTS / AOR_THREADS, /* experts a thread */
    AOR_RANK_UNROLL = 8,                                 /* 16-byte loads of keys in flight in the rank */
    AOR_KEYS = GK_TAIL_MAX_EXPERTS,                      /* keys padded with zeros to 2 * AOR_RANK_UNROLL */
};
static_assert(GK_AOR_SPAN == GPU_WARP, "a cluster's values of x are one warp's");
static_assert(AOR_MAX_CLUSTERS <= 2 * GPU_WARP, "a cluster's sum of squares is 2 a lane");
static_assert(AOR_KEYS % (2 * AOR_RANK_UNROLL) == 0, "whole rounds of keys");

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
            const gq_act x = gq_act_chunk(aq, (const int4 *)ameta, cu);
            const float d = u == 0 || two ? __int_as_float(x.m.x) : 0.0f;
            acc += d * gq_chunk_dot<T>(&ch[u], x.a, x.m.y, x.m.z);
        }
    }
    return warp_sum(acc);
}

/* The scratch (gk_aor's partial): each cluster's sum of squares, then
 * each cluster's partial logits. */
struct aor_scratch {
    double *sq;
    float *partial;
};

static __device__ aor_scratch aor_scratch_of(float *base, int n_clusters)
{
    aor_scratch sc;
    sc.sq = (double *)base;
    sc.partial = (float *)(sc.sq + n_clusters);
    return sc;
}

/* The tail's shared memory (one block). */
struct aor_tail_smem {
    float prob[GK_TAIL_MAX_EXPERTS]; /* logits, then probabilities */
    unsigned long long key[AOR_KEYS];
    int picked_e[GK_TAIL_MAX_USED];
    float picked_p[GK_TAIL_MAX_USED];
    double red_d[GK_AOR_ROWS]; /* each warp's softmax sum */
    float red_f[GK_AOR_ROWS];  /* ... and maximum */
    float scale;
};

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

/* A warp's loads of the clusters' sums of squares (lane l: clusters l and
 * l + 32), apart from their sum so that the tail has them in flight with
 * its partials' loads (one L2 round trip fewer), */
struct aor_sq2 {
    double a, b;
};

static __device__ aor_sq2 aor_sq_load(const double *sq, int n_clusters)
{
    const int lane = threadIdx.x % GPU_WARP;
    aor_sq2 r;
    r.a = lane < n_clusters ? __ldcg(sq + lane) : 0.0;
    r.b = lane + GPU_WARP < n_clusters ? __ldcg(sq + lane + GPU_WARP) : 0.0;
    return r;
}

/* then the RMSNorm's scale: lane l's two, then the butterfly (a fixed
 * order: every first block has the same bits). */
static __device__ float aor_scale(aor_sq2 q, int64_t n, float eps)
{
    double s = q.a + q.b;
    for (int m = GPU_WARP / 2; m > 0; m /= 2)
        s += gpu_shfl_xor(s, m);
    return norm_scale(s, n, eps);
}

/* A warp of a cluster's first block: its GK_AOR_SPAN values of the normed
 * row (xv, lane l's value l) and their 8-bit form, one chunk of 32
 * (quantised on its own, as norm_regs_apply's chunks).  Every first block
 * writes its own: one block writing the whole row (2048 values, the 8-bit
 * bytes and scales) spent ~9 us draining its stores. */
static __device__ void aor_chunk_normed(const gk_norm_out &norm, int cluster, float xv, float scale)
{
    const int64_t i = (int64_t)cluster * GK_AOR_SPAN + threadIdx.x % GPU_WARP;
    const float y = xv * scale * (norm.gain != NULL ? norm.gain[i] : 1.0f);
    norm.y[i] = y;
    q8_warp_store(y, norm.q + (int64_t)cluster * GK_AOR_SPAN, norm.meta + 4 * cluster);
}

/* Expert e's rank: the count of larger keys (tk_key64: a larger
 * probability, or an equal one and a lower id), AOR_RANK_UNROLL 16-byte
 * loads in flight at a time, every lane reading the same key (a
 * broadcast); the picks of rank < n_used: tail.cuh's topk_rank_block's
 * choice.  A thread an expert, its loads unrolled, for a block of 4 warps:
 * one warp per SM sub-partition leaves no other warp to hide a load's
 * latency.  (0.8 us for 128 experts on the H200; topk_rank_block took 5.3
 * us here, but behind the normed row's stores then in the tail, which
 * later measured to hold this phase up too: not compared alone;
 * docs/PERFORMANCE.md, "CUDA decode, session 10: the router in the
 * attention output".) */
static __device__ void aor_rank(aor_tail_smem &sm, int n_expert, int n_used)
{
    const ulonglong2 *kp = (const ulonglong2 *)sm.key;
    const int n_rounds = (n_expert + 2 * AOR_RANK_UNROLL - 1) / (2 * AOR_RANK_UNROLL);
    for (int e = (int)threadIdx.x; e < n_expert; e += AOR_THREADS) {
        const unsigned long long mine = sm.key[e];
        int before = 0;
        for (int r = 0; r < n_rounds; r++) {
            ulonglong2 q[AOR_RANK_UNROLL];
#pragma unroll
            for (int k = 0; k < AOR_RANK_UNROLL; k++)
                q[k] = kp[r * AOR_RANK_UNROLL + k];
#pragma unroll
            for (int k = 0; k < AOR_RANK_UNROLL; k++)
                before += (q[k].x > mine) + (q[k].y > mine);
        }
        if (before < n_used) {
            sm.picked_e[before] = e;
            sm.picked_p[before] = sm.prob[e];
        }
    }
}

/* Every thread: the probabilities of experts threadIdx.x + AOR_THREADS j
 * from their logits l[j] (-INFINITY past n_expert), topk_probs's formula
 * over the block instead of one warp (tg128 +1%): the maximum, then the
 * softmax's sum in double, each warp's butterfly then the warps in order
 * (a fixed order). */
static __device__ void aor_block_probs(const gk_gating &g, float *l, aor_tail_smem &sm)
{
    const int warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    if (g.sigmoid) {
#pragma unroll
        for (int j = 0; j < AOR_EXPERTS_PER; j++)
            l[j] = 1.0f / (1.0f + expf(-l[j]));
        return;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++)
        mx = fmaxf(mx, l[j]);
    mx = warp_max(mx);
    if (lane == 0)
        sm.red_f[warp] = mx;
    __syncthreads();
    mx = sm.red_f[0];
#pragma unroll
    for (int w = 1; w < GK_AOR_ROWS; w++)
        mx = fmaxf(mx, sm.red_f[w]);
    double sum = 0.0;
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        if ((int)threadIdx.x + AOR_THREADS * j < g.n_expert) {
            l[j] = expf(l[j] - mx);
            sum += l[j];
        }
    }
    for (int m = GPU_WARP / 2; m > 0; m /= 2)
        sum += gpu_shfl_xor(sum, m);
    if (lane == 0)
        sm.red_d[warp] = sum;
    __syncthreads();
    double total = sm.red_d[0];
#pragma unroll
    for (int w = 1; w < GK_AOR_ROWS; w++)
        total += sm.red_d[w];
    const float inv = (float)(1.0 / total);
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++)
        l[j] *= inv;
}

/* The tail's routes handed to the experts' launch by their words, the
 * norm's scale in each (common.cuh's gk_route_word_of): right after the
 * rank, each word by its thread after a fence (the release of what the
 * block's barriers ordered before it, and, through the count's acquire,
 * every first block's values of x, which the experts' blocks norm); the
 * routes' weights, which only the combine reads, are written after.  A
 * fence by every thread before the barrier as well cost tg128 ~0.5%
 * (docs/PERFORMANCE.md, "CUDA decode, session 15"). */
static __device__ void aor_hand_over(const gk_aor &a, const aor_tail_smem &sm, float scale)
{
    if ((int)threadIdx.x < a.tail.gating.n_used) {
        const unsigned long long w = gk_route_word_of(a.ready.step->seq, sm.picked_e[threadIdx.x], scale);
        gpu_fence_acq_rel();
        *(volatile unsigned long long *)(a.ready.words + threadIdx.x) = w;
    }
}

/* The last cluster's first block: the scale (warp 0, its loads in flight
 * with the partials'), the logits, the probabilities and the top-k, and
 * (warp 1, while warp 0 writes the routes) its own values of the normed
 * row. */
static __device__ void aor_tail(const gk_aor &a, const aor_scratch &sc, int n_clusters, int cluster, float xv)
{
    __shared__ __align__(16) aor_tail_smem sm;
    const gk_gating &g = a.tail.gating;
    const int n_expert = g.n_expert, warp = threadIdx.x / GPU_WARP, lane = threadIdx.x % GPU_WARP;
    GK_STAMP_IF(threadIdx.x == 0, GS_AOR_TAIL);
    aor_sq2 sq2 = {0.0, 0.0};
    if (warp == 0)
        sq2 = aor_sq_load(sc.sq, n_clusters);
    float raw[AOR_EXPERTS_PER];
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        const int e = (int)threadIdx.x + AOR_THREADS * j;
        raw[j] = e < n_expert ? aor_partials(sc.partial, n_clusters, n_expert, e) : 0.0f;
    }
    if (warp == 0) {
        const float scale = aor_scale(sq2, a.router.n_cols, a.norm.eps);
        if (lane == 0)
            sm.scale = scale;
    }
    for (int e = (int)threadIdx.x; e < AOR_KEYS; e += AOR_THREADS)
        sm.key[e] = 0; /* the padding ranks below every key */
    __syncthreads();
    GK_STAMP_IF(threadIdx.x == 0, GS_AOR_PARTIALS);
    const float scale = sm.scale;
    float l[AOR_EXPERTS_PER];
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        const int e = (int)threadIdx.x + AOR_THREADS * j;
        l[j] = -INFINITY;
        if (e < n_expert) {
            l[j] = raw[j] * scale + (a.router_bias != NULL ? a.router_bias[e] : 0.0f);
            a.logits[e] = l[j];
        }
    }
    aor_block_probs(g, l, sm);
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        const int e = (int)threadIdx.x + AOR_THREADS * j;
        if (e < n_expert) {
            sm.prob[e] = l[j];
            sm.key[e] = tk_key64(l[j], e);
        }
    }
    __syncthreads();
    aor_rank(sm, n_expert, g.n_used);
    __syncthreads();
    GK_STAMP_IF(threadIdx.x == 0, GS_AOR_RANKED);
    if (a.ready.words != NULL)
        aor_hand_over(a, sm, scale);
    topk_write_routes(g, 1, sm.picked_e, sm.picked_p, GK_TAIL_MAX_USED, a.tail.routes);
    if (a.ready.words == NULL && warp == 1) /* free: the routes are warp 0's (n_used <= GPU_WARP) */
        aor_chunk_normed(a.norm, cluster, xv, scale);
    GK_STAMP_IF(threadIdx.x == 0, GS_AOR_ROUTES);
}

/* Warp 0 of the other first blocks: until the count is back at zero (the
 * last first block resets it once every first block has counted, and
 * nothing counts on it again before this launch ends: the next launches
 * wait for it), then the scale from the clusters' sums of squares, the
 * tail's terms in its order (the same bits), and their values of the
 * normed row.  Nothing is published on the tail's path: the scale word
 * that the last block published before (its fence, then an atomic) held
 * its probabilities up (tg128 460 -> 470 without it).  A first block
 * waits here only for blocks that are running or can start: the others
 * exit without waiting, so every cluster gets room. */
static __device__ void aor_await_count(const gk_aor &a, const aor_scratch &sc, int n_clusters, int cluster, float xv)
{
    if (threadIdx.x == 0)
        while (*(volatile unsigned int *)a.tail.counter != 0)
            ;
    __syncwarp();
    __threadfence();
    aor_chunk_normed(a.norm, cluster, xv, aor_scale(aor_sq_load(sc.sq, n_clusters), a.router.n_cols, a.norm.eps));
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
    gpu_params_warm(a);
    gpu_pdl_trigger(); /* at the start: the experts' launch then polls its route words sooner (common.cuh) */
    cla_cluster_started(); /* before the wait: it overlaps the previous launch */
    gpu_pdl_wait();
    GK_STAMP_IF(blockIdx.x == 0 && threadIdx.x == 0, GS_AOR_WAIT);
    const int cluster = (int)(blockIdx.x / n_blocks), n_clusters = (int)(gridDim.x / n_blocks);
    const aor_scratch sc = aor_scratch_of(a.partial, n_clusters);
    const float v = aor_row<T>(a.wo, r0 + warp, aq, ameta);
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
#pragma unroll
    for (int j = 0; j < AOR_EXPERTS_PER; j++) {
        const int e = (int)threadIdx.x + AOR_THREADS * j;
        if (e >= n_expert)
            continue;
        float s = 0.0f;
        for (unsigned b = 0; b < n_blocks; b++)
            s += got[b][e];
        sc.partial[(int64_t)cluster * n_expert + e] = s;
    }
    const float xv = got_x[lane / GK_AOR_ROWS][lane % GK_AOR_ROWS]; /* the cluster's values of x, one a lane */
    if (warp == 0) {
        a.x[(int64_t)cluster * GK_AOR_SPAN + lane] = xv;
        double sq = (double)xv * xv;
        for (int m = GPU_WARP / 2; m > 0; m /= 2)
            sq += gpu_shfl_xor(sq, m);
        if (lane == 0)
            sc.sq[cluster] = sq;
    }
    const bool last = gk_last_block(a.tail.counter, n_clusters);
    GK_STAMP_IF(blockIdx.x == 0 && threadIdx.x == 0, GS_AOR_COUNT);
    if (last)
        aor_tail(a, sc, n_clusters, cluster, xv);
    else if (warp == 0 && a.ready.words == NULL) /* handed over: no normed row to write */
        aor_await_count(a, sc, n_clusters, cluster, xv);
}

/* The most clusters of the instance for type T that the current device
 * holds at once, asked once per device (0: none known).  The first blocks
 * that wait for the count (aor_await_count) need every cluster resident
 * or able to start: a grid of at most this many clusters is. */
enum { AOR_DEVICES = 16 };
template <int T> static int aor_max_clusters(void)
{
#if defined(HYDRA_HIP)
    return 0;
#else
    static std::atomic<int> known[AOR_DEVICES]; /* 0: not asked yet, -1: none */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev >= AOR_DEVICES) {
        (void)cudaGetLastError();
        return 0;
    }
    if (known[dev].load() != 0)
        return known[dev].load() > 0 ? known[dev].load() : 0;
    const int fit = gk_max_clusters(k_attn_out_router<T>, GK_AOR_CLUSTER, AOR_THREADS);
    known[dev].store(fit > 0 ? fit : -1);
    return fit;
#endif
}

static int aor_clusters_fit(uint32_t type)
{
#define AOR_FIT_(T) if (type == T) return aor_max_clusters<T>();
    AOR_TYPES(AOR_FIT_)
#undef AOR_FIT_
    return 0;
}

extern "C" bool gk_attn_out_router_fits(const gk_mat *wo, const gk_mat *router, const gk_gating *g)
{
    const int64_t n = router->n_cols;
    return gk_clusters_supported() && wo->n_rows == n && wo->n_cols % 32 == 0 &&
           router->type == GQ_F32 && router->n_rows == g->n_expert && router->row_bytes % 16 == 0 &&
           (uintptr_t)router->data % 16 == 0 && n % GK_AOR_SPAN == 0 && n <= GK_ROUTER_NORM_MAX &&
           g->n_expert >= 1 && g->n_expert <= GK_TAIL_MAX_EXPERTS && g->n_used >= 1 &&
           g->n_used <= GK_TAIL_MAX_USED && g->n_used <= g->n_expert && aor_clusters_fit(wo->type) >= n / GK_AOR_SPAN;
}

extern "C" int gk_attn_out_router(gpuStream_t s, const gk_aor *a, const gk_act *att)
{
    const bool normed = a->ready.words != NULL ? a->ready.step != NULL : a->norm.q != NULL && a->norm.meta != NULL;
    if (!gk_attn_out_router_fits(&a->wo, &a->router, &a->tail.gating) || a->tail.counter == NULL || !normed ||
        att->n != a->wo.n_cols)
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
