/*
 * gpu_session.c — a CUDA session: checks that the model is one the kernels
 * run, uploads its weights, sizes the KV cache and the scratch for n_batch
 * tokens (one allocation each), and runs steps: token ids and position go
 * to device memory, the step is enqueued (or its captured graph replayed),
 * the logits come back, and the stream is synchronised once per step.
 */
#include "gpu_arch.h"
#include "gpu_stamps.h"

#include "../quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Attention partials of a step's tokens are computed in groups that fit
 * this much scratch (decode needs far less). */
enum { ATTN_SCRATCH_BUDGET = 256 << 20 };

/* The roles the CUDA step reads (gpu_forward.c, gpu_arch.c, gpu_mla.c); a
 * model with any other tensor bound needs a step this backend does not
 * have yet. */
static const arch_role gpu_roles[] = {
    W_TOKEN_EMBD,   W_OUTPUT_NORM,  W_OUTPUT,      W_ATTN_NORM,    W_ATTN_Q,       W_ATTN_K,
    W_ATTN_V,       W_ATTN_OUT,     W_ATTN_Q_BIAS, W_ATTN_K_BIAS,  W_ATTN_V_BIAS,  W_ATTN_OUT_BIAS,
    W_ATTN_Q_NORM,  W_ATTN_K_NORM,  W_FFN_NORM,    W_FFN_GATE,     W_FFN_UP,       W_FFN_DOWN,
    W_MOE_ROUTER,   W_MOE_GATE,     W_MOE_UP,      W_MOE_DOWN,     W_SHEXP_ROUTER, W_SHEXP_GATE,
    W_SHEXP_UP,     W_SHEXP_DOWN,   W_ATTN_SINKS,  W_ATTN_Q_A,     W_ATTN_Q_A_NORM, W_ATTN_Q_B,
    W_ATTN_KV_A_MQA, W_ATTN_KV_A_NORM, W_ATTN_K_B, W_ATTN_V_B,    W_MOE_ROUTER_BIAS, W_MOE_PROBS_BIAS,
    W_MOE_GATE_BIAS, W_MOE_UP_BIAS, W_MOE_DOWN_BIAS,
};

static bool gpu_reads(arch_role role)
{
    for (size_t i = 0; i < sizeof gpu_roles / sizeof gpu_roles[0]; i++)
        if (gpu_roles[i] == role)
            return true;
    return false;
}

static hydra_status check_roles(const model_weights *w)
{
    for (int r = 0; r < W_COUNT; r++) {
        bool bound = w->global[r].data != NULL;
        for (uint32_t l = 0; l < w->hp.n_layer; l++)
            bound |= w->layer[l].w[r].data != NULL;
        if (bound && !gpu_reads((arch_role)r))
            return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: %s: tensor %s is not supported yet", w->arch->name,
                              arch_tensor_specs[r].name);
    }
    return HYDRA_OK;
}

static hydra_status check_model(const model_weights *w)
{
    const arch_hparams *hp = &w->hp;
    const char *arch = w->arch->name;
    hydra_status st = gpu_mla_check(w);
    if (st != HYDRA_OK)
        return st;
    const bool groups_ok = hp->n_expert_group <= 1 ||
                           (hp->n_expert % hp->n_expert_group == 0 && hp->n_expert_group_used >= 1 &&
                            hp->n_expert_group_used <= hp->n_expert_group);
    if (hp->n_expert > 0 && (hp->gating < GATING_SOFTMAX || hp->gating > GATING_SOFTMAX_WEIGHT || !groups_ok))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: %s: expert gating %u with %u groups (%u used) is not "
                          "supported", arch, hp->gating, hp->n_expert_group, hp->n_expert_group_used);
    if (hp->head_dim_k > 256 || hp->head_dim_v > 256 || hp->n_embd % 32 != 0 || hp->n_expert > 4096 ||
        hp->n_expert_used > 256)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: head sizes %u/%u (at most 256), n_embd %u (a multiple "
                          "of 32), %u experts (at most 4096) top-%u", hp->head_dim_k, hp->head_dim_v, hp->n_embd,
                          hp->n_expert, hp->n_expert_used);
    const uint32_t group = hp->n_head / hp->n_head_kv;
    const bool gqa_ok = group <= GK_ATTN_MAX_GROUP && hp->head_dim_k % 8 == 0 &&
                        gk_attention_smem((int)group, (int)hp->head_dim_k) <= 48 * 1024;
    if (w->arch->attention == NULL && !gqa_ok) /* MLA attends through attn_ext.cu */
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: %u query heads per KV head (at most %d) of size %u (a "
                          "multiple of 8)", group, GK_ATTN_MAX_GROUP, hp->head_dim_k);
    return check_roles(w);
}

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
    const int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

