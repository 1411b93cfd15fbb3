/*
 * detok.c — ids back to bytes: the piece each token decodes to (computed
 * once per tokenizer), whole-sequence detokenization, and the streaming
 * detokenizer that holds back unfinished UTF-8.
 */
#include "tokenizer.h"

#include "error.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

/* A token that is printed only when asked (control, unknown, unused). */
static bool tok_is_hidden(const hydra_tokenizer *tok, int32_t id)
{
    uint8_t type = tok->tokens[id].type;
    return type == TOKT_CONTROL || type == TOKT_UNKNOWN || type == TOKT_UNUSED;
}

/* "<0xNN>" -> NN, or -1. */
static int byte_token_value(const tok_entry *e)
{
    static const char hex[] = "0123456789ABCDEF";
    if (e->len != 6 || memcmp(e->text, "<0x", 3) != 0 || e->text[5] != '>')
        return -1;
    const char *hi = memchr(hex, e->text[3], 16), *lo = memchr(hex, e->text[4], 16);
    return hi != NULL && lo != NULL ? (int)((hi - hex) * 16 + (lo - hex)) : -1;
}

/* A byte-level BPE token: each code point stands for one byte; one that
 * stands for none (a malformed vocabulary) is kept as it is. */
static size_t decode_bpe(const tok_entry *e, char *out)
{
    size_t n = 0;
    for (uint32_t i = 0; i < e->len;) {
        uint32_t cp;
        size_t k = utf8_decode((const uint8_t *)e->text + i, e->len - i, &cp);
        int byte = bpe_byte_of(cp);
        if (byte >= 0) {
            out[n++] = (char)byte;
        } else {
            memcpy(out + n, e->text + i, k);
            n += k;
        }
        i += (uint32_t)k;
    }
    return n;
}

/* A SentencePiece token: ▁ is a space. */
static size_t decode_spm(const tok_entry *e, char *out)
{
    size_t n = 0;
    for (uint32_t i = 0; i < e->len;) {
        if (e->len - i >= 3 && memcmp(e->text + i, "\xe2\x96\x81", 3) == 0) {
            out[n++] = ' ';
            i += 3;
        } else {
            out[n++] = e->text[i++];
        }
    }
    return n;
}

/* Decoding never makes a token longer than its text. */
static size_t decode_token(const hydra_tokenizer *tok, int32_t id, char *out)
{
    const tok_entry *e = &tok->tokens[id];
    int byte = e->type == TOKT_BYTE ? byte_token_value(e) : -1;
    if (byte >= 0) {
        out[0] = (char)byte;
        return 1;
    }
    if (e->type == TOKT_USER_DEFINED || tok_is_hidden(tok, id)) { /* written as they read */
        memcpy(out, e->text, e->len);
        return e->len;
    }
    return tok->kind == TOK_BPE ? decode_bpe(e, out) : decode_spm(e, out);
}

hydra_status detok_prepare(hydra_tokenizer *tok)
{
    uint64_t total = 0;
    for (size_t i = 0; i < tok->n_vocab; i++)
        total += tok->tokens[i].len;
    if (total > UINT32_MAX)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "tokenizer: %llu bytes of token text", (unsigned long long)total);
    tok->pieces = malloc(total > 0 ? (size_t)total : 1);
    tok->piece_off = malloc((tok->n_vocab + 1) * sizeof *tok->piece_off);
    if (tok->pieces == NULL || tok->piece_off == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "tokenizer: out of memory for the decoded tokens");
    uint32_t at = 0;
    for (size_t i = 0; i < tok->n_vocab; i++) {
        tok->piece_off[i] = at;
        at += (uint32_t)decode_token(tok, (int32_t)i, tok->pieces + at);
    }
    tok->piece_off[tok->n_vocab] = at;
    return HYDRA_OK;
}

/* ---------------------------------------------------------------- pieces */

typedef struct piece {
    const char *bytes;
    size_t len;
    bool hidden;
} piece;

static hydra_status piece_of(const hydra_tokenizer *tok, hydra_token token, bool special, piece *out)
{
    if (token < 0 || (size_t)token >= tok->n_vocab)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "token %d is outside the vocabulary of %zu tokens", (int)token,
                          tok->n_vocab);
    out->hidden = tok_is_hidden(tok, token);
    out->bytes = tok->pieces + tok->piece_off[token];
    out->len = out->hidden && !special ? 0 : tok->piece_off[token + 1] - tok->piece_off[token];
    return HYDRA_OK;
}

/* The leading space SentencePiece put before the text comes off the first
 * token that is text. */
static void strip_space(piece *p, bool *strip)
{
    if (!*strip || p->hidden)
        return;
    if (p->len > 0 && p->bytes[0] == ' ') {
        p->bytes++;
        p->len--;
    }
    *strip = false;
}

