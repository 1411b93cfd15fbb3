/*
 * toolcall.c — tool calls in a chat model's output (toolcall.h).
 */
#include "toolcall.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
enum { OPEN_LEN = sizeof OPEN - 1, CLOSE_LEN = sizeof CLOSE - 1 };

toolcall_format toolcall_format_of(const char *template_text)
{
    return template_text != NULL && strstr(template_text, OPEN) != NULL ? TOOLCALL_TAGGED : TOOLCALL_NONE;
}

void toolcall_init(toolcall_filter *f, bool with_index, uint64_t id_seed)
{
    *f = (toolcall_filter){.with_index = with_index, .id_state = id_seed};
}

void toolcall_free(toolcall_filter *f)
{
    free(f->held);
    free(f->out);
    *f = (toolcall_filter){0};
}

static bool grow_add(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t want = (*len + n + 1) * 2;
        char *p = realloc(*buf, want);
        if (p == NULL)
            return false;
        *buf = p;
        *cap = want;
    }
    if (n > 0)
        memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

static bool pass(toolcall_filter *f, const char *data, size_t n)
{
    return grow_add(&f->out, &f->out_len, &f->out_cap, data, n);
}

/* Drops held[0, n). */
static void consume(toolcall_filter *f, size_t n)
{
    memmove(f->held, f->held + n, f->held_len - n);
    f->held_len -= n;
}

/* ------------------------------------------------------------ a call's body */

static bool is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && is_space(**s))
        (*s)++, (*n)--;
    while (*n > 0 && is_space((*s)[*n - 1]))
        (*n)--;
}

/* {"name": "...", "arguments": {...} | "..."} ("parameters" also read). */
static bool parse_json_call(const char *s, size_t n, char **name, char **args)
{
    cJSON *o = cJSON_ParseWithLength(s, n);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (a == NULL)
        a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    bool ok = cJSON_IsObject(o) && cJSON_IsString(nm) && nm->valuestring[0] != '\0';
    if (ok) {
        *name = strdup(nm->valuestring);
        *args = a == NULL ? strdup("{}") : cJSON_IsString(a) ? strdup(a->valuestring) : cJSON_PrintUnformatted(a);
        ok = *name != NULL && *args != NULL;
    }
    cJSON_Delete(o);
    return ok;
}

/* The text between `open` and `close` at *s (after blanks): *v, *vn; *s
 * moves past `close`. */
static bool tagged(const char **s, size_t *n, const char *open, const char *close, const char **v, size_t *vn)
{
    trim(s, n);
    const size_t ol = strlen(open), cl = strlen(close);
    if (*n < ol || memcmp(*s, open, ol) != 0)
        return false;
    const char *end = memmem(*s + ol, *n - ol, close, cl);
    if (end == NULL)
        return false;
    *v = *s + ol;
    *vn = (size_t)(end - *v);
    *n -= (size_t)(end + cl - *s);
    *s = end + cl;
    return true;
}

/* GLM-4.5/4.6: NAME, then <arg_key>K</arg_key><arg_value>V</arg_value>
 * pairs; a value that is JSON keeps its type, any other is a string. */
static bool parse_glm_call(const char *s, size_t n, char **name, char **args)
{
    size_t name_len = 0;
    while (name_len < n && s[name_len] != '\n' && s[name_len] != '<')
        name_len++;
    const char *nm = s;
    size_t nn = name_len;
    trim(&nm, &nn);
    if (nn == 0)
        return false;
    for (size_t i = 0; i < nn; i++) /* a function name, not prose */
        if (!(isalnum((unsigned char)nm[i]) || nm[i] == '_' || nm[i] == '-' || nm[i] == '.'))
            return false;
    s += name_len;
    n -= name_len;
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    const char *k, *v;
    size_t kn, vn;
    while (ok && (trim(&s, &n), n > 0)) {
        ok = tagged(&s, &n, "<arg_key>", "</arg_key>", &k, &kn) && tagged(&s, &n, "<arg_value>", "</arg_value>", &v, &vn);
        char *key = ok ? strndup(k, kn) : NULL;
        char *text = ok ? strndup(v, vn) : NULL;
        cJSON *val = text ? cJSON_ParseWithLength(v, vn) : NULL;
        if (val == NULL && text != NULL)
            val = cJSON_CreateString(text);
        ok = key != NULL && val != NULL;
        if (ok)
            cJSON_AddItemToObject(o, key, val);
        else
            cJSON_Delete(val);
        free(key);
        free(text);
    }
    *name = ok ? strndup(nm, nn) : NULL;
    *args = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    ok = ok && *name != NULL && *args != NULL;
    if (!ok) {
        free(*name);
        free(*args);
    }
    return ok;
}

