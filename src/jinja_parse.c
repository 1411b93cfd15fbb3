/*
 * jinja_parse.c — tokens to AST, following jinja2's parser (jinja2/parser.py)
 * for precedence and the shape of each statement:
 *
 *   expression  = or_expr ["if" or_expr ["else" expression]]
 *   or / and / not, then comparisons (== != < <= > >= in, not in, chained),
 *   + -, then ~, then * / // %, then ** (left-associative, as in jinja2),
 *   unary - +, then postfix: .name [subscript] (call), then | filter and
 *   "is [not] test".  Filters bind tighter than + : "a + b|f" is a + f(b).
 *
 * Statements: if/elif/else, for ... in ... [if ...] / else, set (name,
 * ns.attr, tuple, and {% set x %}...{% endset %}), macro, break, continue.
 * Filters and tests are resolved here, so an unknown one is an error at
 * load time with its line and column, as in jinja2.
 */
#include "error.h"
#include "jinja_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    jarena *arena;
    const jtoken *tokens;
    size_t count, pos;
    unsigned depth, max_depth;
    unsigned loops; /* enclosing for loops in the current macro or template */
} parser;

/* --------------------------------------------------------------- helpers */

static const jtoken *cur(const parser *p)
{
    return &p->tokens[p->pos];
}

static const jtoken *peek(const parser *p, size_t ahead)
{
    size_t k = p->pos + ahead;
    return &p->tokens[k < p->count ? k : p->count - 1];
}

static void advance(parser *p)
{
    if (p->pos + 1 < p->count)
        p->pos++;
}

static bool is_op(const jtoken *t, jtok_op op)
{
    return t->kind == JT_OP && t->op == op;
}

static bool is_name(const jtoken *t, const char *name)
{
    return t->kind == JT_NAME && t->len == strlen(name) && memcmp(t->text, name, t->len) == 0;
}

static void describe(const jtoken *t, char *out, size_t size)
{
    switch (t->kind) {
    case JT_EOF: snprintf(out, size, "end of template"); break;
    case JT_DATA: snprintf(out, size, "template text"); break;
    case JT_VAR_BEGIN: snprintf(out, size, "'{{'"); break;
    case JT_VAR_END: snprintf(out, size, "'}}'"); break;
    case JT_BLOCK_BEGIN: snprintf(out, size, "'{%%'"); break;
    case JT_BLOCK_END: snprintf(out, size, "'%%}'"); break;
    case JT_NAME: snprintf(out, size, "name '%.*s'", (int)(t->len > 40 ? 40 : t->len), t->text); break;
    case JT_STRING: snprintf(out, size, "a string"); break;
    case JT_INT:
    case JT_FLOAT: snprintf(out, size, "a number"); break;
    case JT_OP: snprintf(out, size, "'%s'", jtok_op_text(t->op)); break;
    }
}

static hydra_status fail_at(const jtoken *t, hydra_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static hydra_status fail_at(const jtoken *t, hydra_status status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return hydra_fail(status, "chat template line %u, column %u: %s", t->line, t->col, msg);
}

static hydra_status unexpected(const parser *p, const char *wanted)
{
    char got[96];
    describe(cur(p), got, sizeof got);
    return fail_at(cur(p), HYDRA_ERR_FORMAT, "expected %s, got %s", wanted, got);
}

static hydra_status nomem(const parser *p)
{
    return fail_at(cur(p), HYDRA_ERR_NOMEM, "out of memory while parsing (limit %zu bytes)", p->arena->limit);
}

static hydra_status expect_op(parser *p, jtok_op op)
{
    if (!is_op(cur(p), op)) {
        char wanted[16];
        snprintf(wanted, sizeof wanted, "'%s'", jtok_op_text(op));
        return unexpected(p, wanted);
    }
    advance(p);
    return HYDRA_OK;
}

static hydra_status expect_kind(parser *p, jtok_kind kind, const char *wanted)
{
    if (cur(p)->kind != kind)
        return unexpected(p, wanted);
    advance(p);
    return HYDRA_OK;
}

static hydra_status enter(parser *p)
{
    if (++p->depth > p->max_depth)
        return fail_at(cur(p), HYDRA_ERR_RANGE, "template nested deeper than the limit of %u", p->max_depth);
    return HYDRA_OK;
}

static jnode *node_new(parser *p, jnode_kind kind, const jtoken *at)
{
    jnode *n = jarena_alloc(p->arena, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = at->line;
        n->col = at->col;
    }
    return n;
}

/* A growable node list built in the arena. */
typedef struct nodevec {
    jnode **items;
    size_t len, cap;
} nodevec;

static bool vec_push(parser *p, nodevec *v, jnode *n)
{
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jnode **items = jarena_alloc(p->arena, cap * sizeof *items);
        if (items == NULL)
            return false;
        if (v->len)
            memcpy(items, v->items, v->len * sizeof *items);
        v->items = items;
        v->cap = cap;
    }
    v->items[v->len++] = n;
    return true;
}

static jnodes vec_done(nodevec v)
{
    return (jnodes){.items = v.items, .len = v.len};
}

static const jstr *token_name(parser *p, const jtoken *t)
{
    return jstr_new(p->arena, t->text, t->len);
}

