/*
 * jinja_json.c — JSON in and out of template values.
 *
 * Out: transformers' tojson filter is json.dumps(x, ensure_ascii=False,
 * indent=None, separators=None, sort_keys=False) with the keyword arguments
 * passed through; this reproduces json.dumps' exact text (Python 3.11
 * json/encoder.py): ", " and ": " separators, "," when indenting, \uXXXX in
 * lowercase hex, float repr, NaN/Infinity, non-string keys converted.
 * In: RFC 8259 JSON into arena values, object key order kept.
 */
#include "error.h"
#include "jinja.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ dump */

typedef struct dumper {
    jbuf *buf;
    const jjson_style *style;
    unsigned max_depth;
    const char *bad; /* what could not be serialized */
    hydra_status status;
} dumper;

static bool dump_fail(dumper *d, hydra_status status, const char *bad)
{
    if (d->status == HYDRA_OK) {
        d->status = status;
        d->bad = bad;
    }
    return false;
}

static bool put(dumper *d, const char *bytes, size_t len)
{
    return jbuf_put(d->buf, bytes, len) || dump_fail(d, HYDRA_ERR_NOMEM, "output limit");
}

static bool puts_(dumper *d, const char *text)
{
    return put(d, text, strlen(text));
}

static bool put_u16(dumper *d, unsigned unit)
{
    char tmp[8];
    static const char hex[] = "0123456789abcdef";
    tmp[0] = '\\';
    tmp[1] = 'u';
    for (int k = 0; k < 4; k++)
        tmp[2 + k] = hex[(unit >> (12 - 4 * k)) & 15];
    return put(d, tmp, 6);
}

static bool dump_string(dumper *d, const char *s, size_t len)
{
    if (!put(d, "\"", 1))
        return false;
    size_t run = 0; /* start of bytes copied verbatim */
    for (size_t pos = 0; pos < len;) {
        size_t start = pos;
        uint32_t cp = utf8_next(s, len, &pos);
        const char *short_escape = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : cp == '\n' ? "\\n" : cp == '\r' ? "\\r"
                                   : cp == '\t' ? "\\t" : cp == '\b' ? "\\b" : cp == '\f' ? "\\f" : NULL;
        bool escape_ascii = d->style->ensure_ascii && (cp < 0x20 || cp > 0x7e);
        if (!short_escape && cp >= 0x20 && !escape_ascii)
            continue;
        if (!put(d, s + run, start - run))
            return false;
        run = pos;
        if (short_escape) {
            if (!puts_(d, short_escape))
                return false;
        } else if (cp >= 0x10000) {
            cp -= 0x10000;
            if (!put_u16(d, 0xd800 + (cp >> 10)) || !put_u16(d, 0xdc00 + (cp & 0x3ff)))
                return false;
        } else if (!put_u16(d, cp)) {
            return false;
        }
    }
    return put(d, s + run, len - run) && put(d, "\"", 1);
}

static bool dump_float(dumper *d, double f)
{
    if (isnan(f))
        return puts_(d, "NaN");
    if (isinf(f))
        return puts_(d, f < 0 ? "-Infinity" : "Infinity");
    char tmp[32];
    py_float_repr(f, tmp);
    return puts_(d, tmp);
}

static bool newline_indent(dumper *d, unsigned level)
{
    if (d->style->indent == NULL)
        return true;
    if (!put(d, "\n", 1))
        return false;
    for (unsigned k = 0; k < level; k++)
        if (!puts_(d, d->style->indent))
            return false;
    return true;
}

static bool dump_value(dumper *d, jv v, unsigned level);

/* json.dumps converts keys: str as is, float by repr, bools and None to
 * their JSON words, ints to decimal; anything else is a TypeError. */
static bool dump_key(dumper *d, jv key)
{
    char tmp[32];
    switch (key.kind) {
    case JV_STRING:
        return dump_string(d, key.s->bytes, key.s->len);
    case JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)key.i);
        return dump_string(d, tmp, strlen(tmp));
    case JV_FLOAT:
        if (isnan(key.f) || isinf(key.f))
            snprintf(tmp, sizeof tmp, "%s", isnan(key.f) ? "NaN" : key.f < 0 ? "-Infinity" : "Infinity");
        else
            py_float_repr(key.f, tmp);
        return dump_string(d, tmp, strlen(tmp));
    case JV_BOOL:
        return dump_string(d, key.b ? "true" : "false", key.b ? 4 : 5);
    case JV_NONE:
        return dump_string(d, "null", 4);
    default:
        return dump_fail(d, HYDRA_ERR_TYPE, "a dict key of this type");
    }
}

