/*
 * jinja_value.c — the arena, values and their Python semantics: truth,
 * equality, str() and repr(), float formatting, UTF-8 helpers, and the
 * growable output buffer.
 */
#include "jinja_internal.h"

#include <math.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- arena */

struct jchunk {
    jchunk *next;
    size_t size, used;
    alignas(16) unsigned char data[];
};

enum { ARENA_CHUNK = 64 * 1024 };

static jchunk *chunk_new(size_t size)
{
    jchunk *chunk = calloc(1, sizeof *chunk + size);
    if (chunk)
        chunk->size = size;
    return chunk;
}

void *jarena_alloc(jarena *arena, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    if (arena->limit && (size > arena->limit || arena->used > arena->limit - size))
        return NULL;
    jchunk *head = arena->chunks;
    if (head == NULL || head->size - head->used < size) {
        /* A big block gets a chunk of its own behind the head, so the
         * head's free space stays usable for the small ones that follow. */
        bool big = size > ARENA_CHUNK / 4;
        jchunk *chunk = chunk_new(big ? size : ARENA_CHUNK);
        if (chunk == NULL)
            return NULL;
        if (big && head) {
            chunk->next = head->next;
            head->next = chunk;
        } else {
            chunk->next = head;
            arena->chunks = chunk;
        }
        head = chunk;
    }
    void *p = head->data + head->used;
    head->used += size;
    arena->used += size;
    return p;
}

void jarena_free(jarena *arena)
{
    jchunk *chunk = arena->chunks;
    while (chunk) {
        jchunk *next = chunk->next;
        free(chunk);
        chunk = next;
    }
    arena->chunks = NULL;
    arena->used = 0;
}

jlimits jlimits_default(void)
{
    return (jlimits){
        .max_output = 16u << 20,
        .max_memory = 256u << 20,
        .max_steps = 10u * 1000 * 1000,
        .max_depth = 200,
    };
}

/* --------------------------------------------------------------- strings */

jstr *jstr_alloc(jarena *arena, size_t len)
{
    if (len > SIZE_MAX / 2)
        return NULL;
    jstr *s = jarena_alloc(arena, sizeof *s + len + 1);
    if (s)
        s->len = len; /* the arena zeroes, so the text is NUL-terminated */
    return s;
}

jstr *jstr_new(jarena *arena, const char *bytes, size_t len)
{
    jstr *s = jstr_alloc(arena, len);
    if (s && len)
        memcpy(s->bytes, bytes, len);
    return s;
}

jstr *jstr_cat(jarena *arena, const jstr *a, const jstr *b)
{
    if (a->len > SIZE_MAX / 4 || b->len > SIZE_MAX / 4)
        return NULL;
    jstr *s = jstr_alloc(arena, a->len + b->len);
    if (s) {
        memcpy(s->bytes, a->bytes, a->len);
        memcpy(s->bytes + a->len, b->bytes, b->len);
    }
    return s;
}

/* ----------------------------------------------------------------- lists */

jlist *jlist_new(jarena *arena, size_t cap)
{
    jlist *list = jarena_alloc(arena, sizeof *list);
    if (list == NULL)
        return NULL;
    if (cap) {
        if (cap > SIZE_MAX / sizeof(jv) / 2)
            return NULL;
        list->items = jarena_alloc(arena, cap * sizeof(jv));
        if (list->items == NULL)
            return NULL;
    }
    list->cap = cap;
    return list;
}

bool jlist_push(jarena *arena, jlist *list, jv value)
{
    if (list->len == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(jv) / 2)
            return false;
        jv *items = jarena_alloc(arena, cap * sizeof(jv));
        if (items == NULL)
            return false;
        if (list->len)
            memcpy(items, list->items, list->len * sizeof(jv));
        list->items = items;
        list->cap = cap;
    }
    list->items[list->len++] = value;
    return true;
}

/* ----------------------------------------------------------------- dicts */

enum { DICT_INDEX_FROM = 8 };

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t hash_bytes(const char *bytes, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)bytes[i]) * 0x100000001b3ull;
    return h;
}