/* ----------------------------------------------------------- expressions */

static hydra_status parse_expression(parser *p, bool with_condexpr, jnode **out);
static hydra_status parse_or(parser *p, jnode **out);
static hydra_status parse_unary(parser *p, bool with_filter, jnode **out);
static hydra_status parse_primary(parser *p, jnode **out);
static hydra_status parse_postfix(parser *p, jnode **node);

static bool tuple_end(const parser *p, bool stop_at_recursive)
{
    const jtoken *t = cur(p);
    return t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || is_op(t, OPT_RPAREN) ||
           (stop_at_recursive && is_name(t, "recursive"));
}

/* Comma-separated expressions: one alone is itself, more make a tuple.
 * explicit_parens allows "()" (the empty tuple). */
static hydra_status parse_tuple(parser *p, bool with_condexpr, bool explicit_parens, bool stop_at_recursive,
                                jnode **out)
{
    const jtoken *start = cur(p);
    nodevec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.len && tuple_end(p, stop_at_recursive))
            break;
        if (items.len == 0 && explicit_parens && is_op(cur(p), OPT_RPAREN))
            break;
        jnode *item;
        hydra_status st = parse_expression(p, with_condexpr, &item);
        if (st != HYDRA_OK)
            return st;
        if (!vec_push(p, &items, item))
            return nomem(p);
        if (!is_op(cur(p), OPT_COMMA))
            break;
        is_tuple = true;
        advance(p);
    }
    if (!is_tuple && items.len == 1) {
        *out = items.items[0];
        return HYDRA_OK;
    }
    if (items.len == 0 && !explicit_parens)
        return unexpected(p, "an expression");
    jnode *n = node_new(p, N_TUPLE, start);
    if (n == NULL)
        return nomem(p);
    n->items = vec_done(items);
    *out = n;
    return HYDRA_OK;
}

/* (args): positional values, then name=value pairs. */
static hydra_status parse_call_args(parser *p, jargs *args)
{
    nodevec positional = {0}, kw_values = {0};
    const jstr **kw_names = NULL;
    size_t kw_cap = 0;
    hydra_status st = expect_op(p, OPT_LPAREN);
    while (st == HYDRA_OK && !is_op(cur(p), OPT_RPAREN)) {
        if (positional.len + kw_values.len && (st = expect_op(p, OPT_COMMA)) != HYDRA_OK)
            break;
        if (is_op(cur(p), OPT_RPAREN))
            break;
        if (is_op(cur(p), OPT_MUL) || is_op(cur(p), OPT_POW))
            return fail_at(cur(p), HYDRA_ERR_UNSUPPORTED, "*args and **kwargs in calls are not supported");
        jnode *value;
        if (cur(p)->kind == JT_NAME && is_op(peek(p, 1), OPT_ASSIGN)) {
            const jstr *name = token_name(p, cur(p));
            advance(p);
            advance(p);
            if (name == NULL)
                return nomem(p);
            if ((st = parse_expression(p, true, &value)) != HYDRA_OK)
                return st;
            if (kw_values.len == kw_cap) {
                kw_cap = kw_cap ? kw_cap * 2 : 4;
                const jstr **names = jarena_alloc(p->arena, kw_cap * sizeof *names);
                if (names == NULL)
                    return nomem(p);
                if (kw_values.len)
                    memcpy(names, kw_names, kw_values.len * sizeof *names);
                kw_names = names;
            }
            kw_names[kw_values.len] = name;
            if (!vec_push(p, &kw_values, value))
                return nomem(p);
            continue;
        }
        if (kw_values.len)
            return fail_at(cur(p), HYDRA_ERR_FORMAT, "positional argument after keyword argument");
        if ((st = parse_expression(p, true, &value)) != HYDRA_OK)
            return st;
        if (!vec_push(p, &positional, value))
            return nomem(p);
    }
    if (st == HYDRA_OK)
        st = expect_op(p, OPT_RPAREN);
    args->positional = vec_done(positional);
    args->kw_names = kw_names;
    args->kw_values = vec_done(kw_values);
    return st;
}

/* A call reports errors at its callee: "raise_exception(...)" at the name. */
static hydra_status parse_call(parser *p, jnode **node)
{
    jnode *n = node_new(p, N_CALL, cur(p));
    if (n == NULL)
        return nomem(p);
    n->line = (*node)->line;
    n->col = (*node)->col;
    n->call.callee = *node;
    *node = n;
    return parse_call_args(p, &n->call.args);
}

/* [start:stop:step] after the "[": any part may be missing. */
static hydra_status parse_slice_rest(parser *p, jnode *n)
{
    hydra_status st = HYDRA_OK;
    advance(p); /* the first ':' */
    if (!is_op(cur(p), OPT_COLON) && !is_op(cur(p), OPT_RBRACKET))
        st = parse_expression(p, true, &n->slice.stop);
    if (st == HYDRA_OK && is_op(cur(p), OPT_COLON)) {
        advance(p);
        if (!is_op(cur(p), OPT_RBRACKET))
            st = parse_expression(p, true, &n->slice.step);
    }
    return st;
}

