/*
 * qwen2moe.c — Qwen1.5-MoE / Qwen2-57B-A14B: biases on Q, K and V, NeoX
 * RoPE, no QK-norm, softmax router whose top-k weights are NOT
 * renormalised, SwiGLU experts, plus a shared expert whose output is scaled
 * by sigmoid(ffn_gate_inp_shexp . x) and added to the experts' sum.
 */
#include "arch.h"

static const arch_key keys[] = {
    ARCH_KEYS_MOE,
    ARCH_KEY("expert_shared_feed_forward_length", n_ff_shexp, KEY_U32, true),
};

static const arch_use tensors[] = {
    ARCH_USES_ENDS,
    ARCH_USES_QKVO,
    ARCH_USES_QKV_BIAS,
    {W_FFN_NORM, NEED_ALWAYS, NULL},
    ARCH_USES_MOE,
    {W_SHEXP_ROUTER, NEED_MOE, NULL},
    {W_SHEXP_GATE, NEED_MOE, NULL},
    {W_SHEXP_UP, NEED_MOE, NULL},
    {W_SHEXP_DOWN, NEED_MOE, NULL},
};

const arch_desc arch_qwen2moe = {
    .name = "qwen2moe",
    ARCH_TABLES(keys, tensors),
    .norm = NORM_RMS,
    .rope = ROPE_NEOX,
    .gating = GATING_SOFTMAX,
    .expert_weights_norm = false,
    .act = ACT_SWIGLU,
};
