/*
 * jinja_eval.c — runs the AST: scopes, statements, expressions, operators
 * with Python's semantics, attribute and item lookup as jinja2's sandbox
 * does it, macro calls, and the render entry points.
 *
 * Scoping follows jinja2: a for loop body gets a fresh scope each
 * iteration (a `set` inside it is gone after the loop, which is why
 * templates use namespace()), a macro call gets a scope whose parent is
 * the scope the macro was defined in, `if` makes no scope.
 *
 * Undefined follows jinja2's default Undefined: it prints as "", is false,
 * iterates as empty and has length 0, but reading an attribute or item of
 * it, calling it or doing arithmetic with it is an error.
 */
#include "error.h"
#include "jinja_internal.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jscope {
    jscope *parent;
    size_t len, cap;
    const jstr **names;
    jv *values;
};

struct jrender {
    jarena arena;
    jlimits limits;
    jscope *globals;
    bool time_fixed;
    int64_t now;
};

static hydra_status exec_node(jctx *ctx, const jnode *n);
static hydra_status eval(jctx *ctx, const jnode *n, jv *out);

/* ------------------------------------------------------------ ctx helpers */

hydra_status jctx_fail(jctx *ctx, hydra_status status, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx->at == NULL)
        return hydra_fail(status, "chat template: %s", msg);
    return hydra_fail(status, "chat template line %u, column %u: %s", ctx->at->line, ctx->at->col, msg);
}

hydra_status jctx_nomem(jctx *ctx)
{
    return jctx_fail(ctx, HYDRA_ERR_NOMEM, "memory limit of %zu bytes reached", ctx->limits.max_memory);
}

hydra_status jctx_step(jctx *ctx, uint64_t n)
{
    ctx->steps += n;
    if (ctx->steps > ctx->limits.max_steps)
        return jctx_fail(ctx, HYDRA_ERR_RANGE, "more than %llu loop iterations and calls (the step limit)",
                         (unsigned long long)ctx->limits.max_steps);
    return HYDRA_OK;
}

hydra_status jctx_str(jctx *ctx, const char *bytes, size_t len, jv *out)
{
    jstr *s = jstr_new(ctx->arena, bytes, len);
    if (s == NULL)
        return jctx_nomem(ctx);
    *out = jv_str(s);
    return HYDRA_OK;
}

hydra_status jctx_buf_str(jctx *ctx, jbuf *buf, jv *out)
{
    hydra_status st = jctx_str(ctx, buf->data ? buf->data : "", buf->len, out);
    free(buf->data);
    *buf = (jbuf){0};
    return st;
}

hydra_status jctx_list(jctx *ctx, size_t cap, jlist **out)
{
    *out = jlist_new(ctx->arena, cap);
    return *out ? HYDRA_OK : jctx_nomem(ctx);
}

hydra_status jctx_push(jctx *ctx, jlist *list, jv value)
{
    return jlist_push(ctx->arena, list, value) ? HYDRA_OK : jctx_nomem(ctx);
}

static hydra_status output_full(jctx *ctx)
{
    return jctx_fail(ctx, HYDRA_ERR_RANGE, "output longer than the limit of %zu bytes (or out of memory)",
                     ctx->limits.max_output);
}

static hydra_status undefined_error(jctx *ctx, jv v)
{
    return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "'%s' is undefined", v.undefined_name ? v.undefined_name : "value");
}

static hydra_status enter(jctx *ctx)
{
    if (++ctx->depth > ctx->limits.max_depth)
        return jctx_fail(ctx, HYDRA_ERR_RANGE, "evaluation nested deeper than the limit of %u (recursive macro?)",
                         ctx->limits.max_depth);
    return HYDRA_OK;
}

/* ----------------------------------------------------------------- scopes */

static jscope *scope_new(jctx *ctx, jscope *parent)
{
    jscope *s = jarena_alloc(ctx->arena, sizeof *s);
    if (s)
        s->parent = parent;
    return s;
}

static jv *scope_find(const jscope *s, const char *name, size_t len)
{
    for (size_t k = 0; k < s->len; k++)
        if (s->names[k]->len == len && memcmp(s->names[k]->bytes, name, len) == 0)
            return &s->values[k];
    return NULL;
}

static bool scope_set(jarena *arena, jscope *s, const jstr *name, jv value)
{
    jv *slot = scope_find(s, name->bytes, name->len);
    if (slot) {
        *slot = value;
        return true;
    }
    if (s->len == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        const jstr **names = jarena_alloc(arena, cap * sizeof *names);
        jv *values = jarena_alloc(arena, cap * sizeof *values);
        if (names == NULL || values == NULL)
            return false;
        if (s->len) {
            memcpy(names, s->names, s->len * sizeof *names);
            memcpy(values, s->values, s->len * sizeof *values);
        }
        s->names = names;
        s->values = values;
        s->cap = cap;
    }
    s->names[s->len] = name;
    s->values[s->len++] = value;
    return true;
}

static hydra_status assign(jctx *ctx, const jstr *name, jv value)
{
    return scope_set(ctx->arena, ctx->scope, name, value) ? HYDRA_OK : jctx_nomem(ctx);
}

static hydra_status callable_value(jctx *ctx, const jbuiltin *builtin, jv self, jv *out)
{
    jcallable *fn = jarena_alloc(ctx->arena, sizeof *fn);
    if (fn == NULL)
        return jctx_nomem(ctx);
    fn->builtin = builtin;
    fn->self = self;
    *out = (jv){.kind = JV_CALLABLE, .fn = fn};
    return HYDRA_OK;
}

static hydra_status lookup_name(jctx *ctx, const jstr *name, jv *out)
{
    for (jscope *s = ctx->scope; s; s = s->parent) {
        jv *v = scope_find(s, name->bytes, name->len);
        if (v) {
            *out = *v;
            return HYDRA_OK;
        }
    }
    const jbuiltin *global = jglobal_find(name->bytes, name->len);
    if (global)
        return callable_value(ctx, global, jv_undefined(NULL), out);
    *out = jv_undefined(name->bytes);
    return HYDRA_OK;
}

/* -------------------------------------------------------- attribute, item */

