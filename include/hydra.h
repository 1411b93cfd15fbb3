/*
 * hydra.h — the one public header of libhydra, an inference engine for
 * Mixture-of-Experts language models stored as GGUF.
 *
 * Conventions
 *   - Every function that can fail returns a hydra_status.  HYDRA_OK is 0.
 *   - When a call fails it leaves a human-readable message, retrievable with
 *     hydra_last_error().  The message is per thread (like errno), so a
 *     failed hydra_model_open, which has no handle yet, can still explain
 *     itself.  A successful call does not clear the message.
 *   - Handles are opaque.  Whatever a handle returns (strings, tensor data
 *     pointers) stays valid until the handle is closed.
 *   - Only symbols prefixed hydra_ are exported.
 */
#ifndef HYDRA_H
#define HYDRA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HYDRA_BUILD)
#define HYDRA_API __attribute__((visibility("default")))
#else
#define HYDRA_API
#endif

/* ---------------------------------------------------------------- status */

/* One table generates the enum and hydra_strerror(): X(name, text). */
#define HYDRA_STATUS_TABLE(X)                                                 \
    X(HYDRA_OK, "success")                                                    \
    X(HYDRA_ERR_INVALID_ARG, "invalid argument")                              \
    X(HYDRA_ERR_IO, "input/output error")                                     \
    X(HYDRA_ERR_FORMAT, "malformed file")                                     \
    X(HYDRA_ERR_UNSUPPORTED, "unsupported feature")                           \
    X(HYDRA_ERR_NOMEM, "out of memory")                                       \
    X(HYDRA_ERR_CANCELLED, "cancelled by the caller")                         \
    X(HYDRA_ERR_NOT_FOUND, "not found")                                       \
    X(HYDRA_ERR_TYPE, "value has another type")                               \
    X(HYDRA_ERR_RANGE, "value out of range")

typedef enum hydra_status {
#define HYDRA_STATUS_ENUM_(name, text) name,
    HYDRA_STATUS_TABLE(HYDRA_STATUS_ENUM_)
#undef HYDRA_STATUS_ENUM_
    HYDRA_STATUS_COUNT
} hydra_status;

/* A static description of a status ("malformed file"); never NULL. */
HYDRA_API const char *hydra_strerror(hydra_status status);

/* The message the last failing hydra_ call on this thread left, naming what
 * was wrong (for a file: the field and its byte offset).  "" if none. */
HYDRA_API const char *hydra_last_error(void);

/* ------------------------------------------------------------ GGUF types */

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum hydra_value_type {
    HYDRA_VALUE_U8 = 0,
    HYDRA_VALUE_I8 = 1,
    HYDRA_VALUE_U16 = 2,
    HYDRA_VALUE_I16 = 3,
    HYDRA_VALUE_U32 = 4,
    HYDRA_VALUE_I32 = 5,
    HYDRA_VALUE_F32 = 6,
    HYDRA_VALUE_BOOL = 7,
    HYDRA_VALUE_STRING = 8,
    HYDRA_VALUE_ARRAY = 9,
    HYDRA_VALUE_U64 = 10,
    HYDRA_VALUE_I64 = 11,
    HYDRA_VALUE_F64 = 12,
} hydra_value_type;

/* Name of a metadata value type ("u32", "string", ...), "?" if unknown. */
HYDRA_API const char *hydra_value_type_name(uint32_t type);

/* Tensor element types use ggml's numbering (0 = F32, 1 = F16, 8 = Q8_0, ...).
 * Name of a tensor type ("Q4_K"), or NULL for an id no GGUF may contain. */
HYDRA_API const char *hydra_type_name(uint32_t type);

/* One past the largest tensor type id hydra knows. */
HYDRA_API uint32_t hydra_type_count(void);

/* ------------------------------------------------------------------ model */

typedef struct hydra_model hydra_model;

/* Loading progress: fraction in [0, 1].  Return false to cancel loading;
 * hydra_model_open then fails with HYDRA_ERR_CANCELLED. */
typedef bool (*hydra_progress_fn)(float fraction, void *user);

typedef struct hydra_model_params {
    const char *path;           /* GGUF file (required) */
    hydra_progress_fn progress; /* optional */
    void *progress_user;        /* passed to progress */
    bool use_mmap;              /* map the file (default) or read it into memory */
    bool use_mlock;             /* lock the weights in RAM (needs RLIMIT_MEMLOCK) */
} hydra_model_params;

/* Defaults: no path, no progress callback, mmap on, mlock off. */
HYDRA_API hydra_model_params hydra_model_default_params(void);

