/*
 * tokenizer.c — a model's tokenizer: built lazily from tokenizer.ggml.*
 * (vocabulary, types, scores, special ids, BOS/EOS rules), the lookup
 * tables both encoders share, special-token matching, and the public
 * hydra_tokenize and vocabulary queries.
 */
#include "tokenizer.h"

#include "error.h"
#include "model.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

hydra_status tok_ids_push(tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (v == NULL)
            return hydra_fail(HYDRA_ERR_NOMEM, "tokenize: out of memory for %zu tokens", cap);
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return HYDRA_OK;
}

/* FNV-1a: token texts are short, and this spreads them well enough. */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001b3u;
    return h;
}

static size_t table_size_for(size_t n)
{
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    return size;
}

int32_t tok_lookup(const hydra_tokenizer *tok, const char *text, size_t len)
{
    const tok_strmap *map = &tok->by_text;
    uint64_t hash = hash_bytes(text, len), tag = hash >> 32;
    for (size_t i = hash & map->mask;; i = (i + 1) & map->mask) {
        uint64_t slot = map->slots[i];
        if (slot == 0)
            return -1;
        if (slot >> 32 != tag)
            continue;
        const tok_entry *e = &tok->tokens[(uint32_t)slot - 1];
        if (e->len == len && memcmp(e->text, text, len) == 0)
            return (int32_t)((uint32_t)slot - 1);
    }
}

/* Loading a vocabulary looks up millions of texts (three per merge), each
 * a few cache misses in tables of megabytes.  Looking them up in batches
 * lets the misses of a batch overlap: first every slot is fetched, then
 * every candidate entry, then every candidate text, and only then are
 * they compared (a candidate that is not the text, rare, takes the plain
 * path). */
enum { LOOKUP_BATCH = 64 };

void tok_lookup_many(const hydra_tokenizer *tok, size_t n, const char *const *texts, const size_t *lens,
                     int32_t *ids)
{
    const tok_strmap *map = &tok->by_text;
    uint64_t hash[LOOKUP_BATCH];
    for (size_t base = 0; base < n; base += LOOKUP_BATCH) {
        size_t count = n - base < LOOKUP_BATCH ? n - base : LOOKUP_BATCH;
        for (size_t i = 0; i < count; i++) {
            hash[i] = hash_bytes(texts[base + i], lens[base + i]);
            __builtin_prefetch(&map->slots[hash[i] & map->mask]);
        }
        for (size_t i = 0; i < count; i++) {
            uint64_t slot = map->slots[hash[i] & map->mask];
            ids[base + i] = slot != 0 && slot >> 32 == hash[i] >> 32 ? (int32_t)((uint32_t)slot - 1) : -1;
            if (ids[base + i] >= 0)
                __builtin_prefetch(&tok->tokens[ids[base + i]]);
        }
        for (size_t i = 0; i < count; i++)
            if (ids[base + i] >= 0)
                __builtin_prefetch(tok->tokens[ids[base + i]].text);
        for (size_t i = 0; i < count; i++) {
            int32_t id = ids[base + i];
            const char *text = texts[base + i];
            size_t len = lens[base + i];
            if (id < 0 || tok->tokens[id].len != len || memcmp(tok->tokens[id].text, text, len) != 0)
                ids[base + i] = tok_lookup(tok, text, len);
        }
    }
}

/* Token texts are unique in sane vocabularies; where one repeats, the
 * lowest id keeps the text. */
static void strmap_insert(hydra_tokenizer *tok, uint32_t id, uint64_t hash)
{
    tok_strmap *map = &tok->by_text;
    const tok_entry *e = &tok->tokens[id];
    size_t i = hash & map->mask;
    for (; map->slots[i] != 0; i = (i + 1) & map->mask) {
        const tok_entry *other = &tok->tokens[(uint32_t)map->slots[i] - 1];
        if (map->slots[i] >> 32 == hash >> 32 && other->len == e->len && memcmp(other->text, e->text, e->len) == 0)
            return;
    }
    map->slots[i] = (hash >> 32) << 32 | ((uint64_t)id + 1);
}

