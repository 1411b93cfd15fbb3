/*
 * tok_spm.c — SentencePiece BPE (tokenizer.ggml.model = llama).  Spaces are
 * written as ▁ (U+2581) and, when add_space_prefix is set, one ▁ goes before
 * the text.  The text starts as one symbol per character; the adjacent pair
 * whose concatenation is a token with the highest score merges first (the
 * leftmost among equal scores), until no pair is a token.  A final symbol
 * that is not a token is spelled with byte-fallback tokens <0xNN>.
 */
#include "tokenizer.h"

#include "error.h"
#include "heap.h"
#include "unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char space_mark[] = "\xe2\x96\x81"; /* ▁ */
enum { SPACE_MARK_LEN = 3 };

hydra_status spm_prepare(hydra_tokenizer *tok)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        tok->byte_token[b] = tok_lookup(tok, name, strlen(name));
    }
    return HYDRA_OK;
}

/* Pieces the SentencePiece model may produce: control, unknown, unused and
 * byte tokens are never the result of a merge. */
static bool usable(const hydra_tokenizer *tok, int32_t id)
{
    uint8_t type = tok->tokens[id].type;
    return type == TOKT_NORMAL || type == TOKT_USER_DEFINED || type == TOKT_UNDEFINED;
}

typedef struct bigram {
    float score;
    int32_t left, right;
    uint32_t len; /* bytes of the two symbols when queued */
} bigram;

typedef struct spm_session {
    const hydra_tokenizer *tok;
    char *text;          /* the escaped text */
    uint32_t *start, *len;
    int32_t *prev, *next;
    heap queue;          /* of bigram */
} spm_session;

/* Higher score first, the leftmost among equal scores. */
static bool bigram_before(const void *a_, const void *b_)
{
    const bigram *a = a_, *b = b_;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static const heap_order by_score = {sizeof(bigram), bigram_before, "tokenize: merge candidates"};

static hydra_status offer_pair(spm_session *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return HYDRA_OK;
    uint32_t len = s->len[left] + s->len[right];
    int32_t id = tok_lookup(s->tok, s->text + s->start[left], len);
    if (id < 0 || !usable(s->tok, id))
        return HYDRA_OK;
    bigram b = {s->tok->tokens[id].score, left, right, len};
    return heap_push(&s->queue, &b, &by_score);
}

static hydra_status merge_all(spm_session *s)
{
    hydra_status st = HYDRA_OK;
    while (s->queue.n > 0 && st == HYDRA_OK) {
        bigram b;
        heap_pop(&s->queue, &b, &by_score);
        if (s->len[b.left] == 0 || s->len[b.right] == 0 || s->len[b.left] + s->len[b.right] != b.len)
            continue; /* one side merged elsewhere since */
        s->len[b.left] += s->len[b.right];
        s->len[b.right] = 0;
        s->next[b.left] = s->next[b.right];
        if (s->next[b.right] >= 0)
            s->prev[s->next[b.right]] = b.left;
        st = offer_pair(s, s->prev[b.left], b.left);
        if (st == HYDRA_OK)
            st = offer_pair(s, b.left, s->next[b.left]);
    }
    return st;
}

static hydra_status emit_symbol(const spm_session *s, int32_t i, tok_ids *out)
{
    const hydra_tokenizer *tok = s->tok;
    const uint8_t *bytes = (const uint8_t *)s->text + s->start[i];
    int32_t id = tok_lookup(tok, (const char *)bytes, s->len[i]);
    if (id >= 0 && usable(tok, id))
        return tok_ids_push(out, id);
    hydra_status st = HYDRA_OK;
    for (uint32_t k = 0; k < s->len[i] && st == HYDRA_OK; k++) {
        int32_t byte_id = tok->byte_token[bytes[k]] >= 0 ? tok->byte_token[bytes[k]] : tok->unk;
        st = byte_id >= 0 ? tok_ids_push(out, byte_id)
                          : hydra_fail(HYDRA_ERR_UNSUPPORTED, "tokenize: byte 0x%02X has no token in the "
                                       "vocabulary and there is no unknown token", bytes[k]);
    }
    return st;
}

/* ▁ for every space, and one before the text when asked. */
static size_t escape(const char *text, size_t len, bool space_prefix, char *out)
{
    size_t n = 0;
    if (space_prefix) {
        memcpy(out, space_mark, SPACE_MARK_LEN);
        n = SPACE_MARK_LEN;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(out + n, space_mark, SPACE_MARK_LEN);
            n += SPACE_MARK_LEN;
        } else {
            out[n++] = text[i];
        }
    }
    return n;
}

static hydra_status encode_escaped(spm_session *s, size_t n, tok_ids *out)
{
    size_t n_sym = 0;
    for (size_t i = 0; i < n; n_sym++) {
        uint32_t cp;
        size_t k = utf8_decode((const uint8_t *)s->text + i, n - i, &cp);
        s->start[n_sym] = (uint32_t)i;
        s->len[n_sym] = (uint32_t)k;
        s->prev[n_sym] = (int32_t)n_sym - 1;
        s->next[n_sym] = i + k < n ? (int32_t)n_sym + 1 : -1;
        i += k;
    }
    hydra_status st = HYDRA_OK;
    for (size_t i = 0; i + 1 < n_sym && st == HYDRA_OK; i++)
        st = offer_pair(s, (int32_t)i, (int32_t)i + 1);
    if (st == HYDRA_OK)
        st = merge_all(s);
    for (int32_t i = 0; i >= 0 && st == HYDRA_OK; i = s->next[i])
        st = emit_symbol(s, i, out);
    return st;
}

hydra_status spm_encode(const hydra_tokenizer *tok, const char *text, size_t len, bool space_prefix, tok_ids *out)
{
    /* Symbol indices are int32 and offsets uint32; the escaped text is at
     * most 3 bytes per byte plus the prefix. */
    if (len > (INT32_MAX - SPACE_MARK_LEN) / SPACE_MARK_LEN)
        return hydra_fail(HYDRA_ERR_RANGE, "tokenize: %zu bytes is too long a text for SentencePiece", len);
    size_t cap = SPACE_MARK_LEN * (len + 1);
    spm_session s = {.tok = tok};
    s.text = malloc(cap);
    s.start = malloc(cap * sizeof *s.start);
    s.len = malloc(cap * sizeof *s.len);
    s.prev = malloc(cap * sizeof *s.prev);
    s.next = malloc(cap * sizeof *s.next);
    hydra_status st;
    if (s.text == NULL || s.start == NULL || s.len == NULL || s.prev == NULL || s.next == NULL)
        st = hydra_fail(HYDRA_ERR_NOMEM, "tokenize: out of memory for %zu bytes of text", len);
    else
        st = encode_escaped(&s, escape(text, len, space_prefix, s.text), out);
    free(s.text);
    free(s.start);
    free(s.len);
    free(s.prev);
    free(s.next);
    heap_free(&s.queue);
    return st;
}
