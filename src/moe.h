/*
 * moe.h — the Mixture-of-Experts FFN as separable steps:
 *
 *   moe_router   x -> router logits [n_tok][n_expert] (+ bias)
 *   moe_select   logits -> gating (softmax | sigmoid | none) -> selection
 *                scores (+ a selection-only bias) -> best expert groups ->
 *                top-k (ties to the lower expert id) -> weights (the gating
 *                output, not the biased score; softmax over the chosen,
 *                renormalised or not, scaled): n_tok * k routes
 *                (token, expert, weight)
 *   moe_experts  out[t] += weight * expert(x[t]) over ANY list of routes
 *   moe_shared   out[t] += sigmoid(gate . x[t]) * shared_expert(x[t])
 *
 * moe_experts is the expert computation of the whole engine: the CPU-only
 * forward pass gives it every route of a layer; the hybrid split (issue 10)
 * gives it the misses and adds the GPU's partial sum.  It groups routes by
 * expert, so a prefill runs each selected expert once as a matrix-matrix
 * product over the tokens that chose it.
 */
#ifndef HYDRA_MOE_H
#define HYDRA_MOE_H

#include "act.h"
#include "threads.h"
#include "weights.h"

#include <stddef.h>
#include <stdint.h>

typedef struct moe_route {
    int32_t token;  /* row of the activation set */
    int32_t expert;
    float weight;
} moe_route;

typedef struct moe_gating {
    arch_gating func;
    int n_expert, n_used;
    bool renorm;            /* top-k weights divided by their sum */
    float scale;            /* then multiplied by this */
    const float *sel_bias;  /* n_expert, added to choose experts only (deepseek2's exp_probs_b); NULL: none */
    int n_group, n_group_used; /* n_group > 1: only the n_group_used groups of consecutive experts with the
                                  highest sum of their two best scores compete */
} moe_gating;

/* The gating of a MoE layer of w. */
moe_gating moe_gating_of(const model_weights *w, const layer_weights *lw);

/* Working memory of moe_select, moe_experts and ffn_swiglu, sized once for
 * up to max_tokens rows and every route they can choose. */
enum { MOE_MAX_WIDTHS = 3 }; /* expert, shared expert and dense FFN widths */

typedef struct moe_scratch {
    int64_t max_rows;  /* max(routes, tokens) */
    int n_expert;
    arch_act act;      /* of every FFN */
    float *probs;      /* n_expert: gating of one row */
    uint8_t *chosen;   /* n_expert: top-k picks (and experts of excluded groups) of one row */
    float *group_score; /* n_expert: one per expert group */
    uint8_t *group_taken;
    int32_t *order;    /* route indices grouped by expert */
    int32_t *start;    /* n_expert + 1: each expert's first entry in order */
    uint8_t *gathered; /* max_rows rows of the FFN input, in an expert's format (twice when gate and up differ) */
    float *h_gate;     /* max_rows x widest FFN */
    float *h_up;
    float *y;          /* max_rows x n_embd: one FFN output per row (per route, in grouped order) */
    int n_widths;
    act_set hidden[MOE_MAX_WIDTHS]; /* h_gate rows converted for the down matrices, per FFN width */
} moe_scratch;

hydra_status moe_scratch_init(moe_scratch *s, const model_weights *w, int64_t max_tokens);
void moe_scratch_free(moe_scratch *s); /* safe on a zeroed one */

/* logits[t][e] for the n_rows rows of x. */
void moe_router(thread_pool *pool, const layer_weights *lw, act_set *x, float *logits);

/* Routes of n_tok rows of logits, token-major, each token's in rank order.
 * Writes n_tok * g->n_used routes. */
void moe_select(const moe_gating *g, moe_scratch *s, const float *logits, int64_t n_tok, moe_route *routes);

/* out[t * out_stride ...] += weight * (down(act(gate x[t] + bg, up x[t] + bu))
 * + bd) for every route, experts and their biases (where bound) from lw's
 * stacked tensors.  Routes may be any subset,
 * in any order; the result does not depend on their order. */
void moe_experts(thread_pool *pool, moe_scratch *s, const layer_weights *lw, act_set *x, const moe_route *routes,
                 int64_t n_routes, float *out, size_t out_stride);

/* A dense FFN of the model's activation (SwiGLU or its clamped variant;
 * gate, up, down roles given) over every row of x, added to out scaled per
 * row by row_scale (NULL: 1). */
void ffn_swiglu(thread_pool *pool, moe_scratch *s, const wtensor *gate, const wtensor *up, const wtensor *down,
                act_set *x, const float *row_scale, float *out, size_t out_stride);

/* The shared expert of lw, when it has one: out[t] += sigmoid(router . x[t])
 * * shared(x[t]) (no gate tensor: scale 1).  gate_scratch holds n_rows floats. */
void moe_shared(thread_pool *pool, moe_scratch *s, const layer_weights *lw, act_set *x, float *gate_scratch,
                float *out, size_t out_stride);

#endif