static hydra_status build_strmap(hydra_tokenizer *tok)
{
    size_t size = table_size_for(tok->n_vocab);
    tok->by_text.slots = calloc(size, sizeof *tok->by_text.slots);
    if (tok->by_text.slots == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "tokenizer: out of memory for the token table");
    tok->by_text.mask = size - 1;
    uint64_t hash[LOOKUP_BATCH];
    for (size_t base = 0; base < tok->n_vocab; base += LOOKUP_BATCH) {
        size_t count = tok->n_vocab - base < LOOKUP_BATCH ? tok->n_vocab - base : LOOKUP_BATCH;
        for (size_t i = 0; i < count; i++) {
            hash[i] = hash_bytes(tok->tokens[base + i].text, tok->tokens[base + i].len);
            __builtin_prefetch(&tok->by_text.slots[hash[i] & tok->by_text.mask]);
        }
        for (size_t i = 0; i < count; i++)
            strmap_insert(tok, (uint32_t)(base + i), hash[i]);
    }
    return HYDRA_OK;
}

/* --------------------------------------------------- metadata reading */

static hydra_status read_bool(const hydra_model *m, const char *key, bool fallback, bool *out)
{
    hydra_status st = hydra_model_get_bool(m, key, out);
    if (st == HYDRA_ERR_NOT_FOUND) {
        *out = fallback;
        return HYDRA_OK;
    }
    return st;
}

/* A special token id; -1 when absent or outside the vocabulary (files
 * write -1 or a padding id past the end to say "none"). */
static hydra_status read_id(const hydra_model *m, const char *key, size_t n_vocab, int32_t *out)
{
    int64_t v;
    hydra_status st = hydra_model_get_i64(m, key, &v);
    *out = st == HYDRA_OK && v >= 0 && (uint64_t)v < n_vocab ? (int32_t)v : -1;
    return st == HYDRA_ERR_NOT_FOUND || st == HYDRA_ERR_RANGE ? HYDRA_OK : st;
}

/* An optional per-token array (model open checked its element type); it
 * must have one entry per token. */
static hydra_status per_token_array(const hydra_model *m, const char *key, size_t n_vocab, const gguf_value **out)
{
    const gguf_kv *kv = gguf_find_kv(&m->gguf, key);
    *out = kv != NULL ? &kv->value : NULL;
    if (kv != NULL && kv->value.arr.n != n_vocab)
        return hydra_fail(HYDRA_ERR_FORMAT, "tokenizer: %s has %llu entries for %zu tokens", key,
                          (unsigned long long)kv->value.arr.n, n_vocab);
    return HYDRA_OK;
}

static int64_t int_elem(const gguf_value *arr, size_t i)
{
    gguf_value v = gguf_array_elem(arr, i);
    bool is_signed = arr->arr.type == HYDRA_VALUE_I8 || arr->arr.type == HYDRA_VALUE_I16 ||
                     arr->arr.type == HYDRA_VALUE_I32 || arr->arr.type == HYDRA_VALUE_I64;
    return is_signed ? v.i : v.u > INT64_MAX ? -1 : (int64_t)v.u;
}

/* The vocabulary straight from the parsed file: reading 200k tokens
 * through the by-key getters would search the keys 200k times. */
