/*
 * The synthetic writer's benchmark styles: the fast style (weight rows
 * copied from a pool of SYNTH_FAST_POOL_ROWS quantised rows) and the skewed
 * router.  Both stay reproducible and independent of the thread count,
 * and the files run in the engine.
 */
#include "hydra.h"
#include "quant.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>

static uint8_t *write_and_read(const synth_params *p, const char *name, size_t *size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", util_scratch_path(name));
    return synth_write(path, p) == HYDRA_OK ? util_read_file(path, size) : NULL;
}

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
    p.n_threads = 1;
    size_t na = 0, nb = 0;
    uint8_t *a = write_and_read(&p, "fast-1.gguf", &na);
    p.n_threads = 3;
    uint8_t *b = write_and_read(&p, "fast-3.gguf", &nb);
    bool same = a && b && na == nb && memcmp(a, b, na) == 0;
    free(a);
    free(b);
    CHECK(same);
}

/* A fast expert tensor holds at most SYNTH_FAST_POOL_ROWS distinct rows,
 * and not just one; routers (F32) are drawn as in the normal style. */
TEST(synth_fast_rows_come_from_the_pool)
{
    synth_params p;
    fast_params(&p);
    char path[4096];
    snprintf(path, sizeof path, "%s", util_scratch_path("fast-pool.gguf"));
    CHECK_OK(synth_write(path, &p));
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    hydra_model *m;
    CHECK_OK(hydra_model_open(&m, &mp));
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
    char path[4096];
    snprintf(path, sizeof path, "%s", util_scratch_path("fast-skew.gguf"));
    CHECK_OK(synth_write(path, &p));
    hydra_model_params mp = hydra_model_default_params();
    mp.path = path;
    hydra_model *m;
    CHECK_OK(hydra_model_open(&m, &mp));
    hydra_session_params sp = hydra_session_default_params();
    sp.n_ctx = 32, sp.n_threads = 2;
    hydra_session *s = NULL;
    hydra_status st = hydra_session_create(&s, m, &sp);
    const int32_t tokens[4] = {1, 100, 200, 300};
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, tokens, 4, NULL);
    size_t nonfinite = 0;
    for (uint32_t i = 0; st == HYDRA_OK && i < hydra_session_n_vocab(s); i++)
        nonfinite += !isfinite(hydra_session_logits(s)[i]);
    hydra_session_free(s);
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