static hydra_status parse_subscript(parser *p, jnode **node)
{
    const jtoken *at = cur(p);
    if (is_op(at, OPT_DOT)) {
        advance(p);
        const jtoken *t = cur(p);
        if (t->kind == JT_NAME) {
            jnode *n = node_new(p, N_GETATTR, at);
            if (n == NULL || (n->getattr.attr = token_name(p, t)) == NULL)
                return nomem(p);
            n->getattr.object = *node;
            advance(p);
            *node = n;
            return HYDRA_OK;
        }
        if (t->kind != JT_INT)
            return unexpected(p, "an attribute name after '.'");
        jnode *n = node_new(p, N_GETITEM, at), *key = node_new(p, N_CONST, t);
        if (n == NULL || key == NULL)
            return nomem(p);
        key->constant = jv_int(t->i);
        n->getitem.object = *node;
        n->getitem.key = key;
        advance(p);
        *node = n;
        return HYDRA_OK;
    }
    advance(p); /* '[' */
    jnode *first = NULL;
    hydra_status st = HYDRA_OK;
    if (!is_op(cur(p), OPT_COLON) && (st = parse_expression(p, true, &first)) != HYDRA_OK)
        return st;
    jnode *n;
    if (is_op(cur(p), OPT_COLON)) {
        n = node_new(p, N_SLICE, at);
        if (n == NULL)
            return nomem(p);
        n->slice.object = *node;
        n->slice.start = first;
        if ((st = parse_slice_rest(p, n)) != HYDRA_OK)
            return st;
    } else {
        if (is_op(cur(p), OPT_COMMA))
            return fail_at(cur(p), HYDRA_ERR_UNSUPPORTED, "tuple subscripts (x[a, b]) are not supported");
        n = node_new(p, N_GETITEM, at);
        if (n == NULL)
            return nomem(p);
        n->getitem.object = *node;
        n->getitem.key = first;
    }
    *node = n;
    return expect_op(p, OPT_RBRACKET);
}

static hydra_status parse_postfix(parser *p, jnode **node)
{
    for (;;) {
        const jtoken *t = cur(p);
        hydra_status st;
        if (is_op(t, OPT_DOT) || is_op(t, OPT_LBRACKET))
            st = parse_subscript(p, node);
        else if (is_op(t, OPT_LPAREN))
            st = parse_call(p, node);
        else
            return HYDRA_OK;
        if (st != HYDRA_OK)
            return st;
    }
}

/* A filter or test name: NAME(.NAME)* as jinja2 allows; resolved here. */
static hydra_status parse_builtin_name(parser *p, bool test, const jbuiltin **out)
{
    const jtoken *t = cur(p);
    if (t->kind != JT_NAME)
        return unexpected(p, test ? "a test name" : "a filter name");
    if (is_op(peek(p, 1), OPT_DOT))
        return fail_at(t, HYDRA_ERR_UNSUPPORTED, "dotted %s names are not supported", test ? "test" : "filter");
    *out = test ? jtest_find(t->text, t->len) : jfilter_find(t->text, t->len);
    if (*out == NULL)
        return fail_at(t, HYDRA_ERR_UNSUPPORTED, "no %s named '%.*s'", test ? "test" : "filter",
                       (int)(t->len > 60 ? 60 : t->len), t->text);
    advance(p);
    return HYDRA_OK;
}

static hydra_status parse_filter(parser *p, jnode **node)
{
    jnode *n = node_new(p, N_FILTER, cur(p));
    if (n == NULL)
        return nomem(p);
    advance(p); /* '|' */
    n->apply.operand = *node;
    *node = n;
    hydra_status st = parse_builtin_name(p, false, &n->apply.builtin);
    if (st == HYDRA_OK && is_op(cur(p), OPT_LPAREN))
        st = parse_call_args(p, &n->apply.args);
    return st;
}

/* "is [not] name", then "(args)" or one bare argument ("is divisibleby 3"). */
static hydra_status parse_test(parser *p, jnode **node)
{
    jnode *n = node_new(p, N_TEST, cur(p));
    if (n == NULL)
        return nomem(p);
    advance(p); /* 'is' */
    if (is_name(cur(p), "not")) {
        n->apply.negated = true;
        advance(p);
    }
    n->apply.operand = *node;
    *node = n;
    hydra_status st = parse_builtin_name(p, true, &n->apply.builtin);
    if (st != HYDRA_OK)
        return st;
    const jtoken *t = cur(p);
    if (is_op(t, OPT_LPAREN))
        return parse_call_args(p, &n->apply.args);
    bool starts_value = t->kind == JT_NAME || t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT ||
                        is_op(t, OPT_LBRACKET) || is_op(t, OPT_LBRACE);
    if (!starts_value || is_name(t, "else") || is_name(t, "or") || is_name(t, "and"))
        return HYDRA_OK;
    if (is_name(t, "is"))
        return fail_at(t, HYDRA_ERR_FORMAT, "you cannot chain multiple tests with 'is'");
    jnode *arg;
    if ((st = parse_primary(p, &arg)) != HYDRA_OK || (st = parse_postfix(p, &arg)) != HYDRA_OK)
        return st;
    nodevec args = {0};
    if (!vec_push(p, &args, arg))
        return nomem(p);
    n->apply.args.positional = vec_done(args);
    return HYDRA_OK;
}

