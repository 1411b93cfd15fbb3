/*
 * jinja_builtins.c — jinja2's filters and tests (jinja2/filters.py,
 * jinja2/tests.py) with transformers' tojson, and the binding of call
 * arguments to a built-in's parameters.
 *
 * Filters that take an `attribute` accept jinja2's dotted paths
 * ("a.b.0").  Case folding for case_sensitive=false is ASCII-only.
 */
#include "error.h"
#include "jinja_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------- binding */

static size_t param_count(const jbuiltin *b)
{
    size_t n = 0;
    while (n < JBUILTIN_MAX_PARAMS && b->params[n])
        n++;
    return n;
}

static hydra_status bind_keyword(jctx *ctx, const jbuiltin *b, jv *slots, size_t n_params, const jstr *name,
                                 jv value, jdict **extra)
{
    for (size_t p = 0; p < n_params; p++) {
        if (strcmp(b->params[p], name->bytes) != 0)
            continue;
        if (jarg_given(slots[p]))
            return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "%s() got multiple values for argument '%s'", b->name,
                             name->bytes);
        slots[p] = value;
        return HYDRA_OK;
    }
    if (!b->varkw)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "%s() got an unexpected keyword argument '%s'", b->name,
                         name->bytes);
    if (*extra == NULL && (*extra = jdict_new(ctx->arena)) == NULL)
        return jctx_nomem(ctx);
    return jdict_set(ctx->arena, *extra, jv_str(name), value) ? HYDRA_OK : jctx_nomem(ctx);
}

hydra_status jbuiltin_call(jctx *ctx, const jbuiltin *b, jv self, const jv *args, size_t n_args,
                           const jstr **kw_names, const jv *kw_values, size_t n_kw, jv *out)
{
    jv slots[JBUILTIN_MAX_PARAMS + 2];
    size_t n_params = param_count(b);
    for (size_t k = 0; k < JBUILTIN_MAX_PARAMS + 2; k++)
        slots[k] = jv_undefined(NULL);
    if (n_args > n_params && !b->varargs)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "%s() takes at most %zu argument(s) (%zu given)", b->name,
                         n_params, n_args);
    for (size_t k = 0; k < n_args && k < n_params; k++)
        slots[k] = args[k];
    hydra_status st = HYDRA_OK;
    if (b->varargs) {
        jlist *rest;
        if ((st = jctx_list(ctx, 0, &rest)) != HYDRA_OK)
            return st;
        for (size_t k = n_params; st == HYDRA_OK && k < n_args; k++)
            st = jctx_push(ctx, rest, args[k]);
        slots[n_params] = (jv){.kind = JV_LIST, .list = rest};
    }
    jdict *extra = NULL;
    for (size_t k = 0; st == HYDRA_OK && k < n_kw; k++)
        st = bind_keyword(ctx, b, slots, n_params, kw_names[k], kw_values[k], &extra);
    if (st != HYDRA_OK)
        return st;
    if (b->varkw) {
        if (extra == NULL && (extra = jdict_new(ctx->arena)) == NULL)
            return jctx_nomem(ctx);
        slots[n_params + b->varargs] = (jv){.kind = JV_DICT, .dict = extra};
    }
    for (size_t p = 0; p < b->required; p++)
        if (!jarg_given(slots[p]))
            return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "%s() missing required argument '%s'", b->name, b->params[p]);
    return b->fn(ctx, self, slots, out);
}

/* A test applied to a value, for select/reject. */
static hydra_status jtest_apply(jctx *ctx, const jbuiltin *test, jv value, const jv *args, size_t n_args, bool *out)
{
    jv result;
    hydra_status st = jbuiltin_call(ctx, test, value, args, n_args, NULL, NULL, 0, &result);
    *out = st == HYDRA_OK && jv_truthy(result);
    return st;
}

/* ---------------------------------------------------------------- tests */

#define TEST_FN(name, expr)                                                   \
    static hydra_status name(jctx *ctx, jv v, const jv *args, jv *out)        \
    {                                                                         \
        (void)ctx, (void)args, (void)v;                                       \
        *out = jv_bool(expr);                                                 \
        return HYDRA_OK;                                                      \
    }

TEST_FN(t_defined, v.kind != JV_UNDEFINED)
TEST_FN(t_undefined, v.kind == JV_UNDEFINED)
TEST_FN(t_none, v.kind == JV_NONE)
TEST_FN(t_boolean, v.kind == JV_BOOL)
TEST_FN(t_true, v.kind == JV_BOOL && v.b)
TEST_FN(t_false, v.kind == JV_BOOL && !v.b)
TEST_FN(t_integer, v.kind == JV_INT)
TEST_FN(t_float, v.kind == JV_FLOAT)
TEST_FN(t_number, jv_is_number(v))
TEST_FN(t_string, v.kind == JV_STRING)
TEST_FN(t_mapping, v.kind == JV_DICT)
/* Undefined iterates (as empty) and has a length in jinja2. */
TEST_FN(t_iterable, v.kind == JV_STRING || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEFINED)
TEST_FN(t_callable, v.kind == JV_CALLABLE || v.kind == JV_UNDEFINED)
TEST_FN(t_escaped, false)