static hydra_status alloc_kv(gpu_session *g)
{
    const arch_hparams *hp = &g->w->hp;
    g->kv_elem = g->o.kv_type == QT_F16 ? 2 : 4;
    g->k_row = (int64_t)hp->n_head_kv * hp->head_dim_k;
    g->v_row = (int64_t)hp->n_head_kv * hp->head_dim_v;
    if (g->w->arch->attention != NULL) { /* MLA: the latent row, V read from it */
        size_t k_elems, v_elems;
        g->w->arch->attention->kv_row_elems(hp, &k_elems, &v_elems);
        g->k_row = (int64_t)k_elems;
        g->v_row = (int64_t)v_elems;
    }
    /* The session's own layers only (a layer split's part: gpu_multi.c) */
    const size_t rows = (size_t)(gpu_layer_end(g) - g->o.layer0) * (size_t)g->o.n_ctx;
    carve c = {0};
    CARVE(&c, g->k_cache, rows * (size_t)g->k_row * g->kv_elem);
    CARVE(&c, g->v_cache, rows * (size_t)g->v_row * g->kv_elem);
    g->kv_bytes = c.total;
    return carve_alloc(&c, GPU_MEM_KV, &g->kv_base, "KV cache");
}

void carve_act(carve *c, gpu_act *a, int64_t rows, int64_t n)
{
    CARVE(c, a->f, sizeof(float) * (size_t)(rows * n));
    CARVE(c, a->q, (size_t)(rows * n));
    CARVE(c, a->meta, 16 * (size_t)(rows * (n / 32 + 1)));
    CARVE(c, a->h, 2 * (size_t)(rows * n));
}

/* Whether the session runs the output head, so has logits: not a layer
 * split's part before the last, nor a tensor split's part off the main GPU
 * (its view has no output norm, split_view.c); those get no logits buffer. */
static bool runs_head(const gpu_session *g)
{
    return gpu_layer_end(g) == (int)g->w->hp.n_layer && g->w->global[W_OUTPUT_NORM].data != NULL;
}