static jv loop_attr(const jloop *loop, const char *name, size_t len, bool *found)
{
    size_t n = loop->items->len, i = loop->index0;
    *found = true;
#define IS(word) (len == sizeof(word) - 1 && memcmp(name, word, len) == 0)
    if (IS("index"))
        return jv_int((int64_t)i + 1);
    if (IS("index0"))
        return jv_int((int64_t)i);
    if (IS("revindex"))
        return jv_int((int64_t)(n - i));
    if (IS("revindex0"))
        return jv_int((int64_t)(n - i - 1));
    if (IS("first"))
        return jv_bool(i == 0);
    if (IS("last"))
        return jv_bool(i + 1 == n);
    if (IS("length"))
        return jv_int((int64_t)n);
    if (IS("depth"))
        return jv_int(loop->depth);
    if (IS("depth0"))
        return jv_int(loop->depth - 1);
    if (IS("previtem"))
        return i > 0 ? loop->items->items[i - 1] : jv_undefined("previtem");
    if (IS("nextitem"))
        return i + 1 < n ? loop->items->items[i + 1] : jv_undefined("nextitem");
#undef IS
    *found = false;
    return jv_undefined(NULL);
}

/* Python attribute lookup in the sandbox: a method if the type has one
 * (an unsafe one reads as undefined), else a dict key / namespace
 * attribute.  *method is set when the result is a method of object. */
static hydra_status resolve_attr(jctx *ctx, jv object, const char *name, size_t len, jv *out,
                                 const jbuiltin **method)
{
    *method = NULL;
    *out = jv_undefined(name);
    switch (object.kind) {
    case JV_UNDEFINED:
        return undefined_error(ctx, object);
    case JV_NAMESPACE: {
        jv *v = jdict_get_str(object.dict, name, len);
        if (v)
            *out = *v;
        return HYDRA_OK;
    }
    case JV_LOOP: {
        bool found;
        jv v = loop_attr(object.loop, name, len, &found);
        if (found)
            *out = v;
        else
            *method = jmethod_find(JV_LOOP, name, len);
        return HYDRA_OK;
    }
    case JV_STRING:
    case JV_LIST:
    case JV_DICT:
        *method = jmethod_find(object.kind, name, len);
        if (*method || jmethod_is_unsafe(object.kind, name, len) || object.kind != JV_DICT)
            return HYDRA_OK;
        {
            jv *v = jdict_get_str(object.dict, name, len);
            if (v)
                *out = *v;
        }
        return HYDRA_OK;
    default:
        return HYDRA_OK;
    }
}

hydra_status jeval_getattr(jctx *ctx, jv object, const char *name, size_t len, jv *out)
{
    const jbuiltin *method;
    hydra_status st = resolve_attr(ctx, object, name, len, out, &method);
    if (st == HYDRA_OK && method)
        st = callable_value(ctx, method, object, out);
    return st;
}

static bool index_of(jv key, size_t len, size_t *out)
{
    if (key.kind != JV_INT && key.kind != JV_BOOL)
        return false;
    int64_t i = key.kind == JV_BOOL ? key.b : key.i;
    if (i < 0)
        i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len)
        return false;
    *out = (size_t)i;
    return true;
}

/* obj[key] as jinja2's sandbox getitem: the item, else (string key) the
 * attribute, else undefined. */
hydra_status jeval_getitem(jctx *ctx, jv object, jv key, jv *out)
{
    size_t i;
    *out = jv_undefined(key.kind == JV_STRING ? key.s->bytes : "item");
    switch (object.kind) {
    case JV_UNDEFINED:
        return undefined_error(ctx, object);
    case JV_LIST:
        if (index_of(key, object.list->len, &i)) {
            *out = object.list->items[i];
            return HYDRA_OK;
        }
        break;
    case JV_STRING: {
        const jstr *s = object.s;
        if (index_of(key, utf8_length(s->bytes, s->len), &i)) {
            size_t start = utf8_offset(s->bytes, s->len, i), end = start;
            utf8_next(s->bytes, s->len, &end);
            return jctx_str(ctx, s->bytes + start, end - start, out);
        }
        break;
    }
    case JV_DICT: {
        bool hashable = key.kind != JV_LIST && key.kind != JV_DICT && key.kind != JV_NAMESPACE;
        jv *v = hashable ? jdict_get(object.dict, key) : NULL;
        if (v) {
            *out = *v;
            return HYDRA_OK;
        }
        break;
    }
    default:
        break;
    }
    if (key.kind == JV_STRING)
        return jeval_getattr(ctx, object, key.s->bytes, key.s->len, out);
    return HYDRA_OK;
}

/* ----------------------------------------------------------------- slices */

static hydra_status slice_bound(jctx *ctx, jv v, bool *given, int64_t *out)
{
    *given = v.kind != JV_NONE && v.kind != JV_UNDEFINED;
    if (!*given)
        return HYDRA_OK;
    if (v.kind != JV_INT && v.kind != JV_BOOL)
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "slice indices must be integers or None, not %s", jv_type_name(v));
    *out = v.kind == JV_BOOL ? v.b : v.i;
    return HYDRA_OK;
}

/* Python's PySlice_AdjustIndices: the positions a slice visits. */
static void adjust_slice(int64_t len, bool has_start, int64_t *start, bool has_stop, int64_t *stop, int64_t step)
{
    if (!has_start)
        *start = step < 0 ? len - 1 : 0;
    else if (*start < 0)
        *start = *start + len < 0 ? (step < 0 ? -1 : 0) : *start + len;
    else if (*start >= len)
        *start = step < 0 ? len - 1 : len;
    if (!has_stop)
        *stop = step < 0 ? -1 : len;
    else if (*stop < 0)
        *stop = *stop + len < 0 ? (step < 0 ? -1 : 0) : *stop + len;
    else if (*stop >= len)
        *stop = step < 0 ? len - 1 : len;
}

/* Byte offsets of each code point of s, plus the end; NULL on failure. */
static size_t *codepoint_offsets(const jstr *s, size_t *count)
{
    size_t n = utf8_length(s->bytes, s->len);
    size_t *offsets = malloc((n + 1) * sizeof *offsets);
    if (offsets == NULL)
        return NULL;
    size_t pos = 0;
    for (size_t k = 0; k < n; k++) {
        offsets[k] = pos;
        utf8_next(s->bytes, s->len, &pos);
    }
    offsets[n] = s->len;
    *count = n;
    return offsets;
}

