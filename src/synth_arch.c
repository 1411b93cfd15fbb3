/*
 * synth_arch.c — the architecture descriptions and presets of the synthetic
 * model writer.  Key names, tensor names, shapes and which tensors are F32
 * mirror the reference files in ../shared/models (written by llama.cpp's
 * convert_hf_to_gguf.py / gguf-py); constants that are not shape parameters
 * (RoPE base, epsilon, YaRN settings) take those files' values.
 */
#include "synth_arch.h"

#include "error.h"
#include "quant.h"

#include <string.h>

/* ------------------------------------------------------------ quantities */

static const char *const qty_names[SQ_COUNT] = {
    [SQ_NONE] = "-", [SQ_ONE] = "1",
    [SQ_EMBD] = "embedding size (--embd)", [SQ_VOCAB] = "vocabulary size (--vocab)",
    [SQ_LAYERS] = "layer count (--layers)", [SQ_CTX] = "context length (--ctx)",
    [SQ_FF] = "dense FFN size (--ff)", [SQ_FF_EXP] = "expert FFN size (--ff-exp)",
    [SQ_FF_SHEXP] = "shared-expert FFN size", [SQ_FF_SHARED] = "shared experts x expert FFN size",
    [SQ_HEADS] = "head count (--heads)", [SQ_KV_HEADS] = "KV head count (--kv-heads)",
    [SQ_HEAD_DIM] = "head size (--head-dim)", [SQ_Q_DIM] = "heads x head size",
    [SQ_KV_DIM] = "KV heads x head size", [SQ_EXPERTS] = "expert count (--experts)",
    [SQ_EXPERTS_USED] = "experts per token (--experts-used)", [SQ_SHARED] = "shared expert count",
    [SQ_DENSE_LEAD] = "leading dense blocks", [SQ_GROUPS] = "expert groups",
    [SQ_GROUPS_USED] = "expert groups used", [SQ_Q_LORA] = "q_lora_rank", [SQ_KV_LORA] = "kv_lora_rank",
    [SQ_ROPE] = "RoPE dims per head", [SQ_KV_A] = "kv_lora_rank + RoPE dims",
    [SQ_QK_MLA] = "head size + RoPE dims", [SQ_QB] = "heads x (head size + RoPE dims)",
    [SQ_BLOCKS] = "layers + MTP blocks", [SQ_NEXTN] = "MTP blocks (--nextn)", [SQ_EMBD_2] = "2 x embedding size",
};

const char *synth_qty_name(synth_qty q)
{
    return q < SQ_COUNT ? qty_names[q] : "?";
}

uint64_t synth_qty_value(const synth_params *p, synth_qty q)
{
    switch (q) {
    case SQ_NONE: case SQ_ONE: return 1;
    case SQ_EMBD: return p->n_embd;
    case SQ_VOCAB: return p->n_vocab;
    case SQ_LAYERS: return p->n_layer;
    case SQ_CTX: return p->n_ctx;
    case SQ_FF: return p->n_ff;
    case SQ_FF_EXP: return p->n_ff_exp;
    case SQ_FF_SHEXP: return p->n_ff_shexp;
    case SQ_FF_SHARED: return (uint64_t)p->n_ff_exp * p->n_expert_shared;
    case SQ_HEADS: return p->n_head;
    case SQ_KV_HEADS: return p->n_head_kv;
    case SQ_HEAD_DIM: return p->head_dim;
    case SQ_Q_DIM: return (uint64_t)p->n_head * p->head_dim;
    case SQ_KV_DIM: return (uint64_t)p->n_head_kv * p->head_dim;
    case SQ_EXPERTS: return p->n_expert;
    case SQ_EXPERTS_USED: return p->n_expert_used;
    case SQ_SHARED: return p->n_expert_shared;
    case SQ_DENSE_LEAD: return p->n_dense_lead;
    case SQ_GROUPS: return p->n_expert_group;
    case SQ_GROUPS_USED: return p->n_expert_group_used;
    case SQ_Q_LORA: return p->q_lora_rank;
    case SQ_KV_LORA: return p->kv_lora_rank;
    case SQ_ROPE: return p->n_rot;
    case SQ_KV_A: return (uint64_t)p->kv_lora_rank + p->n_rot;
    case SQ_QK_MLA: return (uint64_t)p->head_dim + p->n_rot;
    case SQ_QB: return (uint64_t)p->n_head * ((uint64_t)p->head_dim + p->n_rot);
    case SQ_BLOCKS: return (uint64_t)p->n_layer + p->n_nextn;
    case SQ_NEXTN: return p->n_nextn;
    case SQ_EMBD_2: return 2 * (uint64_t)p->n_embd;
    case SQ_COUNT: break;
    }
    return 0;
}