static hydra_status alloc_scratch(gpu_session *g)
{
    const arch_hparams *hp = &g->w->hp;
    const int64_t nb = g->o.n_batch, embd = hp->n_embd;
    const int64_t k = hp->n_expert_used > 0 ? hp->n_expert_used : 1;
    const int64_t routes = nb * k;
    g->ff_max = max3(hp->n_ff_exp, hp->n_ff_shexp, hp->n_ff);
    const int64_t hidden = max3(routes * hp->n_ff_exp, nb * hp->n_ff_shexp, nb * hp->n_ff);
    g->max_tiles = gk_moe_max_tiles((int)routes, (int)hp->n_expert);
    /* One token at the full context in the finest chunks (16 positions),
     * times the batch, up to the budget: a step's attention runs in token
     * groups that fit (gpu_forward.c). */
    const size_t dv = hp->head_dim_v > hp->kv_lora_rank ? hp->head_dim_v : hp->kv_lora_rank; /* MLA: the latent */
    const size_t one = (size_t)hp->n_head * (size_t)((g->o.n_ctx + 15) / 16) * (2 + dv);
    const size_t budget = ATTN_SCRATCH_BUDGET / sizeof(float);
    g->attn_scratch_floats = GK_ATTN_COUNTERS + (one * (size_t)nb < budget ? one * (size_t)nb : one > budget ? one : budget);
    carve c = {0};
    CARVE(&c, g->d_step, sizeof(gk_step) + sizeof(int32_t) * (size_t)nb); /* then d_tokens: one copy a step */
    CARVE(&c, g->x, sizeof(float) * (size_t)(nb * embd));
    carve_act(&c, &g->xn, nb, embd);
    CARVE(&c, g->q, sizeof(float) * (size_t)nb * hp->n_head * hp->head_dim_k);
    CARVE(&c, g->k, sizeof(float) * (size_t)nb * hp->n_head_kv * hp->head_dim_k);
    CARVE(&c, g->v, sizeof(float) * (size_t)nb * hp->n_head_kv * hp->head_dim_v);
    carve_act(&c, &g->att, nb, (int64_t)hp->n_head * hp->head_dim_v);
    CARVE(&c, g->attn_scratch, sizeof(float) * g->attn_scratch_floats);
    CARVE(&c, g->router, sizeof(float) * (size_t)nb * (hp->n_expert + 1));
    CARVE(&c, g->shexp_gate, sizeof(float) * (size_t)nb);
    CARVE(&c, g->routes, sizeof(gk_route) * (size_t)routes);
    CARVE(&c, g->order, sizeof(int32_t) * (size_t)routes);
    CARVE(&c, g->slot_of, sizeof(int32_t) * (size_t)routes);
    CARVE(&c, g->tiles, 4 * sizeof(int32_t) * (size_t)g->max_tiles);
    CARVE(&c, g->n_tiles, sizeof(int32_t));
    CARVE(&c, g->counter, sizeof(unsigned int));
    CARVE(&c, g->experts_sync, GK_EXPERTS_SYNC_WORDS * sizeof(unsigned int));
    const size_t route_words_bytes = sizeof(unsigned long long) * (size_t)hp->n_layer * hp->n_expert_used;
    CARVE(&c, g->route_words, route_words_bytes);
    CARVE(&c, g->h_gate, sizeof(float) * (size_t)hidden);
    CARVE(&c, g->h_up, sizeof(float) * (size_t)hidden);
    carve_act(&c, &g->h, 1, hidden);
    CARVE(&c, g->y, sizeof(float) * (size_t)((routes > nb ? routes : nb) * embd));
    if (runs_head(g))
        CARVE(&c, g->logits, sizeof(float) * (size_t)nb * hp->n_vocab);
    g->scratch_bytes = c.total;
    hydra_status st = carve_alloc(&c, GPU_MEM_SCRATCH, &g->scratch_base, "scratch");
    if (st != HYDRA_OK)
        return st;
    g->d_tokens = (int32_t *)(g->d_step + 1);
    gpuError_t e = gpuMemsetAsync(g->counter, 0, sizeof(unsigned int), g->stream); /* before any step */
    if (e == gpuSuccess)
        e = gpuMemsetAsync(g->experts_sync, 0, GK_EXPERTS_SYNC_WORDS * sizeof(unsigned int), g->stream);
    if (e == gpuSuccess)
        e = gpuMemsetAsync(g->route_words, 0, route_words_bytes, g->stream);
    if (e == gpuSuccess) /* the attention scratch's counters (kernels.h) */
        e = gpuMemsetAsync(g->attn_scratch, 0, sizeof(float) * GK_ATTN_COUNTERS, g->stream);
    if (e != gpuSuccess)
        return gpu_fail(e, "zeroing the launch and attention counters");
    carve p = {0};
    CARVE(&p, g->h_step, sizeof(gk_step) + sizeof(int32_t) * (size_t)nb); /* then h_tokens, as d_step */
    if (runs_head(g)) {
        CARVE(&p, g->h_logits, sizeof(float) * hp->n_vocab);
        CARVE(&p, g->logits_row, sizeof(float) * hp->n_vocab);
    }
    g->pinned_bytes = p.total;
    TRY_ST(carve_alloc(&p, GPU_MEM_PINNED, &g->pinned_base, "pinned staging"));
    g->h_tokens = (int32_t *)(g->h_step + 1);
    /* page-locked memory is mapped for the device (unified addressing);
     * where it is not, the head's logits come back by a copy */
    if (runs_head(g) && !g->o.tensor_part &&
        gpuHostGetDevicePointer((void **)&g->logits_row_dev, g->logits_row, 0) != gpuSuccess) {
        (void)gpuGetLastError();
        g->logits_row_dev = NULL;
    }
    return HYDRA_OK;
}

static hydra_status create_events(gpu_session *g)
{
    g->events = calloc(PROF_MAX_EVENTS, sizeof *g->events);
    if (g->events == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "profile events");
    for (int i = 0; i < PROF_MAX_EVENTS; i++) {
        gpuError_t e = gpuEventCreate(&g->events[i]);
        if (e != gpuSuccess)
            return gpu_fail(e, "creating profile events");
    }
    return HYDRA_OK;
}

