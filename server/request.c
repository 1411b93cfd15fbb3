/*
 * request.c — the JSON body of /v1/chat/completions and /v1/completions,
 * validated field by field: a wrong type or a value out of range fails
 * with a message naming the field; unknown fields are ignored; null counts
 * as absent.  Ranges are OpenAI's where OpenAI defines the field
 * (temperature 0-2, top_p 0-1, penalties -2..2), llama-server's for its
 * extensions (top_k, min_p, repeat_penalty).
 */
#include "api.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

typedef struct parse_ctx {
    char *err;
    size_t err_len;
} parse_ctx;

static int fail(parse_ctx *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parse_ctx *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->err_len, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(const cJSON *v)
{
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "null";
}

/* The field, or NULL when absent or null. */
static const cJSON *field(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v == NULL || cJSON_IsNull(v) ? NULL : v;
}

cJSON *request_object(const char *body, size_t len, char *err, size_t err_len)
{
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (json == NULL) {
        const size_t at = end != NULL && end >= body ? (size_t)(end - body) : 0;
        snprintf(err, err_len, "the body is not valid JSON (near byte %zu)", at);
        return NULL;
    }
    while (end != NULL && (size_t)(end - body) < len && strchr(" \t\r\n", *end) != NULL && *end != '\0')
        end++;
    if (end != NULL && (size_t)(end - body) < len) {
        snprintf(err, err_len, "the body has bytes after its JSON value (at byte %zu)", (size_t)(end - body));
        cJSON_Delete(json);
        return NULL;
    }
    if (!cJSON_IsObject(json)) {
        snprintf(err, err_len, "the body must be a JSON object, not %s", type_name(json));
        cJSON_Delete(json);
        return NULL;
    }
    return json;
}

/* ------------------------------------------------------------ scalars */

static int get_number(parse_ctx *p, const cJSON *obj, const char *name, double lo, double hi, float *out)
{
    const cJSON *v = field(obj, name);
    if (v == NULL)
        return 0;
    if (!cJSON_IsNumber(v))
        return fail(p, "%s: expected a number, got %s", name, type_name(v));
    if (!isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return fail(p, "%s: %g is out of range [%g, %g]", name, v->valuedouble, lo, hi);
    *out = (float)v->valuedouble;
    return 0;
}

/* A whole number in [lo, hi]. */
static int get_integer(parse_ctx *p, const cJSON *obj, const char *name, double lo, double hi, long long *out)
{
    const cJSON *v = field(obj, name);
    if (v == NULL)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return fail(p, "%s: expected an integer, got %s", name, cJSON_IsNumber(v) ? "a fraction" : type_name(v));
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return fail(p, "%s: %.17g is out of range [%.17g, %.17g]", name, v->valuedouble, lo, hi);
    *out = (long long)v->valuedouble;
    return 0;
}

static int get_bool(parse_ctx *p, const cJSON *obj, const char *name, bool *out)
{
    const cJSON *v = field(obj, name);
    if (v == NULL)
        return 0;
    if (!cJSON_IsBool(v))
        return fail(p, "%s: expected a boolean, got %s", name, type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

static int get_int(parse_ctx *p, const cJSON *obj, const char *name, double lo, double hi, int *out)
{
    long long v = *out;
    int rc = get_integer(p, obj, name, lo, hi, &v);
    *out = (int)v;
    return rc;
}

/* ------------------------------------------------------------ sampling */

/* A fresh seed below 2^63, for requests that give none. */
static uint64_t fresh_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s)
        s = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15u;
    return s >> 1;
}

static int parse_sampling(parse_ctx *p, const cJSON *obj, const serve_opts *o, gen_params *g)
{
    hydra_sampler_params *sp = &g->sampling;
    *sp = o->sampling;
    long long seed = o->seed, top_k = sp->top_k, last_n = sp->penalty_last_n;
    if (get_number(p, obj, "temperature", 0, 2, &sp->temperature) || get_number(p, obj, "top_p", 0, 1, &sp->top_p) ||
        get_number(p, obj, "min_p", 0, 1, &sp->min_p) ||
        get_number(p, obj, "presence_penalty", -2, 2, &sp->presence_penalty) ||
        get_number(p, obj, "frequency_penalty", -2, 2, &sp->frequency_penalty) ||
        get_number(p, obj, "repeat_penalty", 1e-6, 10, &sp->repeat_penalty) ||
        get_integer(p, obj, "top_k", 0, INT32_MAX, &top_k) ||
        get_integer(p, obj, "repeat_last_n", 0, INT32_MAX, &last_n) ||
        get_integer(p, obj, "seed", -9007199254740992.0, 9007199254740992.0, &seed))
        return -1;
    sp->top_k = (int32_t)top_k;
    sp->penalty_last_n = (int32_t)last_n;
    sp->seed = seed == -1 ? fresh_seed() : (uint64_t)seed; /* -1: random, as in llama-server */
    return 0;
}

static int add_stop(parse_ctx *p, gen_params *g, const cJSON *v, const char *where)
{
    if (!cJSON_IsString(v))
        return fail(p, "%s: expected a string, got %s", where, type_name(v));
    if (v->valuestring[0] == '\0')
        return fail(p, "%s: a stop string cannot be empty", where);
    if (g->n_stops == TASK_MAX_STOPS)
        return fail(p, "stop: at most %d stop strings", TASK_MAX_STOPS);
    if ((g->stops[g->n_stops] = strdup(v->valuestring)) == NULL)
        return fail(p, "stop: out of memory");
    g->n_stops++;
    return 0;
}

static int parse_stop(parse_ctx *p, const cJSON *obj, gen_params *g)
{
    const cJSON *v = field(obj, "stop");
    if (v == NULL)
        return 0;
    if (cJSON_IsString(v))
        return add_stop(p, g, v, "stop");
    if (!cJSON_IsArray(v))
        return fail(p, "stop: expected a string or an array of strings, got %s", type_name(v));
    int i = 0;
    for (const cJSON *s = v->child; s != NULL; s = s->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "stop[%d]", i);
        if (add_stop(p, g, s, where) != 0)
            return -1;
    }
    return 0;
}

/* Chat: logprobs (boolean) and top_logprobs (0..20, only with logprobs);
 * completions: logprobs, the number of alternatives (0..20).  *n: -1 for
 * none, else the alternatives per token. */
static int parse_logprobs(parse_ctx *p, const cJSON *obj, api_kind kind, int *n)
{
    *n = -1;
    if (kind == API_COMPLETION)
        return get_int(p, obj, "logprobs", 0, LOGPROBS_MAX_TOP, n);
    bool on = false;
    int top = -1;
    if (get_bool(p, obj, "logprobs", &on) || get_int(p, obj, "top_logprobs", 0, LOGPROBS_MAX_TOP, &top))
        return -1;
    if (top >= 0 && !on)
        return fail(p, "top_logprobs: requires \"logprobs\": true");
    *n = on ? (top > 0 ? top : 0) : -1;
    return 0;
}

/* Fields every generation request shares. */
static int parse_common(parse_ctx *p, const cJSON *obj, const serve_opts *o, gen_request *r)
{
    int n = 1;
    r->gen.n_predict = o->n_predict;
    if (get_int(p, obj, "n", 1, INT32_MAX, &n) != 0)
        return -1;
    if (n > 1)
        return fail(p, "n: %d choices asked; this server generates one (n = 1)", n);
    if (get_int(p, obj, "max_tokens", 1, INT32_MAX, &r->gen.n_predict) ||
        get_int(p, obj, "max_completion_tokens", 1, INT32_MAX, &r->gen.n_predict) ||
        get_bool(p, obj, "stream", &r->stream) || get_bool(p, obj, "ignore_eos", &r->gen.ignore_eos) ||
        parse_sampling(p, obj, o, &r->gen) || parse_stop(p, obj, &r->gen))
        return -1;
    const cJSON *so = field(obj, "stream_options");
    if (so != NULL && !cJSON_IsObject(so))
        return fail(p, "stream_options: expected an object, got %s", type_name(so));
    if (so != NULL && get_bool(p, so, "include_usage", &r->include_usage) != 0)
        return fail(p, "stream_options.include_usage: expected a boolean");
    const cJSON *model = field(obj, "model");
    if (model != NULL && !cJSON_IsString(model))
        return fail(p, "model: expected a string, got %s", type_name(model));
    if (model != NULL && (r->model = strdup(model->valuestring)) == NULL)
        return fail(p, "model: out of memory");
    if (parse_logprobs(p, obj, r->kind, &r->gen.n_logprobs) != 0)
        return -1;
    const cJSON *rf = field(obj, "response_format");
    const cJSON *rf_type = rf ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    if (rf != NULL && !(cJSON_IsString(rf_type) && strcmp(rf_type->valuestring, "text") == 0))
        return fail(p, "response_format: only {\"type\": \"text\"} is supported");
    return 0;
}

/* ------------------------------------------------------------ chat */

/* content as an array of parts: the text parts joined. */
static int join_parts(parse_ctx *p, cJSON *msg, cJSON *content, int i)
{
    sbuf text = {0};
    int j = 0;
    for (const cJSON *part = content->child; part != NULL; part = part->next, j++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
            sbuf_free(&text);
            return fail(p, "messages[%d].content[%d]: expected an object with a string \"type\"", i, j);
        }
        if (strcmp(type->valuestring, "text") != 0) {
            sbuf_free(&text);
            return fail(p, "messages[%d].content[%d]: content of type '%.40s' is not supported (text only)", i, j,
                        type->valuestring);
        }
        if (!cJSON_IsString(t)) {
            sbuf_free(&text);
            return fail(p, "messages[%d].content[%d].text: expected a string", i, j);
        }
        if (!sbuf_add(&text, t->valuestring, strlen(t->valuestring))) {
            sbuf_free(&text);
            return fail(p, "messages: out of memory");
        }
    }
    cJSON *joined = cJSON_CreateString(text.data ? text.data : "");
    sbuf_free(&text);
    if (joined == NULL || !cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", joined)) {
        cJSON_Delete(joined);
        return fail(p, "messages: out of memory");
    }
    return 0;
}