/* ------------------------------------------------------------ keys */

#define KU(sfx, q) {sfx, SK_U32, q, 0, NULL}
#define KC(sfx, v) {sfx, SK_U32, SQ_NONE, v, NULL} /* a constant u32 */
#define KF(sfx, v) {sfx, SK_F32, SQ_NONE, v, NULL}
#define KB(sfx, v) {sfx, SK_BOOL, SQ_NONE, v, NULL}
#define KS(sfx, v) {sfx, SK_STR, SQ_NONE, 0, v}
#define N(a) a, sizeof(a) / sizeof((a)[0])

static const synth_key qwen3moe_keys[] = {
    KU("block_count", SQ_LAYERS), KU("context_length", SQ_CTX), KU("embedding_length", SQ_EMBD),
    KU("feed_forward_length", SQ_FF), KU("attention.head_count", SQ_HEADS),
    KU("attention.head_count_kv", SQ_KV_HEADS), KF("rope.freq_base", 1e6f),
    KF("attention.layer_norm_rms_epsilon", 1e-6f), KU("expert_count", SQ_EXPERTS),
    KU("expert_used_count", SQ_EXPERTS_USED), KU("attention.key_length", SQ_HEAD_DIM),
    KU("attention.value_length", SQ_HEAD_DIM), KU("expert_feed_forward_length", SQ_FF_EXP),
};

static const synth_key llama_keys[] = {
    KU("block_count", SQ_LAYERS), KU("context_length", SQ_CTX), KU("embedding_length", SQ_EMBD),
    KU("feed_forward_length", SQ_FF_EXP), KU("attention.head_count", SQ_HEADS),
    KU("attention.head_count_kv", SQ_KV_HEADS), KF("rope.freq_base", 1e6f),
    KF("attention.layer_norm_rms_epsilon", 1e-5f), KU("expert_count", SQ_EXPERTS),
    KU("expert_used_count", SQ_EXPERTS_USED), KU("vocab_size", SQ_VOCAB), KU("rope.dimension_count", SQ_HEAD_DIM),
};

static const synth_key qwen2moe_keys[] = {
    KU("block_count", SQ_LAYERS), KU("context_length", SQ_CTX), KU("embedding_length", SQ_EMBD),
    KU("feed_forward_length", SQ_FF), KU("attention.head_count", SQ_HEADS),
    KU("attention.head_count_kv", SQ_KV_HEADS), KF("rope.freq_base", 1e6f),
    KF("attention.layer_norm_rms_epsilon", 1e-6f), KU("expert_count", SQ_EXPERTS),
    KU("expert_used_count", SQ_EXPERTS_USED), KU("expert_feed_forward_length", SQ_FF_EXP),
    KU("expert_shared_feed_forward_length", SQ_FF_SHEXP),
};

/* MLA as current GGUFs store it: key/value_length describe the latent MQA
 * view (kv_lora_rank + RoPE dims / kv_lora_rank), the *_mla keys the
 * per-head sizes.  Sigmoid gating (expert_gating_func 2). */
