/*
 * jinja_lex.c — template text to tokens, with jinja2's whitespace control
 * as transformers configures it (trim_blocks=True, lstrip_blocks=True),
 * following jinja2 3.1's lexer (jinja2/lexer.py):
 *   - the source's newlines become \n and one trailing newline is dropped;
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag, "-%}",
 *     "-}}", "-#}" all whitespace after it;
 *   - trim_blocks: a block or comment end "%}" / "#}" eats one newline
 *     ("+%}" keeps it);
 *   - lstrip_blocks: spaces and tabs between the start of a line and a
 *     block or comment tag are removed ("{%+" keeps them);
 *   - "}}" and "%}" end a tag only outside brackets.
 */
#include "error.h"
#include "jinja_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_BRACKETS = 256 };

typedef struct lexer {
    jarena *arena;
    const char *src;
    size_t len, pos;
    jtoken *tokens;
    size_t count, cap;
    /* a cursor for turning byte offsets into line/column */
    size_t cursor_pos;
    uint32_t cursor_line, cursor_col;
    char brackets[MAX_BRACKETS]; /* closers expected inside the current tag */
    size_t n_brackets;
} lexer;

static const char *const op_text[OPT_COUNT] = {
    [OPT_FLOORDIV] = "//", [OPT_POW] = "**",      [OPT_EQ] = "==",       [OPT_NE] = "!=",
    [OPT_GE] = ">=",       [OPT_LE] = "<=",       [OPT_ADD] = "+",       [OPT_SUB] = "-",
    [OPT_DIV] = "/",       [OPT_MUL] = "*",       [OPT_MOD] = "%",       [OPT_TILDE] = "~",
    [OPT_LBRACKET] = "[",  [OPT_RBRACKET] = "]",  [OPT_LPAREN] = "(",    [OPT_RPAREN] = ")",
    [OPT_LBRACE] = "{",    [OPT_RBRACE] = "}",    [OPT_GT] = ">",        [OPT_LT] = "<",
    [OPT_ASSIGN] = "=",    [OPT_DOT] = ".",       [OPT_COLON] = ":",     [OPT_PIPE] = "|",
    [OPT_COMMA] = ",",     [OPT_SEMICOLON] = ";",
};

const char *jtok_op_text(jtok_op op)
{
    return op < OPT_COUNT ? op_text[op] : "?";
}

/* Tokens come in order, so the cursor only moves forward; an error about
 * an earlier place (an unclosed tag) restarts it from the top. */
static void position(lexer *lx, size_t pos, uint32_t *line, uint32_t *col)
{
    if (pos < lx->cursor_pos) {
        lx->cursor_pos = 0;
        lx->cursor_line = 1;
        lx->cursor_col = 1;
    }
    for (; lx->cursor_pos < pos; lx->cursor_pos++) {
        if (lx->src[lx->cursor_pos] == '\n') {
            lx->cursor_line++;
            lx->cursor_col = 1;
        } else {
            lx->cursor_col++;
        }
    }
    *line = lx->cursor_line;
    *col = lx->cursor_col;
}

