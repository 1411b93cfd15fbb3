/*
 * gpu_arch.h — the steps of the CUDA forward pass that only some
 * architectures take, called from hooks in gpu_forward.c:
 *
 *   gpu_arch.c  gpt-oss's attention sinks and sliding windows, FFN biases
 *               and clamped SwiGLU; expert selection with deepseek2's
 *               selection bias and groups and gpt-oss's softmax over the
 *               chosen (kernels/cuda/router.cu)
 *   gpu_mla.c   deepseek2's multi-head latent attention in latent space
 *               (kernels/cuda/mla.cu, attn_ext.cu), the twin of model/mla.c
 */
#ifndef HYDRA_GPU_ARCH_H
#define HYDRA_GPU_ARCH_H

#include "gpu_internal.h"

#include "../../kernels/cuda/kernels_arch.h"

/* --- what gpu_forward.c lends these files (defined there) */
hydra_status gpu_linear(gpu_session *g, const gk_mat *w, gpu_act *x, int64_t row0, int n_tok, float *y,
                        int64_t y_stride, const float *bias, bool accumulate, gpu_op op);
hydra_status gpu_act_quantize(gpu_session *g, gpu_act *a);
void gpu_act_bind(gpu_act *a, int64_t n, int n_rows);

/* --- gpu_arch.c */

/* Whether layer l's FFNs are plain SwiGLU without gate/up biases, so that
 * the fused gate/up matvec (silu(g) * u in one launch) computes them. */
bool gpu_ffn_plain(const gpu_session *g, int l);

/* g->h.f = act(g->h_gate + gate bias, g->h_up + up bias) over n_rows rows
 * of ff: the model's activation; experts: layer l's per-expert biases,
 * the expert of row r being routes[order ? order[r] : r] (routes with
 * expert -1, the hybrid split's misses, get no bias); else no biases. */
hydra_status gpu_ffn_activate(gpu_session *g, int l, bool experts, const gk_route *routes, const int32_t *order,
                              int64_t n_rows, int64_t ff);

/* g->y rows += layer l's expert down bias (when bound), rows as above. */
hydra_status gpu_expert_down_bias(gpu_session *g, int l, const gk_route *routes, const int32_t *order,
                                  int64_t n_rows);

/* g->routes of n tokens from g->router: gk_moe_topk where it covers the
 * gating (softmax or sigmoid, no selection bias, no groups), else
 * gk_route_select. */
hydra_status gpu_route_select(gpu_session *g, int l, const gk_gating *plain, int n);

/* Attention of a's tokens for layer l: gk_attention, or gk_attention_ext
 * where the layer has sinks or a sliding window.  a's partials fit the
 * scratch gk_attention_scratch gives for its shape. */
int gpu_attn_launch(gpu_session *g, int l, const gk_attn *a);

/* --- gpu_mla.c */

/* Buffers of the latent attention (one scratch allocation) when w's
 * architecture attends in latent space; nothing otherwise. */
hydra_status gpu_mla_init(gpu_session *g);
void gpu_mla_free(gpu_session *g);

/* Layer l's attention from g->xn (normed rows), added into g->x. */
hydra_status gpu_mla_attention(gpu_session *g, int l, const step_shape *sh);

/* Whether the CUDA backend runs w's attention hook and its shapes. */
hydra_status gpu_mla_check(const model_weights *w);

#endif
