/*
 * tokenizer.h — the insides of a model's tokenizer: the vocabulary read
 * from tokenizer.ggml.*, its lookup tables, and the two encoders
 * (tok_bpe.c: byte-level BPE; tok_spm.c: SentencePiece BPE).  tokenizer.c
 * builds it lazily and owns the public hydra_tokenize; detok.c turns ids
 * back into bytes.
 */
#ifndef HYDRA_TOKENIZER_H
#define HYDRA_TOKENIZER_H

#include "hydra.h"

#include "pretok.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
typedef enum tok_type {
    TOKT_UNDEFINED = 0,
    TOKT_NORMAL = 1,
    TOKT_UNKNOWN = 2,
    TOKT_CONTROL = 3,
    TOKT_USER_DEFINED = 4,
    TOKT_UNUSED = 5,
    TOKT_BYTE = 6,
} tok_type;

typedef enum tok_kind { TOK_BPE, TOK_SPM } tok_kind;

typedef struct tok_entry {
    const char *text; /* the model's string (its metadata arena) */
    uint32_t len;
    uint8_t type;     /* tok_type */
    float score;      /* SentencePiece merge priority */
} tok_entry;

/* Token text -> id, open addressing.  A slot holds the high half of the
 * text's hash above id + 1 (0 when empty), so a probe that meets another
 * text rarely has to read it. */
typedef struct tok_strmap {
    uint64_t *slots;
    size_t mask;
} tok_strmap;

/* BPE merges: (left id, right id) -> rank and the id of the merged token. */
typedef struct tok_pairmap {
    uint64_t *keys; /* left << 32 | right; UINT64_MAX when empty */
    uint32_t *ranks;
    int32_t *merged;
    size_t mask;
} tok_pairmap;

/* A byte trie of the tokens that can be written in text (control,
 * user-defined, unknown), for leftmost-longest matching. */
typedef struct tok_trie_node {
    int32_t child, sibling; /* node indices, -1 for none */
    int32_t token;          /* the token that ends here, -1 for none */
    uint8_t byte;
} tok_trie_node;

enum { TOK_MAX_EOG = 16 };

typedef struct hydra_tokenizer {
    tok_kind kind;
    const pretok_kind *pre; /* BPE */
    size_t n_vocab;
    tok_entry *tokens;
    tok_strmap by_text;
    tok_pairmap merges;      /* BPE */
    int32_t byte_token[256]; /* BPE: byte's symbol; SPM: <0xNN>; -1 if absent */
    int32_t replacement[4];  /* BPE: U+FFFD, for bytes without a token */
    size_t n_replacement;
    tok_trie_node *trie;     /* node 0 is the root */
    size_t trie_nodes;
    uint8_t trie_first[32];  /* bitmap of the bytes a special token can start with */
    int32_t bos, eos, unk;   /* -1 when absent */
    bool add_bos, add_eos;
    bool add_space_prefix;   /* SPM: a text begins with ▁ */
    int32_t eog[TOK_MAX_EOG];
    size_t n_eog;
    char *pieces;            /* detok.c: bytes each token decodes to */
    uint32_t *piece_off;     /* token i: pieces[piece_off[i], piece_off[i + 1]) */
} hydra_tokenizer;

/* A growing list of ids. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

hydra_status tok_ids_push(tok_ids *ids, int32_t id);

/* The model's tokenizer, built on first use. */
hydra_status tokenizer_get(const hydra_model *model, const hydra_tokenizer **out);
void tokenizer_free(hydra_tokenizer *tok);

/* Id of a token text, -1 if none. */
int32_t tok_lookup(const hydra_tokenizer *tok, const char *text, size_t len);

/* ids[i] = tok_lookup(texts[i], lens[i]) for n texts, faster for many. */
void tok_lookup_many(const hydra_tokenizer *tok, size_t n, const char *const *texts, const size_t *lens,
                     int32_t *ids);

/* Byte-level BPE (tok_bpe.c): merges and byte symbols from the metadata,
 * then encoding of text that holds no special token. */
hydra_status bpe_prepare(hydra_tokenizer *tok, const hydra_model *model);
hydra_status bpe_encode(const hydra_tokenizer *tok, const char *text, size_t len, tok_ids *out);

/* GPT-2's byte <-> code point table (bytes_to_unicode): printable bytes stand
 * for themselves, the others for U+0100 upwards.  bpe_byte_of is -1 for a
 * code point that stands for no byte. */
uint32_t bpe_code_point_of(uint8_t byte);
int bpe_byte_of(uint32_t cp);

/* SentencePiece (tok_spm.c): byte fallback tokens, then encoding. */
hydra_status spm_prepare(hydra_tokenizer *tok);
hydra_status spm_encode(const hydra_tokenizer *tok, const char *text, size_t len, bool space_prefix, tok_ids *out);

/* Decoded pieces (detok.c). */
hydra_status detok_prepare(hydra_tokenizer *tok);

#endif