static int compare_keys(const void *a, const void *b)
{
    const jv *ka = a, *kb = b;
    size_t n = ka->s->len < kb->s->len ? ka->s->len : kb->s->len;
    int c = memcmp(ka->s->bytes, kb->s->bytes, n);
    return c ? c : (ka->s->len > kb->s->len) - (ka->s->len < kb->s->len);
}

/* Entry order for a dict: insertion order, or sorted (string keys only). */
static bool dict_order(dumper *d, const jdict *dict, size_t **order)
{
    *order = NULL;
    if (!d->style->sort_keys || dict->len < 2)
        return true;
    jv *keys = malloc(dict->len * sizeof *keys);
    size_t *out = malloc(dict->len * sizeof *out);
    if (keys == NULL || out == NULL) {
        free(keys);
        free(out);
        return dump_fail(d, HYDRA_ERR_NOMEM, "memory");
    }
    for (size_t e = 0; e < dict->len; e++) {
        if (dict->keys[e].kind != JV_STRING) {
            free(keys);
            free(out);
            return dump_fail(d, HYDRA_ERR_TYPE, "sort_keys with a non-string key");
        }
        keys[e] = dict->keys[e];
    }
    qsort(keys, dict->len, sizeof *keys, compare_keys);
    for (size_t e = 0; e < dict->len; e++)
        out[e] = (size_t)(jdict_get(dict, keys[e]) - dict->values);
    free(keys);
    *order = out;
    return true;
}

static bool dump_dict(dumper *d, const jdict *dict, unsigned level)
{
    if (dict->len == 0)
        return puts_(d, "{}");
    size_t *order;
    if (!dict_order(d, dict, &order))
        return false;
    bool ok = put(d, "{", 1);
    for (size_t k = 0; ok && k < dict->len; k++) {
        size_t e = order ? order[k] : k;
        ok = (k == 0 || puts_(d, d->style->item_sep)) && newline_indent(d, level + 1) && dump_key(d, dict->keys[e]) &&
             puts_(d, d->style->key_sep) && dump_value(d, dict->values[e], level + 1);
    }
    free(order);
    return ok && newline_indent(d, level) && put(d, "}", 1);
}

static bool dump_list(dumper *d, const jlist *list, unsigned level)
{
    if (list->len == 0)
        return puts_(d, "[]");
    if (!put(d, "[", 1))
        return false;
    for (size_t i = 0; i < list->len; i++)
        if ((i && !puts_(d, d->style->item_sep)) || !newline_indent(d, level + 1) ||
            !dump_value(d, list->items[i], level + 1))
            return false;
    return newline_indent(d, level) && put(d, "]", 1);
}

static bool dump_value(dumper *d, jv v, unsigned level)
{
    if (level > d->max_depth)
        return dump_fail(d, HYDRA_ERR_TYPE, "a value nested too deeply (circular?)");
    char tmp[32];
    switch (v.kind) {
    case JV_NONE:
        return puts_(d, "null");
    case JV_BOOL:
        return puts_(d, v.b ? "true" : "false");
    case JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.i);
        return puts_(d, tmp);
    case JV_FLOAT:
        return dump_float(d, v.f);
    case JV_STRING:
        return dump_string(d, v.s->bytes, v.s->len);
    case JV_LIST:
        return dump_list(d, v.list, level);
    case JV_DICT:
        return dump_dict(d, v.dict, level);
    default:
        return dump_fail(d, HYDRA_ERR_TYPE, jv_type_name(v));
    }
}

hydra_status jv_write_json(jbuf *buf, jv v, const jjson_style *style, unsigned max_depth, const char **bad)
{
    dumper d = {.buf = buf, .style = style, .max_depth = max_depth, .status = HYDRA_OK};
    dump_value(&d, v, 0);
    *bad = d.bad;
    return d.status;
}

