/*
 * run_hybrid.c — hydra-run's side of hybrid decode (docs/HYBRID.md): the
 * session parameters of --hybrid, --resident, --pin-file and
 * --vram-budget; the placement plan of --info --vram-budget; the counters
 * of --stats.  The plan needs the engine's internal placement (in-tree
 * tools link the static library).
 */
#include "run.h"

#include "expert_rank.h"
#include "gpu/gpu.h"
#include "placement.h"
#include "quant.h"
#include "weights.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Kept free on the device besides the plan: the CUDA context, the
 * allocator's rounding, other processes' small allocations. */
static const uint64_t DEVICE_MARGIN = 1ull << 30;

static uint64_t gib_to_bytes(double gib)
{
    return (uint64_t)(gib * (double)(1ull << 30));
}

void run_hybrid_params(const run_opts *o, hydra_session_params *sp)
{
    sp->hybrid = (hydra_hybrid_mode)o->hybrid;
    if (o->hybrid == HYDRA_HYBRID_CUDA)
        sp->backend = HYDRA_BACKEND_CUDA;
    sp->resident_fraction = o->resident;
    sp->pin_file = o->pin_file;
    sp->vram_budget = gib_to_bytes(o->vram_budget_gib);
    /* -sm / -ts / --main-gpu (docs/MULTIGPU.md) run on CUDA */
    sp->split_mode = (hydra_split_mode)o->split_mode;
    memcpy(sp->tensor_split, o->tensor_split, sizeof sp->tensor_split);
    sp->main_gpu = o->main_gpu;
    if (o->split_mode != HYDRA_SPLIT_NONE || o->main_gpu != 0 || o->n_gpu_layers > 0)
        sp->backend = HYDRA_BACKEND_CUDA;
}

/* -ngl between 0 and the layer count would be llama.cpp's partial layer
 * offload, which hydra does not do: its answer to a model larger than the
 * GPU is the hot-expert slab (--hybrid cuda), which keeps every layer's
 * attention on the GPU.  Refused with that pointer rather than silently
 * rounded either way. */
int run_check_gpu_layers(const run_opts *o, const hydra_model *m)
{
    char key[96];
    uint64_t n_layer = 0;
    snprintf(key, sizeof key, "%s.block_count", hydra_model_arch(m));
    if (o->n_gpu_layers <= 0 || hydra_model_get_u64(m, key, &n_layer) != HYDRA_OK ||
        (uint64_t)o->n_gpu_layers >= n_layer)
        return RUN_OK;
    run_error("-ngl %d: the model has %" PRIu64 " layers; hydra puts all of them on the GPU (-ngl %" PRIu64
              " or more) or none; for a model larger than the GPU use --hybrid cuda (hot experts in VRAM)",
              o->n_gpu_layers, n_layer, n_layer);
    return RUN_ERROR;
}

/* The budget to plan: --vram-budget, else on a CUDA device its free memory
 * less the margin.  0 (after saying why) when there is none. */
static uint64_t plan_budget(const run_opts *o)
{
    if (o->vram_budget_gib > 0)
        return gib_to_bytes(o->vram_budget_gib);
    uint64_t free_bytes = 0, total = 0;
    if (!hydra_cuda_available() || gpu_mem_device(&free_bytes, &total) != HYDRA_OK) {
        run_error("--info --hybrid: no CUDA device to size the plan by; give --vram-budget GiB");
        return 0;
    }
    if (free_bytes <= DEVICE_MARGIN) {
        run_error("--info --hybrid: the device has %" PRIu64 " bytes free, less than the margin of %" PRIu64,
                  free_bytes, DEVICE_MARGIN);
        return 0;
    }
    return free_bytes - DEVICE_MARGIN;
}