static hydra_status slice_string(jctx *ctx, const jstr *s, bool has_start, int64_t start, bool has_stop,
                                 int64_t stop, int64_t step, jv *out)
{
    size_t n;
    size_t *offsets = codepoint_offsets(s, &n);
    if (offsets == NULL)
        return jctx_nomem(ctx);
    adjust_slice((int64_t)n, has_start, &start, has_stop, &stop, step);
    jbuf buf = {.limit = ctx->limits.max_memory};
    bool ok = true;
    for (int64_t i = start; ok && (step > 0 ? i < stop : i > stop); i += step)
        ok = jbuf_put(&buf, s->bytes + offsets[i], offsets[i + 1] - offsets[i]);
    free(offsets);
    if (!ok) {
        free(buf.data);
        return jctx_nomem(ctx);
    }
    return jctx_buf_str(ctx, &buf, out);
}

static hydra_status eval_slice(jctx *ctx, const jnode *n, jv *out)
{
    jv object, start_v = jv_none(), stop_v = jv_none(), step_v = jv_none();
    hydra_status st = eval(ctx, n->slice.object, &object);
    if (st == HYDRA_OK && n->slice.start)
        st = eval(ctx, n->slice.start, &start_v);
    if (st == HYDRA_OK && n->slice.stop)
        st = eval(ctx, n->slice.stop, &stop_v);
    if (st == HYDRA_OK && n->slice.step)
        st = eval(ctx, n->slice.step, &step_v);
    if (st != HYDRA_OK)
        return st;
    ctx->at = n;
    bool has_start, has_stop, has_step;
    int64_t start = 0, stop = 0, step = 1;
    if ((st = slice_bound(ctx, start_v, &has_start, &start)) != HYDRA_OK ||
        (st = slice_bound(ctx, stop_v, &has_stop, &stop)) != HYDRA_OK ||
        (st = slice_bound(ctx, step_v, &has_step, &step)) != HYDRA_OK)
        return st;
    if (step == 0)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "slice step cannot be zero");
    if (object.kind == JV_UNDEFINED)
        return undefined_error(ctx, object);
    if (object.kind == JV_STRING)
        return slice_string(ctx, object.s, has_start, start, has_stop, stop, step, out);
    if (object.kind != JV_LIST) {
        *out = jv_undefined("slice");
        return HYDRA_OK;
    }
    adjust_slice((int64_t)object.list->len, has_start, &start, has_stop, &stop, step);
    jlist *list;
    if ((st = jctx_list(ctx, 0, &list)) != HYDRA_OK)
        return st;
    list->is_tuple = object.list->is_tuple;
    for (int64_t i = start; st == HYDRA_OK && (step > 0 ? i < stop : i > stop); i += step)
        st = jctx_push(ctx, list, object.list->items[i]);
    *out = (jv){.kind = JV_LIST, .list = list};
    return st;
}

/* -------------------------------------------------------------- operators */

static hydra_status type_error(jctx *ctx, const char *op, jv a, jv b)
{
    if (a.kind == JV_UNDEFINED)
        return undefined_error(ctx, a);
    if (b.kind == JV_UNDEFINED)
        return undefined_error(ctx, b);
    return jctx_fail(ctx, HYDRA_ERR_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
                     jv_type_name(b));
}

static bool int_like(jv v)
{
    return v.kind == JV_INT || v.kind == JV_BOOL;
}

static int64_t as_int(jv v)
{
    return v.kind == JV_BOOL ? v.b : v.i;
}

static hydra_status overflow(jctx *ctx)
{
    return jctx_fail(ctx, HYDRA_ERR_RANGE, "integer overflow (hydra's integers are 64-bit)");
}

static hydra_status concat_lists(jctx *ctx, const jlist *a, const jlist *b, jv *out)
{
    jlist *list;
    hydra_status st = jctx_list(ctx, a->len + b->len, &list);
    if (st != HYDRA_OK)
        return st;
    if (a->len)
        memcpy(list->items, a->items, a->len * sizeof(jv));
    if (b->len)
        memcpy(list->items + a->len, b->items, b->len * sizeof(jv));
    list->len = a->len + b->len;
    list->is_tuple = a->is_tuple;
    *out = (jv){.kind = JV_LIST, .list = list};
    return HYDRA_OK;
}

static hydra_status repeat(jctx *ctx, jv seq, int64_t times, jv *out)
{
    if (times < 0)
        times = 0;
    if (seq.kind == JV_STRING) {
        if (seq.s->len && (uint64_t)times > ctx->limits.max_memory / seq.s->len)
            return jctx_nomem(ctx);
        jstr *s = jstr_alloc(ctx->arena, seq.s->len * (size_t)times);
        if (s == NULL)
            return jctx_nomem(ctx);
        for (int64_t k = 0; k < times; k++)
            memcpy(s->bytes + (size_t)k * seq.s->len, seq.s->bytes, seq.s->len);
        *out = jv_str(s);
        return HYDRA_OK;
    }
    if (seq.list->len && (uint64_t)times > ctx->limits.max_memory / sizeof(jv) / seq.list->len)
        return jctx_nomem(ctx);
    jlist *list;
    hydra_status st = jctx_list(ctx, seq.list->len * (size_t)times, &list);
    for (int64_t k = 0; st == HYDRA_OK && seq.list->len && k < times; k++)
        memcpy(list->items + (size_t)k * seq.list->len, seq.list->items, seq.list->len * sizeof(jv));
    if (st == HYDRA_OK) {
        list->len = seq.list->len * (size_t)times;
        list->is_tuple = seq.list->is_tuple;
        *out = (jv){.kind = JV_LIST, .list = list};
    }
    return st;
}

