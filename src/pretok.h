/*
 * pretok.h — the pre-tokenizers of byte-level BPE vocabularies: the
 * splitting regexes of each tokenizer.ggml.pre, written as tables of
 * character classes over code points and run by a small backtracking
 * matcher (pretok.c), with the semantics of the regex engines the patterns
 * were written for (leftmost-first alternation, greedy quantifiers with
 * backtracking; every stage splits each piece of the one before and keeps
 * the text between matches as pieces of its own, as the Hugging Face
 * Split pre-tokenizer with behaviour "Isolated" does).
 */
#ifndef HYDRA_PRETOK_H
#define HYDRA_PRETOK_H

#include "hydra.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pretok_spec pretok_spec;

typedef struct pretok_kind {
    const char *name;        /* tokenizer.ggml.pre */
    const pretok_spec *spec;
    bool ignore_merges;      /* a piece that is a token is that token, unmerged */
} pretok_kind;

/* The pre-tokenizer of a tokenizer.ggml.pre name; NULL if unknown. */
const pretok_kind *pretok_find(const char *name);

/* Writes the known names, comma separated, into buf (cut to cap). */
void pretok_known_names(char *buf, size_t cap);

/* Called once per piece, in text order, with code point indices [first, end). */
typedef hydra_status (*pretok_emit_fn)(void *user, size_t first, size_t end);

/* Splits cps[0, n) (masks[i] = unicode_mask(cps[i])) into pieces. */
hydra_status pretok_split(const pretok_spec *spec, const uint32_t *cps, const uint32_t *masks, size_t n,
                          pretok_emit_fn emit, void *user);

#endif
