/*
 * qwen2moe.c — Qwen1.5-MoE / Qwen2-57B-A14B: biases on Q, K and V, NeoX
 * RoPE, no QK-norm, softmax router whose top-k weights are NOT
 * renormalised, SwiGLU experts, plus a shared expert whose output is scaled
 * by sigmoid(ffn_gate_inp_shexp . x) and added to the experts' sum.
 */
#include "arch.h"

static const arch_key keys[] = {
    ARCH_KEY("expert_count", n_expert, KEY_U32, true),
    ARCH_KEY("expert_used_count", n_expert_used, KEY_U32, true),
    ARCH_KEY("expert_feed_forward_length", n_ff_exp, KEY_U32, true),
    ARCH_KEY("expert_shared_feed_forward_length", n_ff_shexp, KEY_U32, true),
};

static const arch_use tensors[] = {
    {W_TOKEN_EMBD, NEED_ALWAYS, NULL},  {W_OUTPUT_NORM, NEED_ALWAYS, NULL},
    {W_OUTPUT, NEED_OPTIONAL, NULL},    {W_ATTN_NORM, NEED_ALWAYS, NULL},
    {W_ATTN_Q, NEED_ALWAYS, NULL},      {W_ATTN_K, NEED_ALWAYS, NULL},
    {W_ATTN_V, NEED_ALWAYS, NULL},      {W_ATTN_OUT, NEED_ALWAYS, NULL},
    {W_ATTN_Q_BIAS, NEED_ALWAYS, NULL}, {W_ATTN_K_BIAS, NEED_ALWAYS, NULL},
    {W_ATTN_V_BIAS, NEED_ALWAYS, NULL}, {W_FFN_NORM, NEED_ALWAYS, NULL},
    {W_MOE_ROUTER, NEED_MOE, NULL},     {W_MOE_GATE, NEED_MOE, NULL},
    {W_MOE_UP, NEED_MOE, NULL},         {W_MOE_DOWN, NEED_MOE, NULL},
    {W_SHEXP_ROUTER, NEED_MOE, NULL},   {W_SHEXP_GATE, NEED_MOE, NULL},
    {W_SHEXP_UP, NEED_MOE, NULL},       {W_SHEXP_DOWN, NEED_MOE, NULL},
};

const arch_desc arch_qwen2moe = {
    .name = "qwen2moe",
    .keys = keys,
    .n_keys = sizeof keys / sizeof keys[0],
    .tensors = tensors,
    .n_tensors = sizeof tensors / sizeof tensors[0],
    .norm = NORM_RMS,
    .rope = ROPE_NEOX,
    .gating = GATING_SOFTMAX,
    .expert_weights_norm = false,
    .act = ACT_SWIGLU,
};
