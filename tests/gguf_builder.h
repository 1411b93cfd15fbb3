/*
 * gguf_builder.h — assembles GGUF images byte by byte for tests.  Unlike the
 * writer (src/gguf_write.h) it sets every field by hand: the version, value
 * types the writer has no call for, nested arrays, general.alignment, tensor
 * offsets in any order; so tests can build both the files the reader must
 * accept and the ones it must refuse.  Little-endian, as GGUF is.
 *
 *   gguf_builder b = {0};
 *   gb_header(&b, 3, n_tensors, n_kv);
 *   gb_key(&b, "general.alignment", HYDRA_VALUE_U32); gb_u32(&b, 64);
 *   gb_tensor_info(&b, "w", 0, 1, (uint64_t[]){8}, 0);
 *   gb_pad(&b, 64); ... data ...
 *   hydra_model *m; gb_open(&b, true, &m);
 *   gb_free(&b);
 */
#ifndef HYDRA_TEST_GGUF_BUILDER_H
#define HYDRA_TEST_GGUF_BUILDER_H

#include "hydra.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gguf_builder {
    uint8_t *p;
    size_t len, cap;
    bool failed; /* an allocation failed; the image is incomplete */
} gguf_builder;

void gb_free(gguf_builder *b);

void gb_bytes(gguf_builder *b, const void *src, size_t n);
void gb_u8(gguf_builder *b, uint8_t v);
void gb_u16(gguf_builder *b, uint16_t v);
void gb_u32(gguf_builder *b, uint32_t v);
void gb_u64(gguf_builder *b, uint64_t v);
void gb_f32(gguf_builder *b, float v);
void gb_f64(gguf_builder *b, double v);

/* A GGUF string: u64 length, then the bytes (which may include NULs). */
void gb_str(gguf_builder *b, const char *s, size_t n);
void gb_cstr(gguf_builder *b, const char *s);

/* "GGUF", version, tensor count, metadata count. */
void gb_header(gguf_builder *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);

/* A metadata key and its value type; the caller appends the value. */
void gb_key(gguf_builder *b, const char *key, uint32_t value_type);

/* An array header (element type, length); the caller appends the elements. */
void gb_array(gguf_builder *b, uint32_t elem_type, uint64_t n);

/* A tensor info: name, n_dims, ne[0..n_dims), type, data offset. */
void gb_tensor_info(gguf_builder *b, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                    uint64_t offset);

/* Zero bytes up to the next multiple of alignment. */
void gb_pad(gguf_builder *b, uint64_t alignment);

/* Writes the image to a fresh scratch file and opens it with
 * hydra_model_open (mapped or read).  When the environment names a folder in
 * HYDRA_GGUF_SEED_DIR, the image is also saved there, so the hand-built files
 * can seed the fuzzer (docs/FUZZING.md). */
hydra_status gb_open(const gguf_builder *b, bool use_mmap, hydra_model **m);

#endif
