/*
 * weights.c — binds a model's tensors by its architecture descriptor:
 * read the hyperparameter keys, fill the defaults, check the values are
 * sane, then find every tensor the descriptor needs and check its shape
 * against the hyperparameters and its type against the type table.  After
 * weights_bind succeeds the forward pass may trust every size it reads.
 */
#include "weights.h"

#include "error.h"
#include "quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds on hyperparameters that no tensor shape pins down, far above
 * any released model, so that sizes computed from them cannot overflow. */
enum {
    MAX_HEADS = 1 << 14,
    MAX_HEAD_DIM = 1 << 14,
    MAX_EXPERTS = 1 << 16,
    MAX_LAYERS = 1 << 16,
};

static hydra_status read_enum(const char *arch, const char *key, const char *value, const char *const *names,
                              uint32_t *field)
{
    for (uint32_t i = 0; names[i] != NULL; i++)
        if (strcmp(names[i], value) == 0) {
            *field = i;
            return HYDRA_OK;
        }
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "%s: key %s is '%s', which hydra does not support", arch, key, value);
}

static hydra_status read_key(const hydra_model *m, const char *arch, const arch_key *k, arch_hparams *hp)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, k->suffix);
    void *field = (char *)hp + k->offset;
    hydra_status st = HYDRA_OK;
    if (k->kind == KEY_U32) {
        uint64_t v = 0;
        st = hydra_model_get_u64(m, key, &v);
        if (st == HYDRA_OK && v > UINT32_MAX)
            st = HYDRA_ERR_RANGE;
        if (st == HYDRA_OK)
            *(uint32_t *)field = (uint32_t)v;
    } else if (k->kind == KEY_F32) {
        double v = 0;
        st = hydra_model_get_f64(m, key, &v);
        if (st == HYDRA_OK)
            *(float *)field = (float)v;
    } else if (k->kind == KEY_ENUM) {
        const char *v = NULL;
        st = hydra_model_get_str(m, key, &v, NULL);
        if (st == HYDRA_OK)
            return read_enum(arch, key, v, k->names, (uint32_t *)field);
    } else {
        st = hydra_model_get_bool(m, key, (bool *)field);
    }
    if (st == HYDRA_ERR_NOT_FOUND && !k->required)
        return HYDRA_OK;
    if (st == HYDRA_ERR_NOT_FOUND)
        return hydra_fail(HYDRA_ERR_FORMAT, "%s: required key %s is missing", arch, key);
    if (st != HYDRA_OK)
        return hydra_fail(st, "%s: key %s: %s", arch, key, hydra_strerror(st));
    return HYDRA_OK;
}

static hydra_status read_keys(const hydra_model *m, const arch_desc *a, const arch_key *keys, size_t n,
                              arch_hparams *hp)
{
    for (size_t i = 0; i < n; i++) {
        hydra_status st = read_key(m, a->name, &keys[i], hp);
        if (st != HYDRA_OK)
            return st;
    }
    return HYDRA_OK;
}

/* The vocabulary is the tokenizer's when the file has one, so that token ids
 * and logit rows agree; else the embedding's row count. */
static uint32_t vocab_size(const hydra_model *m)
{
    hydra_value_type et;
    size_t n = 0;
    if (hydra_model_get_arr(m, "tokenizer.ggml.tokens", &et, &n) == HYDRA_OK && n <= UINT32_MAX)
        return (uint32_t)n;
    hydra_tensor_info ti;
    if (hydra_model_tensor_find(m, arch_tensor_specs[W_TOKEN_EMBD].name, &ti) == HYDRA_OK && ti.ne[1] <= UINT32_MAX)
        return (uint32_t)ti.ne[1];
    return 0;
}

/* Defaults follow llama.cpp's: KV heads = heads, head size = n_embd / heads,
 * RoPE over the whole head, base 10000, YaRN's original context the
 * training context. */
static void fill_defaults(arch_hparams *hp)
{
    if (hp->n_ctx_orig == 0)
        hp->n_ctx_orig = hp->n_ctx_train;
    if (hp->n_head_kv == 0)
        hp->n_head_kv = hp->n_head;
    if (hp->head_dim_k == 0 && hp->n_head != 0)
        hp->head_dim_k = hp->n_embd / hp->n_head;
    if (hp->head_dim_v == 0 && hp->n_head != 0)
        hp->head_dim_v = hp->n_embd / hp->n_head;
    if (hp->n_rot == 0)
        hp->n_rot = hp->head_dim_k;
}