static const synth_key deepseek2_keys[] = {
    KU("block_count", SQ_BLOCKS), KU("context_length", SQ_CTX), KU("embedding_length", SQ_EMBD),
    KU("feed_forward_length", SQ_FF), KU("attention.head_count", SQ_HEADS),
    KU("attention.head_count_kv", SQ_ONE), KS("rope.scaling.type", "yarn"), KF("rope.scaling.factor", 4.0f),
    KC("rope.scaling.original_context_length", 4096), KF("rope.scaling.yarn_beta_fast", 32.0f),
    KF("rope.scaling.yarn_beta_slow", 1.0f), KF("rope.freq_base", 1e4f),
    KF("attention.layer_norm_rms_epsilon", 1e-6f), KU("expert_count", SQ_EXPERTS),
    KU("expert_used_count", SQ_EXPERTS_USED), KU("expert_group_count", SQ_GROUPS),
    KU("expert_group_used_count", SQ_GROUPS_USED), KC("expert_gating_func", 2),
    KU("leading_dense_block_count", SQ_DENSE_LEAD), KU("vocab_size", SQ_VOCAB),
    KU("attention.q_lora_rank", SQ_Q_LORA), KU("attention.kv_lora_rank", SQ_KV_LORA),
    KU("attention.key_length", SQ_KV_A), KU("attention.value_length", SQ_KV_LORA),
    KU("attention.key_length_mla", SQ_QK_MLA), KU("attention.value_length_mla", SQ_HEAD_DIM),
    KU("expert_feed_forward_length", SQ_FF_EXP), KU("expert_shared_count", SQ_SHARED),
    KF("expert_weights_scale", 2.5f), KB("expert_weights_norm", 1), KU("rope.dimension_count", SQ_ROPE),
    KF("rope.scaling.yarn_log_multiplier", 0.1f), {"nextn_predict_layers", SK_U32_NONZERO, SQ_NEXTN, 0, NULL},
};

static const synth_key gptoss_keys[] = {
    KU("block_count", SQ_LAYERS), KU("context_length", SQ_CTX), KU("embedding_length", SQ_EMBD),
    KU("feed_forward_length", SQ_FF), KU("attention.head_count", SQ_HEADS),
    KU("attention.head_count_kv", SQ_KV_HEADS), KS("rope.scaling.type", "yarn"), KF("rope.scaling.factor", 32.0f),
    KC("rope.scaling.original_context_length", 4096), KF("rope.scaling.yarn_beta_fast", 32.0f),
    KF("rope.scaling.yarn_beta_slow", 1.0f), KF("rope.freq_base", 150000.0f),
    KF("attention.layer_norm_rms_epsilon", 1e-5f), KU("expert_count", SQ_EXPERTS),
    KU("expert_used_count", SQ_EXPERTS_USED), KU("attention.key_length", SQ_HEAD_DIM),
    KU("attention.value_length", SQ_HEAD_DIM), KC("attention.sliding_window", 128),
    KU("expert_feed_forward_length", SQ_FF_EXP),
};

/* ------------------------------------------------------------ tensors */

#define T(nm, a, b, c, role, blocks) {nm, {a, b, c}, role, blocks}
#define W(nm, a, b, c) T(nm, a, b, c, SR_WEIGHT, SB_ALL)
#define NORM(nm, a) T(nm, a, SQ_NONE, SQ_NONE, SR_NORM, SB_ALL)
#define BIAS(nm, a, b) T(nm, a, b, SQ_NONE, SR_BIAS, SB_ALL)

#define ATTN_NORM NORM("attn_norm.weight", SQ_EMBD)
#define FFN_NORM NORM("ffn_norm.weight", SQ_EMBD)
#define ATTN_Q W("attn_q.weight", SQ_EMBD, SQ_Q_DIM, SQ_NONE)
#define ATTN_K W("attn_k.weight", SQ_EMBD, SQ_KV_DIM, SQ_NONE)
#define ATTN_V W("attn_v.weight", SQ_EMBD, SQ_KV_DIM, SQ_NONE)
#define ATTN_OUT W("attn_output.weight", SQ_Q_DIM, SQ_EMBD, SQ_NONE)
#define ROUTER(blocks) T("ffn_gate_inp.weight", SQ_EMBD, SQ_EXPERTS, SQ_NONE, SR_ROUTER, blocks)
/* Merged experts: one 3-D tensor per projection, experts outermost. */
#define EXPERTS(blocks)                                                                 \
    T("ffn_gate_exps.weight", SQ_EMBD, SQ_FF_EXP, SQ_EXPERTS, SR_WEIGHT, blocks),       \
    T("ffn_up_exps.weight", SQ_EMBD, SQ_FF_EXP, SQ_EXPERTS, SR_WEIGHT, blocks),         \
    T("ffn_down_exps.weight", SQ_FF_EXP, SQ_EMBD, SQ_EXPERTS, SR_WEIGHT, blocks)

static const synth_tensor qwen3moe_tensors[] = {
    ATTN_NORM, ATTN_Q, ATTN_K, ATTN_V,
    NORM("attn_q_norm.weight", SQ_HEAD_DIM), NORM("attn_k_norm.weight", SQ_HEAD_DIM),
    ATTN_OUT, FFN_NORM, ROUTER(SB_ALL), EXPERTS(SB_ALL),
};