static hydra_status read_tokens(hydra_tokenizer *tok, const hydra_model *m)
{
    const gguf_kv *kv = gguf_find_kv(&m->gguf, "tokenizer.ggml.tokens");
    if (kv == NULL)
        return hydra_fail(HYDRA_ERR_NOT_FOUND,
                          "tokenizer: the model has no vocabulary (tokenizer.ggml.tokens is absent)");
    size_t n = (size_t)kv->value.arr.n;
    if (n == 0 || kv->value.arr.n > INT32_MAX)
        return hydra_fail(HYDRA_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens has %zu entries", n);
    const gguf_value *types, *scores;
    hydra_status st;
    if ((st = per_token_array(m, "tokenizer.ggml.token_type", n, &types)) != HYDRA_OK ||
        (st = per_token_array(m, "tokenizer.ggml.scores", n, &scores)) != HYDRA_OK)
        return st;
    tok->tokens = calloc(n, sizeof *tok->tokens);
    if (tok->tokens == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "tokenizer: out of memory for %zu tokens", n);
    tok->n_vocab = n;
    for (size_t i = 0; i < n; i++) {
        tok_entry *e = &tok->tokens[i];
        const gguf_value *text = &kv->value.arr.items[i];
        if (text->str.len > UINT32_MAX)
            return hydra_fail(HYDRA_ERR_FORMAT, "tokenizer: token %zu is %llu bytes long", i,
                              (unsigned long long)text->str.len);
        int64_t type = types != NULL ? int_elem(types, i) : TOKT_NORMAL;
        e->text = text->str.ptr;
        e->len = (uint32_t)text->str.len;
        e->type = type >= TOKT_UNDEFINED && type <= TOKT_BYTE ? (uint8_t)type : TOKT_UNDEFINED;
        e->score = scores != NULL ? (float)gguf_array_elem(scores, i).f : 0.0f;
    }
    return HYDRA_OK;
}

static hydra_status read_kind(hydra_tokenizer *tok, const hydra_model *m)
{
    const char *model_name;
    hydra_status st = hydra_model_get_str(m, "tokenizer.ggml.model", &model_name, NULL);
    if (st == HYDRA_ERR_NOT_FOUND)
        return hydra_fail(HYDRA_ERR_NOT_FOUND,
                          "tokenizer: the model has no tokenizer (tokenizer.ggml.model is absent)");
    if (st != HYDRA_OK)
        return st;
    if (strcmp(model_name, "llama") == 0) {
        tok->kind = TOK_SPM;
        return HYDRA_OK;
    }
    if (strcmp(model_name, "gpt2") != 0)
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "tokenizer: tokenizer.ggml.model '%s' is not supported "
                          "(hydra knows 'gpt2' and 'llama')", model_name);
    tok->kind = TOK_BPE;
    const char *pre_name = "default";
    st = hydra_model_get_str(m, "tokenizer.ggml.pre", &pre_name, NULL);
    if (st != HYDRA_OK && st != HYDRA_ERR_NOT_FOUND)
        return st;
    tok->pre = pretok_find(pre_name);
    if (tok->pre == NULL) {
        char known[1024];
        pretok_known_names(known, sizeof known);
        return hydra_fail(HYDRA_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer tokenizer.ggml.pre = '%s' is not "
                          "supported (known: %s)", pre_name, known);
    }
    return HYDRA_OK;
}

static hydra_status read_special_ids(hydra_tokenizer *tok, const hydra_model *m)
{
    hydra_status st;
    if ((st = read_id(m, "tokenizer.ggml.bos_token_id", tok->n_vocab, &tok->bos)) != HYDRA_OK ||
        (st = read_id(m, "tokenizer.ggml.eos_token_id", tok->n_vocab, &tok->eos)) != HYDRA_OK ||
        (st = read_id(m, "tokenizer.ggml.unknown_token_id", tok->n_vocab, &tok->unk)) != HYDRA_OK ||
        (st = read_bool(m, "tokenizer.ggml.add_bos_token", tok->kind == TOK_SPM && tok->bos >= 0,
                        &tok->add_bos)) != HYDRA_OK ||
        (st = read_bool(m, "tokenizer.ggml.add_eos_token", false, &tok->add_eos)) != HYDRA_OK ||
        (st = read_bool(m, "tokenizer.ggml.add_space_prefix", true, &tok->add_space_prefix)) != HYDRA_OK)
        return st;
    if (tok->add_bos && tok->bos < 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "tokenizer: add_bos_token is true but tokenizer.ggml.bos_token_id "
                          "is absent or outside the %zu tokens", tok->n_vocab);
    if (tok->add_eos && tok->eos < 0)
        return hydra_fail(HYDRA_ERR_FORMAT, "tokenizer: add_eos_token is true but tokenizer.ggml.eos_token_id "
                          "is absent or outside the %zu tokens", tok->n_vocab);
    return HYDRA_OK;
}

