/*
 * jinja_methods.c — the Python methods templates call on values
 * (str.startswith, str.split, dict.items, dict.get, ...), loop.cycle, and
 * the globals: range, namespace, dict, raise_exception, strftime_now.
 *
 * Case mapping (upper, lower, title, capitalize) is ASCII-only; Python maps
 * all of Unicode.  Whitespace for strip/split is Python's str.isspace().
 */
#include "error.h"
#include "jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------- string helpers */

static bool in_chars(uint32_t cp, const jstr *chars)
{
    if (chars == NULL)
        return py_isspace(cp);
    for (size_t pos = 0; pos < chars->len;)
        if (utf8_next(chars->bytes, chars->len, &pos) == cp)
            return true;
    return false;
}

/* Start of the code point that ends at `end`. */
static size_t prev_cp(const char *s, size_t start, size_t end)
{
    size_t k = end - 1;
    while (k > start && ((unsigned char)s[k] & 0xc0) == 0x80 && end - k < 4)
        k--;
    size_t probe = k;
    utf8_next(s, end, &probe);
    return probe == end ? k : end - 1;
}

hydra_status jstr_strip(jctx *ctx, jv value, jv chars, bool left, bool right, jv *out)
{
    if (value.kind != JV_STRING)
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "strip needs a string, not '%s'", jv_type_name(value));
    const jstr *set = NULL;
    if (chars.kind == JV_STRING)
        set = chars.s;
    else if (chars.kind != JV_NONE && chars.kind != JV_UNDEFINED)
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "strip arg must be None or str, not '%s'", jv_type_name(chars));
    const jstr *s = value.s;
    size_t start = 0, end = s->len;
    while (left && start < end) {
        size_t next = start;
        if (!in_chars(utf8_next(s->bytes, end, &next), set))
            break;
        start = next;
    }
    while (right && end > start) {
        size_t k = prev_cp(s->bytes, start, end), probe = k;
        if (!in_chars(utf8_next(s->bytes, end, &probe), set))
            break;
        end = k;
    }
    if (start == 0 && end == s->len) {
        *out = value;
        return HYDRA_OK;
    }
    return jctx_str(ctx, s->bytes + start, end - start, out);
}

hydra_status jstr_replace(jctx *ctx, const jstr *s, const jstr *old, const jstr *new, int64_t count, jv *out)
{
    jbuf buf = {.limit = ctx->limits.max_memory};
    bool ok = true;
    size_t pos = 0;
    int64_t done = 0;
    if (old->len == 0) {
        /* Python inserts `new` before every code point and at the end. */
        while (ok && (count < 0 || done < count) && pos <= s->len) {
            ok = jbuf_put(&buf, new->bytes, new->len);
            done++;
            if (pos == s->len) {
                pos++;
                break;
            }
            size_t start = pos;
            utf8_next(s->bytes, s->len, &pos);
            ok = ok && jbuf_put(&buf, s->bytes + start, pos - start);
        }
        if (ok && pos <= s->len)
            ok = jbuf_put(&buf, s->bytes + pos, s->len - pos);
    } else {
        while (ok && (count < 0 || done < count)) {
            const char *hit = memmem(s->bytes + pos, s->len - pos, old->bytes, old->len);
            if (hit == NULL)
                break;
            size_t at = (size_t)(hit - s->bytes);
            ok = jbuf_put(&buf, s->bytes + pos, at - pos) && jbuf_put(&buf, new->bytes, new->len);
            pos = at + old->len;
            done++;
        }
        ok = ok && jbuf_put(&buf, s->bytes + pos, s->len - pos);
    }
    if (!ok) {
        free(buf.data);
        return jctx_nomem(ctx);
    }
    return jctx_buf_str(ctx, &buf, out);
}

static char ascii_upper(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
}

static char ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}

