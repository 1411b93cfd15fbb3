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
    {W_TOKEN_EMBD, NEED_ALWAYS, NULL},  {W_OUTPUT_NORM, NEED_ALWAYS, NULL},
    {W_OUTPUT, NEED_OPTIONAL, NULL},    {W_ATTN_NORM, NEED_ALWAYS, NULL},
    {W_ATTN_Q, NEED_ALWAYS, NULL},      {W_ATTN_K, NEED_ALWAYS, NULL},
    {W_ATTN_V, NEED_ALWAYS, NULL},      {W_ATTN_OUT, NEED_ALWAYS, NULL},
    {W_FFN_NORM, NEED_ALWAYS, NULL},    {W_MOE_ROUTER, NEED_MOE, NULL},
    {W_MOE_GATE, NEED_MOE, NULL},       {W_MOE_UP, NEED_MOE, NULL},
    {W_MOE_DOWN, NEED_MOE, NULL},       {W_FFN_GATE, NEED_DENSE, NULL},
    {W_FFN_UP, NEED_DENSE, NULL},       {W_FFN_DOWN, NEED_DENSE, NULL},
};

const arch_desc arch_llama = {
    .name = "llama",
    .keys = keys,
    .n_keys = sizeof keys / sizeof keys[0],
    .tensors = tensors,
    .n_tensors = sizeof tensors / sizeof tensors[0],
    .norm = NORM_RMS,
    .rope = ROPE_NORMAL,
    .gating = GATING_SOFTMAX,
    .expert_weights_norm = true,
    .act = ACT_SWIGLU,
};