static hydra_status t_lower_upper(jv v, bool upper, jv *out)
{
    bool cased = false, ok = v.kind == JV_STRING;
    for (size_t k = 0; ok && k < v.s->len; k++) {
        char c = v.s->bytes[k];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            cased = true;
            ok = upper ? !(c >= 'a' && c <= 'z') : !(c >= 'A' && c <= 'Z');
        }
    }
    *out = jv_bool(ok && cased);
    return HYDRA_OK;
}

static hydra_status t_lower(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    return t_lower_upper(v, false, out);
}

static hydra_status t_upper(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    return t_lower_upper(v, true, out);
}

static hydra_status need_number(jctx *ctx, jv v, const char *what)
{
    if (jv_is_number(v))
        return HYDRA_OK;
    if (v.kind == JV_UNDEFINED)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "'%s' is undefined", v.undefined_name ? v.undefined_name : "value");
    return jctx_fail(ctx, HYDRA_ERR_TYPE, "%s needs a number, not '%s'", what, jv_type_name(v));
}

static hydra_status t_divisibleby(jctx *ctx, jv v, const jv *args, jv *out)
{
    hydra_status st = need_number(ctx, v, "divisibleby");
    if (st == HYDRA_OK)
        st = need_number(ctx, args[0], "divisibleby");
    if (st != HYDRA_OK)
        return st;
    double d = jv_as_double(args[0]);
    if (d == 0)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "divisibleby zero");
    *out = jv_bool(fmod(jv_as_double(v), d) == 0);
    return HYDRA_OK;
}

static hydra_status t_odd_even(jctx *ctx, jv v, bool odd, jv *out)
{
    hydra_status st = need_number(ctx, v, odd ? "odd" : "even");
    if (st != HYDRA_OK)
        return st;
    double r = fmod(jv_as_double(v), 2);
    *out = jv_bool(odd ? fabs(r) == 1 : r == 0);
    return HYDRA_OK;
}

static hydra_status t_odd(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    return t_odd_even(ctx, v, true, out);
}

static hydra_status t_even(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    return t_odd_even(ctx, v, false, out);
}

static hydra_status compare_test(jctx *ctx, jop op, jv v, jv other, jv *out)
{
    bool r;
    hydra_status st = jeval_compare(ctx, op, v, other, &r);
    *out = jv_bool(r);
    return st;
}

#define COMPARE_TEST(name, op)                                                \
    static hydra_status name(jctx *ctx, jv v, const jv *args, jv *out)        \
    {                                                                         \
        return compare_test(ctx, op, v, args[0], out);                        \
    }

COMPARE_TEST(t_eq, OP_EQ)
COMPARE_TEST(t_ne, OP_NE)
COMPARE_TEST(t_lt, OP_LT)
COMPARE_TEST(t_le, OP_LE)
COMPARE_TEST(t_gt, OP_GT)
COMPARE_TEST(t_ge, OP_GE)
COMPARE_TEST(t_in, OP_IN)

/* Python's `is`: the same object.  Scalars compare by value (CPython
 * shares None, booleans and small ints), containers by identity. */
static hydra_status t_sameas(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)ctx;
    jv o = args[0];
    bool same = v.kind == o.kind;
    if (same && (v.kind == JV_BOOL || v.kind == JV_INT))
        same = jv_equal(v, o);
    else if (same && v.kind == JV_STRING)
        same = v.s == o.s;
    else if (same && (v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_NAMESPACE))
        same = v.list == o.list;
    else if (same && v.kind == JV_FLOAT)
        same = false;
    *out = jv_bool(same);
    return HYDRA_OK;
}

static hydra_status t_filter(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    *out = jv_bool(v.kind == JV_STRING && jfilter_find(v.s->bytes, v.s->len) != NULL);
    return HYDRA_OK;
}

static hydra_status t_test(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    *out = jv_bool(v.kind == JV_STRING && jtest_find(v.s->bytes, v.s->len) != NULL);
    return HYDRA_OK;
}

static const jbuiltin tests[] = {
    {"defined", t_defined, 0, {NULL}, false, false},
    {"undefined", t_undefined, 0, {NULL}, false, false},
    {"none", t_none, 0, {NULL}, false, false},
    {"boolean", t_boolean, 0, {NULL}, false, false},
    {"true", t_true, 0, {NULL}, false, false},
    {"false", t_false, 0, {NULL}, false, false},
    {"integer", t_integer, 0, {NULL}, false, false},
    {"float", t_float, 0, {NULL}, false, false},
    {"number", t_number, 0, {NULL}, false, false},
    {"string", t_string, 0, {NULL}, false, false},
    {"mapping", t_mapping, 0, {NULL}, false, false},
    {"iterable", t_iterable, 0, {NULL}, false, false},
    {"sequence", t_iterable, 0, {NULL}, false, false},
    {"callable", t_callable, 0, {NULL}, false, false},
    {"escaped", t_escaped, 0, {NULL}, false, false},
    {"lower", t_lower, 0, {NULL}, false, false},
    {"upper", t_upper, 0, {NULL}, false, false},
    {"divisibleby", t_divisibleby, 1, {"num"}, false, false},
    {"odd", t_odd, 0, {NULL}, false, false},
    {"even", t_even, 0, {NULL}, false, false},
    {"eq", t_eq, 1, {"other"}, false, false},
    {"equalto", t_eq, 1, {"other"}, false, false},
    {"==", t_eq, 1, {"other"}, false, false},
    {"ne", t_ne, 1, {"other"}, false, false},
    {"!=", t_ne, 1, {"other"}, false, false},
    {"lt", t_lt, 1, {"other"}, false, false},
    {"lessthan", t_lt, 1, {"other"}, false, false},
    {"<", t_lt, 1, {"other"}, false, false},
    {"le", t_le, 1, {"other"}, false, false},
    {"<=", t_le, 1, {"other"}, false, false},
    {"gt", t_gt, 1, {"other"}, false, false},
    {"greaterthan", t_gt, 1, {"other"}, false, false},
    {">", t_gt, 1, {"other"}, false, false},
    {"ge", t_ge, 1, {"other"}, false, false},
    {">=", t_ge, 1, {"other"}, false, false},
    {"in", t_in, 1, {"seq"}, false, false},
    {"sameas", t_sameas, 1, {"other"}, false, false},
    {"filter", t_filter, 0, {NULL}, false, false},
    {"test", t_test, 0, {NULL}, false, false},
    {NULL, NULL, 0, {NULL}, false, false},
};

