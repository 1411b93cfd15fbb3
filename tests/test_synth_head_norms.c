/*
 * Zeroed head norms (synth_params.zero_head_norms, hydra-mkmodel
 * --zero-head-norms): output_norm and every MTP block's shared_head_norm
 * are written as zeros and nothing else changes, so every logit is 0 (the
 * 100%-acceptance benchmark files of docs/SPECULATIVE.md).
 */
#include "hydra.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static bool is_head_norm(const char *name)
{
    size_t n = strlen(name), k = strlen("shared_head_norm.weight");
    return strcmp(name, "output_norm.weight") == 0 || (n >= k && strcmp(name + n - k, "shared_head_norm.weight") == 0);
}

static bool all_zero(const hydra_tensor_info *ti)
{
    const uint8_t *d = ti->data;
    for (uint64_t i = 0; i < ti->n_bytes; i++)
        if (d[i] != 0)
            return false;
    return true;
}

/* Compares every tensor of the zeroed file with the plain one (same seed):
 * head norms all zero there and not in the plain file, the rest identical.
 * Returns the first tensor that breaks this (NULL: none). */
static const char *differs_from_plain(const hydra_model *zeroed, const hydra_model *plain, int *n_head_norms)
{
    size_t n = hydra_model_tensor_count(zeroed);
    if (n != hydra_model_tensor_count(plain))
        return "(the tensor count)";
    for (size_t i = 0; i < n; i++) {
        hydra_tensor_info z, p;
        if (hydra_model_tensor_at(zeroed, i, &z) != HYDRA_OK || hydra_model_tensor_at(plain, i, &p) != HYDRA_OK ||
            strcmp(z.name, p.name) != 0 || z.n_bytes != p.n_bytes)
            return "(a tensor's name or size)";
        bool head_norm = is_head_norm(z.name);
        *n_head_norms += head_norm;
        if (head_norm ? !all_zero(&z) || all_zero(&p) : memcmp(z.data, p.data, z.n_bytes) != 0)
            return z.name;
    }
    return NULL;
}

TEST(synth_zero_head_norms_zeroes_only_the_head_norms)
{
    synth_params p;
    CHECK_OK(synth_preset("deepseek2-mtp-tiny", &p));
    hydra_model *plain = NULL, *zeroed = NULL;
    CHECK_OK(util_open_synth(&p, "head-norms-plain.gguf", &plain));
    p.zero_head_norms = true;
    hydra_status st = util_open_synth(&p, "head-norms-zero.gguf", &zeroed);
    int n_head_norms = 0;
    const char *bad = st == HYDRA_OK ? differs_from_plain(zeroed, plain, &n_head_norms) : NULL;
    hydra_model_close(zeroed);
    hydra_model_close(plain);
    CHECK_OK(st);
    if (bad != NULL)
        FAIL("%s: not as the plain file's (head norms: all zero; other tensors: the same bytes)", bad);
    CHECK_EQ_INT(n_head_norms, 2); /* output_norm and blk.3.nextn.shared_head_norm */
}

/* The tool's flag, end to end: the CPU engine's logits are all exactly 0. */
TEST(mkmodel_zero_head_norms_gives_zero_logits)
{
    char path[4096], args[4400];
    tool_run r;
    snprintf(path, sizeof path, "%s", util_scratch_path("mk-zero-head.gguf"));
    snprintf(args, sizeof args, "-o %s --preset deepseek2-mtp-tiny --zero-head-norms", path);
    CHECK(util_run_tool(NULL, "hydra-mkmodel", args, NULL, &r));
    int status = r.status;
    tool_run_free(&r);
    CHECK_EQ_INT(status, 0);
    hydra_model *m = NULL;
    CHECK_OK(util_open_model(path, &m));
    hydra_tensor_info out_norm = {0}, shared = {0};
    hydra_status st = hydra_model_tensor_find(m, "output_norm.weight", &out_norm);
    if (st == HYDRA_OK)
        st = hydra_model_tensor_find(m, "blk.3.nextn.shared_head_norm.weight", &shared);
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = 32, sp.n_threads = 2, sp.backend = HYDRA_BACKEND_CPU;
    hydra_session *s = NULL;
    if (st == HYDRA_OK)
        st = hydra_session_create(&s, m, &sp);
    static const int32_t tokens[3] = {1, 17, 42};
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, tokens, 3, NULL);
    uint32_t n_vocab = 0, nonzero = 0;
    if (st == HYDRA_OK)
        n_vocab = hydra_session_n_vocab(s);
    for (uint32_t i = 0; i < n_vocab; i++)
        nonzero += hydra_session_logits(s)[i] != 0.0f;
    bool zeroed = st == HYDRA_OK && all_zero(&out_norm) && all_zero(&shared);
    hydra_session_free(s);
    hydra_model_close(m);
    CHECK_OK(st);
    CHECK(zeroed);
    CHECK(n_vocab > 0);
    CHECK_EQ_U64(nonzero, 0);
}

/* The benchmark it is for: greedy with the MTP drafter keeps every draft
 * (target and MTP head both see all-zero logits, so both pick token 0). */
TEST(synth_zero_head_norms_keeps_every_mtp_draft)
{
    synth_params p;
    CHECK_OK(synth_preset("deepseek2-mtp-tiny", &p));
    p.zero_head_norms = true;
    hydra_model *m = NULL;
    CHECK_OK(util_open_synth(&p, "head-norms-mtp.gguf", &m));
    hydra_session_params sessp = hydra_session_default_params();
    sessp.n_ctx = 64, sessp.n_threads = 2, sessp.backend = HYDRA_BACKEND_CPU;
    hydra_sampler_params sampling = hydra_sampler_default_params();
    sampling.temperature = 0;
    hydra_spec_params pp = hydra_spec_default_params();
    pp.n_draft_max = 3, pp.p_min = 0;
    hydra_session *s = NULL;
    hydra_spec *spec = NULL;
    static const hydra_token prompt[3] = {1, 17, 42};
    enum { N_GEN = 16 };
    hydra_token out[N_GEN] = {0};
    hydra_spec_stats stats = {0};
    hydra_status st = hydra_session_create(&s, m, &sessp);
    if (st == HYDRA_OK)
        st = hydra_spec_new(s, NULL, &sampling, &pp, &spec);
    if (st == HYDRA_OK)
        st = hydra_spec_start(spec, prompt, 3);
    for (size_t done = 0, got = 0; st == HYDRA_OK && done < N_GEN; done += got)
        st = hydra_spec_step(spec, N_GEN - done, out + done, &got);
    if (spec != NULL)
        hydra_spec_get_stats(spec, &stats);
    hydra_spec_free(spec);
    hydra_session_free(s);
    hydra_model_close(m);
    CHECK_OK(st);
    for (int i = 0; i < N_GEN; i++)
        CHECK_EQ_INT(out[i], 0);
    CHECK(stats.n_drafted > 0);
    CHECK_EQ_U64(stats.n_accepted, stats.n_drafted);
}
