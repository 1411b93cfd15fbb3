/*
 * Binding a model by its architecture descriptor (src/weights.c): the
 * hyperparameters read from the shared files, and the errors for an
 * unsupported architecture, a missing key, a missing or mis-shaped tensor —
 * each made by rewriting a shared model with one thing changed.
 */
#include "gguf_write.h"
#include "hydra.h"
#include "test.h"
#include "util.h"
#include "weights.h"

#include <math.h>
#include <stdlib.h>

/* What to change while copying a model. */
typedef struct edit {
    const char *drop_key;
    const char *arch;           /* new general.architecture */
    const char *drop_tensor;
    const char *transpose;      /* swap ne[0] and ne[1] (same bytes for F32) */
    const char *rename_from, *rename_to; /* a tensor's new name */
} edit;

static hydra_status copy_array(const hydra_model *m, gguf_writer *w, const char *key)
{
    hydra_value_type et;
    size_t n;
    hydra_status st = hydra_model_get_arr(m, key, &et, &n);
    if (st != HYDRA_OK)
        return st;
    if (et == HYDRA_VALUE_STRING) {
        const char **v = malloc(sizeof *v * (n ? n : 1));
        if (v == NULL)
            return HYDRA_ERR_NOMEM;
        for (size_t i = 0; i < n && st == HYDRA_OK; i++)
            st = hydra_model_get_arr_str(m, key, i, &v[i], NULL);
        if (st == HYDRA_OK)
            st = gguf_writer_add_arr_str(w, key, v, n);
        free(v);
        return st;
    }
    if (et != HYDRA_VALUE_I32 && et != HYDRA_VALUE_F32)
        return HYDRA_ERR_UNSUPPORTED;
    int32_t *iv = malloc(sizeof *iv * (n ? n : 1));
    float *fv = malloc(sizeof *fv * (n ? n : 1));
    for (size_t i = 0; i < n && iv && fv && st == HYDRA_OK; i++) {
        int64_t x;
        double d;
        st = et == HYDRA_VALUE_I32 ? hydra_model_get_arr_i64(m, key, i, &x) : hydra_model_get_arr_f64(m, key, i, &d);
        if (et == HYDRA_VALUE_I32)
            iv[i] = (int32_t)x;
        else
            fv[i] = (float)d;
    }
    if (iv == NULL || fv == NULL)
        st = HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK)
        st = et == HYDRA_VALUE_I32 ? gguf_writer_add_arr_i32(w, key, iv, n) : gguf_writer_add_arr_f32(w, key, fv, n);
    free(iv);
    free(fv);
    return st;
}

static hydra_status copy_key(const hydra_model *m, gguf_writer *w, const char *key, hydra_value_type type,
                             const edit *e)
{
    if (strcmp(key, "general.architecture") == 0 && e->arch != NULL)
        return gguf_writer_add_str(w, key, e->arch);
    if (type == HYDRA_VALUE_ARRAY)
        return copy_array(m, w, key);
    uint64_t u = 0;
    int64_t i = 0;
    double d = 0;
    bool b = false;
    const char *s = NULL;
    hydra_status st = type == HYDRA_VALUE_U32 || type == HYDRA_VALUE_U64 ? hydra_model_get_u64(m, key, &u)
                      : type == HYDRA_VALUE_I32                          ? hydra_model_get_i64(m, key, &i)
                      : type == HYDRA_VALUE_F32                          ? hydra_model_get_f64(m, key, &d)
                      : type == HYDRA_VALUE_BOOL                         ? hydra_model_get_bool(m, key, &b)
                      : type == HYDRA_VALUE_STRING                       ? hydra_model_get_str(m, key, &s, NULL)
                                                                         : HYDRA_ERR_UNSUPPORTED;
    if (st != HYDRA_OK)
        return st;
    switch (type) {
    case HYDRA_VALUE_U32:
        return gguf_writer_add_u32(w, key, (uint32_t)u);
    case HYDRA_VALUE_U64:
        return gguf_writer_add_u64(w, key, u);
    case HYDRA_VALUE_I32:
        return gguf_writer_add_i32(w, key, (int32_t)i);
    case HYDRA_VALUE_F32:
        return gguf_writer_add_f32(w, key, (float)d);
    case HYDRA_VALUE_BOOL:
        return gguf_writer_add_bool(w, key, b);
    default:
        return gguf_writer_add_str(w, key, s);
    }
}