static hydra_status int_arith(jctx *ctx, jop op, int64_t a, int64_t b, jv *out)
{
    int64_t r;
    switch (op) {
    case OP_ADD:
        if (__builtin_add_overflow(a, b, &r))
            return overflow(ctx);
        break;
    case OP_SUB:
        if (__builtin_sub_overflow(a, b, &r))
            return overflow(ctx);
        break;
    case OP_MUL:
        if (__builtin_mul_overflow(a, b, &r))
            return overflow(ctx);
        break;
    case OP_FLOORDIV:
    case OP_MOD:
        if (b == 0)
            return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "integer division or modulo by zero");
        if (a == INT64_MIN && b == -1)
            return overflow(ctx);
        /* Python rounds the quotient toward minus infinity; the remainder
         * takes the divisor's sign. */
        r = op == OP_FLOORDIV ? a / b - ((a % b != 0) && ((a < 0) != (b < 0))) : a % b;
        if (op == OP_MOD && r != 0 && ((r < 0) != (b < 0)))
            r += b;
        break;
    case OP_POW:
        if (b < 0) {
            *out = jv_float(pow((double)a, (double)b));
            return HYDRA_OK;
        }
        r = 1;
        for (int64_t k = 0; k < b; k++) {
            if (__builtin_mul_overflow(r, a, &r))
                return overflow(ctx);
            if (r == 0 || r == 1)
                break;
        }
        if (r == 1 && a == -1 && (b & 1))
            r = -1;
        break;
    default:
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "bad integer operator");
    }
    *out = jv_int(r);
    return HYDRA_OK;
}

static hydra_status float_arith(jctx *ctx, jop op, double a, double b, jv *out)
{
    double r;
    switch (op) {
    case OP_ADD: r = a + b; break;
    case OP_SUB: r = a - b; break;
    case OP_MUL: r = a * b; break;
    case OP_POW: r = pow(a, b); break;
    case OP_DIV:
    case OP_FLOORDIV:
    case OP_MOD:
        if (b == 0)
            return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "float division by zero");
        r = op == OP_DIV ? a / b : op == OP_FLOORDIV ? floor(a / b) : fmod(a, b);
        if (op == OP_MOD && r != 0 && ((r < 0) != (b < 0)))
            r += b;
        break;
    default:
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "bad float operator");
    }
    *out = jv_float(r);
    return HYDRA_OK;
}

static const char *op_symbol(jop op)
{
    static const char *const symbols[] = {
        [OP_ADD] = "+", [OP_SUB] = "-", [OP_MUL] = "*", [OP_DIV] = "/", [OP_FLOORDIV] = "//",
        [OP_MOD] = "%", [OP_POW] = "**", [OP_CONCAT] = "~",
    };
    return op <= OP_CONCAT ? symbols[op] : "?";
}

hydra_status jeval_arith(jctx *ctx, jop op, jv a, jv b, jv *out)
{
    if (jv_is_number(a) && jv_is_number(b)) {
        if (int_like(a) && int_like(b) && op != OP_DIV)
            return int_arith(ctx, op, as_int(a), as_int(b), out);
        return float_arith(ctx, op, jv_as_double(a), jv_as_double(b), out);
    }
    if (op == OP_ADD && a.kind == JV_STRING && b.kind == JV_STRING) {
        jstr *s = jstr_cat(ctx->arena, a.s, b.s);
        if (s == NULL)
            return jctx_nomem(ctx);
        *out = jv_str(s);
        return HYDRA_OK;
    }
    if (op == OP_ADD && a.kind == JV_LIST && b.kind == JV_LIST && a.list->is_tuple == b.list->is_tuple)
        return concat_lists(ctx, a.list, b.list, out);
    if (op == OP_MUL && (a.kind == JV_STRING || a.kind == JV_LIST) && int_like(b))
        return repeat(ctx, a, as_int(b), out);
    if (op == OP_MUL && (b.kind == JV_STRING || b.kind == JV_LIST) && int_like(a))
        return repeat(ctx, b, as_int(a), out);
    if (op == OP_MOD && a.kind == JV_STRING)
        return jctx_fail(ctx, HYDRA_ERR_UNSUPPORTED, "printf-style string formatting ('...' %% x) is not supported");
    return type_error(ctx, op_symbol(op), a, b);
}

hydra_status jeval_to_str(jctx *ctx, jv value, jv *out)
{
    if (value.kind == JV_STRING) {
        *out = value;
        return HYDRA_OK;
    }
    jbuf buf = {.limit = ctx->limits.max_memory};
    if (!jv_write_str(&buf, value)) {
        free(buf.data);
        return jctx_nomem(ctx);
    }
    return jctx_buf_str(ctx, &buf, out);
}

static hydra_status concat(jctx *ctx, jv a, jv b, jv *out)
{
    jv sa, sb;
    hydra_status st = jeval_to_str(ctx, a, &sa);
    if (st == HYDRA_OK)
        st = jeval_to_str(ctx, b, &sb);
    if (st != HYDRA_OK)
        return st;
    jstr *s = jstr_cat(ctx->arena, sa.s, sb.s);
    if (s == NULL)
        return jctx_nomem(ctx);
    *out = jv_str(s);
    return HYDRA_OK;
}

/* -1, 0, 1 for ordered values; a TypeError otherwise. */
static hydra_status order(jctx *ctx, jop op, jv a, jv b, int *out)
{
    if (jv_is_number(a) && jv_is_number(b)) {
        if (int_like(a) && int_like(b))
            *out = (as_int(a) > as_int(b)) - (as_int(a) < as_int(b));
        else
            *out = (jv_as_double(a) > jv_as_double(b)) - (jv_as_double(a) < jv_as_double(b));
        return HYDRA_OK;
    }
    if (a.kind == JV_STRING && b.kind == JV_STRING) {
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int c = memcmp(a.s->bytes, b.s->bytes, n);
        *out = c ? (c > 0) - (c < 0) : (a.s->len > b.s->len) - (a.s->len < b.s->len);
        return HYDRA_OK;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && a.list->is_tuple == b.list->is_tuple) {
        hydra_status st = enter(ctx);
        size_t n = a.list->len < b.list->len ? a.list->len : b.list->len, k = 0;
        while (k < n && jv_equal(a.list->items[k], b.list->items[k]))
            k++;
        if (st == HYDRA_OK && k < n)
            st = order(ctx, op, a.list->items[k], b.list->items[k], out);
        else
            *out = (a.list->len > b.list->len) - (a.list->len < b.list->len);
        ctx->depth--;
        return st;
    }
    if (a.kind == JV_UNDEFINED || b.kind == JV_UNDEFINED)
        return undefined_error(ctx, a.kind == JV_UNDEFINED ? a : b);
    static const char *const names[] = {[OP_LT] = "<", [OP_LE] = "<=", [OP_GT] = ">", [OP_GE] = ">="};
    return jctx_fail(ctx, HYDRA_ERR_TYPE, "'%s' not supported between instances of '%s' and '%s'", names[op],
                     jv_type_name(a), jv_type_name(b));
}

