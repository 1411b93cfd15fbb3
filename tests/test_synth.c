/*
 * The synthetic model writer: every architecture's file opens and says what
 * its parameters asked for; its layout (key names and types, tensor names,
 * ranks, shapes, which tensors are F32) is that of the llama.cpp-made files
 * in ../shared/models; seeds are reproducible; every writable type
 * dequantises back to the F32 file's weights within that type's error.
 */
#include "hydra.h"
#include "quant.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------ helpers */

static uint64_t meta_u64(const hydra_model *m, const char *fmt, const char *arch)
{
    char key[128];
    uint64_t v = UINT64_MAX;
    snprintf(key, sizeof key, fmt, arch);
    hydra_model_get_u64(m, key, &v);
    return v;
}

/* Whether a tensor has exactly this type and shape (unused dims 0). */
static bool tensor_is(const hydra_model *m, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1,
                      uint64_t ne2, char *why, size_t why_len)
{
    hydra_tensor_info ti;
    const uint64_t want[3] = {ne0, ne1, ne2};
    if (hydra_model_tensor_find(m, name, &ti) != HYDRA_OK)
        return snprintf(why, why_len, "%s: missing", name), false;
    uint32_t dims = want[2] ? 3 : want[1] ? 2 : 1;
    if (ti.type != type || ti.n_dims != dims)
        return snprintf(why, why_len, "%s: type %s, %u dims", name, ti.type_name, ti.n_dims), false;
    for (uint32_t d = 0; d < dims; d++)
        if (ti.ne[d] != want[d])
            return snprintf(why, why_len, "%s: ne[%u] = %" PRIu64 ", want %" PRIu64, name, d, ti.ne[d], want[d]),
                   false;
    return true;
}

/* ------------------------------------------------------------ metadata and shapes */

/* A preset moved off its defaults, so the check sees the parameters, not
 * the preset's numbers. */
static synth_params varied(const char *preset)
{
    synth_params p;
    synth_preset(preset, &p);
    p.n_layer += 1;
    p.n_expert *= 2;
    p.n_ff_exp *= 2;
    p.n_vocab = 600;
    p.type = QT_F16;
    p.seed = 7;
    return p;
}

static void check_arch_file(test_ctx *t_, const char *preset)
{
    synth_params p = varied(preset);
    hydra_model *m;
    char file[64], why[256];
    snprintf(file, sizeof file, "synth-%s.gguf", preset);
    CHECK_OK(util_open_synth(&p, file, &m));
    const char *a = p.arch;
    uint32_t moe = p.n_dense_lead; /* first MoE block */
    char gate[64], down[64], router[64];
    snprintf(gate, sizeof gate, "blk.%u.ffn_gate_exps.weight", moe);
    snprintf(down, sizeof down, "blk.%u.ffn_down_exps.weight", moe);
    snprintf(router, sizeof router, "blk.%u.ffn_gate_inp.weight", moe);
    bool ok = strcmp(hydra_model_arch(m), a) == 0 && meta_u64(m, "%s.block_count", a) == p.n_layer &&
              meta_u64(m, "%s.embedding_length", a) == p.n_embd && meta_u64(m, "%s.expert_count", a) == p.n_expert &&
              meta_u64(m, "%s.expert_used_count", a) == p.n_expert_used &&
              meta_u64(m, "%s.attention.head_count", a) == p.n_head;
    if (!ok)
        snprintf(why, sizeof why, "metadata of %s differs from its parameters", preset);
    hydra_value_type elem;
    size_t n_tokens = 0;
    ok = ok && hydra_model_get_arr(m, "tokenizer.ggml.tokens", &elem, &n_tokens) == HYDRA_OK && n_tokens == 600;
    ok = ok && tensor_is(m, "token_embd.weight", QT_F16, p.n_embd, 600, 0, why, sizeof why) &&
         tensor_is(m, "output.weight", QT_F16, p.n_embd, 600, 0, why, sizeof why) &&
         tensor_is(m, "output_norm.weight", QT_F32, p.n_embd, 0, 0, why, sizeof why) &&
         tensor_is(m, "blk.0.attn_norm.weight", QT_F32, p.n_embd, 0, 0, why, sizeof why) &&
         tensor_is(m, router, QT_F32, p.n_embd, p.n_expert, 0, why, sizeof why) &&
         tensor_is(m, gate, QT_F16, p.n_embd, p.n_ff_exp, p.n_expert, why, sizeof why) &&
         tensor_is(m, down, QT_F16, p.n_ff_exp, p.n_embd, p.n_expert, why, sizeof why);
    char last[64];
    snprintf(last, sizeof last, "blk.%u.attn_norm.weight", p.n_layer - 1);
    ok = ok && tensor_is(m, last, QT_F32, p.n_embd, 0, 0, why, sizeof why);
    hydra_model_close(m);
    if (!ok)
        FAIL("%s (tokens %zu)", why, n_tokens);
}