static hydra_status parse_filter_expr(parser *p, jnode **node)
{
    for (;;) {
        const jtoken *t = cur(p);
        hydra_status st;
        if (is_op(t, OPT_PIPE))
            st = parse_filter(p, node);
        else if (is_name(t, "is"))
            st = parse_test(p, node);
        else if (is_op(t, OPT_LPAREN))
            st = parse_call(p, node);
        else
            return HYDRA_OK;
        if (st != HYDRA_OK)
            return st;
    }
}

static hydra_status parse_list(parser *p, jnode **out)
{
    jnode *n = node_new(p, N_LIST, cur(p));
    if (n == NULL)
        return nomem(p);
    advance(p);
    nodevec items = {0};
    while (!is_op(cur(p), OPT_RBRACKET)) {
        hydra_status st;
        if (items.len && (st = expect_op(p, OPT_COMMA)) != HYDRA_OK)
            return st;
        if (is_op(cur(p), OPT_RBRACKET))
            break;
        jnode *item;
        if ((st = parse_expression(p, true, &item)) != HYDRA_OK)
            return st;
        if (!vec_push(p, &items, item))
            return nomem(p);
    }
    advance(p);
    n->items = vec_done(items);
    *out = n;
    return HYDRA_OK;
}

static hydra_status parse_dict(parser *p, jnode **out)
{
    jnode *n = node_new(p, N_DICT, cur(p));
    if (n == NULL)
        return nomem(p);
    advance(p);
    nodevec keys = {0}, values = {0};
    while (!is_op(cur(p), OPT_RBRACE)) {
        hydra_status st;
        if (keys.len && (st = expect_op(p, OPT_COMMA)) != HYDRA_OK)
            return st;
        if (is_op(cur(p), OPT_RBRACE))
            break;
        jnode *key, *value;
        if ((st = parse_expression(p, true, &key)) != HYDRA_OK || (st = expect_op(p, OPT_COLON)) != HYDRA_OK ||
            (st = parse_expression(p, true, &value)) != HYDRA_OK)
            return st;
        if (!vec_push(p, &keys, key) || !vec_push(p, &values, value))
            return nomem(p);
    }
    advance(p);
    n->dict.keys = vec_done(keys);
    n->dict.values = vec_done(values);
    *out = n;
    return HYDRA_OK;
}

/* true/false/none in either spelling, as jinja2's parse_primary. */
static bool name_constant(const jtoken *t, jv *out)
{
    static const struct {
        const char *name;
        jkind kind;
        bool b;
    } words[] = {
        {"true", JV_BOOL, true}, {"True", JV_BOOL, true}, {"false", JV_BOOL, false},
        {"False", JV_BOOL, false}, {"none", JV_NONE, false}, {"None", JV_NONE, false},
    };
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        if (is_name(t, words[k].name)) {
            *out = words[k].kind == JV_BOOL ? jv_bool(words[k].b) : jv_none();
            return true;
        }
    return false;
}

/* Adjacent string literals concatenate, as in Python. */
static hydra_status parse_strings(parser *p, jnode *n)
{
    const jstr *s = cur(p)->str;
    advance(p);
    while (cur(p)->kind == JT_STRING) {
        s = jstr_cat(p->arena, s, cur(p)->str);
        if (s == NULL)
            return nomem(p);
        advance(p);
    }
    n->constant = jv_str(s);
    return HYDRA_OK;
}

static hydra_status parse_primary(parser *p, jnode **out)
{
    const jtoken *t = cur(p);
    if (is_op(t, OPT_LPAREN)) {
        advance(p);
        hydra_status st = parse_tuple(p, true, true, false, out);
        return st != HYDRA_OK ? st : expect_op(p, OPT_RPAREN);
    }
    if (is_op(t, OPT_LBRACKET))
        return parse_list(p, out);
    if (is_op(t, OPT_LBRACE))
        return parse_dict(p, out);
    jnode *n = node_new(p, N_CONST, t);
    if (n == NULL)
        return nomem(p);
    *out = n;
    switch (t->kind) {
    case JT_NAME:
        if (!name_constant(t, &n->constant)) {
            n->kind = N_NAME;
            if ((n->name = token_name(p, t)) == NULL)
                return nomem(p);
        }
        advance(p);
        return HYDRA_OK;
    case JT_STRING:
        return parse_strings(p, n);
    case JT_INT:
        n->constant = jv_int(t->i);
        advance(p);
        return HYDRA_OK;
    case JT_FLOAT:
        n->constant = jv_float(t->f);
        advance(p);
        return HYDRA_OK;
    default:
        return unexpected(p, "an expression");
    }
}

static hydra_status parse_unary(parser *p, bool with_filter, jnode **out)
{
    hydra_status st = enter(p);
    if (st != HYDRA_OK)
        return st;
    const jtoken *t = cur(p);
    if (is_op(t, OPT_SUB) || is_op(t, OPT_ADD)) {
        jnode *n = node_new(p, N_UNARY, t);
        if (n == NULL)
            return nomem(p);
        n->binary.op = is_op(t, OPT_SUB) ? OP_NEG : OP_POS;
        advance(p);
        st = parse_unary(p, false, &n->binary.left);
        *out = n;
    } else {
        st = parse_primary(p, out);
    }
    if (st == HYDRA_OK)
        st = parse_postfix(p, out);
    if (st == HYDRA_OK && with_filter)
        st = parse_filter_expr(p, out);
    p->depth--;
    return st;
}

