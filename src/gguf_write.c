/*
 * gguf_write.c — streaming GGUF v3 writer (see gguf_write.h).
 */
#include "gguf_write.h"

#include "error.h"
#include "gguf.h"
#include "quant.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bytebuf {
    uint8_t *p;
    size_t len, cap;
} bytebuf;

typedef struct wtensor {
    uint64_t n_bytes;
} wtensor;

struct gguf_writer {
    FILE *fp;
    char *path;
    bytebuf kv;        /* encoded metadata entries */
    bytebuf infos;     /* encoded tensor infos */
    uint64_t n_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t data_size; /* running end of the data section while declaring */
    bool started;      /* header written */
    size_t cur;        /* tensor being written */
    uint64_t cur_done; /* its bytes written so far */
    hydra_status error; /* first failure: later calls return it */
};

enum { ALIGNMENT = GGUF_DEFAULT_ALIGNMENT };

static hydra_status buf_put(gguf_writer *w, bytebuf *b, const void *p, size_t n)
{
    if (w->error != HYDRA_OK)
        return w->error;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (q == NULL)
            return w->error = hydra_fail(HYDRA_ERR_NOMEM, "gguf writer: out of memory");
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return HYDRA_OK;
}

static hydra_status put_u32(gguf_writer *w, bytebuf *b, uint32_t v) { return buf_put(w, b, &v, 4); }
static hydra_status put_u64(gguf_writer *w, bytebuf *b, uint64_t v) { return buf_put(w, b, &v, 8); }

static hydra_status put_str(gguf_writer *w, bytebuf *b, const char *s)
{
    size_t n = strlen(s);
    put_u64(w, b, n);
    return buf_put(w, b, s, n);
}

hydra_status gguf_writer_open(gguf_writer **out, const char *path)
{
    *out = NULL;
    gguf_writer *w = calloc(1, sizeof *w);
    if (w == NULL)
        return hydra_fail(HYDRA_ERR_NOMEM, "gguf writer: out of memory");
    w->path = strdup(path);
    w->fp = fopen(path, "wb");
    if (w->path == NULL || w->fp == NULL) {
        hydra_status st = hydra_fail(HYDRA_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        if (w->fp)
            fclose(w->fp);
        free(w->path);
        free(w);
        return st;
    }
    *out = w;
    return HYDRA_OK;
}

/* Key and type of a new entry; the caller appends the value. */
static hydra_status begin_kv(gguf_writer *w, const char *key, uint32_t type)
{
    if (w->started)
        return w->error = hydra_fail(HYDRA_ERR_INVALID_ARG, "gguf writer: metadata '%s' after data", key);
    w->n_kv++;
    put_str(w, &w->kv, key);
    return put_u32(w, &w->kv, type);
}

static hydra_status add_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v, size_t n)
{
    begin_kv(w, key, type);
    return buf_put(w, &w->kv, v, n);
}

hydra_status gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v) { return add_scalar(w, key, HYDRA_VALUE_U32, &v, 4); }
hydra_status gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v) { return add_scalar(w, key, HYDRA_VALUE_I32, &v, 4); }
hydra_status gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v) { return add_scalar(w, key, HYDRA_VALUE_U64, &v, 8); }
hydra_status gguf_writer_add_f32(gguf_writer *w, const char *key, float v) { return add_scalar(w, key, HYDRA_VALUE_F32, &v, 4); }

hydra_status gguf_writer_add_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v;
    return add_scalar(w, key, HYDRA_VALUE_BOOL, &b, 1);
}

hydra_status gguf_writer_add_str(gguf_writer *w, const char *key, const char *v)
{
    begin_kv(w, key, HYDRA_VALUE_STRING);
    return put_str(w, &w->kv, v);
}

static hydra_status begin_array(gguf_writer *w, const char *key, uint32_t elem_type, size_t n)
{
    begin_kv(w, key, HYDRA_VALUE_ARRAY);
    put_u32(w, &w->kv, elem_type);
    return put_u64(w, &w->kv, n);
}

hydra_status gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *v, size_t n)
{
    begin_array(w, key, HYDRA_VALUE_STRING, n);
    for (size_t i = 0; i < n; i++)
        put_str(w, &w->kv, v[i]);
    return w->error;
}

hydra_status gguf_writer_add_arr_f32(gguf_writer *w, const char *key, const float *v, size_t n)
{
    begin_array(w, key, HYDRA_VALUE_F32, n);
    return buf_put(w, &w->kv, v, n * sizeof *v);
}