static int check_message(parse_ctx *p, cJSON *msg, int i)
{
    if (!cJSON_IsObject(msg))
        return fail(p, "messages[%d]: expected an object, got %s", i, type_name(msg));
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    if (!cJSON_IsString(role))
        return fail(p, "messages[%d].role: expected a string, got %s", i, role ? type_name(role) : "nothing");
    cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (cJSON_IsArray(content))
        return join_parts(p, msg, content, i);
    if (content != NULL && !cJSON_IsString(content) && !cJSON_IsNull(content))
        return fail(p, "messages[%d].content: expected a string, an array of parts or null, got %s", i,
                    type_name(content));
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    if (calls != NULL && !cJSON_IsArray(calls) && !cJSON_IsNull(calls))
        return fail(p, "messages[%d].tool_calls: expected an array, got %s", i, type_name(calls));
    return 0;
}

static char *print_field(const cJSON *obj, const char *name)
{
    const cJSON *v = field(obj, name);
    return v ? cJSON_PrintUnformatted(v) : NULL;
}

static int parse_chat(parse_ctx *p, cJSON *obj, gen_request *r)
{
    cJSON *messages = cJSON_GetObjectItemCaseSensitive(obj, "messages");
    if (messages == NULL || cJSON_IsNull(messages))
        return fail(p, "messages: required");
    if (!cJSON_IsArray(messages))
        return fail(p, "messages: expected an array, got %s", type_name(messages));
    if (messages->child == NULL)
        return fail(p, "messages: at least one message is required");
    int i = 0;
    for (cJSON *msg = messages->child; msg != NULL; msg = msg->next, i++)
        if (check_message(p, msg, i) != 0)
            return -1;
    const cJSON *tools = field(obj, "tools");
    if (tools != NULL && !cJSON_IsArray(tools))
        return fail(p, "tools: expected an array, got %s", type_name(tools));
    const cJSON *choice = field(obj, "tool_choice");
    if (choice != NULL && !cJSON_IsString(choice) && !cJSON_IsObject(choice))
        return fail(p, "tool_choice: expected a string or an object, got %s", type_name(choice));
    /* the reply is searched for calls when tools were offered and not refused */
    r->want_tools = tools != NULL && tools->child != NULL &&
                    !(cJSON_IsString(choice) && strcmp(choice->valuestring, "none") == 0);
    const cJSON *kwargs = field(obj, "chat_template_kwargs");
    if (kwargs != NULL && !cJSON_IsObject(kwargs))
        return fail(p, "chat_template_kwargs: expected an object, got %s", type_name(kwargs));
    r->messages_json = cJSON_PrintUnformatted(messages);
    r->tools_json = print_field(obj, "tools");
    r->extra_json = print_field(obj, "chat_template_kwargs");
    if (r->messages_json == NULL || (tools && !r->tools_json) || (kwargs && !r->extra_json))
        return fail(p, "messages: out of memory");
    r->gen.text_start = true;
    return 0;
}

