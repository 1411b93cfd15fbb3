/*
 * hydra-serve's logprobs in OpenAI's shapes: chat's logprobs.content
 * (token, logprob, bytes, top_logprobs), the same per streamed chunk, and
 * the legacy completions' tokens / token_logprobs / top_logprobs /
 * text_offset; values are the model's distribution (log-probabilities of a
 * softmax: never above 0, alternatives most probable first, their
 * probabilities summing to at most 1; greedy picks the first alternative).
 */
#include "server/server_util.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *post_json(int port, const char *path, const char *body, int *status)
{
    ts_resp r;
    *status = 0;
    if (!ts_request(port, "POST", path, NULL, body, &r))
        return NULL;
    *status = r.status;
    cJSON *j = ts_json(&r);
    ts_resp_free(&r);
    return j;
}

static const cJSON *at(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* One chat logprobs entry is well-formed: token, logprob <= 0, bytes,
 * n_top alternatives in descending order whose probabilities sum to <= 1,
 * the chosen token first among them when greedy. */
static bool chat_entry_ok(const cJSON *e, int n_top, bool greedy)
{
    const cJSON *token = at(e, "token"), *lp = at(e, "logprob"), *bytes = at(e, "bytes"), *top = at(e, "top_logprobs");
    if (!cJSON_IsString(token) || !cJSON_IsNumber(lp) || lp->valuedouble > 0 || !cJSON_IsArray(bytes) ||
        !cJSON_IsArray(top) || cJSON_GetArraySize(top) != n_top)
        return false;
    double prev = 0, mass = 0;
    for (int i = 0; i < n_top; i++) {
        const cJSON *alt = cJSON_GetArrayItem(top, i), *alp = at(alt, "logprob");
        if (!cJSON_IsString(at(alt, "token")) || !cJSON_IsNumber(alp) || alp->valuedouble > prev + 1e-6 ||
            !cJSON_IsArray(at(alt, "bytes")))
            return false;
        prev = alp->valuedouble;
        mass += exp(alp->valuedouble);
    }
    if (mass > 1 + 1e-4)
        return false;
    const cJSON *first = cJSON_GetArrayItem(top, 0);
    return !greedy || (strcmp(at(first, "token")->valuestring, token->valuestring) == 0 &&
                       fabs(at(first, "logprob")->valuedouble - lp->valuedouble) < 1e-6);
}

TEST(server_logprobs_chat_shape)
{
    test_server s;
    TS_START(s, NULL, "");
    int status;
    cJSON *j = post_json(s.port, "/v1/chat/completions",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":5,"
                         "\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":3}",
                         &status);
    const cJSON *choice = cJSON_GetArrayItem(at(j, "choices"), 0);
    const cJSON *content = at(at(choice, "logprobs"), "content");
    bool ok = status == 200 && cJSON_IsArray(content) && cJSON_GetArraySize(content) == 5;
    for (int i = 0; ok && i < 5; i++)
        ok = chat_entry_ok(cJSON_GetArrayItem(content, i), 3, true);
    cJSON_Delete(j);
    TS_CHECK(s, ok);
    /* without top_logprobs: the chosen tokens only */
    j = post_json(s.port, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,\"ignore_eos\":true,"
                  "\"logprobs\":true}",
                  &status);
    content = at(at(cJSON_GetArrayItem(at(j, "choices"), 0), "logprobs"), "content");
    ok = status == 200 && cJSON_GetArraySize(content) == 2 && chat_entry_ok(cJSON_GetArrayItem(content, 0), 0, false);
    cJSON_Delete(j);
    TS_CHECK(s, ok);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_logprobs_off_is_null)
{
    test_server s;
    TS_START(s, NULL, "");
    int status;
    cJSON *j = post_json(s.port, "/v1/chat/completions",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,\"logprobs\":false}",
                         &status);
    const bool null = cJSON_IsNull(at(cJSON_GetArrayItem(at(j, "choices"), 0), "logprobs"));
    cJSON_Delete(j);
    TS_CHECK(s, status == 200 && null);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

/* Every streamed chunk's logprobs entries, counted. */
static int streamed_entries(const char *body, bool *ok)
{
    int n = 0;
    for (const char *p = strstr(body, "data: {"); p != NULL; p = strstr(p + 1, "data: {")) {
        const char *end = strstr(p, "\n\n");
        cJSON *ev = end ? cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6)) : NULL;
        const cJSON *content = at(at(cJSON_GetArrayItem(at(ev, "choices"), 0), "logprobs"), "content");
        for (int i = 0; i < cJSON_GetArraySize(content); i++)
            *ok = *ok && chat_entry_ok(cJSON_GetArrayItem(content, i), 2, true);
        n += cJSON_GetArraySize(content);
        *ok = *ok && ev != NULL;
        cJSON_Delete(ev);
    }
    return n;
}

