/*
 * jinja_internal.h — what the lexer, parser, evaluator and built-ins share:
 * tokens, the AST, the render context and the built-in function tables.
 * Everything here is private to the jinja_*.c files.
 */
#ifndef HYDRA_JINJA_INTERNAL_H
#define HYDRA_JINJA_INTERNAL_H

#include "jinja.h"

/* ---------------------------------------------------------------- tokens */

typedef enum jtok_kind {
    JT_EOF,
    JT_DATA, /* template text between tags, whitespace control applied */
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING, /* escapes already decoded */
    JT_INT,
    JT_FLOAT,
    JT_OP,
} jtok_kind;

/* Operators, longest spelling first within each prefix (the lexer's table). */
typedef enum jtok_op {
    OPT_FLOORDIV, OPT_POW, OPT_EQ, OPT_NE, OPT_GE, OPT_LE,
    OPT_ADD, OPT_SUB, OPT_DIV, OPT_MUL, OPT_MOD, OPT_TILDE,
    OPT_LBRACKET, OPT_RBRACKET, OPT_LPAREN, OPT_RPAREN, OPT_LBRACE, OPT_RBRACE,
    OPT_GT, OPT_LT, OPT_ASSIGN, OPT_DOT, OPT_COLON, OPT_PIPE, OPT_COMMA, OPT_SEMICOLON,
    OPT_COUNT
} jtok_op;

typedef struct jtoken {
    jtok_kind kind;
    uint32_t line, col;
    const char *text; /* JT_NAME: the name (not NUL-terminated) */
    size_t len;
    jtok_op op;
    int64_t i;
    double f;
    const jstr *str; /* JT_DATA, JT_STRING */
} jtoken;

/* Tokenizes normalized source (see jinja_lex.c); tokens is malloc'd and
 * ends with JT_EOF, strings live in the arena. */
hydra_status jinja_lex(jarena *arena, const char *src, size_t len, jtoken **tokens, size_t *count);

/* Newlines normalized to \n and one trailing newline dropped, as jinja2's
 * lexer does (keep_trailing_newline=False).  NULL when out of memory. */
jstr *jinja_normalize_source(jarena *arena, const char *text, size_t len);

/* The spelling of an operator, for messages. */
const char *jtok_op_text(jtok_op op);

/* ------------------------------------------------------------------- AST */

typedef enum jop {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_AND, OP_OR, OP_NOT, OP_NEG, OP_POS,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} jop;

typedef enum jnode_kind {
    /* expressions */
    N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_UNARY, N_BINARY, N_COMPARE, N_COND, N_LIST, N_TUPLE, N_DICT,
    /* statements */
    N_BODY, N_TEXT, N_EMIT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_BREAK, N_CONTINUE,
} jnode_kind;

typedef struct jnode jnode;
typedef struct jbuiltin jbuiltin;

typedef struct jnodes {
    jnode **items;
    size_t len;
} jnodes;

/* Call arguments: positional, then name=value pairs. */
typedef struct jargs {
    jnodes positional;
    const jstr **kw_names;
    jnodes kw_values;
} jargs;

/* What `set` and `for` assign to: a name, ns.attr, or a tuple of names. */
typedef struct jtarget {
    const jstr *name;   /* single name, or the namespace of ns.attr */
    const jstr *attr;   /* set ns.attr = ... */
    const jstr **names; /* a, b = ... (names != NULL) */
    size_t n_names;
} jtarget;

struct jnode {
    jnode_kind kind;
    uint32_t line, col;
    union {
        jv constant;                                              /* N_CONST */
        const jstr *name;                                         /* N_NAME */
        const jstr *text;                                         /* N_TEXT */
        jnode *expr;                                              /* N_EMIT */
        struct { jnode *object; const jstr *attr; } getattr;      /* N_GETATTR */
        struct { jnode *object, *key; } getitem;                  /* N_GETITEM */
        struct { jnode *object, *start, *stop, *step; } slice;    /* N_SLICE */
        struct { jnode *callee; jargs args; } call;               /* N_CALL */
        struct {                                                  /* N_FILTER, N_TEST */
            jnode *operand;
            const jbuiltin *builtin;
            jargs args;
            bool negated;
        } apply;
        struct { jop op; jnode *left, *right; } binary;           /* N_UNARY (left), N_BINARY */
        struct { jnode *first; jop *ops; jnodes operands; } compare; /* N_COMPARE */
        struct { jnode *test, *then, *otherwise; } cond;          /* N_COND, N_IF */
        jnodes items;                                             /* N_LIST, N_TUPLE, N_BODY */
        struct { jnodes keys, values; } dict;                     /* N_DICT */
        struct {                                                  /* N_FOR */
            jtarget target;
            jnode *iter, *filter, *body, *otherwise;
        } loop;
        struct { jtarget target; jnode *value; } set;            /* N_SET, N_SET_BLOCK (value = body) */
        struct {                                                  /* N_MACRO */
            const jstr *name;
            const jstr **params;
            jnode **defaults; /* NULL entries: no default */
            size_t n_params;
            jnode *body;
        } macro;
    };
};

