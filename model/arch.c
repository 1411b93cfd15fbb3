/*
 * arch.c — what the architectures share: the tensor names and shapes of
 * every role (GGUF's conventional names, as llama.cpp's converter writes
 * them), the hyperparameter keys every decoder has, and the registry.
 */
#include "arch.h"

#include <string.h>

const arch_tensor_spec arch_tensor_specs[W_COUNT] = {
    [W_TOKEN_EMBD] = {"token_embd.weight", {D_EMBD, D_VOCAB, D_1}, TK_ROWS},
    [W_OUTPUT_NORM] = {"output_norm.weight", {D_EMBD, D_1, D_1}, TK_VECTOR},
    [W_OUTPUT] = {"output.weight", {D_EMBD, D_VOCAB, D_1}, TK_MATRIX},
    [W_ATTN_NORM] = {"blk.%d.attn_norm.weight", {D_EMBD, D_1, D_1}, TK_VECTOR},
    [W_ATTN_Q] = {"blk.%d.attn_q.weight", {D_EMBD, D_Q, D_1}, TK_MATRIX},
    [W_ATTN_K] = {"blk.%d.attn_k.weight", {D_EMBD, D_KV_K, D_1}, TK_MATRIX},
    [W_ATTN_V] = {"blk.%d.attn_v.weight", {D_EMBD, D_KV_V, D_1}, TK_MATRIX},
    [W_ATTN_OUT] = {"blk.%d.attn_output.weight", {D_ATTN_OUT, D_EMBD, D_1}, TK_MATRIX},
    [W_ATTN_Q_BIAS] = {"blk.%d.attn_q.bias", {D_Q, D_1, D_1}, TK_VECTOR},
    [W_ATTN_K_BIAS] = {"blk.%d.attn_k.bias", {D_KV_K, D_1, D_1}, TK_VECTOR},
    [W_ATTN_V_BIAS] = {"blk.%d.attn_v.bias", {D_KV_V, D_1, D_1}, TK_VECTOR},
    [W_ATTN_Q_NORM] = {"blk.%d.attn_q_norm.weight", {D_HEAD_K, D_1, D_1}, TK_VECTOR},
    [W_ATTN_K_NORM] = {"blk.%d.attn_k_norm.weight", {D_HEAD_K, D_1, D_1}, TK_VECTOR},
    [W_FFN_NORM] = {"blk.%d.ffn_norm.weight", {D_EMBD, D_1, D_1}, TK_VECTOR},
    [W_FFN_GATE] = {"blk.%d.ffn_gate.weight", {D_EMBD, D_FF, D_1}, TK_MATRIX},
    [W_FFN_UP] = {"blk.%d.ffn_up.weight", {D_EMBD, D_FF, D_1}, TK_MATRIX},
    [W_FFN_DOWN] = {"blk.%d.ffn_down.weight", {D_FF, D_EMBD, D_1}, TK_MATRIX},
    [W_MOE_ROUTER] = {"blk.%d.ffn_gate_inp.weight", {D_EMBD, D_EXPERT, D_1}, TK_MATRIX},
    [W_MOE_GATE] = {"blk.%d.ffn_gate_exps.weight", {D_EMBD, D_FF_EXP, D_EXPERT}, TK_MATRIX},
    [W_MOE_UP] = {"blk.%d.ffn_up_exps.weight", {D_EMBD, D_FF_EXP, D_EXPERT}, TK_MATRIX},
    [W_MOE_DOWN] = {"blk.%d.ffn_down_exps.weight", {D_FF_EXP, D_EMBD, D_EXPERT}, TK_MATRIX},
    [W_SHEXP_ROUTER] = {"blk.%d.ffn_gate_inp_shexp.weight", {D_EMBD, D_1, D_1}, TK_MATRIX},
    [W_SHEXP_GATE] = {"blk.%d.ffn_gate_shexp.weight", {D_EMBD, D_FF_SHEXP, D_1}, TK_MATRIX},
    [W_SHEXP_UP] = {"blk.%d.ffn_up_shexp.weight", {D_EMBD, D_FF_SHEXP, D_1}, TK_MATRIX},
    [W_SHEXP_DOWN] = {"blk.%d.ffn_down_shexp.weight", {D_FF_SHEXP, D_EMBD, D_1}, TK_MATRIX},
    [W_ATTN_OUT_BIAS] = {"blk.%d.attn_output.bias", {D_EMBD, D_1, D_1}, TK_VECTOR},
    [W_ATTN_SINKS] = {"blk.%d.attn_sinks.weight", {D_HEADS, D_1, D_1}, TK_VECTOR},
    [W_ATTN_Q_A] = {"blk.%d.attn_q_a.weight", {D_EMBD, D_Q_LORA, D_1}, TK_MATRIX},
    [W_ATTN_Q_A_NORM] = {"blk.%d.attn_q_a_norm.weight", {D_Q_LORA, D_1, D_1}, TK_VECTOR},
    [W_ATTN_Q_B] = {"blk.%d.attn_q_b.weight", {D_Q_LORA, D_Q, D_1}, TK_MATRIX},
    [W_ATTN_KV_A_MQA] = {"blk.%d.attn_kv_a_mqa.weight", {D_EMBD, D_KV_A, D_1}, TK_MATRIX},
    [W_ATTN_KV_A_NORM] = {"blk.%d.attn_kv_a_norm.weight", {D_KV_LORA, D_1, D_1}, TK_VECTOR},
    [W_ATTN_K_B] = {"blk.%d.attn_k_b.weight", {D_HEAD_NOPE, D_KV_LORA, D_HEADS}, TK_MATRIX},
    [W_ATTN_V_B] = {"blk.%d.attn_v_b.weight", {D_KV_LORA, D_HEAD_V, D_HEADS}, TK_MATRIX},
    [W_MOE_ROUTER_BIAS] = {"blk.%d.ffn_gate_inp.bias", {D_EXPERT, D_1, D_1}, TK_VECTOR},
    [W_MOE_PROBS_BIAS] = {"blk.%d.exp_probs_b.bias", {D_EXPERT, D_1, D_1}, TK_VECTOR},
    [W_MOE_GATE_BIAS] = {"blk.%d.ffn_gate_exps.bias", {D_FF_EXP, D_EXPERT, D_1}, TK_VECTOR},
    [W_MOE_UP_BIAS] = {"blk.%d.ffn_up_exps.bias", {D_FF_EXP, D_EXPERT, D_1}, TK_VECTOR},
    [W_MOE_DOWN_BIAS] = {"blk.%d.ffn_down_exps.bias", {D_EMBD, D_EXPERT, D_1}, TK_VECTOR},
    /* MTP (NextN) blocks as llama.cpp's gguf-py names them (MODEL_TENSOR.NEXTN_*) */
    [W_NEXTN_EH_PROJ] = {"blk.%d.nextn.eh_proj.weight", {D_EMBD_2, D_EMBD, D_1}, TK_MATRIX},
    [W_NEXTN_ENORM] = {"blk.%d.nextn.enorm.weight", {D_EMBD, D_1, D_1}, TK_VECTOR},
    [W_NEXTN_HNORM] = {"blk.%d.nextn.hnorm.weight", {D_EMBD, D_1, D_1}, TK_VECTOR},
    [W_NEXTN_SHARED_HEAD_NORM] = {"blk.%d.nextn.shared_head_norm.weight", {D_EMBD, D_1, D_1}, TK_VECTOR},
    [W_NEXTN_SHARED_HEAD_HEAD] = {"blk.%d.nextn.shared_head_head.weight", {D_EMBD, D_VOCAB, D_1}, TK_MATRIX},
    [W_NEXTN_EMBED_TOKENS] = {"blk.%d.nextn.embed_tokens.weight", {D_EMBD, D_VOCAB, D_1}, TK_ROWS},
};