static bool ascii_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' title. */
hydra_status jstr_case(jctx *ctx, const jstr *s, char mode, jv *out)
{
    jstr *r = jstr_new(ctx->arena, s->bytes, s->len);
    if (r == NULL)
        return jctx_nomem(ctx);
    bool word_start = true;
    for (size_t k = 0; k < r->len; k++) {
        char c = r->bytes[k];
        bool upper = mode == 'u' || (mode == 'c' && k == 0) || (mode == 't' && word_start);
        r->bytes[k] = upper ? ascii_upper(c) : ascii_lower(c);
        word_start = !ascii_alpha(c) && (unsigned char)c < 0x80;
    }
    *out = jv_str(r);
    return HYDRA_OK;
}

static hydra_status need_str(jctx *ctx, jv v, const char *what)
{
    if (v.kind == JV_STRING)
        return HYDRA_OK;
    return jctx_fail(ctx, HYDRA_ERR_TYPE, "%s needs a string argument, not '%s'", what, jv_type_name(v));
}

/* ---------------------------------------------------------- str methods */

/* startswith/endswith: a string or a tuple of strings. */
static hydra_status affix(jctx *ctx, jv self, jv arg, bool at_end, jv *out)
{
    const jv *options = &arg;
    size_t n = 1;
    if (arg.kind == JV_LIST) {
        options = arg.list->items;
        n = arg.list->len;
    }
    for (size_t k = 0; k < n; k++) {
        hydra_status st = need_str(ctx, options[k], at_end ? "endswith" : "startswith");
        if (st != HYDRA_OK)
            return st;
        const jstr *a = options[k].s;
        if (a->len <= self.s->len &&
            memcmp(self.s->bytes + (at_end ? self.s->len - a->len : 0), a->bytes, a->len) == 0) {
            *out = jv_bool(true);
            return HYDRA_OK;
        }
    }
    *out = jv_bool(false);
    return HYDRA_OK;
}

static hydra_status m_startswith(jctx *ctx, jv self, const jv *args, jv *out)
{
    return affix(ctx, self, args[0], false, out);
}

static hydra_status m_endswith(jctx *ctx, jv self, const jv *args, jv *out)
{
    return affix(ctx, self, args[0], true, out);
}

static hydra_status m_strip(jctx *ctx, jv self, const jv *args, jv *out)
{
    return jstr_strip(ctx, self, args[0], true, true, out);
}

static hydra_status m_lstrip(jctx *ctx, jv self, const jv *args, jv *out)
{
    return jstr_strip(ctx, self, args[0], true, false, out);
}

static hydra_status m_rstrip(jctx *ctx, jv self, const jv *args, jv *out)
{
    return jstr_strip(ctx, self, args[0], false, true, out);
}

static hydra_status push_piece(jctx *ctx, jlist *list, const char *bytes, size_t len)
{
    jv piece;
    hydra_status st = jctx_str(ctx, bytes, len, &piece);
    return st == HYDRA_OK ? jctx_push(ctx, list, piece) : st;
}

/* str.split() without a separator: runs of whitespace, ends ignored. */
static hydra_status split_whitespace(jctx *ctx, const jstr *s, int64_t maxsplit, jlist *list)
{
    size_t pos = 0;
    hydra_status st = HYDRA_OK;
    for (;;) {
        while (pos < s->len) {
            size_t next = pos;
            if (!py_isspace(utf8_next(s->bytes, s->len, &next)))
                break;
            pos = next;
        }
        if (pos >= s->len)
            return st;
        if (maxsplit >= 0 && (int64_t)list->len >= maxsplit) {
            jv rest;
            if ((st = jstr_strip(ctx, (jv){.kind = JV_STRING, .s = s}, jv_none(), false, true, &rest)) != HYDRA_OK)
                return st;
            return push_piece(ctx, list, rest.s->bytes + pos, rest.s->len - pos);
        }
        size_t start = pos;
        while (pos < s->len) {
            size_t next = pos;
            if (py_isspace(utf8_next(s->bytes, s->len, &next)))
                break;
            pos = next;
        }
        if ((st = push_piece(ctx, list, s->bytes + start, pos - start)) != HYDRA_OK)
            return st;
    }
}