static hydra_status load_pins(const model_weights *w, const char *path, expert_rank *r)
{
    uint8_t *moe = malloc(w->hp.n_layer + 1);
    if (moe == NULL)
        return HYDRA_ERR_NOMEM;
    for (uint32_t l = 0; l < w->hp.n_layer; l++)
        moe[l] = w->layer[l].moe;
    hydra_status st = expert_rank_init(r, (int)w->hp.n_layer, (int)w->hp.n_expert, moe);
    free(moe);
    return st == HYDRA_OK ? expert_rank_load(r, path) : st;
}

int run_print_plan(const run_opts *o, const hydra_model *m)
{
    const uint64_t budget = plan_budget(o);
    if (budget == 0)
        return RUN_ERROR;
    model_weights w;
    expert_rank rank = {0};
    placement_plan plan = {0};
    hydra_status st = weights_bind(&w, m);
    if (st == HYDRA_OK && o->pin_file != NULL)
        st = load_pins(&w, o->pin_file, &rank);
    if (st == HYDRA_OK) {
        const uint32_t n_ctx = gen_context_size(o, m);
        const placement_input in = {.w = &w, .budget = budget, .n_ctx = n_ctx ? n_ctx : w.hp.n_ctx_train,
                                    .n_batch = hydra_session_default_params().n_batch,
                                    .kv_type = o->kv_type == HYDRA_KV_F32 ? QT_F32 : QT_F16,
                                    .rank = o->pin_file ? &rank : NULL, .stage_prefill = true};
        st = placement_make(&plan, &in);
    }
    if (st == HYDRA_OK) {
        char text[8192];
        placement_describe(&plan, text, sizeof text);
        fputs(text, stdout);
    } else {
        run_error("placement: %s", hydra_last_error());
    }
    placement_free(&plan);
    expert_rank_free(&rank);
    weights_free(&w);
    return st == HYDRA_OK ? RUN_OK : RUN_ERROR;
}

static double share(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

void run_print_hybrid_stats(const hydra_session *s, FILE *fp)
{
    hydra_hybrid_stats st;
    if (hydra_session_hybrid_stats(s, &st) != HYDRA_OK || st.mode == HYDRA_HYBRID_OFF) {
        fprintf(fp, "hybrid: off\n");
        return;
    }
    fprintf(fp, "hybrid: %" PRIu64 " of %" PRIu64 " experts resident (%" PRIu64 " slots, %" PRIu64 " bytes), "
            "decode hit rate %.1f%% (%" PRIu64 " of %" PRIu64 " lookups, %" PRIu64 " tokens), prefill %.1f%%, "
            "H2D %.0f bytes/token, %" PRIu64 " re-pins\n", st.n_resident, st.n_experts, st.n_slots, st.slab_bytes,
            share(st.hits, st.lookups), st.hits, st.lookups, st.decode_tokens,
            share(st.prefill_hits, st.prefill_lookups), st.h2d_bytes_per_token, st.repins);
    fprintf(fp, "hybrid: CPU misses: %" PRIu64 " routes computed as %" PRIu64 " expert runs (the union over each "
            "step's rows)\n", st.miss_routes, st.miss_experts);
    for (uint32_t l = 0;; l++) {
        hydra_hybrid_layer_stats ls;
        if (hydra_session_hybrid_layer_stats(s, l, &ls) != HYDRA_OK)
            break;
        if (!ls.moe)
            continue;
        fprintf(fp, "  layer %u: %d/%d resident, hit %.1f%% of %" PRIu64 ", hits %.3f ms, misses %.3f ms, "
                "overlap %.3f ms, hand-off p50 %.1f us p99 %.1f us (%" PRIu64 ")\n", l, (int)ls.n_resident,
                (int)ls.n_expert, share(ls.hits, ls.lookups), ls.lookups, (double)ls.hit_ns / 1e6,
                (double)ls.miss_ns / 1e6, (double)ls.overlap_ns / 1e6, (double)ls.handoff_p50_ns / 1e3,
                (double)ls.handoff_p99_ns / 1e3, ls.n_handoff);
    }
}