static const synth_tensor llama_tensors[] = {
    ATTN_NORM, ATTN_Q, ATTN_K, ATTN_V, ATTN_OUT, FFN_NORM, ROUTER(SB_ALL), EXPERTS(SB_ALL),
};

/* ffn_gate_inp_shexp is 2-D, ne {n_embd, 1}, as gguf-py writes it (llama-quantize
 * output may drop the 1). */
static const synth_tensor qwen2moe_tensors[] = {
    ATTN_NORM,
    ATTN_Q, BIAS("attn_q.bias", SQ_Q_DIM, SQ_NONE),
    ATTN_K, BIAS("attn_k.bias", SQ_KV_DIM, SQ_NONE),
    ATTN_V, BIAS("attn_v.bias", SQ_KV_DIM, SQ_NONE),
    ATTN_OUT, FFN_NORM, ROUTER(SB_ALL), EXPERTS(SB_ALL),
    T("ffn_gate_inp_shexp.weight", SQ_EMBD, SQ_ONE, SQ_NONE, SR_ROUTER, SB_ALL),
    W("ffn_gate_shexp.weight", SQ_EMBD, SQ_FF_SHEXP, SQ_NONE),
    W("ffn_up_shexp.weight", SQ_EMBD, SQ_FF_SHEXP, SQ_NONE),
    W("ffn_down_shexp.weight", SQ_FF_SHEXP, SQ_EMBD, SQ_NONE),
};

static const synth_tensor deepseek2_tensors[] = {
    ATTN_NORM,
    W("attn_q_a.weight", SQ_EMBD, SQ_Q_LORA, SQ_NONE), NORM("attn_q_a_norm.weight", SQ_Q_LORA),
    W("attn_q_b.weight", SQ_Q_LORA, SQ_QB, SQ_NONE),
    W("attn_kv_a_mqa.weight", SQ_EMBD, SQ_KV_A, SQ_NONE), NORM("attn_kv_a_norm.weight", SQ_KV_LORA),
    W("attn_k_b.weight", SQ_HEAD_DIM, SQ_KV_LORA, SQ_HEADS), W("attn_v_b.weight", SQ_KV_LORA, SQ_HEAD_DIM, SQ_HEADS),
    ATTN_OUT, FFN_NORM,
    T("ffn_gate.weight", SQ_EMBD, SQ_FF, SQ_NONE, SR_WEIGHT, SB_DENSE),
    T("ffn_up.weight", SQ_EMBD, SQ_FF, SQ_NONE, SR_WEIGHT, SB_DENSE),
    T("ffn_down.weight", SQ_FF, SQ_EMBD, SQ_NONE, SR_WEIGHT, SB_DENSE),
    ROUTER(SB_MOE),
    T("exp_probs_b.bias", SQ_EXPERTS, SQ_NONE, SQ_NONE, SR_BIAS, SB_MOE),
    EXPERTS(SB_MOE),
    T("ffn_gate_shexp.weight", SQ_EMBD, SQ_FF_SHARED, SQ_NONE, SR_WEIGHT, SB_MOE),
    T("ffn_up_shexp.weight", SQ_EMBD, SQ_FF_SHARED, SQ_NONE, SR_WEIGHT, SB_MOE),
    T("ffn_down_shexp.weight", SQ_FF_SHARED, SQ_EMBD, SQ_NONE, SR_WEIGHT, SB_MOE),
    /* MTP blocks (n_nextn): gguf-py's MODEL_TENSOR.NEXTN_*; the embedding and
     * head are shared with the main model, as in the released GGUFs */
    T("nextn.eh_proj.weight", SQ_EMBD_2, SQ_EMBD, SQ_NONE, SR_WEIGHT, SB_NEXTN),
    T("nextn.enorm.weight", SQ_EMBD, SQ_NONE, SQ_NONE, SR_NORM, SB_NEXTN),
    T("nextn.hnorm.weight", SQ_EMBD, SQ_NONE, SQ_NONE, SR_NORM, SB_NEXTN),
    T("nextn.shared_head_norm.weight", SQ_EMBD, SQ_NONE, SQ_NONE, SR_HEAD_NORM, SB_NEXTN),
};

/* Attention sinks (one logit per head), biases everywhere, and a
 * post-attention norm in place of ffn_norm. */