/* ----------------------------------------------------------------- parse */

enum { JSON_MAX_DEPTH = 512 };

typedef struct parser {
    jarena *arena;
    const char *text;
    size_t len, pos;
    const char *what;
    unsigned depth;
    hydra_status status;
} parser;

static hydra_status parse_fail(parser *p, const char *reason)
{
    if (p->status == HYDRA_OK)
        p->status = hydra_fail(HYDRA_ERR_FORMAT, "%s: invalid JSON at byte %zu: %s", p->what, p->pos, reason);
    return p->status;
}

static hydra_status parse_nomem(parser *p)
{
    if (p->status == HYDRA_OK)
        p->status = hydra_fail(HYDRA_ERR_NOMEM, "%s: out of memory reading JSON (limit %zu bytes)", p->what,
                               p->arena->limit);
    return p->status;
}

static void skip_space(parser *p)
{
    while (p->pos < p->len && strchr(" \t\r\n", p->text[p->pos]) && p->text[p->pos])
        p->pos++;
}

/* Consumes c when it is the next character. */
static bool accept(parser *p, char c)
{
    if (p->pos < p->len && p->text[p->pos] == c) {
        p->pos++;
        return true;
    }
    return false;
}

static bool literal(parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->text + p->pos, word, n) != 0)
        return false;
    p->pos += n;
    return true;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool read_u16(parser *p, unsigned *out)
{
    if (p->len - p->pos < 4)
        return false;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hex_digit(p->text[p->pos + k]);
        if (h < 0)
            return false;
        v = v * 16 + (unsigned)h;
    }
    p->pos += 4;
    *out = v;
    return true;
}

/* After "\u": one code point, joining a surrogate pair. */
static hydra_status parse_unicode_escape(parser *p, uint32_t *cp)
{
    unsigned unit;
    if (!read_u16(p, &unit))
        return parse_fail(p, "bad \\u escape");
    if (unit >= 0xdc00 && unit <= 0xdfff)
        return parse_fail(p, "lone low surrogate");
    if (unit >= 0xd800 && unit <= 0xdbff) {
        unsigned low;
        if (!literal(p, "\\u") || !read_u16(p, &low) || low < 0xdc00 || low > 0xdfff)
            return parse_fail(p, "lone high surrogate");
        *cp = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
        return HYDRA_OK;
    }
    *cp = unit;
    return HYDRA_OK;
}

