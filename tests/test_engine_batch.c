/*
 * hydra_session_eval_batch: tokens of several sessions in one forward pass
 * must leave every session exactly as evaluating it alone does: the same
 * logits, bit for bit (a row's kernels never depend on the other rows), and
 * the same positions, over prefill chunks, decode steps and mixes of both,
 * for every architecture (the generic attention, MLA's hook, sliding
 * windows with sinks).  Bad batches fail and evaluate nothing.
 */
#include "hydra.h"
#include "synth.h"
#include "test.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_SEQ = 3, N_CTX = 256, N_BATCH = 32 };

typedef struct fixture {
    hydra_model *model;
    hydra_session *batched[N_SEQ], *alone[N_SEQ];
    int32_t n_vocab;
} fixture;

static void fixture_free(fixture *fx)
{
    for (int i = 0; i < N_SEQ; i++) {
        hydra_session_free(fx->batched[i]);
        hydra_session_free(fx->alone[i]);
    }
    hydra_model_close(fx->model);
}

static hydra_status fixture_open(fixture *fx, const char *preset)
{
    memset(fx, 0, sizeof *fx);
    hydra_status st = util_open_synth_preset(preset, "batch", &fx->model);
    hydra_session_params p = hydra_session_default_params();
    p.n_ctx = N_CTX;
    p.n_batch = N_BATCH;
    p.n_threads = 2;
    for (int i = 0; i < N_SEQ && st == HYDRA_OK; i++) {
        st = hydra_session_create(&fx->batched[i], fx->model, &p);
        if (st == HYDRA_OK)
            st = hydra_session_create(&fx->alone[i], fx->model, &p);
    }
    if (st == HYDRA_OK)
        fx->n_vocab = (int32_t)hydra_session_n_vocab(fx->alone[0]);
    return st;
}

/* Deterministic token ids of sequence i's k-th token. */
static int32_t token_of(const fixture *fx, int i, int k)
{
    return (int32_t)((1 + i * 131 + k * 37) % fx->n_vocab);
}

/* Whether session i's batched and alone logits and positions are equal. */
static bool same(const fixture *fx, int i, char *why, size_t len)
{
    const float *a = hydra_session_logits(fx->batched[i]), *b = hydra_session_logits(fx->alone[i]);
    if (hydra_session_n_past(fx->batched[i]) != hydra_session_n_past(fx->alone[i]) || a == NULL || b == NULL) {
        snprintf(why, len, "session %d: n_past %u vs %u", i, hydra_session_n_past(fx->batched[i]),
                 hydra_session_n_past(fx->alone[i]));
        return false;
    }
    for (int32_t v = 0; v < fx->n_vocab; v++)
        if (memcmp(&a[v], &b[v], sizeof(float)) != 0) {
            snprintf(why, len, "session %d, logit %d: %.9g batched vs %.9g alone", i, (int)v, (double)a[v],
                     (double)b[v]);
            return false;
        }
    return true;
}

/* One batched step over the sessions in `which` with n[i] tokens each, and
 * the same tokens evaluated alone; *pos[i] counts the tokens given. */
static bool step(fixture *fx, const int *which, const size_t *n, int n_which, int *pos, char *why, size_t len)
{
    hydra_session *ss[N_SEQ];
    int32_t buf[N_SEQ][N_BATCH];
    const int32_t *toks[N_SEQ];
    for (int j = 0; j < n_which; j++) {
        const int i = which[j];
        for (size_t k = 0; k < n[j]; k++)
            buf[j][k] = token_of(fx, i, pos[i] + (int)k);
        ss[j] = fx->batched[i];
        toks[j] = buf[j];
        if (hydra_session_eval(fx->alone[i], buf[j], n[j], NULL) != HYDRA_OK) {
            snprintf(why, len, "alone: %s", hydra_last_error());
            return false;
        }
        pos[i] += (int)n[j];
    }
    if (hydra_session_eval_batch(ss, toks, n, (size_t)n_which) != HYDRA_OK) {
        snprintf(why, len, "batch: %s", hydra_last_error());
        return false;
    }
    for (int j = 0; j < n_which; j++)
        if (!same(fx, which[j], why, len))
            return false;
    return true;
}

