/*
 * The session API's contract: argument errors evaluate nothing, the
 * context bound, truncation and clearing, and that the number of threads
 * and the step size do not change a single logit (rows and heads are
 * computed independently of how the work is split).
 */
#include "gguf_builder.h"
#include "hydra.h"
#include "test.h"
#include "util.h"

#include <stdlib.h>

TEST(engine_session_rejects_bad_input_and_keeps_its_state)
{
    REQUIRE_SHARED();
    hydra_model *m;
    hydra_session *s;
    CHECK_OK(util_open_shared_model("qwen3moe-tiny-q8_0", &m));
    hydra_status st = util_new_session(m, 16, 0, 1, &s);
    if (st != HYDRA_OK) {
        hydra_model_close(m);
        FAIL("create: %s", hydra_last_error());
    }
    const int32_t good[4] = {1, 2, 3, 4}, bad[3] = {5, 905, 6}, negative[1] = {-1};
    const float *before = hydra_session_logits(s);
    hydra_status st_bad = hydra_session_eval(s, bad, 3, NULL);
    hydra_status st_neg = hydra_session_eval(s, negative, 1, NULL);
    hydra_status st_empty = hydra_session_eval(s, good, 0, NULL);
    uint32_t past_after_bad = hydra_session_n_past(s);
    hydra_status st_good = hydra_session_eval(s, good, 4, NULL);
    const float *after = hydra_session_logits(s);
    int32_t many[13] = {0};
    hydra_status st_overflow = hydra_session_eval(s, many, 13, NULL); /* 4 + 13 > 16 */
    hydra_status st_trunc_far = hydra_session_truncate(s, 5);
    hydra_status st_trunc = hydra_session_truncate(s, 2);
    const float *after_trunc = hydra_session_logits(s);
    uint32_t past_after_trunc = hydra_session_n_past(s);
    hydra_status st_fill = hydra_session_eval(s, many, 13, NULL); /* 2 + 13 <= 16 */
    uint32_t past_after_fill = hydra_session_n_past(s);
    hydra_session_clear(s);
    uint32_t past_after_clear = hydra_session_n_past(s);
    const float *after_clear = hydra_session_logits(s);
    uint32_t n_vocab = hydra_session_n_vocab(s), n_ctx = hydra_session_n_ctx(s);
    hydra_session_free(s);
    hydra_model_close(m);
    CHECK(before == NULL);
    CHECK_EQ_INT(st_bad, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(st_neg, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(st_empty, HYDRA_ERR_INVALID_ARG);
    CHECK_EQ_INT(past_after_bad, 0);
    CHECK_OK(st_good);
    CHECK(after != NULL);
    CHECK_EQ_INT(st_overflow, HYDRA_ERR_RANGE);
    CHECK_EQ_INT(st_trunc_far, HYDRA_ERR_RANGE);
    CHECK_OK(st_trunc);
    CHECK(after_trunc == NULL);
    CHECK_EQ_INT(past_after_trunc, 2);
    CHECK_OK(st_fill);
    CHECK_EQ_INT(past_after_fill, 15);
    CHECK_EQ_INT(past_after_clear, 0);
    CHECK(after_clear == NULL);
    CHECK_EQ_INT(n_vocab, 905);
    CHECK_EQ_INT(n_ctx, 16);
}

TEST(engine_session_unsupported_architecture_fails_at_create)
{
    gguf_builder b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.architecture", HYDRA_VALUE_STRING);
    gb_cstr(&b, "mamba9");
    hydra_model *m = NULL;
    hydra_status st = gb_open(&b, true, &m);
    gb_free(&b);
    CHECK_OK(st);
    hydra_session *s = (hydra_session *)&m; /* must be reset to NULL */
    st = util_new_session(m, 64, 0, 1, &s);
    hydra_session_free(s);
    hydra_model_close(m);
    CHECK(s == NULL);
    CHECK_EQ_INT(st, HYDRA_ERR_UNSUPPORTED);
    CHECK(strstr(hydra_last_error(), "mamba9") != NULL);
    CHECK(strstr(hydra_last_error(), "deepseek2") != NULL && strstr(hydra_last_error(), "gpt-oss") != NULL);
}

enum { VOCAB_MAX = 1024 };

/* Logits of a prompt evaluated with the given threads and step size. */
static hydra_status logits_with(hydra_model *m, int n_threads, uint32_t n_batch, const int32_t *tokens, int n,
                                float *out, size_t *n_vocab)
{
    hydra_session *s;
    hydra_status st = util_new_session(m, 64, n_batch, n_threads, &s);
    if (st == HYDRA_OK && (*n_vocab = hydra_session_n_vocab(s)) > VOCAB_MAX)
        st = HYDRA_ERR_RANGE;
    if (st == HYDRA_OK)
        st = hydra_session_eval(s, tokens, (size_t)n, out);
    hydra_session_free(s);
    return st;
}

TEST(engine_session_threads_and_step_size_do_not_change_logits)
{
    REQUIRE_SHARED();
    enum { N = 37 };
    const char *const files[] = {"qwen3moe-tiny-q8_0", "qwen2moe-tiny-f32", "mixtral-tiny-f16"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        hydra_model *m;
        CHECK_OK(util_open_shared_model(files[f], &m));
        int32_t tokens[N];
        for (int i = 0; i < N; i++)
            tokens[i] = (i * 37 + 11) % 890;
        size_t n_vocab = 0;
        float *a = malloc(sizeof(float) * N * VOCAB_MAX), *b = malloc(sizeof(float) * N * VOCAB_MAX);
        hydra_status st = a && b ? logits_with(m, 1, 0, tokens, N, a, &n_vocab) : HYDRA_ERR_NOMEM;
        if (st == HYDRA_OK)
            st = logits_with(m, 3, 8, tokens, N, b, &n_vocab);
        hydra_model_close(m);
        int differ = 0;
        for (size_t i = 0; st == HYDRA_OK && i < (size_t)N * n_vocab; i++)
            differ += a[i] != b[i];
        free(a);
        free(b);
        if (st != HYDRA_OK)
            FAIL("%s: %s", files[f], hydra_last_error());
        if (differ)
            FAIL("%s: %d logits differ between 1 thread / one step and 3 threads / steps of 8", files[f], differ);
    }
}