/* -------------------------------------------------------- end of generation */

static void add_eog(hydra_tokenizer *tok, int32_t id)
{
    if (id < 0 || tok->n_eog == TOK_MAX_EOG)
        return;
    for (size_t i = 0; i < tok->n_eog; i++)
        if (tok->eog[i] == id)
            return;
    tok->eog[tok->n_eog++] = id;
}

static int32_t control_token(const hydra_tokenizer *tok, const char *text)
{
    int32_t id = tok_lookup(tok, text, strlen(text));
    return id >= 0 && tok->tokens[id].type == TOKT_CONTROL ? id : -1;
}

static hydra_status collect_eog(hydra_tokenizer *tok, const hydra_model *m)
{
    /* Turn enders of the families hydra runs (their chat templates end an
     * assistant turn with these). */
    static const char *const enders[] = {
        "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|endoftext|>",
        "<|end_of_text|>", "<end_of_turn>", "<EOT>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", /* <｜end▁of▁sentence｜> */
    };
    /* Harmony (gpt-oss) closes every message with <|end|> and the reply
     * with <|return|> or <|call|>. */
    bool harmony = control_token(tok, "<|return|>") >= 0;
    int32_t eot, eom;
    hydra_status st;
    if ((st = read_id(m, "tokenizer.ggml.eot_token_id", tok->n_vocab, &eot)) != HYDRA_OK ||
        (st = read_id(m, "tokenizer.ggml.eom_token_id", tok->n_vocab, &eom)) != HYDRA_OK)
        return st;
    add_eog(tok, tok->eos);
    add_eog(tok, eot);
    add_eog(tok, eom);
    for (size_t i = 0; i < sizeof enders / sizeof enders[0]; i++)
        if (!(harmony && strcmp(enders[i], "<|end|>") == 0))
            add_eog(tok, control_token(tok, enders[i]));
    return HYDRA_OK;
}

/* ------------------------------------------------------ special tokens */

static bool is_written_special(uint8_t type)
{
    return type == TOKT_CONTROL || type == TOKT_USER_DEFINED || type == TOKT_UNKNOWN;
}

static hydra_status trie_add_node(hydra_tokenizer *tok, size_t *cap, uint8_t byte, int32_t *index)
{
    if (tok->trie_nodes == *cap) {
        size_t new_cap = *cap ? 2 * *cap : 256;
        tok_trie_node *nodes = realloc(tok->trie, new_cap * sizeof *nodes);
        if (nodes == NULL)
            return hydra_fail(HYDRA_ERR_NOMEM, "tokenizer: out of memory for the special-token trie");
        tok->trie = nodes;
        *cap = new_cap;
    }
    *index = (int32_t)tok->trie_nodes++;
    tok->trie[*index] = (tok_trie_node){.child = -1, .sibling = -1, .token = -1, .byte = byte};
    return HYDRA_OK;
}

static int32_t trie_child(const hydra_tokenizer *tok, int32_t node, uint8_t byte)
{
    int32_t c = tok->trie[node].child;
    while (c >= 0 && tok->trie[c].byte != byte)
        c = tok->trie[c].sibling;
    return c;
}

static hydra_status trie_insert(hydra_tokenizer *tok, size_t *cap, int32_t id)
{
    const tok_entry *e = &tok->tokens[id];
    int32_t node = 0;
    for (uint32_t i = 0; i < e->len; i++) {
        uint8_t byte = (uint8_t)e->text[i];
        int32_t next = trie_child(tok, node, byte);
        if (next < 0) {
            hydra_status st = trie_add_node(tok, cap, byte, &next);
            if (st != HYDRA_OK)
                return st;
            tok->trie[next].sibling = tok->trie[node].child;
            tok->trie[node].child = next;
        }
        node = next;
    }
    if (tok->trie[node].token < 0)
        tok->trie[node].token = id;
    tok->trie_first[(uint8_t)e->text[0] / 8] |= (uint8_t)(1u << ((uint8_t)e->text[0] % 8));
    return HYDRA_OK;
}