TEST(synth_qwen3moe_file_matches_its_parameters) { check_arch_file(TEST_CTX, "qwen3moe-tiny"); }
TEST(synth_llama_file_matches_its_parameters) { check_arch_file(TEST_CTX, "mixtral-tiny"); }
TEST(synth_qwen2moe_file_matches_its_parameters) { check_arch_file(TEST_CTX, "qwen2moe-tiny"); }
TEST(synth_deepseek2_file_matches_its_parameters) { check_arch_file(TEST_CTX, "deepseek2-tiny"); }
TEST(synth_gptoss_file_matches_its_parameters) { check_arch_file(TEST_CTX, "gptoss-tiny"); }

/* ------------------------------------------------------------ layout against ../shared */

static bool is_vocab_dim(const hydra_model *ref, uint64_t ne)
{
    hydra_value_type elem;
    size_t n = 0;
    return hydra_model_get_arr(ref, "tokenizer.ggml.tokens", &elem, &n) == HYDRA_OK && ne == n;
}

/* Same tensor names, ranks and shapes (vocabulary dims aside). */
static bool same_tensors(const hydra_model *ours, const hydra_model *ref, uint64_t our_vocab, char *why, size_t len)
{
    if (hydra_model_tensor_count(ours) != hydra_model_tensor_count(ref))
        return snprintf(why, len, "%zu tensors, reference %zu", hydra_model_tensor_count(ours),
                        hydra_model_tensor_count(ref)), false;
    for (size_t i = 0; i < hydra_model_tensor_count(ref); i++) {
        hydra_tensor_info r, o;
        hydra_model_tensor_at(ref, i, &r);
        if (hydra_model_tensor_find(ours, r.name, &o) != HYDRA_OK)
            return snprintf(why, len, "no tensor %s", r.name), false;
        if (o.n_dims != r.n_dims)
            return snprintf(why, len, "%s: %u dims, reference %u", r.name, o.n_dims, r.n_dims), false;
        for (uint32_t d = 0; d < r.n_dims; d++)
            if (o.ne[d] != (is_vocab_dim(ref, r.ne[d]) ? our_vocab : r.ne[d]))
                return snprintf(why, len, "%s: ne[%u] %" PRIu64 ", reference %" PRIu64, r.name, d, o.ne[d], r.ne[d]),
                       false;
    }
    return true;
}

/* Exactly the tensors the quantised reference keeps in F32 are F32 here. */
static bool same_f32_set(const hydra_model *ours, const hydra_model *quantised, char *why, size_t len)
{
    for (size_t i = 0; i < hydra_model_tensor_count(quantised); i++) {
        hydra_tensor_info r, o;
        hydra_model_tensor_at(quantised, i, &r);
        if (hydra_model_tensor_find(ours, r.name, &o) != HYDRA_OK)
            return snprintf(why, len, "no tensor %s", r.name), false;
        if ((r.type == QT_F32) != (o.type == QT_F32))
            return snprintf(why, len, "%s: %s here, %s in the reference", r.name, o.type_name, r.type_name), false;
    }
    return true;
}