typedef hydra_status (*operand_fn)(parser *p, jnode **out);

/* An operator of one binary level: a token, or a keyword when word is set. */
typedef struct binop {
    jtok_op token;
    const char *word;
    jop op;
} binop;

/* The one of ops[0, n) at the cursor, NULL if none. */
static const binop *binop_at(const parser *p, const binop *ops, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (ops[k].word ? is_name(cur(p), ops[k].word) : is_op(cur(p), ops[k].token))
            return &ops[k];
    return NULL;
}

/* One left-associative level: operand (op operand)*. */
static hydra_status parse_binary_level(parser *p, operand_fn operand, const binop *ops, size_t n_ops, jnode **out)
{
    hydra_status st = operand(p, out);
    const binop *b;
    while (st == HYDRA_OK && (b = binop_at(p, ops, n_ops)) != NULL) {
        jnode *n = node_new(p, N_BINARY, cur(p));
        if (n == NULL)
            return nomem(p);
        advance(p);
        n->binary.op = b->op;
        n->binary.left = *out;
        st = operand(p, &n->binary.right);
        *out = n;
    }
    return st;
}

static hydra_status parse_unary_filtered(parser *p, jnode **out)
{
    return parse_unary(p, true, out);
}

static hydra_status parse_pow(parser *p, jnode **out)
{
    static const binop ops[] = {{OPT_POW, NULL, OP_POW}};
    return parse_binary_level(p, parse_unary_filtered, ops, 1, out);
}

static hydra_status parse_math2(parser *p, jnode **out)
{
    static const binop ops[] = {
        {OPT_MUL, NULL, OP_MUL}, {OPT_DIV, NULL, OP_DIV}, {OPT_FLOORDIV, NULL, OP_FLOORDIV}, {OPT_MOD, NULL, OP_MOD}};
    return parse_binary_level(p, parse_pow, ops, 4, out);
}

static hydra_status parse_concat(parser *p, jnode **out)
{
    static const binop ops[] = {{OPT_TILDE, NULL, OP_CONCAT}};
    return parse_binary_level(p, parse_math2, ops, 1, out);
}

static hydra_status parse_math1(parser *p, jnode **out)
{
    static const binop ops[] = {{OPT_ADD, NULL, OP_ADD}, {OPT_SUB, NULL, OP_SUB}};
    return parse_binary_level(p, parse_concat, ops, 2, out);
}

/* The comparison operator at the cursor, consuming it; false if none. */
static bool compare_op(parser *p, jop *op)
{
    static const binop ops[] = {
        {OPT_EQ, NULL, OP_EQ}, {OPT_NE, NULL, OP_NE}, {OPT_LT, NULL, OP_LT}, {OPT_LE, NULL, OP_LE},
        {OPT_GT, NULL, OP_GT}, {OPT_GE, NULL, OP_GE}, {.word = "in", .op = OP_IN},
    };
    const binop *b = binop_at(p, ops, sizeof ops / sizeof ops[0]);
    if (b != NULL) {
        *op = b->op;
        advance(p);
        return true;
    }
    if (is_name(cur(p), "not") && is_name(peek(p, 1), "in")) {
        *op = OP_NOTIN;
        advance(p);
        advance(p);
        return true;
    }
    return false;
}

static hydra_status parse_compare(parser *p, jnode **out)
{
    const jtoken *start = cur(p);
    jnode *first;
    hydra_status st = parse_math1(p, &first);
    if (st != HYDRA_OK)
        return st;
    nodevec operands = {0};
    jop *ops = NULL;
    size_t ops_cap = 0;
    jop op;
    while (compare_op(p, &op)) {
        if (operands.len == ops_cap) {
            ops_cap = ops_cap ? ops_cap * 2 : 4;
            jop *grown = jarena_alloc(p->arena, ops_cap * sizeof *grown);
            if (grown == NULL)
                return nomem(p);
            if (operands.len)
                memcpy(grown, ops, operands.len * sizeof *ops);
            ops = grown;
        }
        ops[operands.len] = op;
        jnode *operand;
        if ((st = parse_math1(p, &operand)) != HYDRA_OK)
            return st;
        if (!vec_push(p, &operands, operand))
            return nomem(p);
    }
    if (operands.len == 0) {
        *out = first;
        return HYDRA_OK;
    }
    jnode *n = node_new(p, N_COMPARE, start);
    if (n == NULL)
        return nomem(p);
    n->compare.first = first;
    n->compare.ops = ops;
    n->compare.operands = vec_done(operands);
    *out = n;
    return HYDRA_OK;
}

static hydra_status parse_not(parser *p, jnode **out)
{
    if (!is_name(cur(p), "not"))
        return parse_compare(p, out);
    hydra_status st = enter(p);
    if (st != HYDRA_OK)
        return st;
    jnode *n = node_new(p, N_UNARY, cur(p));
    if (n == NULL)
        return nomem(p);
    advance(p);
    n->binary.op = OP_NOT;
    st = parse_not(p, &n->binary.left);
    *out = n;
    p->depth--;
    return st;
}