static void check_arch(test_ctx *t_, const char *preset)
{
    fixture fx;
    char why[256];
    hydra_status st = fixture_open(&fx, preset);
    if (st != HYDRA_OK) {
        fixture_free(&fx);
        FAIL("%s: %s", preset, hydra_last_error());
    }
    int pos[N_SEQ] = {0};
    static const int all[N_SEQ] = {0, 1, 2}, first_last[2] = {0, 2}, middle[1] = {1};
    /* prefill of different lengths, one pass */
    const size_t prefill[N_SEQ] = {7, 13, 1};
    bool ok = step(&fx, all, prefill, N_SEQ, pos, why, sizeof why);
    /* decode steps, sometimes without a session */
    const size_t one[N_SEQ] = {1, 1, 1};
    for (int k = 0; k < 6 && ok; k++)
        ok = k % 3 == 2 ? step(&fx, first_last, one, 2, pos, why, sizeof why)
                        : step(&fx, all, one, N_SEQ, pos, why, sizeof why);
    /* decode beside a prompt chunk, and a session alone in a "batch" */
    const size_t mixed[N_SEQ] = {1, 9, 1};
    if (ok)
        ok = step(&fx, all, mixed, N_SEQ, pos, why, sizeof why);
    const size_t chunk[1] = {N_BATCH};
    if (ok)
        ok = step(&fx, middle, chunk, 1, pos, why, sizeof why);
    fixture_free(&fx);
    if (!ok)
        FAIL("%s: %s", preset, why);
}

TEST(engine_batch_matches_alone_qwen3moe)
{
    check_arch(TEST_CTX, "qwen3moe-tiny");
}

TEST(engine_batch_matches_alone_mixtral)
{
    check_arch(TEST_CTX, "mixtral-tiny");
}

TEST(engine_batch_matches_alone_qwen2moe)
{
    check_arch(TEST_CTX, "qwen2moe-tiny");
}

TEST(engine_batch_matches_alone_deepseek2_mla)
{
    check_arch(TEST_CTX, "deepseek2-tiny");
}

TEST(engine_batch_matches_alone_gptoss_sliding)
{
    check_arch(TEST_CTX, "gptoss-tiny");
}

TEST(engine_batch_refuses_bad_batches_evaluating_nothing)
{
    fixture fx;
    CHECK_OK(fixture_open(&fx, "qwen3moe-tiny"));
    int32_t toks[N_BATCH + 1] = {1, 2, 3};
    const int32_t *tt[2] = {toks, toks};
    hydra_session *twice[2] = {fx.batched[0], fx.batched[0]};
    hydra_session *pair[2] = {fx.batched[0], fx.batched[1]};
    const size_t n1[2] = {1, 1}, n0[2] = {1, 0}, big[2] = {N_BATCH, 1};
    hydra_status same_twice = hydra_session_eval_batch(twice, tt, n1, 2);
    hydra_status empty = hydra_session_eval_batch(pair, tt, n0, 2);
    hydra_status too_many = hydra_session_eval_batch(pair, tt, big, 2);
    toks[0] = fx.n_vocab;
    hydra_status bad_id = hydra_session_eval_batch(pair, tt, n1, 2);
    hydra_status none = hydra_session_eval_batch(pair, tt, n1, 0);
    const uint32_t past0 = hydra_session_n_past(fx.batched[0]), past1 = hydra_session_n_past(fx.batched[1]);
    fixture_free(&fx);
    CHECK_EQ_INT(same_twice, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(empty, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(too_many, HYDRA_ERR_RANGE);
    CHECK_EQ_INT(bad_id, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(none, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(past0, 0);
    CHECK_EQ_INT(past1, 0);
}
