/*
 * hybrid_pass.h — the CPU side of one decode token's missed experts in a
 * hybrid step (issue 10, docs/HYBRID.md "CPU pass"): what moe_experts
 * computes for the routes of one token, with the rows of every missed
 * expert's matrices handed out from one counter in chunks sized for the
 * whole batch instead of per matrix.  Same bits as moe_experts.  And where
 * the pass's threads may be pinned.
 */
#ifndef HYDRA_HYBRID_PASS_H
#define HYDRA_HYBRID_PASS_H

#include "act.h"
#include "moe.h"
#include "threads.h"
#include "weights.h"

#include <sched.h>
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

/* --- where the pass's threads run (gpu_options.cpu_pin) */

typedef struct hybrid_cpus {
    int cpu[CPU_SETSIZE];
    int n;
} hybrid_cpus;

/* The CPUs this process may run on, the first of each physical core (by
 * package and core id, from sysfs) before any second hardware thread. */
void hybrid_cpus_find(hybrid_cpus *c);
/* Pins thread i >= 1 of the pool to CPU i + 1 of the order (wrapping):
 * CPU 0 of the order stays for the application's thread and the driver,
 * CPU 1 for the flag thread; thread 0 is whoever calls a region. */
void hybrid_pin_pool(thread_pool *pool, const hybrid_cpus *c);
/* Pins the calling thread to CPU `at` of the order (wrapping). */
void hybrid_pin_self(const hybrid_cpus *c, int at);

#endif
