/*
 * tok_bpe.c — byte-level BPE (tokenizer.ggml.model = gpt2).  Text is split
 * by the pre-tokenizer; each piece starts as one symbol per byte (the
 * vocabulary spells byte b as the code point bytes_to_unicode gives it) and
 * adjacent symbols are merged lowest merge rank first, the leftmost pair
 * first among equal ranks, until no pair has a rank.  Candidate pairs wait
 * in a binary heap and are checked when popped, so a piece of n bytes costs
 * O(n log n), not a rescan per merge.
 */
#include "tokenizer.h"

#include "error.h"
#include "heap.h"
#include "model.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------ bytes_to_unicode */

/* GPT-2 keeps the printable bytes 21..7E, A1..AC, AE..FF as themselves and
 * numbers the other 68 bytes from U+0100 in byte order: 00..20 -> U+0100..,
 * 7F..A0 -> U+0121.., AD -> U+0143. */
uint32_t bpe_code_point_of(uint8_t byte)
{
    if (byte <= 0x20)
        return 0x100u + byte;
    if (byte >= 0x7F && byte <= 0xA0)
        return 0x121u + (byte - 0x7Fu);
    if (byte == 0xAD)
        return 0x143;
    return byte;
}

int bpe_byte_of(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 0x100 && cp <= 0x120)
        return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142)
        return (int)(0x7F + cp - 0x121);
    return cp == 0x143 ? 0xAD : -1;
}

/* Spells bytes the way the vocabulary does; out holds 2 bytes per byte. */
static size_t spell_bytes(const uint8_t *bytes, size_t n, char *out)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += utf8_encode(bpe_code_point_of(bytes[i]), out + len);
    return len;
}

/* -------------------------------------------------------------- merges */

static uint64_t pair_key(int32_t left, int32_t right)
{
    return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

static size_t pair_home(const tok_pairmap *map, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15u) >> 20) & map->mask;
}

static size_t pair_slot(const tok_pairmap *map, uint64_t key)
{
    size_t i = pair_home(map, key);
    while (map->keys[i] != UINT64_MAX && map->keys[i] != key)
        i = (i + 1) & map->mask;
    return i;
}

static hydra_status alloc_pairmap(tok_pairmap *map, size_t n)
{
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    map->keys = malloc(size * sizeof *map->keys);
    map->ranks = malloc(size * sizeof *map->ranks);
    map->merged = malloc(size * sizeof *map->merged);
    if (map->keys == NULL || map->ranks == NULL || map->merged == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "tokenizer: out of memory for %zu merges", n);
    memset(map->keys, 0xFF, size * sizeof *map->keys);
    map->mask = size - 1;
    return HYDRA_OK;
}

/* Merges "LEFT RIGHT", rank = index, read in batches so that the lookups of
 * a batch overlap (tok_lookup_many).  A merge whose parts or result are not
 * tokens cannot fire and is left out; the first of duplicates wins. */
enum { MERGE_BATCH = 64 };

typedef struct merge_batch {
    const char *texts[3 * MERGE_BATCH]; /* left, right, left+right of each merge */
    size_t lens[3 * MERGE_BATCH];
    int32_t ids[3 * MERGE_BATCH];
    uint64_t keys[MERGE_BATCH];
    char *joined;                       /* the left+right texts */
    size_t joined_cap;
} merge_batch;

/* Splits merge i of the batch at its first space (after the first byte: a
 * token may start with one); false if it has none. */
static bool split_merge(merge_batch *b, size_t i, const char *text, size_t len, size_t *joined_at)
{
    const char *space = len > 1 ? memchr(text + 1, ' ', len - 1) : NULL;
    if (space == NULL || space + 1 == text + len)
        return false;
    size_t left_len = (size_t)(space - text), right_len = len - left_len - 1;
    char *joined = b->joined + *joined_at;
    memcpy(joined, text, left_len);
    memcpy(joined + left_len, space + 1, right_len);
    *joined_at += left_len + right_len;
    b->texts[3 * i] = text;
    b->lens[3 * i] = left_len;
    b->texts[3 * i + 1] = space + 1;
    b->lens[3 * i + 1] = right_len;
    b->texts[3 * i + 2] = joined;
    b->lens[3 * i + 2] = left_len + right_len;
    return true;
}