static hydra_status parse_and(parser *p, jnode **out)
{
    static const binop ops[] = {{.word = "and", .op = OP_AND}};
    return parse_binary_level(p, parse_not, ops, 1, out);
}

static hydra_status parse_or(parser *p, jnode **out)
{
    static const binop ops[] = {{.word = "or", .op = OP_OR}};
    return parse_binary_level(p, parse_and, ops, 1, out);
}

/* "a if b else c"; without else the value is undefined when b is false. */
static hydra_status parse_expression(parser *p, bool with_condexpr, jnode **out)
{
    hydra_status st = enter(p);
    if (st == HYDRA_OK)
        st = parse_or(p, out);
    while (st == HYDRA_OK && with_condexpr && is_name(cur(p), "if")) {
        jnode *n = node_new(p, N_COND, cur(p));
        if (n == NULL)
            return nomem(p);
        advance(p);
        n->cond.then = *out;
        st = parse_or(p, &n->cond.test);
        if (st == HYDRA_OK && is_name(cur(p), "else")) {
            advance(p);
            st = parse_expression(p, true, &n->cond.otherwise);
        }
        *out = n;
    }
    p->depth--;
    return st;
}

/* ------------------------------------------------------------ statements */

static hydra_status parse_body(parser *p, const char *const *end_names, jnode **out);

static hydra_status end_of_tag(parser *p)
{
    return expect_kind(p, JT_BLOCK_END, "'%}'");
}

/* The closing "{% name %}" that parse_body stopped at. */
static hydra_status expect_end_tag(parser *p, const char *name)
{
    advance(p); /* '{%' */
    if (!is_name(cur(p), name)) {
        char wanted[32];
        snprintf(wanted, sizeof wanted, "'%s'", name);
        return unexpected(p, wanted);
    }
    advance(p);
    return end_of_tag(p);
}

/* Where parse_body stopped at "{% else %}" or the closing "{% end %}" of
 * an if or a for: the else branch, if there is one, into *otherwise, then
 * the closing tag. */
static hydra_status parse_else_and_end(parser *p, const char *end, jnode **otherwise)
{
    if (is_name(peek(p, 1), "else")) {
        const char *const end_only[] = {end, NULL};
        advance(p);
        advance(p);
        hydra_status st = end_of_tag(p);
        if (st == HYDRA_OK)
            st = parse_body(p, end_only, otherwise);
        if (st != HYDRA_OK)
            return st;
    }
    return expect_end_tag(p, end);
}

/* name | name.attr (set only) | name, name, ... */
static hydra_status parse_target(parser *p, bool with_namespace, jtarget *target)
{
    const jtoken *t = cur(p);
    if (t->kind != JT_NAME)
        return unexpected(p, "a variable name");
    if (with_namespace && is_op(peek(p, 1), OPT_DOT) && peek(p, 2)->kind == JT_NAME) {
        target->name = token_name(p, t);
        target->attr = token_name(p, peek(p, 2));
        advance(p);
        advance(p);
        advance(p);
        return target->name && target->attr ? HYDRA_OK : nomem(p);
    }
    if (!is_op(peek(p, 1), OPT_COMMA)) {
        target->name = token_name(p, t);
        advance(p);
        return target->name ? HYDRA_OK : nomem(p);
    }
    size_t cap = 4, n = 0;
    const jstr **names = jarena_alloc(p->arena, cap * sizeof *names);
    for (;;) {
        if (names == NULL)
            return nomem(p);
        if (cur(p)->kind != JT_NAME)
            return unexpected(p, "a variable name");
        if (n == cap) {
            const jstr **grown = jarena_alloc(p->arena, 2 * cap * sizeof *grown);
            if (grown == NULL)
                return nomem(p);
            memcpy(grown, names, n * sizeof *names);
            names = grown;
            cap *= 2;
        }
        if ((names[n++] = token_name(p, cur(p))) == NULL)
            return nomem(p);
        advance(p);
        if (!is_op(cur(p), OPT_COMMA))
            break;
        advance(p);
    }
    target->names = names;
    target->n_names = n;
    return HYDRA_OK;
}

/* if / elif... / else / endif.  Each elif becomes an N_IF in the
 * previous branch's `otherwise`, built in a loop so a long elif chain
 * costs no recursion. */
static hydra_status parse_if(parser *p, const jtoken *at, jnode **out)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode **slot = out;
    for (;;) {
        jnode *n = node_new(p, N_IF, at);
        if (n == NULL)
            return nomem(p);
        *slot = n;
        hydra_status st = parse_tuple(p, false, false, false, &n->cond.test);
        if (st == HYDRA_OK)
            st = end_of_tag(p);
        if (st == HYDRA_OK)
            st = parse_body(p, ends, &n->cond.then);
        if (st != HYDRA_OK)
            return st;
        const jtoken *tag = peek(p, 1);
        if (is_name(tag, "elif")) {
            advance(p);
            advance(p);
            at = tag;
            slot = &n->cond.otherwise;
            continue;
        }
        return parse_else_and_end(p, "endif", &n->cond.otherwise);
    }
}

