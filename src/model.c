/*
 * model.c — hydra_model: a GGUF file mapped (or read) into memory, parsed,
 * and checked for the keys the engine reads.  Tensor data stays where the
 * file put it; the engine reads weights through pointers into the mapping.
 */
#include "model.h"

#include "error.h"
#include "quant.h"
#include "tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* -------------------------------------------------------- key type rules */

/* The shape a key the loader reads must have.  A file that stores, say,
 * tokenizer.ggml.tokens as anything but an array of strings is rejected at
 * open, before any code trusts it. */
typedef enum key_kind { KEY_INT, KEY_FLOAT, KEY_BOOL, KEY_STRING, KEY_ARR_STRING, KEY_ARR_FLOAT, KEY_ARR_INT,
                        KEY_ARR_NUMBER } key_kind;

typedef struct key_rule {
    const char *name; /* "%s" stands for the architecture */
    key_kind kind;
} key_rule;

static const key_rule key_rules[] = {
    {"general.architecture", KEY_STRING},
    {"general.name", KEY_STRING},
    {"general.file_type", KEY_INT},
    {"general.quantization_version", KEY_INT},
    {"%s.context_length", KEY_INT},
    {"%s.embedding_length", KEY_INT},
    {"%s.block_count", KEY_INT},
    {"%s.feed_forward_length", KEY_ARR_NUMBER}, /* a scalar or one value per layer */
    {"%s.expert_feed_forward_length", KEY_INT},
    {"%s.expert_shared_feed_forward_length", KEY_INT},
    {"%s.expert_count", KEY_INT},
    {"%s.expert_used_count", KEY_INT},
    {"%s.expert_shared_count", KEY_INT},
    {"%s.expert_weights_scale", KEY_FLOAT},
    {"%s.expert_weights_norm", KEY_BOOL},
    {"%s.expert_gating_func", KEY_INT},
    {"%s.expert_group_count", KEY_INT},
    {"%s.expert_group_used_count", KEY_INT},
    {"%s.leading_dense_block_count", KEY_INT},
    {"%s.vocab_size", KEY_INT},
    {"%s.attention.head_count", KEY_ARR_NUMBER},
    {"%s.attention.head_count_kv", KEY_ARR_NUMBER},
    {"%s.attention.key_length", KEY_INT},
    {"%s.attention.value_length", KEY_INT},
    {"%s.attention.key_length_mla", KEY_INT},
    {"%s.attention.value_length_mla", KEY_INT},
    {"%s.attention.q_lora_rank", KEY_INT},
    {"%s.attention.kv_lora_rank", KEY_INT},
    {"%s.attention.sliding_window", KEY_INT},
    {"%s.attention.layer_norm_rms_epsilon", KEY_FLOAT},
    {"%s.attention.layer_norm_epsilon", KEY_FLOAT},
    {"%s.rope.dimension_count", KEY_INT},
    {"%s.rope.freq_base", KEY_FLOAT},
    {"%s.rope.scaling.type", KEY_STRING},
    {"%s.rope.scaling.factor", KEY_FLOAT},
    {"%s.rope.scaling.original_context_length", KEY_INT},
    {"%s.rope.scaling.yarn_log_multiplier", KEY_FLOAT},
    {"tokenizer.ggml.model", KEY_STRING},
    {"tokenizer.ggml.pre", KEY_STRING},
    {"tokenizer.ggml.tokens", KEY_ARR_STRING},
    {"tokenizer.ggml.merges", KEY_ARR_STRING},
    {"tokenizer.ggml.scores", KEY_ARR_FLOAT},
    {"tokenizer.ggml.token_type", KEY_ARR_INT},
    {"tokenizer.ggml.bos_token_id", KEY_INT},
    {"tokenizer.ggml.eos_token_id", KEY_INT},
    {"tokenizer.ggml.unknown_token_id", KEY_INT},
    {"tokenizer.ggml.padding_token_id", KEY_INT},
    {"tokenizer.ggml.add_bos_token", KEY_BOOL},
    {"tokenizer.ggml.add_eos_token", KEY_BOOL},
    {"tokenizer.chat_template", KEY_STRING},
};

static bool is_int_type(uint32_t t)
{
    return t <= HYDRA_VALUE_I32 || t == HYDRA_VALUE_U64 || t == HYDRA_VALUE_I64;
}

static bool is_float_type(uint32_t t)
{
    return t == HYDRA_VALUE_F32 || t == HYDRA_VALUE_F64;
}

static bool kind_matches(key_kind kind, const gguf_value *v)
{
    bool arr = v->type == HYDRA_VALUE_ARRAY;
    uint32_t et = arr ? v->arr.type : UINT32_MAX;
    switch (kind) {
    case KEY_INT: return is_int_type(v->type);
    case KEY_FLOAT: return is_float_type(v->type);
    case KEY_BOOL: return v->type == HYDRA_VALUE_BOOL;
    case KEY_STRING: return v->type == HYDRA_VALUE_STRING;
    case KEY_ARR_STRING: return arr && et == HYDRA_VALUE_STRING;
    case KEY_ARR_FLOAT: return arr && is_float_type(et);
    case KEY_ARR_INT: return arr && is_int_type(et);
    case KEY_ARR_NUMBER: return is_int_type(v->type) || (arr && is_int_type(et));
    }
    return false;
}