static hydra_status build_trie(hydra_tokenizer *tok)
{
    size_t cap = 0;
    int32_t root;
    hydra_status st = trie_add_node(tok, &cap, 0, &root);
    for (size_t id = 0; id < tok->n_vocab && st == HYDRA_OK; id++)
        if (is_written_special(tok->tokens[id].type) && tok->tokens[id].len > 0)
            st = trie_insert(tok, &cap, (int32_t)id);
    return st;
}

/* The longest token written at s[0, n) that may be recognised: its id and
 * *len, or -1.  User-defined tokens (added tokens that are not special, like
 * GPT-NeoX's runs of spaces or Qwen3's <think>) are always recognised, as
 * the Hugging Face tokenizers and llama.cpp do; control and unknown tokens
 * only when parse_special is set. */
static int32_t special_at(const hydra_tokenizer *tok, const uint8_t *s, size_t n, bool parse_special, size_t *len)
{
    if (!(tok->trie_first[s[0] / 8] & (1u << (s[0] % 8))))
        return -1;
    int32_t best = -1, node = 0;
    for (size_t i = 0; i < n && (node = trie_child(tok, node, s[i])) >= 0; i++) {
        int32_t id = tok->trie[node].token;
        if (id >= 0 && (parse_special || tok->tokens[id].type == TOKT_USER_DEFINED)) {
            best = id;
            *len = i + 1;
        }
    }
    return best;
}

/* ------------------------------------------------------------- building */

void tokenizer_free(hydra_tokenizer *tok)
{
    if (tok == NULL)
        return;
    free(tok->tokens);
    free(tok->by_text.slots);
    free(tok->merges.keys);
    free(tok->merges.ranks);
    free(tok->merges.merged);
    free(tok->trie);
    free(tok->pieces);
    free(tok->piece_off);
    free(tok);
}

static hydra_status build(const hydra_model *m, hydra_tokenizer *tok)
{
    hydra_status st;
    if ((st = read_kind(tok, m)) != HYDRA_OK || (st = read_tokens(tok, m)) != HYDRA_OK ||
        (st = build_strmap(tok)) != HYDRA_OK || (st = read_special_ids(tok, m)) != HYDRA_OK ||
        (st = collect_eog(tok, m)) != HYDRA_OK || (st = build_trie(tok)) != HYDRA_OK)
        return st;
    st = tok->kind == TOK_BPE ? bpe_prepare(tok, m) : spm_prepare(tok);
    return st != HYDRA_OK ? st : detok_prepare(tok);
}

/* One lock for all models: it is held only while a tokenizer is built. */
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

hydra_status tokenizer_get(const hydra_model *model, const hydra_tokenizer **out)
{
    if (model == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "tokenizer: model is NULL");
    /* The tokenizer is a cache of the model's metadata: building it does
     * not change what the model is, so const callers may trigger it. */
    hydra_model *m = (hydra_model *)model;
    hydra_status st = HYDRA_OK;
    pthread_mutex_lock(&build_lock);
    if (m->tokenizer == NULL) {
        hydra_tokenizer *tok = calloc(1, sizeof *tok);
        st = tok == NULL ? hydra_fail(HYDRA_ERR_NOMEM, "tokenizer: out of memory") : build(m, tok);
        if (st == HYDRA_OK)
            m->tokenizer = tok;
        else
            tokenizer_free(tok);
    }
    *out = m->tokenizer;
    pthread_mutex_unlock(&build_lock);
    return st;
}

/* ------------------------------------------------------------- encoding */

/* Text between special tokens.  SentencePiece puts ▁ before each such
 * fragment, at the start of the text and after a special token alike
 * (llama.cpp's and the Llama tokenizer's reading of add_dummy_prefix). */
static hydra_status encode_plain(const hydra_tokenizer *tok, const uint8_t *text, size_t len, tok_ids *ids)
{
    if (len == 0)
        return HYDRA_OK;
    if (tok->kind == TOK_BPE)
        return bpe_encode(tok, (const char *)text, len, ids);
    return spm_encode(tok, (const char *)text, len, tok->add_space_prefix, ids);
}