static hydra_status split_sep(jctx *ctx, const jstr *s, const jstr *sep, int64_t maxsplit, jlist *list)
{
    size_t pos = 0;
    for (int64_t done = 0; maxsplit < 0 || done < maxsplit; done++) {
        const char *hit = memmem(s->bytes + pos, s->len - pos, sep->bytes, sep->len);
        if (hit == NULL)
            break;
        hydra_status st = push_piece(ctx, list, s->bytes + pos, (size_t)(hit - s->bytes) - pos);
        if (st != HYDRA_OK)
            return st;
        pos = (size_t)(hit - s->bytes) + sep->len;
    }
    return push_piece(ctx, list, s->bytes + pos, s->len - pos);
}

/* rsplit with a separator: split from the right, pieces in order. */
static hydra_status rsplit_sep(jctx *ctx, const jstr *s, const jstr *sep, int64_t maxsplit, jlist *list)
{
    size_t end = s->len;
    jlist *reversed;
    hydra_status st = jctx_list(ctx, 0, &reversed);
    for (int64_t done = 0; st == HYDRA_OK && (maxsplit < 0 || done < maxsplit) && end >= sep->len; done++) {
        size_t at = end - sep->len;
        while (memcmp(s->bytes + at, sep->bytes, sep->len) != 0 && at > 0)
            at--;
        if (memcmp(s->bytes + at, sep->bytes, sep->len) != 0)
            break;
        st = push_piece(ctx, reversed, s->bytes + at + sep->len, end - at - sep->len);
        end = at;
    }
    if (st == HYDRA_OK)
        st = push_piece(ctx, reversed, s->bytes, end);
    for (size_t k = reversed->len; st == HYDRA_OK && k > 0; k--)
        st = jctx_push(ctx, list, reversed->items[k - 1]);
    return st;
}

static hydra_status split_common(jctx *ctx, jv self, const jv *args, bool from_right, jv *out)
{
    jv sep = args[0], max_v = args[1];
    int64_t maxsplit = -1;
    if (jarg_given(max_v)) {
        if (max_v.kind != JV_INT)
            return jctx_fail(ctx, HYDRA_ERR_TYPE, "maxsplit must be an integer");
        maxsplit = max_v.i;
    }
    jlist *list;
    hydra_status st = jctx_list(ctx, 0, &list);
    if (st != HYDRA_OK)
        return st;
    if (!jarg_given(sep) || sep.kind == JV_NONE) {
        if (from_right && maxsplit >= 0)
            return jctx_fail(ctx, HYDRA_ERR_UNSUPPORTED, "rsplit with maxsplit and no separator is not supported");
        st = split_whitespace(ctx, self.s, maxsplit, list);
    } else if ((st = need_str(ctx, sep, "split")) == HYDRA_OK) {
        if (sep.s->len == 0)
            return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "empty separator");
        st = from_right ? rsplit_sep(ctx, self.s, sep.s, maxsplit, list) : split_sep(ctx, self.s, sep.s, maxsplit, list);
    }
    *out = (jv){.kind = JV_LIST, .list = list};
    return st;
}

static hydra_status m_split(jctx *ctx, jv self, const jv *args, jv *out)
{
    return split_common(ctx, self, args, false, out);
}

static hydra_status m_rsplit(jctx *ctx, jv self, const jv *args, jv *out)
{
    return split_common(ctx, self, args, true, out);
}

/* Lines split at \n, \r\n and \r (Python also splits at \v, \f, \x1c-\x1e,
 * \x85, U+2028 and U+2029). */
static hydra_status m_splitlines(jctx *ctx, jv self, const jv *args, jv *out)
{
    bool keepends = jv_truthy(args[0]);
    const jstr *s = self.s;
    jlist *list;
    hydra_status st = jctx_list(ctx, 0, &list);
    size_t start = 0;
    for (size_t k = 0; st == HYDRA_OK && k < s->len; k++) {
        if (s->bytes[k] != '\n' && s->bytes[k] != '\r')
            continue;
        size_t end = k;
        if (s->bytes[k] == '\r' && k + 1 < s->len && s->bytes[k + 1] == '\n')
            k++;
        st = push_piece(ctx, list, s->bytes + start, (keepends ? k + 1 : end) - start);
        start = k + 1;
    }
    if (st == HYDRA_OK && start < s->len)
        st = push_piece(ctx, list, s->bytes + start, s->len - start);
    *out = (jv){.kind = JV_LIST, .list = list};
    return st;
}