/* Equal keys hash equally: 1, 1.0 and True are one key in Python. */
static uint64_t key_hash(jv key)
{
    switch (key.kind) {
    case JV_STRING:
        return hash_bytes(key.s->bytes, key.s->len);
    case JV_BOOL:
        return mix64((uint64_t)key.b);
    case JV_INT:
        return mix64((uint64_t)key.i);
    case JV_FLOAT:
        if (key.f == floor(key.f) && fabs(key.f) < 9e18)
            return mix64((uint64_t)(int64_t)key.f);
        {
            uint64_t bits;
            memcpy(&bits, &key.f, sizeof bits);
            return mix64(bits);
        }
    default:
        return (uint64_t)key.kind;
    }
}

jdict *jdict_new(jarena *arena)
{
    return jarena_alloc(arena, sizeof(jdict));
}

static bool dict_reindex(jarena *arena, jdict *dict)
{
    size_t cap = 16;
    while (cap < dict->len * 2 + 2)
        cap *= 2;
    uint32_t *index = jarena_alloc(arena, cap * sizeof *index);
    if (index == NULL)
        return false;
    for (size_t e = 0; e < dict->len; e++) {
        size_t slot = key_hash(dict->keys[e]) & (cap - 1);
        while (index[slot])
            slot = (slot + 1) & (cap - 1);
        index[slot] = (uint32_t)(e + 1);
    }
    dict->index = index;
    dict->index_cap = cap;
    return true;
}

static size_t dict_find(const jdict *dict, jv key)
{
    if (dict->index == NULL) {
        for (size_t e = 0; e < dict->len; e++)
            if (jv_equal(dict->keys[e], key))
                return e;
        return SIZE_MAX;
    }
    size_t mask = dict->index_cap - 1;
    for (size_t slot = key_hash(key) & mask; dict->index[slot]; slot = (slot + 1) & mask) {
        size_t e = dict->index[slot] - 1;
        if (jv_equal(dict->keys[e], key))
            return e;
    }
    return SIZE_MAX;
}

jv *jdict_get(const jdict *dict, jv key)
{
    size_t e = dict_find(dict, key);
    return e == SIZE_MAX ? NULL : &dict->values[e];
}

jv *jdict_get_str(const jdict *dict, const char *key, size_t len)
{
    if (dict->index == NULL) {
        for (size_t e = 0; e < dict->len; e++) {
            jv k = dict->keys[e];
            if (k.kind == JV_STRING && k.s->len == len && memcmp(k.s->bytes, key, len) == 0)
                return &dict->values[e];
        }
        return NULL;
    }
    size_t mask = dict->index_cap - 1;
    for (size_t slot = hash_bytes(key, len) & mask; dict->index[slot]; slot = (slot + 1) & mask) {
        size_t e = dict->index[slot] - 1;
        jv k = dict->keys[e];
        if (k.kind == JV_STRING && k.s->len == len && memcmp(k.s->bytes, key, len) == 0)
            return &dict->values[e];
    }
    return NULL;
}

static bool grow_pair_arrays(jarena *arena, jdict *dict)
{
    size_t cap = dict->cap ? dict->cap * 2 : 4;
    if (cap > UINT32_MAX / 2)
        return false;
    jv *keys = jarena_alloc(arena, cap * sizeof(jv));
    jv *values = jarena_alloc(arena, cap * sizeof(jv));
    if (keys == NULL || values == NULL)
        return false;
    if (dict->len) {
        memcpy(keys, dict->keys, dict->len * sizeof(jv));
        memcpy(values, dict->values, dict->len * sizeof(jv));
    }
    dict->keys = keys;
    dict->values = values;
    dict->cap = cap;
    return true;
}

bool jdict_set(jarena *arena, jdict *dict, jv key, jv value)
{
    size_t e = dict_find(dict, key);
    if (e != SIZE_MAX) {
        dict->values[e] = value;
        return true;
    }
    if (dict->len == dict->cap && !grow_pair_arrays(arena, dict))
        return false;
    dict->keys[dict->len] = key;
    dict->values[dict->len] = value;
    dict->len++;
    if (dict->len >= DICT_INDEX_FROM && dict->len * 2 + 2 > dict->index_cap)
        return dict_reindex(arena, dict);
    if (dict->index) {
        size_t mask = dict->index_cap - 1;
        size_t slot = key_hash(key) & mask;
        while (dict->index[slot])
            slot = (slot + 1) & mask;
        dict->index[slot] = (uint32_t)dict->len;
    }
    return true;
}