static hydra_status lex_fail(lexer *lx, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static hydra_status lex_fail(lexer *lx, size_t pos, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t line, col;
    position(lx, pos, &line, &col);
    return hydra_fail(HYDRA_ERR_FORMAT, "chat template line %u, column %u: %s", line, col, msg);
}

static hydra_status lex_nomem(lexer *lx)
{
    return hydra_fail(HYDRA_ERR_NOMEM, "chat template: out of memory while reading the template (limit %zu bytes)",
                      lx->arena->limit);
}

static hydra_status emit(lexer *lx, jtoken token, size_t pos)
{
    if (lx->count == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jtoken *tokens = realloc(lx->tokens, cap * sizeof *tokens);
        if (tokens == NULL)
            return lex_nomem(lx);
        lx->tokens = tokens;
        lx->cap = cap;
    }
    position(lx, pos, &token.line, &token.col);
    lx->tokens[lx->count++] = token;
    return HYDRA_OK;
}

static hydra_status emit_data(lexer *lx, size_t start, size_t end)
{
    if (end == start)
        return HYDRA_OK;
    jstr *s = jstr_new(lx->arena, lx->src + start, end - start);
    if (s == NULL)
        return lex_nomem(lx);
    return emit(lx, (jtoken){.kind = JT_DATA, .str = s}, start);
}

/* ------------------------------------------------------------ whitespace */

static bool ascii_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Start of the Python-whitespace run that ends at `end` (str.rstrip()). */
static size_t rstrip_from(const char *s, size_t start, size_t end)
{
    while (end > start) {
        size_t cp_start = end - 1;
        while (cp_start > start && ((unsigned char)s[cp_start] & 0xc0) == 0x80)
            cp_start--;
        size_t pos = cp_start;
        if (!py_isspace(utf8_next(s, end, &pos)) || pos != end)
            break;
        end = cp_start;
    }
    return end;
}

/* End of the Python-whitespace run that starts at `pos` (regex \s*). */
static size_t skip_py_space(const char *s, size_t len, size_t pos)
{
    while (pos < len) {
        size_t next = pos;
        if (!py_isspace(utf8_next(s, len, &next)))
            break;
        pos = next;
    }
    return pos;
}

/* The end of the text [start, tag) once the tag's whitespace control is
 * applied to it (jinja2's OptionalLStrip handling). */
static size_t strip_before_tag(const lexer *lx, size_t start, size_t tag, char sign, bool lstrip, bool line_starting)
{
    if (sign == '-')
        return rstrip_from(lx->src, start, tag);
    if (sign == '+' || !lstrip)
        return tag;
    size_t line_start = start;
    bool has_newline = false;
    for (size_t k = tag; k > start; k--)
        if (lx->src[k - 1] == '\n') {
            line_start = k;
            has_newline = true;
            break;
        }
    if (!has_newline && !line_starting)
        return tag;
    if (line_start == tag || skip_py_space(lx->src, tag, line_start) != tag)
        return tag;
    return line_start;
}

/* After a tag's closing delimiter at `pos` (just past it): "-" strips all
 * whitespace, "+" nothing, and trim_blocks eats one newline after block and
 * comment tags. */
static size_t skip_after_tag(const lexer *lx, size_t pos, char sign, bool trim)
{
    if (sign == '-')
        return skip_py_space(lx->src, lx->len, pos);
    if (sign != '+' && trim && pos < lx->len && lx->src[pos] == '\n')
        return pos + 1;
    return pos;
}

/* ------------------------------------------------------- literal tokens */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* Digits with single underscores between them; returns the end. */
static size_t scan_digits(const char *s, size_t len, size_t pos)
{
    if (pos >= len || !is_digit(s[pos]))
        return pos;
    pos++;
    while (pos < len && (is_digit(s[pos]) || (s[pos] == '_' && pos + 1 < len && is_digit(s[pos + 1]))))
        pos++;
    return pos;
}

/* jinja2's float_re: digits, then a fraction and/or an exponent. */
static size_t scan_float(const lexer *lx, size_t pos)
{
    const char *s = lx->src;
    size_t len = lx->len;
    if (pos > 0 && s[pos - 1] == '.')
        return 0;
    size_t p = scan_digits(s, len, pos);
    if (p == pos)
        return 0;
    bool fraction = false;
    if (p + 1 < len && s[p] == '.' && is_digit(s[p + 1])) {
        p = scan_digits(s, len, p + 1);
        fraction = true;
    }
    if (p < len && (s[p] == 'e' || s[p] == 'E')) {
        size_t q = p + 1;
        if (q < len && (s[q] == '+' || s[q] == '-'))
            q++;
        size_t e = scan_digits(s, len, q);
        if (e > q)
            return e;
    }
    return fraction ? p : 0;
}

static hydra_status lex_number(lexer *lx, size_t *pos)
{
    char tmp[128];
    size_t start = *pos, end = scan_float(lx, start);
    bool is_float = end != 0;
    int base = 10;
    if (!is_float) {
        end = start + 1;
        char prefix = start + 1 < lx->len ? (char)(lx->src[start + 1] | 0x20) : 0;
        if (lx->src[start] == '0' && (prefix == 'x' || prefix == 'o' || prefix == 'b')) {
            base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : 2;
            end = start + 2;
            start += 2;
            while (end < lx->len && (lx->src[end] == '_' || strchr("0123456789abcdefABCDEF", lx->src[end])))
                end++;
        } else {
            end = scan_digits(lx->src, lx->len, start);
        }
    }
    size_t n = 0;
    for (size_t k = start; k < end && n < sizeof tmp - 1; k++)
        if (lx->src[k] != '_')
            tmp[n++] = lx->src[k];
    tmp[n] = '\0';
    if (end - start >= sizeof tmp || n == 0)
        return lex_fail(lx, start, "number literal too long or empty");
    jtoken token = {.kind = is_float ? JT_FLOAT : JT_INT};
    char *stop;
    errno = 0;
    if (is_float) {
        token.f = strtod(tmp, &stop);
    } else {
        unsigned long long v = strtoull(tmp, &stop, base);
        if (errno == ERANGE || v > INT64_MAX)
            return lex_fail(lx, start, "integer literal %s does not fit in 64 bits", tmp);
        token.i = (int64_t)v;
    }
    if (*stop)
        return lex_fail(lx, start, "invalid number literal '%s'", tmp);
    *pos = end;
    return emit(lx, token, base == 10 ? start : start - 2);
}

static int hex_value(char c)
{
    if (is_digit(c))
        return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* \xhh, \uhhhh, \Uhhhhhhhh: exactly `digits` hex digits. */
static bool read_hex(const char *s, size_t end, size_t *pos, int digits, uint32_t *out)
{
    uint32_t v = 0;
    if (end - *pos < (size_t)digits)
        return false;
    for (int k = 0; k < digits; k++) {
        int h = hex_value(s[*pos + k]);
        if (h < 0)
            return false;
        v = v * 16 + (uint32_t)h;
    }
    *pos += (size_t)digits;
    *out = v;
    return true;
}

/* Python's "unicode-escape" decoding of a string literal's body, which is
 * what jinja2 applies: \n \t \\ \' \" \a \b \f \v \r, octal, \x, \u, \U;
 * an unknown escape stays as written. */
static hydra_status decode_escape(lexer *lx, size_t *pos, size_t end, char *out, size_t *n)
{
    const char *s = lx->src;
    char e = s[*pos];
    const char *simple_from = "ntr\\'\"abfv", *simple_to = "\n\t\r\\'\"\a\b\f\v";
    const char *hit = strchr(simple_from, e);
    if (hit && e) {
        out[(*n)++] = simple_to[hit - simple_from];
        (*pos)++;
        return HYDRA_OK;
    }
    if (e == '\n') { /* line continuation */
        (*pos)++;
        return HYDRA_OK;
    }
    if (e >= '0' && e <= '7') {
        uint32_t v = 0;
        for (int k = 0; k < 3 && *pos < end && s[*pos] >= '0' && s[*pos] <= '7'; k++)
            v = v * 8 + (uint32_t)(s[(*pos)++] - '0');
        *n += utf8_put(v, out + *n);
        return HYDRA_OK;
    }
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits == 0) {
        out[(*n)++] = '\\';
        return HYDRA_OK;
    }
    size_t escape_at = *pos - 1;
    (*pos)++;
    uint32_t cp;
    if (!read_hex(s, end, pos, digits, &cp))
        return lex_fail(lx, escape_at, "truncated \\%c escape in a string literal", e);
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return lex_fail(lx, escape_at, "escape \\%c names no character (surrogate or beyond U+10FFFF)", e);
    *n += utf8_put(cp, out + *n);
    return HYDRA_OK;
}

static hydra_status lex_string(lexer *lx, size_t *pos)
{
    const char *s = lx->src;
    char quote = s[*pos];
    size_t start = *pos + 1, end = start;
    while (end < lx->len && s[end] != quote)
        end += s[end] == '\\' ? 2 : 1;
    if (end >= lx->len)
        return lex_fail(lx, *pos, "unterminated string literal");
    /* Escapes only shrink text; \777 (3 bytes) is at most 2 bytes of UTF-8. */
    char *bytes = jarena_alloc(lx->arena, end - start + 1);
    if (bytes == NULL)
        return lex_nomem(lx);
    size_t n = 0;
    for (size_t p = start; p < end;) {
        if (s[p] != '\\') {
            bytes[n++] = s[p++];
            continue;
        }
        p++;
        hydra_status st = decode_escape(lx, &p, end, bytes, &n);
        if (st != HYDRA_OK)
            return st;
    }
    jstr *str = jstr_new(lx->arena, bytes, n);
    if (str == NULL)
        return lex_nomem(lx);
    size_t at = *pos;
    *pos = end + 1;
    return emit(lx, (jtoken){.kind = JT_STRING, .str = str}, at);
}

static hydra_status lex_operator(lexer *lx, size_t *pos)
{
    const char *s = lx->src + *pos;
    size_t left = lx->len - *pos;
    for (int op = 0; op < OPT_COUNT; op++) {
        size_t n = strlen(op_text[op]);
        if (n > left || memcmp(s, op_text[op], n) != 0)
            continue;
        char c = op_text[op][0];
        if (n == 1 && (c == '(' || c == '[' || c == '{')) {
            if (lx->n_brackets == MAX_BRACKETS)
                return lex_fail(lx, *pos, "brackets nested deeper than %d", MAX_BRACKETS);
            lx->brackets[lx->n_brackets++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (n == 1 && (c == ')' || c == ']' || c == '}')) {
            if (lx->n_brackets == 0)
                return lex_fail(lx, *pos, "unexpected '%c'", c);
            char expected = lx->brackets[--lx->n_brackets];
            if (expected != c)
                return lex_fail(lx, *pos, "unexpected '%c', expected '%c'", c, expected);
        }
        size_t at = *pos;
        *pos += n;
        return emit(lx, (jtoken){.kind = JT_OP, .op = (jtok_op)op}, at);
    }
    return lex_fail(lx, *pos, "unexpected character '%c'", *s);
}

/* ------------------------------------------------------------------ tags */

/* If a tag closes at pos ("%}" / "}}" with an optional sign), returns its
 * length and the sign. */
static size_t tag_close(const lexer *lx, size_t pos, char kind, char *sign)
{
    const char *s = lx->src + pos;
    size_t left = lx->len - pos;
    char close = kind == '{' ? '}' : '%';
    *sign = 0;
    if (left >= 3 && (s[0] == '-' || (s[0] == '+' && kind == '%')) && s[1] == close && s[2] == '}') {
        *sign = s[0];
        return 3;
    }
    if (left >= 2 && s[0] == close && s[1] == '}')
        return 2;
    return 0;
}

/* The inside of a {{ }} or {% %} tag; returns the position after it. */
static hydra_status lex_tag(lexer *lx, char kind, size_t tag_start, size_t *pos)
{
    lx->n_brackets = 0;
    for (;;) {
        if (*pos >= lx->len)
            return lex_fail(lx, tag_start, "unexpected end of template: tag '%s' is never closed",
                            kind == '{' ? "{{" : "{%");
        char sign;
        size_t close = lx->n_brackets ? 0 : tag_close(lx, *pos, kind, &sign);
        if (close) {
            hydra_status st = emit(lx, (jtoken){.kind = kind == '{' ? JT_VAR_END : JT_BLOCK_END}, *pos);
            *pos = skip_after_tag(lx, *pos + close, sign, kind == '%');
            return st;
        }
        char c = lx->src[*pos];
        hydra_status st = HYDRA_OK;
        if (ascii_space(c)) {
            (*pos)++;
        } else if (is_digit(c)) {
            st = lex_number(lx, pos);
        } else if (is_name_start(c)) {
            size_t start = *pos;
            while (*pos < lx->len && (is_name_start(lx->src[*pos]) || is_digit(lx->src[*pos])))
                (*pos)++;
            st = emit(lx, (jtoken){.kind = JT_NAME, .text = lx->src + start, .len = *pos - start}, start);
        } else if (c == '\'' || c == '"') {
            st = lex_string(lx, pos);
        } else {
            st = lex_operator(lx, pos);
        }
        if (st != HYDRA_OK)
            return st;
    }
}

/* "{# ... #}": nothing is emitted; returns the position after it. */
static hydra_status lex_comment(lexer *lx, size_t tag_start, size_t body, size_t *pos)
{
    const char *end = NULL;
    for (size_t k = body; k + 1 < lx->len; k++)
        if (lx->src[k] == '#' && lx->src[k + 1] == '}') {
            end = lx->src + k;
            break;
        }
    if (end == NULL)
        return lex_fail(lx, tag_start, "missing end of comment tag '#}'");
    size_t k = (size_t)(end - lx->src);
    char sign = k > body && (lx->src[k - 1] == '-' || lx->src[k - 1] == '+') ? lx->src[k - 1] : 0;
    *pos = skip_after_tag(lx, k + 2, sign, true);
    return HYDRA_OK;
}

/* "{% raw %}" at tag (any sign): sets *after past it. */
static bool raw_begin(const lexer *lx, size_t tag, size_t *after)
{
    size_t p = tag + 2;
    if (p < lx->len && (lx->src[p] == '-' || lx->src[p] == '+'))
        p++;
    while (p < lx->len && ascii_space(lx->src[p]))
        p++;
    if (lx->len - p < 3 || memcmp(lx->src + p, "raw", 3) != 0)
        return false;
    p += 3;
    while (p < lx->len && ascii_space(lx->src[p]))
        p++;
    if (lx->len - p >= 3 && lx->src[p] == '-' && lx->src[p + 1] == '%' && lx->src[p + 2] == '}') {
        *after = skip_py_space(lx->src, lx->len, p + 3);
        return true;
    }
    if (lx->len - p >= 2 && lx->src[p] == '%' && lx->src[p + 1] == '}') {
        *after = p + 2;
        return true;
    }
    return false;
}

/* The text of a raw block up to "{% endraw %}", emitted as data. */
static hydra_status lex_raw(lexer *lx, size_t tag_start, size_t *pos)
{
    for (size_t k = *pos; k + 1 < lx->len; k++) {
        if (lx->src[k] != '{' || lx->src[k + 1] != '%')
            continue;
        size_t p = k + 2;
        char sign = p < lx->len && (lx->src[p] == '-' || lx->src[p] == '+') ? lx->src[p] : 0;
        p += sign != 0;
        while (p < lx->len && ascii_space(lx->src[p]))
            p++;
        if (lx->len - p < 6 || memcmp(lx->src + p, "endraw", 6) != 0)
            continue;
        p += 6;
        while (p < lx->len && ascii_space(lx->src[p]))
            p++;
        char close_sign;
        size_t close = tag_close(lx, p, '%', &close_sign);
        if (close == 0)
            continue;
        size_t text_end = strip_before_tag(lx, *pos, k, sign, true, false);
        hydra_status st = emit_data(lx, *pos, text_end);
        *pos = skip_after_tag(lx, p + close, close_sign, true);
        return st;
    }
    return lex_fail(lx, tag_start, "missing '{%% endraw %%}'");
}

static size_t find_tag(const lexer *lx, size_t pos)
{
    for (size_t k = pos; k + 1 < lx->len; k++)
        if (lx->src[k] == '{' && (lx->src[k + 1] == '{' || lx->src[k + 1] == '%' || lx->src[k + 1] == '#'))
            return k;
    return lx->len;
}

static hydra_status lex_all(lexer *lx)
{
    bool line_starting = true;
    while (lx->pos < lx->len) {
        size_t tag = find_tag(lx, lx->pos);
        if (tag == lx->len)
            return emit_data(lx, lx->pos, lx->len);
        char kind = lx->src[tag + 1];
        char sign = tag + 2 < lx->len && (lx->src[tag + 2] == '-' || lx->src[tag + 2] == '+') ? lx->src[tag + 2] : 0;
        size_t text_end = strip_before_tag(lx, lx->pos, tag, sign, kind != '{', line_starting);
        hydra_status st = emit_data(lx, lx->pos, text_end);
        size_t body = tag + 2 + (sign != 0);
        size_t raw_after;
        if (st == HYDRA_OK && kind == '%' && raw_begin(lx, tag, &raw_after)) {
            lx->pos = raw_after;
            st = lex_raw(lx, tag, &lx->pos);
        } else if (st == HYDRA_OK && kind == '#') {
            st = lex_comment(lx, tag, body, &lx->pos);
        } else if (st == HYDRA_OK) {
            st = emit(lx, (jtoken){.kind = kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN}, tag);
            lx->pos = body;
            if (st == HYDRA_OK)
                st = lex_tag(lx, kind, tag, &lx->pos);
        }
        if (st != HYDRA_OK)
            return st;
        line_starting = lx->src[lx->pos - 1] == '\n';
    }
    return HYDRA_OK;
}

hydra_status jinja_lex(jarena *arena, const char *src, size_t len, jtoken **tokens, size_t *count)
{
    lexer lx = {.arena = arena, .src = src, .len = len, .cursor_line = 1, .cursor_col = 1};
    hydra_status st = lex_all(&lx);
    if (st == HYDRA_OK)
        st = emit(&lx, (jtoken){.kind = JT_EOF}, len);
    if (st != HYDRA_OK) {
        free(lx.tokens);
        return st;
    }
    *tokens = lx.tokens;
    *count = lx.count;
    return HYDRA_OK;
}

jstr *jinja_normalize_source(jarena *arena, const char *text, size_t len)
{
    jstr *s = jstr_new(arena, text, len);
    if (s == NULL)
        return NULL;
    size_t n = 0;
    for (size_t k = 0; k < len; k++) {
        if (text[k] == '\r') {
            s->bytes[n++] = '\n';
            if (k + 1 < len && text[k + 1] == '\n')
                k++;
        } else {
            s->bytes[n++] = text[k];
        }
    }
    if (n > 0 && s->bytes[n - 1] == '\n')
        n--;
    s->bytes[n] = '\0';
    s->len = n;
    return s;
}
