/*
 * The CPU-only hybrid split (HYDRA_HYBRID_CPU_SPLIT) through the public
 * API, on the tiny models of ../shared/models: with 0%, 50% and 100% of
 * every MoE layer's experts in the host slab, the prompt's logits (one
 * batch) must equal the un-split engine's within the model's bars in
 * ../shared/ref/tolerances.json (and still pass llama.cpp's reference),
 * and the 32-token greedy continuation (decode steps) must be the same
 * tokens.  With no expert resident the split computes exactly what the
 * un-split engine does, so its logits are bit-identical.  One test per
 * architecture; the quantised files put real block layouts in the slab.
 */
#include "hydra.h"
#include "refcheck.h"
#include "test.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_CTX = 512, N_FRACTIONS = 3 };

static const double fractions[N_FRACTIONS] = {0.0, 0.5, 1.0};

/* One configuration's outputs. */
typedef struct run_out {
    float *rows;               /* REF_PROMPT x n_vocab */
    int32_t greedy[REF_GREEDY];
    hydra_hybrid_stats stats;
} run_out;

static hydra_status open_model(const char *name, hydra_model **m)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/%s.gguf", test_shared_dir(), name);
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    return hydra_model_open(m, &mp);
}

/* The prompt in one batch (every row's logits), then greedy decode. */
static hydra_status run(hydra_model *m, const ref_case *r, hydra_hybrid_mode mode, double fraction, run_out *out)
{
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = N_CTX;
    p.n_threads = 2;
    p.kv_type = HYDRA_KV_F32;
    p.hybrid = mode;
    p.resident_fraction = fraction;
    hydra_session *s = NULL;
    hydra_status st = hydra_session_create(&s, m, &p);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, r->prompt, REF_PROMPT, out->rows);
    for (int i = 0; i < REF_GREEDY && st == HYDRA_OK; i++) {
        out->greedy[i] = ref_argmax(hydra_session_logits(s), r->n_vocab);
        st = hydra_session_decode(s, out->greedy[i]);
    }
    if (st == HYDRA_OK)
        st = hydra_session_hybrid_stats(s, &out->stats);
    hydra_session_free(s);
    return st;
}

static bool bit_identical(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, sizeof(float) * n) == 0;
}

static void check_split(test_ctx *t_, const char *name)
{
    REQUIRE_SHARED();
    ref_case r = {0};
    if (!ref_load(name, &r))
        FAIL("%s: cannot read its reference or tolerances", name);
    char path[512];
    float *want = ref_read_logits(ref_logits_path(name, path, sizeof path), r.n_vocab, NULL);
    hydra_model *m = NULL;
    const size_t n_rows = (size_t)REF_PROMPT * (size_t)r.n_vocab;
    run_out base = {.rows = malloc(sizeof(float) * n_rows)}, split = {.rows = malloc(sizeof(float) * n_rows)};
    hydra_status st = want && base.rows && split.rows ? open_model(name, &m) : HYDRA_ERR_NOMEM;
    if (st == HYDRA_OK)
        st = run(m, &r, HYDRA_HYBRID_OFF, 0.0, &base);
    char fails[1024] = "";
    for (int f = 0; f < N_FRACTIONS && st == HYDRA_OK; f++) {
        if ((st = run(m, &r, HYDRA_HYBRID_CPU_SPLIT, fractions[f], &split)) != HYDRA_OK)
            break;
        const ref_score vs_base = ref_score_rows(base.rows, split.rows, REF_PROMPT, r.n_vocab);
        const ref_score vs_ref = ref_score_rows(want, split.rows, REF_PROMPT, r.n_vocab);
        const bool same_greedy = memcmp(base.greedy, split.greedy, sizeof base.greedy) == 0;
        const bool exact = bit_identical(base.rows, split.rows, n_rows);
        printf("  %s %3.0f%% resident (%" PRIu64 " of %" PRIu64 " slots): KL vs un-split %.3g, vs llama.cpp %.3g, "
               "top-1 %.3f, greedy %s, %s\n", name, 100 * fractions[f], split.stats.n_resident,
               split.stats.n_experts, vs_base.kl, vs_ref.kl, vs_base.top1, same_greedy ? "same" : "DIFFERS",
               exact ? "bit-identical" : "not bit-identical");
        if (!ref_passes(&r, vs_base) || !ref_passes(&r, vs_ref) || !same_greedy || (fractions[f] == 0.0 && !exact))
            snprintf(fails + strlen(fails), sizeof fails - strlen(fails), " %.0f%%", 100 * fractions[f]);
    }
    const char *err = hydra_last_error();
    hydra_model_close(m);
    free(base.rows);
    free(split.rows);
    free(want);
    if (st != HYDRA_OK)
        FAIL("%s: %s: %s", name, hydra_strerror(st), err);
    if (fails[0] != '\0')
        FAIL("%s: the split differs from the un-split engine at%s resident", name, fails);
}

TEST(hybrid_split_matches_unsplit_qwen3moe)
{
    check_split(t_, "qwen3moe-tiny-q8_0");
}

TEST(hybrid_split_matches_unsplit_mixtral)
{
    check_split(t_, "mixtral-tiny-q4_0");
}

TEST(hybrid_split_matches_unsplit_qwen2moe_shared_expert)
{
    check_split(t_, "qwen2moe-tiny-q8_0");
}

TEST(hybrid_split_matches_unsplit_deepseek2)
{
    check_split(t_, "deepseek2-tiny-q8_0");
}

TEST(hybrid_split_matches_unsplit_gptoss_expert_biases)
{
    check_split(t_, "gptoss-tiny-mxfp4");
}

TEST(hybrid_split_matches_unsplit_qwen3moe_k_quants)
{
    check_split(t_, "qwen3moe-kq-q4_k_m");
}