/* ------------------------------------------------------------ semantics */

bool jv_truthy(jv v)
{
    switch (v.kind) {
    case JV_UNDEFINED:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.b;
    case JV_INT:
        return v.i != 0;
    case JV_FLOAT:
        return v.f != 0.0;
    case JV_STRING:
        return v.s->len != 0;
    case JV_LIST:
        return v.list->len != 0;
    case JV_DICT:
        return v.dict->len != 0;
    default:
        return true;
    }
}

bool jv_is_number(jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

double jv_as_double(jv v)
{
    switch (v.kind) {
    case JV_INT:
        return (double)v.i;
    case JV_FLOAT:
        return v.f;
    case JV_BOOL:
        return v.b;
    default:
        return 0.0;
    }
}

/* Values built by a template can nest without bound ({% set x = [x] %} in
 * a loop); past this depth two distinct containers compare unequal
 * instead of overflowing the stack. */
enum { EQUAL_MAX_DEPTH = 256 };

static bool equal_depth(jv a, jv b, unsigned depth);

static bool lists_equal(const jlist *a, const jlist *b, unsigned depth)
{
    if (a->len != b->len || a->is_tuple != b->is_tuple)
        return false;
    for (size_t i = 0; i < a->len; i++)
        if (!equal_depth(a->items[i], b->items[i], depth + 1))
            return false;
    return true;
}

static bool dicts_equal(const jdict *a, const jdict *b, unsigned depth)
{
    if (a->len != b->len)
        return false;
    for (size_t e = 0; e < a->len; e++) {
        const jv *other = jdict_get(b, a->keys[e]);
        if (other == NULL || !equal_depth(a->values[e], *other, depth + 1))
            return false;
    }
    return true;
}

bool jv_equal(jv a, jv b)
{
    return equal_depth(a, b, 0);
}

static bool equal_depth(jv a, jv b, unsigned depth)
{
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT)
            return (a.kind == JV_BOOL ? a.b : a.i) == (b.kind == JV_BOOL ? b.b : b.i);
        return jv_as_double(a) == jv_as_double(b);
    }
    if (a.kind != b.kind)
        return false;
    switch (a.kind) {
    case JV_UNDEFINED:
    case JV_NONE:
        return true;
    case JV_STRING:
        return a.s->len == b.s->len && memcmp(a.s->bytes, b.s->bytes, a.s->len) == 0;
    case JV_LIST:
        return a.list == b.list || (depth < EQUAL_MAX_DEPTH && lists_equal(a.list, b.list, depth));
    case JV_DICT:
        return a.dict == b.dict || (depth < EQUAL_MAX_DEPTH && dicts_equal(a.dict, b.dict, depth));
    case JV_NAMESPACE:
        return a.dict == b.dict;
    case JV_CALLABLE:
        return a.fn == b.fn;
    case JV_LOOP:
        return a.loop == b.loop;
    default:
        return false;
    }
}

const char *jv_type_name(jv v)
{
    static const char *const names[] = {
        [JV_UNDEFINED] = "Undefined", [JV_NONE] = "NoneType", [JV_BOOL] = "bool",
        [JV_INT] = "int",             [JV_FLOAT] = "float",   [JV_STRING] = "str",
        [JV_LIST] = "list",           [JV_DICT] = "dict",     [JV_NAMESPACE] = "Namespace",
        [JV_CALLABLE] = "function",   [JV_LOOP] = "LoopContext",
    };
    if (v.kind == JV_LIST && v.list->is_tuple)
        return "tuple";
    return names[v.kind];
}

/* ------------------------------------------------------------------ UTF-8 */

uint32_t utf8_next(const char *s, size_t len, size_t *pos)
{
    const unsigned char *p = (const unsigned char *)s + *pos;
    size_t left = len - *pos;
    unsigned lead = p[0];
    size_t need = lead < 0x80 ? 0 : lead >= 0xf0 && lead < 0xf5 ? 3 : lead >= 0xe0 ? 2 : lead >= 0xc2 ? 1 : SIZE_MAX;
    if (lead >= 0xf5)
        need = SIZE_MAX;
    if (need == 0 || need == SIZE_MAX || need >= left) {
        *pos += 1;
        return lead;
    }
    uint32_t cp = lead & (0x3f >> need);
    for (size_t k = 1; k <= need; k++) {
        if ((p[k] & 0xc0) != 0x80) {
            *pos += 1;
            return lead;
        }
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    *pos += need + 1;
    return cp;
}

size_t utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t utf8_length(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t pos = 0; pos < len; n++)
        utf8_next(s, len, &pos);
    return n;
}

