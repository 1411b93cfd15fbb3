/*
 * gptoss.c — gpt-oss (gpt-oss-20b, gpt-oss-120b), GGUF architecture
 * "gpt-oss".  Everything runs in the generic pass; the descriptor only
 * names what is different, after llama.cpp's build for LLM_ARCH_OPENAI_MOE:
 *
 *   - biases on Q, K, V, the output projection, the router and every
 *     expert's gate, up and down;
 *   - attention sinks: one learned logit per head that joins the softmax
 *     denominator (attn_sinks.weight, F32);
 *   - sliding-window attention (attention.sliding_window, 128) on even
 *     layers, full attention on odd ones (llama.cpp: set_swa_pattern(2));
 *   - the FFN norm is stored as post_attention_norm;
 *   - the router's top-k is taken on the logits and the weights are the
 *     softmax over the chosen k (expert_gating_func 3, SOFTMAX_WEIGHT);
 *   - the experts' activation is the clamped SwiGLU (alpha 1.702, limit 7,
 *     (up + 1)); the experts are usually MXFP4;
 *   - NeoX RoPE with YaRN (rope.scaling.*), whose magnitude factor
 *     1 + 0.1 ln(factor) scales cos and sin.
 */
#include "arch.h"

static const arch_key keys[] = {
    ARCH_KEYS_MOE,
    ARCH_KEY("attention.sliding_window", n_swa, KEY_U32, true),
};

static const arch_use tensors[] = {
    ARCH_USES_ENDS,
    ARCH_USES_QKVO,
    ARCH_USES_QKV_BIAS,
    {W_ATTN_OUT_BIAS, NEED_ALWAYS, NULL},
    {W_ATTN_SINKS, NEED_ALWAYS, NULL},
    {W_FFN_NORM, NEED_ALWAYS, "blk.%d.post_attention_norm.weight"},
    {W_MOE_ROUTER, NEED_MOE, NULL},
    {W_MOE_ROUTER_BIAS, NEED_MOE, NULL},
    {W_MOE_GATE, NEED_MOE, NULL},
    {W_MOE_UP, NEED_MOE, NULL},
    {W_MOE_DOWN, NEED_MOE, NULL},
    {W_MOE_GATE_BIAS, NEED_MOE, NULL},
    {W_MOE_UP_BIAS, NEED_MOE, NULL},
    {W_MOE_DOWN_BIAS, NEED_MOE, NULL},
};

const arch_desc arch_gptoss = {
    .name = "gpt-oss",
    ARCH_TABLES(keys, tensors),
    .norm = NORM_RMS,
    .rope = ROPE_NEOX,
    .gating = GATING_SOFTMAX_WEIGHT,
    .expert_weights_norm = false,
    .act = ACT_SWIGLU_OAI,
    .swa_pattern = 2,
};