/* Every key of the reference exists with its type; "<arch>." numbers other
 * than the vocabulary size have its values. */
static bool same_keys(const hydra_model *ours, const hydra_model *ref, char *why, size_t len)
{
    const char *arch = hydra_model_arch(ref);
    for (size_t i = 0; i < hydra_model_meta_count(ref); i++) {
        const char *key;
        hydra_value_type rt, ot;
        hydra_model_meta_at(ref, i, &key, &rt);
        if (hydra_model_meta_type(ours, key, &ot) != HYDRA_OK || ot != rt)
            return snprintf(why, len, "key %s missing or not a %s", key, hydra_value_type_name(rt)), false;
        bool arch_key = strncmp(key, arch, strlen(arch)) == 0 && key[strlen(arch)] == '.';
        double rv, ov;
        int64_t ri, oi;
        if (!arch_key || strstr(key, "vocab_size") != NULL)
            continue;
        if (hydra_model_get_f64(ref, key, &rv) == HYDRA_OK && hydra_model_get_f64(ours, key, &ov) == HYDRA_OK &&
            rv != ov)
            return snprintf(why, len, "%s = %g, reference %g", key, ov, rv), false;
        if (hydra_model_get_i64(ref, key, &ri) == HYDRA_OK && hydra_model_get_i64(ours, key, &oi) == HYDRA_OK &&
            ri != oi)
            return snprintf(why, len, "%s = %" PRId64 ", reference %" PRId64, key, oi, ri), false;
    }
    return true;
}

static void check_layout(test_ctx *t_, const char *preset, const char *shape_ref, const char *type_ref)
{
    REQUIRE_SHARED();
    synth_params p;
    hydra_model *ours, *ref, *quantised;
    char path[512], file[64], why[256] = "";
    CHECK_OK(synth_preset(preset, &p));
    snprintf(file, sizeof file, "layout-%s.gguf", preset);
    CHECK_OK(util_open_synth(&p, file, &ours));
    util_shared_model_path(shape_ref, path, sizeof path);
    CHECK_OK(util_open_model(path, &ref));
    util_shared_model_path(type_ref, path, sizeof path);
    CHECK_OK(util_open_model(path, &quantised));
    hydra_tensor_info embd;
    hydra_model_tensor_find(ours, "token_embd.weight", &embd);
    bool ok = same_tensors(ours, ref, embd.ne[1], why, sizeof why) && same_f32_set(ours, quantised, why, sizeof why) &&
              same_keys(ours, ref, why, sizeof why);
    hydra_model_close(ours);
    hydra_model_close(ref);
    hydra_model_close(quantised);
    if (!ok)
        FAIL("%s against %s: %s", preset, shape_ref, why);
}

TEST(synth_qwen3moe_layout_matches_shared) { check_layout(TEST_CTX, "qwen3moe-tiny", "qwen3moe-tiny-f32", "qwen3moe-tiny-q8_0"); }
TEST(synth_llama_layout_matches_shared) { check_layout(TEST_CTX, "mixtral-tiny", "mixtral-tiny-f16", "mixtral-tiny-q4_0"); }
TEST(synth_qwen2moe_layout_matches_shared) { check_layout(TEST_CTX, "qwen2moe-tiny", "qwen2moe-tiny-f32", "qwen2moe-tiny-q8_0"); }
TEST(synth_deepseek2_layout_matches_shared) { check_layout(TEST_CTX, "deepseek2-tiny", "deepseek2-tiny-f32", "deepseek2-tiny-q8_0"); }
TEST(synth_gptoss_layout_matches_shared) { check_layout(TEST_CTX, "gptoss-tiny", "gptoss-tiny-f32", "gptoss-tiny-mxfp4"); }

/* ------------------------------------------------------------ vocabulary */