/* ------------------------------------------------------- filter helpers */

/* jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0. */
static hydra_status get_path(jctx *ctx, jv item, jv path, jv *out)
{
    if (path.kind == JV_INT)
        return jeval_getitem(ctx, item, path, out);
    if (path.kind != JV_STRING)
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "attribute must be a string or integer, not '%s'", jv_type_name(path));
    const char *p = path.s->bytes, *end = p + path.s->len;
    *out = item;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        bool digits = len > 0;
        for (size_t k = 0; k < len; k++)
            digits = digits && p[k] >= '0' && p[k] <= '9';
        jv key;
        hydra_status st = digits ? (key = jv_int(strtoll(p, NULL, 10)), HYDRA_OK) : jctx_str(ctx, p, len, &key);
        if (st == HYDRA_OK)
            st = jeval_getitem(ctx, *out, key, out);
        if (st != HYDRA_OK)
            return st;
        if (dot == NULL)
            break;
        p = dot + 1;
    }
    return HYDRA_OK;
}

static hydra_status to_str(jctx *ctx, jv v, const jstr **out)
{
    jv s;
    hydra_status st = jeval_to_str(ctx, v, &s);
    *out = st == HYDRA_OK ? s.s : NULL;
    return st;
}

static hydra_status list_value(jlist *list, jv *out)
{
    *out = (jv){.kind = JV_LIST, .list = list};
    return HYDRA_OK;
}

/* The key a value sorts and deduplicates by: its attribute if asked,
 * lowercased if a string and case does not matter. */
static hydra_status sort_key(jctx *ctx, jv item, jv attribute, bool case_sensitive, jv *out)
{
    hydra_status st = jarg_given(attribute) && attribute.kind != JV_NONE ? get_path(ctx, item, attribute, out)
                                                                         : (*out = item, HYDRA_OK);
    if (st == HYDRA_OK && !case_sensitive && out->kind == JV_STRING)
        st = jstr_case(ctx, out->s, 'l', out);
    return st;
}

static hydra_status three_way(jctx *ctx, jv a, jv b, int *out)
{
    bool less, greater;
    hydra_status st = jeval_compare(ctx, OP_LT, a, b, &less);
    if (st == HYDRA_OK)
        st = jeval_compare(ctx, OP_LT, b, a, &greater);
    *out = less ? -1 : greater ? 1 : 0;
    return st;
}

/* Stable merge sort of order[] by keys[]; comparisons can fail. */
static hydra_status merge_sort(jctx *ctx, const jv *keys, size_t *order, size_t *tmp, size_t n, bool reverse)
{
    if (n < 2)
        return HYDRA_OK;
    size_t half = n / 2;
    hydra_status st = merge_sort(ctx, keys, order, tmp, half, reverse);
    if (st == HYDRA_OK)
        st = merge_sort(ctx, keys, order + half, tmp, n - half, reverse);
    size_t i = 0, j = half, k = 0;
    while (st == HYDRA_OK && i < half && j < n) {
        int c;
        st = three_way(ctx, keys[order[j]], keys[order[i]], &c);
        bool take_right = reverse ? c > 0 : c < 0;
        tmp[k++] = take_right ? order[j++] : order[i++];
    }
    while (i < half)
        tmp[k++] = order[i++];
    while (j < n)
        tmp[k++] = order[j++];
    if (st == HYDRA_OK)
        memcpy(order, tmp, n * sizeof *order);
    return st;
}

/* Sorted copy of items, by their keys. */
static hydra_status sorted(jctx *ctx, const jlist *items, const jv *keys, bool reverse, jv *out)
{
    size_t n = items->len;
    size_t *order = malloc((n ? n : 1) * sizeof *order), *tmp = malloc((n ? n : 1) * sizeof *tmp);
    jlist *list;
    hydra_status st = order && tmp ? jctx_list(ctx, n, &list) : jctx_nomem(ctx);
    if (st == HYDRA_OK) {
        for (size_t k = 0; k < n; k++)
            order[k] = k;
        st = merge_sort(ctx, keys, order, tmp, n, reverse);
    }
    if (st == HYDRA_OK) {
        for (size_t k = 0; k < n; k++)
            list->items[k] = items->items[order[k]];
        list->len = n;
        list_value(list, out);
    }
    free(order);
    free(tmp);
    return st;
}