size_t utf8_offset(const char *s, size_t len, size_t index)
{
    size_t pos = 0;
    for (size_t n = 0; n < index && pos < len; n++)
        utf8_next(s, len, &pos);
    return pos;
}

/* Python's str.isspace(): the Unicode White_Space characters plus the
 * ASCII separators 0x1c-0x1f. */
bool py_isspace(uint32_t cp)
{
    if (cp <= 0x20)
        return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* ------------------------------------------------------------ out buffer */

bool jbuf_put(jbuf *buf, const char *bytes, size_t len)
{
    if (buf->limit && (len > buf->limit || buf->len > buf->limit - len))
        return false;
    if (buf->cap - buf->len <= len) {
        size_t cap = buf->cap ? buf->cap : 256;
        while (cap - buf->len <= len) {
            if (cap > SIZE_MAX / 2)
                return false;
            cap *= 2;
        }
        char *data = realloc(buf->data, cap);
        if (data == NULL)
            return false;
        buf->data = data;
        buf->cap = cap;
    }
    if (len)
        memcpy(buf->data + buf->len, bytes, len);
    buf->len += len;
    buf->data[buf->len] = '\0';
    return true;
}

bool jbuf_puts(jbuf *buf, const char *text)
{
    return jbuf_put(buf, text, strlen(text));
}

static bool jbuf_printf(jbuf *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool jbuf_printf(jbuf *buf, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < sizeof tmp && jbuf_put(buf, tmp, (size_t)n);
}

/* ------------------------------------------------------------ str, repr */

/* Python's repr(float): the shortest digits that read back to the same
 * double; positional notation for decimal exponents -4 < decpt <= 16,
 * scientific otherwise (CPython's float_repr_style 'short'). */
void py_float_repr(double f, char out[32])
{
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    char sci[40];
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(sci, sizeof sci, "%.*e", precision - 1, f);
        if (strtod(sci, NULL) == f)
            break;
    }
    /* sci is "-d.ddde+XX": collect the digits and the exponent. */
    const char *p = sci;
    bool negative = *p == '-';
    if (negative)
        p++;
    char digits[24];
    size_t n = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[n++] = *p;
    while (n > 1 && digits[n - 1] == '0')
        n--;
    digits[n] = '\0';
    int exponent = atoi(p + 1);
    int decpt = exponent + 1;
    char *o = out;
    if (negative)
        *o++ = '-';
    if (decpt <= -4 || decpt > 16) {
        *o++ = digits[0];
        if (n > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, n - 1);
            o += n - 1;
        }
        sprintf(o, "e%c%02d", exponent < 0 ? '-' : '+', abs(exponent));
    } else if (decpt <= 0) {
        o += sprintf(o, "0.");
        for (int k = 0; k < -decpt; k++)
            *o++ = '0';
        strcpy(o, digits);
    } else if ((size_t)decpt >= n) {
        memcpy(o, digits, n);
        o += n;
        for (size_t k = n; k < (size_t)decpt; k++)
            *o++ = '0';
        strcpy(o, ".0");
    } else {
        memcpy(o, digits, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        strcpy(o, digits + decpt);
    }
}

static bool write_scalar(jbuf *buf, jv v)
{
    char tmp[32];
    switch (v.kind) {
    case JV_UNDEFINED:
        return true;
    case JV_NONE:
        return jbuf_puts(buf, "None");
    case JV_BOOL:
        return jbuf_puts(buf, v.b ? "True" : "False");
    case JV_INT:
        return jbuf_printf(buf, "%lld", (long long)v.i);
    case JV_FLOAT:
        py_float_repr(v.f, tmp);
        return jbuf_puts(buf, tmp);
    case JV_CALLABLE:
        return jbuf_puts(buf, "<function>");
    case JV_LOOP:
        return jbuf_printf(buf, "<LoopContext %zu/%zu>", v.loop->index0 + 1, v.loop->items->len);
    default:
        return false;
    }
}

/* Characters Python's repr() escapes beyond ASCII controls: the C1
 * controls and the invisible separators and format characters that appear
 * in text.  (Python consults the full Unicode tables; these are the ones a
 * chat message plausibly holds.) */
static bool repr_escapes(uint32_t cp)
{
    return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0xa0) || cp == 0xad || (cp >= 0x2000 && cp <= 0x200f) ||
           (cp >= 0x2028 && cp <= 0x202f) || (cp >= 0x205f && cp <= 0x2064) || cp == 0x3000 || cp == 0xfeff ||
           (cp >= 0xd800 && cp <= 0xdfff);
}

