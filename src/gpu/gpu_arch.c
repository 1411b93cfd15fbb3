/*
 * gpu_arch.c — the CUDA twins of what src/moe.c and src/forward.c do for
 * gpt-oss and deepseek2 beyond the plain path: per-expert FFN biases, the
 * clamped SwiGLU, expert selection with every gating, and attention with
 * sinks and sliding windows.  gpu_forward.c calls these at its hooks.
 */
#include "gpu_arch.h"

/* gpt-oss's clamped SwiGLU constants (src/moe.c: llama.cpp's
 * LLM_FFN_SWIGLU_OAI_MOE). */
static const float oai_alpha = 1.702f, oai_limit = 7.0f;

static const float *layer_vec(const gpu_session *g, int l, arch_role role)
{
    return gw_vec(gw_at(&g->gw, l, role));
}

bool gpu_ffn_plain(const gpu_session *g, int l)
{
    return g->w->arch->act == ACT_SWIGLU && layer_vec(g, l, W_MOE_GATE_BIAS) == NULL &&
           layer_vec(g, l, W_MOE_UP_BIAS) == NULL;
}

hydra_status gpu_ffn_activate(gpu_session *g, int l, bool experts, const gk_route *routes, const int32_t *order,
                              int64_t n_rows, int64_t ff)
{
    const gk_glu a = {.gate = g->h_gate, .up = g->h_up, .h = g->h.f, .n_rows = n_rows, .ff = ff,
                      .gate_bias = experts ? layer_vec(g, l, W_MOE_GATE_BIAS) : NULL,
                      .up_bias = experts ? layer_vec(g, l, W_MOE_UP_BIAS) : NULL, .routes = routes,
                      .order = order, .oai = g->w->arch->act == ACT_SWIGLU_OAI, .alpha = oai_alpha,
                      .limit = oai_limit};
    const int e = gk_glu_act(g->stream, &a);
    return e == 0 ? HYDRA_OK : gpu_fail((gpuError_t)e, "FFN activation");
}

hydra_status gpu_expert_down_bias(gpu_session *g, int l, const gk_route *routes, const int32_t *order,
                                  int64_t n_rows)
{
    const float *bias = layer_vec(g, l, W_MOE_DOWN_BIAS);
    if (bias == NULL)
        return HYDRA_OK;
    const int e = gk_route_bias(g->stream, g->y, n_rows, g->w->hp.n_embd, bias, routes, order);
    return e == 0 ? HYDRA_OK : gpu_fail((gpuError_t)e, "expert down bias");
}

hydra_status gpu_route_select(gpu_session *g, int l, const gk_gating *plain, int n)
{
    const arch_hparams *hp = &g->w->hp;
    const gk_select sel = {.n_expert = (int)hp->n_expert, .n_used = (int)hp->n_expert_used, .func = (int)hp->gating,
                           .renorm = hp->expert_weights_norm, .scale = hp->expert_weights_scale,
                           .sel_bias = layer_vec(g, l, W_MOE_PROBS_BIAS), .n_group = (int)hp->n_expert_group,
                           .n_group_used = (int)hp->n_expert_group_used};
    const bool simple = (hp->gating == GATING_SOFTMAX || hp->gating == GATING_SIGMOID) && sel.sel_bias == NULL &&
                        hp->n_expert_group <= 1;
    const int e = simple ? gk_moe_topk(g->stream, plain, g->router, n, g->routes)
                         : gk_route_select(g->stream, &sel, g->router, n, g->routes);
    return e == 0 ? HYDRA_OK : gpu_fail((gpuError_t)e, "expert selection");
}

int gpu_attn_launch(gpu_session *g, int l, const gk_attn *a)
{
    const gk_attn_ext x = {.sinks = layer_vec(g, l, W_ATTN_SINKS), .window = (int)g->w->layer[l].window};
    if (x.sinks == NULL && x.window == 0)
        return gk_attention(g->stream, a, g->d_step);
    /* the caller sized a's token group for gk_attention's partials, never
     * fewer than these (kernels_arch.h); checked all the same */
    if (gk_attention_ext_scratch(a->n_tok, a->n_head, a->head_dim_v, a->max_kv) > g->attn_scratch_floats)
        return (int)gpuErrorInvalidValue;
    return gk_attention_ext(g->stream, a, &x, g->d_step);
}