/* Writes a copy of shared model `name` with the edit applied. */
static hydra_status write_edited(const char *name, const edit *e, const char *out_path)
{
    hydra_model *m;
    hydra_status st = util_open_shared_model(name, &m);
    if (st != HYDRA_OK)
        return st;
    gguf_writer *w;
    st = gguf_writer_open(&w, out_path);
    for (size_t k = 0; k < hydra_model_meta_count(m) && st == HYDRA_OK; k++) {
        const char *key;
        hydra_value_type type;
        st = hydra_model_meta_at(m, k, &key, &type);
        if (st == HYDRA_OK && !(e->drop_key && strcmp(key, e->drop_key) == 0))
            st = copy_key(m, w, key, type, e);
    }
    for (int pass = 0; pass < 2 && st == HYDRA_OK; pass++)
        for (size_t t = 0; t < hydra_model_tensor_count(m) && st == HYDRA_OK; t++) {
            hydra_tensor_info ti;
            st = hydra_model_tensor_at(m, t, &ti);
            if (st != HYDRA_OK || (e->drop_tensor && strcmp(ti.name, e->drop_tensor) == 0))
                continue;
            uint64_t ne[4] = {ti.ne[0], ti.ne[1], ti.ne[2], ti.ne[3]};
            if (e->transpose && strcmp(ti.name, e->transpose) == 0)
                ne[0] = ti.ne[1], ne[1] = ti.ne[0];
            const char *name = e->rename_from && strcmp(ti.name, e->rename_from) == 0 ? e->rename_to : ti.name;
            st = pass == 0 ? gguf_writer_add_tensor(w, name, ti.type, ti.n_dims, ne)
                           : gguf_writer_write(w, ti.data, ti.n_bytes);
        }
    st = gguf_writer_finish(w, st);
    hydra_model_close(m);
    return st;
}

/* Binds the edited copy; returns the status, message in `why`. */
static hydra_status bind_edited(const char *name, const edit *e, char *why, size_t why_len)
{
    const char *path = util_scratch_path("engine-weights-edit.gguf");
    hydra_status st = write_edited(name, e, path);
    if (st != HYDRA_OK) {
        snprintf(why, why_len, "writing the copy: %s", hydra_last_error());
        return HYDRA_ERR_IO;
    }
    hydra_model *m;
    st = util_open_model(path, &m);
    if (st == HYDRA_OK) {
        model_weights w;
        st = weights_bind(&w, m);
        weights_free(&w);
        hydra_model_close(m);
    }
    snprintf(why, why_len, "%s", hydra_last_error());
    remove(path);
    return st;
}

#define CHECK_BIND_FAILS(name, edit_, want_status, ...)                       \
    do {                                                                      \
        char why_[512];                                                       \
        hydra_status st_ = bind_edited(name, &(edit_), why_, sizeof why_);    \
        if (st_ != (want_status))                                             \
            FAIL("%s: status %s, want %s (%s)", name, hydra_strerror(st_), hydra_strerror(want_status), why_); \
        const char *const parts_[] = {__VA_ARGS__};                           \
        for (size_t i_ = 0; i_ < sizeof parts_ / sizeof parts_[0]; i_++)      \
            if (strstr(why_, parts_[i_]) == NULL)                             \
                FAIL("message \"%s\" does not mention \"%s\"", why_, parts_[i_]); \
    } while (0)

TEST(engine_weights_copy_of_a_model_binds)
{
    REQUIRE_SHARED();
    char why[512];
    const edit none = {0};
    CHECK_EQ_INT(bind_edited("qwen3moe-tiny-f32", &none, why, sizeof why), HYDRA_OK);
}

TEST(engine_weights_unknown_architecture_is_named)
{
    REQUIRE_SHARED();
    const edit e = {.arch = "mamba9"};
    CHECK_BIND_FAILS("qwen3moe-tiny-f32", e, HYDRA_ERR_UNSUPPORTED, "mamba9", "qwen3moe", "llama", "qwen2moe");
}