#define CHECK_HP(cond, ...)                                                   \
    do {                                                                      \
        if (!(cond))                                                          \
            return hydra_fail(HYDRA_ERR_FORMAT, __VA_ARGS__);                 \
    } while (0)

static hydra_status check_groups(const char *arch, const arch_hparams *hp);

static hydra_status check_hparams(const char *arch, const arch_hparams *hp)
{
    CHECK_HP(hp->n_embd >= 1 && hp->n_layer >= 1 && hp->n_layer <= MAX_LAYERS, "%s: embedding_length %u, block_count %u",
             arch, hp->n_embd, hp->n_layer);
    CHECK_HP(hp->n_ctx_train >= 1, "%s: context_length is 0", arch);
    CHECK_HP(hp->n_vocab >= 1, "%s: the vocabulary is empty", arch);
    CHECK_HP(hp->n_head >= 1 && hp->n_head <= MAX_HEADS && hp->n_head_kv >= 1 && hp->n_head % hp->n_head_kv == 0,
             "%s: head_count %u is not a multiple of head_count_kv %u", arch, hp->n_head, hp->n_head_kv);
    CHECK_HP(hp->head_dim_k >= 1 && hp->head_dim_k <= MAX_HEAD_DIM && hp->head_dim_v >= 1 &&
                 hp->head_dim_v <= MAX_HEAD_DIM,
             "%s: head sizes %u (key) / %u (value) out of range", arch, hp->head_dim_k, hp->head_dim_v);
    CHECK_HP(hp->n_rot >= 2 && hp->n_rot % 2 == 0 && hp->n_rot <= hp->head_dim_k,
             "%s: rope.dimension_count %u must be even and at most the head size %u", arch, hp->n_rot,
             hp->head_dim_k);
    CHECK_HP(isfinite(hp->rope_base) && hp->rope_base > 0, "%s: rope.freq_base %g", arch, hp->rope_base);
    CHECK_HP(isfinite(hp->norm_eps) && hp->norm_eps >= 0, "%s: layer_norm_rms_epsilon %g", arch, hp->norm_eps);
    CHECK_HP(isfinite(hp->expert_weights_scale), "%s: expert_weights_scale is not finite", arch);
    CHECK_HP(hp->n_expert <= MAX_EXPERTS, "%s: expert_count %u", arch, hp->n_expert);
    CHECK_HP(hp->n_expert == 0 || (hp->n_expert_used >= 1 && hp->n_expert_used <= hp->n_expert),
             "%s: expert_used_count %u must be in [1, expert_count %u]", arch, hp->n_expert_used, hp->n_expert);
    CHECK_HP(hp->n_layer_dense_lead <= hp->n_layer, "%s: leading_dense_block_count %u > block_count %u", arch,
             hp->n_layer_dense_lead, hp->n_layer);
    CHECK_HP(hp->gating >= GATING_SOFTMAX && hp->gating <= GATING_SOFTMAX_WEIGHT,
             "%s: expert_gating_func %u: hydra knows 1 (softmax), 2 (sigmoid), 3 (softmax of the chosen)", arch,
             hp->gating);
    return check_groups(arch, hp);
}

/* Groups split the experts evenly, and the chosen groups hold at least
 * top-k experts (else top-k would have to pick excluded ones). */
static hydra_status check_groups(const char *arch, const arch_hparams *hp)
{
    if (hp->n_expert_group <= 1)
        return HYDRA_OK;
    CHECK_HP(hp->n_expert % hp->n_expert_group == 0 && hp->n_expert_group_used >= 1 &&
                 hp->n_expert_group_used <= hp->n_expert_group &&
                 hp->n_expert_used <= hp->n_expert_group_used * (hp->n_expert / hp->n_expert_group),
             "%s: %u experts in %u groups, %u groups used, top-%u: groups must split the experts evenly and the "
             "used groups hold at least top-k experts", arch, hp->n_expert, hp->n_expert_group,
             hp->n_expert_group_used, hp->n_expert_used);
    return HYDRA_OK;
}

/* RoPE as llama.cpp sets it up from rope.scaling.*: linear and YaRN divide
 * the angles by the factor (freq_scale); YaRN adds the ramp between
 * corr_low and corr_high and its magnitude factor (ops.h). */
