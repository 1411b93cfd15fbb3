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
    ARCH_KEYS_MOE,
};

static const arch_use tensors[] = {
    ARCH_USES_ENDS,
    ARCH_USES_QKVO,
    {W_ATTN_Q_NORM, NEED_ALWAYS, NULL},
    {W_ATTN_K_NORM, NEED_ALWAYS, NULL},
    {W_FFN_NORM, NEED_ALWAYS, NULL},
    ARCH_USES_MOE,
};

const arch_desc arch_qwen3moe = {
    .name = "qwen3moe",
    ARCH_TABLES(keys, tensors),
    .norm = NORM_RMS,
    .rope = ROPE_NEOX,
    .gating = GATING_SOFTMAX,
    .expert_weights_norm = true,
    .act = ACT_SWIGLU,
};