hydra_status gguf_writer_add_arr_i32(gguf_writer *w, const char *key, const int32_t *v, size_t n)
{
    begin_array(w, key, HYDRA_VALUE_I32, n);
    return buf_put(w, &w->kv, v, n * sizeof *v);
}

static uint64_t pad_to_alignment(uint64_t n)
{
    return (n + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
}

hydra_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const uint64_t *ne)
{
    if (w->error != HYDRA_OK)
        return w->error;
    uint64_t n = 1, bytes;
    for (uint32_t d = 0; d < n_dims; d++)
        n *= ne[d];
    uint64_t rows = ne[0] ? n / ne[0] : 0;
    if (w->started || n_dims == 0 || n_dims > GGUF_MAX_DIMS || !quant_row_bytes(type, ne[0], &bytes))
        return w->error = hydra_fail(HYDRA_ERR_INVALID_ARG, "gguf writer: cannot declare tensor '%s' (type %" PRIu32
                                     ", row %" PRIu64 ")", name, type, ne[0]);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        wtensor *t = realloc(w->tensors, cap * sizeof *t);
        if (t == NULL)
            return w->error = hydra_fail(HYDRA_ERR_NOMEM, "gguf writer: out of memory");
        w->tensors = t;
        w->cap_tensors = cap;
    }
    w->tensors[w->n_tensors++] = (wtensor){rows * bytes};
    put_str(w, &w->infos, name);
    put_u32(w, &w->infos, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        put_u64(w, &w->infos, ne[d]);
    put_u32(w, &w->infos, type);
    put_u64(w, &w->infos, w->data_size);
    w->data_size = pad_to_alignment(w->data_size + rows * bytes);
    return w->error;
}

static hydra_status put_file(gguf_writer *w, const void *p, size_t n)
{
    if (w->error == HYDRA_OK && n > 0 && fwrite(p, 1, n, w->fp) != n)
        w->error = hydra_fail(HYDRA_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return w->error;
}

static hydra_status put_padding(gguf_writer *w, uint64_t written)
{
    static const uint8_t zeros[ALIGNMENT];
    return put_file(w, zeros, (size_t)(pad_to_alignment(written) - written));
}

static hydra_status write_header(gguf_writer *w)
{
    uint32_t version = 3;
    uint64_t counts[2] = {w->n_tensors, w->n_kv};
    put_file(w, "GGUF", 4);
    put_file(w, &version, 4);
    put_file(w, counts, sizeof counts);
    put_file(w, w->kv.p, w->kv.len);
    put_file(w, w->infos.p, w->infos.len);
    w->started = true;
    return put_padding(w, 24 + w->kv.len + w->infos.len);
}

hydra_status gguf_writer_write(gguf_writer *w, const void *data, size_t n)
{
    if (!w->started)
        write_header(w);
    const uint8_t *p = data;
    while (n > 0 && w->error == HYDRA_OK) {
        if (w->cur >= w->n_tensors)
            return w->error = hydra_fail(HYDRA_ERR_INVALID_ARG, "gguf writer: more data than declared tensors");
        uint64_t room = w->tensors[w->cur].n_bytes - w->cur_done;
        size_t take = n < room ? n : (size_t)room;
        put_file(w, p, take);
        p += take;
        n -= take;
        w->cur_done += take;
        if (w->cur_done == w->tensors[w->cur].n_bytes) {
            put_padding(w, w->cur_done);
            w->cur++;
            w->cur_done = 0;
        }
    }
    return w->error;
}

static void free_writer(gguf_writer *w)
{
    free(w->kv.p);
    free(w->infos.p);
    free(w->tensors);
    free(w->path);
    free(w);
}

hydra_status gguf_writer_close(gguf_writer *w)
{
    if (w == NULL)
        return HYDRA_OK;
    if (!w->started)
        write_header(w);
    if (w->error == HYDRA_OK && w->cur != w->n_tensors)
        w->error = hydra_fail(HYDRA_ERR_INVALID_ARG, "gguf writer: %s: %zu of %zu tensors written", w->path, w->cur,
                              w->n_tensors);
    if (fclose(w->fp) != 0 && w->error == HYDRA_OK)
        w->error = hydra_fail(HYDRA_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    hydra_status st = w->error;
    if (st != HYDRA_OK)
        remove(w->path);
    free_writer(w);
    return st;
}

void gguf_writer_abort(gguf_writer *w)
{
    if (w == NULL)
        return;
    fclose(w->fp);
    remove(w->path);
    free_writer(w);
}

hydra_status gguf_writer_finish(gguf_writer *w, hydra_status st)
{
    if (st == HYDRA_OK)
        return gguf_writer_close(w);
    gguf_writer_abort(w);
    return st;
}