static bool write_str_repr(jbuf *buf, const jstr *s)
{
    bool has_single = memchr(s->bytes, '\'', s->len) != NULL;
    bool has_double = memchr(s->bytes, '"', s->len) != NULL;
    char quote = has_single && !has_double ? '"' : '\'';
    if (!jbuf_put(buf, &quote, 1))
        return false;
    for (size_t pos = 0; pos < s->len;) {
        size_t start = pos;
        uint32_t cp = utf8_next(s->bytes, s->len, &pos);
        bool ok;
        if (cp == (uint32_t)quote || cp == '\\') {
            char esc[2] = {'\\', (char)cp};
            ok = jbuf_put(buf, esc, 2);
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            ok = jbuf_puts(buf, cp == '\n' ? "\\n" : cp == '\r' ? "\\r" : "\\t");
        } else if (repr_escapes(cp)) {
            ok = cp < 0x100 ? jbuf_printf(buf, "\\x%02x", cp) : jbuf_printf(buf, "\\u%04x", cp);
        } else {
            ok = jbuf_put(buf, s->bytes + start, pos - start);
        }
        if (!ok)
            return false;
    }
    return jbuf_put(buf, &quote, 1);
}

static bool write_repr_depth(jbuf *buf, jv v, unsigned depth);

static bool write_dict_repr(jbuf *buf, const jdict *dict, unsigned depth)
{
    if (!jbuf_puts(buf, "{"))
        return false;
    for (size_t e = 0; e < dict->len; e++) {
        if ((e && !jbuf_puts(buf, ", ")) || !write_repr_depth(buf, dict->keys[e], depth + 1) ||
            !jbuf_puts(buf, ": ") || !write_repr_depth(buf, dict->values[e], depth + 1))
            return false;
    }
    return jbuf_puts(buf, "}");
}

static bool write_repr_depth(jbuf *buf, jv v, unsigned depth)
{
    /* Only a namespace can hold itself; Python prints such a cycle as "...". */
    if (depth > 100)
        return jbuf_puts(buf, "...");
    switch (v.kind) {
    case JV_STRING:
        return write_str_repr(buf, v.s);
    case JV_LIST: {
        const jlist *list = v.list;
        if (!jbuf_puts(buf, list->is_tuple ? "(" : "["))
            return false;
        for (size_t i = 0; i < list->len; i++)
            if ((i && !jbuf_puts(buf, ", ")) || !write_repr_depth(buf, list->items[i], depth + 1))
                return false;
        if (list->is_tuple && list->len == 1 && !jbuf_puts(buf, ","))
            return false;
        return jbuf_puts(buf, list->is_tuple ? ")" : "]");
    }
    case JV_DICT:
        return write_dict_repr(buf, v.dict, depth);
    case JV_NAMESPACE:
        return jbuf_puts(buf, "<Namespace ") && write_dict_repr(buf, v.dict, depth) && jbuf_puts(buf, ">");
    case JV_UNDEFINED:
        return jbuf_puts(buf, "Undefined");
    default:
        return write_scalar(buf, v);
    }
}

bool jv_write_str(jbuf *buf, jv v)
{
    switch (v.kind) {
    case JV_STRING:
        return jbuf_put(buf, v.s->bytes, v.s->len);
    case JV_LIST:
    case JV_DICT:
    case JV_NAMESPACE:
        return write_repr_depth(buf, v, 0);
    default:
        return write_scalar(buf, v);
    }
}