static hydra_status keys_of(jctx *ctx, const jlist *items, jv attribute, bool case_sensitive, jv **out)
{
    *out = jarena_alloc(ctx->arena, (items->len ? items->len : 1) * sizeof **out);
    if (*out == NULL)
        return jctx_nomem(ctx);
    hydra_status st = jctx_step(ctx, items->len);
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++)
        st = sort_key(ctx, items->items[k], attribute, case_sensitive, &(*out)[k]);
    return st;
}

/* -------------------------------------------------------------- filters */

static hydra_status f_tojson_style(jctx *ctx, const jv *args, jjson_style *style, char *spaces, size_t room)
{
    jv indent = args[1], separators = args[2];
    style->ensure_ascii = jv_truthy(args[0]);
    style->sort_keys = jv_truthy(args[3]);
    style->indent = NULL;
    if (indent.kind == JV_INT || indent.kind == JV_BOOL) {
        int64_t n = indent.kind == JV_BOOL ? indent.b : indent.i;
        if (n >= (int64_t)room)
            return jctx_fail(ctx, HYDRA_ERR_RANGE, "tojson indent %lld is too large", (long long)n);
        memset(spaces, ' ', n > 0 ? (size_t)n : 0);
        spaces[n > 0 ? n : 0] = '\0';
        style->indent = spaces;
    } else if (indent.kind == JV_STRING) {
        style->indent = indent.s->bytes;
    } else if (jarg_given(indent) && indent.kind != JV_NONE) {
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "tojson indent must be an integer or string");
    }
    style->item_sep = style->indent ? "," : ", ";
    style->key_sep = ": ";
    if (jarg_given(separators) && separators.kind != JV_NONE) {
        const jlist *pair = separators.kind == JV_LIST ? separators.list : NULL;
        if (pair == NULL || pair->len != 2 || pair->items[0].kind != JV_STRING || pair->items[1].kind != JV_STRING)
            return jctx_fail(ctx, HYDRA_ERR_TYPE, "tojson separators must be a pair of strings");
        style->item_sep = pair->items[0].s->bytes;
        style->key_sep = pair->items[1].s->bytes;
    }
    return HYDRA_OK;
}

/* transformers: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False), keywords passed through. */
static hydra_status f_tojson(jctx *ctx, jv v, const jv *args, jv *out)
{
    char spaces[256];
    jjson_style style;
    hydra_status st = f_tojson_style(ctx, args, &style, spaces, sizeof spaces);
    if (st != HYDRA_OK)
        return st;
    jbuf buf = {.limit = ctx->limits.max_output};
    const char *bad = NULL;
    st = jv_write_json(&buf, v, &style, ctx->limits.max_depth, &bad);
    if (st != HYDRA_OK) {
        free(buf.data);
        if (st == HYDRA_ERR_NOMEM)
            return jctx_nomem(ctx);
        if (v.kind == JV_UNDEFINED)
            return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "tojson: '%s' is undefined",
                             v.undefined_name ? v.undefined_name : "value");
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "tojson: %s is not JSON serializable", bad);
    }
    return jctx_buf_str(ctx, &buf, out);
}