static hydra_status derive_rope(const char *arch, arch_hparams *hp)
{
    CHECK_HP(isfinite(hp->rope_scaling_factor) && hp->rope_scaling_factor >= 0 && isfinite(hp->yarn_beta_fast) &&
                 isfinite(hp->yarn_beta_slow) && hp->yarn_beta_fast > 0 && hp->yarn_beta_slow > 0 &&
                 isfinite(hp->yarn_log_mul) && hp->n_ctx_orig >= 1,
             "%s: rope.scaling keys out of range (factor %g, beta_fast %g, beta_slow %g, log multiplier %g, "
             "original context %u)", arch, hp->rope_scaling_factor, hp->yarn_beta_fast, hp->yarn_beta_slow,
             hp->yarn_log_mul, hp->n_ctx_orig);
    hp->rope = op_rope_plain((int)hp->n_rot, hp->rope_base);
    if (hp->rope_scaling != ROPE_SCALING_NONE && hp->rope_scaling_factor > 0)
        hp->rope.freq_scale = 1.0f / hp->rope_scaling_factor;
    if (hp->rope_scaling == ROPE_SCALING_YARN) {
        hp->rope.ext_factor = 1.0f;
        op_rope_yarn_corr(&hp->rope, hp->n_ctx_orig, hp->yarn_beta_fast, hp->yarn_beta_slow);
    }
    hp->kq_scale = 1.0f / sqrtf((float)hp->head_dim_k);
    return HYDRA_OK;
}

static void resolve_dims(const arch_hparams *hp, uint64_t dims[D_COUNT])
{
    dims[D_1] = 1;
    dims[D_EMBD] = hp->n_embd;
    dims[D_VOCAB] = hp->n_vocab;
    dims[D_Q] = (uint64_t)hp->n_head * hp->head_dim_k;
    dims[D_KV_K] = (uint64_t)hp->n_head_kv * hp->head_dim_k;
    dims[D_KV_V] = (uint64_t)hp->n_head_kv * hp->head_dim_v;
    dims[D_ATTN_OUT] = (uint64_t)hp->n_head * hp->head_dim_v;
    dims[D_HEAD_K] = hp->head_dim_k;
    dims[D_FF] = hp->n_ff;
    dims[D_EXPERT] = hp->n_expert;
    dims[D_FF_EXP] = hp->n_ff_exp;
    dims[D_FF_SHEXP] = hp->n_ff_shexp;
    dims[D_HEADS] = hp->n_head;
    dims[D_Q_LORA] = hp->q_lora_rank;
    dims[D_KV_LORA] = hp->kv_lora_rank;
    dims[D_KV_A] = (uint64_t)hp->kv_lora_rank + hp->n_rot;
    dims[D_HEAD_NOPE] = hp->head_dim_k - hp->n_rot;
    dims[D_HEAD_V] = hp->head_dim_v;
    dims[D_EMBD_2] = 2 * (uint64_t)hp->n_embd;
}

/* Whether the engine can compute with a tensor of this type in this role:
 * the type table decides for weights (quant_require), and a matrix also
 * needs its activations convertible to the format its dot product reads. */
static hydra_status check_type(const char *name, const wtensor *t, arch_tensor_kind kind)
{
    const quant_traits *q = quant_traits_of(t->type);
    if (kind == TK_VECTOR && t->type != QT_F32)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "tensor %s has type %s; gains and biases must be F32", name,
                          q ? q->name : "?");
    if (kind == TK_VECTOR)
        return HYDRA_OK;
    hydra_status st = quant_require(t->type, name);
    if (st != HYDRA_OK || kind != TK_MATRIX)
        return st;
    const quant_traits *act = quant_traits_of(q->vec_dot_type);
    if (act == NULL || act->from_float == NULL || t->ne[0] % act->block_size != 0)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "tensor %s (%s): activations of %lld values cannot be converted to %s",
                          name, q->name, (long long)t->ne[0], act ? act->name : "?");
    return HYDRA_OK;
}

static bool needed(arch_need need, bool moe_layer, bool mtp_block, const arch_hparams *hp)
{
    return need == NEED_ALWAYS || (need == NEED_MOE && moe_layer) || (need == NEED_DENSE && !moe_layer) ||
           (need == NEED_Q_LORA && hp->q_lora_rank > 0) || (need == NEED_Q_FULL && hp->q_lora_rank == 0) ||
           (need == NEED_NEXTN && mtp_block);
}

static bool applies(arch_need need, bool moe_layer, bool mtp_block, const arch_hparams *hp)
{
    return needed(need, moe_layer, mtp_block, hp) || need == NEED_OPTIONAL ||
           (need == NEED_NEXTN_OPTIONAL && mtp_block);
}

/* llama.cpp's set_swa_pattern: of every swa_pattern layers, all but the
 * last slide. */
