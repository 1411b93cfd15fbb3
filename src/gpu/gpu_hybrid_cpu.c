/*
 * gpu_hybrid_cpu.c — the CPU side of hybrid decode (gpu_hybrid_internal.h):
 * the pass over one layer's missed routes, run as a host node of the
 * step's graph or by the flag hand-off thread.
 */
#include "gpu_hybrid_internal.h"

#include <string.h>
#include <unistd.h>

/* --- the CPU side of one layer: a host node of the step's graph.  It may
 * call no CUDA function; it reads what the split kernel wrote and writes
 * the partial sums the combine reads. */
void hy_cpu_pass(void *arg)
{
    const hy_pass *p = arg;
    gpu_hybrid *hy = p->hy;
    const uint64_t t0 = now_ns();
    const int n_miss = *(volatile int32_t *)hy->h.n_miss;
    const int64_t n_tok = hy->step_tok, n_routes = n_tok * hy->n_used;
    hybrid_count(&hy->st, (uint32_t)p->layer, n_routes, n_routes - n_miss);
    if (n_miss > 0) {
        const layer_weights *lw = &hy->w->layer[p->layer];
        const moe_route *miss = (const moe_route *)hy->h.miss;
        hybrid_count_misses(&hy->st, (uint32_t)p->layer, miss, n_miss); /* moe_experts: each expert once */
        memset(hy->h.part, 0, sizeof(float) * (size_t)(n_tok * hy->n_embd));
        act_bind(&hy->x, hy->h.x, n_tok);
        /* one token: the batch-chunked pass (same bits as moe_experts) */
        if (n_tok != 1 ||
            !hybrid_pass_token(&hy->one, hy->pool, lw, hy->w->arch->act, &hy->x, miss, n_miss, hy->h.part))
            moe_experts(hy->pool, &hy->scratch, lw, &hy->x, miss, n_miss, hy->h.part, (size_t)hy->n_embd);
    }
    hy->h.cpu_ns[p->layer] = now_ns() - t0;
}

static inline void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The flag hand-off's CPU side: answers each request number the split
 * kernel publishes with the CPU pass of its layer, then the same number as
 * the reply.  Spins while a step runs, polls every 50 us between steps. */
static void *spinner_main(void *arg)
{
    gpu_hybrid *hy = arg;
    if (hy->o.cpu_pin)
        hybrid_pin_self(&hy->cpus, 1);
    uint32_t seen = __atomic_load_n(hy->h.req, __ATOMIC_ACQUIRE);
    while (!atomic_load(&hy->stop)) {
        const uint32_t req = __atomic_load_n(hy->h.req, __ATOMIC_ACQUIRE);
        if (req != seen && !atomic_load_explicit(&hy->stalled, memory_order_relaxed)) {
            seen = req;
            const int32_t l = __atomic_load_n(hy->h.layer, __ATOMIC_ACQUIRE);
            if (l >= 0 && l < hy->n_layer)
                hy_cpu_pass(&hy->pass[l]);
            __atomic_store_n(hy->h.done, req, __ATOMIC_RELEASE);
        } else if (atomic_load_explicit(&hy->active, memory_order_relaxed)) {
            spin_pause();
        } else {
            usleep(50);
        }
    }
    return NULL;
}

void gpu_hybrid_stall_cpu_side(gpu_session *g, bool stall)
{
    if (g->hy != NULL)
        atomic_store(&g->hy->stalled, stall);
}

hydra_status hy_start_spinner(gpu_hybrid *hy)
{
    if (pthread_create(&hy->spinner, NULL, spinner_main, hy) != 0)
        return hydra_fail(HYDRA_ERR_NOMEM, "hybrid: starting the hand-off thread");
    hy->spinner_started = true;
    return HYDRA_OK;
}