static hydra_status f_length(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    switch (v.kind) {
    case JV_STRING:
        *out = jv_int((int64_t)utf8_length(v.s->bytes, v.s->len));
        return HYDRA_OK;
    case JV_LIST:
        *out = jv_int((int64_t)v.list->len);
        return HYDRA_OK;
    case JV_DICT:
        *out = jv_int((int64_t)v.dict->len);
        return HYDRA_OK;
    case JV_UNDEFINED:
        *out = jv_int(0);
        return HYDRA_OK;
    default:
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static hydra_status f_string(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    return jeval_to_str(ctx, v, out);
}

static hydra_status f_trim(jctx *ctx, jv v, const jv *args, jv *out)
{
    jv s;
    hydra_status st = jeval_to_str(ctx, v, &s);
    return st == HYDRA_OK ? jstr_strip(ctx, s, args[0], true, true, out) : st;
}

static hydra_status f_items(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    if (v.kind == JV_DICT)
        return jdict_items(ctx, v.dict, out);
    if (v.kind == JV_UNDEFINED) {
        jlist *empty;
        hydra_status st = jctx_list(ctx, 0, &empty);
        return st == HYDRA_OK ? list_value(empty, out) : st;
    }
    return jctx_fail(ctx, HYDRA_ERR_TYPE, "items: can only get item pairs from a mapping, not '%s'", jv_type_name(v));
}

static hydra_status f_list(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    jlist *items, *copy;
    hydra_status st = jeval_iterate(ctx, v, &items);
    if (st == HYDRA_OK)
        st = jctx_list(ctx, items->len, &copy);
    if (st != HYDRA_OK)
        return st;
    if (items->len)
        memcpy(copy->items, items->items, items->len * sizeof(jv));
    copy->len = items->len;
    return list_value(copy, out);
}

static hydra_status f_join(jctx *ctx, jv v, const jv *args, jv *out)
{
    jlist *items;
    const jstr *sep = NULL;
    hydra_status st = jeval_iterate(ctx, v, &items);
    if (st == HYDRA_OK && jarg_given(args[0]))
        st = to_str(ctx, args[0], &sep);
    if (st == HYDRA_OK)
        st = jctx_step(ctx, items->len);
    jbuf buf = {.limit = ctx->limits.max_memory};
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++) {
        jv item = items->items[k];
        const jstr *s;
        if (jarg_given(args[1]) && (st = get_path(ctx, item, args[1], &item)) != HYDRA_OK)
            break;
        if ((st = to_str(ctx, item, &s)) != HYDRA_OK)
            break;
        if ((k && sep && !jbuf_put(&buf, sep->bytes, sep->len)) || !jbuf_put(&buf, s->bytes, s->len))
            st = jctx_nomem(ctx);
    }
    if (st != HYDRA_OK) {
        free(buf.data);
        return st;
    }
    return jctx_buf_str(ctx, &buf, out);
}

static hydra_status first_last(jctx *ctx, jv v, bool last, jv *out)
{
    jlist *items;
    hydra_status st = jeval_iterate(ctx, v, &items);
    if (st != HYDRA_OK)
        return st;
    *out = items->len ? items->items[last ? items->len - 1 : 0] : jv_undefined(last ? "last item" : "first item");
    return HYDRA_OK;
}

static hydra_status f_first(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    return first_last(ctx, v, false, out);
}

static hydra_status f_last(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    return first_last(ctx, v, true, out);
}

static hydra_status f_default(jctx *ctx, jv v, const jv *args, jv *out)
{
    if (v.kind == JV_UNDEFINED || (jv_truthy(args[1]) && !jv_truthy(v))) {
        if (jarg_given(args[0]))
            *out = args[0];
        else
            return jctx_str(ctx, "", 0, out);
        return HYDRA_OK;
    }
    *out = v;
    return HYDRA_OK;
}

static hydra_status case_filter(jctx *ctx, jv v, char mode, jv *out)
{
    const jstr *s;
    hydra_status st = to_str(ctx, v, &s);
    return st == HYDRA_OK ? jstr_case(ctx, s, mode, out) : st;
}

static hydra_status f_upper(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    return case_filter(ctx, v, 'u', out);
}

static hydra_status f_lower(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    return case_filter(ctx, v, 'l', out);
}

static hydra_status f_capitalize(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    return case_filter(ctx, v, 'c', out);
}

static hydra_status f_title(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    return case_filter(ctx, v, 't', out);
}

static hydra_status f_replace(jctx *ctx, jv v, const jv *args, jv *out)
{
    const jstr *s, *old, *new;
    hydra_status st = to_str(ctx, v, &s);
    if (st == HYDRA_OK)
        st = to_str(ctx, args[0], &old);
    if (st == HYDRA_OK)
        st = to_str(ctx, args[1], &new);
    if (st != HYDRA_OK)
        return st;
    int64_t count = args[2].kind == JV_INT ? args[2].i : -1;
    return jstr_replace(ctx, s, old, new, count, out);
}

static hydra_status f_int(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)ctx;
    jv fallback = jarg_given(args[0]) ? args[0] : jv_int(0);
    int base = args[1].kind == JV_INT ? (int)args[1].i : 10;
    if (v.kind == JV_INT || v.kind == JV_BOOL) {
        *out = jv_int(v.kind == JV_BOOL ? v.b : v.i);
    } else if (v.kind == JV_FLOAT && isfinite(v.f) && fabs(v.f) < 9.2e18) {
        *out = jv_int((int64_t)v.f);
    } else if (v.kind == JV_STRING) {
        char *end;
        long long i = strtoll(v.s->bytes, &end, base);
        double f = *end ? strtod(v.s->bytes, &end) : 0;
        *out = *end == '\0' && v.s->len ? (f != 0 ? jv_int((int64_t)f) : jv_int(i)) : fallback;
    } else {
        *out = fallback;
    }
    return HYDRA_OK;
}

static hydra_status f_float(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)ctx;
    jv fallback = jarg_given(args[0]) ? args[0] : jv_float(0.0);
    if (jv_is_number(v)) {
        *out = jv_float(jv_as_double(v));
    } else if (v.kind == JV_STRING && v.s->len) {
        char *end;
        double f = strtod(v.s->bytes, &end);
        *out = *end == '\0' ? jv_float(f) : fallback;
    } else {
        *out = fallback;
    }
    return HYDRA_OK;
}

static hydra_status f_abs(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    hydra_status st = need_number(ctx, v, "abs");
    if (st != HYDRA_OK)
        return st;
    if (v.kind == JV_FLOAT)
        *out = jv_float(fabs(v.f));
    else if (v.kind == JV_INT && v.i == INT64_MIN)
        return jctx_fail(ctx, HYDRA_ERR_RANGE, "integer overflow");
    else
        *out = jv_int(v.kind == JV_BOOL ? v.b : v.i < 0 ? -v.i : v.i);
    return HYDRA_OK;
}