static hydra_status m_replace(jctx *ctx, jv self, const jv *args, jv *out)
{
    hydra_status st = need_str(ctx, args[0], "replace");
    if (st == HYDRA_OK)
        st = need_str(ctx, args[1], "replace");
    if (st != HYDRA_OK)
        return st;
    int64_t count = args[2].kind == JV_INT ? args[2].i : -1;
    return jstr_replace(ctx, self.s, args[0].s, args[1].s, count, out);
}

static hydra_status m_upper(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)args;
    return jstr_case(ctx, self.s, 'u', out);
}

static hydra_status m_lower(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)args;
    return jstr_case(ctx, self.s, 'l', out);
}

static hydra_status m_title(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)args;
    return jstr_case(ctx, self.s, 't', out);
}

static hydra_status m_capitalize(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)args;
    return jstr_case(ctx, self.s, 'c', out);
}

/* find/rfind/count return code point positions, as Python does. */
static hydra_status m_find_common(jctx *ctx, jv self, jv sub, int which, jv *out)
{
    hydra_status st = need_str(ctx, sub, which == 2 ? "count" : "find");
    if (st != HYDRA_OK)
        return st;
    const jstr *s = self.s, *n = sub.s;
    int64_t found = -1, count = 0;
    for (size_t pos = 0; pos + n->len <= s->len;) {
        const char *hit = memmem(s->bytes + pos, s->len - pos, n->bytes, n->len);
        if (hit == NULL)
            break;
        size_t at = (size_t)(hit - s->bytes);
        if (found < 0 || which == 1)
            found = (int64_t)utf8_length(s->bytes, at);
        count++;
        if (which == 0)
            break;
        pos = at + (n->len ? n->len : 1);
        if (n->len == 0 && at == s->len)
            break;
    }
    *out = jv_int(which == 2 ? count : found);
    return HYDRA_OK;
}

static hydra_status m_find(jctx *ctx, jv self, const jv *args, jv *out)
{
    return m_find_common(ctx, self, args[0], 0, out);
}

static hydra_status m_rfind(jctx *ctx, jv self, const jv *args, jv *out)
{
    return m_find_common(ctx, self, args[0], 1, out);
}

static hydra_status m_str_count(jctx *ctx, jv self, const jv *args, jv *out)
{
    return m_find_common(ctx, self, args[0], 2, out);
}

static hydra_status m_join(jctx *ctx, jv self, const jv *args, jv *out)
{
    jlist *items;
    hydra_status st = jeval_iterate(ctx, args[0], &items);
    jbuf buf = {.limit = ctx->limits.max_memory};
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++) {
        if (items->items[k].kind != JV_STRING)
            st = jctx_fail(ctx, HYDRA_ERR_TYPE, "sequence item %zu: expected str instance, %s found", k,
                           jv_type_name(items->items[k]));
        else if ((k && !jbuf_put(&buf, self.s->bytes, self.s->len)) ||
                 !jbuf_put(&buf, items->items[k].s->bytes, items->items[k].s->len))
            st = jctx_nomem(ctx);
    }
    if (st != HYDRA_OK) {
        free(buf.data);
        return st;
    }
    return jctx_buf_str(ctx, &buf, out);
}

/* isdigit/isalpha/...: every code point passes and there is at least one
 * (ASCII classes; non-ASCII counts as alphabetic). */
static hydra_status char_class(jv self, bool (*pass)(uint32_t), jv *out)
{
    const jstr *s = self.s;
    bool ok = s->len > 0;
    for (size_t pos = 0; ok && pos < s->len;)
        ok = pass(utf8_next(s->bytes, s->len, &pos));
    *out = jv_bool(ok);
    return HYDRA_OK;
}