const char *const arch_rope_scaling_names[] = {"none", "linear", "yarn", NULL};

/* Optional keys get their defaults in src/weights.c (hparams_defaults). */
const arch_key arch_common_keys[] = {
    ARCH_KEY("context_length", n_ctx_train, KEY_U32, true),
    ARCH_KEY("embedding_length", n_embd, KEY_U32, true),
    ARCH_KEY("block_count", n_layer, KEY_U32, true),
    ARCH_KEY("attention.head_count", n_head, KEY_U32, true),
    ARCH_KEY("attention.head_count_kv", n_head_kv, KEY_U32, false),
    ARCH_KEY("attention.key_length", head_dim_k, KEY_U32, false),
    ARCH_KEY("attention.value_length", head_dim_v, KEY_U32, false),
    ARCH_KEY("attention.layer_norm_rms_epsilon", norm_eps, KEY_F32, true),
    ARCH_KEY("rope.dimension_count", n_rot, KEY_U32, false),
    ARCH_KEY("rope.freq_base", rope_base, KEY_F32, false),
    ARCH_KEY("feed_forward_length", n_ff, KEY_U32, false),
    ARCH_KEY("expert_count", n_expert, KEY_U32, false),
    ARCH_KEY("expert_used_count", n_expert_used, KEY_U32, false),
    ARCH_KEY("expert_weights_norm", expert_weights_norm, KEY_BOOL, false),
    ARCH_KEY("expert_weights_scale", expert_weights_scale, KEY_F32, false),
    ARCH_KEY("leading_dense_block_count", n_layer_dense_lead, KEY_U32, false),
    ARCH_KEY("expert_gating_func", gating, KEY_U32, false),
    ARCH_KEY("expert_group_count", n_expert_group, KEY_U32, false),
    ARCH_KEY("expert_group_used_count", n_expert_group_used, KEY_U32, false),
    ARCH_KEY("expert_shared_count", n_expert_shared, KEY_U32, false),
    ARCH_KEY("attention.sliding_window", n_swa, KEY_U32, false),
    ARCH_KEY_ENUM("rope.scaling.type", rope_scaling, arch_rope_scaling_names),
    ARCH_KEY("rope.scaling.factor", rope_scaling_factor, KEY_F32, false),
    ARCH_KEY("rope.scaling.original_context_length", n_ctx_orig, KEY_U32, false),
    ARCH_KEY("rope.scaling.yarn_beta_fast", yarn_beta_fast, KEY_F32, false),
    ARCH_KEY("rope.scaling.yarn_beta_slow", yarn_beta_slow, KEY_F32, false),
    ARCH_KEY("rope.scaling.yarn_log_multiplier", yarn_log_mul, KEY_F32, false),
};
const size_t arch_n_common_keys = sizeof arch_common_keys / sizeof arch_common_keys[0];

static const arch_desc *const registry[] = {
    &arch_qwen3moe,
    &arch_llama,
    &arch_qwen2moe,
    &arch_deepseek2,
    &arch_gptoss,
};
enum { N_ARCHS = sizeof registry / sizeof registry[0] };

const arch_desc *arch_find(const char *name)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

const arch_desc *arch_at(size_t i)
{
    return i < N_ARCHS ? registry[i] : NULL;
}
