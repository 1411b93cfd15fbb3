/*
 * attn_out_router.h — decode, one token: the attention output projection
 * added into x and the MoE router of the new x in one launch
 * (attn_out_router.cu), instead of the attention output's matvec and
 * gk_router_topk's normed cluster.  Its own header, beside kernels.h, so
 * that the other kernels do not recompile for it.
 *
 * The RMSNorm before the router is a scalar divisor: logits = Wr . (x *
 * gain) / rms(x), and Wr . (x * gain) is linear in x.  So each block, having
 * added its GK_AOR_ROWS values of x, dots them (times the gain) with the
 * router's matching columns for every expert; the blocks of a cluster of
 * GK_AOR_CLUSTER sum these partials in rank order in their first block,
 * which writes the cluster's GK_AOR_SPAN values of x, their sum of squares
 * and the cluster's partials; the last first block to finish sums the
 * clusters' partials and squares in cluster order (fixed orders, no float
 * atomics: the same bits every run) and selects the experts as the
 * router's tail does, while every first block, once all have counted,
 * sums the squares itself (the same order) and writes its values of xn
 * and their 8-bit form.  x has the bits of
 * the attention output's own launch; the logits are the same terms summed
 * in another order (and scaled once at the end), so they match
 * gk_router_topk's to float rounding, and the routes except at near-ties;
 * the norm's sum of squares too (in double, so xn nearly always has the
 * router's bits).
 */
#ifndef HYDRA_CUDA_ATTN_OUT_ROUTER_H
#define HYDRA_CUDA_ATTN_OUT_ROUTER_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GK_AOR_ROWS = 4, GK_AOR_CLUSTER = 8, GK_AOR_SPAN = GK_AOR_ROWS * GK_AOR_CLUSTER };

typedef struct gk_aor {
    gk_mat wo;             /* attention output: n_embd rows of the attention's width, quantised */
    const float *wo_bias;  /* NULL: none */
    float *x;              /* n_embd values, += wo . attention */
    gk_mat router;         /* F32, n_expert rows of n_embd */
    const float *router_bias;
    float *logits;         /* n_expert values out */
    gk_tail tail;          /* counter (zero between launches), gating, routes */
    gk_norm_out norm;      /* the FFN norm: gain, eps; y, q, meta out (q, meta not NULL) */
    float *partial;        /* scratch, 8-byte aligned: gk_attn_out_router_scratch floats */
    /* With ready.words: the routes are handed to the experts' launch by
     * those words (kernels.h), with the norm's scale in them; the normed
     * row (norm's y, q, meta) is then not written: the experts' blocks
     * norm x themselves. */
    gk_route_word ready;
} gk_aor;

/* Whether the launch takes these shapes: clusters on the device, wo of a
 * type the launch decodes (Q4_K, Q5_K, Q6_K, Q8_0) with n_embd rows, an F32
 * router of n_expert rows of n_embd columns, n_embd a multiple of
 * GK_AOR_SPAN up to GK_ROUTER_NORM_MAX, the gating within the tail's
 * limits. */
bool gk_attn_out_router_fits(const gk_mat *wo, const gk_mat *router, const gk_gating *g);

/* The scratch floats of a launch: each cluster's sum of squares (a
 * double) and partial logits. */
static inline int64_t gk_attn_out_router_scratch(int64_t n_embd, int n_expert)
{
    return n_embd / GK_AOR_SPAN * (2 + (int64_t)n_expert);
}

/* The launch over the attention output's 8-bit form att (one row of
 * wo.n_cols: att->q, att->meta). */
int gk_attn_out_router(gpuStream_t s, const gk_aor *a, const gk_act *att);

#ifdef __cplusplus
}
#endif

#endif