static hydra_status contains(jctx *ctx, jv needle, jv haystack, bool *out)
{
    *out = false;
    switch (haystack.kind) {
    case JV_UNDEFINED:
        return HYDRA_OK;
    case JV_STRING:
        if (needle.kind != JV_STRING)
            return jctx_fail(ctx, HYDRA_ERR_TYPE, "'in <string>' requires string as left operand, not %s",
                             jv_type_name(needle));
        *out = needle.s->len == 0 || memmem(haystack.s->bytes, haystack.s->len, needle.s->bytes, needle.s->len);
        return HYDRA_OK;
    case JV_LIST:
        for (size_t k = 0; k < haystack.list->len && !*out; k++)
            *out = jv_equal(needle, haystack.list->items[k]);
        return HYDRA_OK;
    case JV_DICT:
        *out = jdict_get(haystack.dict, needle) != NULL;
        return HYDRA_OK;
    default:
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "argument of type '%s' is not iterable", jv_type_name(haystack));
    }
}

hydra_status jeval_compare(jctx *ctx, jop op, jv a, jv b, bool *out)
{
    int c;
    hydra_status st;
    switch (op) {
    case OP_EQ:
        *out = jv_equal(a, b);
        return HYDRA_OK;
    case OP_NE:
        *out = !jv_equal(a, b);
        return HYDRA_OK;
    case OP_IN:
        return contains(ctx, a, b, out);
    case OP_NOTIN:
        st = contains(ctx, a, b, out);
        *out = !*out;
        return st;
    default:
        if ((st = order(ctx, op, a, b, &c)) != HYDRA_OK)
            return st;
        *out = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
        return HYDRA_OK;
    }
}

static hydra_status eval_compare(jctx *ctx, const jnode *n, jv *out)
{
    jv left;
    hydra_status st = eval(ctx, n->compare.first, &left);
    bool result = true;
    for (size_t k = 0; st == HYDRA_OK && result && k < n->compare.operands.len; k++) {
        jv right;
        if ((st = eval(ctx, n->compare.operands.items[k], &right)) != HYDRA_OK)
            break;
        ctx->at = n;
        st = jeval_compare(ctx, n->compare.ops[k], left, right, &result);
        left = right;
    }
    *out = jv_bool(result);
    return st;
}

static hydra_status eval_unary(jctx *ctx, const jnode *n, jv *out)
{
    jv v;
    hydra_status st = eval(ctx, n->binary.left, &v);
    if (st != HYDRA_OK)
        return st;
    ctx->at = n;
    if (n->binary.op == OP_NOT) {
        *out = jv_bool(!jv_truthy(v));
        return HYDRA_OK;
    }
    if (v.kind == JV_UNDEFINED)
        return undefined_error(ctx, v);
    if (!jv_is_number(v))
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "bad operand type for unary %s: '%s'", n->binary.op == OP_NEG ? "-" : "+",
                         jv_type_name(v));
    if (n->binary.op == OP_POS)
        *out = v.kind == JV_BOOL ? jv_int(v.b) : v;
    else if (v.kind == JV_FLOAT)
        *out = jv_float(-v.f);
    else if (as_int(v) == INT64_MIN)
        return overflow(ctx);
    else
        *out = jv_int(-as_int(v));
    return HYDRA_OK;
}

static hydra_status eval_binary(jctx *ctx, const jnode *n, jv *out)
{
    jv left, right;
    hydra_status st = eval(ctx, n->binary.left, &left);
    if (st != HYDRA_OK)
        return st;
    jop op = n->binary.op;
    if (op == OP_AND || op == OP_OR) {
        if (jv_truthy(left) == (op == OP_OR)) {
            *out = left;
            return HYDRA_OK;
        }
        return eval(ctx, n->binary.right, out);
    }
    if ((st = eval(ctx, n->binary.right, &right)) != HYDRA_OK)
        return st;
    ctx->at = n;
    return op == OP_CONCAT ? concat(ctx, left, right, out) : jeval_arith(ctx, op, left, right, out);
}

/* ------------------------------------------------------------------ calls */

typedef struct evaluated_args {
    jv *positional;
    size_t n_positional;
    jv *kw_values;
} evaluated_args;

static hydra_status eval_args(jctx *ctx, const jargs *args, evaluated_args *out)
{
    size_t n = args->positional.len, k = args->kw_values.len;
    jv *values = n + k ? jarena_alloc(ctx->arena, (n + k) * sizeof *values) : NULL;
    if (n + k && values == NULL)
        return jctx_nomem(ctx);
    hydra_status st = HYDRA_OK;
    for (size_t i = 0; st == HYDRA_OK && i < n; i++)
        st = eval(ctx, args->positional.items[i], &values[i]);
    for (size_t i = 0; st == HYDRA_OK && i < k; i++)
        st = eval(ctx, args->kw_values.items[i], &values[n + i]);
    out->positional = values;
    out->n_positional = n;
    out->kw_values = values ? values + n : NULL;
    return st;
}

static hydra_status bind_macro_args(jctx *ctx, const jnode *macro, jscope *scope, const jv *args, size_t n_args,
                                    const jstr **kw_names, const jv *kw_values, size_t n_kw)
{
    size_t n_params = macro->macro.n_params;
    const char *name = macro->macro.name->bytes;
    if (n_args > n_params)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "macro '%s' takes not more than %zu argument(s)", name, n_params);
    for (size_t k = 0; k < n_args; k++)
        if (!scope_set(ctx->arena, scope, macro->macro.params[k], args[k]))
            return jctx_nomem(ctx);
    for (size_t k = 0; k < n_kw; k++) {
        size_t p = 0;
        while (p < n_params && strcmp(macro->macro.params[p]->bytes, kw_names[k]->bytes) != 0)
            p++;
        if (p == n_params)
            return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "macro '%s' has no parameter '%s'", name, kw_names[k]->bytes);
        if (p < n_args || scope_find(scope, kw_names[k]->bytes, kw_names[k]->len))
            return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "macro '%s' got multiple values for '%s'", name,
                             kw_names[k]->bytes);
        if (!scope_set(ctx->arena, scope, macro->macro.params[p], kw_values[k]))
            return jctx_nomem(ctx);
    }
    /* Defaults are evaluated in the macro's scope, after the given ones. */
    jscope *outer = ctx->scope;
    ctx->scope = scope;
    hydra_status st = HYDRA_OK;
    for (size_t p = 0; st == HYDRA_OK && p < n_params; p++) {
        const jstr *param = macro->macro.params[p];
        if (scope_find(scope, param->bytes, param->len))
            continue;
        jv value = jv_undefined(param->bytes);
        if (macro->macro.defaults[p])
            st = eval(ctx, macro->macro.defaults[p], &value);
        if (st == HYDRA_OK && !scope_set(ctx->arena, scope, param, value))
            st = jctx_nomem(ctx);
    }
    ctx->scope = outer;
    return st;
}