/* The byte tokens are GPT-2's: compare with the reference file's first 256. */
TEST(synth_byte_tokens_match_gpt2)
{
    REQUIRE_SHARED();
    synth_params p;
    hydra_model *ours, *ref;
    char path[512];
    CHECK_OK(synth_preset("tiny", &p));
    CHECK_OK(util_open_synth(&p, "vocab-bytes.gguf", &ours));
    snprintf(path, sizeof path, "%s/models/qwen3moe-tiny-f32.gguf", test_shared_dir());
    CHECK_OK(util_open_model(path, &ref));
    int mismatch = -1;
    for (int i = 0; i < 256 && mismatch < 0; i++) {
        const char *a = NULL, *b = NULL;
        hydra_model_get_arr_str(ours, "tokenizer.ggml.tokens", (size_t)i, &a, NULL);
        hydra_model_get_arr_str(ref, "tokenizer.ggml.tokens", (size_t)i, &b, NULL);
        if (a == NULL || b == NULL || strcmp(a, b) != 0)
            mismatch = i;
    }
    hydra_model_close(ours);
    hydra_model_close(ref);
    CHECK_EQ_INT(mismatch, -1);
}

static const char *token_at(const hydra_model *m, int64_t id)
{
    const char *s = NULL;
    hydra_model_get_arr_str(m, "tokenizer.ggml.tokens", (size_t)id, &s, NULL);
    return s ? s : "(none)";
}

static bool is_token(const char *const *tokens, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tokens[i], s) == 0)
            return true;
    return false;
}

/* The index of the first merge "a b" whose a, b or ab is not a token;
 * SIZE_MAX if none. */
static size_t first_bad_merge(const hydra_model *m)
{
    hydra_value_type elem;
    size_t n_tok = 0, n_merges = 0, bad = SIZE_MAX;
    hydra_model_get_arr(m, "tokenizer.ggml.tokens", &elem, &n_tok);
    hydra_model_get_arr(m, "tokenizer.ggml.merges", &elem, &n_merges);
    const char **tokens = malloc((n_tok + 1) * sizeof *tokens);
    for (size_t i = 0; tokens && i < n_tok; i++)
        tokens[i] = token_at(m, (int64_t)i);
    for (size_t i = 0; tokens && i < n_merges && bad == SIZE_MAX; i++) {
        const char *mg = "";
        char left[64] = "", right[64] = "", joined[128];
        hydra_model_get_arr_str(m, "tokenizer.ggml.merges", i, &mg, NULL);
        sscanf(mg, "%63s %63s", left, right);
        snprintf(joined, sizeof joined, "%s%s", left, right);
        if (!is_token(tokens, n_tok, left) || !is_token(tokens, n_tok, right) || !is_token(tokens, n_tok, joined))
            bad = i;
    }
    free(tokens);
    return tokens ? bad : 0;
}

/* Each merge "a b" joins two tokens into a third; specials sit where the
 * ids say; a requested size is reached with UNUSED [PADn] tokens. */
TEST(synth_vocab_is_consistent_bpe)
{
    synth_params p;
    hydra_model *m;
    CHECK_OK(synth_preset("tiny", &p));
    p.n_vocab = 1000;
    CHECK_OK(util_open_synth(&p, "vocab-bpe.gguf", &m));
    hydra_value_type elem;
    size_t n_tok = 0, n_merges = 0;
    hydra_model_get_arr(m, "tokenizer.ggml.tokens", &elem, &n_tok);
    hydra_model_get_arr(m, "tokenizer.ggml.merges", &elem, &n_merges);
    size_t bad_merge = first_bad_merge(m);
    int64_t bos = -1, eos = -1, last_type = -1;
    hydra_model_get_i64(m, "tokenizer.ggml.bos_token_id", &bos);
    hydra_model_get_i64(m, "tokenizer.ggml.eos_token_id", &eos);
    hydra_model_get_arr_i64(m, "tokenizer.ggml.token_type", n_tok - 1, &last_type);
    char bos_s[32], eos_s[32], last_s[32];
    snprintf(bos_s, sizeof bos_s, "%s", token_at(m, bos));
    snprintf(eos_s, sizeof eos_s, "%s", token_at(m, eos));
    snprintf(last_s, sizeof last_s, "%s", token_at(m, (int64_t)n_tok - 1));
    hydra_model_close(m);
    CHECK_EQ_INT(n_tok, 1000);
    CHECK(n_merges >= 100);
    CHECK_EQ_U64(bad_merge, SIZE_MAX);
    CHECK_EQ_STR(bos_s, "<|endoftext|>");
    CHECK_EQ_STR(eos_s, "<|im_end|>");
    CHECK_EQ_STR(last_s, "[PAD999]");
    CHECK_EQ_INT(last_type, 5);
}