static bool cp_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }
static bool cp_alpha(uint32_t cp) { return (cp < 0x80 && ascii_alpha((char)cp)) || cp >= 0xc0; }
static bool cp_alnum(uint32_t cp) { return cp_digit(cp) || cp_alpha(cp); }

static hydra_status m_isdigit(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    return char_class(self, cp_digit, out);
}

static hydra_status m_isalpha(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    return char_class(self, cp_alpha, out);
}

static hydra_status m_isalnum(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    return char_class(self, cp_alnum, out);
}

static hydra_status m_isspace(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    return char_class(self, py_isspace, out);
}

/* ---------------------------------------------------- dict, list methods */

static hydra_status dict_pairs(jctx *ctx, const jdict *dict, int which, jv *out)
{
    jlist *list;
    hydra_status st = jctx_list(ctx, dict->len, &list);
    for (size_t e = 0; st == HYDRA_OK && e < dict->len; e++) {
        if (which == 0) {
            jlist *pair;
            if ((st = jctx_list(ctx, 2, &pair)) != HYDRA_OK)
                break;
            pair->items[0] = dict->keys[e];
            pair->items[1] = dict->values[e];
            pair->len = 2;
            pair->is_tuple = true;
            list->items[e] = (jv){.kind = JV_LIST, .list = pair};
        } else {
            list->items[e] = which == 1 ? dict->keys[e] : dict->values[e];
        }
    }
    if (st == HYDRA_OK)
        list->len = dict->len;
    *out = (jv){.kind = JV_LIST, .list = list};
    return st;
}

hydra_status jdict_items(jctx *ctx, const jdict *dict, jv *out)
{
    return dict_pairs(ctx, dict, 0, out);
}

static hydra_status m_items(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)args;
    return dict_pairs(ctx, self.dict, 0, out);
}

static hydra_status m_keys(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)args;
    return dict_pairs(ctx, self.dict, 1, out);
}

static hydra_status m_values(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)args;
    return dict_pairs(ctx, self.dict, 2, out);
}

static hydra_status m_get(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)ctx;
    bool hashable = args[0].kind != JV_LIST && args[0].kind != JV_DICT && args[0].kind != JV_NAMESPACE;
    const jv *v = hashable ? jdict_get(self.dict, args[0]) : NULL;
    *out = v ? *v : jarg_given(args[1]) ? args[1] : jv_none();
    return HYDRA_OK;
}

static hydra_status m_copy(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    *out = self; /* values are immutable in the sandbox: a copy is the same */
    return HYDRA_OK;
}

static hydra_status m_index(jctx *ctx, jv self, const jv *args, jv *out)
{
    for (size_t k = 0; k < self.list->len; k++)
        if (jv_equal(self.list->items[k], args[0])) {
            *out = jv_int((int64_t)k);
            return HYDRA_OK;
        }
    return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "list.index(x): x not in list");
}

static hydra_status m_list_count(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)ctx;
    int64_t n = 0;
    for (size_t k = 0; k < self.list->len; k++)
        n += jv_equal(self.list->items[k], args[0]);
    *out = jv_int(n);
    return HYDRA_OK;
}

static hydra_status m_cycle(jctx *ctx, jv self, const jv *args, jv *out)
{
    const jlist *values = args[0].list;
    if (values->len == 0)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "loop.cycle() needs at least one value");
    *out = values->items[self.loop->index0 % values->len];
    return HYDRA_OK;
}

