/*
 * The synthetic writer's benchmark styles: the fast style (weight rows
 * copied from a pool of SYNTH_FAST_POOL_ROWS quantised rows) and the skewed
 * router.  Both stay reproducible and independent of the thread count,
 * and the files run in the engine.
 */
#include "expert_rank.h"
#include "hydra.h"
#include "quant.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>

/* Expert tensors of 4096 rows: many more than the pool. */
static void fast_params(synth_params *p)
{
    synth_preset("qwen3moe-tiny", p);
    p->n_embd = 256, p->n_ff_exp = 512;
    p->fast = true;
}

TEST(synth_fast_does_not_depend_on_threads)
{
    synth_params p;
    fast_params(&p);
    synth_params three = p;
    p.n_threads = 1;
    three.n_threads = 3;
    CHECK(util_synth_same_bytes(&p, "fast-1.gguf", &three, "fast-3.gguf"));
}

/* A fast expert tensor holds at most SYNTH_FAST_POOL_ROWS distinct rows,
 * and not just one; routers (F32) are drawn as in the normal style. */
TEST(synth_fast_rows_come_from_the_pool)
{
    synth_params p;
    fast_params(&p);
    hydra_model *m;
    CHECK_OK(util_open_synth(&p, "fast-pool.gguf", &m));
    hydra_tensor_info ti;
    CHECK_OK(hydra_model_tensor_find(m, "blk.0.ffn_up_exps.weight", &ti));
    uint64_t rows = ti.ne[1] * ti.ne[2], row_bytes = ti.n_bytes / rows, distinct = 0;
    const uint8_t *d = ti.data;
    /* rows equal to no earlier row among the first 1024 */
    for (uint64_t r = 0; r < 1024 && r < rows; r++) {
        bool seen = false;
        for (uint64_t q = 0; q < r && !seen; q++)
            seen = memcmp(d + r * row_bytes, d + q * row_bytes, row_bytes) == 0;
        distinct += !seen;
    }
    hydra_model_close(m);
    CHECK(rows > 2 * SYNTH_FAST_POOL_ROWS);
    CHECK(distinct <= SYNTH_FAST_POOL_ROWS);
    CHECK(distinct > SYNTH_FAST_POOL_ROWS / 2);
}

/* Fast and skewed files evaluate to finite logits. */
TEST(synth_fast_skewed_file_runs_in_the_engine)
{
    synth_params p;
    fast_params(&p);
    p.router_skew = 2.0f;
    p.mix = SYNTH_MIX_Q4_K_M;
    p.head_dim = 64; /* attn_output rows of 4 x 64: whole Q4_K blocks */
    hydra_model *m;
    CHECK_OK(util_open_synth(&p, "fast-skew.gguf", &m));
    size_t nonfinite = 0;
    hydra_status st = util_model_nonfinite(m, &nonfinite);
    hydra_model_close(m);
    CHECK_OK(st);
    CHECK_EQ_U64(nonfinite, 0);
}

TEST(synth_rejects_out_of_range_skew)
{
    synth_params p;
    CHECK_OK(synth_preset("tiny", &p));
    p.router_skew = -1.0f;
    CHECK_EQ_INT(synth_check(&p), HYDRA_ERR_INVALID_ARG);
    p.router_skew = NAN;
    CHECK_EQ_INT(synth_check(&p), HYDRA_ERR_INVALID_ARG);
    p.router_skew = SYNTH_MAX_ROUTER_SKEW * 2;
    CHECK_EQ_INT(synth_check(&p), HYDRA_ERR_INVALID_ARG);
    p.router_skew = 1.5f;
    CHECK_OK(synth_check(&p));
}

/* Lookups of every MoE layer over 96 distinct tokens, evaluated in one
 * batch, of a 4-layer, 16-expert, top-2 file with the given skew. */
static hydra_status profile_skew(float skew, const char *name, expert_rank *r)
{
    synth_params p;
    synth_preset("qwen3moe-tiny", &p);
    p.n_layer = 4, p.n_expert = 16, p.n_expert_used = 2, p.router_skew = skew, p.fast = true;
    hydra_model *m = NULL;
    hydra_session *s = NULL;
    hydra_status st = util_open_synth(&p, name, &m);
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = 128, sp.n_threads = 2;
    if (st == HYDRA_OK)
        st = hydra_session_create(&s, m, &sp);
    int32_t tokens[96];
    for (int i = 0; i < 96; i++)
        tokens[i] = 3 + i * 7 % 250;
    if (st == HYDRA_OK)
        st = hydra_session_set_expert_profile(s, true, 0);
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, tokens, 96, NULL);
    const char *prof = util_scratch_path("skew-profile.txt");
    if (st == HYDRA_OK)
        st = hydra_session_save_expert_profile(s, prof, false);
    hydra_session_free(s);
    hydra_model_close(m);
    if (st == HYDRA_OK)
        st = expert_rank_init(r, (int)p.n_layer, (int)p.n_expert, NULL);
    return st == HYDRA_OK ? expert_rank_load(r, prof) : st;
}

/* The skewed router: every layer keeps many experts in use (no collapse
 * onto a few) and its top quarter serves clearly more than a quarter of
 * the lookups; a larger skew concentrates more. */
TEST(synth_router_skew_makes_popularity_skewed)
{
    expert_rank mild, strong;
    CHECK_OK(profile_skew(0.5f, "skew-05.gguf", &mild));
    hydra_status st = profile_skew(2.0f, "skew-2.gguf", &strong);
    double cov_mild = 0, cov_strong = 0;
    int min_used = 16;
    for (int l = 0; st == HYDRA_OK && l < 4; l++) {
        cov_mild += expert_rank_coverage(&mild, l, 4) / 4;
        cov_strong += expert_rank_coverage(&strong, l, 4) / 4;
        min_used = expert_rank_pinned(&mild, l) < min_used ? expert_rank_pinned(&mild, l) : min_used;
    }
    expert_rank_free(&mild);
    expert_rank_free(&strong);
    CHECK_OK(st);
    if (!(cov_mild > 0.3 && cov_mild < 0.8 && cov_strong > cov_mild + 0.1 && min_used >= 12))
        FAIL("top-4 coverage %.3f (skew 0.5), %.3f (skew 2); fewest experts used %d", cov_mild, cov_strong, min_used);
}