TEST(engine_weights_missing_tensor_is_named_with_its_shape)
{
    REQUIRE_SHARED();
    const edit e = {.drop_tensor = "blk.1.ffn_up_exps.weight"};
    CHECK_BIND_FAILS("qwen3moe-tiny-f32", e, HYDRA_ERR_FORMAT, "blk.1.ffn_up_exps.weight", "{64, 64, 8}");
    const edit shexp = {.drop_tensor = "blk.0.ffn_gate_inp_shexp.weight"};
    CHECK_BIND_FAILS("qwen2moe-tiny-f32", shexp, HYDRA_ERR_FORMAT, "blk.0.ffn_gate_inp_shexp.weight", "{64, 1, 1}");
}

TEST(engine_weights_misshaped_tensor_is_named_with_both_shapes)
{
    REQUIRE_SHARED();
    const edit e = {.transpose = "blk.1.attn_q.weight"};
    CHECK_BIND_FAILS("qwen3moe-tiny-f32", e, HYDRA_ERR_FORMAT, "blk.1.attn_q.weight", "{128, 64, 1, 1}",
                     "expected {64, 128, 1}");
}

TEST(engine_weights_missing_required_key_is_named)
{
    REQUIRE_SHARED();
    const edit e = {.drop_key = "qwen3moe.expert_feed_forward_length"};
    CHECK_BIND_FAILS("qwen3moe-tiny-f32", e, HYDRA_ERR_FORMAT, "qwen3moe.expert_feed_forward_length");
}

TEST(engine_weights_untied_output_falls_back_to_the_embedding)
{
    REQUIRE_SHARED();
    char why[512];
    const edit e = {.drop_tensor = "output.weight"};
    hydra_status st = bind_edited("qwen2moe-tiny-f32", &e, why, sizeof why);
    if (st != HYDRA_OK)
        FAIL("tied output: %s", why);
}

TEST(engine_weights_hyperparameters_of_the_shared_files)
{
    REQUIRE_SHARED();
    hydra_model *m;
    model_weights w;
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-q8_0", &m));
    hydra_status st = weights_bind(&w, m);
    arch_hparams q3 = w.hp;
    const arch_desc *a = w.arch;
    const bool bound_qk_norm = st == HYDRA_OK && w.layer[1].w[W_ATTN_Q_NORM].data != NULL;
    weights_free(&w);
    hydra_model_close(m);
    CHECK_OK(st);
    CHECK_EQ_STR(a->name, "qwen3moe");
    CHECK(a->rope == ROPE_NEOX && a->gating == GATING_SOFTMAX && bound_qk_norm);
    CHECK_EQ_INT(q3.n_embd, 64);
    CHECK_EQ_INT(q3.n_head * q3.head_dim_k, 128); /* key_length 32: not n_embd / n_head */
    CHECK_EQ_INT(q3.n_rot, 32);
    CHECK_EQ_INT(q3.n_expert, 8);
    CHECK_EQ_INT(q3.n_expert_used, 2);
    CHECK_EQ_INT(q3.n_ff_exp, 64);
    CHECK_EQ_INT(q3.n_vocab, 905);
    CHECK(q3.expert_weights_norm && q3.expert_weights_scale == 1.0f);

    CHECK_OK(util_open_shared_model("qwen2moe-tiny-f32", &m));
    st = weights_bind(&w, m);
    arch_hparams q2 = w.hp;
    const bool bound_shexp = st == HYDRA_OK && w.layer[0].w[W_SHEXP_ROUTER].data && w.layer[1].w[W_ATTN_K_BIAS].data;
    weights_free(&w);
    hydra_model_close(m);
    CHECK_OK(st);
    CHECK(!q2.expert_weights_norm && bound_shexp);
    CHECK_EQ_INT(q2.n_ff_shexp, 128);
    CHECK_EQ_INT(q2.head_dim_k, 16);

    CHECK_OK(util_open_shared_model("mixtral-tiny-f16", &m));
    st = weights_bind(&w, m);
    arch_hparams mx = w.hp;
    a = w.arch;
    weights_free(&w);
    hydra_model_close(m);
    CHECK_OK(st);
    CHECK(a->rope == ROPE_NORMAL && mx.expert_weights_norm);
    CHECK_EQ_INT(mx.n_ff_exp, 128);
    CHECK_EQ_INT(mx.n_rot, 32);
    CHECK_EQ_INT(mx.n_vocab, 906);
}

