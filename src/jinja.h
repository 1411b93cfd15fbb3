/*
 * jinja.h — a Jinja2 subset interpreter for chat templates.
 *
 * It renders the templates that ship in tokenizer_config.json / GGUF
 * `tokenizer.chat_template` the way Hugging Face transformers renders them:
 * jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
 * the loopcontrols extension, plus the globals raise_exception and
 * strftime_now and transformers' own tojson (json.dumps, non-ASCII kept).
 *
 * Pipeline: jinja_lex.c (text -> tokens, whitespace control), jinja_parse.c
 * (tokens -> AST), jinja_eval.c (AST -> output), jinja_value.c (values,
 * Python semantics of ==, <, str(), repr()), jinja_json.c (JSON in and out),
 * jinja_builtins.c (filters, tests), jinja_methods.c (str/dict/list methods,
 * globals).
 *
 * Memory: every value of a render lives in one arena freed at the end, so
 * the evaluator has no reference counts and cannot leak; the arena has a
 * byte limit, which is how hostile templates that build huge strings stop.
 */
#ifndef HYDRA_JINJA_H
#define HYDRA_JINJA_H

#include "hydra.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ----------------------------------------------------------------- arena */

typedef struct jchunk jchunk;

typedef struct jarena {
    jchunk *chunks;
    size_t used;  /* bytes handed out so far */
    size_t limit; /* jarena_alloc fails beyond this; 0 = no limit */
} jarena;

/* Zeroed memory, 16-byte aligned; NULL when the limit is reached or malloc
 * fails.  Freed only with the whole arena. */
void *jarena_alloc(jarena *arena, size_t size);
void jarena_free(jarena *arena);

/* ---------------------------------------------------------------- values */

typedef enum jkind {
    JV_UNDEFINED,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STRING,
    JV_LIST,      /* list or tuple (jlist.is_tuple) */
    JV_DICT,
    JV_NAMESPACE, /* namespace(): a dict whose attributes `set` may assign */
    JV_CALLABLE,  /* macro, global function or bound method */
    JV_LOOP,      /* the `loop` variable of a for loop */
} jkind;

/* Strings are immutable UTF-8, NUL-terminated (len excludes the NUL). */
typedef struct jstr {
    size_t len;
    char bytes[];
} jstr;

typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jcallable jcallable;
typedef struct jloop jloop;

struct jv {
    jkind kind;
    union {
        bool b;
        int64_t i;
        double f;
        const jstr *s;
        jlist *list;
        jdict *dict;
        jcallable *fn;
        jloop *loop;
        const char *undefined_name; /* JV_UNDEFINED: what was looked up, or NULL */
    };
};

struct jlist {
    size_t len, cap;
    jv *items;
    bool is_tuple; /* only changes repr(): (1, 2) */
};

/* Insertion-ordered like Python's dict; hashed once it grows past a few keys. */
struct jdict {
    size_t len, cap;
    jv *keys;
    jv *values;
    uint32_t *index; /* open addressing: entry+1, 0 = empty; NULL while small */
    size_t index_cap;
};

static inline jv jv_undefined(const char *name) { return (jv){.kind = JV_UNDEFINED, .undefined_name = name}; }
static inline jv jv_none(void) { return (jv){.kind = JV_NONE}; }
static inline jv jv_bool(bool b) { return (jv){.kind = JV_BOOL, .b = b}; }
static inline jv jv_int(int64_t i) { return (jv){.kind = JV_INT, .i = i}; }
static inline jv jv_float(double f) { return (jv){.kind = JV_FLOAT, .f = f}; }
static inline jv jv_str(const jstr *s) { return (jv){.kind = JV_STRING, .s = s}; }

/* Constructors: NULL when the arena is exhausted. */
jstr *jstr_alloc(jarena *arena, size_t len); /* len zero bytes, to fill in */
jstr *jstr_new(jarena *arena, const char *bytes, size_t len);
jstr *jstr_cat(jarena *arena, const jstr *a, const jstr *b);
jlist *jlist_new(jarena *arena, size_t cap);
bool jlist_push(jarena *arena, jlist *list, jv value);
jdict *jdict_new(jarena *arena);
/* Sets key to value (replacing an equal key, as Python does). */
bool jdict_set(jarena *arena, jdict *dict, jv key, jv value);
/* The value of key, or NULL. */
jv *jdict_get(const jdict *dict, jv key);
jv *jdict_get_str(const jdict *dict, const char *key, size_t len);