hydra_status gpu_session_create(gpu_session **out, const model_weights *w, const gpu_options *o)
{
    *out = NULL;
    const char *why = NULL;
    if (!gpu_available(&why))
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "CUDA backend: %s", why);
    hydra_status st = check_model(w);
    if (st != HYDRA_OK)
        return st;
    if (o->split.mode != 0) /* several devices: gpu_multi.c makes a session per part */
        return gpu_multi_create(out, w, o);
    gpuError_t e_dev = gpuSetDevice(o->device); /* every allocation and stream below is on it */
    if (e_dev != gpuSuccess)
        return gpu_fail(e_dev, "selecting the session's device");
    gpu_session *g = calloc(1, sizeof *g);
    if (g == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "CUDA session");
    g->w = w;
    g->o = *o;
    if (g->o.profile)
        g->o.graphs = false; /* events are recorded between launches */
    gpuError_t e = gpuStreamCreateWithFlags(&g->stream, gpuStreamNonBlocking);
    st = e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "creating a stream");
    if (st == HYDRA_OK)
        st = gpu_weights_upload(&g->gw, w, g->o.hybrid, g->o.layer0, gpu_layer_end(g));
    if (st == HYDRA_OK)
        st = alloc_kv(g);
    if (st == HYDRA_OK)
        st = alloc_scratch(g);
    if (st == HYDRA_OK)
        st = gpu_mla_init(g);
    if (st == HYDRA_OK)
        st = gpu_stamps_open(g);
    if (st == HYDRA_OK && g->o.profile)
        st = create_events(g);
    if (st == HYDRA_OK && g->o.hybrid)
        st = gpu_hybrid_create(g);
    if (st != HYDRA_OK) {
        gpu_session_free(g);
        return st;
    }
    *out = g;
    return HYDRA_OK;
}

void gpu_session_free(gpu_session *g)
{
    if (g == NULL)
        return;
    if (g->multi != NULL) {
        gpu_multi_free(g);
        return;
    }
    gpuSetDevice(g->o.device);
    if (g->stream != NULL)
        gpuStreamSynchronize(g->stream);
    gpu_graph_free_all(g);
    gpu_stamps_close(g);
    gpu_hybrid_free(g);
    if (g->events != NULL)
        for (int i = 0; i < PROF_MAX_EVENTS; i++)
            if (g->events[i] != NULL)
                gpuEventDestroy(g->events[i]);
    free(g->events);
    gpu_mem_free(GPU_MEM_PINNED, g->pinned_base, g->pinned_bytes);
    gpu_mem_free(GPU_MEM_SCRATCH, g->scratch_base, g->scratch_bytes);
    gpu_mla_free(g);
    gpu_mem_free(GPU_MEM_KV, g->kv_base, g->kv_bytes);
    gpu_weights_free(&g->gw);
    if (g->stream != NULL)
        gpuStreamDestroy(g->stream);
    free(g);
}

static void profile_collect(gpu_session *g)
{
    for (int i = 1; i < g->n_ev; i++) {
        float ms = 0;
        if (gpuEventElapsedTime(&ms, g->events[i - 1], g->events[i]) == gpuSuccess)
            g->prof_ms[g->ev_op[i]] += ms;
    }
    g->prof_steps++;
}

/* A one-token step's experts take their routes from words that only
 * one-token steps write, tagged with the step's seq modulo
 * 2^GK_RW_SEQ_BITS (kernels.h's gk_route_word): after any other step (or
 * a failed one) a word may be that many steps stale and carry this step's
 * tag, so the words are first set to a tag that is not this step's. */
static hydra_status route_words_reset(gpu_session *g, int64_t n)
{
    const bool stale = n == 1 && !g->route_words_current;
    g->route_words_current = n == 1;
    if (!stale)
        return HYDRA_OK;
    const int byte = (g->step_seq & GK_RW_SEQ_MASK) == GK_RW_SEQ_MASK ? 0x00 : 0xFF; /* tags 0 and the mask */
    const size_t bytes = sizeof(unsigned long long) * (size_t)g->w->hp.n_layer * g->w->hp.n_expert_used;
    const gpuError_t e = gpuMemsetAsync(g->route_words, byte, bytes, g->stream);
    return e == gpuSuccess ? HYDRA_OK : gpu_fail(e, "resetting the route words");
}