/* Runs body with output captured into a string (macro calls, set blocks). */
static hydra_status capture(jctx *ctx, const jnode *body, jscope *scope, jv *out)
{
    jbuf buf = {.limit = ctx->limits.max_output};
    jbuf *outer_out = ctx->out;
    jscope *outer_scope = ctx->scope;
    ctx->out = &buf;
    ctx->scope = scope;
    hydra_status st = exec_node(ctx, body);
    ctx->out = outer_out;
    ctx->scope = outer_scope;
    if (st != HYDRA_OK) {
        free(buf.data);
        return st;
    }
    return jctx_buf_str(ctx, &buf, out);
}

static hydra_status call_macro(jctx *ctx, const jcallable *fn, const jv *args, size_t n_args,
                               const jstr **kw_names, const jv *kw_values, size_t n_kw, jv *out)
{
    hydra_status st = jctx_step(ctx, 1);
    if (st != HYDRA_OK)
        return st;
    jscope *scope = scope_new(ctx, fn->closure);
    if (scope == NULL)
        return jctx_nomem(ctx);
    if ((st = bind_macro_args(ctx, fn->macro, scope, args, n_args, kw_names, kw_values, n_kw)) != HYDRA_OK)
        return st;
    return capture(ctx, fn->macro->macro.body, scope, out);
}

static hydra_status call_value(jctx *ctx, jv callee, const jv *args, size_t n_args, const jstr **kw_names,
                               const jv *kw_values, size_t n_kw, jv *out)
{
    if (callee.kind == JV_UNDEFINED)
        return undefined_error(ctx, callee);
    if (callee.kind != JV_CALLABLE)
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "'%s' object is not callable", jv_type_name(callee));
    if (callee.fn->macro)
        return call_macro(ctx, callee.fn, args, n_args, kw_names, kw_values, n_kw, out);
    return jbuiltin_call(ctx, callee.fn->builtin, callee.fn->self, args, n_args, kw_names, kw_values, n_kw, out);
}

static hydra_status eval_call(jctx *ctx, const jnode *n, jv *out)
{
    const jnode *callee_node = n->call.callee;
    jv callee, object = jv_undefined(NULL);
    const jbuiltin *method = NULL;
    hydra_status st;
    /* obj.method(...) calls the method directly, without a bound value. */
    if (callee_node->kind == N_GETATTR) {
        const jstr *attr = callee_node->getattr.attr;
        if ((st = eval(ctx, callee_node->getattr.object, &object)) != HYDRA_OK)
            return st;
        ctx->at = callee_node;
        st = resolve_attr(ctx, object, attr->bytes, attr->len, &callee, &method);
    } else {
        st = eval(ctx, callee_node, &callee);
    }
    evaluated_args args;
    if (st == HYDRA_OK)
        st = eval_args(ctx, &n->call.args, &args);
    if (st != HYDRA_OK)
        return st;
    ctx->at = n;
    if (method)
        return jbuiltin_call(ctx, method, object, args.positional, args.n_positional, n->call.args.kw_names,
                             args.kw_values, n->call.args.kw_values.len, out);
    return call_value(ctx, callee, args.positional, args.n_positional, n->call.args.kw_names,
                            args.kw_values, n->call.args.kw_values.len, out);
}

static hydra_status eval_apply(jctx *ctx, const jnode *n, jv *out)
{
    jv operand;
    evaluated_args args;
    hydra_status st = eval(ctx, n->apply.operand, &operand);
    if (st == HYDRA_OK)
        st = eval_args(ctx, &n->apply.args, &args);
    if (st != HYDRA_OK)
        return st;
    ctx->at = n;
    if ((st = jbuiltin_call(ctx, n->apply.builtin, operand, args.positional, args.n_positional,
                            n->apply.args.kw_names, args.kw_values, n->apply.args.kw_values.len, out)) != HYDRA_OK)
        return st;
    if (n->kind == N_TEST)
        *out = jv_bool(jv_truthy(*out) != n->apply.negated);
    return HYDRA_OK;
}

/* ------------------------------------------------------------ literals */

static hydra_status eval_sequence(jctx *ctx, const jnode *n, jv *out)
{
    jlist *list;
    hydra_status st = jctx_list(ctx, n->items.len, &list);
    for (size_t k = 0; st == HYDRA_OK && k < n->items.len; k++)
        st = eval(ctx, n->items.items[k], &list->items[k]);
    if (st != HYDRA_OK)
        return st;
    list->len = n->items.len;
    list->is_tuple = n->kind == N_TUPLE;
    *out = (jv){.kind = JV_LIST, .list = list};
    return HYDRA_OK;
}

static hydra_status eval_dict(jctx *ctx, const jnode *n, jv *out)
{
    jdict *dict = jdict_new(ctx->arena);
    if (dict == NULL)
        return jctx_nomem(ctx);
    for (size_t k = 0; k < n->dict.keys.len; k++) {
        jv key, value;
        hydra_status st = eval(ctx, n->dict.keys.items[k], &key);
        if (st == HYDRA_OK)
            st = eval(ctx, n->dict.values.items[k], &value);
        if (st != HYDRA_OK)
            return st;
        if (key.kind == JV_LIST || key.kind == JV_DICT || key.kind == JV_NAMESPACE || key.kind == JV_UNDEFINED) {
            ctx->at = n->dict.keys.items[k];
            return jctx_fail(ctx, HYDRA_ERR_TYPE, "unhashable dict key of type '%s'", jv_type_name(key));
        }
        if (!jdict_set(ctx->arena, dict, key, value))
            return jctx_nomem(ctx);
    }
    *out = (jv){.kind = JV_DICT, .dict = dict};
    return HYDRA_OK;
}