static hydra_status parse_for(parser *p, const jtoken *at, jnode **out)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    jnode *n = node_new(p, N_FOR, at);
    if (n == NULL)
        return nomem(p);
    *out = n;
    hydra_status st = parse_target(p, false, &n->loop.target);
    if (st != HYDRA_OK)
        return st;
    if (!is_name(cur(p), "in"))
        return unexpected(p, "'in'");
    advance(p);
    if ((st = parse_tuple(p, false, false, true, &n->loop.iter)) != HYDRA_OK)
        return st;
    if (is_name(cur(p), "if")) {
        advance(p);
        if ((st = parse_expression(p, true, &n->loop.filter)) != HYDRA_OK)
            return st;
    }
    if (is_name(cur(p), "recursive"))
        return fail_at(cur(p), HYDRA_ERR_UNSUPPORTED, "recursive for loops are not supported");
    if ((st = end_of_tag(p)) != HYDRA_OK)
        return st;
    p->loops++;
    st = parse_body(p, ends, &n->loop.body);
    p->loops--;
    if (st != HYDRA_OK)
        return st;
    return parse_else_and_end(p, "endfor", &n->loop.otherwise);
}

static hydra_status parse_set(parser *p, const jtoken *at, jnode **out)
{
    static const char *const ends[] = {"endset", NULL};
    jnode *n = node_new(p, N_SET, at);
    if (n == NULL)
        return nomem(p);
    *out = n;
    hydra_status st = parse_target(p, true, &n->set.target);
    if (st != HYDRA_OK)
        return st;
    if (is_op(cur(p), OPT_ASSIGN)) {
        advance(p);
        if ((st = parse_tuple(p, true, false, false, &n->set.value)) != HYDRA_OK)
            return st;
        return end_of_tag(p);
    }
    if (is_op(cur(p), OPT_PIPE))
        return fail_at(cur(p), HYDRA_ERR_UNSUPPORTED, "filters on a {%% set %%} block are not supported");
    if (n->set.target.names || n->set.target.attr)
        return unexpected(p, "'='");
    n->kind = N_SET_BLOCK;
    if ((st = end_of_tag(p)) != HYDRA_OK || (st = parse_body(p, ends, &n->set.value)) != HYDRA_OK)
        return st;
    return expect_end_tag(p, "endset");
}

static hydra_status parse_params(parser *p, jnode *n)
{
    size_t cap = 0;
    hydra_status st = expect_op(p, OPT_LPAREN);
    while (st == HYDRA_OK && !is_op(cur(p), OPT_RPAREN)) {
        if (n->macro.n_params && (st = expect_op(p, OPT_COMMA)) != HYDRA_OK)
            return st;
        if (cur(p)->kind != JT_NAME)
            return unexpected(p, "a parameter name");
        if (n->macro.n_params == cap) {
            cap = cap ? cap * 2 : 4;
            const jstr **params = jarena_alloc(p->arena, cap * sizeof *params);
            jnode **defaults = jarena_alloc(p->arena, cap * sizeof *defaults);
            if (params == NULL || defaults == NULL)
                return nomem(p);
            if (n->macro.n_params) {
                memcpy(params, n->macro.params, n->macro.n_params * sizeof *params);
                memcpy(defaults, n->macro.defaults, n->macro.n_params * sizeof *defaults);
            }
            n->macro.params = params;
            n->macro.defaults = defaults;
        }
        size_t k = n->macro.n_params++;
        if ((n->macro.params[k] = token_name(p, cur(p))) == NULL)
            return nomem(p);
        advance(p);
        if (is_op(cur(p), OPT_ASSIGN)) {
            advance(p);
            st = parse_expression(p, true, &n->macro.defaults[k]);
        } else if (k > 0 && n->macro.defaults[k - 1]) {
            return fail_at(cur(p), HYDRA_ERR_FORMAT, "parameter without a default after one with a default");
        }
    }
    return st == HYDRA_OK ? expect_op(p, OPT_RPAREN) : st;
}

static hydra_status parse_macro(parser *p, const jtoken *at, jnode **out)
{
    static const char *const ends[] = {"endmacro", NULL};
    jnode *n = node_new(p, N_MACRO, at);
    if (n == NULL)
        return nomem(p);
    *out = n;
    if (cur(p)->kind != JT_NAME)
        return unexpected(p, "a macro name");
    if ((n->macro.name = token_name(p, cur(p))) == NULL)
        return nomem(p);
    advance(p);
    hydra_status st = parse_params(p, n);
    if (st == HYDRA_OK)
        st = end_of_tag(p);
    unsigned outer_loops = p->loops;
    p->loops = 0; /* break/continue cannot reach out of a macro */
    if (st == HYDRA_OK)
        st = parse_body(p, ends, &n->macro.body);
    p->loops = outer_loops;
    return st == HYDRA_OK ? expect_end_tag(p, "endmacro") : st;
}

static hydra_status parse_loop_control(parser *p, const jtoken *at, jnode_kind kind, jnode **out)
{
    if (p->loops == 0)
        return fail_at(at, HYDRA_ERR_FORMAT, "'%s' outside of a for loop", kind == N_BREAK ? "break" : "continue");
    if ((*out = node_new(p, kind, at)) == NULL)
        return nomem(p);
    return end_of_tag(p);
}