static const synth_tensor gptoss_tensors[] = {
    ATTN_NORM,
    ATTN_Q, BIAS("attn_q.bias", SQ_Q_DIM, SQ_NONE),
    ATTN_K, BIAS("attn_k.bias", SQ_KV_DIM, SQ_NONE),
    ATTN_V, BIAS("attn_v.bias", SQ_KV_DIM, SQ_NONE),
    ATTN_OUT, BIAS("attn_output.bias", SQ_EMBD, SQ_NONE),
    BIAS("attn_sinks.weight", SQ_HEADS, SQ_NONE),
    NORM("post_attention_norm.weight", SQ_EMBD),
    ROUTER(SB_ALL), BIAS("ffn_gate_inp.bias", SQ_EXPERTS, SQ_NONE),
    W("ffn_gate_exps.weight", SQ_EMBD, SQ_FF_EXP, SQ_EXPERTS), BIAS("ffn_gate_exps.bias", SQ_FF_EXP, SQ_EXPERTS),
    W("ffn_up_exps.weight", SQ_EMBD, SQ_FF_EXP, SQ_EXPERTS), BIAS("ffn_up_exps.bias", SQ_FF_EXP, SQ_EXPERTS),
    W("ffn_down_exps.weight", SQ_FF_EXP, SQ_EMBD, SQ_EXPERTS), BIAS("ffn_down_exps.bias", SQ_EMBD, SQ_EXPERTS),
};

static const synth_arch archs[] = {
    {"qwen3moe", "qwen3", "qwen3moe-tiny", N(qwen3moe_keys), N(qwen3moe_tensors), 0},
    {"llama", "mistral", "mixtral-tiny", N(llama_keys), N(llama_tensors), SA_HEADS_SPAN_EMBD | SA_FF_IS_EXPERT},
    {"qwen2moe", "qwen2", "qwen2moe-tiny", N(qwen2moe_keys), N(qwen2moe_tensors), SA_HEADS_SPAN_EMBD},
    {"deepseek2", "deepseek-v3", "deepseek2-tiny", N(deepseek2_keys), N(deepseek2_tensors), SA_MLA | SA_NEXTN},
    {"gpt-oss", "gpt-oss", "gptoss-tiny", N(gptoss_keys), N(gptoss_tensors), 0},
};

const synth_arch *synth_arch_find(const char *name)
{
    for (size_t i = 0; name != NULL && i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(archs[i].name, name) == 0)
            return &archs[i];
    return NULL;
}

/* ------------------------------------------------------------ presets */

typedef struct preset {
    const char *name;
    const char *summary;
    synth_params params;
} preset;

/* The *-tiny shapes are those of ../shared/models (README.md there); the
 * vocabulary is hydra's own.  qwen3-30b-a3b is Qwen3-30B-A3B's shape
 * (config.json: hidden 2048, 48 layers, 32/4 heads of 128, 128 experts
 * top-8 of 768, intermediate 6144, vocab 151936, max positions 40960).
 * qwen3moe-bench is the benchmark file of issue 4 and ../shared/ANCHORS.md
 * (Qwen3-30B-A3B's widths with 8 layers and 64 experts, Q4_K_M). */
#define QWEN3MOE_TINY                                                                                    \
    {.arch = "qwen3moe", .n_layer = 2, .n_embd = 64, .n_head = 4, .n_head_kv = 2, .head_dim = 32,     \
     .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 64, .n_ff = 192, .n_ctx = 40960, .type = QT_Q8_0,  \
     .seed = 1}

