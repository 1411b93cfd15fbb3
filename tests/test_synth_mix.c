/*
 * Type mixes of the synthetic writer (synth.h's synth_mix): a Q4_K_M file
 * of the shape of ../shared/models/qwen3moe-kq-q4_k_m.gguf, which
 * llama-quantize wrote, gives every tensor the type that file has; the
 * benchmark preset's 64-expert, 8-layer mix has Q6_K where llama.cpp's
 * use_more_bits rule puts it and is the 1.85 GiB of ../shared/ANCHORS.md.
 */
#include "hydra.h"
#include "quant.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <stdio.h>

/* The first tensor whose type differs between the two files (or that one
 * of them lacks), written to why; false when all agree. */
static bool first_type_difference(const hydra_model *ref, const hydra_model *ours, char *why, size_t len)
{
    if (hydra_model_tensor_count(ref) != hydra_model_tensor_count(ours))
        return snprintf(why, len, "%zu tensors, reference has %zu", hydra_model_tensor_count(ours),
                        hydra_model_tensor_count(ref)), true;
    for (size_t i = 0; i < hydra_model_tensor_count(ref); i++) {
        hydra_tensor_info r, o;
        hydra_model_tensor_at(ref, i, &r);
        if (hydra_model_tensor_find(ours, r.name, &o) != HYDRA_OK)
            return snprintf(why, len, "%s missing", r.name), true;
        if (o.type != r.type)
            return snprintf(why, len, "%s is %s, reference %s", r.name, o.type_name, r.type_name), true;
    }
    return false;
}

TEST(synth_mix_q4_k_m_matches_llama_quantize)
{
    REQUIRE_SHARED();
    char ref_path[4096], why[256];
    snprintf(ref_path, sizeof ref_path, "%s/models/qwen3moe-kq-q4_k_m.gguf", test_shared_dir());
    hydra_model *ref, *ours;
    CHECK_OK(util_open_model(ref_path, &ref));
    /* its shape (hydra-run --info on the file) */
    synth_params p;
    CHECK_OK(synth_preset("qwen3moe-tiny", &p));
    p.n_layer = 2, p.n_embd = 256, p.n_head = 4, p.n_head_kv = 2, p.head_dim = 64, p.n_expert = 8;
    p.n_expert_used = 4, p.n_ff_exp = 256, p.n_ff = 768, p.n_vocab = 1024, p.mix = SYNTH_MIX_Q4_K_M;
    const char *path = util_scratch_path("mix-q4_k_m.gguf");
    hydra_status st = synth_write(path, &p);
    if (st != HYDRA_OK) {
        hydra_model_close(ref);
        FAIL("synth_write: %s", hydra_last_error());
    }
    CHECK_OK(util_open_model(path, &ours));
    bool differs = first_type_difference(ref, ours, why, sizeof why);
    uint64_t ftype_ref = 0, ftype_ours = 0;
    hydra_model_get_u64(ref, "general.file_type", &ftype_ref);
    hydra_model_get_u64(ours, "general.file_type", &ftype_ours);
    hydra_model_close(ref);
    hydra_model_close(ours);
    if (differs)
        FAIL("Q4_K_M, 8 experts: %s", why);
    CHECK_EQ_U64(ftype_ours, ftype_ref);
}

static uint32_t type_of(const hydra_model *m, const char *name)
{
    hydra_tensor_info ti;
    return hydra_model_tensor_find(m, name, &ti) == HYDRA_OK ? ti.type : QT_COUNT;
}

/* 64 experts: no 8-expert overrides.  use_more_bits(i, 8) = i < 1 ||
 * i >= 7 || (i - 1) % 3 == 2 holds for blocks 0, 3, 6 and 7. */
