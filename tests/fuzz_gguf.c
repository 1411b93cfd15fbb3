/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader (`make fuzz`; how to run
 * it and the figures of the last long run: docs/FUZZING.md).
 *
 * Each input is read twice:
 *   1. by gguf_parse on the fuzzer's own buffer, so ASan sees any read past
 *      its end byte for byte;
 *   2. as a file through the public API: written to a memfd and opened as
 *      /proc/self/fd/N with hydra_model_open, mapped and read; every key is
 *      then read with every typed getter and every tensor's first and last
 *      data byte is touched.
 * Besides crashes, the target aborts on broken promises: a failure without
 * a message, a tensor whose data lies outside the input, a file the API
 * opens although gguf_parse refuses it.
 */
#include "gguf.h"
#include "hydra.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void require(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_gguf: broken promise: %s (last error: \"%s\")\n", what, hydra_last_error());
        abort();
    }
}

static volatile uint8_t sink;

/* ------------------------------------------------------------ gguf_parse */

static void walk_parsed(const gguf_file *f, size_t size)
{
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kvs[i];
        if (strlen(kv->key) == kv->key_len)
            require(gguf_find_kv(f, kv->key) == kv, "every key is found by its name");
        const gguf_value *v = &kv->value;
        if (v->type == HYDRA_VALUE_ARRAY && v->arr.items == NULL)
            for (uint64_t k = 0; k < v->arr.n; k++)
                sink ^= (uint8_t)gguf_array_elem(v, k).u;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (strlen(t->name) == t->name_len)
            require(gguf_find_tensor(f, t->name) == t, "every tensor is found by its name");
        require(f->data_offset <= size && t->offset <= size - f->data_offset &&
                    t->n_bytes <= size - f->data_offset - t->offset,
                "tensor data inside the input");
        sink ^= f->image[f->data_offset + t->offset] ^ f->image[f->data_offset + t->offset + t->n_bytes - 1];
    }
}

/* ------------------------------------------------------------ public API */

static void walk_key(const hydra_model *m, const char *key)
{
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    const char *s;
    size_t len, n;
    hydra_value_type elem;
    hydra_model_get_u64(m, key, &u);
    hydra_model_get_i64(m, key, &i);
    hydra_model_get_f64(m, key, &f);
    hydra_model_get_bool(m, key, &b);
    if (hydra_model_get_str(m, key, &s, &len) == HYDRA_OK)
        sink ^= (uint8_t)s[len];
    if (hydra_model_get_arr(m, key, &elem, &n) != HYDRA_OK)
        return;
    for (size_t k = 0; k <= n; k++) { /* one past the end: must be a range error */
        hydra_status st = hydra_model_get_arr_str(m, key, k, &s, &len);
        if (st == HYDRA_OK)
            sink ^= (uint8_t)s[len];
        require(k < n || st == HYDRA_ERR_RANGE, "index n of an array is out of range");
        hydra_model_get_arr_i64(m, key, k, &i);
        hydra_model_get_arr_f64(m, key, k, &f);
    }
}

static void walk_model(const hydra_model *m, size_t size)
{
    for (size_t i = 0; i < hydra_model_meta_count(m); i++) {
        const char *key;
        hydra_value_type type;
        require(hydra_model_meta_at(m, i, &key, &type) == HYDRA_OK, "meta_at of every index below the count");
        walk_key(m, key);
    }
    for (size_t i = 0; i < hydra_model_tensor_count(m); i++) {
        hydra_tensor_info t, found;
        require(hydra_model_tensor_at(m, i, &t) == HYDRA_OK, "tensor_at of every index below the count");
        require(t.n_bytes > 0 && t.file_offset <= size && t.n_bytes <= size - t.file_offset,
                "tensor data inside the file");
        sink ^= ((const uint8_t *)t.data)[0] ^ ((const uint8_t *)t.data)[t.n_bytes - 1];
        if (hydra_model_tensor_find(m, t.name, &found) == HYDRA_OK)
            sink ^= ((const uint8_t *)found.data)[0];
    }
    sink ^= (uint8_t)(hydra_model_n_params(m) ^ hydra_model_n_bytes(m) ^ hydra_model_file_size(m));
}

static int input_fd = -1;

/* The input as a file: one memfd, rewritten for each input. */
static const char *input_as_file(const uint8_t *data, size_t size)
{
    static char path[64];
    if (input_fd < 0) {
        input_fd = memfd_create("fuzz-gguf", MFD_CLOEXEC);
        require(input_fd >= 0, "memfd_create");
        snprintf(path, sizeof path, "/proc/self/fd/%d", input_fd);
    }
    require(ftruncate(input_fd, 0) == 0, "ftruncate of the memfd");
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(input_fd, data + done, size - done, (off_t)done);
        require(n > 0, "write to the memfd");
        done += (size_t)n;
    }
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_file f;
    hydra_status parsed = gguf_parse(&f, data, size);
    if (parsed == HYDRA_OK) {
        walk_parsed(&f, size);
        gguf_free(&f);
    } else {
        require(hydra_last_error()[0] != '\0', "a refusal leaves a message");
    }
    const char *path = input_as_file(data, size);
    for (int use_mmap = 1; use_mmap >= 0; use_mmap--) {
        hydra_model_params p = hydra_model_default_params();
        p.path = path;
        p.use_mmap = use_mmap;
        hydra_model *m = NULL;
        hydra_status st = hydra_model_open(&m, &p);
        if (st == HYDRA_OK) {
            require(parsed == HYDRA_OK || size == 0, "the API opens only what gguf_parse accepts");
            walk_model(m, size);
            hydra_model_close(m);
        } else {
            require(m == NULL && hydra_last_error()[0] != '\0', "a failed open leaves no model and a message");
        }
    }
    return 0;
}
