/*
 * deepseek2.c — DeepSeek-V2/V3/R1 and Kimi-K2, GGUF architecture
 * "deepseek2", as current GGUFs store it (llama.cpp's converter since it
 * split attn_kv_b into attn_k_b / attn_v_b):
 *
 *   - multi-head latent attention (model/mla.c): the query through a
 *     low-rank bottleneck (attn_q_a -> attn_q_a_norm -> attn_q_b, or
 *     attn_q when q_lora_rank is 0), one compressed KV latent per position
 *     (attn_kv_a_mqa -> attn_kv_a_norm) plus a RoPE key shared by every
 *     head; the per-head key_length_mla / value_length_mla are the head
 *     sizes (key_length / value_length describe the latent MQA view);
 *   - the first leading_dense_block_count layers have a dense SwiGLU FFN;
 *   - MoE layers: sigmoid gating (expert_gating_func 2; V2 files without
 *     the key use softmax), exp_probs_b added for choosing experts only,
 *     expert groups (the best expert_group_used_count groups by the sum of
 *     their two best scores), top-k weights renormalised
 *     (expert_weights_norm) and scaled (expert_weights_scale), plus
 *     expert_shared_count shared experts of expert_feed_forward_length each,
 *     added without a gate;
 *   - normal (GPT-J) RoPE on the rope dimensions, YaRN when rope.scaling.*
 *     says so, with DeepSeek's magnitude factor moved into the softmax
 *     scale (below);
 *   - nextn_predict_layers multi-token-prediction (MTP/NextN) blocks, when
 *     a converter keeps them, are the last ones of block_count (llama.cpp's
 *     layout: blk.N.nextn.{eh_proj,enorm,hnorm,shared_head_head,
 *     shared_head_norm,embed_tokens} beside the block's usual tensors); the
 *     main pass runs only the blocks before them; src/weights.c binds them
 *     (eh_proj, enorm, hnorm required, the head's norm and matrix and the
 *     embedding optional, as llama.cpp loads them) and src/mtp.c drafts
 *     with the first.
 *
 * Older GGUFs with the unsplit attn_kv_b are refused with a message: their
 * key part would have to be transposed per head (and requantised) to
 * attend in latent space.
 */
#include "arch.h"

#include "error.h"

#include <math.h>

static const arch_key keys[] = {
    ARCH_KEYS_MOE,
    ARCH_KEY("attention.q_lora_rank", q_lora_rank, KEY_U32, false),
    ARCH_KEY("attention.kv_lora_rank", kv_lora_rank, KEY_U32, true),
    ARCH_KEY("attention.key_length_mla", head_dim_k, KEY_U32, false),
    ARCH_KEY("attention.value_length_mla", head_dim_v, KEY_U32, false),
    ARCH_KEY("nextn_predict_layers", n_nextn, KEY_U32, false),
};

static const arch_use tensors[] = {
    ARCH_USES_ENDS,
    {W_ATTN_Q_A, NEED_Q_LORA, NULL},
    {W_ATTN_Q_A_NORM, NEED_Q_LORA, NULL},
    {W_ATTN_Q_B, NEED_Q_LORA, NULL},
    {W_ATTN_Q, NEED_Q_FULL, NULL},
    {W_ATTN_KV_A_MQA, NEED_ALWAYS, NULL},
    {W_ATTN_KV_A_NORM, NEED_ALWAYS, NULL},
    {W_ATTN_K_B, NEED_ALWAYS, NULL},
    {W_ATTN_V_B, NEED_ALWAYS, NULL},
    {W_ATTN_OUT, NEED_ALWAYS, NULL},
    {W_FFN_NORM, NEED_ALWAYS, NULL},
    {W_FFN_GATE, NEED_DENSE, NULL},
    {W_FFN_UP, NEED_DENSE, NULL},
    {W_FFN_DOWN, NEED_DENSE, NULL},
    {W_MOE_ROUTER, NEED_MOE, NULL},
    {W_MOE_PROBS_BIAS, NEED_OPTIONAL, NULL},
    {W_MOE_GATE, NEED_MOE, NULL},
    {W_MOE_UP, NEED_MOE, NULL},
    {W_MOE_DOWN, NEED_MOE, NULL},
    {W_SHEXP_GATE, NEED_MOE, NULL},
    {W_SHEXP_UP, NEED_MOE, NULL},
    {W_SHEXP_DOWN, NEED_MOE, NULL},
    {W_NEXTN_EH_PROJ, NEED_NEXTN, NULL},
    {W_NEXTN_ENORM, NEED_NEXTN, NULL},
    {W_NEXTN_HNORM, NEED_NEXTN, NULL},
    {W_NEXTN_SHARED_HEAD_NORM, NEED_NEXTN_OPTIONAL, NULL},
    {W_NEXTN_SHARED_HEAD_HEAD, NEED_NEXTN_OPTIONAL, NULL},
    {W_NEXTN_EMBED_TOKENS, NEED_NEXTN_OPTIONAL, NULL},
};