static const char *kind_name(key_kind kind)
{
    static const char *const names[] = {
        [KEY_INT] = "an integer", [KEY_FLOAT] = "a float", [KEY_BOOL] = "a bool", [KEY_STRING] = "a string",
        [KEY_ARR_STRING] = "an array of strings", [KEY_ARR_FLOAT] = "an array of floats",
        [KEY_ARR_INT] = "an array of integers", [KEY_ARR_NUMBER] = "an integer or an array of integers",
    };
    return names[kind];
}

static hydra_status check_key_types(const gguf_file *f, const char *arch)
{
    for (size_t i = 0; i < sizeof key_rules / sizeof key_rules[0]; i++) {
        char key[256];
        snprintf(key, sizeof key, key_rules[i].name, arch);
        const gguf_kv *kv = gguf_find_kv(f, key);
        if (kv != NULL && !kind_matches(key_rules[i].kind, &kv->value))
            return hydra_fail(HYDRA_ERR_FORMAT, "gguf: key '%s' at byte %" PRIu64 " is %s%s%s, expected %s", key,
                              kv->offset, kv->value.type == HYDRA_VALUE_ARRAY ? "an array of " : "a ",
                              hydra_value_type_name(kv->value.type == HYDRA_VALUE_ARRAY ? kv->value.arr.type
                                                                                        : kv->value.type),
                              kv->value.type == HYDRA_VALUE_ARRAY ? "" : " value", kind_name(key_rules[i].kind));
    }
    return HYDRA_OK;
}

/* ------------------------------------------------------------ file image */

static bool report(const hydra_model_params *p, float fraction)
{
    return p->progress == NULL || p->progress(fraction, p->progress_user);
}

/* Reads the file in chunks so progress can be reported and loading cancelled. */
static hydra_status read_whole(hydra_model *m, int fd, const hydra_model_params *p)
{
    enum { CHUNK = 64 << 20 };
    m->image = malloc((size_t)m->size);
    if (m->image == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "%s: cannot allocate %" PRIu64 " bytes to read the file", p->path, m->size);
    m->owns_buffer = true;
    for (uint64_t done = 0; done < m->size;) {
        size_t want = m->size - done < CHUNK ? (size_t)(m->size - done) : CHUNK;
        ssize_t got = read(fd, m->image + done, want);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return hydra_fail(HYDRA_ERR_IO, "%s: read failed at byte %" PRIu64 ": %s", p->path, done,
                              got < 0 ? strerror(errno) : "unexpected end of file");
        done += (uint64_t)got;
        if (!report(p, 0.9f * (float)done / (float)m->size))
            return hydra_fail(HYDRA_ERR_CANCELLED, "%s: loading cancelled by the progress callback", p->path);
    }
    return HYDRA_OK;
}