TEST(server_logprobs_streamed_per_chunk)
{
    test_server s;
    TS_START(s, NULL, "");
    ts_resp r;
    TS_CHECK(s, ts_request(s.port, "POST", "/v1/chat/completions", NULL,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me\"}],\"max_tokens\":6,\"temperature\":0,"
                         "\"ignore_eos\":true,\"stream\":true,\"logprobs\":true,\"top_logprobs\":2}",
                         &r) &&
                  r.status == 200);
    bool ok = true;
    const int n = streamed_entries(r.body, &ok);
    ts_resp_free(&r);
    TS_CHECK(s, ok && n == 6);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_logprobs_completions_legacy_shape)
{
    test_server s;
    TS_START(s, NULL, "");
    int status;
    cJSON *j = post_json(s.port, "/v1/completions",
                         "{\"prompt\":\"The river runs\",\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true,"
                         "\"logprobs\":2}",
                         &status);
    const cJSON *lp = at(cJSON_GetArrayItem(at(j, "choices"), 0), "logprobs");
    const cJSON *tokens = at(lp, "tokens"), *lps = at(lp, "token_logprobs"), *tops = at(lp, "top_logprobs"),
                *offsets = at(lp, "text_offset");
    bool ok = status == 200 && cJSON_GetArraySize(tokens) == 4 && cJSON_GetArraySize(lps) == 4 &&
              cJSON_GetArraySize(tops) == 4 && cJSON_GetArraySize(offsets) == 4;
    double offset = 0;
    for (int i = 0; ok && i < 4; i++) {
        const cJSON *top = cJSON_GetArrayItem(tops, i), *tok = cJSON_GetArrayItem(tokens, i);
        const cJSON *chosen = cJSON_GetObjectItemCaseSensitive(top, tok->valuestring);
        ok = cJSON_IsString(tok) && cJSON_IsObject(top) && cJSON_GetArraySize(top) >= 1 && cJSON_GetArraySize(top) <= 2 &&
             cJSON_GetArrayItem(lps, i)->valuedouble <= 0 && chosen != NULL && /* greedy: the chosen is among the top */
             cJSON_GetArrayItem(offsets, i)->valuedouble >= offset;
        offset = cJSON_GetArrayItem(offsets, i)->valuedouble;
    }
    cJSON_Delete(j);
    TS_CHECK(s, ok);
    CHECK_EQ_INT(ts_stop(&s), 0);
}

TEST(server_logprobs_bad_fields_are_400)
{
    static const struct {
        const char *path, *body, *message;
    } cases[] = {
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}",
         "top_logprobs: requires"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":1}",
         "logprobs: expected a boolean"},
        {"/v1/completions", "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs"},
    };
    test_server s;
    TS_START(s, NULL, "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ts_resp r;
        const bool ok = ts_request(s.port, "POST", cases[i].path, NULL, cases[i].body, &r) &&
                        ts_is_error(&r, 400, "invalid_request_error", cases[i].message);
        ts_resp_free(&r);
        TS_CHECK(s, ok);
    }
    CHECK_EQ_INT(ts_stop(&s), 0);
}
