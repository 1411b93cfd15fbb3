/*
 * gpu_hybrid_calibrate.c — the prefill crossover of hybrid decode
 * (gpu_hybrid_internal.h): the shortest step that streams missed experts
 * instead of splitting, from a measured staging copy and CPU pass.
 */
#include "gpu_hybrid_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Seconds of the CPU pass (moe_experts on the pool, as hy_cpu_pass runs it)
 * over n_tok tokens of k routes each, token t choosing experts t*k ..
 * t*k + k - 1 (mod n_expert): best of three.  The rows are the hand-off
 * buffer's (zeros at creation; the kernels' time does not depend on the
 * values). */
static double time_cpu_pass(gpu_hybrid *hy, int l, moe_route *routes, int n_tok)
{
    const int64_t n_routes = (int64_t)n_tok * hy->n_used;
    for (int64_t r = 0; r < n_routes; r++)
        routes[r] = (moe_route){.token = (int32_t)(r / hy->n_used), .expert = (int32_t)(r % hy->n_expert),
                                .weight = 1.0f};
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        const uint64_t t0 = now_ns();
        act_bind(&hy->x, hy->h.x, n_tok);
        moe_experts(hy->pool, &hy->scratch, &hy->w->layer[l], &hy->x, routes, n_routes, hy->h.part,
                    (size_t)hy->n_embd);
        const double s = (double)(now_ns() - t0) / 1e9;
        best = s < best ? s : best;
    }
    return best;
}

/* Seconds of one MoE layer's staging copies: best of two. */
static hydra_status time_stage(gpu_hybrid *hy, int l, double *sec)
{
    *sec = 1e30;
    for (int rep = 0; rep < 2; rep++) {
        const uint64_t t0 = now_ns();
        TRY_ST(hy_stage_copy(hy, l, 0));
        TRY(gpuStreamSynchronize(hy->stage_s), "timing the staging copies");
        const double s = (double)(now_ns() - t0) / 1e9;
        *sec = s < *sec ? s : *sec;
    }
    return HYDRA_OK;
}

/* The shortest prefill step that streams: the first n (past the matvec
 * range) whose split would keep the CPU longer than staging the layer's
 * stacks takes.  Per MoE layer the split's CPU pass costs about
 * experts x t_expert + routes x t_route over the layer's missed experts,
 * fitted from a one-token pass (k experts, k routes) and an m-token pass
 * (min(E, mk) experts, mk routes); with uniform routing over the E_miss
 * experts outside the slab, n tokens touch E_miss (1 - (1 - k/E)^n) of
 * them by n k E_miss / E routes.  options.stream_min_tokens > 0 overrides
 * the choice (tests force streaming on tiny files). */
hydra_status hy_calibrate(gpu_hybrid *hy)
{
    hy->stream_min_tok = hy->o.stream_min_tokens;
    hy->c.stream_min_tokens = hy->stream_min_tok;
    if (hy->stage_base == NULL)
        return HYDRA_OK;
    const int l = hy->first_moe, k = hy->n_used, E = hy->n_expert;
    const int m = hy->max_rows < 64 ? (int)hy->max_rows : 64;
    double t_stage = 0;
    TRY_ST(time_stage(hy, l, &t_stage));
    moe_route *routes = malloc(sizeof *routes * (size_t)m * (size_t)k);
    if (routes == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: calibration routes");
    const double t1 = time_cpu_pass(hy, l, routes, 1), tm = time_cpu_pass(hy, l, routes, m);
    free(routes);
    const double d1 = k, r1 = k, dm = m * k < E ? m * k : E, rm = (double)m * k, det = d1 * rm - dm * r1;
    double te = det > 0 ? (t1 * rm - tm * r1) / det : t1 / d1, tr = det > 0 ? (d1 * tm - dm * t1) / det : 0.0;
    te = te > 0 ? te : 0;
    tr = tr > 0 ? tr : 0;
    const double e_miss = E - hybrid_resident(&hy->st, (uint32_t)l);
    int cross = (int)hy->max_rows + 1;
    for (int n = GK_MATVEC_MAX_TOK + 1; n <= hy->max_rows; n++) {
        const double touched = e_miss * (1.0 - pow(1.0 - (double)k / E, n)), routes_miss = (double)n * k * e_miss / E;
        if (touched * te + routes_miss * tr >= t_stage) {
            cross = n;
            break;
        }
    }
    if (hy->stream_min_tok <= 0)
        hy->stream_min_tok = cross;
    size_t layer_bytes = 0;
    for (int p = 0; p < N_PARTS; p++)
        layer_bytes += hy_stack_bytes(hy, l, p);
    hy->c.stream_min_tokens = hy->stream_min_tok;
    hy->c.stage_gbps = (double)layer_bytes / t_stage / 1e9;
    hy->c.cpu_expert_us = te * 1e6;
    hy->c.cpu_route_us = tr * 1e6;
    if (hy->o.verbose)
        fprintf(stderr, "hybrid: prefill crossover %d tokens%s (measured %d): staging %.1f MiB per MoE layer at %.1f "
                "GB/s (%.2f ms); CPU pass %.1f us per expert + %.2f us per route; %.0f of %d experts of layer %d "
                "outside the slab\n", hy->stream_min_tok, hy->o.stream_min_tokens > 0 ? " (set)" : "", cross,
                layer_bytes / 1048576.0, hy->c.stage_gbps, t_stage * 1e3, hy->c.cpu_expert_us, hy->c.cpu_route_us,
                e_miss, E, l);
    return HYDRA_OK;
}