/* method "common" is Python's round(): ties to even. */
static hydra_status f_round(jctx *ctx, jv v, const jv *args, jv *out)
{
    hydra_status st = need_number(ctx, v, "round");
    if (st != HYDRA_OK)
        return st;
    int64_t precision = args[0].kind == JV_INT ? args[0].i : 0;
    const char *method = args[1].kind == JV_STRING ? args[1].s->bytes : "common";
    if (v.kind != JV_FLOAT && precision >= 0 && strcmp(method, "common") == 0) {
        *out = jv_int(v.kind == JV_BOOL ? v.b : v.i); /* round(int) is the int */
        return HYDRA_OK;
    }
    double scale = pow(10.0, (double)precision), x = jv_as_double(v) * scale;
    if (strcmp(method, "common") == 0)
        x = nearbyint(x);
    else if (strcmp(method, "ceil") == 0)
        x = ceil(x);
    else if (strcmp(method, "floor") == 0)
        x = floor(x);
    else
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "round: method must be 'common', 'ceil' or 'floor'");
    *out = jv_float(x / scale);
    return HYDRA_OK;
}

/* select/reject(test?, args...) and selectattr/rejectattr(attr, test?, args...). */
static hydra_status select_common(jctx *ctx, jv v, const jlist *spec, bool by_attr, bool keep, jv *out)
{
    size_t at = 0;
    jv attribute = jv_undefined(NULL);
    if (by_attr) {
        if (spec->len == 0)
            return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "selectattr/rejectattr need an attribute name");
        attribute = spec->items[at++];
    }
    const jbuiltin *test = NULL;
    if (at < spec->len) {
        jv name = spec->items[at++];
        if (name.kind != JV_STRING || (test = jtest_find(name.s->bytes, name.s->len)) == NULL)
            return jctx_fail(ctx, HYDRA_ERR_UNSUPPORTED, "no test named '%s'",
                             name.kind == JV_STRING ? name.s->bytes : "?");
    }
    jlist *items, *result;
    hydra_status st = jeval_iterate(ctx, v, &items);
    if (st == HYDRA_OK)
        st = jctx_list(ctx, 0, &result);
    if (st == HYDRA_OK)
        st = jctx_step(ctx, items->len);
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++) {
        jv probe = items->items[k];
        bool pass;
        if (by_attr && (st = get_path(ctx, probe, attribute, &probe)) != HYDRA_OK)
            break;
        if (test)
            st = jtest_apply(ctx, test, probe, spec->items + at, spec->len - at, &pass);
        else
            pass = jv_truthy(probe);
        if (st == HYDRA_OK && pass == keep)
            st = jctx_push(ctx, result, items->items[k]);
    }
    return st == HYDRA_OK ? list_value(result, out) : st;
}

static hydra_status f_select(jctx *ctx, jv v, const jv *args, jv *out)
{
    return select_common(ctx, v, args[0].list, false, true, out);
}

static hydra_status f_reject(jctx *ctx, jv v, const jv *args, jv *out)
{
    return select_common(ctx, v, args[0].list, false, false, out);
}

static hydra_status f_selectattr(jctx *ctx, jv v, const jv *args, jv *out)
{
    return select_common(ctx, v, args[0].list, true, true, out);
}

static hydra_status f_rejectattr(jctx *ctx, jv v, const jv *args, jv *out)
{
    return select_common(ctx, v, args[0].list, true, false, out);
}

/* map(attribute='x', default=...) or map('filter', args...). */
static hydra_status f_map(jctx *ctx, jv v, const jv *args, jv *out)
{
    const jlist *positional = args[0].list;
    const jdict *kw = args[1].dict;
    const jv *attribute = jdict_get_str(kw, "attribute", 9), *fallback = jdict_get_str(kw, "default", 7);
    const jbuiltin *filter = NULL;
    if (attribute == NULL) {
        jv name = positional->len ? positional->items[0] : jv_none();
        if (name.kind != JV_STRING || (filter = jfilter_find(name.s->bytes, name.s->len)) == NULL)
            return jctx_fail(ctx, HYDRA_ERR_UNSUPPORTED, "map: no filter named '%s'",
                             name.kind == JV_STRING ? name.s->bytes : "?");
    }
    jlist *items, *result;
    hydra_status st = jeval_iterate(ctx, v, &items);
    if (st == HYDRA_OK)
        st = jctx_list(ctx, items->len, &result);
    if (st == HYDRA_OK)
        st = jctx_step(ctx, items->len);
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++) {
        jv *slot = &result->items[k];
        if (filter) {
            st = jbuiltin_call(ctx, filter, items->items[k], positional->items + 1, positional->len - 1, NULL, NULL, 0,
                               slot);
        } else {
            st = get_path(ctx, items->items[k], *attribute, slot);
            if (st == HYDRA_OK && slot->kind == JV_UNDEFINED && fallback)
                *slot = *fallback;
        }
        result->len = k + 1;
    }
    return st == HYDRA_OK ? list_value(result, out) : st;
}

static hydra_status f_sort(jctx *ctx, jv v, const jv *args, jv *out)
{
    jlist *items;
    jv *keys;
    hydra_status st = jeval_iterate(ctx, v, &items);
    if (st == HYDRA_OK)
        st = keys_of(ctx, items, args[2], jv_truthy(args[1]), &keys);
    return st == HYDRA_OK ? sorted(ctx, items, keys, jv_truthy(args[0]), out) : st;
}