static bool strips_leading_space(const hydra_tokenizer *tok)
{
    return tok->kind == TOK_SPM && tok->add_space_prefix;
}

HYDRA_API hydra_status hydra_token_to_piece(const hydra_model *model, hydra_token token, bool special, char *buf,
                                            size_t capacity, size_t *len)
{
    const hydra_tokenizer *tok;
    piece p;
    hydra_status st = tokenizer_get(model, &tok);
    if (st != HYDRA_OK || (st = piece_of(tok, token, special, &p)) != HYDRA_OK)
        return st;
    if (len == NULL || (buf == NULL && capacity > 0))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_token_to_piece: NULL buf or len");
    *len = p.len;
    if (p.len > capacity)
        return hydra_fail(HYDRA_ERR_RANGE, "hydra_token_to_piece: token %d is %zu bytes, buf holds %zu",
                          (int)token, p.len, capacity);
    if (p.len > 0)
        memcpy(buf, p.bytes, p.len);
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_detokenize(const hydra_model *model, const hydra_token *tokens, size_t n, bool special,
                                        char *buf, size_t capacity, size_t *len)
{
    const hydra_tokenizer *tok;
    hydra_status st = tokenizer_get(model, &tok);
    if (st != HYDRA_OK)
        return st;
    if (len == NULL || (tokens == NULL && n > 0) || (buf == NULL && capacity > 0))
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_detokenize: NULL tokens, buf or len");
    bool strip = strips_leading_space(tok);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        piece p;
        if ((st = piece_of(tok, tokens[i], special, &p)) != HYDRA_OK)
            return st;
        strip_space(&p, &strip);
        if (total + p.len <= capacity && p.len > 0)
            memcpy(buf + total, p.bytes, p.len);
        total += p.len;
    }
    *len = total;
    if (total > capacity)
        return hydra_fail(HYDRA_ERR_RANGE, "hydra_detokenize: the text is %zu bytes, buf holds %zu", total, capacity);
    return HYDRA_OK;
}

/* ------------------------------------------------------------- streaming */

struct hydra_detokenizer {
    const hydra_tokenizer *tok;
    bool special;
    bool strip;     /* the first text token still to come loses its leading space */
    char *buf;      /* bytes given out by the last call, then the bytes held */
    size_t given, len, cap;
};

HYDRA_API hydra_status hydra_detokenizer_new(const hydra_model *model, bool special, bool text_start,
                                             hydra_detokenizer **out)
{
    if (out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_detokenizer_new: out is NULL");
    *out = NULL;
    const hydra_tokenizer *tok;
    hydra_status st = tokenizer_get(model, &tok);
    if (st != HYDRA_OK)
        return st;
    hydra_detokenizer *d = calloc(1, sizeof *d);
    if (d == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "hydra_detokenizer_new: out of memory");
    d->tok = tok;
    d->special = special;
    d->strip = text_start && strips_leading_space(tok);
    *out = d;
    return HYDRA_OK;
}

/* Forgets what the last call gave out. */
static void drop_given(hydra_detokenizer *d)
{
    if (d->given == 0)
        return;
    memmove(d->buf, d->buf + d->given, d->len - d->given);
    d->len -= d->given;
    d->given = 0;
}

HYDRA_API hydra_status hydra_detokenizer_push(hydra_detokenizer *d, hydra_token token, const char **text,
                                              size_t *len)
{
    if (d == NULL || text == NULL || len == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_detokenizer_push: NULL argument");
    *text = "";
    *len = 0;
    piece p;
    hydra_status st = piece_of(d->tok, token, d->special, &p);
    if (st != HYDRA_OK)
        return st;
    strip_space(&p, &d->strip);
    drop_given(d);
    if (d->len + p.len > d->cap) {
        size_t cap = 2 * (d->len + p.len) + 16;
        char *buf = realloc(d->buf, cap);
        if (buf == NULL)
            return hydra_fail(HYDRA_ERR_NOMEM, "hydra_detokenizer_push: out of memory");
        d->buf = buf;
        d->cap = cap;
    }
    if (p.len > 0)
        memcpy(d->buf + d->len, p.bytes, p.len);
    d->len += p.len;
    d->given = d->len - utf8_incomplete_tail((const uint8_t *)d->buf, d->len);
    *text = d->given > 0 ? d->buf : "";
    *len = d->given;
    return HYDRA_OK;
}

HYDRA_API void hydra_detokenizer_flush(hydra_detokenizer *d, const char **text, size_t *len)
{
    drop_given(d);
    d->given = d->len;
    *text = d->len > 0 ? d->buf : "";
    *len = d->len;
}

HYDRA_API void hydra_detokenizer_free(hydra_detokenizer *d)
{
    if (d == NULL)
        return;
    free(d->buf);
    free(d);
}