static uint32_t layer_window(const arch_desc *a, const arch_hparams *hp, uint32_t l)
{
    if (a->swa_pattern == 0 || hp->n_swa == 0)
        return 0;
    return l % a->swa_pattern < a->swa_pattern - 1 ? hp->n_swa : 0;
}

/* Finds one tensor and checks its shape; *out stays unbound when an optional
 * tensor is absent. */
static hydra_status bind_one(const hydra_model *m, const char *arch, const arch_use *use, int layer,
                             const uint64_t dims[D_COUNT], bool required, wtensor *out)
{
    const arch_tensor_spec *spec = &arch_tensor_specs[use->role];
    char name[160];
    snprintf(name, sizeof name, use->name ? use->name : spec->name, layer);
    const uint64_t want[3] = {dims[spec->shape[0]], dims[spec->shape[1]], dims[spec->shape[2]]};
    hydra_tensor_info ti;
    if (hydra_model_tensor_find(m, name, &ti) != HYDRA_OK) {
        if (!required)
            return HYDRA_OK;
        return hydra_fail(HYDRA_ERR_FORMAT, "%s: tensor %s {%llu, %llu, %llu} is missing", arch, name,
                          (unsigned long long)want[0], (unsigned long long)want[1], (unsigned long long)want[2]);
    }
    if (ti.ne[0] != want[0] || ti.ne[1] != want[1] || ti.ne[2] != want[2] || ti.ne[3] != 1)
        return hydra_fail(HYDRA_ERR_FORMAT, "%s: tensor %s has shape {%llu, %llu, %llu, %llu}, expected {%llu, %llu, %llu}",
                          arch, name, (unsigned long long)ti.ne[0], (unsigned long long)ti.ne[1],
                          (unsigned long long)ti.ne[2], (unsigned long long)ti.ne[3], (unsigned long long)want[0],
                          (unsigned long long)want[1], (unsigned long long)want[2]);
    /* Kernels read F32 gains and F16/F32 rows as typed arrays; a file may
     * declare general.alignment 1 or 2. */
    if ((uintptr_t)ti.data % sizeof(float) != 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "%s: tensor %s: data at file offset %llu is not 4-byte aligned", arch, name,
                          (unsigned long long)ti.file_offset);
    uint64_t row_bytes = 0;
    if (!quant_row_bytes(ti.type, ti.ne[0], &row_bytes))
        return hydra_fail(HYDRA_ERR_FORMAT, "%s: tensor %s: rows of %llu values do not fit type %s", arch, name,
                          (unsigned long long)ti.ne[0], ti.type_name);
    *out = (wtensor){.data = ti.data, .type = ti.type, .ne = {(int64_t)ti.ne[0], (int64_t)ti.ne[1], (int64_t)ti.ne[2]},
                     .row_bytes = (size_t)row_bytes, .mat_bytes = (size_t)(row_bytes * ti.ne[1])};
    return check_type(name, out, spec->kind);
}

/* One block's tensors: block `block` of the file, an MTP block's nextn.*
 * roles too. */
static hydra_status bind_layer(const hydra_model *m, const model_weights *w, const uint64_t dims[D_COUNT],
                               uint32_t block, bool mtp_block, layer_weights *lw)
{
    const arch_desc *a = w->arch;
    for (size_t i = 0; i < a->n_tensors; i++) {
        const arch_use *use = &a->tensors[i];
        if (!arch_role_per_layer(use->role) || !applies(use->need, lw->moe, mtp_block, &w->hp))
            continue;
        hydra_status st = bind_one(m, a->name, use, (int)block, dims, needed(use->need, lw->moe, mtp_block, &w->hp),
                                   &lw->w[use->role]);
        if (st != HYDRA_OK)
            return st;
    }
    return HYDRA_OK;
}

/* The MTP blocks after the main ones (hp.n_layer has already left them
 * out), bound only when the file stores the first one's nextn.eh_proj:
 * llama.cpp's deepseek2 converter may keep the key and drop the blocks.
 * They are MoE blocks when the model has experts (DeepSeek-V3's block 61,
 * GLM-4.5's block 46). */