static hydra_status eval_inner(jctx *ctx, const jnode *n, jv *out)
{
    hydra_status st;
    jv object, key;
    switch (n->kind) {
    case N_CONST:
        *out = n->constant;
        return HYDRA_OK;
    case N_NAME:
        return lookup_name(ctx, n->name, out);
    case N_GETATTR:
        if ((st = eval(ctx, n->getattr.object, &object)) != HYDRA_OK)
            return st;
        ctx->at = n;
        return jeval_getattr(ctx, object, n->getattr.attr->bytes, n->getattr.attr->len, out);
    case N_GETITEM:
        if ((st = eval(ctx, n->getitem.object, &object)) != HYDRA_OK ||
            (st = eval(ctx, n->getitem.key, &key)) != HYDRA_OK)
            return st;
        ctx->at = n;
        return jeval_getitem(ctx, object, key, out);
    case N_SLICE:
        return eval_slice(ctx, n, out);
    case N_CALL:
        return eval_call(ctx, n, out);
    case N_FILTER:
    case N_TEST:
        return eval_apply(ctx, n, out);
    case N_UNARY:
        return eval_unary(ctx, n, out);
    case N_BINARY:
        return eval_binary(ctx, n, out);
    case N_COMPARE:
        return eval_compare(ctx, n, out);
    case N_COND:
        if ((st = eval(ctx, n->cond.test, &key)) != HYDRA_OK)
            return st;
        if (jv_truthy(key))
            return eval(ctx, n->cond.then, out);
        if (n->cond.otherwise)
            return eval(ctx, n->cond.otherwise, out);
        *out = jv_undefined("conditional expression");
        return HYDRA_OK;
    case N_LIST:
    case N_TUPLE:
        return eval_sequence(ctx, n, out);
    case N_DICT:
        return eval_dict(ctx, n, out);
    default:
        return jctx_fail(ctx, HYDRA_ERR_FORMAT, "statement used as an expression");
    }
}

static hydra_status eval(jctx *ctx, const jnode *n, jv *out)
{
    ctx->at = n;
    hydra_status st = enter(ctx);
    if (st == HYDRA_OK)
        st = eval_inner(ctx, n, out);
    ctx->depth--;
    return st;
}

/* ------------------------------------------------------------- iteration */

hydra_status jeval_iterate(jctx *ctx, jv value, jlist **out)
{
    hydra_status st = HYDRA_OK;
    switch (value.kind) {
    case JV_LIST:
        *out = value.list;
        return HYDRA_OK;
    case JV_UNDEFINED:
        return jctx_list(ctx, 0, out);
    case JV_DICT:
        if ((st = jctx_list(ctx, value.dict->len, out)) != HYDRA_OK)
            return st;
        if (value.dict->len)
            memcpy((*out)->items, value.dict->keys, value.dict->len * sizeof(jv));
        (*out)->len = value.dict->len;
        return HYDRA_OK;
    case JV_STRING: {
        const jstr *s = value.s;
        if ((st = jctx_list(ctx, 0, out)) != HYDRA_OK)
            return st;
        for (size_t pos = 0; st == HYDRA_OK && pos < s->len;) {
            size_t start = pos;
            utf8_next(s->bytes, s->len, &pos);
            jv ch;
            if ((st = jctx_str(ctx, s->bytes + start, pos - start, &ch)) == HYDRA_OK)
                st = jctx_push(ctx, *out, ch);
        }
        return st;
    }
    default:
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "'%s' object is not iterable", jv_type_name(value));
    }
}

/* Binds a for/set target: one name, or unpacking into several. */
static hydra_status bind_target(jctx *ctx, const jtarget *target, jv value)
{
    if (target->names == NULL)
        return assign(ctx, target->name, value);
    jlist *items;
    hydra_status st = jeval_iterate(ctx, value, &items);
    if (st != HYDRA_OK)
        return st;
    if (items->len != target->n_names)
        return jctx_fail(ctx, HYDRA_ERR_INVALID_ARG, "cannot unpack %zu value(s) into %zu names", items->len,
                         target->n_names);
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++)
        st = assign(ctx, target->names[k], items->items[k]);
    return st;
}

/* ------------------------------------------------------------ statements */

/* Each iteration starts from an empty scope (jinja2 re-creates the loop
 * frame each time round); the scope's storage is reused, so a long loop
 * does not grow the arena. */
static void scope_clear(jscope *s)
{
    s->len = 0;
}

static hydra_status filter_loop_items(jctx *ctx, const jnode *n, jlist *items, jlist **out)
{
    jlist *kept;
    hydra_status st = jctx_list(ctx, 0, &kept);
    jscope *outer = ctx->scope, *inner = scope_new(ctx, outer);
    if (inner == NULL)
        return jctx_nomem(ctx);
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++) {
        jv keep;
        if ((st = jctx_step(ctx, 1)) != HYDRA_OK)
            break;
        scope_clear(inner);
        ctx->scope = inner;
        st = bind_target(ctx, &n->loop.target, items->items[k]);
        if (st == HYDRA_OK)
            st = eval(ctx, n->loop.filter, &keep);
        if (st == HYDRA_OK && jv_truthy(keep))
            st = jctx_push(ctx, kept, items->items[k]);
    }
    ctx->scope = outer;
    *out = kept;
    return st;
}

static hydra_status exec_for(jctx *ctx, const jnode *n)
{
    jv iterable;
    jlist *items;
    hydra_status st = eval(ctx, n->loop.iter, &iterable);
    if (st == HYDRA_OK) {
        ctx->at = n->loop.iter;
        st = jeval_iterate(ctx, iterable, &items);
    }
    if (st == HYDRA_OK && n->loop.filter)
        st = filter_loop_items(ctx, n, items, &items);
    if (st != HYDRA_OK)
        return st;
    jloop *loop = jarena_alloc(ctx->arena, sizeof *loop);
    const jstr *loop_name = jstr_new(ctx->arena, "loop", 4);
    if (loop == NULL || loop_name == NULL)
        return jctx_nomem(ctx);
    loop->items = items;
    loop->depth = 1; /* deeper only in recursive loops, which hydra does not run */
    jscope *outer = ctx->scope, *inner = scope_new(ctx, outer);
    if (inner == NULL)
        return jctx_nomem(ctx);
    for (size_t k = 0; st == HYDRA_OK && k < items->len; k++) {
        ctx->at = n;
        if ((st = jctx_step(ctx, 1)) != HYDRA_OK)
            break;
        scope_clear(inner);
        ctx->scope = inner;
        loop->index0 = k;
        st = assign(ctx, loop_name, (jv){.kind = JV_LOOP, .loop = loop});
        if (st == HYDRA_OK)
            st = bind_target(ctx, &n->loop.target, items->items[k]);
        if (st == HYDRA_OK)
            st = exec_node(ctx, n->loop.body);
        ctx->scope = outer;
        if (ctx->flow == FLOW_BREAK) {
            ctx->flow = FLOW_NORMAL;
            break;
        }
        ctx->flow = FLOW_NORMAL;
    }
    if (st == HYDRA_OK && items->len == 0 && n->loop.otherwise)
        st = exec_node(ctx, n->loop.otherwise);
    return st;
}

