/*
 * model.h — the insides of hydra_model, for the engine's own files.
 */
#ifndef HYDRA_MODEL_H
#define HYDRA_MODEL_H

#include "hydra.h"

#include "gguf.h"
#include "quant.h"

struct hydra_model {
    uint8_t *image;      /* the whole file: a mapping, or a buffer when mmap is off */
    uint64_t size;
    bool owns_buffer;    /* image came from malloc */
    bool locked;         /* image is mlock'ed */
    bool parsed;         /* gguf holds allocations */
    gguf_file gguf;
    const char *arch;    /* general.architecture, "" if absent */
    uint64_t n_params;
    uint64_t n_bytes;
    uint64_t bytes_by_type[QT_COUNT];
    struct hydra_tokenizer *tokenizer; /* built on first use by tokenizer.c; freed by close */
};

#endif