static hydra_status load_image(hydra_model *m, const hydra_model_params *p)
{
    int fd = open(p->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hydra_fail(HYDRA_ERR_IO, "%s: cannot open: %s", p->path, strerror(errno));
    struct stat sb;
    hydra_status st = HYDRA_OK;
    if (fstat(fd, &sb) != 0)
        st = hydra_fail(HYDRA_ERR_IO, "%s: cannot stat: %s", p->path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = hydra_fail(HYDRA_ERR_IO, "%s: not a regular file", p->path);
    else if (sb.st_size == 0)
        st = hydra_fail(HYDRA_ERR_FORMAT, "%s: the file is empty, not a GGUF file", p->path);
    if (st != HYDRA_OK) {
        close(fd);
        return st;
    }
    m->size = (uint64_t)sb.st_size;
    if (p->use_mmap) {
        void *map = mmap(NULL, (size_t)m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            st = hydra_fail(HYDRA_ERR_IO, "%s: mmap of %" PRIu64 " bytes failed: %s", p->path, m->size,
                            strerror(errno));
        else
            m->image = map;
    } else {
        st = read_whole(m, fd, p);
    }
    close(fd);
    return st;
}

static void release_image(hydra_model *m)
{
    if (m->image == NULL)
        return;
    if (m->locked)
        munlock(m->image, (size_t)m->size);
    if (m->owns_buffer)
        free(m->image);
    else
        munmap(m->image, (size_t)m->size);
    m->image = NULL;
}

/* ------------------------------------------------------------ open/close */

static void sum_totals(hydra_model *m)
{
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++) {
        const gguf_tensor *t = &m->gguf.tensors[i];
        m->n_params += t->n_elements;
        m->n_bytes += t->n_bytes;
        m->bytes_by_type[t->type] += t->n_bytes;
    }
}

static hydra_status open_checked(hydra_model *m, const hydra_model_params *p)
{
    hydra_status st = load_image(m, p);
    if (st != HYDRA_OK)
        return st;
    if (!report(p, 0.9f))
        return hydra_fail(HYDRA_ERR_CANCELLED, "%s: loading cancelled by the progress callback", p->path);
    if ((st = gguf_parse(&m->gguf, m->image, m->size)) != HYDRA_OK)
        return st;
    m->parsed = true;
    const gguf_kv *arch = gguf_find_kv(&m->gguf, "general.architecture");
    if (arch != NULL && arch->value.type == HYDRA_VALUE_STRING)
        m->arch = arch->value.str.ptr;
    if ((st = check_key_types(&m->gguf, m->arch)) != HYDRA_OK)
        return st;
    if (p->use_mlock) {
        if (mlock(m->image, (size_t)m->size) != 0)
            return hydra_fail(HYDRA_ERR_IO, "%s: mlock of %" PRIu64 " bytes failed: %s (raise RLIMIT_MEMLOCK, "
                              "ulimit -l)", p->path, m->size, strerror(errno));
        m->locked = true;
    }
    sum_totals(m);
    if (!report(p, 1.0f))
        return hydra_fail(HYDRA_ERR_CANCELLED, "%s: loading cancelled by the progress callback", p->path);
    return HYDRA_OK;
}

HYDRA_API hydra_model_params hydra_model_default_params(void)
{
    return (hydra_model_params){.use_mmap = true};
}

HYDRA_API hydra_status hydra_model_open(hydra_model **out, const hydra_model_params *params)
{
    if (out == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_model_open: out is NULL");
    *out = NULL;
    if (params == NULL || params->path == NULL)
        return hydra_fail(HYDRA_ERR_INVALID_ARG, "hydra_model_open: no path given");
    hydra_model *m = calloc(1, sizeof *m);
    if (m == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "hydra_model_open: out of memory");
    m->arch = "";
    hydra_status st = open_checked(m, params);
    if (st != HYDRA_OK) {
        hydra_model_close(m);
        return st;
    }
    *out = m;
    return HYDRA_OK;
}

HYDRA_API void hydra_model_close(hydra_model *m)
{
    if (m == NULL)
        return;
    tokenizer_free(m->tokenizer);
    if (m->parsed)
        gguf_free(&m->gguf);
    release_image(m);
    free(m);
}

/* ----------------------------------------------------------- accessors */

HYDRA_API const char *hydra_model_arch(const hydra_model *m)
{
    return m->arch;
}

HYDRA_API uint32_t hydra_model_gguf_version(const hydra_model *m)
{
    return m->gguf.version;
}

HYDRA_API size_t hydra_model_tensor_count(const hydra_model *m)
{
    return (size_t)m->gguf.n_tensors;
}

static void fill_tensor_info(const hydra_model *m, const gguf_tensor *t, hydra_tensor_info *out)
{
    *out = (hydra_tensor_info){
        .name = t->name,
        .type = t->type,
        .type_name = quant_traits_of(t->type)->name,
        .n_dims = t->n_dims,
        .n_elements = t->n_elements,
        .n_bytes = t->n_bytes,
        .file_offset = m->gguf.data_offset + t->offset,
        .data = m->image + m->gguf.data_offset + t->offset,
    };
    memcpy(out->ne, t->ne, sizeof out->ne);
}

HYDRA_API hydra_status hydra_model_tensor_at(const hydra_model *m, size_t i, hydra_tensor_info *out)
{
    if (i >= m->gguf.n_tensors)
        return hydra_fail(HYDRA_ERR_RANGE, "tensor index %zu: the model has %" PRIu64 " tensors", i,
                          m->gguf.n_tensors);
    fill_tensor_info(m, &m->gguf.tensors[i], out);
    return HYDRA_OK;
}

HYDRA_API hydra_status hydra_model_tensor_find(const hydra_model *m, const char *name, hydra_tensor_info *out)
{
    const gguf_tensor *t = name != NULL ? gguf_find_tensor(&m->gguf, name) : NULL;
    if (t == NULL)
        return hydra_fail(HYDRA_ERR_NOT_FOUND, "tensor '%s' is not in the model", name != NULL ? name : "(null)");
    fill_tensor_info(m, t, out);
    return HYDRA_OK;
}

HYDRA_API uint64_t hydra_model_n_params(const hydra_model *m)
{
    return m->n_params;
}

HYDRA_API uint64_t hydra_model_n_bytes(const hydra_model *m)
{
    return m->n_bytes;
}

HYDRA_API uint64_t hydra_model_file_size(const hydra_model *m)
{
    return m->size;
}

HYDRA_API uint64_t hydra_model_bytes_of_type(const hydra_model *m, uint32_t type)
{
    return type < QT_COUNT ? m->bytes_by_type[type] : 0;
}

HYDRA_API const char *hydra_type_name(uint32_t type)
{
    const quant_traits *q = quant_traits_of(type);
    return q != NULL ? q->name : NULL;
}

HYDRA_API uint32_t hydra_type_count(void)
{
    return QT_COUNT;
}
