/*
 * hybrid_pass.h — the CPU side of one decode token's missed experts in a
 * hybrid step (issue 10, docs/HYBRID.md "CPU pass"): what moe_experts
 * computes for the routes of one token, with the rows of every missed
 * expert's matrices handed out from one counter in chunks sized for the
 * whole batch instead of per matrix.  Same bits as moe_experts.
 */
#ifndef HYDRA_HYBRID_PASS_H
#define HYDRA_HYBRID_PASS_H

#include "act.h"
#include "moe.h"
#include "threads.h"
#include "weights.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hybrid_pass {
    int max_experts;       /* routes of one token: the model's k */
    int64_t ff, embd;      /* expert width, model width */
    float *h_gate, *h_up;  /* max_experts x ff */
    float *y;              /* max_experts x embd: each expert's output */
    act_set hidden;        /* the hidden rows in the down matrices' format */
} hybrid_pass;

hydra_status hybrid_pass_init(hybrid_pass *p, const model_weights *w);
void hybrid_pass_free(hybrid_pass *p); /* safe on a zeroed one */

/* out[0 .. embd) += weight * expert(x row 0) over the routes, when they are
 * one token's (token 0, distinct experts, at most max_experts) of a layer
 * with SwiGLU experts without biases; returns false, touching nothing,
 * otherwise (the caller runs moe_experts). */
bool hybrid_pass_token(hybrid_pass *p, thread_pool *pool, const layer_weights *lw, arch_act act, act_set *x,
                       const moe_route *routes, int n_routes, float *out);

#endif