static const jbuiltin str_methods[] = {
    {"startswith", m_startswith, 1, {"prefix"}, false, false},
    {"endswith", m_endswith, 1, {"suffix"}, false, false},
    {"strip", m_strip, 0, {"chars"}, false, false},
    {"lstrip", m_lstrip, 0, {"chars"}, false, false},
    {"rstrip", m_rstrip, 0, {"chars"}, false, false},
    {"split", m_split, 0, {"sep", "maxsplit"}, false, false},
    {"rsplit", m_rsplit, 0, {"sep", "maxsplit"}, false, false},
    {"splitlines", m_splitlines, 0, {"keepends"}, false, false},
    {"replace", m_replace, 2, {"old", "new", "count"}, false, false},
    {"upper", m_upper, 0, {NULL}, false, false},
    {"lower", m_lower, 0, {NULL}, false, false},
    {"title", m_title, 0, {NULL}, false, false},
    {"capitalize", m_capitalize, 0, {NULL}, false, false},
    {"find", m_find, 1, {"sub"}, false, false},
    {"rfind", m_rfind, 1, {"sub"}, false, false},
    {"count", m_str_count, 1, {"sub"}, false, false},
    {"join", m_join, 1, {"iterable"}, false, false},
    {"isdigit", m_isdigit, 0, {NULL}, false, false},
    {"isalpha", m_isalpha, 0, {NULL}, false, false},
    {"isalnum", m_isalnum, 0, {NULL}, false, false},
    {"isspace", m_isspace, 0, {NULL}, false, false},
    {NULL, NULL, 0, {NULL}, false, false},
};

static const jbuiltin dict_methods[] = {
    {"items", m_items, 0, {NULL}, false, false},
    {"keys", m_keys, 0, {NULL}, false, false},
    {"values", m_values, 0, {NULL}, false, false},
    {"get", m_get, 1, {"key", "default"}, false, false},
    {"copy", m_copy, 0, {NULL}, false, false},
    {NULL, NULL, 0, {NULL}, false, false},
};

static const jbuiltin list_methods[] = {
    {"index", m_index, 1, {"value"}, false, false},
    {"count", m_list_count, 1, {"value"}, false, false},
    {"copy", m_copy, 0, {NULL}, false, false},
    {NULL, NULL, 0, {NULL}, false, false},
};

static const jbuiltin loop_methods[] = {
    {"cycle", m_cycle, 0, {NULL}, true, false},
    {NULL, NULL, 0, {NULL}, false, false},
};

const jbuiltin *jmethod_find(jkind kind, const char *name, size_t len)
{
    switch (kind) {
    case JV_STRING:
        return jbuiltin_find(str_methods, name, len);
    case JV_DICT:
        return jbuiltin_find(dict_methods, name, len);
    case JV_LIST:
        return jbuiltin_find(list_methods, name, len);
    case JV_LOOP:
        return jbuiltin_find(loop_methods, name, len);
    default:
        return NULL;
    }
}

/* jinja2.sandbox's _mutable_spec for list and dict. */
bool jmethod_is_unsafe(jkind kind, const char *name, size_t len)
{
    static const char *const list_unsafe[] = {"append", "clear", "extend", "insert", "pop", "remove",
                                              "reverse", "sort", NULL};
    static const char *const dict_unsafe[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
    const char *const *names = kind == JV_LIST ? list_unsafe : kind == JV_DICT ? dict_unsafe : NULL;
    for (size_t k = 0; names && names[k]; k++)
        if (strlen(names[k]) == len && memcmp(names[k], name, len) == 0)
            return true;
    return false;
}

/* --------------------------------------------------------------- globals */

static hydra_status int_arg(jctx *ctx, jv v, const char *what, int64_t *out)
{
    if (v.kind == JV_INT || v.kind == JV_BOOL) {
        *out = v.kind == JV_BOOL ? v.b : v.i;
        return HYDRA_OK;
    }
    return jctx_fail(ctx, HYDRA_ERR_TYPE, "%s must be an integer, not '%s'", what, jv_type_name(v));
}

static hydra_status g_range(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)self;
    int64_t start = 0, stop = 0, step = 1;
    hydra_status st = int_arg(ctx, args[0], "range()", &stop);
    if (st == HYDRA_OK && jarg_given(args[1])) {
        start = stop;
        st = int_arg(ctx, args[1], "range()", &stop);
    }
    if (st == HYDRA_OK && jarg_given(args[2]))
        st = int_arg(ctx, args[2], "range()", &step);
    if (st != HYDRA_OK)
        return st;
    if (step == 0)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "range() arg 3 must not be zero");
    /* The span and |step| fit in uint64 even at the int64 extremes. */
    uint64_t count = 0, abs_step = step > 0 ? (uint64_t)step : (uint64_t)(-(step + 1)) + 1;
    if (step > 0 && stop > start)
        count = ((uint64_t)stop - (uint64_t)start - 1) / abs_step + 1;
    else if (step < 0 && stop < start)
        count = ((uint64_t)start - (uint64_t)stop - 1) / abs_step + 1;
    if ((st = jctx_step(ctx, count)) != HYDRA_OK)
        return st;
    jlist *list;
    if ((st = jctx_list(ctx, (size_t)count, &list)) != HYDRA_OK)
        return st;
    for (uint64_t k = 0; k < count; k++)
        list->items[k] = jv_int((int64_t)((uint64_t)start + k * (uint64_t)step));
    list->len = (size_t)count;
    *out = (jv){.kind = JV_LIST, .list = list};
    return HYDRA_OK;
}

