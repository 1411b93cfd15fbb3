/*
 * hybrid_setup.c — a session's split from its parameters (hybrid.h): the
 * slot counts of the fraction, then hybrid_init.
 */
#include "hybrid.h"

#include "error.h"

#include <string.h>

static hybrid_mode mode_of(hydra_hybrid_mode m)
{
    return m == HYDRA_HYBRID_CPU_SPLIT ? HYBRID_CPU_SPLIT : m == HYDRA_HYBRID_CUDA ? HYBRID_CUDA : HYBRID_OFF;
}

hydra_status hybrid_setup(hybrid_state *h, const model_weights *w, const hydra_session_params *p, int64_t n_ctx,
                          int64_t n_batch, uint32_t kv_type)
{
    (void)n_ctx;
    (void)kv_type;
    memset(h, 0, sizeof *h);
    if (!(p->resident_fraction >= 0.0 && p->resident_fraction <= 1.0))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "resident_fraction %g: must be in [0, 1]", p->resident_fraction);
    if (p->pin_file != NULL || p->vram_budget > 0)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "hybrid: pin files and VRAM budgets are not wired yet");
    const hybrid_config cfg = {.mode = mode_of(p->hybrid), .resident_fraction = p->resident_fraction,
                               .max_rows = n_batch, .count_time = true};
    return hybrid_init(h, w, &cfg);
}