TEST(engine_weights_deepseek2_unsplit_kv_b_is_refused)
{
    REQUIRE_SHARED();
    const edit e = {.rename_from = "blk.0.attn_k_b.weight", .rename_to = "blk.0.attn_kv_b.weight"};
    CHECK_BIND_FAILS("deepseek2-tiny-f32", e, HYDRA_ERR_UNSUPPORTED, "deepseek2", "unsplit attn_kv_b", "attn_k_b");
}

TEST(engine_weights_deepseek2_compressed_query_is_required)
{
    REQUIRE_SHARED();
    const edit e = {.drop_tensor = "blk.2.attn_q_a.weight"};
    CHECK_BIND_FAILS("deepseek2-tiny-q8_0", e, HYDRA_ERR_FORMAT, "blk.2.attn_q_a.weight", "{64, 64, 1}");
}

TEST(engine_weights_hyperparameters_of_deepseek2_and_gptoss)
{
    REQUIRE_SHARED();
    hydra_model *m;
    model_weights w;
    CHECK_OK(util_open_shared_model("deepseek2-tiny-f32", &m));
    hydra_status st = weights_bind(&w, m);
    const arch_hparams ds = w.hp;
    const bool dense_lead = st == HYDRA_OK && !w.layer[0].moe && w.layer[1].moe && w.layer[2].moe &&
                            w.layer[1].w[W_MOE_PROBS_BIAS].data && w.layer[2].w[W_SHEXP_DOWN].data &&
                            w.layer[0].w[W_FFN_GATE].data && w.layer[1].w[W_ATTN_Q].data == NULL;
    weights_free(&w);
    hydra_model_close(m);
    CHECK_OK(st);
    CHECK(dense_lead);
    CHECK(ds.head_dim_k == 48 && ds.head_dim_v == 32 && ds.n_rot == 16); /* the *_mla keys, not 80 / 64 */
    CHECK(ds.kv_lora_rank == 64 && ds.q_lora_rank == 64 && ds.n_head_kv == 1);
    CHECK(ds.gating == GATING_SIGMOID && ds.n_expert_group == 4 && ds.n_expert_group_used == 2);
    CHECK(ds.expert_weights_norm && ds.expert_weights_scale == 2.5f && ds.n_ff_shexp == 32);
    CHECK(ds.rope.freq_scale == 0.25f && ds.rope.ext_factor == 1.0f && ds.n_ctx_orig == 4096);
    /* DeepSeek's YaRN factor (1 + 0.1 ln 4)^2 goes into the softmax scale */
    CHECK(fabs(ds.kq_scale - pow(1 + 0.1 * log(4.0), 2) / sqrt(48.0)) < 1e-6);
    CHECK(fabs(ds.rope.attn_factor * (1 + 0.1 * log(4.0)) - 1) < 1e-6);

    CHECK_OK(util_open_shared_model("gptoss-tiny-mxfp4", &m));
    st = weights_bind(&w, m);
    const arch_hparams oss = w.hp;
    uint32_t windows[4] = {0};
    bool bound = st == HYDRA_OK && w.layer[3].w[W_ATTN_SINKS].data && w.layer[3].w[W_MOE_DOWN_BIAS].data &&
                 w.layer[0].w[W_FFN_NORM].data && w.layer[0].w[W_ATTN_OUT_BIAS].data;
    for (int l = 0; st == HYDRA_OK && l < 4; l++)
        windows[l] = w.layer[l].window;
    weights_free(&w);
    hydra_model_close(m);
    CHECK_OK(st);
    CHECK(bound);
    CHECK(windows[0] == 128 && windows[1] == 0 && windows[2] == 128 && windows[3] == 0);
    CHECK(oss.gating == GATING_SOFTMAX_WEIGHT && !oss.expert_weights_norm);
    CHECK(oss.rope.freq_scale == 1.0f / 32 && oss.rope.ext_factor == 1.0f && oss.rope.attn_factor == 1.0f);
    CHECK(fabs(oss.kq_scale - 1 / sqrt(32.0)) < 1e-7);
}