static uint64_t next_id(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* {"index"?, "id", "type": "function", "function": {"name", "arguments"}}
 * of a body, or NULL when it is not a call. */
static cJSON *parse_call(toolcall_filter *f, const char *s, size_t n)
{
    trim(&s, &n);
    char *name = NULL, *args = NULL;
    if (!(n > 0 && s[0] == '{' ? parse_json_call(s, n, &name, &args) : parse_glm_call(s, n, &name, &args)))
        return NULL;
    char id[32];
    const uint64_t a = next_id(&f->id_state), b = next_id(&f->id_state);
    snprintf(id, sizeof id, "call_%016llx%08llx", (unsigned long long)a, (unsigned long long)(b >> 32));
    cJSON *call = cJSON_CreateObject();
    cJSON *fn = call ? cJSON_CreateObject() : NULL;
    bool ok = fn != NULL && (!f->with_index || cJSON_AddNumberToObject(call, "index", f->n_calls)) &&
              cJSON_AddStringToObject(call, "id", id) && cJSON_AddStringToObject(call, "type", "function") &&
              cJSON_AddStringToObject(fn, "name", name) && cJSON_AddStringToObject(fn, "arguments", args);
    free(name);
    free(args);
    if (!ok) {
        cJSON_Delete(fn);
        cJSON_Delete(call);
        return NULL;
    }
    cJSON_AddItemToObject(call, "function", fn);
    f->n_calls++;
    return call;
}

/* ------------------------------------------------------------ the filter */

/* Bytes at the end of held that begin OPEN: they are held back. */
static size_t open_prefix_at_end(const toolcall_filter *f)
{
    for (size_t k = f->held_len < OPEN_LEN - 1 ? f->held_len : OPEN_LEN - 1; k > 0; k--)
        if (memcmp(f->held + f->held_len - k, OPEN, k) == 0)
            return k;
    return 0;
}

/* One step over held; false when nothing more can be decided now. */
static bool step(toolcall_filter *f, cJSON **calls, bool *ok)
{
    if (!f->in_call) {
        const char *at = memmem(f->held, f->held_len, OPEN, OPEN_LEN);
        const size_t keep = at ? 0 : open_prefix_at_end(f);
        const size_t upto = at ? (size_t)(at - f->held) : f->held_len - keep;
        *ok = *ok && pass(f, f->held, upto);
        consume(f, at ? upto + OPEN_LEN : upto);
        f->in_call = at != NULL;
        return at != NULL;
    }
    const char *end = memmem(f->held, f->held_len, CLOSE, CLOSE_LEN);
    if (end == NULL)
        return false;
    const size_t body = (size_t)(end - f->held);
    cJSON *call = parse_call(f, f->held, body);
    if (call != NULL) {
        if (*calls == NULL)
            *calls = cJSON_CreateArray();
        *ok = *ok && *calls != NULL;
        if (*calls != NULL)
            cJSON_AddItemToArray(*calls, call);
        else
            cJSON_Delete(call);
    } else { /* not a call: the block is text */
        *ok = *ok && pass(f, OPEN, OPEN_LEN) && pass(f, f->held, body) && pass(f, CLOSE, CLOSE_LEN);
    }
    consume(f, body + CLOSE_LEN);
    f->in_call = false;
    return true;
}

bool toolcall_push(toolcall_filter *f, const char *text, size_t len, const char **out, size_t *out_len,
                   cJSON **calls)
{
    f->out_len = 0;
    *calls = NULL;
    bool ok = pass(f, "", 0) && grow_add(&f->held, &f->held_len, &f->held_cap, text, len);
    while (ok && step(f, calls, &ok))
        ;
    *out = f->out;
    *out_len = f->out_len;
    return ok;
}

bool toolcall_flush(toolcall_filter *f, const char **out, size_t *out_len)
{
    f->out_len = 0;
    bool ok = pass(f, "", 0) && (!f->in_call || pass(f, OPEN, OPEN_LEN)) && pass(f, f->held, f->held_len);
    f->held_len = 0;
    f->in_call = false;
    *out = f->out;
    *out_len = f->out_len;
    return ok;
}