/* ------------------------------------------------------------ seeds */

TEST(synth_same_seed_gives_identical_bytes)
{
    synth_params p;
    CHECK_OK(synth_preset("qwen2moe-tiny", &p));
    CHECK(util_synth_same_bytes(&p, "seed-a.gguf", &p, "seed-b.gguf"));
}

TEST(synth_different_seed_gives_different_weights)
{
    synth_params p;
    CHECK_OK(synth_preset("qwen2moe-tiny", &p));
    size_t na = 0, nb = 0;
    uint8_t *a = util_synth_bytes(&p, "seed-c.gguf", &na);
    p.seed += 1;
    uint8_t *b = util_synth_bytes(&p, "seed-d.gguf", &nb);
    /* Same layout, so the sizes agree; only the name and the data differ. */
    size_t differing = 0;
    for (size_t i = 0; a && b && na == nb && i < na; i++)
        differing += a[i] != b[i];
    free(a);
    free(b);
    CHECK_EQ_U64(na, nb);
    CHECK(differing > na / 4);
}

/* Chunks are seeded on their own: one thread (batches of 4 chunks) and
 * three (batches of 12) write the same bytes. */
TEST(synth_thread_count_does_not_change_the_file)
{
    synth_params p;
    CHECK_OK(synth_preset("qwen3moe-tiny", &p));
    p.n_embd = 256, p.n_ff_exp = 256; /* expert tensors: 2048 rows, 8 chunks of 256 */
    synth_params three = p;
    p.n_threads = 1;
    three.n_threads = 3;
    CHECK(util_synth_same_bytes(&p, "threads-1.gguf", &three, "threads-3.gguf"));
}

/* ------------------------------------------------------------ types */

/* Relative RMS error a type may show on Gaussian weights.  Floats: their
 * mantissa (F16 11 bits, BF16 8).  Block formats: about 2^(2 - bits per
 * weight) (Q8_0 at 8.5 bpw measures ~0.004, Q4_0 ~0.1), capped below 0.8
 * so that a type that loses the signal (all zeros: 1.0) still fails. */
static double allowed_error(uint32_t type)
{
    const quant_traits *qt = quant_traits_of(type);
    if (type == QT_F32)
        return 1e-7;
    if (type == QT_F16)
        return 1e-3;
    if (type == QT_BF16)
        return 8e-3;
    double bpw = 8.0 * qt->type_size / qt->block_size;
    double e = pow(2.0, 2.0 - bpw);
    return e < 0.8 ? e : 0.8;
}

/* Relative RMS difference of a tensor (dequantised) from the F32 one. */
static double relative_error(const hydra_tensor_info *q, const hydra_tensor_info *f)
{
    float *v = malloc(q->n_elements * sizeof *v);
    if (v == NULL || quant_traits_of(q->type)->to_float == NULL) {
        free(v);
        return INFINITY;
    }
    quant_traits_of(q->type)->to_float(q->data, v, (int64_t)q->n_elements);
    const float *ref = f->data;
    double err = 0, norm = 0;
    for (uint64_t i = 0; i < q->n_elements; i++) {
        err += ((double)v[i] - ref[i]) * ((double)v[i] - ref[i]);
        norm += (double)ref[i] * ref[i];
    }
    free(v);
    return norm > 0 ? sqrt(err / norm) : INFINITY;
}