TEST(synth_mix_q4_k_m_widens_half_of_attn_v_and_ffn_down)
{
    synth_params p;
    CHECK_OK(synth_preset("qwen3moe-bench", &p));
    p.n_embd = 256, p.n_head = 4, p.n_head_kv = 2, p.head_dim = 64, p.n_ff_exp = 256, p.n_vocab = 512;
    hydra_model *m;
    CHECK_OK(util_open_synth(&p, "mix-q4_k_m-64.gguf", &m));
    static const bool wide[8] = {true, false, false, true, false, false, true, true};
    char name[64], why[128] = "";
    for (int l = 0; l < 8 && why[0] == '\0'; l++) {
        const uint32_t want = wide[l] ? QT_Q6_K : QT_Q4_K;
        static const char *const roles[] = {"attn_v.weight", "ffn_down_exps.weight"};
        for (int r = 0; r < 2; r++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, roles[r]);
            if (type_of(m, name) != want)
                snprintf(why, sizeof why, "%s: type %u, want %u", name, type_of(m, name), want);
        }
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", l);
        if (type_of(m, name) != QT_Q4_K)
            snprintf(why, sizeof why, "%s: type %u, want Q4_K", name, type_of(m, name));
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
        if (type_of(m, name) != QT_F32)
            snprintf(why, sizeof why, "%s: type %u, want F32", name, type_of(m, name));
    }
    uint32_t out = type_of(m, "output.weight"), embd = type_of(m, "token_embd.weight");
    hydra_model_close(m);
    if (why[0] != '\0')
        FAIL("%s", why);
    CHECK_EQ_INT(out, QT_Q6_K);
    CHECK_EQ_INT(embd, QT_Q4_K);
}

/* ../shared/ANCHORS.md: 1.85 GiB of tensors, 3.19 B parameters. */
TEST(synth_mix_bench_preset_has_the_anchor_size)
{
    synth_params p;
    CHECK_OK(synth_preset("qwen3moe-bench", &p));
    double gib = (double)synth_data_bytes(&p) / (1024.0 * 1024.0 * 1024.0);
    if (!(gib > 1.845 && gib < 1.855))
        FAIL("%.4f GiB of tensor data, want 1.85", gib);
}

TEST(synth_mix_names_resolve)
{
    synth_mix m = SYNTH_MIX_NONE;
    CHECK(synth_mix_find("q4_k_m", &m));
    CHECK_EQ_INT(m, SYNTH_MIX_Q4_K_M);
    CHECK_EQ_STR(synth_mix_name(SYNTH_MIX_Q5_K_M), "Q5_K_M");
    CHECK(!synth_mix_find("Q4_K", &m));
    CHECK(synth_mix_name(SYNTH_MIX_NONE) == NULL);
    synth_params p;
    CHECK_OK(synth_preset("tiny", &p));
    p.mix = (synth_mix)99;
    CHECK(synth_check(&p) != HYDRA_OK);
}

/* The IQ2_XXS-experts mix (issue 11): routed experts IQ2_XXS, attn_v and
 * output Q6_K, everything else that is quantised Q4_K. */
TEST(synth_mix_iq2_xxs_exps_puts_experts_in_iq2_xxs)
{
    synth_params p;
    CHECK_OK(synth_preset("qwen3moe-bench", &p));
    p.n_layer = 2, p.n_embd = 256, p.n_head = 4, p.n_head_kv = 2, p.head_dim = 64, p.n_expert = 8;
    p.n_expert_used = 2, p.n_ff_exp = 256, p.n_vocab = 512;
    CHECK(synth_mix_find("iq2_xxs_exps", &p.mix));
    CHECK_EQ_INT(p.mix, SYNTH_MIX_IQ2_XXS_EXPS);
    hydra_model *m;
    CHECK_OK(util_open_synth(&p, "mix-iq2_xxs_exps.gguf", &m));
    static const struct {
        const char *name;
        uint32_t type;
    } want[] = {{"blk.1.ffn_gate_exps.weight", QT_IQ2_XXS}, {"blk.1.ffn_up_exps.weight", QT_IQ2_XXS},
                {"blk.0.ffn_down_exps.weight", QT_IQ2_XXS}, {"blk.0.attn_v.weight", QT_Q6_K},
                {"blk.1.attn_q.weight", QT_Q4_K},           {"blk.0.attn_output.weight", QT_Q4_K},
                {"output.weight", QT_Q6_K},                 {"token_embd.weight", QT_Q4_K}};
    char why[128] = "";
    for (size_t i = 0; i < sizeof want / sizeof want[0] && why[0] == '\0'; i++)
        if (type_of(m, want[i].name) != want[i].type)
            snprintf(why, sizeof why, "%s: type %u, want %u", want[i].name, type_of(m, want[i].name), want[i].type);
    hydra_model_close(m);
    if (why[0] != '\0')
        FAIL("%s", why);
}
