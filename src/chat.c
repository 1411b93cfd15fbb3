/*
 * chat.c — the chat-template API: parse a template once, render
 * conversations with it, pick a built-in template or the model's own.
 *
 * The render arguments are the ones transformers' apply_chat_template
 * passes: messages, tools (None when not given), documents (None),
 * add_generation_prompt, bos_token and eos_token (undefined when not
 * given), then the caller's extra variables.
 */
#include "chat.h"
#include "error.h"
#include "jinja.h"

#include <stdlib.h>
#include <string.h>

struct hydra_chat_template {
    jtemplate *tmpl;
};

HYDRA_API hydra_chat_params hydra_chat_default_params(void)
{
    return (hydra_chat_params){0};
}

static jlimits limits_of(const hydra_chat_params *params)
{
    jlimits limits = jlimits_default();
    if (params == NULL)
        return limits;
    if (params->max_output)
        limits.max_output = params->max_output;
    if (params->max_memory)
        limits.max_memory = params->max_memory;
    if (params->max_steps)
        limits.max_steps = params->max_steps;
    if (params->max_depth)
        limits.max_depth = params->max_depth;
    return limits;
}

HYDRA_API hydra_status hydra_chat_template_new(const char *text, hydra_chat_template **out)
{
    if (out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_chat_template_new: out is NULL");
    *out = NULL;
    if (text == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_chat_template_new: template text is NULL");
    hydra_chat_template *t = calloc(1, sizeof *t);
    if (t == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory");
    jlimits limits = jlimits_default();
    hydra_status st = jinja_parse(text, strlen(text), &limits, &t->tmpl);
    if (st != HYDRA_OK) {
        free(t);
        return st;
    }
    *out = t;
    return HYDRA_OK;
}

HYDRA_API void hydra_chat_template_free(hydra_chat_template *tmpl)
{
    if (tmpl == NULL)
        return;
    jinja_template_free(tmpl->tmpl);
    free(tmpl);
}

/* ------------------------------------------------------------- variables */

static hydra_status set_string(jrender *r, jdict *dict, const char *key, const char *value)
{
    jarena *arena = jrender_arena(r);
    jstr *k = jstr_new(arena, key, strlen(key));
    jstr *v = value ? jstr_new(arena, value, strlen(value)) : NULL;
    if (k == NULL || (value && v == NULL) || !jdict_set(arena, dict, jv_str(k), v ? jv_str(v) : jv_none()))
        return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory building the messages");
    return HYDRA_OK;
}

static hydra_status message_value(jrender *r, const hydra_chat_message *m, size_t index, jv *out)
{
    jarena *arena = jrender_arena(r);
    jdict *dict = jdict_new(arena);
    if (dict == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory building the messages");
    if (m->role == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "chat message %zu has no role", index);
    hydra_status st = set_string(r, dict, "role", m->role);
    if (st == HYDRA_OK)
        st = set_string(r, dict, "content", m->content);
    if (st == HYDRA_OK && m->reasoning_content)
        st = set_string(r, dict, "reasoning_content", m->reasoning_content);
    if (st == HYDRA_OK && m->reasoning_content)
        st = set_string(r, dict, "thinking", m->reasoning_content);
    if (st == HYDRA_OK && m->tool_calls_json) {
        jv calls;
        jstr *key = jstr_new(arena, "tool_calls", 10);
        st = jv_parse_json(arena, m->tool_calls_json, strlen(m->tool_calls_json), "tool_calls_json", &calls);
        if (st == HYDRA_OK && (key == NULL || !jdict_set(arena, dict, jv_str(key), calls)))
            st = hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory building the messages");
    }
    if (st == HYDRA_OK && m->tool_call_id)
        st = set_string(r, dict, "tool_call_id", m->tool_call_id);
    if (st == HYDRA_OK && m->name)
        st = set_string(r, dict, "name", m->name);
    *out = (jv){.kind = JV_DICT, .dict = dict};
    return st;
}

static hydra_status set_json_var(jrender *r, const char *name, const char *json, jv fallback)
{
    jv value = fallback;
    if (json) {
        hydra_status st = jv_parse_json(jrender_arena(r), json, strlen(json), name, &value);
        if (st != HYDRA_OK)
            return st;
    }
    return jrender_set(r, name, value);
}

static hydra_status set_token(jrender *r, const char *name, const char *token)
{
    if (token == NULL)
        return HYDRA_OK; /* undefined, as when transformers' tokenizer has none */
    jstr *s = jstr_new(jrender_arena(r), token, strlen(token));
    if (s == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory");
    return jrender_set(r, name, jv_str(s));
}

static hydra_status set_extras(jrender *r, const char *extra_json)
{
    if (extra_json == NULL)
        return HYDRA_OK;
    jv extra;
    hydra_status st = jv_parse_json(jrender_arena(r), extra_json, strlen(extra_json), "extra_json", &extra);
    if (st != HYDRA_OK)
        return st;
    if (extra.kind != JV_DICT)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "extra_json must be a JSON object of variables");
    for (size_t e = 0; st == HYDRA_OK && e < extra.dict->len; e++)
        st = jrender_set(r, extra.dict->keys[e].s->bytes, extra.dict->values[e]);
    return st;
}

static hydra_status set_common(jrender *r, const hydra_chat_params *params)
{
    hydra_status st = set_json_var(r, "tools", params->tools_json, jv_none());
    if (st == HYDRA_OK)
        st = jrender_set(r, "documents", jv_none());
    if (st == HYDRA_OK)
        st = jrender_set(r, "add_generation_prompt", jv_bool(params->add_generation_prompt));
    if (st == HYDRA_OK)
        st = set_token(r, "bos_token", params->bos_token);
    if (st == HYDRA_OK)
        st = set_token(r, "eos_token", params->eos_token);
    if (st == HYDRA_OK)
        st = set_extras(r, params->extra_json);
    if (params->fixed_time)
        jrender_set_time(r, params->fixed_now);
    return st;
}

/* Builds the variables with `set_messages`, renders, frees the values. */
static hydra_status render_with(const hydra_chat_template *tmpl, const hydra_chat_params *params,
                                hydra_status (*set_messages)(jrender *r, const void *arg), const void *arg,
                                char **out, size_t *len)
{
    if (out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_chat_apply: out is NULL");
    *out = NULL;
    if (tmpl == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_chat_apply: template is NULL");
    hydra_chat_params defaults = hydra_chat_default_params();
    if (params == NULL)
        params = &defaults;
    jlimits limits = limits_of(params);
    jrender *r;
    hydra_status st = jrender_new(&limits, &r);
    if (st != HYDRA_OK)
        return st;
    st = set_messages(r, arg);
    if (st == HYDRA_OK)
        st = set_common(r, params);
    size_t n = 0;
    if (st == HYDRA_OK)
        st = jinja_render(r, tmpl->tmpl, out, &n);
    jrender_free(r);
    if (len)
        *len = n;
    return st;
}

typedef struct message_array {
    const hydra_chat_message *messages;
    size_t n;
} message_array;

static hydra_status set_message_array(jrender *r, const void *arg)
{
    const message_array *a = arg;
    if (a->n && a->messages == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_chat_apply: messages is NULL");
    jlist *list = jlist_new(jrender_arena(r), a->n);
    if (list == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory building the messages");
    for (size_t k = 0; k < a->n; k++) {
        hydra_status st = message_value(r, &a->messages[k], k, &list->items[k]);
        if (st != HYDRA_OK)
            return st;
        list->len = k + 1;
    }
    return jrender_set(r, "messages", (jv){.kind = JV_LIST, .list = list});
}

static hydra_status set_message_json(jrender *r, const void *arg)
{
    const char *json = arg;
    if (json == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_chat_apply_json: messages_json is NULL");
    jv messages;
    hydra_status st = jv_parse_json(jrender_arena(r), json, strlen(json), "messages_json", &messages);
    if (st != HYDRA_OK)
        return st;
    if (messages.kind != JV_LIST)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "messages_json must be a JSON array of messages");
    return jrender_set(r, "messages", messages);
}

HYDRA_API hydra_status hydra_chat_apply(const hydra_chat_template *tmpl, const hydra_chat_message *messages,
                                        size_t n, const hydra_chat_params *params, char **out, size_t *len)
{
    message_array a = {messages, n};
    return render_with(tmpl, params, set_message_array, &a, out, len);
}

HYDRA_API hydra_status hydra_chat_apply_json(const hydra_chat_template *tmpl, const char *messages_json,
                                             const hydra_chat_params *params, char **out, size_t *len)
{
    return render_with(tmpl, params, set_message_json, messages_json, out, len);
}

/* ------------------------------------------------------------- selection */

HYDRA_API const char *hydra_chat_builtin_names(void)
{
    return chat_builtin_names;
}

HYDRA_API hydra_status hydra_chat_builtin(const char *name, const char **text)
{
    if (text == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_chat_builtin: text is NULL");
    *text = NULL;
    for (const chat_builtin *b = chat_builtins; name && b->name; b++)
        if (strcmp(b->name, name) == 0) {
            *text = b->text;
            return HYDRA_OK;
        }
    return hydra_fail(HYDRA_ERR_NOT_FOUND,
                      "unknown chat template \"%s\": --chat-template takes one of %s, or a Jinja template text",
                      name ? name : "(null)", hydra_chat_builtin_names());
}

HYDRA_API hydra_status hydra_chat_model_template(const hydra_model *model, const char *override,
                                                 const char **text)
{
    if (text == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_chat_model_template: text is NULL");
    *text = NULL;
    if (override && (strstr(override, "{{") || strstr(override, "{%"))) {
        *text = override;
        return HYDRA_OK;
    }
    if (override)
        return hydra_chat_builtin(override, text);
    if (model == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_chat_model_template: no model and no --chat-template");
    if (hydra_model_get_str(model, "tokenizer.chat_template", text, NULL) != HYDRA_OK)
        return hydra_fail(HYDRA_ERR_NOT_FOUND,
                          "the model has no tokenizer.chat_template: choose one with --chat-template (%s)",
                          hydra_chat_builtin_names());
    return HYDRA_OK;
}

static const char *token_text(const hydra_model *model, const char *id_key)
{
    uint64_t id;
    const char *text;
    if (hydra_model_get_u64(model, id_key, &id) != HYDRA_OK ||
        hydra_model_get_arr_str(model, "tokenizer.ggml.tokens", (size_t)id, &text, NULL) != HYDRA_OK)
        return NULL;
    return text;
}

HYDRA_API void hydra_chat_model_tokens(const hydra_model *model, hydra_chat_params *params)
{
    if (model == NULL || params == NULL)
        return;
    params->bos_token = token_text(model, "tokenizer.ggml.bos_token_id");
    params->eos_token = token_text(model, "tokenizer.ggml.eos_token_id");
}