/* The worst relative error over the weight tensors of type `type`. */
static double worst_error(const hydra_model *q, const hydra_model *f, uint32_t type)
{
    double worst = 0;
    for (size_t i = 0; i < hydra_model_tensor_count(q); i++) {
        hydra_tensor_info qi, fi;
        hydra_model_tensor_at(q, i, &qi);
        if (qi.type != type || hydra_model_tensor_find(f, qi.name, &fi) != HYDRA_OK || fi.type != QT_F32)
            continue;
        double e = relative_error(&qi, &fi);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Every writable type dequantises to the F32 file's weights (same seed: the
 * same underlying values) within its allowed error.  Rows of 256 suit
 * every block size; two experts keep the slow quantisers quick.  Measured
 * worst errors sit about half-way to the bounds (Q4_K 0.069 of 0.177). */
TEST(synth_every_writable_type_round_trips)
{
    synth_params p;
    hydra_model *f;
    CHECK_OK(synth_preset("qwen3moe-tiny", &p));
    p.n_layer = 1, p.n_embd = 256, p.head_dim = 64, p.n_ff_exp = 256, p.n_expert = 2, p.n_expert_used = 1;
    p.type = QT_F32;
    CHECK_OK(util_open_synth(&p, "types-f32.gguf", &f));
    int n_types = 0;
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        hydra_model *q;
        if (!synth_type_writable(t) || t == QT_F32)
            continue;
        p.type = t;
        hydra_status st = util_open_synth(&p, "types-q.gguf", &q);
        if (st != HYDRA_OK) {
            hydra_model_close(f);
            FAIL("%s: %s", quant_traits_of(t)->name, hydra_last_error());
        }
        double e = worst_error(q, f, t);
        hydra_model_close(q);
        if (!(e <= allowed_error(t))) {
            hydra_model_close(f);
            FAIL("%s: relative RMS error %g, allowed %g", quant_traits_of(t)->name, e, allowed_error(t));
        }
        n_types++;
    }
    hydra_model_close(f);
    CHECK(n_types >= 3); /* F16, BF16, Q8_0 at least */
}

/* ------------------------------------------------------------ parameters */

static bool rejected(const synth_params *p)
{
    return synth_check(p) != HYDRA_OK && hydra_last_error()[0] != '\0';
}

TEST(synth_rejects_impossible_shapes)
{
    synth_params base, p;
    CHECK_OK(synth_preset("tiny", &base));
    CHECK_OK(synth_check(&base));
    p = base, p.n_expert_used = p.n_expert + 1;
    CHECK(rejected(&p));
    p = base, p.n_head = 3; /* 3 heads cannot share 2 KV heads */
    CHECK(rejected(&p));
    p = base, p.n_ff_exp = 0;
    CHECK(rejected(&p));
    p = base, p.n_embd = 48; /* rows of 48 do not split into Q8_0 blocks of 32 */
    CHECK(rejected(&p));
    p = base, p.arch = "gpt-2";
    CHECK(rejected(&p));
    p = base, p.type = QT_Q8_K; /* an activation format, not a weight format */
    CHECK(rejected(&p));
    p = base, p.n_vocab = 100; /* below the 256 byte tokens */
    CHECK(rejected(&p));
    CHECK_OK(synth_preset("mixtral-tiny", &p));
    p.head_dim = 64; /* llama takes head_dim = n_embd / n_head */
    CHECK(rejected(&p));
}

/* Qwen3-30B-A3B's shape adds up to its published size (30.5 B parameters):
 * computed here from the shape, not by the writer. */