/* A GGUF converted before the split stores blk.N.attn_kv_b and no
 * attn_k_b. */
static hydra_status refuse_unsplit_kv_b(const hydra_model *m)
{
    hydra_tensor_info ti;
    if (hydra_model_tensor_find(m, "blk.0.attn_kv_b.weight", &ti) != HYDRA_OK ||
        hydra_model_tensor_find(m, "blk.0.attn_k_b.weight", &ti) == HYDRA_OK)
        return HYDRA_OK;
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "deepseek2: this GGUF stores the unsplit attn_kv_b; hydra needs "
                      "attn_k_b and attn_v_b (convert the model again with a current llama.cpp "
                      "convert_hf_to_gguf.py, which splits it)");
}

static hydra_status deepseek2_hparams(const hydra_model *m, arch_hparams *hp)
{
    hydra_status st = refuse_unsplit_kv_b(m);
    if (st != HYDRA_OK)
        return st;
    if (hp->kv_lora_rank < 1 || hp->kv_lora_rank > (1u << 16) || hp->q_lora_rank > (1u << 16) ||
        hp->n_rot >= hp->head_dim_k)
        return hydra_fail(HYDRA_ERR_FORMAT, "deepseek2: kv_lora_rank %u, q_lora_rank %u, rope dims %u of key "
                          "length %u: need a latent and a non-RoPE part of every key", hp->kv_lora_rank,
                          hp->q_lora_rank, hp->n_rot, hp->head_dim_k);
    if (hp->n_expert_shared < 1 || (uint64_t)hp->n_expert_shared * hp->n_ff_exp > UINT32_MAX)
        return hydra_fail(HYDRA_ERR_FORMAT, "deepseek2: expert_shared_count %u (of width %u): need at least one",
                          hp->n_expert_shared, hp->n_ff_exp);
    hp->n_ff_shexp = hp->n_expert_shared * hp->n_ff_exp;
    if (hp->n_nextn >= hp->n_layer || hp->n_layer - hp->n_nextn <= hp->n_layer_dense_lead)
        return hydra_fail(HYDRA_ERR_FORMAT, "deepseek2: nextn_predict_layers %u of block_count %u (%u leading "
                          "dense): the main model needs a MoE block", hp->n_nextn, hp->n_layer,
                          hp->n_layer_dense_lead);
    hp->n_layer -= hp->n_nextn;
    /* DeepSeek's YaRN keeps cos and sin unscaled and multiplies the softmax
     * scale by mscale^2, mscale = 1 + yarn_log_multiplier * ln(factor)
     * (its yarn_get_mscale with mscale_all_dim; the converter writes 0.1 *
     * mscale_all_dim).  llama.cpp's deepseek2 graph does the same: its rope
     * attn_factor cancels ggml's 1 + 0.1 ln(factor). */
    const float ln_factor = logf(1.0f / hp->rope.freq_scale);
    const float mscale = 1.0f + hp->yarn_log_mul * ln_factor;
    hp->rope.attn_factor = 1.0f / (1.0f + 0.1f * ln_factor);
    hp->kq_scale = mscale * mscale / sqrtf((float)hp->head_dim_k);
    return HYDRA_OK;
}

const arch_desc arch_deepseek2 = {
    .name = "deepseek2",
    ARCH_TABLES(keys, tensors),
    .norm = NORM_RMS,
    .rope = ROPE_NORMAL,
    .gating = GATING_SOFTMAX,
    .expert_weights_norm = false,
    .act = ACT_SWIGLU,
    .hparams = deepseek2_hparams,
    .attention = &arch_mla_attention,
};