static const preset presets[] = {
    {"tiny", "qwen3moe, 2 layers, n_embd 64, 8 experts top-2, Q8_0 (the built-in default)", QWEN3MOE_TINY},
    {"qwen3moe-tiny", "qwen3moe, 2 layers, n_embd 64, 4/2 heads of 32, 8 experts top-2, Q8_0", QWEN3MOE_TINY},
    {"mixtral-tiny", "llama (Mixtral-style), 2 layers, n_embd 128, 8 experts top-2, Q8_0",
     {.arch = "llama", .n_layer = 2, .n_embd = 128, .n_head = 4, .n_head_kv = 2, .head_dim = 32, .n_expert = 8,
      .n_expert_used = 2, .n_ff_exp = 128, .n_ctx = 32768, .type = QT_Q8_0, .seed = 1}},
    {"qwen2moe-tiny", "qwen2moe, 2 layers, n_embd 64, 8 experts top-2 + shared expert, Q8_0",
     {.arch = "qwen2moe", .n_layer = 2, .n_embd = 64, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_expert = 8,
      .n_expert_used = 2, .n_ff_exp = 64, .n_ff = 256, .n_ff_shexp = 128, .n_ctx = 32768, .type = QT_Q8_0,
      .seed = 1}},
    {"deepseek2-tiny", "deepseek2 (MLA), 3 layers (1 dense), n_embd 64, 16 experts top-4 + 1 shared, Q8_0",
     {.arch = "deepseek2", .n_layer = 3, .n_embd = 64, .n_head = 4, .n_head_kv = 1, .head_dim = 32,
      .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 32, .n_ff = 128, .n_expert_shared = 1, .n_dense_lead = 1,
      .q_lora_rank = 64, .kv_lora_rank = 64, .n_rot = 16, .n_expert_group = 4, .n_expert_group_used = 2,
      .n_ctx = 16384, .type = QT_Q8_0, .seed = 1}},
    {"deepseek2-mtp-tiny", "deepseek2-tiny plus one MTP (NextN) block: nextn_predict_layers 1, blk.3.nextn.*, F32",
     {.arch = "deepseek2", .n_layer = 3, .n_embd = 64, .n_head = 4, .n_head_kv = 1, .head_dim = 32,
      .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 32, .n_ff = 128, .n_expert_shared = 1, .n_dense_lead = 1,
      .q_lora_rank = 64, .kv_lora_rank = 64, .n_rot = 16, .n_expert_group = 4, .n_expert_group_used = 2,
      .n_nextn = 1, .n_ctx = 16384, .type = QT_F32, .seed = 1}},
    {"gptoss-tiny", "gpt-oss, 4 layers, n_embd 64, 8 experts top-2, Q8_0",
     {.arch = "gpt-oss", .n_layer = 4, .n_embd = 64, .n_head = 4, .n_head_kv = 2, .head_dim = 32, .n_expert = 8,
      .n_expert_used = 2, .n_ff_exp = 64, .n_ff = 64, .n_ctx = 131072, .type = QT_Q8_0, .seed = 1}},
    {"qwen3moe-bench", "qwen3moe, issue 4's benchmark: 8 layers, n_embd 2048, 64 experts top-8 of 768, Q4_K_M "
                       "(1.85 GiB)",
     {.arch = "qwen3moe", .n_layer = 8, .n_embd = 2048, .n_head = 32, .n_head_kv = 4, .head_dim = 128,
      .n_expert = 64, .n_expert_used = 8, .n_ff_exp = 768, .n_ff = 6144, .n_vocab = 151936, .n_ctx = 40960,
      .type = QT_Q4_K, .mix = SYNTH_MIX_Q4_K_M, .seed = 1}},
    {"qwen3-30b-a3b", "qwen3moe, Qwen3-30B-A3B's shape: 48 layers, n_embd 2048, 128 experts top-8, Q8_0 (~32 GB)",
     {.arch = "qwen3moe", .n_layer = 48, .n_embd = 2048, .n_head = 32, .n_head_kv = 4, .head_dim = 128,
      .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768, .n_ff = 6144, .n_vocab = 151936, .n_ctx = 40960,
      .type = QT_Q8_0, .seed = 1}},
};

enum { N_PRESETS = sizeof presets / sizeof presets[0] };

size_t synth_preset_count(void) { return N_PRESETS; }
const char *synth_preset_name(size_t i) { return i < N_PRESETS ? presets[i].name : NULL; }
const char *synth_preset_summary(size_t i) { return i < N_PRESETS ? presets[i].summary : NULL; }

hydra_status synth_preset(const char *name, synth_params *out)
{
    for (size_t i = 0; name != NULL && i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) {
            *out = presets[i].params;
            return HYDRA_OK;
        }
    return hydra_fail(HYDRA_ERR_NOT_FOUND, "no synthetic-model preset named '%s'", name ? name : "(null)");
}

hydra_status synth_arch_preset(const char *arch, synth_params *out)
{
    const synth_arch *a = synth_arch_find(arch);
    if (a == NULL)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "synthetic models: unknown architecture '%s' (known: qwen3moe, "
                          "llama, qwen2moe, deepseek2, gpt-oss)", arch ? arch : "(null)");
    return synth_preset(a->preset, out);
}