static hydra_status encode(const hydra_tokenizer *tok, const uint8_t *text, size_t len, bool add_special,
                           bool parse_special, tok_ids *ids)
{
    hydra_status st = HYDRA_OK;
    if (add_special && tok->add_bos)
        st = tok_ids_push(ids, tok->bos);
    size_t plain = 0; /* start of the text not yet encoded */
    for (size_t p = 0; p < len && st == HYDRA_OK;) {
        size_t special_len = 0;
        int32_t id = special_at(tok, text + p, len - p, parse_special, &special_len);
        if (id < 0) {
            p++;
            continue;
        }
        st = encode_plain(tok, text + plain, p - plain, ids);
        if (st == HYDRA_OK)
            st = tok_ids_push(ids, id);
        p += special_len;
        plain = p;
    }
    if (st == HYDRA_OK)
        st = encode_plain(tok, text + plain, len - plain, ids);
    if (st == HYDRA_OK && add_special && tok->add_eos)
        st = tok_ids_push(ids, tok->eos);
    return st;
}

/* ------------------------------------------------------------ public API */

HYDRA_API hydra_status hydra_tokenizer_load(const hydra_model *model)
{
    const hydra_tokenizer *tok;
    return tokenizer_get(model, &tok);
}

HYDRA_API hydra_status hydra_tokenize(const hydra_model *model, const char *text, size_t len, bool add_special,
                                      bool parse_special, hydra_token *out, size_t capacity, size_t *n_tokens)
{
    const hydra_tokenizer *tok;
    hydra_status st = tokenizer_get(model, &tok);
    if (st != HYDRA_OK)
        return st;
    if ((text == NULL && len > 0) || (out == NULL && capacity > 0) || n_tokens == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_tokenize: NULL text, out or n_tokens");
    tok_ids ids = {0};
    st = encode(tok, (const uint8_t *)text, len, add_special, parse_special, &ids);
    if (st == HYDRA_OK) {
        *n_tokens = ids.n;
        size_t fit = ids.n < capacity ? ids.n : capacity;
        if (fit > 0)
            memcpy(out, ids.v, fit * sizeof *out);
        if (ids.n > capacity)
            st = hydra_fail(HYDRA_ERR_RANGE, "hydra_tokenize: the text has %zu tokens, out holds %zu", ids.n,
                            capacity);
    }
    free(ids.v);
    return st;
}

static const hydra_tokenizer *tokenizer_or_null(const hydra_model *model)
{
    const hydra_tokenizer *tok;
    return tokenizer_get(model, &tok) == HYDRA_OK ? tok : NULL;
}

HYDRA_API int32_t hydra_vocab_size(const hydra_model *model)
{
    const hydra_tokenizer *tok = tokenizer_or_null(model);
    return tok != NULL ? (int32_t)tok->n_vocab : 0;
}

HYDRA_API hydra_token hydra_token_bos(const hydra_model *model)
{
    const hydra_tokenizer *tok = tokenizer_or_null(model);
    return tok != NULL ? tok->bos : -1;
}

HYDRA_API hydra_token hydra_token_eos(const hydra_model *model)
{
    const hydra_tokenizer *tok = tokenizer_or_null(model);
    return tok != NULL ? tok->eos : -1;
}

HYDRA_API bool hydra_token_is_control(const hydra_model *model, hydra_token token)
{
    const hydra_tokenizer *tok = tokenizer_or_null(model);
    return tok != NULL && token >= 0 && (size_t)token < tok->n_vocab && tok->tokens[token].type == TOKT_CONTROL;
}

HYDRA_API bool hydra_token_is_eog(const hydra_model *model, hydra_token token)
{
    const hydra_tokenizer *tok = tokenizer_or_null(model);
    for (size_t i = 0; tok != NULL && i < tok->n_eog; i++)
        if (tok->eog[i] == token)
            return true;
    return false;
}