hydra_status gpu_step_launch(gpu_session *g, int64_t pos0, const int32_t *tokens, int64_t n, bool all_rows,
                             uint64_t generation)
{
    *g->h_step = (gk_step){.pos0 = (int32_t)pos0, .n_tok = (int32_t)n, .seq = ++g->step_seq};
    TRY_ST(route_words_reset(g, n));
    memcpy(g->h_tokens, tokens, sizeof(int32_t) * (size_t)n);
    /* the descriptor and the tokens lie side by side (alloc_scratch): one copy */
    const gpuError_t e = gpuMemcpyAsync(g->d_step, g->h_step, sizeof(gk_step) + sizeof(int32_t) * (size_t)n,
                                        gpuMemcpyHostToDevice, g->stream);
    if (e != gpuSuccess)
        return gpu_fail(e, "copying the step's tokens");
    TRY_ST(gpu_stamps_arm(g, pos0, n));
    const step_shape sh = {.n_tok = n, .max_kv = gpu_context_bucket(pos0 + n, g->o.n_ctx), .all_rows = all_rows,
                           .generation = generation};
    g->n_ev = 0;
    gpu_prof_mark(g, OP_COUNT);
    hydra_status st = g->hy != NULL ? gpu_hybrid_begin_step(g, n) : HYDRA_OK;
    if (st == HYDRA_OK)
        st = g->o.graphs ? gpu_graph_run(g, &sh) : gpu_enqueue_step(g, &sh);
    if (st == HYDRA_OK && g->hy != NULL)
        st = gpu_hybrid_enqueue_tail(g);
    if (st != HYDRA_OK) {
        gpuStreamSynchronize(g->stream);
        g->route_words_current = false;
    }
    return st;
}

hydra_status gpu_step_finish(gpu_session *g, int64_t n, bool all_rows, float *logits)
{
    const uint32_t n_vocab = g->w->hp.n_vocab;
    const size_t rows = all_rows ? (size_t)n : 1;
    const bool head = runs_head(g);
    const bool in_row = head && gpu_head_to_row(g, n, all_rows); /* the head wrote logits_row */
    float *landing = in_row ? g->logits_row : gpu_logits_landing(g, all_rows, logits);
    gpuError_t e = gpuSuccess;
    if (head && !in_row)
        e = gpuMemcpyAsync(landing, g->logits, sizeof(float) * rows * n_vocab, gpuMemcpyDeviceToHost, g->stream);
    const gpuError_t e_sync = gpuStreamSynchronize(g->stream);
    if (e == gpuSuccess)
        e = e_sync;
    if (e != gpuSuccess) {
        g->route_words_current = false;
        return gpu_fail(e, "running a step");
    }
    if (head && landing != logits)
        memcpy(logits, landing, sizeof(float) * n_vocab);
    if (g->o.profile)
        profile_collect(g);
    g->stats.steps++;
    return g->hy != NULL ? gpu_hybrid_end_step(g) : HYDRA_OK;
}

hydra_status gpu_forward(gpu_session *g, int64_t pos0, const int32_t *tokens, int64_t n, bool all_rows, float *logits)
{
    if (g->multi != NULL)
        return gpu_multi_forward(g, pos0, tokens, n, all_rows, logits);
    const gpuError_t e = gpuSetDevice(g->o.device);
    if (e != gpuSuccess)
        return gpu_fail(e, "selecting the session's device");
    const hydra_status st = gpu_step_launch(g, pos0, tokens, n, all_rows, 0);
    return st == HYDRA_OK ? gpu_step_finish(g, n, all_rows, logits) : st;
}

float *gpu_session_logits_row(gpu_session *g)
{
    return g->multi != NULL ? gpu_multi_logits_row(g) : g->logits_row;
}

void gpu_session_stats(const gpu_session *g, gpu_stats *out)
{
    if (g->multi != NULL) {
        gpu_multi_stats(g, out);
        return;
    }
    *out = g->stats;
    out->graphs_cached = g->n_graphs;
}

void gpu_profile_reset(gpu_session *g)
{
    memset(g->prof_ms, 0, sizeof g->prof_ms);
    g->prof_steps = 0;
}

void gpu_profile_describe(const gpu_session *g, char *buf, size_t cap)
{
    static const char *const names[OP_COUNT] = {
#define GPU_OP_NAME_(id, name) name,
        GPU_OP_TABLE(GPU_OP_NAME_)
#undef GPU_OP_NAME_
    };
    double total = 0;
    for (int i = 0; i < OP_COUNT; i++)
        total += g->prof_ms[i];
    const double steps = g->prof_steps > 0 ? (double)g->prof_steps : 1.0;
    size_t len = (size_t)snprintf(buf, cap, "| op | us per step | share |\n| --- | ---: | ---: |\n");
    for (int i = 0; i < OP_COUNT && len < cap; i++)
        if (g->prof_ms[i] > 0)
            len += (size_t)snprintf(buf + len, cap - len, "| %s | %.1f | %.1f%% |\n", names[i],
                                    1000.0 * g->prof_ms[i] / steps, total > 0 ? 100.0 * g->prof_ms[i] / total : 0.0);
    if (len < cap)
        snprintf(buf + len, cap - len, "| total (events, graphs off) | %.1f | 100%% |\n", 1000.0 * total / steps);
}