static hydra_status exec_set(jctx *ctx, const jnode *n)
{
    jv value;
    hydra_status st = n->kind == N_SET_BLOCK ? capture(ctx, n->set.value, ctx->scope, &value)
                                             : eval(ctx, n->set.value, &value);
    if (st != HYDRA_OK)
        return st;
    ctx->at = n;
    const jtarget *target = &n->set.target;
    if (target->attr == NULL)
        return bind_target(ctx, target, value);
    jv ns;
    if ((st = lookup_name(ctx, target->name, &ns)) != HYDRA_OK)
        return st;
    if (ns.kind != JV_NAMESPACE)
        return jctx_fail(ctx, HYDRA_ERR_TYPE, "cannot assign attribute '%s' on '%s', which is not a namespace()",
                         target->attr->bytes, target->name->bytes);
    return jdict_set(ctx->arena, ns.dict, jv_str(target->attr), value) ? HYDRA_OK : jctx_nomem(ctx);
}

static hydra_status exec_macro_def(jctx *ctx, const jnode *n)
{
    jcallable *fn = jarena_alloc(ctx->arena, sizeof *fn);
    if (fn == NULL)
        return jctx_nomem(ctx);
    fn->macro = n;
    fn->closure = ctx->scope;
    return assign(ctx, n->macro.name, (jv){.kind = JV_CALLABLE, .fn = fn});
}

static hydra_status exec_emit(jctx *ctx, const jnode *n)
{
    jv value;
    hydra_status st = eval(ctx, n->expr, &value);
    if (st != HYDRA_OK)
        return st;
    ctx->at = n;
    return jv_write_str(ctx->out, value) ? HYDRA_OK : output_full(ctx);
}

static hydra_status exec_body(jctx *ctx, const jnode *n)
{
    for (size_t k = 0; k < n->items.len; k++) {
        hydra_status st = exec_node(ctx, n->items.items[k]);
        if (st != HYDRA_OK)
            return st;
        if (ctx->flow != FLOW_NORMAL)
            break;
    }
    return HYDRA_OK;
}

static hydra_status exec_inner(jctx *ctx, const jnode *n)
{
    jv test;
    hydra_status st;
    switch (n->kind) {
    case N_BODY:
        return exec_body(ctx, n);
    case N_TEXT:
        return jbuf_put(ctx->out, n->text->bytes, n->text->len) ? HYDRA_OK : output_full(ctx);
    case N_EMIT:
        return exec_emit(ctx, n);
    case N_IF:
        /* elif branches are nested N_IFs: walk the chain without recursing */
        for (; n && n->kind == N_IF; n = n->cond.otherwise) {
            if ((st = eval(ctx, n->cond.test, &test)) != HYDRA_OK)
                return st;
            if (jv_truthy(test))
                return exec_node(ctx, n->cond.then);
        }
        return n ? exec_node(ctx, n) : HYDRA_OK;
    case N_FOR:
        return exec_for(ctx, n);
    case N_SET:
    case N_SET_BLOCK:
        return exec_set(ctx, n);
    case N_MACRO:
        return exec_macro_def(ctx, n);
    case N_BREAK:
        ctx->flow = FLOW_BREAK;
        return HYDRA_OK;
    case N_CONTINUE:
        ctx->flow = FLOW_CONTINUE;
        return HYDRA_OK;
    default:
        return jctx_fail(ctx, HYDRA_ERR_FORMAT, "expression used as a statement");
    }
}

static hydra_status exec_node(jctx *ctx, const jnode *n)
{
    ctx->at = n;
    hydra_status st = enter(ctx);
    if (st == HYDRA_OK)
        st = exec_inner(ctx, n);
    ctx->depth--;
    return st;
}

/* ---------------------------------------------------------------- render */

hydra_status jrender_new(const jlimits *limits, jrender **out)
{
    *out = NULL;
    jrender *r = calloc(1, sizeof *r);
    if (r == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory");
    r->limits = *limits;
    r->arena.limit = limits->max_memory;
    r->globals = jarena_alloc(&r->arena, sizeof *r->globals);
    if (r->globals == NULL) {
        jrender_free(r);
        return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory");
    }
    *out = r;
    return HYDRA_OK;
}

void jrender_free(jrender *render)
{
    if (render == NULL)
        return;
    jarena_free(&render->arena);
    free(render);
}

jarena *jrender_arena(jrender *render)
{
    return &render->arena;
}

hydra_status jrender_set(jrender *render, const char *name, jv value)
{
    jstr *s = jstr_new(&render->arena, name, strlen(name));
    if (s == NULL || !scope_set(&render->arena, render->globals, s, value))
        return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory setting '%s'", name);
    return HYDRA_OK;
}

void jrender_set_time(jrender *render, int64_t unix_seconds)
{
    render->time_fixed = true;
    render->now = unix_seconds;
}

hydra_status jinja_render(jrender *render, const jtemplate *tmpl, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    jbuf buf = {.limit = render->limits.max_output};
    jctx ctx = {
        .arena = &render->arena,
        .limits = render->limits,
        .scope = render->globals,
        .out = &buf,
        .time_fixed = render->time_fixed,
        .now = render->now,
    };
    hydra_status st = exec_node(&ctx, tmpl->root);
    if (st == HYDRA_OK && buf.data == NULL && !jbuf_put(&buf, "", 0))
        st = hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory");
    if (st != HYDRA_OK) {
        free(buf.data);
        return st;
    }
    *out = buf.data;
    *len = buf.len;
    return HYDRA_OK;
}