static hydra_status bind_nextn(model_weights *w, const hydra_model *m, const uint64_t dims[D_COUNT])
{
    char name[160];
    snprintf(name, sizeof name, arch_tensor_specs[W_NEXTN_EH_PROJ].name, (int)w->hp.n_layer);
    hydra_tensor_info ti;
    if (w->hp.n_nextn == 0 || hydra_model_tensor_find(m, name, &ti) != HYDRA_OK)
        return HYDRA_OK;
    w->nextn = calloc(w->hp.n_nextn, sizeof *w->nextn);
    if (w->nextn == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "%s: %u MTP block bindings", w->arch->name, w->hp.n_nextn);
    w->n_nextn = w->hp.n_nextn;
    for (uint32_t i = 0; i < w->n_nextn; i++) {
        layer_weights *lw = &w->nextn[i];
        lw->moe = w->hp.n_expert > 0;
        hydra_status st = bind_layer(m, w, dims, w->hp.n_layer + i, true, lw);
        if (st != HYDRA_OK)
            return st; /* the message names blk.N's tensor */
    }
    return HYDRA_OK;
}

static hydra_status bind_tensors(model_weights *w, const hydra_model *m)
{
    const arch_desc *a = w->arch;
    uint64_t dims[D_COUNT];
    resolve_dims(&w->hp, dims);
    for (size_t i = 0; i < a->n_tensors; i++) {
        const arch_use *use = &a->tensors[i];
        if (arch_role_per_layer(use->role))
            continue;
        hydra_status st = bind_one(m, a->name, use, 0, dims, use->need != NEED_OPTIONAL, &w->global[use->role]);
        if (st != HYDRA_OK)
            return st;
    }
    if (w->global[W_OUTPUT].data == NULL) {
        /* Tied embeddings: the output projection reads the embedding matrix. */
        w->global[W_OUTPUT] = w->global[W_TOKEN_EMBD];
        hydra_status st = check_type(arch_tensor_specs[W_TOKEN_EMBD].name, &w->global[W_OUTPUT], TK_MATRIX);
        if (st != HYDRA_OK)
            return st;
    }
    bool has_dense_ffn = false;
    for (size_t i = 0; i < a->n_tensors; i++)
        has_dense_ffn |= a->tensors[i].role == W_FFN_GATE;
    for (uint32_t l = 0; l < w->hp.n_layer; l++) {
        layer_weights *lw = &w->layer[l];
        lw->moe = w->hp.n_expert > 0 && l >= w->hp.n_layer_dense_lead;
        lw->window = layer_window(a, &w->hp, l);
        if (!lw->moe && !has_dense_ffn)
            return hydra_fail(HYDRA_ERR_FORMAT, "%s: layer %u has no experts (expert_count %u), and this architecture "
                              "has no dense FFN", a->name, l, w->hp.n_expert);
        hydra_status st = bind_layer(m, w, dims, l, false, lw);
        if (st != HYDRA_OK)
            return st;
    }
    return bind_nextn(w, m, dims);
}

static hydra_status unsupported_arch(const char *name)
{
    char list[256] = "";
    for (size_t i = 0; arch_at(i) != NULL; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", arch_at(i)->name);
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)", name, list);
}

hydra_status weights_bind(model_weights *out, const hydra_model *m)
{
    memset(out, 0, sizeof *out);
    const char *arch_name = hydra_model_arch(m);
    const arch_desc *a = arch_find(arch_name);
    if (a == NULL)
        return unsupported_arch(arch_name);
    model_weights w = {.arch = a};
    w.hp.rope_base = 10000.0f;
    w.hp.expert_weights_scale = 1.0f;
    w.hp.expert_weights_norm = a->expert_weights_norm;
    w.hp.gating = a->gating;
    w.hp.yarn_beta_fast = 32.0f; /* llama.cpp's defaults */
    w.hp.yarn_beta_slow = 1.0f;
    hydra_status st = read_keys(m, a, arch_common_keys, arch_n_common_keys, &w.hp);
    if (st == HYDRA_OK)
        st = read_keys(m, a, a->keys, a->n_keys, &w.hp);
    if (st != HYDRA_OK)
        return st;
    w.hp.n_vocab = vocab_size(m);
    fill_defaults(&w.hp);
    st = check_hparams(a->name, &w.hp);
    if (st == HYDRA_OK)
        st = derive_rope(a->name, &w.hp);
    if (st == HYDRA_OK && a->hparams != NULL)
        st = a->hparams(m, &w.hp);
    if (st != HYDRA_OK)
        return st;
    w.layer = calloc(w.hp.n_layer, sizeof *w.layer);
    if (w.layer == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "%s: %u layer bindings", a->name, w.hp.n_layer);
    st = bind_tensors(&w, m);
    if (st != HYDRA_OK) {
        weights_free(&w);
        return st;
    }
    *out = w;
    return HYDRA_OK;
}

void weights_free(model_weights *w)
{
    free(w->layer);
    free(w->nextn);
    memset(w, 0, sizeof *w);
}