/* Python semantics. */
bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
bool jv_is_number(jv v); /* int, float or bool, as Python's numbers.Number */
double jv_as_double(jv v);
/* Python's type name ("int", "str", "NoneType", "Undefined"), for messages. */
const char *jv_type_name(jv v);

/* UTF-8: number of code points (an invalid byte counts as one). */
size_t utf8_length(const char *s, size_t len);
/* Byte offset of code point number `index` (clamped to len). */
size_t utf8_offset(const char *s, size_t len, size_t index);
/* Decodes one code point at s[*pos], advancing *pos; invalid bytes decode
 * to themselves (0x80..0xff) one at a time. */
uint32_t utf8_next(const char *s, size_t len, size_t *pos);
/* Writes cp as UTF-8 into out (4 bytes room); returns the byte count. */
size_t utf8_put(uint32_t cp, char *out);
/* Python's str.isspace() for one code point. */
bool py_isspace(uint32_t cp);

/* -------------------------------------------------------- output buffers */

typedef struct jbuf {
    char *data; /* malloc'd, NUL-terminated once anything was written */
    size_t len, cap;
    size_t limit; /* appending beyond it fails; 0 = no limit */
} jbuf;

bool jbuf_put(jbuf *buf, const char *bytes, size_t len);
bool jbuf_puts(jbuf *buf, const char *text);

/* str(v) appended to buf (repr() for containers, as Python); false when
 * buf hits its limit. */
bool jv_write_str(jbuf *buf, jv v);
/* Python's float repr: shortest round trip, "1.0", "1e+16", "inf", "nan". */
void py_float_repr(double f, char out[32]);

/* ------------------------------------------------------------------ JSON */

typedef struct jjson_style {
    const char *indent;   /* NULL: one line */
    const char *item_sep; /* ", " (or "," with indent) */
    const char *key_sep;  /* ": " */
    bool ensure_ascii;    /* \uXXXX for non-ASCII */
    bool sort_keys;
} jjson_style;

/* json.dumps(v) appended to buf.  Returns HYDRA_OK, HYDRA_ERR_TYPE (value
 * not serializable; *bad names it) or HYDRA_ERR_NOMEM (limit). */
hydra_status jv_write_json(jbuf *buf, jv v, const jjson_style *style, unsigned max_depth, const char **bad);

/* Parses JSON text into arena values (objects keep their key order).  On
 * failure, leaves a message naming `what` and the byte offset. */
hydra_status jv_parse_json(jarena *arena, const char *text, size_t len, const char *what, jv *out);

/* ---------------------------------------------------------------- limits */

typedef struct jlimits {
    size_t max_output;    /* bytes of rendered text */
    size_t max_memory;    /* bytes of values alive during one render (arena) */
    uint64_t max_steps;   /* loop iterations + macro calls + filter items */
    unsigned max_depth;   /* nesting: template blocks/expressions and calls */
} jlimits;

/* 16 MiB of output, 256 MiB of values, 10 million steps, depth 200. */
jlimits jlimits_default(void);

/* -------------------------------------------------------------- template */

typedef struct jtemplate jtemplate;

/* Parses template text.  Errors (syntax, unknown filter or test, too deep)
 * name the line and column. */
hydra_status jinja_parse(const char *text, size_t len, const jlimits *limits, jtemplate **out);
void jinja_template_free(jtemplate *tmpl);

/* ---------------------------------------------------------------- render */

typedef struct jrender jrender;

hydra_status jrender_new(const jlimits *limits, jrender **out);
void jrender_free(jrender *render);
/* The arena of this render: build the variables' values in it. */
jarena *jrender_arena(jrender *render);
/* Sets a template variable (render argument); the name is copied. */
hydra_status jrender_set(jrender *render, const char *name, jv value);
/* The time strftime_now() formats: unix seconds shown as UTC, or, when
 * not called, the current local time (what transformers does). */
void jrender_set_time(jrender *render, int64_t unix_seconds);

/* Renders; *out is malloc'd text (free()), *len its length. */
hydra_status jinja_render(jrender *render, const jtemplate *tmpl, char **out, size_t *len);

#endif
