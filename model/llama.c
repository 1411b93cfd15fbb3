/*
 * llama.c — the `llama` architecture, which GGUF uses for Llama and for
 * Mixtral (expert_count > 0): RoPE with the normal (GPT-J, adjacent pairs)
 * layout that the converter produces by permuting Q/K rows, no QK-norm, no
 * biases, softmax router with renormalised top-k weights, SwiGLU experts.
 * An expert's width is feed_forward_length (there is no
 * expert_feed_forward_length key); with expert_count 0 every layer is a
 * dense SwiGLU FFN of that width.
 */
#include "arch.h"

static const arch_key keys[] = {
    ARCH_KEY("feed_forward_length", n_ff, KEY_U32, true),
    ARCH_KEY("feed_forward_length", n_ff_exp, KEY_U32, true),
};

static const arch_use tensors[] = {
    ARCH_USES_ENDS,
    ARCH_USES_QKVO,
    {W_FFN_NORM, NEED_ALWAYS, NULL},
    ARCH_USES_MOE,
    {W_FFN_GATE, NEED_DENSE, NULL},
    {W_FFN_UP, NEED_DENSE, NULL},
    {W_FFN_DOWN, NEED_DENSE, NULL},
};

const arch_desc arch_llama = {
    .name = "llama",
    ARCH_TABLES(keys, tensors),
    .norm = NORM_RMS,
    .rope = ROPE_NORMAL,
    .gating = GATING_SOFTMAX,
    .expert_weights_norm = true,
    .act = ACT_SWIGLU,
};