static hydra_status parse_string(parser *p, jv *out)
{
    p->pos++; /* opening quote */
    size_t start = p->pos;
    while (p->pos < p->len && p->text[p->pos] != '"')
        p->pos += p->text[p->pos] == '\\' ? 2 : 1;
    if (p->pos >= p->len)
        return parse_fail(p, "unterminated string");
    size_t end = p->pos;
    /* Decoded text is never longer than its escaped form. */
    char *bytes = jarena_alloc(p->arena, end - start + 1);
    if (bytes == NULL)
        return parse_nomem(p);
    size_t n = 0;
    for (p->pos = start; p->pos < end;) {
        unsigned char c = (unsigned char)p->text[p->pos++];
        if (c < 0x20)
            return parse_fail(p, "control character in string");
        if (c != '\\') {
            bytes[n++] = (char)c;
            continue;
        }
        char e = p->text[p->pos++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *hit = e ? strchr(from, e) : NULL;
        if (hit) {
            bytes[n++] = to[hit - from];
        } else if (e == 'u') {
            uint32_t cp = 0;
            if (parse_unicode_escape(p, &cp) != HYDRA_OK)
                return p->status;
            n += utf8_put(cp, bytes + n);
        } else {
            return parse_fail(p, "bad escape");
        }
    }
    p->pos = end + 1;
    jstr *decoded = jstr_new(p->arena, bytes, n);
    if (decoded == NULL)
        return parse_nomem(p);
    *out = jv_str(decoded);
    return HYDRA_OK;
}

static hydra_status parse_number(parser *p, jv *out)
{
    size_t start = p->pos;
    bool is_float = false;
    if (p->text[p->pos] == '-')
        p->pos++;
    if (p->pos >= p->len || !(p->text[p->pos] >= '0' && p->text[p->pos] <= '9'))
        return parse_fail(p, "bad number");
    while (p->pos < p->len && strchr("0123456789+-.eE", p->text[p->pos]) && p->text[p->pos]) {
        if (strchr(".eE", p->text[p->pos]))
            is_float = true;
        p->pos++;
    }
    char tmp[64];
    size_t n = p->pos - start;
    if (n >= sizeof tmp)
        return parse_fail(p, "number too long");
    memcpy(tmp, p->text + start, n);
    tmp[n] = '\0';
    const char *digits = tmp + (tmp[0] == '-');
    if (digits[0] == '0' && digits[1] >= '0' && digits[1] <= '9')
        return parse_fail(p, "leading zero");
    char *end;
    errno = 0;
    if (is_float) {
        double f = strtod(tmp, &end);
        if (*end)
            return parse_fail(p, "bad number");
        *out = jv_float(f);
    } else {
        long long i = strtoll(tmp, &end, 10);
        if (*end)
            return parse_fail(p, "bad number");
        if (errno == ERANGE)
            return parse_fail(p, "integer does not fit in 64 bits");
        *out = jv_int(i);
    }
    return HYDRA_OK;
}

static hydra_status parse_value(parser *p, jv *out);

/* An object member's "key" and ':', before its value. */
static hydra_status parse_key(parser *p, jv *key)
{
    skip_space(p);
    if (p->pos >= p->len || p->text[p->pos] != '"')
        return parse_fail(p, "expected a string key");
    if (parse_string(p, key) != HYDRA_OK)
        return p->status;
    skip_space(p);
    return accept(p, ':') ? HYDRA_OK : parse_fail(p, "expected ':'");
}

/* An array (at '[') or an object (at '{'): the same comma-separated list,
 * an object's items each preceded by its key. */
static hydra_status parse_container(parser *p, jv *out)
{
    const bool object = p->text[p->pos++] == '{';
    const char close = object ? '}' : ']';
    jlist *list = object ? NULL : jlist_new(p->arena, 0);
    jdict *dict = object ? jdict_new(p->arena) : NULL;
    if (list == NULL && dict == NULL)
        return parse_nomem(p);
    skip_space(p);
    if (!accept(p, close))
        for (;;) {
            jv key, value;
            if (object && parse_key(p, &key) != HYDRA_OK)
                return p->status;
            if (parse_value(p, &value) != HYDRA_OK)
                return p->status;
            if (object ? !jdict_set(p->arena, dict, key, value) : !jlist_push(p->arena, list, value))
                return parse_nomem(p);
            skip_space(p);
            if (accept(p, close))
                break;
            if (!accept(p, ','))
                return parse_fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    *out = object ? (jv){.kind = JV_DICT, .dict = dict} : (jv){.kind = JV_LIST, .list = list};
    return HYDRA_OK;
}

static hydra_status parse_value(parser *p, jv *out)
{
    skip_space(p);
    if (p->pos >= p->len)
        return parse_fail(p, "unexpected end");
    if (++p->depth > JSON_MAX_DEPTH)
        return parse_fail(p, "nested too deeply");
    hydra_status st;
    char c = p->text[p->pos];
    if (c == '{' || c == '[')
        st = parse_container(p, out);
    else if (c == '"')
        st = parse_string(p, out);
    else if (c == '-' || (c >= '0' && c <= '9'))
        st = parse_number(p, out);
    else if (literal(p, "true"))
        st = (*out = jv_bool(true), HYDRA_OK);
    else if (literal(p, "false"))
        st = (*out = jv_bool(false), HYDRA_OK);
    else if (literal(p, "null"))
        st = (*out = jv_none(), HYDRA_OK);
    else
        st = parse_fail(p, "unexpected character");
    p->depth--;
    return st;
}

hydra_status jv_parse_json(jarena *arena, const char *text, size_t len, const char *what, jv *out)
{
    parser p = {.arena = arena, .text = text, .len = len, .what = what, .status = HYDRA_OK};
    if (parse_value(&p, out) != HYDRA_OK)
        return p.status;
    skip_space(&p);
    if (p.pos != p.len)
        return parse_fail(&p, "text after the value");
    return HYDRA_OK;
}