/* Opens and validates a GGUF file.  On success *out owns the model; on
 * failure *out is NULL and hydra_last_error() says what is wrong. */
HYDRA_API hydra_status hydra_model_open(hydra_model **out, const hydra_model_params *params);

/* Frees everything the model owns.  NULL is allowed. */
HYDRA_API void hydra_model_close(hydra_model *model);

/* general.architecture ("qwen3moe", "llama", ...); "" when absent. */
HYDRA_API const char *hydra_model_arch(const hydra_model *model);

/* GGUF format version (2 or 3). */
HYDRA_API uint32_t hydra_model_gguf_version(const hydra_model *model);

/* --- metadata.  Keys are full names ("qwen3moe.expert_count"). */

HYDRA_API size_t hydra_model_meta_count(const hydra_model *model);

/* Key and value type of the i-th metadata entry, in file order. */
HYDRA_API hydra_status hydra_model_meta_at(const hydra_model *model, size_t i, const char **key,
                                           hydra_value_type *type);

/* Type of a key; HYDRA_ERR_NOT_FOUND if absent. */
HYDRA_API hydra_status hydra_model_meta_type(const hydra_model *model, const char *key,
                                             hydra_value_type *type);

/* Typed getters.  Integer getters accept any integer type whose value fits
 * (HYDRA_ERR_RANGE otherwise); the float getter accepts f32 and f64.  A key
 * of another type gives HYDRA_ERR_TYPE, a missing key HYDRA_ERR_NOT_FOUND. */
HYDRA_API hydra_status hydra_model_get_u64(const hydra_model *model, const char *key, uint64_t *out);
HYDRA_API hydra_status hydra_model_get_i64(const hydra_model *model, const char *key, int64_t *out);
HYDRA_API hydra_status hydra_model_get_f64(const hydra_model *model, const char *key, double *out);
HYDRA_API hydra_status hydra_model_get_bool(const hydra_model *model, const char *key, bool *out);
/* String values are NUL-terminated copies; *len (optional) excludes the NUL.
 * GGUF strings may contain NUL bytes: trust *len, not strlen. */
HYDRA_API hydra_status hydra_model_get_str(const hydra_model *model, const char *key,
                                           const char **out, size_t *len);

/* Arrays: element type and length; then elements by index.  Element getters
 * follow the scalar getters' rules.  Nested arrays are described (their
 * element type is HYDRA_VALUE_ARRAY) but not read through this API. */
HYDRA_API hydra_status hydra_model_get_arr(const hydra_model *model, const char *key,
                                           hydra_value_type *elem_type, size_t *n);
HYDRA_API hydra_status hydra_model_get_arr_str(const hydra_model *model, const char *key,
                                               size_t i, const char **out, size_t *len);
HYDRA_API hydra_status hydra_model_get_arr_i64(const hydra_model *model, const char *key,
                                               size_t i, int64_t *out);
HYDRA_API hydra_status hydra_model_get_arr_f64(const hydra_model *model, const char *key,
                                               size_t i, double *out);

/* --- tensors */

typedef struct hydra_tensor_info {
    const char *name;
    uint32_t type;          /* ggml type id */
    const char *type_name;  /* "Q4_K" */
    uint32_t n_dims;        /* 1..4 */
    uint64_t ne[4];         /* ggml order: ne[0] is the row length; unused dims are 1 */
    uint64_t n_elements;
    uint64_t n_bytes;
    uint64_t file_offset;   /* absolute byte offset of the data in the file */
    const void *data;       /* the bytes, inside the mapping */
} hydra_tensor_info;

HYDRA_API size_t hydra_model_tensor_count(const hydra_model *model);
HYDRA_API hydra_status hydra_model_tensor_at(const hydra_model *model, size_t i, hydra_tensor_info *out);
HYDRA_API hydra_status hydra_model_tensor_find(const hydra_model *model, const char *name,
                                               hydra_tensor_info *out);

/* --- totals */

HYDRA_API uint64_t hydra_model_n_params(const hydra_model *model);     /* elements of all tensors */
HYDRA_API uint64_t hydra_model_n_bytes(const hydra_model *model);      /* tensor data bytes */
HYDRA_API uint64_t hydra_model_file_size(const hydra_model *model);
/* Tensor data bytes of one type (0 if none), for the quant mix. */
HYDRA_API uint64_t hydra_model_bytes_of_type(const hydra_model *model, uint32_t type);

#ifdef __cplusplus
}
#endif
#endif /* HYDRA_H */