static hydra_status f_dictsort(jctx *ctx, jv v, const jv *args, jv *out)
{
    if (v.kind != JV_DICT)
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "dictsort needs a mapping, not '%s'", jv_type_name(v));
    bool by_value = args[1].kind == JV_STRING && strcmp(args[1].s->bytes, "value") == 0;
    jv pairs;
    hydra_status st = jdict_items(ctx, v.dict, &pairs);
    jv *keys;
    if (st == HYDRA_OK)
        st = keys_of(ctx, pairs.list, jv_int(by_value ? 1 : 0), jv_truthy(args[0]), &keys);
    return st == HYDRA_OK ? sorted(ctx, pairs.list, keys, jv_truthy(args[2]), out) : st;
}

static hydra_status f_unique(jctx *ctx, jv v, const jv *args, jv *out)
{
    jlist *items, *result, *seen;
    jv *keys;
    hydra_status st = jeval_iterate(ctx, v, &items);
    if (st == HYDRA_OK)
        st = keys_of(ctx, items, args[1], jv_truthy(args[0]), &keys);
    if (st == HYDRA_OK)
        st = jctx_list(ctx, 0, &result);
    if (st == HYDRA_OK)
        st = jctx_list(ctx, 0, &seen);
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++) {
        bool dup = false;
        for (size_t s = 0; s < seen->len && !dup; s++)
            dup = jv_equal(seen->items[s], keys[k]);
        if (dup)
            continue;
        st = jctx_push(ctx, seen, keys[k]);
        if (st == HYDRA_OK)
            st = jctx_push(ctx, result, items->items[k]);
    }
    return st == HYDRA_OK ? list_value(result, out) : st;
}

static hydra_status min_max(jctx *ctx, jv v, const jv *args, bool want_max, jv *out)
{
    jlist *items;
    jv *keys;
    hydra_status st = jeval_iterate(ctx, v, &items);
    if (st == HYDRA_OK)
        st = keys_of(ctx, items, args[1], jv_truthy(args[0]), &keys);
    if (st != HYDRA_OK)
        return st;
    if (items->len == 0) {
        *out = jv_undefined(want_max ? "max of an empty sequence" : "min of an empty sequence");
        return HYDRA_OK;
    }
    size_t best = 0;
    for (size_t k = 1; st == HYDRA_OK && k < items->len; k++) {
        int c;
        st = three_way(ctx, keys[k], keys[best], &c);
        if (want_max ? c > 0 : c < 0)
            best = k;
    }
    *out = items->items[best];
    return st;
}

static hydra_status f_min(jctx *ctx, jv v, const jv *args, jv *out)
{
    return min_max(ctx, v, args, false, out);
}

static hydra_status f_max(jctx *ctx, jv v, const jv *args, jv *out)
{
    return min_max(ctx, v, args, true, out);
}

static hydra_status f_reverse(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    jlist *items, *result;
    hydra_status st = jeval_iterate(ctx, v, &items);
    if (st == HYDRA_OK)
        st = jctx_list(ctx, items->len, &result);
    if (st != HYDRA_OK)
        return st;
    for (size_t k = 0; k < items->len; k++)
        result->items[k] = items->items[items->len - 1 - k];
    result->len = items->len;
    if (v.kind != JV_STRING)
        return list_value(result, out);
    jv joined;
    jbuf buf = {.limit = ctx->limits.max_memory};
    for (size_t k = 0; k < result->len; k++)
        if (!jbuf_put(&buf, result->items[k].s->bytes, result->items[k].s->len)) {
            free(buf.data);
            return jctx_nomem(ctx);
        }
    st = jctx_buf_str(ctx, &buf, &joined);
    *out = joined;
    return st;
}

static hydra_status f_sum(jctx *ctx, jv v, const jv *args, jv *out)
{
    jlist *items;
    hydra_status st = jeval_iterate(ctx, v, &items);
    jv total = jarg_given(args[1]) ? args[1] : jv_int(0);
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++) {
        jv item = items->items[k];
        if (jarg_given(args[0]) && (st = get_path(ctx, item, args[0], &item)) != HYDRA_OK)
            break;
        st = jeval_arith(ctx, OP_ADD, total, item, &total);
    }
    *out = total;
    return st;
}

/* jinja2 3.1 indent(): lines after the first get the prefix, blank lines
 * only when blank=true, the first line only when first=true. */
static hydra_status f_indent(jctx *ctx, jv v, const jv *args, jv *out)
{
    const jstr *s, *prefix;
    hydra_status st = to_str(ctx, v, &s);
    if (st != HYDRA_OK)
        return st;
    if (args[0].kind == JV_STRING) {
        prefix = args[0].s;
    } else {
        int64_t width = args[0].kind == JV_INT ? args[0].i : 4;
        if (width < 0 || width > 256)
            return jctx_fail(ctx, HYDRA_ERR_RANGE, "indent width out of range");
        char spaces[257];
        memset(spaces, ' ', (size_t)width);
        jv p;
        if ((st = jctx_str(ctx, spaces, (size_t)width, &p)) != HYDRA_OK)
            return st;
        prefix = p.s;
    }
    bool first = jv_truthy(args[1]), blank = jv_truthy(args[2]);
    jbuf buf = {.limit = ctx->limits.max_memory};
    bool ok = true;
    size_t line = 0;
    for (size_t start = 0; ok && start < s->len; line++) {
        const char *nl = memchr(s->bytes + start, '\n', s->len - start);
        size_t end = nl ? (size_t)(nl - s->bytes) : s->len;
        bool indent_it = (line > 0 || first) && (blank || end > start);
        ok = (line == 0 || jbuf_put(&buf, "\n", 1)) && (!indent_it || jbuf_put(&buf, prefix->bytes, prefix->len)) &&
             jbuf_put(&buf, s->bytes + start, end - start);
        start = end + 1;
    }
    if (ok && s->len == 0 && first)
        ok = jbuf_put(&buf, prefix->bytes, prefix->len);
    if (!ok) {
        free(buf.data);
        return jctx_nomem(ctx);
    }
    return jctx_buf_str(ctx, &buf, out);
}

