/*
 * gguf.h — the GGUF reader.  It parses a file image already in memory
 * (mapped or read) and trusts none of it: every count, length, type and
 * offset is checked against the bytes that are really there before it is
 * used, and every failure names the field and its byte offset.
 *
 * Layout (GGUF v2/v3, little-endian): "GGUF", u32 version, u64 n_tensors,
 * u64 n_kv, n_kv × (string key, u32 type, value), n_tensors × (string name,
 * u32 n_dims, n_dims × u64 ne, u32 type, u64 offset), padding to
 * general.alignment (default 32), tensor data.  Strings are u64 length +
 * bytes, not NUL-terminated.
 */
#ifndef HYDRA_GGUF_H
#define HYDRA_GGUF_H

#include "hydra.h"

#include <stddef.h>
#include <stdint.h>

enum { GGUF_MAX_DIMS = 4, GGUF_MAX_ARRAY_DEPTH = 8, GGUF_DEFAULT_ALIGNMENT = 32 };

typedef struct gguf_value gguf_value;
struct gguf_value {
    uint32_t type; /* hydra_value_type */
    union {
        uint64_t u;  /* u8..u64, bool */
        int64_t i;   /* i8..i64 */
        double f;    /* f32, f64 */
        struct {
            char *ptr; /* NUL-terminated copy (arena) */
            uint64_t len;
        } str;
        struct {
            uint32_t type;      /* element type */
            uint64_t n;
            const uint8_t *raw; /* scalar elements: little-endian bytes in the image */
            gguf_value *items;  /* string or array elements (arena) */
        } arr;
    };
};

typedef struct gguf_kv {
    char *key; /* NUL-terminated copy (arena) */
    uint64_t key_len;
    uint64_t offset; /* byte offset of the entry in the file */
    gguf_value value;
} gguf_kv;

typedef struct gguf_tensor {
    char *name;
    uint64_t name_len;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint32_t type;
    uint64_t offset;     /* relative to the data section */
    uint64_t n_elements;
    uint64_t n_bytes;
    uint64_t info_offset; /* byte offset of the tensor info in the file */
} gguf_tensor;

typedef struct gguf_arena_chunk gguf_arena_chunk;

typedef struct gguf_file {
    const uint8_t *image; /* the whole file */
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset; /* absolute offset of the data section */
    gguf_kv *kvs;
    uint64_t n_kv;
    gguf_tensor *tensors;
    uint64_t n_tensors;
    uint32_t *kv_by_key;        /* indices of kvs sorted by key */
    uint32_t *tensor_by_name;   /* indices of tensors sorted by name */
    gguf_arena_chunk *arena;    /* owns every string and item array */
} gguf_file;

/* Parses image[0, size).  On failure frees what it built and leaves a
 * message naming the field and byte offset.  The image must outlive f. */
hydra_status gguf_parse(gguf_file *f, const void *image, uint64_t size);
void gguf_free(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Element i of a scalar array as a value of the element type. */
gguf_value gguf_array_elem(const gguf_value *arr, uint64_t i);

/* Bytes of one scalar of this type, 0 for string/array/unknown. */
size_t gguf_scalar_size(uint32_t type);

#endif
