/*
 * Every model in ../shared/models opens, and what hydra reads agrees with
 * what the reference JSON (../shared/ref/NAME.json) says of the file.
 */
#include "hydra.h"
#include "test.h"
#include "util.h"

#include <dirent.h>
#include <stdlib.h>

static const char *const model_files[] = {
    "deepseek2-tiny-f32", "deepseek2-tiny-q8_0", "gptoss-tiny-f32",    "gptoss-tiny-mxfp4",
    "mixtral-tiny-f16",   "mixtral-tiny-q4_0",   "qwen2moe-tiny-f32",  "qwen2moe-tiny-q8_0",
    "qwen3moe-kq-iq2_xxs", "qwen3moe-kq-iq3_xxs", "qwen3moe-kq-iq4_xs", "qwen3moe-kq-q4_k_m",
    "qwen3moe-tiny-f32",  "qwen3moe-tiny-q8_0",
};

/* Tensors per type, counted by hydra, against the JSON's tensor_types. */
static bool tensor_types_match(hydra_model *m, const cJSON *types, char *why, size_t why_len)
{
    size_t counted[256] = {0};
    for (size_t i = 0; i < hydra_model_tensor_count(m); i++) {
        hydra_tensor_info ti;
        if (hydra_model_tensor_at(m, i, &ti) != HYDRA_OK || ti.type >= 256)
            return snprintf(why, why_len, "tensor %zu unreadable", i), false;
        counted[ti.type]++;
    }
    size_t listed = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, types)
    {
        uint32_t t;
        for (t = 0; t < hydra_type_count(); t++)
            if (hydra_type_name(t) && strcmp(hydra_type_name(t), e->string) == 0)
                break;
        if (t == hydra_type_count() || counted[t] != (size_t)e->valueint)
            return snprintf(why, why_len, "type %s: reference %d tensors, hydra %zu", e->string, e->valueint,
                            t < 256 ? counted[t] : 0),
                   false;
        listed += (size_t)e->valueint;
    }
    if (listed != hydra_model_tensor_count(m))
        return snprintf(why, why_len, "reference lists %zu tensors, hydra %zu", listed, hydra_model_tensor_count(m)),
               false;
    return true;
}

TEST(shared_models_open_and_match_reference_metadata)
{
    REQUIRE_SHARED();
    for (size_t i = 0; i < sizeof model_files / sizeof model_files[0]; i++) {
        char json_path[512];
        snprintf(json_path, sizeof json_path, "%s/ref/%s.json", test_shared_dir(), model_files[i]);
        cJSON *ref = util_read_json(json_path);
        if (ref == NULL)
            FAIL("cannot read %s", json_path);
        hydra_model *m;
        hydra_status st = util_open_shared_model(model_files[i], &m);
        if (st != HYDRA_OK) {
            cJSON_Delete(ref);
            FAIL("%s: %s: %s", model_files[i], hydra_strerror(st), hydra_last_error());
        }
        char why[256] = "";
        const char *arch = cJSON_GetStringValue(cJSON_GetObjectItem(ref, "arch"));
        bool arch_ok = arch && strcmp(hydra_model_arch(m), arch) == 0;
        size_t n_tokens = 0;
        hydra_value_type et;
        bool vocab_ok = hydra_model_get_arr(m, "tokenizer.ggml.tokens", &et, &n_tokens) == HYDRA_OK &&
                        et == HYDRA_VALUE_STRING &&
                        n_tokens == (size_t)cJSON_GetObjectItem(ref, "n_vocab")->valueint;
        bool types_ok = tensor_types_match(m, cJSON_GetObjectItem(ref, "tensor_types"), why, sizeof why);
        char got_arch[64];
        snprintf(got_arch, sizeof got_arch, "%s", hydra_model_arch(m));
        hydra_model_close(m);
        cJSON_Delete(ref);
        if (!arch_ok)
            FAIL("%s: arch '%s', reference '%s'", model_files[i], got_arch, arch ? arch : "?");
        if (!vocab_ok)
            FAIL("%s: vocabulary has %zu tokens, reference n_vocab differs", model_files[i], n_tokens);
        if (!types_ok)
            FAIL("%s: %s", model_files[i], why);
    }
}

TEST(shared_qwen3moe_hyperparameters_are_read)
{
    REQUIRE_SHARED();
    hydra_model *m;
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-q8_0", &m));
    uint64_t experts = 0, used = 0, embd = 0, layers = 0;
    double theta = 0;
    hydra_model_get_u64(m, "qwen3moe.expert_count", &experts);
    hydra_model_get_u64(m, "qwen3moe.expert_used_count", &used);
    hydra_model_get_u64(m, "qwen3moe.embedding_length", &embd);
    hydra_model_get_u64(m, "qwen3moe.block_count", &layers);
    hydra_model_get_f64(m, "qwen3moe.rope.freq_base", &theta);
    hydra_model_close(m);
    CHECK_EQ_U64(experts, 8);
    CHECK_EQ_U64(used, 2);
    CHECK_EQ_U64(embd, 64);
    CHECK_EQ_U64(layers, 2);
    CHECK(theta == 1e6);
}

TEST(shared_deepseek2_expert_tensor_has_reference_shape)
{
    REQUIRE_SHARED();
    hydra_model *m;
    CHECK_OK(util_open_shared_model("deepseek2-tiny-f32", &m));
    hydra_tensor_info kb;
    hydra_status st = hydra_model_tensor_find(m, "blk.1.attn_k_b.weight", &kb);
    hydra_model_close(m);
    CHECK_OK(st);
    /* models/README.md: split attn_k_b has ne {32, 64, 4} */
    CHECK_EQ_INT(kb.n_dims, 3);
    CHECK_EQ_U64(kb.ne[0], 32);
    CHECK_EQ_U64(kb.ne[1], 64);
    CHECK_EQ_U64(kb.ne[2], 4);
}

TEST(shared_dequant_files_list_reference_tensors)
{
    REQUIRE_SHARED();
    char path[512];
    snprintf(path, sizeof path, "%s/ref/dequant/index.json", test_shared_dir());
    cJSON *idx = util_read_json(path);
    if (idx == NULL)
        FAIL("cannot read %s", path);
    const cJSON *file;
    char err[512] = "";
    cJSON_ArrayForEach(file, cJSON_GetObjectItem(idx, "files"))
    {
        snprintf(path, sizeof path, "%s/ref/dequant/%s", test_shared_dir(),
                 cJSON_GetStringValue(cJSON_GetObjectItem(file, "gguf")));
        hydra_model_params p = hydra_model_default_params();
        p.path = path;
        hydra_model *m;
        if (hydra_model_open(&m, &p) != HYDRA_OK) {
            snprintf(err, sizeof err, "%s: %s", path, hydra_last_error());
            break;
        }
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(file, "tensors"))
        {
            hydra_tensor_info ti;
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(t, "name"));
            if (hydra_model_tensor_find(m, name, &ti) != HYDRA_OK ||
                ti.n_bytes != (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(t, "nbytes")) ||
                ti.file_offset != (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(t, "gguf_data_offset")) ||
                strcmp(ti.type_name, cJSON_GetStringValue(cJSON_GetObjectItem(t, "type"))) != 0) {
                snprintf(err, sizeof err, "%s: tensor %s differs from index.json (bytes %" PRIu64 ", offset %" PRIu64
                         ", type %s)", path, name, ti.n_bytes, ti.file_offset, ti.type_name);
                break;
            }
        }
        hydra_model_close(m);
        if (err[0])
            break;
    }
    cJSON_Delete(idx);
    if (err[0])
        FAIL("%s", err);
}