struct jtemplate {
    jarena arena; /* the AST and its strings */
    jnode *root;  /* N_BODY */
};

/* ----------------------------------------------------------- render state */

typedef struct jscope jscope;

struct jcallable {
    const jbuiltin *builtin; /* global function or method ... */
    jv self;                 /* ... bound to this receiver (methods) */
    const jnode *macro;      /* or a macro ... */
    jscope *closure;         /* ... and the scope it was defined in */
};

struct jloop {
    const jlist *items;
    size_t index0;
    unsigned depth; /* loop.depth: 1 (recursive loops are not supported) */
};

typedef enum jflow { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE } jflow;

typedef struct jctx {
    jarena *arena;
    jlimits limits;
    jscope *scope;   /* innermost scope; the outermost holds the render arguments */
    jbuf *out;       /* where output goes (a macro call captures its own) */
    const jnode *at; /* node under evaluation, for messages */
    uint64_t steps;
    unsigned depth;  /* recursion of eval/exec */
    jflow flow;
    bool time_fixed;
    int64_t now;
} jctx;

/* Fails with "chat template line L, column C: <message>" at ctx->at. */
hydra_status jctx_fail(jctx *ctx, hydra_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
hydra_status jctx_nomem(jctx *ctx);
/* Counts work against limits.max_steps. */
hydra_status jctx_step(jctx *ctx, uint64_t n);

/* Arena helpers that fail with the limit message. */
hydra_status jctx_str(jctx *ctx, const char *bytes, size_t len, jv *out);
hydra_status jctx_buf_str(jctx *ctx, jbuf *buf, jv *out); /* takes buf's text, frees buf */
hydra_status jctx_list(jctx *ctx, size_t cap, jlist **out);
hydra_status jctx_push(jctx *ctx, jlist *list, jv value);

/* Operations the built-ins share with the evaluator. */
hydra_status jeval_getattr(jctx *ctx, jv object, const char *name, size_t len, jv *out);
hydra_status jeval_getitem(jctx *ctx, jv object, jv key, jv *out);
hydra_status jeval_compare(jctx *ctx, jop op, jv a, jv b, bool *out);
/* + - * / // % ** with Python's semantics. */
hydra_status jeval_arith(jctx *ctx, jop op, jv a, jv b, jv *out);
/* Iterating a value as a for loop does: list items, dict keys, string
 * characters; undefined is empty.  *out may be the value's own list. */
hydra_status jeval_iterate(jctx *ctx, jv value, jlist **out);
hydra_status jeval_to_str(jctx *ctx, jv value, jv *out);

/* String and dict helpers the filters share with the methods. */
hydra_status jstr_strip(jctx *ctx, jv value, jv chars, bool left, bool right, jv *out);
hydra_status jstr_replace(jctx *ctx, const jstr *s, const jstr *old, const jstr *new, int64_t count, jv *out);
hydra_status jstr_case(jctx *ctx, const jstr *s, char mode, jv *out); /* 'u' 'l' 'c' 't' */
hydra_status jdict_items(jctx *ctx, const jdict *dict, jv *out);       /* list of (key, value) */

/* -------------------------------------------------------------- built-ins */

/* args: one slot per declared parameter (JV_UNDEFINED with a NULL name when
 * not given), then the extra positional values as a list (varargs) and the
 * extra keywords as a dict (varkw). */
typedef hydra_status (*jbuiltin_fn)(jctx *ctx, jv self, const jv *args, jv *out);

#define JBUILTIN_MAX_PARAMS 6

struct jbuiltin {
    const char *name;
    jbuiltin_fn fn;
    unsigned required;                        /* leading parameters that must be given */
    const char *params[JBUILTIN_MAX_PARAMS]; /* names, NULL-terminated */
    bool varargs, varkw;
};

static inline bool jarg_given(jv v) { return !(v.kind == JV_UNDEFINED && v.undefined_name == NULL); }

/* The entry of a table (ended by a NULL name) named name[0, len), or NULL. */
const jbuiltin *jbuiltin_find(const jbuiltin *table, const char *name, size_t len);
const jbuiltin *jfilter_find(const char *name, size_t len);
const jbuiltin *jtest_find(const char *name, size_t len);
const jbuiltin *jglobal_find(const char *name, size_t len);
/* Methods of a value: str, dict or list methods by kind; loop.cycle. */
const jbuiltin *jmethod_find(jkind kind, const char *name, size_t len);
/* Methods the sandbox refuses (list.append, dict.update...): reading one
 * gives undefined, as jinja2's ImmutableSandboxedEnvironment does. */
bool jmethod_is_unsafe(jkind kind, const char *name, size_t len);

/* Binds positional and keyword values to a built-in's parameters and calls it. */
hydra_status jbuiltin_call(jctx *ctx, const jbuiltin *builtin, jv self, const jv *args, size_t n_args,
                           const jstr **kw_names, const jv *kw_values, size_t n_kw, jv *out);

#endif