static hydra_status read_merge_batch(hydra_tokenizer *tok, const gguf_value *items, size_t first, size_t count,
                                     merge_batch *b)
{
    size_t bytes = 0, joined_at = 0;
    for (size_t i = 0; i < count; i++)
        bytes += (size_t)items[first + i].str.len;
    if (bytes > b->joined_cap) {
        free(b->joined);
        b->joined_cap = 2 * bytes;
        if ((b->joined = malloc(b->joined_cap)) == NULL)
            return hydra_fail(HYDRA_ERR_NOMEM, "tokenizer: out of memory reading merge %zu", first);
    }
    for (size_t i = 0; i < count; i++)
        if (!split_merge(b, i, items[first + i].str.ptr, (size_t)items[first + i].str.len, &joined_at)) {
            b->texts[3 * i] = b->texts[3 * i + 1] = b->texts[3 * i + 2] = ""; /* the empty text is no token */
            b->lens[3 * i] = b->lens[3 * i + 1] = b->lens[3 * i + 2] = 0;
        }
    tok_lookup_many(tok, 3 * count, b->texts, b->lens, b->ids);
    tok_pairmap *map = &tok->merges;
    for (size_t i = 0; i < count; i++) {
        bool usable = b->lens[3 * i] > 0 && b->ids[3 * i] >= 0 && b->ids[3 * i + 1] >= 0 && b->ids[3 * i + 2] >= 0;
        b->keys[i] = usable ? pair_key(b->ids[3 * i], b->ids[3 * i + 1]) : UINT64_MAX;
        if (usable)
            __builtin_prefetch(&map->keys[pair_home(map, b->keys[i])]);
    }
    for (size_t i = 0; i < count; i++) {
        if (b->keys[i] == UINT64_MAX)
            continue;
        size_t slot = pair_slot(map, b->keys[i]);
        if (map->keys[slot] == b->keys[i])
            continue;
        map->keys[slot] = b->keys[i];
        map->ranks[slot] = (uint32_t)(first + i);
        map->merged[slot] = b->ids[3 * i + 2];
    }
    return HYDRA_OK;
}

