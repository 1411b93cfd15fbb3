/*
 * qwen3moe.c — Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): per-head RMSNorm
 * on Q and K before NeoX RoPE, no biases, softmax router with the top-k
 * weights renormalised (the converter's norm_topk_prob, which llama.cpp
 * always applies for this architecture), SwiGLU experts, no shared expert.
 * head_dim is its own key (key_length), so n_head * head_dim may differ
 * from n_embd.
 */
#include "arch.h"

static const arch_key keys[] = {
    ARCH_KEY("expert_count", n_expert, KEY_U32, true),
    ARCH_KEY("expert_used_count", n_expert_used, KEY_U32, true),
    ARCH_KEY("expert_feed_forward_length", n_ff_exp, KEY_U32, true),
};

static const arch_use tensors[] = {
    {W_TOKEN_EMBD, NEED_ALWAYS, NULL},   {W_OUTPUT_NORM, NEED_ALWAYS, NULL},
    {W_OUTPUT, NEED_OPTIONAL, NULL},     {W_ATTN_NORM, NEED_ALWAYS, NULL},
    {W_ATTN_Q, NEED_ALWAYS, NULL},       {W_ATTN_K, NEED_ALWAYS, NULL},
    {W_ATTN_V, NEED_ALWAYS, NULL},       {W_ATTN_OUT, NEED_ALWAYS, NULL},
    {W_ATTN_Q_NORM, NEED_ALWAYS, NULL},  {W_ATTN_K_NORM, NEED_ALWAYS, NULL},
    {W_FFN_NORM, NEED_ALWAYS, NULL},     {W_MOE_ROUTER, NEED_MOE, NULL},
    {W_MOE_GATE, NEED_MOE, NULL},        {W_MOE_UP, NEED_MOE, NULL},
    {W_MOE_DOWN, NEED_MOE, NULL},
};

const arch_desc arch_qwen3moe = {
    .name = "qwen3moe",
    .keys = keys,
    .n_keys = sizeof keys / sizeof keys[0],
    .tensors = tensors,
    .n_tensors = sizeof tensors / sizeof tensors[0],
    .norm = NORM_RMS,
    .rope = ROPE_NEOX,
    .gating = GATING_SOFTMAX,
    .expert_weights_norm = true,
    .act = ACT_SWIGLU,
};