/* Statements of jinja2 that this subset does not implement. */
static bool unsupported_tag(const jtoken *t)
{
    static const char *const tags[] = {"block", "extends", "include", "import", "from", "call", "filter",
                                       "with", "autoescape", "do", "generation", "trans", NULL};
    for (size_t k = 0; tags[k]; k++)
        if (is_name(t, tags[k]))
            return true;
    return false;
}

static hydra_status parse_statement(parser *p, jnode **out)
{
    const jtoken *at = cur(p);
    advance(p); /* '{%' */
    const jtoken *t = cur(p);
    if (t->kind != JT_NAME)
        return unexpected(p, "a statement name");
    advance(p);
    if (is_name(t, "if"))
        return parse_if(p, at, out);
    if (is_name(t, "for"))
        return parse_for(p, at, out);
    if (is_name(t, "set"))
        return parse_set(p, at, out);
    if (is_name(t, "macro"))
        return parse_macro(p, at, out);
    if (is_name(t, "break"))
        return parse_loop_control(p, at, N_BREAK, out);
    if (is_name(t, "continue"))
        return parse_loop_control(p, at, N_CONTINUE, out);
    int n = (int)(t->len > 40 ? 40 : t->len);
    if (unsupported_tag(t))
        return fail_at(t, HYDRA_ERR_UNSUPPORTED, "the '%.*s' statement is not supported", n, t->text);
    return fail_at(t, HYDRA_ERR_FORMAT, "unknown tag '%.*s'", n, t->text);
}

static bool is_end_name(const jtoken *t, const char *const *end_names)
{
    for (size_t k = 0; end_names && end_names[k]; k++)
        if (is_name(t, end_names[k]))
            return true;
    return false;
}

static hydra_status eof_in_block(parser *p, const char *const *end_names)
{
    char wanted[96] = "";
    for (size_t k = 0; end_names[k]; k++) {
        size_t used = strlen(wanted);
        snprintf(wanted + used, sizeof wanted - used, "%s'%s'", k ? " or " : "", end_names[k]);
    }
    return fail_at(cur(p), HYDRA_ERR_FORMAT, "unexpected end of template, expected %s", wanted);
}

static hydra_status parse_body_item(parser *p, nodevec *body)
{
    const jtoken *t = cur(p);
    jnode *item = NULL;
    hydra_status st = HYDRA_OK;
    if (t->kind == JT_DATA) {
        if ((item = node_new(p, N_TEXT, t)) == NULL)
            return nomem(p);
        item->text = t->str;
        advance(p);
    } else if (t->kind == JT_VAR_BEGIN) {
        if ((item = node_new(p, N_EMIT, t)) == NULL)
            return nomem(p);
        advance(p);
        st = parse_tuple(p, true, false, false, &item->expr);
        if (st == HYDRA_OK)
            st = expect_kind(p, JT_VAR_END, "'}}'");
    } else if (t->kind == JT_BLOCK_BEGIN) {
        if ((st = enter(p)) == HYDRA_OK)
            st = parse_statement(p, &item);
        p->depth--;
    } else {
        return unexpected(p, "template text or a tag");
    }
    if (st == HYDRA_OK && !vec_push(p, body, item))
        return nomem(p);
    return st;
}

/* Items until "{% <one of end_names> ..." (left unconsumed) or the end. */
static hydra_status parse_body(parser *p, const char *const *end_names, jnode **out)
{
    jnode *n = node_new(p, N_BODY, cur(p));
    if (n == NULL)
        return nomem(p);
    nodevec body = {0};
    for (;;) {
        const jtoken *t = cur(p);
        if (t->kind == JT_EOF) {
            if (end_names)
                return eof_in_block(p, end_names);
            break;
        }
        if (t->kind == JT_BLOCK_BEGIN && is_end_name(peek(p, 1), end_names))
            break;
        hydra_status st = parse_body_item(p, &body);
        if (st != HYDRA_OK)
            return st;
    }
    n->items = vec_done(body);
    *out = n;
    return HYDRA_OK;
}

hydra_status jinja_parse(const char *text, size_t len, const jlimits *limits, jtemplate **out)
{
    *out = NULL;
    jtemplate *tmpl = calloc(1, sizeof *tmpl);
    if (tmpl == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory");
    tmpl->arena.limit = limits->max_memory;
    jtoken *tokens = NULL;
    size_t count = 0;
    jstr *src = jinja_normalize_source(&tmpl->arena, text, len);
    hydra_status st = src ? jinja_lex(&tmpl->arena, src->bytes, src->len, &tokens, &count)
                          : hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory reading %zu bytes", len);
    if (st == HYDRA_OK) {
        parser p = {.arena = &tmpl->arena, .tokens = tokens, .count = count, .max_depth = limits->max_depth};
        st = parse_body(&p, NULL, &tmpl->root);
    }
    free(tokens);
    if (st != HYDRA_OK) {
        jinja_template_free(tmpl);
        return st;
    }
    *out = tmpl;
    return HYDRA_OK;
}

void jinja_template_free(jtemplate *tmpl)
{
    if (tmpl == NULL)
        return;
    jarena_free(&tmpl->arena);
    free(tmpl);
}