static hydra_status read_merges(hydra_tokenizer *tok, const hydra_model *m)
{
    /* model open checked that the key, when present, is an array of strings */
    const gguf_kv *kv = gguf_find_kv(&m->gguf, "tokenizer.ggml.merges");
    size_t n = kv != NULL ? (size_t)kv->value.arr.n : 0;
    if (n > UINT32_MAX)
        return hydra_fail(HYDRA_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges has %zu entries", n);
    hydra_status st = alloc_pairmap(&tok->merges, n);
    merge_batch *b = st == HYDRA_OK ? calloc(1, sizeof *b) : NULL;
    if (st == HYDRA_OK && b == NULL)
        st = hydra_fail(HYDRA_ERR_NOMEM, "tokenizer: out of memory reading merges");
    for (size_t first = 0; first < n && st == HYDRA_OK; first += MERGE_BATCH)
        st = read_merge_batch(tok, kv->value.arr.items, first, n - first < MERGE_BATCH ? n - first : MERGE_BATCH, b);
    if (b != NULL)
        free(b->joined);
    free(b);
    return st;
}

/* Vocabularies made from UTF-8 text often lack the bytes UTF-8 never uses
 * (C0, C1, F5..FF), and some lack a few control bytes too.  Such a byte
 * (only met in text that is not UTF-8) is written as U+FFFD, the
 * replacement character, spelled the way the vocabulary spells it. */
static hydra_status prepare_replacement(hydra_tokenizer *tok)
{
    static const char replacement[] = "\xef\xbf\xbd";
    for (size_t i = 0; i < 3; i++)
        if (tok->byte_token[(uint8_t)replacement[i]] < 0)
            return HYDRA_OK;
    tok_ids ids = {0};
    hydra_status st = bpe_encode(tok, replacement, 3, &ids);
    if (st == HYDRA_OK && ids.n <= sizeof tok->replacement / sizeof tok->replacement[0]) {
        memcpy(tok->replacement, ids.v, ids.n * sizeof *ids.v);
        tok->n_replacement = ids.n;
    }
    free(ids.v);
    return st;
}

hydra_status bpe_prepare(hydra_tokenizer *tok, const hydra_model *m)
{
    /* A byte's symbol is a plain token: an added token that happens to be
     * spelled like a byte (deepseek's "ÿ") stands for its text, not the byte. */
    for (int b = 0; b < 256; b++) {
        char spelled[4];
        int32_t id = tok_lookup(tok, spelled, utf8_encode(bpe_code_point_of((uint8_t)b), spelled));
        uint8_t type = id >= 0 ? tok->tokens[id].type : TOKT_UNDEFINED;
        tok->byte_token[b] = type == TOKT_NORMAL || type == TOKT_UNDEFINED ? id : -1;
    }
    hydra_status st = read_merges(tok, m);
    return st != HYDRA_OK ? st : prepare_replacement(tok);
}

/* ------------------------------------------------------------ encoding */

typedef struct candidate {
    uint32_t rank;
    int32_t left;                    /* symbol index */
    int32_t left_id, right_id, merged;
} candidate;

typedef struct bpe_session {
    const hydra_tokenizer *tok;
    const uint8_t *text;
    const size_t *offs; /* byte offset of each code point */
    tok_ids *out;
    int32_t *id, *prev, *next; /* symbols of the piece */
    size_t sym_cap;
    heap queue;                /* of candidate */
    char *spelled;
} bpe_session;

/* Lowest rank first, the leftmost among equal ranks. */
static bool candidate_before(const void *a_, const void *b_)
{
    const candidate *a = a_, *b = b_;
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static const heap_order by_rank = {sizeof(candidate), candidate_before, "tokenize: merge candidates"};

/* Queues the pair that starts at symbol `left`, if the vocabulary merges it. */
static hydra_status offer_pair(bpe_session *s, int32_t left)
{
    int32_t right = left >= 0 ? s->next[left] : -1;
    if (right < 0 || s->id[left] < 0 || s->id[right] < 0)
        return HYDRA_OK;
    const tok_pairmap *map = &s->tok->merges;
    uint64_t key = pair_key(s->id[left], s->id[right]);
    size_t i = pair_slot(map, key);
    if (map->keys[i] != key)
        return HYDRA_OK;
    candidate c = {map->ranks[i], left, s->id[left], s->id[right], map->merged[i]};
    return heap_push(&s->queue, &c, &by_rank);
}

static hydra_status reserve_symbols(bpe_session *s, size_t n)
{
    if (n <= s->sym_cap)
        return HYDRA_OK;
    free(s->id);
    free(s->prev);
    free(s->next);
    free(s->spelled);
    s->id = malloc(n * sizeof *s->id);
    s->prev = malloc(n * sizeof *s->prev);
    s->next = malloc(n * sizeof *s->next);
    s->spelled = malloc(2 * n);
    s->sym_cap = n;
    if (s->id == NULL || s->prev == NULL || s->next == NULL || s->spelled == NULL) {
        s->sym_cap = 0;
        return hydra_fail(HYDRA_ERR_NOMEM, "tokenize: out of memory for a piece of %zu bytes", n);
    }
    return HYDRA_OK;
}

/* A symbol whose byte has no token (no merge touched it): U+FFFD stands
 * in, or the unknown token when the vocabulary cannot spell U+FFFD. */
static hydra_status emit_symbol(bpe_session *s, int32_t id, uint8_t byte)
{
    const hydra_tokenizer *tok = s->tok;
    if (id >= 0)
        return tok_ids_push(s->out, id);
    hydra_status st = HYDRA_OK;
    for (size_t i = 0; i < tok->n_replacement && st == HYDRA_OK; i++)
        st = tok_ids_push(s->out, tok->replacement[i]);
    if (tok->n_replacement > 0)
        return st;
    if (tok->unk >= 0)
        return tok_ids_push(s->out, tok->unk);
    return hydra_fail(HYDRA_ERR_UNSUPPORTED, "tokenize: byte 0x%02X has no token in the vocabulary, which "
                      "spells neither U+FFFD nor an unknown token", byte);
}

static hydra_status merge_all(bpe_session *s)
{
    hydra_status st = HYDRA_OK;
    while (s->queue.n > 0 && st == HYDRA_OK) {
        candidate c;
        heap_pop(&s->queue, &c, &by_rank);
        int32_t left = c.left, right = s->next[left];
        if (s->id[left] != c.left_id || right < 0 || s->id[right] != c.right_id)
            continue; /* a neighbour changed since the pair was queued */
        s->id[left] = c.merged;
        s->id[right] = -2;
        s->next[left] = s->next[right];
        if (s->next[right] >= 0)
            s->prev[s->next[right]] = left;
        st = offer_pair(s, s->prev[left]);
        if (st == HYDRA_OK)
            st = offer_pair(s, left);
    }
    return st;
}

static hydra_status encode_piece(bpe_session *s, const uint8_t *bytes, size_t n)
{
    const hydra_tokenizer *tok = s->tok;
    if (n == 1)
        return emit_symbol(s, tok->byte_token[bytes[0]], bytes[0]);
    hydra_status st = reserve_symbols(s, n);
    if (st != HYDRA_OK)
        return st;
    if (tok->pre->ignore_merges) {
        int32_t whole = tok_lookup(tok, s->spelled, spell_bytes(bytes, n, s->spelled));
        if (whole >= 0)
            return tok_ids_push(s->out, whole);
    }
    for (size_t i = 0; i < n; i++) {
        s->id[i] = tok->byte_token[bytes[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    s->queue.n = 0;
    for (size_t i = 0; i + 1 < n && st == HYDRA_OK; i++)
        st = offer_pair(s, (int32_t)i);
    if (st == HYDRA_OK)
        st = merge_all(s);
    for (int32_t i = 0; i >= 0 && st == HYDRA_OK; i = s->next[i])
        st = emit_symbol(s, s->id[i], bytes[i]);
    return st;
}

static hydra_status on_piece(void *user, size_t first, size_t end)
{
    bpe_session *s = user;
    return encode_piece(s, s->text + s->offs[first], s->offs[end] - s->offs[first]);
}

hydra_status bpe_encode(const hydra_tokenizer *tok, const char *text, size_t len, tok_ids *out)
{
    const uint8_t *bytes = (const uint8_t *)text;
    uint32_t *cps = malloc(len * sizeof *cps);
    uint32_t *masks = malloc(len * sizeof *masks);
    size_t *offs = malloc((len + 1) * sizeof *offs);
    bpe_session s = {.tok = tok, .text = bytes, .offs = offs, .out = out};
    hydra_status st = HYDRA_OK;
    if (cps == NULL || masks == NULL || offs == NULL)
        st = hydra_fail(HYDRA_ERR_NOMEM, "tokenize: out of memory for %zu bytes of text", len);
    size_t n = 0;
    for (size_t i = 0; i < len && st == HYDRA_OK; n++) {
        offs[n] = i;
        i += utf8_decode(bytes + i, len - i, &cps[n]);
        masks[n] = unicode_mask(cps[n]);
    }
    if (st == HYDRA_OK) {
        offs[n] = len;
        st = pretok_split(tok->pre->spec, cps, masks, n, on_piece, &s);
    }
    free(cps);
    free(masks);
    free(offs);
    free(s.id);
    free(s.prev);
    free(s.next);
    free(s.spelled);
    heap_free(&s.queue);
    return st;
}
