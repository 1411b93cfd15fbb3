/*
 * shape.c — responses in OpenAI's shapes (the chat.completion,
 * chat.completion.chunk and text_completion objects, usage with
 * prompt_tokens_details.cached_tokens), llama-server's `timings` object,
 * and the error object {"error":{"message","type","code"}}.
 */
#include "api.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    int status;
    const char *type;
} error_types[] = {
    {400, "invalid_request_error"}, {401, "authentication_error"}, {404, "not_found_error"},
    {405, "invalid_request_error"}, {408, "timeout_error"},        {409, "invalid_request_error"},
    {413, "invalid_request_error"}, {429, "rate_limit_error"},     {431, "invalid_request_error"},
    {501, "not_supported_error"},   {503, "unavailable_error"},
};

const char *shape_error_type(int status)
{
    for (size_t i = 0; i < sizeof error_types / sizeof error_types[0]; i++)
        if (error_types[i].status == status)
            return error_types[i].type;
    return "server_error";
}

cJSON *shape_error(int status, const char *message)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *err = cJSON_AddObjectToObject(root, "error");
    if (err == NULL || !cJSON_AddStringToObject(err, "message", message) ||
        !cJSON_AddStringToObject(err, "type", shape_error_type(status)) || !cJSON_AddNumberToObject(err, "code", status)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ------------------------------------------------------------ text */

/* Length of the well-formed UTF-8 sequence at s[0, n), 0 if there is none
 * (overlong forms, surrogates and values past U+10FFFF are not). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return s[0] != 0;
    size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (len == 0 || s[0] > 0xF4 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) || (s[0] == 0xF0 && s[1] < 0x90) ||
        (s[0] == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

cJSON *shape_string(const char *text, size_t len)
{
    sbuf b = {0};
    bool ok = sbuf_add(&b, "", 0);
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len && ok;) {
        size_t k = utf8_len(s + i, len - i);
        ok = k > 0 ? sbuf_add(&b, s + i, k) : sbuf_add(&b, "\xEF\xBF\xBD", 3);
        i += k > 0 ? k : 1;
    }
    cJSON *str = ok ? cJSON_CreateString(b.data) : NULL;
    sbuf_free(&b);
    return str;
}

/* ------------------------------------------------------------ pieces */

static const char *finish_reason(finish_kind f)
{
    return f == FINISH_LENGTH ? "length" : "stop";
}

static cJSON *head_object(const shape_head *h, bool chunk)
{
    cJSON *o = cJSON_CreateObject();
    const char *object = h->kind == API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    if (o == NULL || !cJSON_AddStringToObject(o, "id", h->id) || !cJSON_AddStringToObject(o, "object", object) ||
        !cJSON_AddNumberToObject(o, "created", (double)h->created) || !cJSON_AddStringToObject(o, "model", h->model) ||
        !cJSON_AddStringToObject(o, "system_fingerprint", "hydra")) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *usage_object(const task_out *out)
{
    const task_timings *t = &out->timings;
    cJSON *u = cJSON_CreateObject();
    cJSON *details = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    if (details == NULL || !cJSON_AddNumberToObject(u, "prompt_tokens", t->n_prompt) ||
        !cJSON_AddNumberToObject(u, "completion_tokens", t->n_predicted) ||
        !cJSON_AddNumberToObject(u, "total_tokens", t->n_prompt + t->n_predicted) ||
        !cJSON_AddNumberToObject(details, "cached_tokens", t->n_cached)) {
        cJSON_Delete(u);
        return NULL;
    }
    return u;
}

static double per_second(int n, double ms)
{
    return ms > 0 ? 1e3 * n / ms : 0;
}

/* llama-server's timings: prompt figures count the evaluated (uncached) tokens. */
static cJSON *timings_object(const task_out *out)
{
    const task_timings *t = &out->timings;
    const int n_eval = t->n_prompt - t->n_cached;
    const int n_gen = t->n_predicted > 1 ? t->n_predicted - 1 : 0; /* tokens after the first */
    cJSON *o = cJSON_CreateObject();
    if (o == NULL || !cJSON_AddNumberToObject(o, "cache_n", t->n_cached) ||
        !cJSON_AddNumberToObject(o, "prompt_n", n_eval) || !cJSON_AddNumberToObject(o, "prompt_ms", t->prompt_ms) ||
        !cJSON_AddNumberToObject(o, "prompt_per_token_ms", n_eval > 0 ? t->prompt_ms / n_eval : 0) ||
        !cJSON_AddNumberToObject(o, "prompt_per_second", per_second(n_eval, t->prompt_ms)) ||
        !cJSON_AddNumberToObject(o, "predicted_n", t->n_predicted) ||
        !cJSON_AddNumberToObject(o, "predicted_ms", t->predicted_ms) ||
        !cJSON_AddNumberToObject(o, "predicted_per_token_ms", n_gen > 0 ? t->predicted_ms / n_gen : 0) ||
        !cJSON_AddNumberToObject(o, "predicted_per_second", per_second(n_gen, t->predicted_ms)) ||
        (t->speculative && (!cJSON_AddNumberToObject(o, "draft_n", t->draft_n) ||
                            !cJSON_AddNumberToObject(o, "draft_n_accepted", t->draft_n_accepted)))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* A chat message's (or delta's) content and tool calls: with tool calls,
 * empty content is null, as OpenAI sends it. */
static bool chat_body(cJSON *m, cJSON *text, cJSON *tool_calls)
{
    bool ok = true;
    if (text != NULL && tool_calls != NULL && cJSON_IsString(text) && text->valuestring[0] == '\0') {
        cJSON_Delete(text);
        ok = cJSON_AddNullToObject(m, "content") != NULL;
    } else if (text != NULL) {
        cJSON_AddItemToObject(m, "content", text);
    }
    if (tool_calls != NULL)
        cJSON_AddItemToObject(m, "tool_calls", tool_calls);
    return ok;
}

/* One choice: chat's message or delta, or a completion's text; x's items
 * are consumed. */
static cJSON *choice(const shape_head *h, const char *key, cJSON *text, bool role, const char *finish, shape_extra x)
{
    cJSON *c = cJSON_CreateObject();
    bool ok = c != NULL && cJSON_AddNumberToObject(c, "index", 0);
    if (h->kind == API_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(c, key);
        ok = ok && m != NULL && (!role || cJSON_AddStringToObject(m, "role", "assistant"));
        if (ok) {
            ok = chat_body(m, text, x.tool_calls);
        } else {
            cJSON_Delete(text);
            cJSON_Delete(x.tool_calls);
        }
        if (finish != NULL && x.tool_calls != NULL)
            finish = "tool_calls";
    } else {
        cJSON_Delete(x.tool_calls);
        ok = ok && text != NULL;
        if (ok)
            cJSON_AddItemToObject(c, "text", text);
        else
            cJSON_Delete(text);
    }
    if (ok && x.logprobs != NULL) {
        cJSON_AddItemToObject(c, "logprobs", x.logprobs);
    } else {
        cJSON_Delete(x.logprobs);
        ok = ok && cJSON_AddNullToObject(c, "logprobs") != NULL;
    }
    ok = ok && (finish ? cJSON_AddStringToObject(c, "finish_reason", finish) != NULL
                       : cJSON_AddNullToObject(c, "finish_reason") != NULL);
    if (!ok) {
        cJSON_Delete(c);
        return NULL;
    }
    return c;
}

/* o.choices = [c] (consumes c); false (o intact for the caller to free) on failure. */
static bool add_choice(cJSON *o, cJSON *c)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    if (arr == NULL || c == NULL) {
        cJSON_Delete(c);
        return false;
    }
    cJSON_AddItemToArray(arr, c);
    return true;
}

static bool add_item(cJSON *o, const char *key, cJSON *item)
{
    if (item == NULL)
        return false;
    cJSON_AddItemToObject(o, key, item);
    return true;
}

/* ------------------------------------------------------------ responses */

cJSON *shape_response(const shape_head *h, const char *text, size_t len, const task_out *out, shape_extra x)
{
    cJSON *o = head_object(h, false);
    if (o == NULL) {
        cJSON_Delete(x.logprobs);
        cJSON_Delete(x.tool_calls);
        return NULL;
    }
    if (!add_choice(o, choice(h, "message", shape_string(text, len), true, finish_reason(out->finish), x)) ||
        !add_item(o, "usage", usage_object(out)) || !add_item(o, "timings", timings_object(out))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

bool shape_event(sbuf *ev, cJSON *json)
{
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    const bool ok = text != NULL && sbuf_addf(ev, "data: %s\n\n", text);
    free(text);
    return ok;
}

bool shape_delta(sbuf *ev, const shape_head *h, const char *text, size_t len, bool first, shape_extra x)
{
    cJSON *o = head_object(h, true);
    if (o == NULL) {
        cJSON_Delete(x.logprobs);
        cJSON_Delete(x.tool_calls);
        return false;
    }
    /* a delta that only carries tool calls has no content */
    cJSON *content = len == 0 && x.tool_calls != NULL ? NULL : shape_string(text, len);
    if (!add_choice(o, choice(h, "delta", content, first && h->kind == API_CHAT, NULL, x))) {
        cJSON_Delete(o);
        return false;
    }
    return shape_event(ev, o);
}

bool shape_finish(sbuf *ev, const shape_head *h, const task_out *out, bool tool_calls)
{
    cJSON *o = head_object(h, true);
    cJSON *text = h->kind == API_CHAT ? NULL : cJSON_CreateString("");
    const char *finish = tool_calls && h->kind == API_CHAT ? "tool_calls" : finish_reason(out->finish);
    if (o == NULL || !add_choice(o, choice(h, "delta", text, false, finish, (shape_extra){0})) ||
        !add_item(o, "timings", timings_object(out))) {
        cJSON_Delete(o);
        return false;
    }
    return shape_event(ev, o);
}

bool shape_usage(sbuf *ev, const shape_head *h, const task_out *out)
{
    cJSON *o = head_object(h, true);
    if (o == NULL || cJSON_AddArrayToObject(o, "choices") == NULL || !add_item(o, "usage", usage_object(out))) {
        cJSON_Delete(o);
        return false;
    }
    return shape_event(ev, o);
}
