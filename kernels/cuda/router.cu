/*
 * router.cu — expert selection with every gating moe_select (src/moe.c)
 * has, for the layers gk_moe_topk does not cover (deepseek2's selection
 * bias and expert groups, gpt-oss's softmax over the chosen logits).  One
 * warp per token:
 *
 *   probs  = softmax(logits) | sigmoid(logits) | logits  (func 1 | 2 | 3)
 *   score  = probs + sel_bias                           (choice only)
 *   groups: each group's score is the sum of its two best expert scores;
 *           the n_group_used best groups stay, the others' experts are
 *           marked chosen so that top-k skips them
 *   top-k  of score, ties to the lower id; weight = probs of the expert
 *   func 3: softmax over the k weights; renorm: divided by their sum
 *           (clamped below at 2^-14, as moe.c); then scaled.
 *
 * The weights are finished by one lane in rank order, as moe.c sums them.
 */
#include "common.cuh"
#include "kernels_arch.h"
#include "tail.cuh" /* the selection rule (best, better, warp_best) and warp_softmax */

/* The gating output of every expert into probs. */
static inline __device__ void sel_gate(const gk_select &g, const float *l, float *probs)
{
    const int lane = threadIdx.x;
    if (g.func != 1) {
        for (int e = lane; e < g.n_expert; e += GPU_WARP)
            probs[e] = g.func == 2 ? 1.0f / (1.0f + expf(-l[e])) : l[e];
        return;
    }
    warp_softmax(l, probs, g.n_expert);
}

/* Marks chosen the experts outside the n_group_used best groups (moe.c's
 * exclude_groups); gscore holds n_group floats, gtaken n_group flags. */
static inline __device__ void sel_groups(const gk_select &g, const float *score, float *gscore,
                                         unsigned char *gtaken, unsigned char *chosen)
{
    const int lane = threadIdx.x, per = g.n_expert / g.n_group;
    for (int grp = lane; grp < g.n_group; grp += GPU_WARP) {
        float top1 = -INFINITY, top2 = -INFINITY;
        for (int e = grp * per; e < (grp + 1) * per; e++) {
            const float sc = score[e];
            if (sc > top1)
                top2 = top1, top1 = sc;
            else if (sc > top2)
                top2 = sc;
        }
        gscore[grp] = per >= 2 ? top1 + top2 : top1;
        gtaken[grp] = 0;
    }
    __syncwarp();
    if (lane == 0)
        for (int k = 0; k < g.n_group_used; k++) {
            int top = -1;
            for (int grp = 0; grp < g.n_group; grp++)
                if (!gtaken[grp] && (top < 0 || gscore[grp] > gscore[top]))
                    top = grp;
            gtaken[top] = 1;
        }
    __syncwarp();
    for (int e = lane; e < g.n_expert; e += GPU_WARP)
        chosen[e] = !gtaken[e / per];
    __syncwarp();
}

/* Lane 0: the chosen experts' final weights, in rank order. */
static inline __device__ void sel_finish(const gk_select &g, float *w)
{
    if (g.func == 3) {
        float mx = w[0];
        for (int k = 1; k < g.n_used; k++)
            mx = fmaxf(mx, w[k]);
        double sum = 0.0;
        for (int k = 0; k < g.n_used; k++)
            sum += (w[k] = expf(w[k] - mx));
        for (int k = 0; k < g.n_used; k++)
            w[k] = (float)(w[k] / sum);
    }
    if (g.renorm) {
        float sum = 0.0f;
        for (int k = 0; k < g.n_used; k++)
            sum += w[k];
        sum = fmaxf(sum, 6.103515625e-5f);
        for (int k = 0; k < g.n_used; k++)
            w[k] /= sum;
    }
    for (int k = 0; k < g.n_used; k++)
        w[k] *= g.scale;
}

/* Shared: probs, score (n_expert floats each), gscore (n_group floats),
 * chosen (n_expert), gtaken (n_group). */
__global__ void __launch_bounds__(GPU_WARP) k_route_select(gk_select g, const float *logits, gk_route *routes)
{
    gpu_pdl_wait();
    extern __shared__ float sel_smem[];
    const int n_group = g.n_group > 1 ? g.n_group : 1;
    float *probs = sel_smem, *score = probs + g.n_expert, *gscore = score + g.n_expert;
    unsigned char *chosen = (unsigned char *)(gscore + n_group), *gtaken = chosen + g.n_expert;
    __shared__ float picked[GK_SEL_MAX_USED];
    __shared__ int picked_e[GK_SEL_MAX_USED];
    const int t = blockIdx.x, lane = threadIdx.x;
    sel_gate(g, logits + (int64_t)t * g.n_expert, probs);
    __syncwarp();
    for (int e = lane; e < g.n_expert; e += GPU_WARP) {
        score[e] = g.sel_bias != NULL ? probs[e] + g.sel_bias[e] : probs[e];
        chosen[e] = 0;
    }
    __syncwarp();
    if (g.n_group > 1)
        sel_groups(g, score, gscore, gtaken, chosen);
    for (int k = 0; k < g.n_used; k++) {
        best b = {0.0f, -1};
        for (int e = lane; e < g.n_expert; e += GPU_WARP) {
            const best c = {score[e], e};
            if (!chosen[e] && better(b, c))
                b = c;
        }
        b = warp_best(b);
        if (lane == 0) {
            const int e = b.i >= 0 ? b.i : 0; /* every score NaN: expert 0, as harmless as any */
            chosen[e] = 1;
            picked[k] = probs[e];
            picked_e[k] = e;
        }
        __syncwarp();
    }
    if (lane == 0)
        sel_finish(g, picked);
    __syncwarp();
    gk_route *r = routes + (int64_t)t * g.n_used;
    for (int k = lane; k < g.n_used; k += GPU_WARP) {
        r[k].token = t;
        r[k].expert = picked_e[k];
        r[k].weight = picked[k];
    }
}

extern "C" int gk_route_select(gpuStream_t s, const gk_select *g, const float *logits, int n_tok, gk_route *routes)
{
    if (n_tok == 0)
        return 0;
    const int n_group = g->n_group > 1 ? g->n_group : 1;
    if (g->n_expert < 1 || g->n_expert > GK_SEL_MAX_EXPERTS || g->n_used < 1 || g->n_used > GK_SEL_MAX_USED ||
        g->n_used > g->n_expert || g->n_expert % n_group != 0 || g->func < 1 || g->func > 3 ||
        (g->n_group > 1 && (g->n_group_used < 1 || g->n_group_used > g->n_group)))
        return (int)gpuErrorInvalidValue;
    const size_t smem = (2 * sizeof(float) + 1) * (size_t)g->n_expert + (sizeof(float) + 1) * (size_t)n_group;
    return gk_launch(k_route_select, n_tok, GPU_WARP, smem, s, *g, logits, routes);
}