static hydra_status f_escape(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)args;
    const jstr *s;
    hydra_status st = to_str(ctx, v, &s);
    if (st != HYDRA_OK)
        return st;
    jbuf buf = {.limit = ctx->limits.max_memory};
    bool ok = true;
    for (size_t k = 0; ok && k < s->len; k++) {
        char c = s->bytes[k];
        const char *entity = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;"
                             : c == '\'' ? "&#39;" : NULL;
        ok = entity ? jbuf_puts(&buf, entity) : jbuf_put(&buf, &c, 1);
    }
    if (!ok) {
        free(buf.data);
        return jctx_nomem(ctx);
    }
    return jctx_buf_str(ctx, &buf, out);
}

static hydra_status f_safe(jctx *ctx, jv v, const jv *args, jv *out)
{
    (void)ctx, (void)args;
    *out = v;
    return HYDRA_OK;
}

static hydra_status f_attr(jctx *ctx, jv v, const jv *args, jv *out)
{
    const jstr *name;
    hydra_status st = to_str(ctx, args[0], &name);
    return st == HYDRA_OK ? jeval_getattr(ctx, v, name->bytes, name->len, out) : st;
}

static const jbuiltin filters[] = {
    {"tojson", f_tojson, 0, {"ensure_ascii", "indent", "separators", "sort_keys"}, false, false},
    {"length", f_length, 0, {NULL}, false, false},
    {"count", f_length, 0, {NULL}, false, false},
    {"string", f_string, 0, {NULL}, false, false},
    {"trim", f_trim, 0, {"chars"}, false, false},
    {"items", f_items, 0, {NULL}, false, false},
    {"list", f_list, 0, {NULL}, false, false},
    {"join", f_join, 0, {"d", "attribute"}, false, false},
    {"first", f_first, 0, {NULL}, false, false},
    {"last", f_last, 0, {NULL}, false, false},
    {"default", f_default, 0, {"default_value", "boolean"}, false, false},
    {"d", f_default, 0, {"default_value", "boolean"}, false, false},
    {"upper", f_upper, 0, {NULL}, false, false},
    {"lower", f_lower, 0, {NULL}, false, false},
    {"capitalize", f_capitalize, 0, {NULL}, false, false},
    {"title", f_title, 0, {NULL}, false, false},
    {"replace", f_replace, 2, {"old", "new", "count"}, false, false},
    {"int", f_int, 0, {"default", "base"}, false, false},
    {"float", f_float, 0, {"default"}, false, false},
    {"abs", f_abs, 0, {NULL}, false, false},
    {"round", f_round, 0, {"precision", "method"}, false, false},
    {"select", f_select, 0, {NULL}, true, false},
    {"reject", f_reject, 0, {NULL}, true, false},
    {"selectattr", f_selectattr, 0, {NULL}, true, false},
    {"rejectattr", f_rejectattr, 0, {NULL}, true, false},
    {"map", f_map, 0, {NULL}, true, true},
    {"sort", f_sort, 0, {"reverse", "case_sensitive", "attribute"}, false, false},
    {"dictsort", f_dictsort, 0, {"case_sensitive", "by", "reverse"}, false, false},
    {"unique", f_unique, 0, {"case_sensitive", "attribute"}, false, false},
    {"min", f_min, 0, {"case_sensitive", "attribute"}, false, false},
    {"max", f_max, 0, {"case_sensitive", "attribute"}, false, false},
    {"reverse", f_reverse, 0, {NULL}, false, false},
    {"sum", f_sum, 0, {"attribute", "start"}, false, false},
    {"indent", f_indent, 0, {"width", "first", "blank"}, false, false},
    {"escape", f_escape, 0, {NULL}, false, false},
    {"e", f_escape, 0, {NULL}, false, false},
    {"safe", f_safe, 0, {NULL}, false, false},
    {"attr", f_attr, 1, {"name"}, false, false},
    {NULL, NULL, 0, {NULL}, false, false},
};

const jbuiltin *jbuiltin_find(const jbuiltin *table, const char *name, size_t len)
{
    for (; table->name; table++)
        if (strlen(table->name) == len && memcmp(table->name, name, len) == 0)
            return table;
    return NULL;
}

const jbuiltin *jfilter_find(const char *name, size_t len)
{
    return jbuiltin_find(filters, name, len);
}

const jbuiltin *jtest_find(const char *name, size_t len)
{
    return jbuiltin_find(tests, name, len);
}