TEST(synth_qwen3_30b_preset_has_the_real_size)
{
    synth_params p;
    CHECK_OK(synth_preset("qwen3-30b-a3b", &p));
    const uint64_t E = 2048, V = 151936, L = 48, X = 128, F = 768, Q = 32 * 128, KV = 4 * 128;
    uint64_t matrices = 2 * E * V + L * (E * Q + 2 * E * KV + Q * E + 3 * E * F * X);
    uint64_t f32_values = E + L * (2 * E + 2 * 128 + E * X);
    CHECK_EQ_U64(synth_data_bytes(&p), matrices / 32 * 34 + f32_values * 4);
    CHECK(matrices + f32_values > 30400000000ull && matrices + f32_values < 30600000000ull);
}

/* The big preset's code path, cut down to one layer, four experts and a
 * padded vocabulary of 4096 so that the test stays small. */
TEST(synth_reduced_qwen3_30b_writes_and_opens)
{
    synth_params p;
    hydra_model *m;
    char why[256] = "";
    CHECK_OK(synth_preset("qwen3-30b-a3b", &p));
    p.n_layer = 1, p.n_expert = 4, p.n_expert_used = 2, p.n_vocab = 4096;
    CHECK_OK(util_open_synth(&p, "qwen3-30b-reduced.gguf", &m));
    bool ok = tensor_is(m, "blk.0.attn_q.weight", QT_Q8_0, 2048, 4096, 0, why, sizeof why) &&
              tensor_is(m, "blk.0.attn_k_norm.weight", QT_F32, 128, 0, 0, why, sizeof why) &&
              tensor_is(m, "blk.0.ffn_up_exps.weight", QT_Q8_0, 2048, 768, 4, why, sizeof why) &&
              tensor_is(m, "token_embd.weight", QT_Q8_0, 2048, 4096, 0, why, sizeof why);
    uint64_t bytes = hydra_model_n_bytes(m);
    hydra_model_close(m);
    remove(util_scratch_path("qwen3-30b-reduced.gguf"));
    if (!ok)
        FAIL("%s", why);
    CHECK_EQ_U64(bytes, synth_data_bytes(&p));
}

static bool cancel_at_half(uint64_t done, uint64_t total, void *user)
{
    (void)user;
    return done < total / 2;
}

TEST(synth_cancel_removes_the_partial_file)
{
    synth_params p;
    char path[4096];
    CHECK_OK(synth_preset("tiny", &p));
    p.progress = cancel_at_half;
    snprintf(path, sizeof path, "%s", util_scratch_path("cancelled.gguf"));
    CHECK_EQ_INT(synth_write(path, &p), HYDRA_ERR_CANCELLED);
    FILE *fp = fopen(path, "rb");
    if (fp)
        fclose(fp);
    CHECK(fp == NULL);
}

/* ------------------------------------------------------------ the engine */

/* A synthetic model binds and evaluates in the CPU engine with finite
 * logits (an architecture the engine does not run yet is skipped). */
static void check_runs(test_ctx *t_, const char *preset)
{
    synth_params p;
    hydra_model *m;
    char file[64];
    CHECK_OK(synth_preset(preset, &p));
    snprintf(file, sizeof file, "engine-%s.gguf", preset);
    CHECK_OK(util_open_synth(&p, file, &m));
    size_t nonfinite = 0;
    hydra_status st = util_model_nonfinite(m, &nonfinite);
    hydra_model_close(m);
    if (st == HYDRA_ERR_UNSUPPORTED)
        SKIP("%s: %s", preset, hydra_last_error());
    CHECK_OK(st);
    CHECK_EQ_U64(nonfinite, 0);
}

TEST(synth_qwen3moe_runs_in_the_engine) { check_runs(TEST_CTX, "tiny"); }
TEST(synth_llama_runs_in_the_engine) { check_runs(TEST_CTX, "mixtral-tiny"); }
TEST(synth_qwen2moe_runs_in_the_engine) { check_runs(TEST_CTX, "qwen2moe-tiny"); }
TEST(synth_deepseek2_runs_in_the_engine) { check_runs(TEST_CTX, "deepseek2-tiny"); }
TEST(synth_gptoss_runs_in_the_engine) { check_runs(TEST_CTX, "gptoss-tiny"); }