/* ------------------------------------------------------------ completion */

static int parse_ids(parse_ctx *p, const cJSON *arr, gen_request *r, const char *where)
{
    const int n = cJSON_GetArraySize(arr);
    r->prompt_ids = malloc(sizeof *r->prompt_ids * (size_t)(n > 0 ? n : 1));
    if (r->prompt_ids == NULL)
        return fail(p, "prompt: out of memory");
    int i = 0;
    for (const cJSON *v = arr->child; v != NULL; v = v->next, i++) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble > INT32_MAX)
            return fail(p, "%s[%d]: expected a token id (an integer >= 0)", where, i);
        r->prompt_ids[i] = (hydra_token)v->valuedouble;
    }
    r->n_prompt_ids = (size_t)n;
    return 0;
}

static int set_text(parse_ctx *p, const cJSON *v, gen_request *r)
{
    r->prompt_len = strlen(v->valuestring);
    r->prompt_text = strdup(v->valuestring);
    return r->prompt_text ? 0 : fail(p, "prompt: out of memory");
}

/* prompt: a string, token ids, or a one-element array of either. */
static int parse_prompt(parse_ctx *p, const cJSON *obj, gen_request *r)
{
    const cJSON *v = field(obj, "prompt");
    if (v == NULL)
        return fail(p, "prompt: required");
    if (cJSON_IsString(v))
        return set_text(p, v, r);
    if (!cJSON_IsArray(v))
        return fail(p, "prompt: expected a string or an array, got %s", type_name(v));
    const int n = cJSON_GetArraySize(v);
    if (n == 0)
        return fail(p, "prompt: the array is empty");
    if (cJSON_IsNumber(v->child))
        return parse_ids(p, v, r, "prompt");
    if (n > 1)
        return fail(p, "prompt: %d prompts given; this server completes one per request", n);
    if (cJSON_IsString(v->child))
        return set_text(p, v->child, r);
    if (cJSON_IsArray(v->child))
        return parse_ids(p, v->child, r, "prompt[0]");
    return fail(p, "prompt[0]: expected a string or token ids, got %s", type_name(v->child));
}

/* ------------------------------------------------------------ entry */

int request_parse(const char *body, size_t len, api_kind kind, const serve_opts *o, gen_request *out, char *err,
                  size_t err_len)
{
    parse_ctx p = {err, err_len};
    *out = (gen_request){.kind = kind};
    cJSON *obj = request_object(body, len, err, err_len);
    if (obj == NULL)
        return -1;
    int rc = parse_common(&p, obj, o, out);
    if (rc == 0)
        rc = kind == API_CHAT ? parse_chat(&p, obj, out) : parse_prompt(&p, obj, out);
    cJSON_Delete(obj);
    if (rc != 0)
        request_free(out);
    return rc;
}

void request_free(gen_request *r)
{
    for (int i = 0; i < r->gen.n_stops; i++)
        free(r->gen.stops[i]);
    free(r->model);
    free(r->messages_json);
    free(r->tools_json);
    free(r->extra_json);
    free(r->prompt_text);
    free(r->prompt_ids);
    *r = (gen_request){0};
}