static hydra_status copy_into(jctx *ctx, jdict *dict, const jdict *from)
{
    for (size_t e = 0; from && e < from->len; e++)
        if (!jdict_set(ctx->arena, dict, from->keys[e], from->values[e]))
            return jctx_nomem(ctx);
    return HYDRA_OK;
}

/* namespace(mapping?, **attrs) and dict(mapping?, **items). */
static hydra_status make_mapping(jctx *ctx, const jv *args, jkind kind, jv *out)
{
    jdict *dict = jdict_new(ctx->arena);
    if (dict == NULL)
        return jctx_nomem(ctx);
    const jlist *positional = args[0].list;
    if (positional->len > 1)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "expected at most 1 positional argument");
    hydra_status st = HYDRA_OK;
    if (positional->len == 1) {
        if (positional->items[0].kind != JV_DICT)
            return jctx_fail(ctx, HYDRA_ERR_TYPE, "expected a mapping, not '%s'", jv_type_name(positional->items[0]));
        st = copy_into(ctx, dict, positional->items[0].dict);
    }
    if (st == HYDRA_OK)
        st = copy_into(ctx, dict, args[1].dict);
    *out = (jv){.kind = kind, .dict = dict};
    return st;
}

static hydra_status g_namespace(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)self;
    return make_mapping(ctx, args, JV_NAMESPACE, out);
}

static hydra_status g_dict(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)self;
    return make_mapping(ctx, args, JV_DICT, out);
}

static hydra_status g_raise_exception(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)self, (void)out;
    jv message;
    hydra_status st = jeval_to_str(ctx, args[0], &message);
    if (st != HYDRA_OK)
        return st;
    return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "raise_exception: %s", message.s->bytes);
}

/* transformers formats datetime.now(); a fixed time (tests) is shown in UTC. */
static hydra_status g_strftime_now(jctx *ctx, jv self, const jv *args, jv *out)
{
    (void)self;
    hydra_status st = need_str(ctx, args[0], "strftime_now");
    if (st != HYDRA_OK)
        return st;
    struct tm tm;
    time_t now = ctx->time_fixed ? (time_t)ctx->now : time(NULL);
    if ((ctx->time_fixed ? gmtime_r(&now, &tm) : localtime_r(&now, &tm)) == NULL)
        return jctx_fail(ctx, HYDRA_ERR_RANGE, "strftime_now: time out of range");
    char text[512];
    size_t n = args[0].s->len ? strftime(text, sizeof text, args[0].s->bytes, &tm) : 0;
    if (n == 0 && args[0].s->len)
        return jctx_fail(ctx, HYDRA_ERR_RANGE, "strftime_now: format gives nothing or more than %zu bytes",
                         sizeof text - 1);
    return jctx_str(ctx, text, n, out);
}

static const jbuiltin globals[] = {
    {"range", g_range, 1, {"start", "stop", "step"}, false, false},
    {"namespace", g_namespace, 0, {NULL}, true, true},
    {"dict", g_dict, 0, {NULL}, true, true},
    {"raise_exception", g_raise_exception, 1, {"message"}, false, false},
    {"strftime_now", g_strftime_now, 1, {"format"}, false, false},
    {NULL, NULL, 0, {NULL}, false, false},
};

const jbuiltin *jglobal_find(const char *name, size_t len)
{
    return jbuiltin_find(globals, name, len);
}
