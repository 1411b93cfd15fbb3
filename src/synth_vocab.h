/*
 * synth_vocab.h — the synthetic models' tokenizer: a small byte-level BPE
 * (GPT-2's 256 byte tokens, merges learned from an embedded English text)
 * plus one model family's special tokens, stored as llama.cpp's "gpt2"
 * tokenizer keys.  Deterministic: the same family and size always give the
 * same tokens and merges.
 */
#ifndef HYDRA_SYNTH_VOCAB_H
#define HYDRA_SYNTH_VOCAB_H

#include "gguf_write.h"

#include <stddef.h>
#include <stdint.h>

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum { SYNTH_TOKEN_NORMAL = 1, SYNTH_TOKEN_CONTROL = 3, SYNTH_TOKEN_USER_DEFINED = 4, SYNTH_TOKEN_UNUSED = 5 };

typedef struct synth_family synth_family;

typedef struct synth_vocab {
    const synth_family *family;
    char **tokens;     /* n_tokens strings (byte tokens in GPT-2's unicode form) */
    int32_t *types;    /* n_tokens token types */
    uint32_t n_tokens;
    uint32_t first_special; /* id of the family's first special token */
    char **merges;     /* "left right" */
    uint32_t n_merges;
} synth_vocab;

/* The family of a tokenizer by name ("qwen3", "qwen2", "mistral",
 * "deepseek-v3", "gpt-oss"); NULL if unknown. */
const synth_family *synth_family_find(const char *name);

/* Builds the vocabulary.  n_vocab 0 gives the natural size (byte tokens,
 * every learned merge, the specials); a larger n_vocab pads with "[PADi]"
 * tokens of type UNUSED (as llama.cpp's converter pads Qwen's vocabulary);
 * a smaller one keeps fewer merges.  Fails below 256 + the specials. */
hydra_status synth_vocab_build(synth_vocab *v, const synth_family *family, uint32_t n_vocab);

/* Adds the tokenizer.* keys (model, pre, tokens, token_type, merges, special
 * ids, add_bos/add_eos where the family sets them, chat template). */
hydra_status synth_vocab_write_keys(const synth_vocab *v, gguf_writer *w);

void synth_vocab_free(synth_vocab *v);

#endif
